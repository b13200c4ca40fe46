"""What a worker serves, by name: its metrics, their live versions and the names of their values.

One worker serves every live version of every metric of a registry (``ocms worker --registry
FILE``; format in docs/registry.md). The single-metric flags (``--epsilon``, ``--extra-epsilon``,
``--tracked-range`` ...) describe a one-metric registry (``registry.single_metric_registry``),
so both paths build the same :class:`Catalog`.

Each version is counted under its own fingerprint (the table key's first field) with its own
tracked set, bucket width, rollup and retention, and answered by its own
:class:`VersionService`: an :class:`agents.query.EstimateService` restricted to that one
fingerprint, which reads values by name (``ATL``, a string, an integer's decimal digits),
answers with names, and withholds any window holding fewer than the version's ``min_reports``
reports (no estimate and no match counts, like DAP's minimum batch size). Reports of different
versions are never summed: every answer names the one version it reads, except ``version=combined``
(the inverse-variance combination of every live version's unbiased estimates, marked combined).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Mapping

import numpy as np

from cms_core import OCMSParams, TrackedValues
from cms_core.errors import InvalidParameterError, InvalidValueError
from cms_core.values import value_to_json

from .query import Answer, ApiError, EstimateService, Estimator, Job, Window, central_privacy, check_query, show
from .settings import WorkerSettings, tracked_values
from .state import StateLayout
from .view import CountsView, shuffle_of

#: Name of the metric the single-metric flags describe (Prometheus label ``metric``, /metrics/NAME/...).
LEGACY_METRIC = "default"
#: Record fields that exist only with an estimate: a withheld window answers without them.
_WITHHELD_FIELDS = (
    "match_count", "frequency", "processed", "count", "processed_count", "std",
    "ci_low", "ci_high", "count_ci_low", "count_ci_high", "processed_ci_low", "processed_ci_high",
    "processed_count_ci_low", "processed_count_ci_high", "above_noise",
)


@dataclass(frozen=True)
class Naming:
    """What turns a version's answer into a named one: metric, version, value names, min_reports.

    Picklable (it travels with the answer's job to the answer process, agents.web), applied to the
    finished answer by ``Estimator.finish``."""

    metric: str
    version: int
    mechanism: str
    min_reports: int
    names: tuple[str, ...] | None  # category names by id; None: values are their own names

    def name_of(self, label: str) -> str:
        """The name of a value as ``value_to_json`` wrote it (a category id's digits -> its name)."""
        return label if self.names is None else self.names[int(label)]

    def withheld(self, n: int) -> bool:
        return n < self.min_reports

    def __call__(self, doc: dict) -> dict:
        """An answer with the metric, version and value names, and withheld windows emptied."""
        out = {"metric": self.metric, "version": self.version, "mechanism": self.mechanism,
               "min_reports": self.min_reports}
        out.update(doc)
        withheld = self.withheld(doc.get("n", 0))
        out["withheld"] = withheld
        if "estimates" in doc:
            out["estimates"] = [] if withheld else [self._record(r) for r in doc["estimates"]]
        if "estimate" in doc:
            out["estimate"] = None if withheld else self._record(doc["estimate"])
        if "top" in doc:
            out["top"] = [] if withheld else [self._record(r) for r in doc["top"]]
        if "points" in doc:
            out["value"] = self.name_of(doc["value"])
            out["withheld"] = False  # a trend withholds point by point
            out["points"] = [self._point(p) for p in doc["points"]]
        return out

    def _record(self, record: dict) -> dict:
        return dict(record, value=self.name_of(record["value"]))

    def _point(self, point: dict) -> dict:
        point = self._record(point)
        if self.withheld(point["n"]):
            for name in _WITHHELD_FIELDS:
                point.pop(name, None)
            point["withheld"] = True
        else:
            point["withheld"] = False
        return point


class VersionService(EstimateService):
    """The answers of one metric version (one fingerprint), with values read and written by name."""

    def __init__(self, version, settings: WorkerSettings, view: CountsView, clock: Callable[[], float] = time.time):
        self.version = version
        fp = version.fingerprint.hex()
        levels = dict(bucket_seconds=version.bucket_seconds, retention_seconds=version.retention_seconds,
                      rollup_seconds=version.rollup_seconds)
        if version.rollup_seconds:
            levels["rollup_retention_seconds"] = version.rollup_retention_seconds
        own = dataclasses.replace(settings, params=version.params, extra_params=(), watch=(), top_k=version.top_k,
                                  tracked_range=None, tracked_file=None, **levels)
        super().__init__(own, view, clock, tracked={fp: version.tracked_values()})
        self.watch = version.watch_indices()
        self.fingerprint = fp
        self.naming = Naming(version.metric, version.version, version.mechanism, version.min_reports,
                             version.value_names)

    # ------------------------------------------------------------- values
    def value_index(self, raw: str, parameter: str = "value") -> int:
        v = self.version
        try:
            value = v.value_from_name(raw)
        except (InvalidValueError, ValueError):
            if v.domain == "categories":
                raise ApiError(parameter, f"{show(raw)} is not a category of metric {v.metric!r} version "
                                          f"{v.version}", status=404) from None
            if raw.isascii() and raw.isdigit():
                raise ApiError(parameter, f"{show(raw)} is outside the dictionary of metric {v.metric!r} "
                                          f"[0, {v.params.dictionary_size})", status=404) from None
            raise ApiError(parameter, f"{show(raw)} is not a value of metric {v.metric!r} "
                                      f"(its values are {v.domain})") from None
        try:
            return super().value_index(value_to_json(value), parameter)
        except ApiError:
            raise ApiError(parameter, f"{show(raw)} is not a tracked value of metric {v.metric!r} "
                                      f"version {v.version}", status=404) from None

    def name_of(self, label: str) -> str:
        """The name of a value as ``value_to_json`` wrote it (a category id's digits -> its name)."""
        return self.naming.name_of(label)

    def withheld(self, n: int) -> bool:
        return self.naming.withheld(n)

    # ------------------------------------------------------------ answers
    def prepare(self, endpoint: str, query: Mapping[str, str], value: str | None = None) -> Answer:
        answer = super().prepare(endpoint, query, value)
        if endpoint == "params":
            return answer
        naming = self.naming
        return Answer(answer.work, lambda: dataclasses.replace(answer.gather(), rename=naming))

    def params_doc(self) -> dict:
        """/params of the name-less endpoints when they answer for this version (a registry worker)."""
        v = self.version
        doc = super().params_doc()
        for entry in doc["parameter_sets"]:
            entry.update(metric=v.metric, version=v.version)
        doc.update(metric=v.metric, version=v.version, watch=list(v.watch), min_reports=v.min_reports)
        return doc

    def answer(self, endpoint: str, query: Mapping[str, str], value: str | None = None) -> dict:
        """The answer computed here and now (tests, tools; the web layer splits the steps)."""
        return self.estimator.finish(self.prepare(endpoint, query, value).gather())

    def newest_bucket(self) -> int | None:
        """Start of the newest base bucket holding counts (freshness), None before the first report."""
        starts = self.view.buckets(self.fingerprint, self.version.bucket_seconds)
        return starts[-1] if starts else None

    def oldest_bucket(self) -> int | None:
        """Start of the oldest retained base bucket holding counts (the console's trend range fits
        the data from there), None before the first report."""
        starts = self.view.buckets(self.fingerprint, self.version.bucket_seconds)
        return starts[0] if starts else None

    def window_reports(self) -> dict:
        """Reports, the withheld state and the central epsilon (agents.query.central_privacy) of the windows the
        API answers by name (``total``, ``latest_bucket``), as Prometheus exports them: O(partitions), no counts
        summed."""
        out = {}
        for window in (Window("total"), self.latest_bucket()):
            start, stop = window.bounds()
            snapshot = self.view.snapshot(self.fingerprint, window.width, start, stop)
            n = sum(state.n for _, states in snapshot for state in states)
            out[window.kind] = dict(window.as_json(), reports=n, withheld=self.withheld(n),
                                    **central_privacy(self.version.params, n, *shuffle_of(snapshot)))
        return out

    def describe(self) -> dict:
        """This version in the /metrics listing."""
        v, p = self.version, self.version.params
        return {
            "windows": self.window_reports(), "parameters": p.describe(),
            "levels": [{"bucket_seconds": w, "retention_seconds": r} for w, r in self.settings.levels()],
            "version": v.version, "fingerprint": self.fingerprint, "mechanism": v.mechanism,
            "epsilon": p.epsilon, "mode": p.mode, "hash_range": p.hash_range,
            "domain": v.domain, "domain_size": value_to_json(p.dictionary_size),
            "tracked_values": len(self.labels), "reports": self.reports(self.fingerprint),
            "bucket_seconds": v.bucket_seconds, "retention_seconds": v.retention_seconds,
            "rollup_seconds": v.rollup_seconds, "min_reports": v.min_reports,
            "latest_bucket_start": self.newest_bucket(), "oldest_bucket_start": self.oldest_bucket(),
            "watch": list(v.watch), "top_k": v.top_k, "note": v.note,
            # Its values can be discovered (docs/discovery.md): the worker answers /discovered?metric=NAME.
            "discoverable": getattr(v, "discovery", None) is not None,
        }


@dataclass(frozen=True)
class MetricEntry:
    """One served metric: its registry spec and a service per live version (oldest first)."""

    spec: object  # registry.MetricSpec
    services: tuple[VersionService, ...]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def default(self) -> VersionService:
        """The version answered when a request names none: the newest live one (what devices send)."""
        return self.services[-1]

    def service(self, query: Mapping[str, str]) -> tuple[VersionService, dict[str, str]]:
        """The version a request asks for (``version=N`` or ``params=FINGERPRINT``) and the rest of its query."""
        rest = dict(query)
        if "version" in rest:
            raw = rest.pop("version")
            for s in self.services:
                if raw.strip() == str(s.version.version):
                    return s, rest
            live = ", ".join(str(s.version.version) for s in self.services)
            raise ApiError("version", f"{show(raw)} is not a live version of metric {self.name!r} (live: {live})",
                           status=404)
        if "params" in rest:
            for s in self.services:
                if rest["params"] == s.fingerprint:
                    return s, rest
            raise ApiError("params", f"{show(rest['params'])} is not the fingerprint of a live version of metric "
                                     f"{self.name!r} (see /metrics)")
        return self.default, rest

    @cached_property
    def tracked_names(self) -> int:
        """Distinct value names any live version tracks: D of a combined answer's noise test."""
        return len({s.name_of(value_to_json(label)) for s in self.services for label in s.labels})

    def describe(self) -> dict:
        s = self.spec
        versions = [v.describe() for v in self.services]
        return {
            "name": s.name, "description": s.description, "owner": s.owner, "unit": s.unit, "domain": s.domain,
            "reports": sum(v.reports(v.fingerprint) for v in self.services),
            "latest_bucket_start": max((b for b in (v.newest_bucket() for v in self.services) if b is not None), default=None),
            "versions": versions,
            # Windows answered as withheld right now (fewer reports than the version's min_reports).
            "withheld_windows": [{"version": v["version"], "window": kind, "reports": w["reports"],
                                  "min_reports": v["min_reports"]}
                                 for v in versions for kind, w in v["windows"].items() if w["withheld"]],
        }


class Catalog:
    """Every metric version a worker counts and answers, by name and by fingerprint."""

    def __init__(self, registry, settings: WorkerSettings, view: CountsView,
                 clock: Callable[[], float] = time.time, legacy: bool = False):
        self.registry = registry
        self.legacy = legacy
        self.clock = clock
        entries = []
        for spec in registry.metrics:
            services = tuple(VersionService(v, settings, view, clock) for v in spec.live_versions)
            if services:
                entries.append(MetricEntry(spec, services))
        if not entries:
            raise InvalidParameterError("--registry", registry.path, "holds no live metric version to serve")
        self.metrics: dict[str, MetricEntry] = {e.name: e for e in entries}
        self.by_fingerprint: dict[str, VersionService] = {s.fingerprint: s for e in entries for s in e.services}
        #: Finishes every answer of the worker (any fingerprint it serves), here or in the answer process.
        self.estimator = Estimator({fp: (s.version.params, s.tracked[fp]) for fp, s in self.by_fingerprint.items()})

    @classmethod
    def build(cls, settings: WorkerSettings, view: CountsView, clock: Callable[[], float] = time.time) -> "Catalog":
        """From ``settings.registry``, or the one metric the single-metric flags describe."""
        registry_file = getattr(settings, "registry", None)
        if registry_file:
            return cls(load_worker_registry(registry_file), settings, view, clock)
        return cls(legacy_registry(settings), settings, view, clock, legacy=True)

    # --------------------------------------------------- what the worker counts
    @property
    def primary(self) -> MetricEntry:
        """The first metric: the one the name-less endpoints (/estimates, /topk ...) answer for."""
        return next(iter(self.metrics.values()))

    @property
    def params_sets(self) -> tuple[OCMSParams, ...]:
        return tuple(s.version.params for s in self.by_fingerprint.values())

    @property
    def params_by_fp(self) -> dict[str, OCMSParams]:
        return {fp: s.version.params for fp, s in self.by_fingerprint.items()}

    @property
    def tracked_by_fp(self) -> dict[str, TrackedValues]:
        return {fp: s.tracked[fp] for fp, s in self.by_fingerprint.items()}

    @property
    def tracked_sizes(self) -> dict[str, int]:
        return {fp: len(s.tracked[fp]) for fp, s in self.by_fingerprint.items()}

    @property
    def levels_by_fp(self) -> dict[str, tuple[tuple[int, int], ...]]:
        """(bucket width, retention) per time level, finest first, per fingerprint."""
        return {fp: s.settings.levels() for fp, s in self.by_fingerprint.items()}

    @property
    def retention_by_fp(self) -> dict[bytes, int]:
        """The base bucket retention per fingerprint (bytes): older reports are rejected as expired."""
        return {s.version.fingerprint: s.version.retention_seconds for s in self.by_fingerprint.values()}

    def state_layout(self, partitions: int) -> StateLayout:
        """Where the worker stores each served version's counts, and which shard serves them (agents.state)."""
        levels = self.levels_by_fp
        return StateLayout(levels, self.tracked_sizes, partitions, {fp: self.labels_of(fp)[0] for fp in levels})

    def labels_of(self, fp: str) -> tuple[str, str]:
        """(metric, version) Prometheus labels of a fingerprint."""
        v = self.by_fingerprint[fp].version
        return v.metric, str(v.version)

    # ------------------------------------------------------------- by name
    def metric(self, name: str) -> MetricEntry:
        entry = self.metrics.get(name)
        if entry is None:
            raise ApiError("metric", f"{show(name)} is not a metric this worker serves "
                                     f"(metrics: {', '.join(self.metrics)})", status=404)
        return entry

    def describe(self) -> dict:
        # generated_at: the worker's clock when listed; the console measures reports/s against it, not
        # against the browser's clock (a headless screenshot under virtual time runs that clock fast).
        return {"generated_at": self.clock(), "metrics": [e.describe() for e in self.metrics.values()]}

    def prepare(self, name: str, endpoint: str, pairs, value: str | None = None) -> Answer:
        """A named request (/metrics/NAME/...): checked completely, the version chosen, work stated.

        The endpoint takes what its name-less twin takes, plus ``version`` (default: the newest live)."""
        entry = self.metric(name)
        pairs = list(pairs)
        versions = [raw for key, raw in pairs if key == "version"]
        if len(versions) > 1:
            raise ApiError("version", "given more than once; give it once")
        query = check_query(endpoint, [(k, raw) for k, raw in pairs if k != "version"])
        if versions and versions[0].strip() == COMBINED:
            return combined_answer(entry, endpoint, query, value)
        if versions:
            query["version"] = versions[0]
        service, rest = entry.service(query)
        return service.prepare(endpoint, rest, value)


def legacy_registry(settings: WorkerSettings):
    """The one-metric registry the single-metric flags describe (versions: the primary, then each extra)."""
    from registry import single_metric_registry

    sets = settings.params_sets
    tracked = [tracked_values(settings, p) for p in sets]
    try:
        return single_metric_registry(
            sets, tracked, name=LEGACY_METRIC, description="the metric of the single-metric flags",
            bucket_seconds=settings.bucket_seconds, retention_seconds=settings.retention_seconds,
            rollup_seconds=settings.rollup_seconds,
            rollup_retention_seconds=settings.rollup_retention_seconds if settings.rollup_seconds else None,
            watch=settings.watch, top_k=settings.top_k)
    except InvalidValueError as exc:
        raise InvalidParameterError("OCMS_WATCH", ",".join(settings.watch), str(exc)) from None


def load_worker_registry(path: str):
    """The registry a worker serves; a RegistryError names the file, metric, field and line."""
    from registry import load_registry

    return load_registry(path)


#: ``version=combined``: every live version's estimate of a value, combined (cms_core.combine).
COMBINED = "combined"
#: What a combined answer reads from each version's answer.
_COMBINED_ENDPOINTS = ("estimates", "estimate_value")


def combined_answer(entry: MetricEntry, endpoint: str, query: Mapping[str, str], value: str | None) -> Answer:
    """The inverse-variance combination of every live version's unbiased estimate of each value, for
    one window (``cms_core.combine``). Values are matched by name; a value some version does not
    track combines the versions that do. Windows under ``min_reports`` (summed over versions) are
    withheld. Only the raw (unbiased) estimates with normal intervals combine."""
    from cms_core import theory
    from cms_core.combine import combine_frequencies
    from cms_core.records import ESTIMATE_FIELDS, NOISE_CORRECTION

    if endpoint not in _COMBINED_ENDPOINTS:
        raise ApiError("version", f"combined is answered by /estimates and /estimates/VALUE, not /{endpoint}")
    for name, allowed in (("postprocess", "none"), ("interval", "normal")):
        if query.get(name, allowed) != allowed:
            raise ApiError(name, f"version=combined combines the unbiased estimates with normal intervals; "
                                 f"give {name}={allowed} or a single version")
    if "params" in query:
        raise ApiError("params", "version=combined reads every live version; leave params out")
    services = entry.services
    answers = [s.prepare(endpoint, query, value) if endpoint == "estimates" or _tracks(s, value) else None
               for s in services]
    if endpoint == "estimate_value" and not any(answers):
        services[-1].value_index(value)  # raises the version's 404 naming the value
    work = sum(a.work for a in answers if a is not None)
    confidence = float(query.get("confidence", "0.95"))
    tracked_names = entry.tracked_names
    multiplier = theory.one_sided_z(theory.bonferroni_level(confidence, tracked_names))

    def gather() -> Job:
        # Each version's raw answer (not withheld one by one: min_reports applies to the combined n).
        docs = [(s, s.estimator.finish(dataclasses.replace(a.gather(), rename=None)))
                for s, a in zip(services, answers) if a is not None]
        by_version = []
        names: list[str] = []
        seen: set[str] = set()
        for s, doc in docs:
            raw = doc["estimates"] if "estimates" in doc else [doc["estimate"]]
            records = {s.name_of(r["value"]): r for r in raw}
            by_version.append(records)
            for name in records:
                if name not in seen:
                    seen.add(name)
                    names.append(name)
        parts = []
        for (s, doc), records in zip(docs, by_version):
            g = np.array([np.nan if records.get(v, {}).get("frequency") is None else records[v]["frequency"]
                          for v in names], dtype=np.float64)
            parts.append((s.version.params, doc["n"] if records else 0, g))
        n = sum(doc["n"] for _, doc in docs)
        min_reports = max(s.version.min_reports for s in services)
        out = {"metric": entry.name, "version": COMBINED, "combined": True, "min_reports": min_reports,
               "versions": [{"version": s.version.version, "n": doc["n"], "fingerprint": s.fingerprint,
                             "central_epsilon": doc["central_epsilon"]} for s, doc in docs],
               "window": docs[0][1]["window"] if docs else None, "n": n, "confidence": confidence,
               "interval": "normal", "postprocess": "none", **combined_central(docs)}
        withheld = n < min_reports or not any(p[1] for p in parts)
        out["withheld"] = withheld
        records = []
        # The noise test of f = 0 over every name a live version tracks, at each value's combined
        # variance under that hypothesis (normal: no single binomial count). A value fewer versions
        # track has fewer reports and a higher floor, so each record carries its own; the answer's
        # is the lowest, that of the values every version tracks.
        out.update(noise_floor=None, noise_floor_count=None, processed_noise_floor=None, noise_values=tracked_names,
                   noise_correction=NOISE_CORRECTION)
        if not withheld:
            c = combine_frequencies(parts, confidence)
            floors = theory.noise_floor(multiplier, c.null_variance)
            for i, name in enumerate(names):
                record = {"value": name, "combined": True}
                fields = dict(frequency=c.frequency[i], processed=c.frequency[i], count=c.frequency[i] * c.reports[i],
                              processed_count=c.frequency[i] * c.reports[i], std=c.std[i], ci_low=c.ci_low[i],
                              ci_high=c.ci_high[i], count_ci_low=c.ci_low[i] * c.reports[i],
                              count_ci_high=c.ci_high[i] * c.reports[i], processed_ci_low=c.ci_low[i],
                              processed_ci_high=c.ci_high[i], processed_count_ci_low=c.ci_low[i] * c.reports[i],
                              processed_count_ci_high=c.ci_high[i] * c.reports[i])
                for field in ESTIMATE_FIELDS:
                    x = float(fields[field])
                    record[field] = x if np.isfinite(x) else None
                record["above_noise"] = bool(c.frequency[i] > floors[i])  # NaN (no estimate) is not above
                record["noise_floor"] = float(floors[i]) if np.isfinite(floors[i]) else None
                record["reports"] = int(c.reports[i])
                records.append(record)
            finite = floors[np.isfinite(floors)]
            if finite.size:
                floor = float(finite.min())
                out.update(noise_floor=floor, noise_floor_count=floor * n, processed_noise_floor=floor)
        if endpoint == "estimates":
            out["estimates"] = records
        else:
            out["estimate"] = records[0] if records else None
        return Job("doc", doc=out)

    return Answer(work, gather)


def combined_central(docs: list[tuple[VersionService, dict]]) -> dict:
    """The central epsilon of a combined answer over (version, its answer) pairs: each version's reports were
    shuffled among their own version's, so a report is protected at its version's figure; the answer states
    the largest (null when a version with reports has none)."""
    counted = [(s, doc) for s, doc in docs if doc["n"]]
    shuffled = sum(doc["shuffled_reports"] for _, doc in docs)
    batches = [doc["shuffle_batch_min"] for _, doc in docs if doc["shuffle_batch_min"]]
    out = {"central_epsilon": None, "central_delta": None, "central_bound": None,
           "shuffle_batch_min": min(batches) if batches else None, "shuffled_reports": shuffled}
    if counted and all(doc["central_epsilon"] is not None for _, doc in counted):
        out.update(central_epsilon=max(doc["central_epsilon"] for _, doc in counted),
                   central_delta=max(doc["central_delta"] for _, doc in counted), central_bound=counted[0][1]["central_bound"],
                   central_note="the largest central epsilon of the versions combined (each version's reports "
                                "were shuffled among that version's)")
    else:
        out["central_note"] = "; ".join(f"version {s.version.version}: {doc['central_note']}" for s, doc in counted
                                        if doc["central_epsilon"] is None) if counted else "no reports in this window"
    return out


def _tracks(service: VersionService, value: str | None) -> bool:
    try:
        service.value_index(value if value is not None else "")
    except ApiError:
        return False
    return True
