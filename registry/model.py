"""The loaded, validated registry: metrics, their parameter versions and value names.

Everything here is frozen and already validated by :mod:`registry.loader`; the
only work left is lazy (building a string metric's tracked set hashes every
tracked string once, on first use).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field as dataclass_field
from typing import Iterator

from cms_core.errors import InvalidParameterError, InvalidValueError
from cms_core.params import OCMSParams
from cms_core.values import TrackedValues, value_from_json, value_to_json

from .errors import Problem, UnknownMetricError

#: The three kinds of value domain a metric can declare.
DOMAINS = ("categories", "integers", "strings")


@dataclass(frozen=True, eq=False)
class TrackedSpec:
    """Which values of one version keep match counts: the whole dictionary, a range, or a list.

    ``values`` holds dictionary values (category ids, integers or strings) for a list. "none": the
    single-metric flags of a command that counts nothing (``ocms plan``, ``ocms simulate``) named no
    tracked values; such a metric is planned and simulated, never counted.
    """

    kind: str  # "all" | "range" | "list" | "none"
    start: int | None = None
    stop: int | None = None
    values: tuple = ()
    source: str | None = None  # "list" or the tracked file's path, for messages and describe


@dataclass(frozen=True, eq=False)
class MetricVersion:
    """One parameter version of a metric: its own OCMSParams and fingerprint.

    ``params`` is built with ``binding=f"{metric}@{version}"``, so two metrics (or
    two versions) with identical numbers never share a fingerprint and their
    reports never mix.
    """

    metric: str
    version: int
    params: OCMSParams
    domain: str
    value_names: tuple[str, ...] | None
    tracked: TrackedSpec
    bucket_seconds: int
    retention_seconds: int
    rollup_seconds: int | None
    rollup_retention_seconds: int | None
    min_reports: int
    watch: tuple[str, ...]
    top_k: int
    retired: bool = False
    note: str | None = None
    line: int | None = None
    discovery: object = None  # cms_core.discovery.DiscoveryDomain when declared (issue 15, registry/discovery.py)
    #: Set when mechanism "auto" picked a mechanism more than twice as exposed to poisoning as the other
    #: (cms_core.params.MechanismComparison.poisoning_note); `ocms registry check` and `ocms plan` print it.
    mechanism_note: str | None = None
    #: cms_core.longitudinal.LongitudinalParams when the version declares lifetime_epsilon (issue 38), else None.
    longitudinal: object = None
    #: registry.numeric.NumericSpec of a numeric metric (issue 40): its values are the bucket indices.
    numeric: object = None
    #: The oldest device client release that may report it (registry key ``min_client_version``), or None: any.
    min_client_version: str | None = None
    #: cms_core.hierarchy.HierarchyParams of a numeric version reported as a hierarchical histogram (issue 40):
    #: ``params`` are then its finest level's (the buckets), and :meth:`tree_levels` every level's.
    hierarchy: object = None
    #: Set on a level of a tree version (:meth:`tree_levels`): its level, 1 (coarsest) .. h (the buckets).
    tree_level: int | None = None
    #: registry.numeric.MeanSplit of a numeric version whose mean is the Hybrid mechanism's (issue 40), else None.
    mean: object = None
    #: Set on the Hybrid mean's part of a numeric version (:meth:`mean_parts`): ``"mean"``.
    report_part: str | None = None
    _cache: dict = dataclass_field(default_factory=dict, init=False, repr=False)

    # ------------------------------------------------------------ identity
    @property
    def fingerprint(self) -> bytes:
        return self.params.fingerprint

    @property
    def binding(self) -> str:
        """``name@version``; a tree version's level: ``name@version/level<l>`` (its parameters' binding)."""
        level = "" if self.tree_level is None else f"/level{self.tree_level}"
        part = "" if self.report_part is None else f"/{self.report_part}"
        return f"{self.metric}@{self.version}{level}{part}"

    @property
    def live(self) -> bool:
        """Live versions are counted; a retired one is kept for its history and its lock entry."""
        return not self.retired

    @property
    def levels(self) -> tuple[tuple[int, int], ...]:
        """(bucket width, retention) per time level, finest first: the buckets, then the rollup if any."""
        out = [(self.bucket_seconds, self.retention_seconds)]
        if self.rollup_seconds:
            out.append((self.rollup_seconds, self.rollup_retention_seconds))
        return tuple(out)

    @property
    def mechanism(self) -> str:
        """The report mechanism: "ocms" (OCMS+RR), "direct" (randomized response over the d values) or
        "hierarchy" (a hierarchical histogram, each level's report through its own oracle: :meth:`tree_levels`)."""
        return "hierarchy" if self.hierarchy is not None else self.params.mechanism

    def tree_levels(self) -> tuple["MetricVersion", ...]:
        """A tree version's levels as parameter versions of the metric, level 1 first and the buckets last: each its
        own parameters (binding ``name@version/level<l>``), fingerprint and every node tracked; counted and framed
        like any version's reports, answered together (the version's histogram). Empty for any other version."""
        if self.hierarchy is None:
            return ()
        levels = self._cache.get("tree_levels")
        if levels is None:
            levels = tuple(dataclasses.replace(
                self, params=params, hierarchy=None, tree_level=level, numeric=None, tracked=TrackedSpec("all"),
                watch=(), value_names=None, domain="integers", mechanism_note=None, mean=None)
                for level, params in enumerate(self.hierarchy.levels, start=1))
            levels = self._cache.setdefault("tree_levels", levels)
        return levels

    def mean_parts(self) -> tuple["MetricVersion", ...]:
        """A version with a Hybrid mean (issue 40): its mean's part as a parameter version of the metric (binding
        ``name@version/mean``, the carrier's parameters and fingerprint, every report value tracked), counted and
        framed like a tree's level and answered through the version's histogram. Empty for any other version."""
        if self.mean is None:
            return ()
        parts = self._cache.get("mean_parts")
        if parts is None:
            parts = (dataclasses.replace(
                self, params=self.mean.carrier, hierarchy=None, tree_level=None, numeric=None, mean=None,
                report_part="mean", tracked=TrackedSpec("all"), watch=(), value_names=None, domain="integers",
                mechanism_note=None),)
            parts = self._cache.setdefault("mean_parts", parts)
        return parts

    @property
    def definition_digest(self) -> str:
        """SHA-256 of what a report's meaning depends on beyond the fingerprint: the category names (a numeric
        metric: its bucket bounds).

        The fingerprint covers the dictionary size but not the names of the ids; renaming or
        reordering categories in place would silently relabel published counts, so the lock
        records this digest too.
        """
        cache = self._names_cache()
        digest = cache.get("definition_digest")
        if digest is None:
            names = list(self.value_names) if self.value_names is not None else None
            definition = {"domain": self.domain, "categories": names}
            if self.numeric is not None:  # issue 40: the bounds give the bucket indices their meaning
                definition["numeric"] = self.numeric.layout.to_config()
            if self.hierarchy is not None:  # a tree's shape and every level (the fingerprint is its finest level's;
                # two branchings can give levels of equal sizes, so equal fingerprints, grouping buckets differently)
                definition["hierarchy"] = {"branching": self.hierarchy.branching,
                                           "levels": [p.fingerprint.hex() for p in self.hierarchy.levels]}
            if self.mean is not None:  # a Hybrid mean: its reports' parameters and the devices' split
                definition["mean"] = {"fingerprint": self.mean.fingerprint.hex(), "parts": self.mean.parts,
                                      "hybrid": self.mean.hybrid.fingerprint.hex()}
            text = json.dumps(definition, separators=(",", ":"), ensure_ascii=False)
            digest = cache.setdefault("definition_digest", hashlib.sha256(text.encode("utf-8")).hexdigest())
        return digest

    def describe_tree(self) -> dict:
        """A tree version's shape and levels (binding, fingerprint, nodes, oracle), JSON-ready."""
        doc = self.hierarchy.describe()
        for row, level in zip(doc["levels"], self.tree_levels()):
            row.update(level=level.tree_level, binding=level.params.binding, fingerprint=level.fingerprint.hex())
        return doc

    def _names_cache(self) -> dict:
        """Where results that depend only on ``value_names`` (and the domain) are kept: a dict the loader
        shares between versions with the same names (10^6 names, hundreds of versions), else this version's."""
        return self._cache.get("names_cache", self._cache)

    # -------------------------------------------------------------- values
    def value_from_name(self, name) -> int | str:
        """The dictionary value (what ``privatize`` takes) for a user-facing name.

        Categories: the name's id; integers: decimal digits (or an int); strings: the string.
        Raises InvalidValueError naming the metric when the name is not in the dictionary.
        """
        if self.domain == "categories":
            cache = self._names_cache()
            index = cache.get("name_index")
            if index is None:
                index = cache.setdefault("name_index", {n: i for i, n in enumerate(self.value_names)})
            if name not in index:
                raise InvalidValueError(f"metric {self.metric!r} version {self.version}: {name!r} is not a category")
            return index[name]
        try:
            return value_from_json(self.params, name)
        except InvalidValueError as exc:
            raise InvalidValueError(f"metric {self.metric!r} version {self.version}: {exc}") from None

    def value_name(self, value) -> str:
        """The user-facing name of a dictionary value (category name, decimal digits, or the string)."""
        if self.domain == "categories":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(self.value_names):
                raise InvalidValueError(f"metric {self.metric!r} version {self.version}: no category id {value!r}")
            return self.value_names[value]
        return value_to_json(value)

    def tracked_values(self) -> TrackedValues:
        """The version's tracked set (built once; labels are dictionary values, see value_name)."""
        tracked = self._cache.get("tracked")
        if tracked is None:
            spec = self.tracked
            if spec.kind == "none":
                raise InvalidValueError(f"metric {self.metric!r} version {self.version}: no tracked values stated")
            if spec.kind == "all":
                tracked = TrackedValues.range(self.params, 0, self.params.dictionary_size)
            elif spec.kind == "range":
                tracked = TrackedValues.range(self.params, spec.start, spec.stop)
            else:
                tracked = TrackedValues.of(self.params, spec.values)
            tracked = self._cache.setdefault("tracked", tracked)
        return tracked

    @property
    def tracked_count(self) -> int | None:
        """D, the number of tracked values (None: none stated)."""
        spec = self.tracked
        if spec.kind == "none":
            return None
        if spec.kind == "all":
            return self.params.dictionary_size
        if spec.kind == "range":
            return spec.stop - spec.start
        return len(spec.values)

    def tracked_names(self) -> list[str]:
        """Names of the tracked values, in tracked order."""
        spec = self.tracked
        if spec.kind == "none":
            return []
        if spec.kind == "all":
            return [self.value_name(v) for v in range(self.params.dictionary_size)]
        if spec.kind == "range":
            return [self.value_name(v) for v in range(spec.start, spec.stop)]
        return [self.value_name(v) for v in spec.values]

    def watch_indices(self) -> tuple[int, ...]:
        """Positions of the watch list in :meth:`tracked_values` (validated at load time)."""
        position = {name: i for i, name in enumerate(self.tracked_names())}
        return tuple(position[name] for name in self.watch)

    def describe(self) -> dict:
        """Every value of the version, JSON-ready (values as strings, per cms_core.values)."""
        spec = self.tracked
        count = self.tracked_count
        tracked: dict = {"kind": spec.kind, "count": None if count is None else str(count)}
        if spec.kind == "range":
            tracked.update(start=value_to_json(spec.start), stop=value_to_json(spec.stop))
        elif spec.kind == "list":
            tracked["source"] = spec.source
        return {
            "metric": self.metric,
            "version": self.version,
            "live": self.live,
            "note": self.note,
            "fingerprint": self.fingerprint.hex(),
            "mechanism": self.mechanism,
            "domain": self.domain,
            "domain_size": value_to_json(self.params.dictionary_size),
            "categories": list(self.value_names) if self.value_names is not None else None,
            "tracked": tracked,
            "bucket_seconds": self.bucket_seconds,
            "retention_seconds": self.retention_seconds,
            "rollup_seconds": self.rollup_seconds,
            "rollup_retention_seconds": self.rollup_retention_seconds,
            "min_reports": self.min_reports,
            "watch": list(self.watch),
            "top_k": self.top_k,
            "params": self.params.describe(),
            **({"discovery": self.discovery.describe()} if self.discovery is not None else {}),
            **({"longitudinal": self.longitudinal.describe()} if self.longitudinal is not None else {}),
            **({"numeric": self.numeric.describe()} if self.numeric is not None else {}),
            **({"hierarchy": self.describe_tree()} if self.hierarchy is not None else {}),
            **({"mean": self.mean.describe()} if self.mean is not None else {}),
            **({"min_client_version": self.min_client_version} if self.min_client_version else {}),
        }


@dataclass(frozen=True, eq=False)
class MetricSpec:
    """A named metric: who owns it, what it measures, and its parameter versions (oldest first)."""

    name: str
    description: str
    owner: str
    unit: str | None
    domain: str
    versions: tuple[MetricVersion, ...]
    line: int | None = None

    @property
    def live_versions(self) -> tuple[MetricVersion, ...]:
        return tuple(v for v in self.versions if v.live)

    @property
    def latest(self) -> MetricVersion:
        """The newest live version: the one devices should report with."""
        live = self.live_versions
        return live[-1] if live else self.versions[-1]

    def version(self, number: int) -> MetricVersion:
        for v in self.versions:
            if v.version == number:
                return v
        raise UnknownMetricError(Problem("", None, f"metric {self.name!r} has no version {number!r} "
                                         f"(versions: {', '.join(str(v.version) for v in self.versions)})"))


@dataclass(frozen=True, eq=False)
class Registry:
    """All metrics of one registry file, in file order."""

    path: str
    metrics: tuple[MetricSpec, ...]
    _by_name: dict = dataclass_field(default_factory=dict, repr=False)
    _by_fingerprint: dict = dataclass_field(default_factory=dict, repr=False)

    def __post_init__(self):
        self._by_name.update((m.name, m) for m in self.metrics)
        self._by_fingerprint.update((v.fingerprint, v) for v in self.versions())
        # a tree version's levels are its parameter versions (its own fingerprint is its finest level's)
        self._by_fingerprint.update((level.fingerprint, level) for v in self.versions() for level in v.tree_levels())
        self._by_fingerprint.update((part.fingerprint, part) for v in self.versions() for part in v.mean_parts())

    def metric(self, name: str) -> MetricSpec:
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            known = ", ".join(m.name for m in self.metrics)
            raise UnknownMetricError(Problem(self.path, None, f"no metric {name!r} (metrics: {known})")) from None

    def by_fingerprint(self, fingerprint: bytes) -> MetricVersion | None:
        """The version whose reports carry this fingerprint (8 bytes), or None (a report for no metric)."""
        if not isinstance(fingerprint, (bytes, bytearray, memoryview)):
            raise TypeError(f"by_fingerprint takes the 8 fingerprint bytes, got {type(fingerprint).__name__}")
        return self._by_fingerprint.get(bytes(fingerprint))

    def versions(self) -> Iterator[MetricVersion]:
        """Every version of every metric, in file order."""
        for m in self.metrics:
            yield from m.versions

    def live_versions(self) -> Iterator[MetricVersion]:
        for m in self.metrics:
            yield from m.live_versions

    def reported_versions(self, metrics=None) -> dict[str, MetricVersion]:
        """{metric name: its newest live version} of the named metrics (default: every metric with a live
        version): what a device or a gateway reports as. UnknownMetricError for an unknown name or a metric
        whose every version is retired."""
        if metrics is None:
            return {m.name: m.latest for m in self.metrics if m.live_versions}
        if isinstance(metrics, str) or not all(isinstance(name, str) for name in metrics) or not metrics:
            raise InvalidParameterError("metrics", metrics, "must be a non-empty list of metric names")
        versions = {}
        for name in metrics:
            spec = self.metric(name)  # UnknownMetricError naming the registry's metrics
            if not spec.live_versions:
                raise UnknownMetricError(Problem(self.path, spec.line, "every version is retired: nothing of it is "
                                                 "counted any more", metric=name))
            versions[name] = spec.latest
        return versions

    def live_version(self, metric: str, served: dict | None = None) -> MetricVersion:
        """The live version ``metric`` names: "name" (its newest live version) or "name@N", among ``served``
        ({name: newest live version}, :meth:`reported_versions`; default every metric with one)."""
        if not isinstance(metric, str) or not metric:
            raise InvalidParameterError("metric", metric, "must be a metric name from the registry")
        if served is None:
            served = self.reported_versions()
        name, at, number = metric.partition("@")
        if name not in served:
            known = ", ".join(served) or "none"
            what = "no metric" if name not in {m.name for m in self.metrics} else "no live version of"
            raise UnknownMetricError(Problem(self.path, None, f"{what} {name!r} to report here (its metrics: {known})"))
        if not at:
            return served[name]
        if not number.isdigit():
            raise InvalidParameterError("metric", metric, "must be NAME or NAME@VERSION (VERSION a whole number)")
        version = self.metric(name).version(int(number))  # UnknownMetricError listing the versions
        if not version.live:
            raise UnknownMetricError(Problem(self.path, version.line, "is retired: its reports are no longer "
                                             f"counted; report {name!r} (version {served[name].version})",
                                             metric=name, version=version.version))
        return version

    def __len__(self) -> int:
        return len(self.metrics)


def single_metric_registry(params_sets, tracked_sets, *, name: str = "default", description: str = "",
                           owner: str = "", unit: str | None = None, bucket_seconds: int = 60,
                           retention_seconds: int = 86_400, rollup_seconds: int | None = None,
                           rollup_retention_seconds: int | None = None, min_reports: int = 0,
                           watch: tuple[str, ...] = (), top_k: int = 20, path: str = "<flags>",
                           longitudinal=None) -> Registry:
    """A one-metric registry described by the single-metric flags (``ocms worker --epsilon ...``).

    ``params_sets[i]`` (registry.flags: each ``--extra-epsilon``, then the primary) becomes version
    i + 1 with its tracked set ``tracked_sets[i]`` (None: no tracked values stated, see TrackedSpec).
    The parameters are used as given:
    unbound parameters keep their wire-v1 fingerprint, so devices built before the registry
    keep being counted. Values have no names beyond their decimal digits or strings.
    ``longitudinal`` (a cms_core.longitudinal.LongitudinalParams of the last set): the newest version's mode.
    """
    from cms_core.errors import ParameterMismatchError

    params_sets, tracked_sets = tuple(params_sets), tuple(tracked_sets)
    if not params_sets or len(params_sets) != len(tracked_sets):
        raise ValueError("one tracked set per parameter set, at least one")
    versions = []
    for number, (params, tracked) in enumerate(zip(params_sets, tracked_sets), 1):
        if tracked is not None and tracked.params_fingerprint != params.fingerprint:
            raise ParameterMismatchError(f"version {number}: the tracked set was built for other parameters")
        if tracked is None:
            spec = TrackedSpec("none")
        elif tracked.is_range:
            spec = TrackedSpec("range", start=tracked.range_start, stop=tracked.range_start + len(tracked))
        else:
            spec = TrackedSpec("list", values=tuple(tracked.labels), source="flags")
        version = MetricVersion(
            metric=name, version=number, params=params,
            domain="strings" if params.value_domain == "string" else "integers", value_names=None, tracked=spec,
            bucket_seconds=bucket_seconds, retention_seconds=retention_seconds, rollup_seconds=rollup_seconds,
            rollup_retention_seconds=rollup_retention_seconds, min_reports=min_reports, top_k=top_k, watch=())
        known = set(version.tracked_names())
        missing = [w for w in watch if w not in known]
        if missing:
            raise InvalidValueError(f"watch: {', '.join(map(repr, missing))} is not a tracked value")
        versions.append(dataclasses.replace(version, watch=tuple(watch),
                                            longitudinal=longitudinal if number == len(params_sets) else None))
        if tracked is not None:
            versions[-1]._cache["tracked"] = tracked  # the caller's set, not a rebuilt copy
    spec = MetricSpec(name=name, description=description, owner=owner, unit=unit, domain=versions[0].domain,
                      versions=tuple(versions))
    return Registry(path, (spec,))
