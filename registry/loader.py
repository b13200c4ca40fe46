"""Reading and validating a registry file (YAML), once, with every error located.

Reading and parsing are :mod:`registry.files` (a regular file of bounded size;
ruamel.yaml's libyaml parser, YAML 1.2: ``NO`` and ``off`` stay strings, so country
codes and screen names survive; duplicate keys are an error; every mapping key and
list item knows its line; nesting, values and integer digits are bounded).
Validation is hand-written rather than a JSON Schema because most rules are
semantic (a watch value must be a tracked value, categories are only appended,
epsilon must give a usable hash range) and each message must name the metric,
the field and the line, like Prometheus' ``promtool check config``.

This module reads the file and each metric entry; the parts of an entry have readers of their own, all
reporting to one :class:`~registry.load_checks.Checker` (located problems, plain value checks):
:mod:`registry.load_versions` (the value domain, the versions, their category names),
:mod:`registry.load_tracked` (tracked values and the watch list), :mod:`registry.load_params` (the privacy
keys -> OCMSParams), :mod:`registry.load_exposure` (buckets, retention, rollup, top_k, min_reports);
:mod:`registry.load_schema` holds the keys, limits and defaults.

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

import os
from pathlib import Path

from cms_core.errors import InvalidParameterError

from . import numeric
from .errors import FileRefusedError, Problem, RegistryFileError, RegistryValidationError
from .files import YamlMap, YamlSeq, compose, read_regular_file
from .load_checks import Checker, Field, item_line, key_line, node_line, parse_domain_size, parse_duration, show
from .load_exposure import read_exposure
from .load_params import ParamsReader
from .load_schema import (MAX_METRICS, MAX_NAME_LENGTH, MAX_PROBLEMS, MAX_REGISTRY_BYTES, MAX_VALUE_LENGTH,
                          METRIC_KEYS, NAME_PATTERN, ROLLUP_KEYS, TOP_KEYS, VERSION_KEYS)
from .load_tracked import TrackedReader
from .load_versions import VersionsReader
from .model import MetricSpec, MetricVersion, Registry

#: What callers import from here (the limits, keys and parsers live in the load_* modules beside it).
__all__ = ["load_registry", "parse_registry", "parse_domain_size", "parse_duration", "MAX_PROBLEMS", "MAX_VALUE_LENGTH",
           "METRIC_KEYS", "ROLLUP_KEYS", "VERSION_KEYS"]

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


class _Loader:
    """One registry file's metrics: each part of an entry is read by its own reader (load_versions, load_tracked,
    load_params, load_exposure), all reporting to one :class:`~registry.load_checks.Checker`."""

    def __init__(self, path: str, base_dir: Path):
        self.check = Checker(path)
        self.versions = VersionsReader(self.check)
        self.tracked = TrackedReader(self.check, base_dir)
        self.params = ParamsReader(self.check)

    # ----------------------------------------------------------------- top
    def load(self, document) -> Registry:
        if document is None:
            raise RegistryValidationError(Problem(self.check.path, 1, "the file is empty; expected a top-level 'metrics:' list"))
        if not isinstance(document, YamlMap):
            raise RegistryValidationError(Problem(self.check.path, node_line(document) or 1,
                                                  "expected a mapping with a top-level 'metrics:' list"))
        self.check.unknown_keys(document, TOP_KEYS, extensions=True)
        if "metrics" not in document:
            self.check.problem(1, "missing the top-level 'metrics:' list", field="metrics")
            raise RegistryValidationError(self.check.shown_problems())
        entries = document["metrics"]
        line = key_line(document, "metrics")
        if not isinstance(entries, YamlSeq) or not entries:
            self.check.problem(line, f"must be a non-empty list of metrics, got {show(entries)}", field="metrics")
            raise RegistryValidationError(self.check.shown_problems())
        if len(entries) > MAX_METRICS:
            self.check.problem(line, f"{len(entries):,} metrics; at most {MAX_METRICS:,}", field="metrics")
            raise RegistryValidationError(self.check.shown_problems())
        metrics: list[MetricSpec] = []
        seen: dict[str, int] = {}
        for index, entry in enumerate(entries):
            spec = self.metric(entries, index, entry, seen)
            if spec is not None:
                metrics.append(spec)
        if self.check.problems:
            raise RegistryValidationError(self.check.shown_problems())
        return Registry(self.check.path, tuple(metrics))

    # -------------------------------------------------------------- metric
    def metric(self, entries, index, entry, seen) -> MetricSpec | None:
        line = item_line(entries, index)
        if not isinstance(entry, YamlMap):
            self.check.problem(line, f"metric #{index + 1}: expected a mapping with a 'name', got {show(entry)}", field="metrics")
            return None
        before = self.check.problem_count
        name = self.metric_name(entry, line, seen)
        label = name if name is not None else f"#{index + 1}"
        self.check.unknown_keys(entry, METRIC_KEYS, label)
        description = self.check.text(entry, "description", label, required=True)
        owner = self.check.text(entry, "owner", label, required=True, limit=MAX_NAME_LENGTH * 2)
        unit = self.check.text(entry, "unit", label, required=False, limit=MAX_NAME_LENGTH)
        domain = self.versions.domain(entry, label, line)
        versions_raw = self.versions.version_entries(entry, label, line)
        if domain is None or versions_raw is None:
            return None
        kind, base_names, size = domain
        from .discovery import parse_discovery_block  # issue 15: optional 'discovery:' block

        discoverable = parse_discovery_block(self.check, entry, kind, size, label, key_line, show)
        if discoverable is False:
            return None
        # Categories of each version: the metric's list plus every add_categories up to that version.
        names_by_version = self.versions.category_versions(kind, base_names, versions_raw, label)
        exposure = read_exposure(self.check, entry, label)
        tracked_raw = Field(entry.get("tracked"), key_line(entry, "tracked"), "tracked" in entry)
        versions: list[MetricVersion] = []
        for (vnum, vmap, vline), names in zip(versions_raw, names_by_version):
            version = self.version(entry, vnum, vmap, vline, kind, names, size, tracked_raw, exposure, discoverable,
                                   label)
            if version is not None:
                versions.append(version)
        if self.check.problem_count > before or exposure is None or name is None:
            return None  # a bad name was reported; the rest of the metric was still checked under "#N"
        versions = self.tracked.apply_watch(entry, versions, label)
        if versions is None:
            return None
        return MetricSpec(name=name, description=description, owner=owner, unit=unit, domain=kind,
                          versions=tuple(versions), line=line)

    def version(self, entry, vnum, vmap, vline, kind, names, size, tracked_raw: Field, exposure, discoverable,
                label) -> MetricVersion | None:
        """One version of a metric, or None after reporting its problems."""
        d = len(names) if kind == "categories" else size
        tracked = self.tracked.spec(tracked_raw, kind, names, d, label, vnum)
        if tracked is None:
            return None
        params = self.params.build(entry, vmap, kind, d, tracked, label, vnum, vline)
        if params is None or exposure is None:
            return None
        from . import longitudinal  # issue 38: 'lifetime_epsilon' makes the version longitudinal

        memoized = longitudinal.parse(self.check, entry, vmap, params, label, vnum, vline, discoverable)
        if memoized is False:
            return None
        retired = self.check.flag(vmap, "retired", label, vnum) if vmap is not None else False
        note = self.check.text(vmap, "note", label, required=False, version=vnum) if vmap is not None else None
        if discoverable is not None:
            try:
                from cms_core.discovery import level_params

                level_params(label, vnum, params.epsilon, discoverable)
            except InvalidParameterError as exc:
                self.check.problem(key_line(entry, "discovery"), f"no level parameters at this epsilon: {exc}",
                                   label, "discovery", vnum)
                return None
        return MetricVersion(
            metric=label, version=vnum, params=params, domain=kind,
            value_names=tuple(names) if kind == "categories" else None, tracked=tracked,
            watch=(), retired=bool(retired), note=note, line=vline, discovery=discoverable,
            mechanism_note=self.params.mechanism_notes.get((label, vnum)), longitudinal=memoized,
            numeric=numeric.spec_for(self.check, label), hierarchy=self.params.hierarchies.get((label, vnum)),
            mean=self.params.means.get((label, vnum)),
            **exposure)

    def metric_name(self, entry, line, seen) -> str | None:
        if "name" not in entry:
            self.check.problem(line, "missing; every metric needs a Prometheus-safe name", field="name")
            return None
        value, line = entry["name"], key_line(entry, "name")
        if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value) or len(value) > MAX_NAME_LENGTH:
            self.check.problem(line, f"must match [a-zA-Z_][a-zA-Z0-9_]* (at most {MAX_NAME_LENGTH} characters, "
                                     f"a Prometheus label-safe name), got {show(value)}", field="name")
            return None
        if value.startswith("__"):
            self.check.problem(line, f"names starting with '__' are reserved by Prometheus, got {show(value)}", field="name")
            return None
        if value in seen:
            self.check.problem(line, f"duplicate metric name (first defined at line {seen[value]})", value, "name")
            return None
        seen[value] = line
        return value

