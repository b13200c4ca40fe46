"""What a worker serves, by name: its metrics, their live versions and the names of their values.

One worker serves every live version of every metric of a registry: ``ocms worker --registry FILE``
(format in docs/registry.md), or the one-metric registry the single-metric flags compile into
(``--epsilon``, ``--extra-epsilon``, ``--tracked-range`` ...; registry.flags). The catalog is always
built from a :class:`registry.Registry`, read once per process.

Each version is counted under its own fingerprint (the table key's first field) with its own
tracked set, bucket width, rollup and retention, and answered by its own
:class:`agents.answers.service.EstimateService`, which reads values by name (``ATL``, a string, an integer's
decimal digits), answers with names, and withholds any window holding fewer than the version's
``min_reports`` reports (no estimate and no match counts, like DAP's minimum batch size). Reports of
different versions are never summed: every answer names the one version it reads, except
``version=combined`` (the inverse-variance combination of every live version's unbiased estimates,
marked combined). The name-less routes (``/estimates``, ``/topk`` ...) are the first metric's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Mapping

from cms_core import OCMSParams, TrackedValues
from cms_core.errors import InvalidParameterError
from cms_core.values import value_to_json

from .answers.combined import COMBINED, combined_check
from .answers.request import ApiError, check_query, show
from .answers.service import Answer, EstimateService, Estimator, Read, doc_read
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
        # A tree version's coarser levels (issue 40) are counted as versions of their own (every node tracked),
        # answered only through the version's histogram: not in its entry's services, not exported.
        for e in entries:
            for s in e.services:
                for level in s.version.tree_levels()[:-1] + s.version.mean_parts():  # and a Hybrid mean's part
                    self.by_fingerprint[level.fingerprint.hex()] = EstimateService(level, view, clock,
                                                                                   future_tolerance_seconds)
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
