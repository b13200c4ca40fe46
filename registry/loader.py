"""Reading and validating a registry file (YAML), once, with every error located.

Reading and parsing are :mod:`registry.files` (a regular file of bounded size;
ruamel.yaml's libyaml parser, YAML 1.2: ``NO`` and ``off`` stay strings, so country
codes and screen names survive; duplicate keys are an error; every mapping key and
list item knows its line; nesting, values and integer digits are bounded).
Validation is hand-written rather than a JSON Schema because most rules are
semantic (a watch value must be a tracked value, categories are only appended,
epsilon must give a usable hash range) and each message must name the metric,
the field and the line, like Prometheus' ``promtool check config``.

Layout (docs/registry.md is the full reference)::

    metrics:
      - name: flight_dest
        description: Destination airport of a departing flight
        owner: flights-team@example.com
        categories: [ABQ, ACK, ...]          # or  integers: 2^64  or  strings: true
        epsilon: 2                            # privacy keys may also sit in each version
        versions:
          - version: 1
          - version: 2
            epsilon: 1
            add_categories: [XYZ]
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from pathlib import Path

from cms_core.errors import InvalidParameterError
from cms_core.params import MAX_HASH_RANGE, MECHANISM_CHOICES, OCMSParams, check_epsilon, compare_mechanisms
from cms_core.version import release_tuple

from .errors import FileRefusedError, Problem, RegistryFileError, RegistryValidationError
from .files import MAX_INTEGER_DIGITS, YamlMap, YamlSeq, compose, read_regular_file
from .model import MetricSpec, MetricVersion, Registry, TrackedSpec
from .values_file import MAX_VALUES, MAX_WHOLE_DICTIONARY, ValuesFileError, read_raw_values

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
DOMAIN_KEYS = ("categories", "integers", "strings")
METRIC_KEYS = ("name", "description", "owner", "unit", *DOMAIN_KEYS, "tracked", "bucket", "retention", "rollup",
               "watch", "top_k", "min_reports", "min_client_version", "versions", "discovery", *PRIVACY_KEYS)
VERSION_KEYS = ("version", *PRIVACY_KEYS, "add_categories", "retired", "note")
ROLLUP_KEYS = ("bucket", "retention")
TOP_KEYS = ("metrics",)

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_DURATION = re.compile(r"(?:(\d+)([smhdw]))+")
_DURATION_PART = re.compile(r"(\d+)([smhdw])")


def load_registry(path: str | os.PathLike) -> Registry:
    """Read, parse and validate a registry file; raises a RegistryError naming every mistake."""
    shown = os.fspath(path)
    try:
        data = read_regular_file(path, MAX_REGISTRY_BYTES)
    except FileRefusedError as exc:
        raise RegistryFileError(Problem(shown, None, f"cannot read the registry: it {exc} (a registry is a regular "
                                                     f"file of at most {MAX_REGISTRY_BYTES:,} bytes)")) from None
    except OSError as exc:
        raise RegistryFileError(Problem(shown, None, f"cannot read the registry: {exc.strerror or exc}")) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise RegistryFileError(Problem(shown, line, f"cannot read the registry: not UTF-8 text ({exc.reason} at "
                                                     f"byte {exc.start:,})")) from None
    return parse_registry(text, shown, base_dir=Path(path).resolve().parent)


def parse_registry(text: str, path: str = "<registry>", base_dir: str | os.PathLike | None = None) -> Registry:
    """Validate registry text; ``base_dir`` resolves relative tracked files (default: the working directory)."""
    document = compose(text, path)
    return _Loader(path, Path(base_dir) if base_dir is not None else Path.cwd()).load(document)


# --------------------------------------------------------------------------- helpers
def _key_line(mapping, key) -> int | None:
    try:
        return mapping.key_lines[key]
    except (AttributeError, KeyError, TypeError):
        return _node_line(mapping)


def _item_line(sequence, index: int) -> int | None:
    try:
        return sequence.item_lines[index]
    except (AttributeError, IndexError, TypeError):
        return _node_line(sequence)


def _node_line(node) -> int | None:
    return getattr(node, "line", None)


def _show(value) -> str:
    """A value as the user wrote it, for messages (YAML-ish, short)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = repr(str(value))
    elif isinstance(value, float):
        text = repr(float(value))
    elif isinstance(value, int):
        text = str(int(value))
    elif isinstance(value, dict):
        text = "a mapping"
    elif isinstance(value, list):
        text = "a list"
    elif value is None:
        text = "nothing (null)"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_duration(value) -> int | None:
    """Seconds from an integer or a Prometheus-style duration ("90s", "15m", "1h30m", "7d"); None if invalid."""
    if _is_int(value):
        return int(value)
    if isinstance(value, str) and len(value) <= MAX_INTEGER_DIGITS and _DURATION.fullmatch(value.strip()):
        return sum(int(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(value.strip()))
    return None


def parse_domain_size(value) -> int | None:
    """An integer, digits with '_' separators, or a power written ``2^64``; None if invalid."""
    if _is_int(value):
        return int(value)
    if isinstance(value, str) and len(value) <= MAX_INTEGER_DIGITS:  # far above 2^64's 20 digits; int() is bounded
        text = value.strip().replace("_", "")
        if text.isascii() and text.isdigit():
            return int(text)
        base, sep, exponent = text.partition("^")
        if sep and base.isascii() and base.isdigit() and exponent.isascii() and exponent.isdigit():
            base, exponent = int(base), int(exponent)
            if base.bit_length() * exponent <= 4 * MAX_INTEGER_DIGITS:  # 9^9999 would be 9,542 digits
                return base**exponent
    return None


def raw_field(source: str) -> str:
    """The field a tracked value came from: inline list or file."""
    return "tracked" if source == "list" else "tracked.file"


class _Field:
    """A value with where it was written (so an error found later still names the line)."""

    __slots__ = ("value", "line", "present", "version")

    def __init__(self, value, line, present=True, version=None):
        # version: the version number when the value was written in that version's mapping
        self.value, self.line, self.present, self.version = value, line, present, version


class _Loader:
    def __init__(self, path: str, base_dir: Path):
        self.path = path
        self.base_dir = base_dir
        self.problems: list[Problem] = []  # the first MAX_PROBLEMS distinct ones
        self.problem_count = 0  # distinct problems found, shown or not
        self.seen_problems: set[Problem] = set()
        self.metrics_with_problems: set = set()
        self.tracked_sources: dict[str, tuple | None] = {}  # metric -> parsed 'tracked' (None: reported)
        self.missing_tracked: dict[str, list] = {}  # metric -> tracked names not in its newest version
        self.mechanism_notes: dict[tuple, str] = {}  # (metric, version) -> what mechanism auto's pick costs
        self.tracked_specs: dict[str, tuple] = {}  # metric -> (names object, spec): versions with the same names share it
        self.category_index: dict[str, dict] = {}  # metric -> name -> id (ids never change: names are appended)
        self.versioned_names = 0  # category names held by every version's own list (shared lists count once)

    # -------------------------------------------------------------- reporting
    def problem(self, line, message, metric=None, field=None, version=None) -> None:
        problem = Problem(self.path, line, message, metric, field, version)
        if problem in self.seen_problems:
            return  # a metric-level default shared by several versions is reported once, not once per version
        self.problem_count += 1
        self.metrics_with_problems.add(metric)
        if len(self.problems) < MAX_PROBLEMS:
            self.seen_problems.add(problem)
            self.problems.append(problem)

    def shown_problems(self) -> list[Problem]:
        hidden = self.problem_count - len(self.problems)
        if hidden <= 0:
            return self.problems
        return self.problems + [Problem(self.path, None, f"... and {hidden:,} more problems (the first "
                                                          f"{len(self.problems):,} are shown)")]

    def unknown_keys(self, mapping, allowed, metric=None, version=None, prefix="", extensions=False) -> None:
        for key in mapping:
            if extensions and isinstance(key, str) and key.startswith("x-"):
                continue  # a place for YAML anchors shared by metrics, as docker-compose's x- keys
            if key not in allowed:
                # A hint while problems are still listed (difflib per key is slow for a file of 10^6 keys).
                hint = difflib.get_close_matches(str(key)[:100], allowed, n=1) if len(self.problems) < MAX_PROBLEMS else ()
                suffix = f" (did you mean {hint[0]!r}?)" if hint else f"; expected one of: {', '.join(allowed)}"
                self.problem(_key_line(mapping, key), f"unknown key{suffix}", metric, prefix + str(key), version)

    # ----------------------------------------------------------------- top
    def load(self, document) -> Registry:
        if document is None:
            raise RegistryValidationError(Problem(self.path, 1, "the file is empty; expected a top-level 'metrics:' list"))
        if not isinstance(document, YamlMap):
            raise RegistryValidationError(Problem(self.path, _node_line(document) or 1,
                                                  "expected a mapping with a top-level 'metrics:' list"))
        self.unknown_keys(document, TOP_KEYS, extensions=True)
        if "metrics" not in document:
            self.problem(1, "missing the top-level 'metrics:' list", field="metrics")
            raise RegistryValidationError(self.shown_problems())
        entries = document["metrics"]
        line = _key_line(document, "metrics")
        if not isinstance(entries, YamlSeq) or not entries:
            self.problem(line, f"must be a non-empty list of metrics, got {_show(entries)}", field="metrics")
            raise RegistryValidationError(self.shown_problems())
        if len(entries) > MAX_METRICS:
            self.problem(line, f"{len(entries):,} metrics; at most {MAX_METRICS:,}", field="metrics")
            raise RegistryValidationError(self.shown_problems())
        metrics: list[MetricSpec] = []
        seen: dict[str, int] = {}
        for index, entry in enumerate(entries):
            spec = self.metric(entries, index, entry, seen)
            if spec is not None:
                metrics.append(spec)
        if self.problems:
            raise RegistryValidationError(self.shown_problems())
        return Registry(self.path, tuple(metrics))

    # -------------------------------------------------------------- metric
    def metric(self, entries, index, entry, seen) -> MetricSpec | None:
        line = _item_line(entries, index)
        if not isinstance(entry, YamlMap):
            self.problem(line, f"metric #{index + 1}: expected a mapping with a 'name', got {_show(entry)}", field="metrics")
            return None
        before = self.problem_count
        name = self.metric_name(entry, line, seen)
        label = name if name is not None else f"#{index + 1}"
        self.unknown_keys(entry, METRIC_KEYS, label)
        description = self.text(entry, "description", label, required=True)
        owner = self.text(entry, "owner", label, required=True, limit=MAX_NAME_LENGTH * 2)
        unit = self.text(entry, "unit", label, required=False, limit=MAX_NAME_LENGTH)
        domain = self.domain(entry, label, line)
        versions_raw = self.version_entries(entry, label, line)
        if domain is None or versions_raw is None:
            return None
        kind, base_names, size = domain
        from .discovery import parse_discovery_block  # issue 15: optional 'discovery:' block

        discoverable = parse_discovery_block(self, entry, kind, size, label, _key_line, _show)
        if discoverable is False:
            return None
        # Categories of each version: the metric's list plus every add_categories up to that version.
        names_by_version = self.category_versions(kind, base_names, versions_raw, label)
        exposure = self.exposure(entry, label)
        tracked_raw = _Field(entry.get("tracked"), _key_line(entry, "tracked"), "tracked" in entry)
        versions: list[MetricVersion] = []
        for (vnum, vmap, vline), names in zip(versions_raw, names_by_version):
            d = len(names) if kind == "categories" else size
            tracked = self.tracked(tracked_raw, kind, names, d, label, vnum)
            if tracked is None:
                continue
            params = self.params(entry, vmap, kind, d, tracked, label, vnum, vline)
            if params is None or exposure is None:
                continue
            from . import longitudinal  # issue 38: 'lifetime_epsilon' makes the version longitudinal

            memoized = longitudinal.parse(self, entry, vmap, params, label, vnum, vline, discoverable)
            if memoized is False:
                continue
            retired = self.flag(vmap, "retired", label, vnum) if vmap is not None else False
            note = self.text(vmap, "note", label, required=False, version=vnum) if vmap is not None else None
            if discoverable is not None:
                try:
                    from cms_core.discovery import level_params

                    level_params(label, vnum, params.epsilon, discoverable)
                except InvalidParameterError as exc:
                    self.problem(_key_line(entry, "discovery"), f"no level parameters at this epsilon: {exc}",
                                 label, "discovery", vnum)
                    continue
            versions.append(MetricVersion(
                metric=label, version=vnum, params=params, domain=kind,
                value_names=tuple(names) if kind == "categories" else None, tracked=tracked,
                watch=(), retired=bool(retired), note=note, line=vline, discovery=discoverable,
                mechanism_note=self.mechanism_notes.get((label, vnum)), longitudinal=memoized, **exposure))
        if self.problem_count > before or exposure is None or name is None:
            return None  # a bad name was reported; the rest of the metric was still checked under "#N"
        versions = self.apply_watch(entry, versions, label)
        if versions is None:
            return None
        return MetricSpec(name=name, description=description, owner=owner, unit=unit, domain=kind,
                          versions=tuple(versions), line=line)

    def metric_name(self, entry, line, seen) -> str | None:
        if "name" not in entry:
            self.problem(line, "missing; every metric needs a Prometheus-safe name", field="name")
            return None
        value, line = entry["name"], _key_line(entry, "name")
        if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value) or len(value) > MAX_NAME_LENGTH:
            self.problem(line, f"must match [a-zA-Z_][a-zA-Z0-9_]* (at most {MAX_NAME_LENGTH} characters, "
                               f"a Prometheus label-safe name), got {_show(value)}", field="name")
            return None
        if value.startswith("__"):
            self.problem(line, f"names starting with '__' are reserved by Prometheus, got {_show(value)}", field="name")
            return None
        if value in seen:
            self.problem(line, f"duplicate metric name (first defined at line {seen[value]})", value, "name")
            return None
        seen[value] = line
        return value

    def text(self, mapping, key, metric, required, limit=MAX_TEXT_LENGTH, version=None) -> str | None:
        if key not in mapping:
            if required:
                self.problem(_node_line(mapping), "missing; a non-empty string is required", metric, key, version)
            return None
        value = mapping[key]
        if not isinstance(value, str) or not value.strip():
            self.problem(_key_line(mapping, key), f"must be a non-empty string, got {_show(value)}", metric, key, version)
            return None
        if len(value) > limit:
            self.problem(_key_line(mapping, key), f"must be at most {limit} characters, got {len(value)}", metric, key, version)
            return None
        return str(value).strip()

    def flag(self, mapping, key, metric, version=None) -> bool | None:
        if key not in mapping:
            return False
        value = mapping[key]
        if not isinstance(value, bool):
            self.problem(_key_line(mapping, key), f"must be true or false, got {_show(value)}", metric, key, version)
            return None
        return value

    # -------------------------------------------------------------- domain
    def domain(self, entry, metric, line):
        given = [k for k in DOMAIN_KEYS if k in entry]
        if not given:
            self.problem(line, "missing a value domain: give one of 'categories' (a list of names), "
                               "'integers' (the dictionary size) or 'strings: true'", metric, "categories")
            return None
        if len(given) > 1:
            self.problem(_key_line(entry, given[1]), f"a metric has one value domain; it already has {given[0]!r}",
                         metric, given[1])
            return None
        kind = given[0]
        value, vline = entry[kind], _key_line(entry, kind)
        if kind == "categories":
            names = self.names(entry, "categories", metric, None, set())
            if names is None:
                return None
            if len(names) < 2:
                self.problem(vline, f"needs at least 2 categories (one category always has frequency 1), "
                                    f"got {len(names)}", metric, kind)
                return None
            return kind, names, None
        if kind == "integers":
            size = parse_domain_size(value)
            if size is None:
                self.problem(vline, f"must be the dictionary size d (an integer such as 1000 or 2^64), got {_show(value)}",
                             metric, kind)
                return None
            if not 2 <= size <= MAX_INTEGER_DOMAIN:
                self.problem(vline, f"must be in [2, 2^64], got {size}", metric, kind)
                return None
            return kind, None, size
        if value is not True:
            self.problem(vline, f"must be true (an open domain of strings; tracked values go under 'tracked'), "
                                f"got {_show(value)}", metric, kind)
            return None
        return kind, None, None

    def names(self, mapping, key, metric, version, known: set, limit=MAX_CATEGORIES) -> list[str] | None:
        """A list of category names: strings, printable, unique (also against ``known``)."""
        value, line = mapping[key], _key_line(mapping, key)
        if not isinstance(value, YamlSeq):
            self.problem(line, f"must be a list of names, got {_show(value)}", metric, key, version)
            return None
        if len(value) > limit:
            self.problem(line, f"{len(value):,} names; at most {limit:,}", metric, key, version)
            return None
        out: list[str] = []
        seen: set = set()
        ok = True
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.problem(_item_line(value, i), f"each name must be a string (quote numbers, e.g. '14' or '1.10'), "
                             f"got {_show(item)}", metric, key, version)
                ok = False
            elif not item or len(item) > MAX_VALUE_LENGTH or not item.isprintable():
                self.problem(_item_line(value, i), f"a name must be 1 to {MAX_VALUE_LENGTH} printable characters, "
                             f"got {_show(item)}", metric, key, version)
                ok = False
            elif item in seen or item in known:
                self.problem(_item_line(value, i), f"{_show(item)} is listed twice", metric, key, version)
                ok = False
            else:
                seen.add(item)
                out.append(str(item))
        return out if ok else None

    # ------------------------------------------------------------- versions
    def version_entries(self, entry, metric, line):
        """[(number, mapping or None, line)], validated for numbering and keys."""
        if "versions" not in entry:
            return [(1, None, line)]
        value, vline = entry["versions"], _key_line(entry, "versions")
        if not isinstance(value, YamlSeq) or not value:
            self.problem(vline, f"must be a non-empty list of versions, got {_show(value)}", metric, "versions")
            return None
        if len(value) > MAX_VERSIONS:
            self.problem(vline, f"{len(value):,} versions; at most {MAX_VERSIONS:,}", metric, "versions")
            return None
        out = []
        previous = 0
        ok = True
        for i, item in enumerate(value):
            iline = _item_line(value, i)
            if not isinstance(item, YamlMap):
                self.problem(iline, f"each version must be a mapping with a 'version' number, got {_show(item)}",
                             metric, "versions")
                ok = False
                continue
            number = item.get("version")
            if "version" not in item:
                self.problem(iline, "missing; each version needs its number (1, 2, ...)", metric, "version")
                ok = False
                continue
            if not _is_int(number) or not 1 <= number <= MAX_VERSION_NUMBER:
                self.problem(_key_line(item, "version"), f"must be an integer in [1, {MAX_VERSION_NUMBER:,}], "
                             f"got {_show(number)}", metric, "version")
                ok = False
                continue
            if number <= previous:
                self.problem(_key_line(item, "version"), f"versions must be listed in increasing order without repeats; "
                                                         f"{number} follows {previous}", metric, "version")
                ok = False
                continue
            previous = int(number)
            self.unknown_keys(item, VERSION_KEYS, metric, int(number))
            out.append((int(number), item, iline))
        return out if ok else None

    def category_versions(self, kind, base_names, versions_raw, metric) -> list[tuple]:
        """Each version's category names: one tuple, shared by the versions that add none."""
        names = tuple(base_names or ())
        known = set(names) if any(vmap is not None and "add_categories" in vmap for _, vmap, _ in versions_raw) else ()
        self.versioned_names += len(names)
        out = []
        for number, vmap, _ in versions_raw:
            if vmap is not None and "add_categories" in vmap:
                if kind != "categories":
                    self.problem(_key_line(vmap, "add_categories"), f"only a 'categories' metric can add categories; "
                                 f"this one has {kind!r}", metric, "add_categories", number)
                else:
                    added = self.names(vmap, "add_categories", metric, number, known,
                                       limit=MAX_CATEGORIES - len(names))
                    if added is not None:
                        if not added:
                            self.problem(_key_line(vmap, "add_categories"), "is empty; omit it or list new names",
                                         metric, "add_categories", number)
                        elif self.versioned_names + len(names) + len(added) > MAX_VERSIONED_NAMES:
                            # Every version that adds names keeps a list of its own (workers, describe, lock digests).
                            self.problem(_key_line(vmap, "add_categories"), f"the category lists of the versions that "
                                         f"add categories would hold more than {MAX_VERSIONED_NAMES:,} names in all; "
                                         "add more names per version, or define a new metric", metric,
                                         "add_categories", number)
                        else:
                            names = names + tuple(added)
                            known.update(added)
                            self.versioned_names += len(names)
            out.append(names)
        return out

    # -------------------------------------------------------------- exposure
    def exposure(self, entry, metric) -> dict | None:
        before = self.problem_count
        bucket = self.duration(entry, "bucket", metric, DEFAULT_BUCKET_SECONDS, 1, MAX_BUCKET_SECONDS)
        retention = self.duration(entry, "retention", metric, DEFAULT_RETENTION_SECONDS, 1, None)
        if bucket is not None and retention is not None and retention < bucket:
            self.problem(_key_line(entry, "retention"), f"must be >= the bucket width {bucket} s, got {retention} s",
                         metric, "retention")
        rollup_seconds = rollup_retention = None
        if "rollup" in entry:
            rollup = entry["rollup"]
            rline = _key_line(entry, "rollup")
            if not isinstance(rollup, YamlMap):
                self.problem(rline, f"must be a mapping with 'bucket' (and optional 'retention'), got {_show(rollup)}",
                             metric, "rollup")
            else:
                self.unknown_keys(rollup, ROLLUP_KEYS, metric, prefix="rollup.")
                if "bucket" not in rollup:
                    self.problem(rline, "missing; the rollup's bucket width, e.g. 1h", metric, "rollup.bucket")
                else:
                    rollup_seconds = self.duration(rollup, "bucket", metric, None, 1, MAX_ROLLUP_SECONDS, "rollup.bucket")
                rollup_retention = self.duration(rollup, "retention", metric, DEFAULT_ROLLUP_RETENTION_SECONDS, 1, None,
                                                 "rollup.retention")
                if rollup_seconds is not None and bucket is not None and (
                        rollup_seconds <= bucket or rollup_seconds % bucket):
                    self.problem(_key_line(rollup, "bucket"), f"must be a multiple of the bucket width {bucket} s and "
                                 f"larger, got {rollup_seconds} s", metric, "rollup.bucket")
                if rollup_seconds is not None and rollup_retention is not None and rollup_retention < rollup_seconds:
                    self.problem(_key_line(rollup, "retention"), f"must be >= the rollup width {rollup_seconds} s, "
                                 f"got {rollup_retention} s", metric, "rollup.retention")
        top_k = self.integer(entry, "top_k", metric, DEFAULT_TOP_K, 0, MAX_TOP_K)
        min_reports = self.integer(entry, "min_reports", metric, DEFAULT_MIN_REPORTS, 0, MAX_MIN_REPORTS)
        min_client = self.release(entry, "min_client_version", metric)
        if self.problem_count > before:
            return None
        return {"bucket_seconds": bucket, "retention_seconds": retention, "rollup_seconds": rollup_seconds,
                "rollup_retention_seconds": rollup_retention if rollup_seconds is not None else None,
                "top_k": top_k, "min_reports": min_reports, "min_client_version": min_client}

    def release(self, mapping, key, metric) -> str | None:
        """A release ``X.Y.Z`` (the oldest device client release that may report the metric), or None."""
        if key not in mapping:
            return None
        value = mapping[key]
        try:
            release_tuple(value if isinstance(value, str) else "")
        except ValueError:
            self.problem(_key_line(mapping, key), f"must be a release X.Y.Z in quotes (e.g. \"0.3.0\"), got "
                         f"{_show(value)}", metric, key)
            return None
        return value.strip()

    def duration(self, mapping, key, metric, default, minimum, maximum, field=None) -> int | None:
        field = field or key
        if key not in mapping:
            return default
        value, line = mapping[key], _key_line(mapping, key)
        seconds = parse_duration(value)
        if seconds is None:
            self.problem(line, f"must be a duration such as 60, 90s, 15m, 1h or 7d, got {_show(value)}", metric, field)
            return None
        if seconds < minimum or (maximum is not None and seconds > maximum):
            bound = f"in [{minimum}, {maximum}] seconds" if maximum is not None else f">= {minimum} s"
            self.problem(line, f"must be {bound}, got {seconds} s", metric, field)
            return None
        return seconds

    def integer(self, mapping, key, metric, default, minimum, maximum, version=None) -> int | None:
        if key not in mapping:
            return default
        value, line = mapping[key], _key_line(mapping, key)
        if not _is_int(value):
            self.problem(line, f"must be an integer, got {_show(value)}", metric, key, version)
            return None
        if not minimum <= value <= maximum:
            self.problem(line, f"must be in [{minimum}, {maximum}], got {value}", metric, key, version)
            return None
        return int(value)

    # --------------------------------------------------------------- tracked
    def tracked(self, raw: _Field, kind, names, d, metric, version) -> TrackedSpec | None:
        """The version's tracked set. The setting is parsed once per metric; a problem is reported once."""
        if metric not in self.tracked_sources:
            self.tracked_sources[metric] = self.tracked_source(raw, kind, metric)
        source = self.tracked_sources[metric]
        if source is None:
            return None
        form, data = source
        spec = None
        if form == "all":
            if kind == "strings":
                self.problem(raw.line, "a 'strings' metric needs its tracked values: a list, or {file: PATH} "
                             "(JSON lines, one JSON string per line)", metric, "tracked")
            elif d > MAX_WHOLE_DICTIONARY:
                self.problem(raw.line, f"the dictionary has {d:,} values, more than {MAX_WHOLE_DICTIONARY:,} to track "
                             "whole: give a range {range: [START, STOP]}, a list, or {file: PATH}", metric, "tracked")
            else:
                spec = TrackedSpec("all")
        elif form == "range":
            start, stop, line = data
            if stop > d:
                self.problem(line, f"range [{start}, {stop}) must lie inside the dictionary [0, {d})", metric,
                             "tracked.range")
            else:
                spec = TrackedSpec("range", start=start, stop=stop)
        else:
            items, where = data
            shared = self.tracked_specs.get(metric)
            if shared is not None and shared[0] is names:
                return shared[1]  # the same names (or none) as the previous version: the same tracked set
            if kind == "categories":
                # Each version tracks the listed names it has; a name of no version is reported by apply_watch.
                index = self.category_index.setdefault(metric, {})
                for i in range(len(index), len(names)):  # names are only appended: ids never change
                    index[names[i]] = i
                count, values, missing = len(names), [], []
                for name, name_line in items:
                    position = index.get(name, count)
                    if position < count:
                        values.append(position)
                    else:
                        missing.append((name, name_line))
                self.missing_tracked[metric] = missing
                if values:
                    spec = TrackedSpec("list", values=tuple(values), source=where)
                else:
                    self.problem(raw.line, "none of the tracked names is a category of this version", metric,
                                 "tracked", version)
                    return None
            elif kind == "integers" and any(v >= d for v, _ in items):
                for value, line in items:
                    if value >= d:
                        self.problem(line, f"{value} is outside the dictionary [0, {d})", metric, raw_field(where))
            else:
                spec = TrackedSpec("list", values=tuple(v for v, _ in items), source=where)
            if spec is not None:
                self.tracked_specs[metric] = (names, spec)
        if spec is None:
            self.tracked_sources[metric] = None  # reported; later versions stay quiet
        return spec

    def tracked_source(self, raw: _Field, kind, metric):
        """("all", None) | ("range", (start, stop, line)) | ("list", ([(value, line)], source))."""
        if not raw.present or raw.value == "all":
            return ("all", None)
        value, line = raw.value, raw.line
        if isinstance(value, YamlSeq):
            return self.tracked_items([(v, _item_line(value, i)) for i, v in enumerate(value)], kind, metric,
                                      "tracked", "list")
        if isinstance(value, YamlMap) and len(value) == 1 and ("range" in value or "file" in value):
            if "range" in value:
                rng, rline = value["range"], _key_line(value, "range")
                if kind != "integers":
                    self.problem(rline, f"a range tracks integers; this metric has {kind!r} (list the values instead)",
                                 metric, "tracked.range")
                    return None
                if (not isinstance(rng, YamlSeq) or len(rng) != 2
                        or any(parse_domain_size(b) is None for b in rng)):
                    self.problem(rline, f"must be [START, STOP] (integers, STOP excluded), got {_show(rng)}",
                                 metric, "tracked.range")
                    return None
                start, stop = (parse_domain_size(b) for b in rng)
                if not 0 <= start < stop:
                    self.problem(rline, f"must satisfy 0 <= START < STOP, got [{start}, {stop}]", metric, "tracked.range")
                    return None
                if stop - start > MAX_TRACKED:
                    self.problem(rline, f"tracks {stop - start:,} values; at most {MAX_TRACKED:,}", metric, "tracked.range")
                    return None
                return ("range", (start, stop, rline))
            return self.tracked_file(value["file"], _key_line(value, "file"), kind, metric)
        self.problem(line, "must be 'all', a list of values, {range: [START, STOP]} or {file: PATH}, "
                           f"got {_show(value)}", metric, "tracked")
        return None

    def tracked_file(self, name, line, kind, metric):
        """The values of a tracked file (registry.values_file: the one format), each bad line a problem."""
        if not isinstance(name, str) or not name.strip():
            self.problem(line, f"must be a file path (a values file: docs/tracked-values.md), got {_show(name)}",
                         metric, "tracked.file")
            return None
        path = Path(name) if os.path.isabs(name) else self.base_dir / name
        try:
            raw = read_raw_values(path, max_values=MAX_TRACKED)
        except ValuesFileError as exc:
            for where, reason in exc.problems:
                self.problem(line, f"{name}{' ' + where if where else ''}: {reason}", metric, "tracked.file")
            if exc.more:
                self.problem(line, f"{name}: {exc.more} more bad lines", metric, "tracked.file")
            if exc.good:  # the other lines' values: their mistakes are named in the same run
                self.tracked_items(self.file_items(exc.good), kind, metric, "tracked.file", name, line, name)
            return None
        return self.tracked_items(self.file_items(raw), kind, metric, "tracked.file", name, line, name)

    @staticmethod
    def file_items(raw) -> list[tuple]:
        return [(item, raw.where(i)) for i, item in enumerate(raw.items)]

    def tracked_items(self, items, kind, metric, field, source, file_line=None, file_name=None):
        """Validate tracked values (duplicates, types); lines are YAML lines, or lines of ``file_name``."""
        if not items:
            self.problem(file_line, "holds no values", metric, field)
            return None
        if len(items) > MAX_TRACKED:
            self.problem(file_line or items[0][1], f"{len(items):,} tracked values; at most {MAX_TRACKED:,}", metric, field)
            return None

        def prefix(loc) -> str:
            # YAML items report their own line; file items report the 'file:' key's line plus "FILE line N".
            return f"{file_name} {loc}: " if file_name is not None else ""

        out, seen, ok = [], set(), True
        for value, loc in items:
            line = file_line if file_name is not None else loc
            if kind == "integers":
                number = parse_domain_size(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
                if number is None or (isinstance(value, str) and not value.strip().isdigit()):
                    self.problem(line, f"{prefix(loc)}an integer value (decimal digits) expected, got {_show(value)}",
                                 metric, field)
                    ok = False
                    continue
                value = number
            elif not isinstance(value, str) or not value:
                self.problem(line, f"{prefix(loc)}a non-empty string expected (quote numbers), got {_show(value)}",
                             metric, field)
                ok = False
                continue
            else:
                value = str(value)
                if len(value) > 4096:
                    self.problem(line, f"{prefix(loc)}a tracked string is at most 4096 characters, got {len(value)}",
                                 metric, field)
                    ok = False
                    continue
            if value in seen:
                self.problem(line, f"{prefix(loc)}{_show(value)} is listed twice", metric, field)
                ok = False
                continue
            seen.add(value)
            out.append((value, line))
        return ("list", (out, source)) if ok else None

    # --------------------------------------------------------------- params
    def privacy(self, entry, vmap, key, version):
        """A privacy key from the version, else the metric (its default), with its line."""
        if vmap is not None and key in vmap:
            return _Field(vmap[key], _key_line(vmap, key), True, version)
        if key in entry:
            return _Field(entry[key], _key_line(entry, key))
        return _Field(None, None, False)

    def params(self, entry, vmap, kind, d, tracked: TrackedSpec, metric, version, vline) -> OCMSParams | None:
        before = self.problem_count
        f = {k: self.privacy(entry, vmap, k, version) for k in PRIVACY_KEYS}
        eps = f["epsilon"]
        epsilon = None
        if not eps.present:
            self.problem(vline, "missing; the privacy budget of one report (e.g. epsilon: 2), on the metric "
                                "or on each version", metric, "epsilon", f["epsilon"].version)
        elif not _is_number(eps.value):
            self.problem(eps.line, f"must be a number, got {_show(eps.value)}", metric, "epsilon", f["epsilon"].version)
        else:
            try:
                epsilon = check_epsilon(eps.value)
            except InvalidParameterError as exc:
                self.problem(eps.line, f"{exc.reason}, got {_show(eps.value)}", metric, "epsilon", f["epsilon"].version)
        mode = "mse"
        if f["mode"].present:
            mode = f["mode"].value
            if mode not in ("mse", "l2"):
                self.problem(f["mode"].line, f"must be 'mse' or 'l2', got {_show(mode)}", metric, "mode", f["mode"].version)
        f_star = 1.0
        if f["f_star"].present:
            value = f["f_star"].value
            if not _is_number(value) or math.isnan(value) or not 0 < value <= 1:
                self.problem(f["f_star"].line, f"must be a number in (0, 1], got {_show(value)}", metric, "f_star", f["f_star"].version)
            elif mode == "l2" and not f["hash_range"].present:
                self.problem(f["f_star"].line, "applies to mode 'mse' only (mode 'l2' uses the tracked count)",
                             metric, "f_star", f["f_star"].version)
            else:
                f_star = float(value)
        tracked_count = tracked.stop - tracked.start if tracked.kind == "range" else (
            d if tracked.kind == "all" else len(tracked.values))
        if f["tracked_count"].present:
            value = f["tracked_count"].value
            if not _is_int(value) or value < 1:
                self.problem(f["tracked_count"].line, f"must be an integer >= 1, got {_show(value)}", metric,
                             "tracked_count", f["tracked_count"].version)
            else:
                tracked_count = int(value)
        hash_range = None
        if f["hash_range"].present:
            value = f["hash_range"].value
            if not _is_int(value) or not 2 <= value <= MAX_HASH_RANGE:
                self.problem(f["hash_range"].line, f"must be an integer in [2, {MAX_HASH_RANGE}], got {_show(value)}",
                             metric, "hash_range", f["hash_range"].version)
            else:
                hash_range = int(value)
        # Unless a metric pins one, the mechanism with the lower exact objective is used (issue 14); an
        # explicit m only exists for OCMS+RR.
        mechanism = "auto" if hash_range is None else "ocms"
        if f["mechanism"].present:
            value = f["mechanism"].value
            if value not in MECHANISM_CHOICES:
                self.problem(f["mechanism"].line, f"must be one of {', '.join(MECHANISM_CHOICES)}, got {_show(value)}",
                             metric, "mechanism", f["mechanism"].version)
            elif value == "auto" and hash_range is not None:
                self.problem(f["hash_range"].line, "fixes OCMS+RR's m; give 'mechanism: ocms' (or drop hash_range)",
                             metric, "hash_range", f["hash_range"].version)
            else:
                mechanism = value
        if self.problem_count > before:
            return None
        try:
            if mechanism == "auto":  # no hash_range here (checked above)
                # The comparison auto picks with also says when the pick is much more exposed to poisoning.
                comparison = compare_mechanisms(
                    epsilon, None if kind == "strings" else d, mode=mode, f_star=f_star, tracked_count=tracked_count,
                    value_domain="string" if kind == "strings" else "integer", binding=f"{metric}@{version}")
                if comparison.poisoning_note is not None:
                    self.mechanism_notes[(metric, version)] = comparison.poisoning_note
                return comparison.chosen
            return OCMSParams.build(
                epsilon, None if kind == "strings" else d, mode=mode, f_star=f_star, tracked_count=tracked_count,
                hash_range=hash_range, value_domain="string" if kind == "strings" else "integer",
                binding=f"{metric}@{version}", mechanism=mechanism)
        except InvalidParameterError as exc:
            field = {"dictionary_size": kind, "value_domain": kind}.get(exc.name, exc.name)
            if mechanism == "direct" and exc.name in ("dictionary_size", "value_domain"):
                field = "mechanism"  # the dictionary is fine; direct RR cannot carry it
            source = f.get(field)
            line = source.line if source is not None and source.present else vline
            self.problem(line, f"{exc.reason}, got {_show(exc.value)}", metric, field,
                         source.version if source is not None and source.present else version)
            return None

    # ----------------------------------------------------------------- watch
    def apply_watch(self, entry, versions: list[MetricVersion], metric) -> list[MetricVersion] | None:
        """Check tracked names unknown to every version and the watch list; set each version's watch."""
        # Categories are only appended, so a name missing from the newest version is in no version.
        for name, line in self.missing_tracked.get(metric, []):
            self.problem(line, f"{_show(name)} is not a category of any version", metric, "tracked")
        sets: dict[tuple[int, int], set] = {}  # versions sharing their tracked spec and names share one set
        tracked_by_version = {}
        for v in versions:
            key = (id(v.tracked), id(v.value_names))
            if key not in sets:
                sets[key] = set(v.tracked_names())
            tracked_by_version[v.version] = sets[key]
        watch: list[tuple[str, int]] = []
        if "watch" in entry:
            value, line = entry["watch"], _key_line(entry, "watch")
            if not isinstance(value, YamlSeq):
                self.problem(line, f"must be a list of value names, got {_show(value)}", metric, "watch")
            elif len(value) > MAX_WATCH:
                self.problem(line, f"{len(value):,} values; at most {MAX_WATCH:,}", metric, "watch")
            else:
                seen = set()
                every = set().union(*sets.values())
                for i, item in enumerate(value):
                    iline = _item_line(value, i)
                    name = str(item) if _is_int(item) and versions[0].domain == "integers" else item
                    if not isinstance(name, str):
                        self.problem(iline, f"a value name (string) expected, got {_show(item)}", metric, "watch")
                    elif name in seen:
                        self.problem(iline, f"{_show(name)} is listed twice", metric, "watch")
                    elif name not in every:
                        self.problem(iline, f"{_show(name)} is not a tracked value of any version", metric, "watch")
                    else:
                        seen.add(name)
                        watch.append((name, iline))
        if metric in self.metrics_with_problems:
            return None
        out = []
        shared: dict[int, dict] = {}
        for v in versions:
            version = dataclasses.replace(v, watch=tuple(n for n, _ in watch if n in tracked_by_version[v.version]))
            if version.value_names is not None:  # digests and name indexes computed once per names list
                version._cache["names_cache"] = shared.setdefault(id(version.value_names), {})
            out.append(version)
        return out
