"""The registry file's keys, its limits and its defaults (docs/registry.md), shared by the loader's parts."""

from __future__ import annotations

import re

from . import numeric
from .values_file import MAX_VALUES

#: A registry is configuration, not data: refuse anything absurdly large before parsing it.
MAX_REGISTRY_BYTES = 16 * 2**20
MAX_METRICS = 10_000
MAX_VERSIONS = 1_000
#: Problems listed in one error (a hostile file can hold millions); the rest are counted.
MAX_PROBLEMS = 200
MAX_VERSION_NUMBER = 1_000_000
#: Categories and tracked values are held in every worker's view; keep them bounded.
MAX_CATEGORIES = 1_000_000
MAX_TRACKED = MAX_VALUES
#: Category names summed over the lists of a registry's versions: a version that adds categories has
#: its own list (a version adding none shares its predecessor's), held by every worker.
MAX_VERSIONED_NAMES = 4_000_000
MAX_INTEGER_DOMAIN = 2**64
MAX_NAME_LENGTH = 100
MAX_VALUE_LENGTH = 200
MAX_TEXT_LENGTH = 2_000
MAX_WATCH = 1_000
MAX_TOP_K = 10_000
MAX_MIN_REPORTS = 10**12
MAX_BUCKET_SECONDS = 86_400
MAX_ROLLUP_SECONDS = 366 * 86_400

DEFAULT_BUCKET_SECONDS = 60
DEFAULT_RETENTION_SECONDS = 86_400
DEFAULT_ROLLUP_RETENTION_SECONDS = 30 * 86_400
DEFAULT_TOP_K = 20
DEFAULT_MIN_REPORTS = 0

#: Prometheus metric/label name syntax without ':' (reserved for recording rules); '__' is reserved.
NAME_PATTERN = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

PRIVACY_KEYS = ("epsilon", "mode", "f_star", "tracked_count", "hash_range", "mechanism", "lifetime_epsilon")
DOMAIN_KEYS = ("categories", "integers", "strings", numeric.KEY)
METRIC_KEYS = ("name", "description", "owner", "unit", *DOMAIN_KEYS, "tracked", "bucket", "retention", "rollup",
               "watch", "top_k", "min_reports", "min_client_version", "versions", "discovery", *PRIVACY_KEYS)
VERSION_KEYS = ("version", *PRIVACY_KEYS, "add_categories", "retired", "note")
ROLLUP_KEYS = ("bucket", "retention")
TOP_KEYS = ("metrics",)
