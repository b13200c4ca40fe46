"""Periodic discovery (docs/discovery.md), hosted by the worker or by ``ocms discover --serve``.

    service = DiscoveryService(versions, bootstrap_servers=..., topic="ocms-reports", isolation="process")
    await service.refresh_once()                 # one pass over [now - window, now) of the topic
    status, body = service.page(request.query)   # GET /discovered?metric=NAME
    ExpositionGuard(registry).add("discovery", DiscoveryCollector(service))   # the top values, for Prometheus

A pass is :func:`agents.discovery_pass.discovery_pass` (in a thread, or in a child process:
:func:`agents.discovery_pass.pass_in_child`). :class:`WorkerDiscovery` is what the worker hosts:
the level reports it accepts, the service, its page, its collector and a counter.
"""

from __future__ import annotations

import time
from typing import Mapping

from cms_core import discovery

from .discovery_pass import discovery_pass, pass_in_child

#: Discovered values exported per metric as Prometheus ``value`` labels (bounded cardinality).
DEFAULT_EXPORTED_VALUES = 10
#: Label values longer than this are cut (a discovered string can be long; labels should not be).
MAX_LABEL_LENGTH = 100
#: A pass in a child process may take max(this, 2 intervals) seconds (10^7 reports decode in ~250 s).
PASS_TIMEOUT_FLOOR_S = 900.0


class DiscoveryService:
    """The latest discovery result per discoverable metric, refreshed from the source topic.

    Every ``interval_seconds`` (:meth:`run`), each metric version with a ``discovery:`` block
    is discovered over the window [now - window_seconds, now) of ``topic`` (read by time:
    Kafka keeps the log, nothing else is stored), one pass at a time, off the event loop: in a
    thread (``isolation="thread"``, ``ocms discover --serve``, where nothing else shares the
    loop) or in a child process (``"process"``, the worker: see :func:`agents.discovery_pass.pass_in_child`).
    :meth:`page` serves ``/discovered?metric=NAME``; :class:`DiscoveryCollector` exports
    the top discovered values. Hosted by the worker (:class:`WorkerDiscovery`) or run alone.
    """

    def __init__(self, versions, *, bootstrap_servers: str, topic: str, window_seconds: int = 3600,
                 interval_seconds: float = 300.0, alpha: float = 0.05, confidence: float = 0.95,
                 max_candidates: int = discovery.DEFAULT_MAX_CANDIDATES, clock=time.time, isolation: str = "thread"):
        if isolation not in ("thread", "process"):
            raise ValueError(f"isolation {isolation!r}: thread or process")
        self.versions = {v.metric: v for v in versions if v.discovery is not None}
        self.bootstrap_servers, self.topic = bootstrap_servers, topic
        self.window_seconds, self.interval_seconds = int(window_seconds), float(interval_seconds)
        self.alpha, self.confidence, self.max_candidates = alpha, confidence, max_candidates
        self.clock = clock
        self.isolation = isolation
        self.latest: dict[str, dict] = {}
        self.errors: dict[str, str] = {}
        self.runs = 0
        self.last_pass_seconds: float | None = None
        #: A pass in a child process is stopped after this long (the next one starts on schedule).
        self.pass_timeout_seconds = max(PASS_TIMEOUT_FLOOR_S, 2 * self.interval_seconds)

    async def refresh_once(self, now: float | None = None) -> None:
        import asyncio

        now = self.clock() if now is None else now
        arguments = (list(self.versions.values()), self.bootstrap_servers, self.topic, now - self.window_seconds, now)
        keywords = dict(alpha=self.alpha, confidence=self.confidence, max_candidates=self.max_candidates)
        started = time.monotonic()
        if self.isolation == "process":
            docs, errors = await pass_in_child(arguments, keywords, self.pass_timeout_seconds)
        else:
            docs, errors = await asyncio.to_thread(discovery_pass, *arguments, **keywords)
        self.last_pass_seconds = time.monotonic() - started
        for metric, doc in docs.items():
            self.latest[metric] = doc
            self.errors.pop(metric, None)
        self.errors.update(errors)
        self.runs += 1

    async def run(self) -> None:
        """Refresh forever, one pass per interval (a failed pass is logged and retried next interval)."""
        import asyncio
        import logging

        while True:
            try:
                await self.refresh_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep the worker alive; the API says what failed
                logging.getLogger(__name__).warning("discovery pass failed: %s", exc)
                for metric in self.versions:
                    self.errors[metric] = f"discovery pass failed: {exc}"
            await asyncio.sleep(self.interval_seconds)

    def answer(self, metric: str | None) -> tuple[int, dict]:
        """(HTTP status, JSON document) for /discovered?metric=NAME."""
        if not metric:
            return 400, {"error": "query parameter 'metric' is required (a metric with a discovery: block: "
                                  f"{', '.join(sorted(self.versions)) or 'none configured'})", "status": 400}
        if metric not in self.versions:
            return 404, {"error": f"metric {metric!r} is not discoverable here (discoverable: "
                                  f"{', '.join(sorted(self.versions)) or 'none'})", "status": 404}
        if metric not in self.latest:
            default = ("discovery passes are off on this worker (--discovery-interval-seconds 0)"
                       if self.interval_seconds <= 0 else "the first discovery pass has not finished yet")
            why = self.errors.get(metric, default)
            return 503, {"error": why, "status": 503}
        doc = self.latest[metric]
        if metric in self.errors:  # the latest pass failed: the previous result, saying so
            doc = dict(doc, stale=True, error=self.errors[metric])
        return 200, doc

    def page(self, query: Mapping[str, str]) -> tuple[int, bytes]:
        """``GET /discovered?metric=NAME``: (HTTP status, JSON body). The one handler behind the worker's
        page and ``ocms discover --serve``'s."""
        from .answers.encode import to_json

        extra = sorted(set(query) - {"metric"})
        if extra:
            status, doc = 400, {"error": f"unknown query parameter {extra[0]!r}; /discovered takes 'metric'",
                                "status": 400}
        else:
            status, doc = self.answer(query.get("metric"))
        return status, to_json(doc)


class DiscoveryCollector:
    """Prometheus: the top discovered values per metric (``value`` labels, at most ``top`` per metric)."""

    def __init__(self, service: DiscoveryService, top: int = DEFAULT_EXPORTED_VALUES):
        self.service, self.top = service, top

    def describe(self):
        """The families ``collect()`` yields (for no result yet)."""
        from types import SimpleNamespace

        from .metrics import families_without_samples

        return families_without_samples(DiscoveryCollector(SimpleNamespace(latest={}), self.top).collect())

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        frequency = GaugeMetricFamily("ocms_discovered_frequency", "estimated frequency of a discovered value",
                                      labels=["metric", "value"])
        low = GaugeMetricFamily("ocms_discovered_frequency_ci_low", "lower CI bound of a discovered value's frequency",
                                labels=["metric", "value"])
        high = GaugeMetricFamily("ocms_discovered_frequency_ci_high", "upper CI bound of a discovered value's frequency",
                                 labels=["metric", "value"])
        found = GaugeMetricFamily("ocms_discovered_values", "values discovered in the latest pass", labels=["metric"])
        omitted = GaugeMetricFamily("ocms_discovered_values_omitted", "discovered values not exported (beyond top)",
                                    labels=["metric"])
        reports = GaugeMetricFamily("ocms_discovery_reports", "discovery reports in the latest pass's window",
                                    labels=["metric"])
        threshold = GaugeMetricFamily("ocms_discovery_detection_threshold_ratio",
                                      "the frequency a value needed to be found (95%) in the latest pass's window",
                                      labels=["metric"])
        for metric, doc in sorted(self.service.latest.items()):
            values = doc["discovered"]
            found.add_metric([metric], float(len(values)))
            omitted.add_metric([metric], float(max(0, len(values) - self.top)))
            reports.add_metric([metric], float(doc["reports"]))
            needed = doc.get("detection_threshold")
            threshold.add_metric([metric], float("inf") if needed is None else needed)
            for item in values[: self.top]:
                label = item["value"][:MAX_LABEL_LENGTH]
                frequency.add_metric([metric, label], item["frequency"])
                low.add_metric([metric, label], item["ci_low"])
                high.add_metric([metric, label], item["ci_high"])
        yield from (frequency, low, high, found, omitted, reports, threshold)


def add_discovery_pages(app, service: DiscoveryService) -> None:
    """Route ``/discovered?metric=NAME`` on a Faust app (the worker's web server) and, when the service
    has discoverable metrics, the refresh task."""

    @app.page("/discovered")
    async def discovered(web, request):
        status, body = service.page(request.query)
        return web.bytes(body, content_type="application/json", status=status)

    if service.versions and service.interval_seconds > 0:
        @app.task
        async def refresh_discovery():
            await service.run()


class WorkerDiscovery:
    """Discovery hosted by the worker (``ocms worker --registry FILE``): what it accepts and what it serves.

    * ``level_params``: the discovery levels of the live versions of the registry's discoverable
      metrics. The worker's validator accepts their reports (acked, never dead-lettered as
      unknown fingerprints) and counts them in no table: they are read here, from the topic.
    * ``service``: a :class:`DiscoveryService` over the worker's source topic, passes in a child
      process every ``discovery_interval_seconds`` over the last ``discovery_window_seconds``.
    * ``install(app, registry)``: ``/discovered?metric=NAME`` on the worker's web server, the
      refresh task, the :class:`DiscoveryCollector` and a counter of the discovery reports seen.
    """

    def __init__(self, versions, level_params, settings):
        from prometheus_client import Counter

        self.level_params = tuple(level_params)
        self._metric_of = {}
        self.service = DiscoveryService(
            versions, bootstrap_servers=settings.bootstrap_servers, topic=settings.source_topic,
            window_seconds=getattr(settings, "discovery_window_seconds", 3600),
            interval_seconds=getattr(settings, "discovery_interval_seconds", 300.0), isolation="process")
        self.received = Counter("ocms_discovery_reports_received", "discovery-level reports the worker acked "
                                "(read by discovery from the topic, counted by no table)", ["metric"], registry=None)

    @classmethod
    def build(cls, catalog, settings) -> "WorkerDiscovery":
        """From the catalog's registry: the live versions with a ``discovery:`` block (none: nothing to do)."""
        from registry.discovery import discovery_of

        served = {s.version.fingerprint for s in catalog.by_fingerprint.values()}
        versions, levels, metric_of = [], [], {}
        for spec in catalog.registry.metrics:
            for version in spec.live_versions:
                if getattr(version, "discovery", None) is None or version.fingerprint not in served:
                    continue
                params = discovery_of(version).params_by_level
                levels.extend(params)
                metric_of.update({p.fingerprint: version.metric for p in params})
                if version is spec.live_versions[-1]:  # the newest live version is what devices report with
                    versions.append(version)
        self = cls(versions, levels, settings)
        self._metric_of = metric_of
        return self

    def install(self, app, metrics) -> None:
        """Routes on ``app``; the collector behind ``metrics.guard`` (agents.metrics.PipelineMetrics)."""
        add_discovery_pages(app, self.service)
        metrics.guard.add("discovery", DiscoveryCollector(self.service))
        metrics.registry.register(self.received)

    def count(self, messages) -> None:
        """Count the acked discovery messages of a checkpointed micro-batch (``processor.DiscoveryMessage``)."""
        for message in messages:
            self.received.labels(self._metric_of.get(message.fingerprint, "unknown")).inc(message.reports)

