"""The metric registry: named metrics, their value names and parameter versions.

One declarative YAML file (``deploy/registry.yaml``; format in docs/registry.md)
that devices, gateways, workers, the CLI and dashboards all read::

    from registry import load_registry
    reg = load_registry("deploy/registry.yaml")      # validated once; errors name metric, field, line
    version = reg.metric("flight_dest").latest
    version.params, version.fingerprint, version.value_from_name("ATL")
    reg.by_fingerprint(report_fingerprint)           # -> MetricVersion | None

Published versions are pinned by a lock file of fingerprints (``ocms registry lock``);
``ocms registry check`` refuses a version edited in place.
"""

from .errors import (
    LockFileError,
    Problem,
    PublishedVersionChangedError,
    RegistryError,
    RegistryFileError,
    RegistryValidationError,
    UnknownMetricError,
)
from .loader import load_registry, parse_registry
from .model import MetricSpec, MetricVersion, Registry, TrackedSpec, single_metric_registry

__all__ = [
    "LockFileError",
    "MetricSpec",
    "MetricVersion",
    "Problem",
    "PublishedVersionChangedError",
    "Registry",
    "RegistryError",
    "RegistryFileError",
    "RegistryValidationError",
    "TrackedSpec",
    "UnknownMetricError",
    "load_registry",
    "parse_registry",
    "single_metric_registry",
]
