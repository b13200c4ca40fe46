"""The collector's HTTP service (aiohttp): uploads in, acknowledged Kafka frames out.

Routes:

* ``POST /v1/reports`` -- the parameter fingerprint in the messages decides the metric;
* ``POST /v1/metrics/{name}/reports`` -- the same, and every message must belong to
  metric ``name`` (404 for a metric the registry does not hold, 400 ``foreign_metric``);
* ``GET /v1/metrics``, ``GET /v1/metrics/{name}`` -- the live metric versions (parameters,
  fingerprint, categories): what a client needs to privatize and upload;
* ``GET /healthz`` -- 200 while Kafka is reachable, else 503 (load balancers drain it);
* ``GET /metrics`` -- Prometheus exposition.

Answers of an upload (JSON ``{"status": ..., "reason": ..., "detail": ...}``):
202 after Kafka acknowledged the frame holding it; 400 malformed or foreign
(the wire-format reasons of the worker's dead-letter topic, plus upload-level
ones); 401/403 token missing or unknown / not allowed for the metric; 404
unknown metric; 408 body too slow; 413 body or report count over the limit;
415 content type; 422 idempotency key reused for another body; 429 rate limit
(Retry-After); 503 Kafka unavailable or queue full (Retry-After).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import math
import re
import time
import weakref

from aiohttp import hdrs, web
from multidict import istr
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from cms_core.version import __version__, build_info_labels
from infra import kafka_security
from infra.framing import StartStopContext
from infra.http_edge import (ConnectionGuard, ConnectionMetrics, ErrorAnswers, GuardedAppRunner, close_after,
                             json_errors, quiet_aiohttp_server_log, server_tls_context)
from infra.kafka import KafkaUnavailableError

from .cors import CorsPolicy
from .guard import (
    AuthError, Authenticator, IDEMPOTENCY_KEY, KEY_REUSED, IdempotencyCache, KeyReusedError, RateLimiter, body_digest,
    load_tokens,
)
from .exactly_once.commit import KeyHeld
from .exactly_once.log import leases_written_for, write_leases_for
from .exactly_once.shared import IdempotencyPending, SharedIdempotency
from .lanes import Lane, ShuffleLane
from .outlet import KafkaOutlet
from .shuffle import shuffle_claim_key
from .uploads import BINARY_CONTENT_TYPES, JSON_CONTENT_TYPE, UploadParser, UploadRejected

#: The retry header, as an ``istr`` (case-insensitive headers look it up without folding its case per request).
IDEMPOTENCY_KEY_HEADER = istr("Idempotency-Key")

log = logging.getLogger(__name__)

#: Access log without the client address (%a) or user agent: privacy at the edge.
ACCESS_LOG_FORMAT = '"%r" %s %b %Tf'
ACCESS_LOG_FORMAT_WITH_CLIENT = '%a "%r" %s %b %Tf "%{User-Agent}i"'

COLLECTOR_KEY = web.AppKey("collector", object)

#: Client faults answered after --reject-delay-ms (not 408: already slow; not 429/503: Retry-After says when).
TARPIT_STATUSES = frozenset((400, 401, 403, 404, 413, 415, 422))
#: The longest a client fault waits, and the faults in a row after which a connection is closed.
MAX_REJECT_DELAY_S = 5.0
CLOSE_AFTER_FAULTS = 20


#: Buckets of ocms_collector_shuffled_batch_reports.
SHUFFLE_BUCKETS = (10, 100, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000, 10_000_000)
#: Buckets of ocms_collector_request_seconds.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class UploadCounts:
    """``ocms_collector_requests_total{status,reason}`` and the ``ocms_collector_request_seconds`` histogram.

    Counted per upload in plain Python (a dict entry and a bucket slot: the collector's one event
    loop needs no locks) and turned into metric families only when scraped: the same exposition as a
    prometheus_client Counter and Histogram (``_created`` samples included), without their per-call
    label lookups, locks and bucket loops on every upload.
    """

    def __init__(self, buckets=LATENCY_BUCKETS, clock=time.time):
        self.bounds = tuple(float(b) for b in buckets) + (math.inf,)
        self.clock = clock
        self.answers: dict[tuple[int, str], int] = {}  # (status, reason) -> uploads
        self.created: dict[tuple[int, str], float] = {}
        self.buckets = [0] * len(self.bounds)  # per bucket, not cumulative
        self.seconds = 0.0
        self.histogram_created = clock()

    def count(self, status: int, reason: str, seconds: float) -> None:
        key = (status, reason)
        answers = self.answers
        if key in answers:
            answers[key] += 1
        else:
            answers[key] = 1
            self.created[key] = self.clock()
        self.buckets[bisect.bisect_left(self.bounds, seconds)] += 1  # le: the first bound >= seconds
        self.seconds += seconds

    def collect(self):
        created = prometheus_metrics._use_created  # prometheus_client's disable_created_metrics() switch
        requests = CounterMetricFamily("ocms_collector_requests", "Uploads answered, by status and reason",
                                       labels=["status", "reason"])
        for (status, reason), n in self.answers.items():
            requests.add_metric([str(status), reason], n, created=self.created[(status, reason)] if created else None)
        yield requests
        latency = HistogramMetricFamily("ocms_collector_request_seconds", "Time to answer an upload")
        cumulative, buckets = 0, []
        for bound, n in zip(self.bounds, self.buckets):
            cumulative += n
            buckets.append((floatToGoString(bound), cumulative))
        latency.add_metric([], buckets, self.seconds)
        if created:
            latency.samples.append(Sample("ocms_collector_request_seconds_created", {}, self.histogram_created))
        yield latency

    def describe(self):
        return [CounterMetricFamily("ocms_collector_requests", ""),
                HistogramMetricFamily("ocms_collector_request_seconds", "")]


class CollectorMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.uploads = UploadCounts()
        r.register(self.uploads)
        self.reports_accepted = Counter("ocms_collector_reports_accepted", "Reports in uploads answered 202",
                                        ["metric"], registry=r)
        self.frames_produced = Counter("ocms_collector_frames_produced", "Frames acknowledged by Kafka",
                                       ["metric"], registry=r)
        self.reports_produced = Counter("ocms_collector_reports_produced", "Reports in frames acknowledged by Kafka",
                                        ["metric"], registry=r)
        self.frames_failed = Counter("ocms_collector_frames_failed", "Frames Kafka did not acknowledge",
                                     ["metric"], registry=r)
        #: Read when scraped (set_function of the outlet's count), not set on every upload and frame.
        self.queue_reports = Gauge("ocms_collector_queue_reports", "Reports held in memory (buffered or in flight)",
                                   registry=r)
        self.kafka_available = Gauge("ocms_collector_kafka_available", "1 while Kafka acknowledges frames", registry=r)
        self.idempotent_replays = Counter("ocms_collector_idempotent_replays",
                                          "Retried uploads answered from the idempotency cache", registry=r)
        self.idempotency_keys = Gauge("ocms_collector_idempotency_keys", "Keys in the idempotency cache", registry=r)
        self.late_offsets_skipped = Counter("ocms_collector_late_offsets_skipped",
                                            "Offsets of the idempotency log, its redo topic or a settle's scan that "
                                            "were never readable within the wait for late batches, passed", registry=r)
        self.http_errors = Counter("ocms_collector_http_errors",
                                   "Error answers outside the upload routes (routing, method, malformed requests, "
                                   "server errors, header timeouts), by reason", ["reason"], registry=r)
        edge = ConnectionMetrics("ocms_collector", "the collector", r, "--max-connections")
        self.connections, self.connections_refused, self.connections_closed = (
            edge.connections, edge.connections_refused, edge.connections_closed)
        Gauge("ocms_build_info", "1, labelled with this collector's release and wire format (cms_core/version.py)",
              ["version", "wire_format"], registry=r).labels(**build_info_labels()).set(1)
        self.idempotency_settled = Counter("ocms_collector_idempotency_settled",
                                           "In-doubt earlier attempts settled by fencing their collector, by outcome",
                                           ["outcome"], registry=r)
        # Shuffling (--shuffle-min-reports; collector/shuffle.py)
        self.shuffled_batches = Counter("ocms_collector_shuffled_batches", "Shuffled batches produced (every frame "
                                        "acknowledged)", ["metric"], registry=r)
        self.shuffled_batch_reports = Histogram("ocms_collector_shuffled_batch_reports", "Reports per shuffled batch "
                                                "produced (the n its frames' ocms-shuffle-n header states)",
                                                buckets=SHUFFLE_BUCKETS, registry=r)
        self.shuffle_held = Gauge("ocms_collector_shuffle_held_reports", "Reports held for the next shuffled batch "
                                  "(all metric versions)", registry=r)
        self.batches_completed = Counter("ocms_collector_shuffled_batches_completed",
                                         "Shuffled batches found cut short by a kill and completed from the redo topic",
                                         registry=r)
        self._accepted: dict = {}
        self.count = self.uploads.count  # one answered upload: (status, reason, seconds)

    def accepted(self, metric: str, n: int) -> None:
        """Reports of an upload answered 202 (label children cached: labels() costs more than the increment)."""
        child = self._accepted.get(metric)
        if child is None:
            child = self._accepted[metric] = self.reports_accepted.labels(metric)
        child.inc(n)


def _json(status: int, doc: dict, headers: dict | None = None, body: bytes | None = None) -> web.Response:
    """``web.json_response(doc)`` (same body and ``Content-Type: application/json; charset=utf-8``), from
    ``body`` when the caller already holds the document's encoding."""
    if body is None:
        body = json.dumps(doc).encode()
    response = web.Response(body=body, status=status, headers=headers, content_type="application/json",
                            charset="utf-8")
    response.ocms_reason = doc.get("reason", "none")  # the metrics label, without parsing the body again
    return response


#: The {metric} of /v1/metrics/{metric}/reports as the router matches it (aiohttp's default: [^{}/]+).
_METRIC_SEGMENT = re.compile(r"[^{}/]+")
#: Encoded 202 documents kept (by reports, metric, version: a handful in practice).
MAX_ACCEPTED_BODIES = 4096


def _answer(status: int, reason: str, detail: str, headers: dict | None = None) -> web.Response:
    return _json(status, {"status": status, "reason": reason, "detail": detail}, headers)


class Collector:
    """The service: registry, guards, lanes and the Kafka outlet, behind an aiohttp app."""

    def __init__(self, settings, registry, *, producer_factory=None, clock=time.time):
        self.settings = settings
        self.registry = registry
        self.clock = clock
        kafka_security.use(settings.kafka_config_file)  # SASL and TLS of every Kafka client of this process
        write_leases_for(settings.upgrade_from)  # the idempotency log's lease records this process writes
        self.metrics = CollectorMetrics()
        self.parser = UploadParser(registry, settings.max_upload_reports)
        self.auth = Authenticator(load_tokens(settings.tokens_file) if settings.tokens_file else None)
        self.limiter = RateLimiter(settings.rate_limit, settings.rate_burst, settings.app_rate_limit,
                                   settings.app_rate_burst)
        self.idempotency = IdempotencyCache(settings.idempotency_window_seconds, settings.idempotency_max_keys)
        # retries counted once across restarts and replicas (collector/exactly_once/)
        self.shared = SharedIdempotency(settings, self.metrics) \
            if settings.idempotency_topic and self.idempotency.enabled and producer_factory is None else None
        self.outlet = KafkaOutlet(settings, self.metrics, producer_factory, log=self.shared)
        self.claim_key = shuffle_claim_key(settings)  # signs shuffled batches' claims (cms_core.claims)
        self.lanes: dict[bytes, Lane] = {}
        self.retry_after = str(settings.retry_after_seconds)
        self.closing = False
        self.reject_delay = settings.reject_delay_ms / 1000
        self.strikes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> faults in a row
        self._accepted_bodies: dict[tuple, bytes] = {}
        self.cors = CorsPolicy(settings.cors_origins)
        self._device_config: bytes | None = None
        self.metrics.kafka_available.set(0)
        self.metrics.queue_reports.set_function(lambda: self.outlet.queued)
        self.metrics.shuffle_held.set_function(lambda: sum(getattr(lane, "held", 0) for lane in self.lanes.values()))
        #: JSON error answers outside the upload handler (routes, methods, malformed requests, failures)
        self.answers = ErrorAnswers(lambda status, reason: self.metrics.http_errors.labels(reason).inc(),
                                    logging.getLogger("ocms.collector.errors"),
                                    client_addresses=settings.access_log_client_addresses)

    # ------------------------------------------------------------------- app
    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body_bytes + 1)
        app[COLLECTOR_KEY] = self
        app.router.add_post("/v1/reports", self.post_reports)
        app.router.add_post("/v1/metrics/{metric}/reports", self.post_reports)
        app.router.add_get("/v1/metrics", self.list_metrics)
        app.router.add_get("/v1/metrics/{metric}", self.describe_metric)
        app.router.add_get("/v1/device-config", self.device_config)
        if self.cors:
            self.cors.install(app)
        app.middlewares.append(json_errors(self.answers))  # inside CORS: error answers get its headers too
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.prometheus)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_startup(self, app) -> None:
        await self.outlet.start()

    async def _on_shutdown(self, app) -> None:
        # Uploads still arriving on open connections get 503 from here on; those already in a
        # lane are sent and answered before the producer stops.
        self.closing = True
        await self.outlet.close(list(self.lanes.values()))

    # --------------------------------------------------------------- handlers
    def _metric_doc(self, spec) -> dict:
        """What a client needs to report: each live version's parameters and fingerprint."""
        return {"name": spec.name, "description": spec.description, "unit": spec.unit,
                "upload": f"/v1/metrics/{spec.name}/reports",
                "versions": [v.describe() for v in spec.live_versions]}

    async def list_metrics(self, request: web.Request) -> web.Response:
        return web.json_response({"metrics": [self._metric_doc(spec) for spec in self.registry.metrics]})

    async def describe_metric(self, request: web.Request) -> web.Response:
        try:
            spec = self.parser.metric(request.match_info["metric"])
        except UploadRejected as exc:
            return _answer(exc.status, exc.reason, exc.detail)
        return web.json_response(self._metric_doc(spec))

    def _shared(self) -> SharedIdempotency | None:
        """The shared idempotency log while it is on (a broker without transactions turns it off)."""
        return self.shared if self.shared is not None and self.shared.enabled else None

    async def device_config(self, request: web.Request) -> web.Response:
        """``ocms registry device-config`` of the collector's registry: what a device client (producer/js) needs."""
        if self._device_config is None:
            from registry.device import device_config

            self._device_config = json.dumps(device_config(self.registry), ensure_ascii=False).encode()
        return web.Response(body=self._device_config, content_type="application/json", charset="utf-8")

    async def healthz(self, request: web.Request) -> web.Response:
        shared = self._shared()
        healthy = self.outlet.available and (shared is None or shared.ready)
        doc = {"kafka": "available" if self.outlet.available else "unavailable", "queued_reports": self.outlet.queued,
               "metrics": len(self.registry.metrics), "version": __version__,  # issue 39 (cms_core/version.py)
               "upgrade_from": leases_written_for(),  # the earlier release whose log records it writes
               "idempotency": ("shared" if shared.ready else "reading") if shared is not None else "per-process"}
        if self.outlet.last_error:
            doc["error"] = self.outlet.last_error
        if not healthy:  # a state, not a fault: the load balancer drains this replica
            doc["reason"] = "kafka_unavailable" if not self.outlet.available else "reading_idempotency_log"
        return web.json_response(doc, status=200 if healthy else 503,
                                 headers=None if healthy else {"Retry-After": self.retry_after})

    async def prometheus(self, request: web.Request) -> web.Response:
        shared = self._shared()
        self.metrics.idempotency_keys.set(len(shared.state) if shared is not None else len(self.idempotency))
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def post_reports(self, request: web.Request) -> web.Response:
        """The routes' handler (the router's path: uploads that :meth:`fast_uploads` leaves to the app)."""
        return await self._post(request, request.match_info.get("metric"))

    def fast_uploads(self, handler):
        """The HTTP server's request handler, with the two upload routes taken before the app's router.

        ``POST /v1/reports`` and ``POST /v1/metrics/{metric}/reports`` go straight to the upload
        handler: the same handler the routes name, without the router's resolution and per-request
        match objects (a fifth of a single-report upload's CPU time). Everything else (other
        methods and paths, ``Expect: 100-continue``, a percent-encoded path) takes the app's full
        path, ``handler``, as before.
        """
        post = self._post
        segment = _METRIC_SEGMENT.fullmatch

        async def dispatch(request: web.BaseRequest) -> web.StreamResponse:
            if request.method == "POST" and hdrs.EXPECT not in request.headers:
                path = request.path
                if path == "/v1/reports":
                    return await post(request, None)
                if path.startswith("/v1/metrics/") and path.endswith("/reports") and "%" not in request.raw_path:
                    name = path[12:-8]
                    if segment(name):
                        return await post(request, name)
            return await handler(request)

        return dispatch

    async def _post(self, request: web.BaseRequest, metric: str | None) -> web.Response:
        started = time.perf_counter()
        try:
            response = await self._upload(request, metric)
        except UploadRejected as exc:
            response = _answer(exc.status, exc.reason, exc.detail)
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as exc:  # a bug: a JSON 500 and one log line (the upload counts below)
            response = self.answers.for_exception(request, exc, count=False)
        self.metrics.count(response.status, response.ocms_reason, time.perf_counter() - started)
        if self.cors and (cors := self.cors.headers(request)) is not None:
            response.headers.update(cors)
        if self.reject_delay and (self.strikes or response.status in TARPIT_STATUSES):
            await self._tarpit(request, response)
        return response

    async def _tarpit(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Slow down a connection that keeps sending client faults.

        The n-th fault in a row on one keep-alive connection is answered after
        ``reject_delay * 2**(n-1)`` (at most MAX_REJECT_DELAY_S), and the connection is closed
        after CLOSE_AFTER_FAULTS: a closed-loop reject storm slows itself down instead of crowding
        valid uploads out of the event loop (a timer costs no CPU). An accepted upload resets it.
        """
        # The connection's handler, not its transport: a TLS transport (asyncio's _SSLProtocolTransport) takes
        # no weak reference, and every client fault over TLS was a 500.
        connection = request.protocol if request.transport is not None else None
        if response.status not in TARPIT_STATUSES:
            if connection is not None and self.strikes:
                self.strikes.pop(connection, None)
            return
        strikes = 1
        if connection is not None:
            strikes = self.strikes.get(connection, 0) + 1
            self.strikes[connection] = strikes
        if strikes >= CLOSE_AFTER_FAULTS:
            response.force_close()
        await asyncio.sleep(min(MAX_REJECT_DELAY_S, self.reject_delay * 2 ** min(strikes - 1, 20)))

    async def _upload(self, request: web.BaseRequest, metric: str | None) -> web.Response:
        try:
            app = self.auth.identify(request.headers.get(hdrs.AUTHORIZATION))
        except AuthError as exc:
            return _answer(401, exc.reason, str(exc), headers={"WWW-Authenticate": 'Bearer realm="ocms"'})
        if metric is not None:
            self.parser.metric(metric)  # 404 unknown_metric before the body is read
        if app is not None and app.metrics is not None and metric is not None and metric not in app.metrics:
            return _answer(403, "metric_not_allowed", f"application {app.name!r} may not upload metric {metric!r}")
        limited = self.limiter.check(app)
        if limited is not None:
            reason, wait = limited
            return _answer(429, reason, "over the rate limit; retry after the Retry-After seconds",
                           headers={"Retry-After": str(max(1, math.ceil(wait)))})
        if not self.outlet.available:
            return _answer(503, "kafka_unavailable", "Kafka is unavailable; retry later",
                           headers={"Retry-After": self.retry_after})
        length = request.content_length
        if length is not None and length > self.settings.max_body_bytes:
            return _answer(413, "body_too_large", f"{length} bytes; at most {self.settings.max_body_bytes} per upload")
        ctype = request.content_type  # aiohttp says application/octet-stream when there is no Content-Type
        if hdrs.CONTENT_TYPE not in request.headers:
            return _answer(415, "unsupported_content_type",
                           f"no Content-Type: send {BINARY_CONTENT_TYPES[0]} (wire-v1 messages) or {JSON_CONTENT_TYPE}")
        if ctype not in BINARY_CONTENT_TYPES and ctype != JSON_CONTENT_TYPE:
            return _answer(415, "unsupported_content_type",
                           f"Content-Type {ctype!r}: use {BINARY_CONTENT_TYPES[0]} (wire-v1 messages) or {JSON_CONTENT_TYPE}")
        key = request.headers.get(IDEMPOTENCY_KEY_HEADER)
        if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
            return _answer(400, "bad_idempotency_key", "Idempotency-Key: 16-128 characters of [A-Za-z0-9_-], "
                           "random per upload")
        body = await self._read_body(request)
        if body is None:  # closed with the answer: aiohttp would linger reading the rest for up to 10 s more
            return close_after(request, _answer(408, "body_timeout",
                                                f"the body did not arrive within {self.settings.body_timeout_seconds:g} s"))
        if len(body) > self.settings.max_body_bytes:
            return _answer(413, "body_too_large", f"more than {self.settings.max_body_bytes} bytes per upload")
        cache_key = None
        if key is not None and self.idempotency.enabled:
            shared = self._shared()
            if shared is not None:  # the log answers retries (SharedIdempotency.claim says how)
                try:
                    claimed = shared.claim(app.name if app is not None else "", key, body_digest(body))
                except IdempotencyPending as exc:
                    return _json(*self._pending(str(exc), exc.retry_after))
                if claimed is None:
                    return _answer(422, KeyReusedError.reason, KEY_REUSED)
                shared_key, _, first = claimed
                status, doc, headers = 500, {}, None
                try:  # inline, not a coroutine of its own: each await level cost ~1 us per upload (py-spy)
                    status, doc, headers = await self._accept(body, ctype, metric, app, shared_key)
                finally:
                    shared.answered(shared_key, first)
                if status == 202:
                    return _json(status, doc, headers, self._accepted_body(doc))
                return _json(status, doc, headers)
            cache_key = (app.name if app is not None else "", key)
            digest = body_digest(body)
            try:
                earlier = self.idempotency.claim(cache_key, digest)
            except KeyReusedError as exc:
                return _answer(422, exc.reason, str(exc))
            if earlier is not None:
                status, doc = await asyncio.shield(earlier)
                self.metrics.idempotent_replays.inc()
                if status == 202:
                    return _json(status, doc, headers={"Idempotent-Replayed": "true"})
                # the first attempt failed (its key is forgotten): try this one afresh
                self.idempotency.begin(cache_key, digest)
        status, doc, headers = 500, {}, None
        try:
            status, doc, headers = await self._accept(body, ctype, metric, app)
        finally:
            if cache_key is not None:
                self.idempotency.finish(cache_key, status, doc)
        if status == 202:
            return _json(status, doc, headers, self._accepted_body(doc))
        return _json(status, doc, headers)

    def _accepted_body(self, doc: dict) -> bytes:
        """The encoded 202 document (the same few for all uploads: reports, metric and version vary little)."""
        key = (doc["accepted"], doc["metric"], doc["version"])
        body = self._accepted_bodies.get(key)
        if body is None:
            if len(self._accepted_bodies) >= MAX_ACCEPTED_BODIES:
                self._accepted_bodies.clear()
            body = self._accepted_bodies[key] = json.dumps(doc).encode()
        return body

    async def _accept(self, body: bytes, ctype: str, metric: str | None, app,
                      shared_key: bytes | None = None) -> tuple[int, dict, dict | None]:
        records = batch = None
        try:
            if ctype == JSON_CONTENT_TYPE:
                upload = self.parser.parse_json(body, metric)
                version, batch, n = upload.version, upload.batch, len(upload.batch)
            else:
                framed = self.parser.frame_binary(body, metric)
                if framed is None:  # not well framed: the full decode names the fault
                    upload = self.parser.parse_binary(body, metric)
                    version, batch, n = upload.version, upload.batch, len(upload.batch)
                else:
                    version, records, n = framed
        except UploadRejected as exc:
            return exc.status, {"status": exc.status, "reason": exc.reason, "detail": exc.detail}, None
        if app is not None and app.metrics is not None and version.metric not in app.metrics:
            return 403, {"status": 403, "reason": "metric_not_allowed",
                         "detail": f"application {app.name!r} may not upload metric {version.metric!r}"}, None
        accepted = {"status": 202, "reason": "accepted", "accepted": n, "metric": version.metric, "version": version.version}
        if shared_key is not None:
            holder = self.shared.holder(shared_key)
            if holder is not None:  # an earlier attempt of this upload (any collector, any process)
                try:
                    stored = await self.shared.settle(holder)
                except IdempotencyPending as exc:
                    return self._pending(str(exc), exc.retry_after)
                except Exception as exc:
                    return self._pending(f"settling the earlier attempt: {type(exc).__name__}: {exc}", 0)
                if stored:
                    self.metrics.idempotent_replays.inc()
                    return 202, accepted, {"Idempotent-Replayed": "true"}
        outlet = self.outlet
        if outlet.queued + n > self.settings.max_queued_reports:
            return 503, {"status": 503, "reason": "queue_full", "detail": "too many reports waiting for Kafka; retry later"}, \
                {"Retry-After": self.retry_after}
        if not outlet.available:
            return 503, {"status": 503, "reason": "kafka_unavailable", "detail": "Kafka is unavailable; retry later"}, \
                {"Retry-After": self.retry_after}
        if self.closing:
            return 503, {"status": 503, "reason": "shutting_down", "detail": "this collector is stopping; retry"}, \
                {"Retry-After": self.retry_after}
        lane = self.lanes.get(version.fingerprint)
        if lane is None:
            lane = self.lanes[version.fingerprint] = self._lane(version)
        outlet.queued += n
        try:
            if records is not None:
                await lane.submit(records, n, shared_key)  # validated with the other uploads of this loop turn
            else:
                await (await lane.add(batch, self.clock(), shared_key))
        except KeyHeld as exc:  # an earlier attempt took the key first (the outlet released the queue places)
            if exc.stored:
                self.metrics.idempotent_replays.inc()
                return 202, accepted, {"Idempotent-Replayed": "true"}
            return self._pending("an earlier attempt of this upload is in doubt", 0)
        except KafkaUnavailableError as exc:  # the frame failed (the outlet released its queue places)
            return 503, {"status": 503, "reason": "kafka_unavailable", "detail": f"Kafka did not acknowledge: {exc}"}, \
                {"Retry-After": self.retry_after}
        except UploadRejected as exc:  # a report of this upload failed the batch validation
            self._release(n)
            return exc.status, {"status": exc.status, "reason": exc.reason, "detail": exc.detail}, None
        except Exception as exc:  # the lane closed under us (shutdown): nothing of this upload was buffered
            self._release(n)
            log.warning("upload not buffered: %s: %s", type(exc).__name__, exc)
            return 503, {"status": 503, "reason": "shutting_down", "detail": "this collector is stopping; retry"}, \
                {"Retry-After": self.retry_after}
        self.metrics.accepted(version.metric, n)
        return 202, accepted, None

    def _lane(self, version) -> Lane:
        """The lane of a metric version: frames as uploads come, or shuffled batches (--shuffle-min-reports)."""
        s = self.settings
        args = (version, self.outlet, s.frame_max_reports, s.frame_max_latency_ms / 1000,
                int(getattr(version, "bucket_seconds", 60) or 60))
        lane = ShuffleLane(*args, min_reports=s.shuffle_min_reports, max_seconds=s.shuffle_max_seconds,
                           claim_key=self.claim_key) \
            if s.shuffle_min_reports else Lane(*args)
        lane.clock = self.clock
        return lane

    def _pending(self, detail: str, retry_after: float) -> tuple[int, dict, dict]:
        wait = str(max(int(self.retry_after), math.ceil(retry_after)))
        return 503, {"status": 503, "reason": "idempotency_pending",
                     "detail": f"{detail}; retry with the same Idempotency-Key"}, {"Retry-After": wait}

    def _release(self, n: int) -> None:
        self.outlet.queued -= n

    async def _read_body(self, request: web.BaseRequest) -> bytes | None:
        limit = self.settings.max_body_bytes
        content = request.content
        if content.is_eof():  # the whole body came with the headers (small uploads): no timer, no wait
            return content.read_nowait()
        try:
            async with asyncio.timeout(self.settings.body_timeout_seconds):
                chunks, size = [], 0
                async for chunk in content.iter_any():
                    size += len(chunk)
                    chunks.append(chunk)
                    if size > limit:
                        break  # answered 413; the rest is not read
                return b"".join(chunks)
        except TimeoutError:
            return None


class CollectorServer(StartStopContext):
    """The collector on a TCP port inside the running event loop (``ocms collector``, tests, ``ocms run``).

        async with CollectorServer(settings, registry) as server:   # port 0 = a free port
            print(server.url)
    """

    def __init__(self, settings, registry, *, producer_factory=None):
        self.settings = settings
        self.collector = Collector(settings, registry, producer_factory=producer_factory)
        self.runner: web.AppRunner | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.settings.tls_cert else "http"
        return f"{scheme}://{self.settings.host}:{self.port}"

    async def start(self) -> "CollectorServer":
        settings = self.settings
        access_log = logging.getLogger("ocms.collector.access") if settings.access_log else None
        fmt = ACCESS_LOG_FORMAT_WITH_CLIENT if settings.access_log_client_addresses else ACCESS_LOG_FORMAT
        collector = self.collector
        quiet_aiohttp_server_log()
        self.guard = ConnectionGuard(settings.max_connections, settings.header_timeout_seconds, collector.metrics,
                                     logging.getLogger("ocms.collector.connections"), collector.answers,
                                     idle_timeout=settings.idle_timeout_seconds)
        collector.metrics.connections.set_function(lambda: len(self.guard))
        # keepalive_timeout: aiohttp closes a connection without a request after it (from its start too)
        self.runner = GuardedAppRunner(collector.make_app(), guard=self.guard, answers=collector.answers,
                                       access_log=access_log, access_log_format=fmt, handle_signals=False,
                                       keepalive_timeout=settings.idle_timeout_seconds)
        await self.runner.setup()
        server = self.runner.server
        server.request_handler = collector.fast_uploads(server.inner_request_handler)  # before any connection
        ssl_context = server_tls_context(settings.tls_cert, settings.tls_key, settings.tls_client_ca) \
            if settings.tls_cert else None
        site = web.TCPSite(self.runner, settings.host, settings.port, ssl_context=ssl_context, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Stop taking uploads, answer those in flight (their frames are sent and acknowledged), stop."""
        runner, self.runner = self.runner, None
        if runner is not None:
            await runner.cleanup()
