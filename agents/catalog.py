"""What a worker serves, by name: its metrics, their live versions and the names of their values.

One worker serves every live version of every metric of a registry: ``ocms worker --registry FILE``
(format in docs/registry.md), or the one-metric registry the single-metric flags compile into
(``--epsilon``, ``--extra-epsilon``, ``--tracked-range`` ...; registry.flags). The catalog is always
built from a :class:`registry.Registry`, read once per process.

Each version is counted under its own fingerprint (the table key's first field) with its own
tracked set, bucket width, rollup and retention, and answered by its own
:class:`agents.query.EstimateService`, which reads values by name (``ATL``, a string, an integer's
decimal digits), answers with names, and withholds any window holding fewer than the version's
``min_reports`` reports (no estimate and no match counts, like DAP's minimum batch size). Reports of
different versions are never summed: every answer names the one version it reads, except
``version=combined`` (the inverse-variance combination of every live version's unbiased estimates,
marked combined). The name-less routes (``/estimates``, ``/topk`` ...) are the first metric's.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Mapping

import numpy as np

from cms_core import OCMSParams, TrackedValues
from cms_core.errors import InvalidParameterError
from cms_core.values import value_to_json

from .query import Answer, ApiError, EstimateService, Estimator, Job, Read, check_query, doc_read, parse_options, show
from .state import StateLayout
from .view import CountsView


@dataclass(frozen=True)
class MetricEntry:
    """One served metric: its registry spec and a service per live version (oldest first)."""

    spec: object  # registry.MetricSpec
    services: tuple[EstimateService, ...]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def default(self) -> EstimateService:
        """The version answered when a request names none: the newest live one (what devices send)."""
        return self.services[-1]

    def service(self, query: Mapping[str, str]) -> tuple[EstimateService, dict[str, str]]:
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

    def params_doc(self) -> dict:
        """/params of the name-less routes: the newest live version's, with every live version's set
        (``primary``: the newest, what a request without ``params`` reads)."""
        doc = self.default.params_doc()
        others = [s.params_doc()["parameter_sets"][0] for s in self.services[:-1]]
        doc["parameter_sets"] += [dict(entry, primary=False) for entry in others]
        return doc

    @cached_property
    def tracked_names(self) -> int:
        """Distinct value names any live version tracks: D of a combined answer's noise test."""
        return len({s.name_of(value_to_json(label)) for s in self.services for label in s.labels})

    def describe(self) -> dict:
        s = self.spec
        versions = [v.describe() for v in self.services]
        return {
            "name": s.name, "description": s.description, "owner": s.owner, "unit": s.unit, "domain": s.domain,
            "reports": sum(v.reports() for v in self.services),
            "latest_bucket_start": max((b for b in (v.newest_bucket() for v in self.services) if b is not None), default=None),
            "versions": versions,
            # Windows answered as withheld right now (fewer reports than the version's min_reports).
            "withheld_windows": [{"version": v["version"], "window": kind, "reports": w["reports"],
                                  "min_reports": v["min_reports"]}
                                 for v in versions for kind, w in v["windows"].items() if w["withheld"]],
        }


class Catalog:
    """Every metric version a worker counts and answers, by name and by fingerprint."""

    def __init__(self, registry, view: CountsView, clock: Callable[[], float] = time.time,
                 future_tolerance_seconds: int = 300):
        self.registry = registry
        self.clock = clock
        entries = []
        for spec in registry.metrics:
            services = tuple(EstimateService(v, view, clock, future_tolerance_seconds) for v in spec.live_versions)
            if services:
                entries.append(MetricEntry(spec, services))
        if not entries:
            raise InvalidParameterError("--registry", registry.path, "holds no live metric version to serve")
        self.metrics: dict[str, MetricEntry] = {e.name: e for e in entries}
        self.by_fingerprint: dict[str, EstimateService] = {s.fingerprint: s for e in entries for s in e.services}
        #: Finishes every answer of the worker (any fingerprint it serves), here or in the answer process.
        self.estimator = Estimator({fp: (s.version.params, s.tracked) for fp, s in self.by_fingerprint.items()})

    # --------------------------------------------------- what the worker counts
    @property
    def primary(self) -> MetricEntry:
        """The first metric: the one the name-less endpoints (/estimates, /topk ...) answer for."""
        return next(iter(self.metrics.values()))

    def prepare_primary(self, endpoint: str, pairs, value: str | None = None) -> Answer:
        """A name-less request (/estimates, /topk, /trend, /params): the first metric's, its newest live
        version unless ``params=FINGERPRINT`` picks another of its live versions."""
        return self.check_primary(endpoint, pairs, value)()

    def check_primary(self, endpoint: str, pairs, value: str | None = None) -> Read:
        """:meth:`prepare_primary`'s checks, reading no counts (``EstimateService.check``); returns the rest."""
        query = check_query(endpoint, pairs)
        if endpoint == "params":
            return doc_read(self.primary.params_doc)
        service, rest = self.primary.service(query)
        return service.check(endpoint, rest, value)

    @property
    def params_sets(self) -> tuple[OCMSParams, ...]:
        return tuple(s.version.params for s in self.by_fingerprint.values())

    @property
    def params_by_fp(self) -> dict[str, OCMSParams]:
        return {fp: s.version.params for fp, s in self.by_fingerprint.items()}

    @property
    def tracked_by_fp(self) -> dict[str, TrackedValues]:
        return {fp: s.tracked for fp, s in self.by_fingerprint.items()}

    @property
    def tracked_sizes(self) -> dict[str, int]:
        return {fp: s.d for fp, s in self.by_fingerprint.items()}

    @property
    def levels_by_fp(self) -> dict[str, tuple[tuple[int, int], ...]]:
        """(bucket width, retention) per time level, finest first, per fingerprint."""
        return {fp: s.version.levels for fp, s in self.by_fingerprint.items()}

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
        return self.check(name, endpoint, pairs, value)()

    def check(self, name: str, endpoint: str, pairs, value: str | None = None) -> Read:
        """:meth:`prepare`'s checks, reading no counts (``EstimateService.check``): an unknown metric, version
        or value, or a bad parameter, raises here on any worker; returns the rest."""
        entry = self.metric(name)
        pairs = list(pairs)
        versions = [raw for key, raw in pairs if key == "version"]
        if len(versions) > 1:
            raise ApiError("version", "given more than once; give it once")
        query = check_query(endpoint, [(k, raw) for k, raw in pairs if k != "version"])
        if versions and versions[0].strip() == COMBINED:
            return combined_check(entry, endpoint, query, value)
        if versions:
            query["version"] = versions[0]
        service, rest = entry.service(query)
        return service.check(endpoint, rest, value)


#: ``version=combined``: every live version's estimate of a value, combined (cms_core.combine).
COMBINED = "combined"
#: What a combined answer reads from each version's answer.
_COMBINED_ENDPOINTS = ("estimates", "estimate_value")


def combined_check(entry: MetricEntry, endpoint: str, query: Mapping[str, str], value: str | None) -> Read:
    """The checks of a ``version=combined`` request (each live version's, reading no counts); returns the
    read of :func:`combined_answer`."""
    if endpoint not in _COMBINED_ENDPOINTS:
        raise ApiError("version", f"combined is answered by /estimates and /estimates/VALUE, not /{endpoint}")
    for name, allowed in (("postprocess", "none"), ("interval", "normal")):
        if query.get(name, allowed) != allowed:
            raise ApiError(name, f"version=combined combines the unbiased estimates with normal intervals; "
                                 f"give {name}={allowed} or a single version")
    if "params" in query:
        raise ApiError("params", "version=combined reads every live version; leave params out")
    services = entry.services
    reads = [s.check(endpoint, query, value) if endpoint == "estimates" or _tracks(s, value) else None
             for s in services]
    if endpoint == "estimate_value" and not any(reads):
        services[-1].value_index(value)  # raises the version's 404 naming the value
    confidence = parse_options(query).confidence
    return lambda: combined_answer(entry, endpoint, [r() if r is not None else None for r in reads], confidence)


def combined_answer(entry: MetricEntry, endpoint: str, answers: list[Answer | None], confidence: float) -> Answer:
    """The inverse-variance combination of every live version's unbiased estimate of each value, for
    one window (``cms_core.combine``), from each version's ``answers`` (None: a version not tracking the
    value). Values are matched by name; a value some version does not track combines the versions that
    do. Windows under ``min_reports`` (summed over versions) are withheld. Only the raw (unbiased)
    estimates with normal intervals combine."""
    from cms_core import theory
    from cms_core.combine import combine_frequencies
    from cms_core.records import ESTIMATE_FIELDS, NOISE_CORRECTION

    services = entry.services
    work = sum(a.work for a in answers if a is not None)
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


def combined_central(docs: list[tuple[EstimateService, dict]]) -> dict:
    """The central epsilon of a combined answer over (version, its answer) pairs: each version's reports were
    shuffled among their own version's, so a report is protected at its version's figure; the answer states
    the largest (null when a version with reports has none)."""
    counted = [(s, doc) for s, doc in docs if doc["n"]]
    shuffled = sum(doc["shuffled_reports"] for _, doc in docs)
    batches = [doc["shuffle_batch_min"] for _, doc in docs if doc["shuffle_batch_min"]]
    out = {"central_epsilon": None, "central_delta": None, "central_bound": None,
           "shuffle_batch_min": min(batches) if batches else None, "shuffled_reports": shuffled,
           "central_reason": None}
    if counted and all(doc["central_epsilon"] is not None for _, doc in counted):
        out.update(central_epsilon=max(doc["central_epsilon"] for _, doc in counted),
                   central_delta=max(doc["central_delta"] for _, doc in counted), central_bound=counted[0][1]["central_bound"],
                   central_note="the largest central epsilon of the versions combined (each version's reports "
                                "were shuffled among that version's)")
    else:
        reasons = [doc.get("central_reason") for _, doc in counted if doc["central_epsilon"] is None]
        out["central_reason"] = next((r for r in reasons if r), "partly_shuffled") if counted else "no_reports"
        out["central_note"] = "; ".join(f"version {s.version.version}: {doc['central_note']}" for s, doc in counted
                                        if doc["central_epsilon"] is None) if counted else "no reports in this window"
    return out


def _tracks(service: EstimateService, value: str | None) -> bool:
    try:
        service.value_index(value if value is not None else "")
    except ApiError:
        return False
    return True
