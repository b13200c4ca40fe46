"""The device reporter: privatize one value (CSPRNG path) and deliver it to Kafka.

    ledger = PrivacyLedger("ledger.db", budget=8.0)
    async with DeviceReporter(params, bootstrap_servers="host:9092", topic="ocms-reports",
                              device_key=new_device_key(), metric="app_launch",
                              ledger=ledger) as reporter:
        delivery = await reporter.report(42)        # waits until the broker acknowledged it

Named metrics from the registry (deploy/registry.yaml, docs/registry.md): one reporter for
every metric of the registry, each report naming its metric and its value::

    async with DeviceReporter(load_registry("deploy/registry.yaml"), bootstrap_servers=...,
                              topic="ocms-reports", device_key=new_device_key(),
                              ledger=ledger) as reporter:
        await reporter.report("flight_dest", "ATL")  # the metric's newest live version
        await reporter.report("carrier@1", "UA")     # a given live version (during a rotation)

A registry reporter looks the metric up (UnknownMetricError), maps the value name with
:meth:`registry.MetricVersion.value_from_name` (InvalidValueError naming the metric; a numeric
metric's number is clipped and mapped to its bucket's index, ``reporter.report("latency_ms", 12.5)``:
registry/numeric.py, an InvalidParameterError naming ``value`` for NaN or a non-number; a numeric metric
reported as a hierarchical histogram draws one level per report and reports its bucket's node there with that
level's parameters and fingerprint: :func:`cms_core.hierarchy.draw_node`),
and charges the metric's name in the ledger: every version of one metric shares one
budget, and distinct metrics are accounted apart -- both before anything is charged.

Order of operations in :meth:`DeviceReporter.submit`, chosen so that privacy
accounting is never behind what left the device:

1. the value is validated (``InvalidValueError`` before anything is charged);
2. a report is privatized with :func:`cms_core.privatize.privatize` (CSPRNG)
   and encoded with :func:`cms_core.wire.encode_report` -- nothing has left
   the device, so this costs nothing;
3. the ledger charges ``params.epsilon`` for ``metric`` (durably) or, with
   memoization, returns the report already sent for the same value in this
   period (free); over budget raises ``PrivacyBudgetError`` and nothing is sent;
4. the message is put on a bounded queue (``await`` while it is full:
   back-pressure), and a background task sends it with aiokafka
   (``key=device_key``, ``acks="all"``), retrying transient errors with
   exponential backoff; permanent errors and exhausted retries surface as
   :class:`DeliveryError` on the caller's future.

A charged report whose delivery fails stays charged (it may have reached the
broker): the ledger errs on the side of over-counting. With memoization, an
application retry of the same value in the same period re-sends the same bytes
for free. Retries are at-least-once: a report the broker stored but whose
acknowledgement was lost can be stored twice (this broker has no idempotent
producer). The value, and the value key, are never logged.

HTTP transport (``transport=HttpTransport(url)``): instead of Kafka, reports go
to an ``ocms collector`` (docs/collector.md). Queued reports are uploaded
together (up to ``max_reports`` per request) with one random
``Idempotency-Key`` per upload, reused by every retry of that upload, so a
retry after a lost answer is counted once. 429 and 503 are retried after the
answer's ``Retry-After`` (at most ``max_backoff_s``), connection errors and
timeouts with exponential backoff; any other 4xx is permanent. The ledger
charges before the first send exactly as for Kafka. Over HTTP the device sends
no key: the collector keys frames itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import secrets
from dataclasses import dataclass
from typing import Any, Callable

from cms_core.errors import ClientTooOldError, InvalidParameterError, OCMSError
from cms_core.hierarchy import draw_node
from cms_core.hybrid import draw_mean_message
from cms_core.params import OCMSParams
from cms_core.privatize import privatize
from cms_core.values import encode_value
from cms_core import wire
from cms_core.wire import encode_report
from cms_core.version import too_old_for

from infra.kafka import KAFKA, BrokerProfile, aiokafka_producer, is_retriable
from infra.kafka import producer_config as kafka_producer_config
from .ledger import PrivacyLedger

log = logging.getLogger(__name__)

#: HttpTransport's default per-request timeout. A collector that shuffles holds every upload until its batch
#: closes: by default up to 60 s (``--shuffle-max-seconds``), then up to 2 x 5 s for Kafka's acknowledgement
#: (``--kafka-timeout-ms``), so a shorter timeout turns every upload of a quiet metric into a timeout and a
#: retry. 90 s is above that with room for the collector's listing of the batch (tests/collector/test_units.py
#: checks it against the collector's defaults). A collector with a longer wait needs ``timeout_s`` above it.
DEFAULT_HTTP_TIMEOUT_S = 90.0


class DeliveryError(OCMSError, RuntimeError):
    """A report could not be delivered to Kafka.

    ``retriable`` says whether the last error was transient (retries were
    exhausted) or permanent (not retried); ``attempts`` counts sends tried.
    The original aiokafka exception is ``__cause__``.
    """

    def __init__(self, message: str, *, attempts: int = 0, retriable: bool = False):
        super().__init__(message)
        self.attempts = attempts
        self.retriable = retriable


class ReporterClosedError(DeliveryError):
    """The reporter is not running (not started, or closed) and takes no reports."""


@dataclass(frozen=True)
class ReportDelivery:
    """Where one report landed.

    ``message`` is the privatized wire message that was sent (safe to keep: it
    is the epsilon-LDP report). ``memoized`` is True when it is a free re-send
    of this period's report for the same value; ``epsilon_charged`` is then 0.
    """

    topic: str
    partition: int
    offset: int
    message: bytes
    memoized: bool
    epsilon_charged: float
    attempts: int


def new_device_key() -> bytes:
    """A fresh random 16-byte device key (opaque: not derived from any hardware id)."""
    return secrets.token_bytes(16)


def value_key(params: OCMSParams, element: int) -> bytes:
    """Memoization key of an encoded value: parameter fingerprint | fixed-width field element."""
    return params.fingerprint + element.to_bytes(params.coefficient_bytes, "big")


@dataclass
class _Item:
    message: bytes
    future: asyncio.Future
    memoized: bool
    epsilon: float


def _reporter_registry(params, metric, metrics):
    """Always a registry: a bare OCMSParams is a one-metric registry whose metric is the ledger account
    (its parameters used as given), reported with ``report(value)``."""
    from registry import Registry, single_metric_registry

    if isinstance(params, OCMSParams):
        if metrics is not None:
            raise InvalidParameterError("metrics", metrics, "is only taken with a registry (params is an OCMSParams)")
        if not isinstance(metric, str) or not metric:
            raise InvalidParameterError("metric", metric, "must be a non-empty string (the ledger account)")
        return single_metric_registry([params], [None], name=metric, path="<reporter>")
    if not isinstance(params, Registry):
        raise InvalidParameterError("params", type(params).__name__, "must be an OCMSParams or a registry.Registry")
    if metric is not None:
        raise InvalidParameterError("metric", metric, "is not taken with a registry: each report names its "
                                                      "metric (report(metric, value)); select with metrics=[...]")
    return params


def _delivery_target(transport, one_metric: bool, versions, bootstrap_servers, topic, device_key):
    """(bootstrap servers, topic, device key), checked: Kafka's, or placeholders when uploading over HTTP."""
    if (not one_metric and transport is not None and transport.metric is not None
            and set(versions) != {transport.metric}):
        raise InvalidParameterError("transport", transport.url, "posts to one metric's URL; a registry "
                                    "reporter of several metrics needs HttpTransport(url) without metric=")
    if transport is not None and not isinstance(transport, HttpTransport):
        raise InvalidParameterError("transport", type(transport).__name__, "must be an HttpTransport or None (Kafka)")
    if transport is not None:
        bootstrap_servers = bootstrap_servers or "-"
        topic = topic or transport.url
        device_key = device_key or b"-"  # never sent over HTTP
    if not isinstance(bootstrap_servers, str) or not bootstrap_servers:
        raise InvalidParameterError("bootstrap_servers", bootstrap_servers, "must be a non-empty string")
    if not isinstance(topic, str) or not topic:
        raise InvalidParameterError("topic", topic, "must be a non-empty string")
    if not isinstance(device_key, (bytes, bytearray)) or not device_key:
        raise InvalidParameterError("device_key", type(device_key).__name__, "must be non-empty bytes")
    return bootstrap_servers, topic, device_key


def _check_delivery_settings(ledger, *, queue_size, max_retries, max_in_flight, retry_backoff_s, max_backoff_s,
                             request_timeout_s) -> None:
    """The ledger's type, the queue, retry and in-flight bounds, the backoffs and the send timeout."""
    if ledger is not None and not isinstance(ledger, PrivacyLedger):
        raise InvalidParameterError("ledger", type(ledger).__name__, "must be a PrivacyLedger or None")
    for name, value, minimum in (("queue_size", queue_size, 1), ("max_retries", max_retries, 0),
                                 ("max_in_flight", max_in_flight, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InvalidParameterError(name, value, f"must be an integer >= {minimum}")
    for name, value in (("retry_backoff_s", retry_backoff_s), ("max_backoff_s", max_backoff_s),
                        ("request_timeout_s", request_timeout_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
            raise InvalidParameterError(name, value, "must be a finite number >= 0")
    if request_timeout_s <= 0:
        raise InvalidParameterError("request_timeout_s", request_timeout_s, "must be > 0")


class DeviceReporter:
    """Privatize values and deliver them to ``topic`` keyed by ``device_key``.

    Args:
        params: a :class:`registry.Registry`: report with
            ``report(metric, value_name)``, each metric with its newest live version
            (``"name@N"`` picks live version N) at that version's ε; or an OCMSParams, the
            one-metric registry of ``metric`` (each report costs ``params.epsilon``; report
            with ``report(value)``).
        bootstrap_servers: Kafka bootstrap servers ("host:port[,host:port]").
        topic: the reports topic (pre-created).
        device_key: opaque bytes used as the Kafka key (partitioning); links
            this device's reports together, so make it random
            (:func:`new_device_key`), never a hardware or account id.
        metric: the ledger account the reports are charged to (OCMSParams only; a
            registry reporter charges each report to its metric's name).
        metrics: with a registry, the metric names this reporter may report (default:
            every metric with a live version); an unknown name is an UnknownMetricError.
        ledger: the privacy-budget ledger; None disables budget accounting
            (and memoization) -- the caller then owns the accounting.
        memoize: re-send this period's report for a value already reported
            (needs a ledger), so repeats reveal nothing new and cost nothing.
        queue_size: bound of the in-memory send queue (back-pressure beyond it).
        max_retries: retries of a transient send error (0 = one attempt).
        retry_backoff_s, max_backoff_s: exponential backoff base and cap (jittered).
        max_in_flight: sends awaiting acknowledgement at once.
        request_timeout_s: aiokafka's per-send timeout.
        profile: the broker's profile (:mod:`infra.kafka`): the idempotent producer where it has one.
        producer_factory: ``factory(**config)`` returning an object with
            ``start()``, ``stop()`` and ``send_and_wait(topic, value, key=)``;
            defaults to :class:`aiokafka.AIOKafkaProducer` (tests inject fakes).
        producer_config: extra keyword arguments for the producer.
        transport: an :class:`HttpTransport` to upload through an ``ocms collector``
            instead of Kafka; ``bootstrap_servers``, ``topic`` and ``device_key`` are then
            not needed (nothing identifying the device is sent).
        device_secret: the secret a longitudinal metric's hash and memoized responses derive from
            (producer/longitudinal.py, issue 38); default: the ledger's. A longitudinal report charges
            ``lifetime_epsilon`` once per hashed value and nothing for repeats.
    """

    def __init__(
        self,
        params,
        *,
        bootstrap_servers: str | None = None,
        topic: str | None = None,
        device_key: bytes | None = None,
        metric: str | None = None,
        metrics: list[str] | tuple[str, ...] | None = None,
        ledger: PrivacyLedger | None = None,
        memoize: bool = False,
        queue_size: int = 1000,
        max_retries: int = 5,
        retry_backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
        max_in_flight: int = 16,
        request_timeout_s: float = 30.0,
        profile: BrokerProfile = KAFKA,
        producer_factory: Callable[..., Any] | None = None,
        producer_config: dict | None = None,
        transport: "HttpTransport | None" = None,
        device_secret: bytes | None = None,
    ):
        self.one_metric = isinstance(params, OCMSParams)
        registry = _reporter_registry(params, metric, metrics)
        self.registry, self._versions = registry, registry.reported_versions(metrics)
        bootstrap_servers, topic, device_key = _delivery_target(transport, self.one_metric, self._versions,
                                                                bootstrap_servers, topic, device_key)
        _check_delivery_settings(ledger, queue_size=queue_size, max_retries=max_retries, max_in_flight=max_in_flight,
                                 retry_backoff_s=retry_backoff_s, max_backoff_s=max_backoff_s,
                                 request_timeout_s=request_timeout_s)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.device_key = bytes(device_key)
        self.ledger = ledger
        self.memoize = bool(memoize) and ledger is not None
        # Longitudinal metrics (issue 38, producer/longitudinal.py): the secret their memoized responses derive
        # from; None takes the ledger's.
        self.device_secret = device_secret
        self.queue_size = queue_size
        self.max_retries = max_retries
        self.retry_backoff_s = float(retry_backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.max_in_flight = max_in_flight
        self._producer_factory = producer_factory or aiokafka_producer
        self._producer_config = kafka_producer_config(bootstrap_servers, profile, linger_ms=5,
                                                      request_timeout_ms=int(request_timeout_s * 1000),
                                                      **(producer_config or {}))
        self.transport = transport
        #: The randomness every report draws from (cms_core.privatize's contract): the CSPRNG; tests replace it to
        #: replay the shared vectors (tests/vectors), never a deployment.
        self._random = os.urandom
        self._producer = None
        self._queue: asyncio.Queue[_Item] | None = None
        self._sender: asyncio.Task | None = None
        self._in_flight: set[asyncio.Task] = set()
        self._slots: asyncio.Semaphore | None = None
        self._running = False
        self.sent = 0
        self.failed = 0

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> "DeviceReporter":
        if self._running:
            return self
        if self.transport is not None:
            await self.transport.start()
            self._producer = self.transport
            self._queue = asyncio.Queue(self.queue_size)
            self._slots = asyncio.Semaphore(self.max_in_flight)
            self._running = True
            self._sender = asyncio.create_task(self._upload_loop(), name="ocms-reporter-http")
            return self
        producer = self._producer_factory(**self._producer_config)
        try:
            await producer.start()
        except Exception as exc:
            try:
                await producer.stop()
            except Exception:
                pass
            raise DeliveryError(f"could not start the Kafka producer for {self.bootstrap_servers}: {exc}",
                                retriable=is_retriable(exc)) from exc
        self._producer = producer
        self._queue = asyncio.Queue(self.queue_size)
        self._slots = asyncio.Semaphore(self.max_in_flight)
        self._running = True
        self._sender = asyncio.create_task(self._send_loop(), name=f"ocms-reporter-{self.topic}")
        return self

    async def close(self, *, drain: bool = True) -> None:
        """Stop taking reports; deliver (``drain``) or fail what is queued; stop the producer."""
        if self._producer is None:
            return
        self._running = False
        if drain:
            await self._queue.join()
        sender, self._sender = self._sender, None
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        for task in list(self._in_flight):
            task.cancel()
        await asyncio.gather(*self._in_flight, return_exceptions=True)
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if not item.future.done():
                item.future.set_exception(ReporterClosedError("the reporter closed before this report was sent"))
            self._queue.task_done()
        producer, self._producer = self._producer, None
        await producer.stop()

    async def __aenter__(self) -> "DeviceReporter":
        return await self.start()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.close(drain=exc_type is None)

    @property
    def queued(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    # ---------------------------------------------------------------- reports
    def resolve(self, *args) -> tuple[OCMSParams, str, Any]:
        """(params, ledger account, dictionary value) for ``submit``'s arguments; raises
        UnknownMetricError / InvalidValueError / InvalidParameterError, or ClientTooOldError for a metric whose
        registry entry asks for a newer client release (``min_client_version``), before any charge."""
        if self.one_metric:  # report(value): the one metric's dictionary value
            if len(args) != 1:
                raise InvalidParameterError("report", f"{len(args)} arguments",
                                            "takes one value (this reporter has one parameter set, no registry)")
            (version,) = self._versions.values()
            return version.params, version.metric, args[0]
        if len(args) != 2:
            raise InvalidParameterError("report", f"{len(args)} arguments",
                                        "takes (metric, value name): this reporter reports a registry's metrics")
        metric, name = args
        version = self._versions.get(metric) if isinstance(metric, str) else None
        if version is None:
            version = self.registry.live_version(metric, self._versions)
        refusal = too_old_for(version.min_client_version, f"metric {version.metric!r}")
        if refusal is not None:
            raise ClientTooOldError(refusal)
        if version.numeric is not None:  # issue 40: the number, clipped, as its bucket's index (cms_core.numeric)
            return version.params, version.metric, version.numeric.measure(name)
        return version.params, version.metric, version.value_from_name(name)

    async def submit(self, *args) -> asyncio.Future:
        """Privatize, charge and enqueue a value; returns a future of its :class:`ReportDelivery`.

        ``submit(value)`` with an OCMSParams reporter, ``submit(metric, value_name)`` with a
        registry. Returns once the report is queued (awaits while the queue is full).
        Raises UnknownMetricError or InvalidValueError (nothing charged),
        PrivacyBudgetError (nothing sent) or ReporterClosedError.
        """
        if not self._running:
            raise ReporterClosedError("the reporter is not running; use 'async with DeviceReporter(...)' or start()")
        params, account, value = self.resolve(*args)
        element = encode_value(params, value)  # InvalidValueError before any charge
        version = self.registry.by_fingerprint(params.fingerprint)
        memoized, epsilon = False, 0.0
        if version is not None and version.longitudinal is not None:  # memoized two-round report (issue 38)
            from .longitudinal import prepare_report

            message, epsilon = await asyncio.to_thread(prepare_report, version.longitudinal, value, account=account,
                                                       ledger=self.ledger, secret=self.device_secret)
            memoized = epsilon == 0.0
        elif self.ledger is not None:
            message = self._message(params, value, version)
            key = value_key(params, element) if self.memoize else None  # a tree's: its bucket, whatever the level
            outcome = await asyncio.to_thread(self.ledger.charge_or_reuse, account, params.epsilon, key, message)
            message, memoized = outcome.report, outcome.memoized
            epsilon = 0.0 if memoized else params.epsilon
        else:
            message = self._message(params, value, version)
            epsilon = params.epsilon
        if not self._running:
            raise ReporterClosedError("the reporter closed while this report was being prepared (epsilon stays charged)")
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Item(message, future, memoized, epsilon))
        if self._sender is None and not future.done():  # closed while we waited for queue space
            future.set_exception(ReporterClosedError("the reporter closed before this report was sent"))
        return future

    def _message(self, params: OCMSParams, value, version) -> bytes:
        """One privatized wire message. A tree's (issue 40: ``params`` its finest level's, ``value`` the bucket): the
        level drawn first (:func:`cms_core.hierarchy.draw_node`), the node reported with that level's parameters."""
        whole = None if version is None else self.registry.metric(version.metric).version(version.version)
        if whole is not None and whole.mean is not None:  # a Hybrid mean: its part drawn first, apart from the value
            mean = whole.mean
            message = draw_mean_message(mean.hybrid, mean.parts, mean.carrier, value.number, self._random)
            if message is not None:
                return message
        if version is not None and version.tree_level is not None:
            level, value = draw_node(whole.hierarchy, value, self._random)
            params = whole.hierarchy.levels[level - 1]
        return encode_report(params, privatize(params, value, self._random))

    async def report(self, *args) -> ReportDelivery:
        """Privatize, charge, send and wait for the broker's acknowledgement:
        ``report(value)``, or ``report("flight_dest", "ATL")`` with a registry.

        Raises UnknownMetricError, InvalidValueError, PrivacyBudgetError,
        DeliveryError (permanent error or retries exhausted) or ReporterClosedError.
        """
        return await (await self.submit(*args))

    # ----------------------------------------------------------------- sender
    async def _dispatch(self, take, deliver) -> None:
        """For ever: wait for a free in-flight slot, ``take`` from the queue, ``deliver`` that in a task of
        its own (which frees the slot; taking that fails frees it here)."""
        while True:
            await self._slots.acquire()
            try:
                taken = await take()
            except BaseException:
                self._slots.release()
                raise
            task = asyncio.create_task(deliver(taken))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)

    async def _send_loop(self) -> None:
        """Kafka: each report in a send of its own (the producer batches them)."""
        await self._dispatch(self._queue.get, self._deliver)

    async def _upload_loop(self) -> None:
        """HTTP: take what is queued (up to the transport's max_reports) and upload it in one request."""
        await self._dispatch(self._take_upload, self._upload)

    async def _take_upload(self) -> list[_Item]:
        transport = self.transport
        items = [await self._queue.get()]
        if transport.max_latency_s > 0 and self._queue.qsize() < transport.max_reports - 1:
            await asyncio.sleep(transport.max_latency_s)  # let a few more reports join this upload
        while len(items) < transport.max_reports and not self._queue.empty():
            items.append(self._queue.get_nowait())
        return items

    async def _upload(self, items: list[_Item]) -> None:
        attempts = 0
        try:
            # One upload per parameter set (the collector takes one per upload): a tree's levels, or several
            # metrics, queued together go as several uploads.
            groups: dict[bytes, list[_Item]] = {}
            for item in items:
                groups.setdefault(wire.HEADER.unpack_from(item.message)[3], []).append(item)
            for group in groups.values():
                attempts = await self.transport.upload([item.message for item in group], self._backoff)
                self.sent += len(group)
                for item in group:
                    if not item.future.done():
                        item.future.set_result(ReportDelivery(
                            topic=self.transport.url, partition=-1, offset=-1, message=item.message,
                            memoized=item.memoized, epsilon_charged=item.epsilon, attempts=attempts))
        except asyncio.CancelledError:
            for item in items:
                if not item.future.done():
                    item.future.set_exception(ReporterClosedError("the reporter closed while this upload was in flight"))
            raise
        except DeliveryError as exc:
            undelivered = [item for item in items if not item.future.done()]
            self.failed += len(undelivered)
            for item in undelivered:
                item.future.set_exception(exc)
        finally:
            self._slots.release()
            for _ in items:
                self._queue.task_done()

    def _backoff(self, attempt: int) -> float:
        base = min(self.max_backoff_s, self.retry_backoff_s * (2 ** (attempt - 1)))
        return base * (0.5 + 0.5 * random.random())

    async def _deliver(self, item: _Item) -> None:
        attempts = 0
        try:
            while True:
                attempts += 1
                try:
                    md = await self._producer.send_and_wait(self.topic, item.message, key=self.device_key)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    retriable = is_retriable(exc)
                    if retriable and attempts <= self.max_retries:
                        delay = self._backoff(attempts)
                        log.warning("report send attempt %d to %s failed (%s); retrying in %.3f s",
                                    attempts, self.topic, type(exc).__name__, delay)
                        await asyncio.sleep(delay)
                        continue
                    self.failed += 1
                    what = f"gave up after {attempts} attempts" if retriable else "permanent error"
                    error = DeliveryError(f"report to topic {self.topic!r} not delivered ({what}): "
                                          f"{type(exc).__name__}: {exc}", attempts=attempts, retriable=retriable)
                    error.__cause__ = exc
                    if not item.future.done():
                        item.future.set_exception(error)
                    return
                self.sent += 1
                if not item.future.done():
                    item.future.set_result(ReportDelivery(
                        topic=getattr(md, "topic", self.topic), partition=getattr(md, "partition", -1),
                        offset=getattr(md, "offset", -1), message=item.message, memoized=item.memoized,
                        epsilon_charged=item.epsilon, attempts=attempts,
                    ))
                return
        except asyncio.CancelledError:
            if not item.future.done():
                item.future.set_exception(ReporterClosedError("the reporter closed while this report was in flight",
                                                              attempts=attempts))
            raise
        finally:
            self._slots.release()
            self._queue.task_done()


class HttpTransport:
    """Deliver reports through an ``ocms collector`` over HTTP(S) instead of Kafka.

    Args:
        url: the collector's base URL (``http://host:8080``) or a full upload URL.
        metric: post to ``/v1/metrics/{metric}/reports`` (the collector checks the
            reports belong to it); None posts to ``/v1/reports``.
        token: the application's bearer token, if the collector requires one.
        max_reports: most queued reports per upload (<= the collector's limit).
        max_latency_s: how long the first report of an upload waits for others to join.
        max_retries: retries of a retriable answer (429, 503, 408) or connection error.
        max_backoff_s: longest wait between retries (Retry-After is honoured up to it).
        timeout_s: per-request timeout (:data:`DEFAULT_HTTP_TIMEOUT_S`); above the collector's longest answer:
            ``--shuffle-max-seconds`` plus twice ``--kafka-timeout-ms`` when it shuffles.
        connections: most connections to the collector at once (uploads beyond wait for one).
    """

    RETRIABLE = (408, 429, 500, 502, 503, 504)

    def __init__(self, url: str, *, metric: str | None = None, token: str | None = None, max_reports: int = 100,
                 max_latency_s: float = 0.005, max_retries: int = 8, max_backoff_s: float = 30.0,
                 timeout_s: float = DEFAULT_HTTP_TIMEOUT_S, connections: int = 100):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidParameterError("url", url, "must be an http:// or https:// URL of an ocms collector")
        if isinstance(max_reports, bool) or not isinstance(max_reports, int) or max_reports < 1:
            raise InvalidParameterError("max_reports", max_reports, "must be an integer >= 1")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise InvalidParameterError("max_retries", max_retries, "must be an integer >= 0")
        if isinstance(connections, bool) or not isinstance(connections, int) or connections < 1:
            raise InvalidParameterError("connections", connections, "must be an integer >= 1")
        for name, value in (("max_latency_s", max_latency_s), ("max_backoff_s", max_backoff_s), ("timeout_s", timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise InvalidParameterError(name, value, "must be a finite number >= 0")
        self.metric = metric
        base = url.rstrip("/")
        if base.endswith("/reports"):
            self.url = base
        elif metric is not None:
            self.url = f"{base}/v1/metrics/{metric}/reports"
        else:
            self.url = f"{base}/v1/reports"
        self.token = token
        self.max_reports = max_reports
        self.max_latency_s = float(max_latency_s)
        self.max_retries = max_retries
        self.max_backoff_s = float(max_backoff_s)
        self.timeout_s = float(timeout_s)
        self.connections = connections
        self._session = None
        self.uploads = 0
        self.retries = 0

    async def start(self) -> None:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                                                  connector=aiohttp.TCPConnector(limit=self.connections))

    async def stop(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _retry_after(self, response, attempt: int, backoff: Callable[[int], float]) -> float:
        header = response.headers.get("Retry-After") if response is not None else None
        try:
            wait = float(header) if header is not None else backoff(attempt)
        except ValueError:
            wait = backoff(attempt)
        # a little jitter so a fleet told "2 s" does not come back in one wave
        return min(self.max_backoff_s, max(0.0, wait) * (1.0 + 0.25 * random.random()))

    async def upload_each(self, messages: list[bytes], *, concurrency: int = 8,
                          backoff: Callable[[int], float] | None = None,
                          slots: asyncio.Semaphore | None = None) -> int:
        """Upload every message (e.g. a simulated fleet's frames) as its own upload, ``concurrency``
        at a time (or as many as ``slots``, a semaphore shared by calls running side by side, lets);
        returns when all were accepted (202), else raises the first DeliveryError."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidParameterError("concurrency", concurrency, "must be an integer >= 1")
        if backoff is None:
            def backoff(attempt: int) -> float:
                return min(self.max_backoff_s, 0.1 * 2 ** (attempt - 1)) * (0.5 + 0.5 * random.random())
        if slots is None:
            slots = asyncio.Semaphore(concurrency)

        async def one(message: bytes) -> None:
            async with slots:
                await self.upload([message], backoff)

        await asyncio.gather(*(one(m) for m in messages))
        return len(messages)

    async def upload(self, messages: list[bytes], backoff: Callable[[int], float]) -> int:
        """POST the messages as one upload; retried with the same idempotency key. Returns the attempts."""
        import aiohttp

        if self._session is None:
            raise ReporterClosedError("the HTTP transport is not started")
        body = b"".join(messages)
        headers = {"Content-Type": "application/vnd.ocms.wire-v1",
                   # random per upload: links nothing across uploads; reused by this upload's retries
                   "Idempotency-Key": secrets.token_urlsafe(24)}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        attempts = 0
        while True:
            attempts += 1
            response, status, detail = None, None, ""
            try:
                async with self._session.post(self.url, data=body, headers=headers) as response:
                    status = response.status
                    text = await response.text()
                    if status == 202:
                        self.uploads += 1
                        return attempts
                    detail = text[:300]
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                detail = f"{type(exc).__name__}: {exc}"
            retriable = status is None or status in self.RETRIABLE
            if not retriable or attempts > self.max_retries:
                what = f"HTTP {status}" if status is not None else "no answer"
                raise DeliveryError(f"upload of {len(messages)} reports to {self.url} failed ({what}, "
                                    f"{attempts} attempts): {detail}", attempts=attempts, retriable=retriable)
            self.retries += 1
            delay = self._retry_after(response if status is not None else None, attempts, backoff)
            log.warning("upload attempt %d to %s failed (%s); retrying in %.2f s", attempts, self.url,
                        status or detail.split(":")[0], delay)
            await asyncio.sleep(delay)


__all__ = ["DeliveryError", "DeviceReporter", "HttpTransport", "ReportDelivery", "ReporterClosedError",
           "new_device_key", "value_key"]
