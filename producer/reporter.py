"""The device reporter: privatize one value (CSPRNG path) and deliver it to Kafka.

    ledger = PrivacyLedger("ledger.db", budget=8.0)
    async with DeviceReporter(params, bootstrap_servers="host:9092", topic="ocms-reports",
                              device_key=new_device_key(), metric="app_launch",
                              ledger=ledger) as reporter:
        delivery = await reporter.report(42)        # waits until the broker acknowledged it

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
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
from dataclasses import dataclass
from typing import Any, Callable

from cms_core.errors import InvalidParameterError, OCMSError
from cms_core.params import OCMSParams
from cms_core.privatize import privatize
from cms_core.values import encode_value
from cms_core.wire import encode_report

from .ledger import PrivacyLedger

log = logging.getLogger(__name__)


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


def is_retriable(exc: BaseException) -> bool:
    """Transient Kafka errors: ``KafkaError.retriable``, timeouts and connection errors."""
    try:
        from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, NodeNotReadyError
    except ImportError:  # pragma: no cover - aiokafka is a dependency
        return False
    if isinstance(exc, (KafkaTimeoutError, KafkaConnectionError, NodeNotReadyError)):
        return True
    return isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))


def value_key(params: OCMSParams, element: int) -> bytes:
    """Memoization key of an encoded value: parameter fingerprint | fixed-width field element."""
    return params.fingerprint + element.to_bytes(params.coefficient_bytes, "big")


def _default_producer_factory(**config):
    from aiokafka import AIOKafkaProducer

    return AIOKafkaProducer(**config)


@dataclass
class _Item:
    message: bytes
    future: asyncio.Future
    memoized: bool
    epsilon: float


class DeviceReporter:
    """Privatize values and deliver them to ``topic`` keyed by ``device_key``.

    Args:
        params: the topic's OCMSParams; each report costs ``params.epsilon``.
        bootstrap_servers: Kafka bootstrap servers ("host:port[,host:port]").
        topic: the reports topic (pre-created).
        device_key: opaque bytes used as the Kafka key (partitioning); links
            this device's reports together, so make it random
            (:func:`new_device_key`), never a hardware or account id.
        metric: the ledger account the reports are charged to.
        ledger: the privacy-budget ledger; None disables budget accounting
            (and memoization) -- the caller then owns the accounting.
        memoize: re-send this period's report for a value already reported
            (needs a ledger), so repeats reveal nothing new and cost nothing.
        queue_size: bound of the in-memory send queue (back-pressure beyond it).
        max_retries: retries of a transient send error (0 = one attempt).
        retry_backoff_s, max_backoff_s: exponential backoff base and cap (jittered).
        max_in_flight: sends awaiting acknowledgement at once.
        request_timeout_s: aiokafka's per-send timeout.
        producer_factory: ``factory(**config)`` returning an object with
            ``start()``, ``stop()`` and ``send_and_wait(topic, value, key=)``;
            defaults to :class:`aiokafka.AIOKafkaProducer` (tests inject fakes).
        producer_config: extra keyword arguments for the producer.
    """

    def __init__(
        self,
        params: OCMSParams,
        *,
        bootstrap_servers: str,
        topic: str,
        device_key: bytes,
        metric: str,
        ledger: PrivacyLedger | None = None,
        memoize: bool = False,
        queue_size: int = 1000,
        max_retries: int = 5,
        retry_backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
        max_in_flight: int = 16,
        request_timeout_s: float = 30.0,
        producer_factory: Callable[..., Any] | None = None,
        producer_config: dict | None = None,
    ):
        if not isinstance(params, OCMSParams):
            raise InvalidParameterError("params", type(params).__name__, "must be an OCMSParams")
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers:
            raise InvalidParameterError("bootstrap_servers", bootstrap_servers, "must be a non-empty string")
        if not isinstance(topic, str) or not topic:
            raise InvalidParameterError("topic", topic, "must be a non-empty string")
        if not isinstance(device_key, (bytes, bytearray)) or not device_key:
            raise InvalidParameterError("device_key", type(device_key).__name__, "must be non-empty bytes")
        if not isinstance(metric, str) or not metric:
            raise InvalidParameterError("metric", metric, "must be a non-empty string")
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
        self.params = params
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.device_key = bytes(device_key)
        self.metric = metric
        self.ledger = ledger
        self.memoize = bool(memoize) and ledger is not None
        self.queue_size = queue_size
        self.max_retries = max_retries
        self.retry_backoff_s = float(retry_backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.max_in_flight = max_in_flight
        self._producer_factory = producer_factory or _default_producer_factory
        self._producer_config = {
            "bootstrap_servers": bootstrap_servers,
            "acks": "all",
            "request_timeout_ms": int(request_timeout_s * 1000),
            "linger_ms": 5,
            **(producer_config or {}),
        }
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
    async def submit(self, value) -> asyncio.Future:
        """Privatize, charge and enqueue ``value``; returns a future of its :class:`ReportDelivery`.

        Returns once the report is queued (awaits while the queue is full).
        Raises InvalidValueError (nothing charged), PrivacyBudgetError (nothing
        sent) or ReporterClosedError.
        """
        if not self._running:
            raise ReporterClosedError("the reporter is not running; use 'async with DeviceReporter(...)' or start()")
        element = encode_value(self.params, value)  # InvalidValueError before any charge
        message = encode_report(self.params, privatize(self.params, value))
        memoized, epsilon = False, 0.0
        if self.ledger is not None:
            key = value_key(self.params, element) if self.memoize else None
            outcome = await asyncio.to_thread(self.ledger.charge_or_reuse, self.metric, self.params.epsilon, key, message)
            message, memoized = outcome.report, outcome.memoized
            epsilon = 0.0 if memoized else self.params.epsilon
        else:
            epsilon = self.params.epsilon
        if not self._running:
            raise ReporterClosedError("the reporter closed while this report was being prepared (epsilon stays charged)")
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Item(message, future, memoized, epsilon))
        if self._sender is None and not future.done():  # closed while we waited for queue space
            future.set_exception(ReporterClosedError("the reporter closed before this report was sent"))
        return future

    async def report(self, value) -> ReportDelivery:
        """Privatize, charge, send and wait for the broker's acknowledgement.

        Raises InvalidValueError, PrivacyBudgetError, DeliveryError (permanent
        error or retries exhausted) or ReporterClosedError.
        """
        return await (await self.submit(value))

    # ----------------------------------------------------------------- sender
    async def _send_loop(self) -> None:
        while True:
            await self._slots.acquire()
            try:
                item = await self._queue.get()
            except BaseException:
                self._slots.release()
                raise
            task = asyncio.create_task(self._deliver(item))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)

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


__all__ = ["DeliveryError", "DeviceReporter", "ReportDelivery", "ReporterClosedError", "is_retriable",
           "new_device_key", "value_key"]
