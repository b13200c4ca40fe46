"""From accepted uploads to acknowledged Kafka frames.

One :class:`Lane` per metric version (parameter fingerprint) batches uploads into
frames with :class:`producer.gateway.FrameBatcher`. The batcher's ``send`` hands
each frame to :class:`KafkaOutlet` without waiting, so many frames can be in
flight; an upload's future resolves when the frame holding it is acknowledged
(``acks=all``) and fails when that frame fails.

Invariants that make "202 means in Kafka" hold:

* an upload never spans two frames: before adding an upload that would not fit
  in the frame being filled, the lane flushes it (uploads are at most
  ``max_upload_reports <= frame_max_reports`` reports);
* records reach frames in the order they were added (one lock per lane around
  "maybe flush, add"), so an upload covering records [start, end) of the lane's
  stream is in the first frame whose range reaches ``end``;
* an upload's answer waits for its own frame's acknowledgement; a failed frame
  answers 503 to every upload in it (the collector never re-sends a frame itself:
  the client retries with the same idempotency key).

Privacy: frames carry no key (the producer spreads them over partitions), and
their timestamp is the start of the metric's event-time bucket the collector
received them in, never a device clock.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, field

from cms_core import wire
from cms_core.reports import ReportBatch
from producer.gateway import FrameBatcher
from producer.kafka import KafkaUnavailableError, aiokafka_producer, broker_profile, producer_config
from producer.reporter import is_retriable

log = logging.getLogger(__name__)

#: Most reports validated by one decode call in a lane's batch validation.
DRAIN_MAX_REPORTS = 65_536
#: An upload waits at most this many Kafka timeouts for its frame's acknowledgement: one request and
#: one re-send. The idempotent producer re-sends a batch until the broker takes it, however long a
#: broker stays down, so without this bound an upload caught by an outage waited for its end.
ACK_TIMEOUTS = 2


@dataclass
class _Waiter:
    end: int
    future: asyncio.Future
    start: int


@dataclass
class Lane:
    """Frames of one metric version."""

    version: object  # registry MetricVersion
    outlet: "KafkaOutlet"
    max_records: int
    max_latency_s: float
    bucket_seconds: int
    batcher: FrameBatcher = field(init=False)
    added: int = 0  # records added to this lane (positions)
    dispatched: int = 0  # records handed to Kafka in frames
    bucket_ms: int | None = None  # event-time bucket of the frame being filled

    def __post_init__(self):
        self.lock = asyncio.Lock()
        self.pending: collections.deque = collections.deque()  # (records, n, future) awaiting validation
        self.drain_scheduled = False
        self.drains: set[asyncio.Task] = set()
        self.clock = time.time
        self.waiters: collections.deque[_Waiter] = collections.deque()
        self.record_size = wire.record_size(self.version.params)
        self.batcher = FrameBatcher(self.version.params, send=self._dispatch, max_records=self.max_records,
                                    max_latency_s=self.max_latency_s)
        self.max_records = self.batcher.max_records  # capped by the frame byte limit

    async def add(self, batch: ReportBatch, now: float) -> asyncio.Future:
        """Buffer one decoded upload; the returned future resolves when its frame is acknowledged."""
        future = asyncio.get_running_loop().create_future()
        async with self.lock:
            await self._add_locked(batch, [(len(batch), future)], now)
        return future

    def submit(self, records: bytes, n: int) -> asyncio.Future:
        """Buffer one upload given as raw records (its framing already checked); validated in a batch.

        Uploads submitted in the same event-loop turn are decoded and validated together with one
        :func:`cms_core.wire.decode_message` call (the per-call cost dominates single-report uploads);
        if that fails, each is decoded alone, so a bad upload gets its own reason and the others go on.
        The future raises UploadRejected for a bad upload, KafkaUnavailableError when its frame fails.
        """
        future = asyncio.get_running_loop().create_future()
        self.pending.append((records, n, future))
        if not self.drain_scheduled:
            self.drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._start_drain)
        return future

    def _start_drain(self) -> None:
        task = asyncio.ensure_future(self._drain())
        self.drains.add(task)
        task.add_done_callback(self.drains.discard)

    async def _drain(self) -> None:
        from .uploads import UploadRejected

        async with self.lock:
            items, total = [], 0
            while self.pending and (not items or total + self.pending[0][1] <= DRAIN_MAX_REPORTS):
                item = self.pending.popleft()
                items.append(item)
                total += item[1]
            if self.pending:
                asyncio.get_running_loop().call_soon(self._start_drain)  # the rest in the next turn
            else:
                self.drain_scheduled = False
            params, fingerprint = self.version.params, self.version.fingerprint
            registry = {fingerprint: params}
            try:
                try:
                    message = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, fingerprint, total)
                    _, batch = wire.decode_message(message + b"".join(r for r, _, _ in items), registry)
                    good = items
                except wire.WireFormatError:
                    good, parts = [], []
                    for records, n, future in items:
                        message = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, fingerprint, n)
                        try:
                            parts.append(wire.decode_message(message + records, registry)[1])
                        except wire.WireFormatError as exc:
                            future.set_exception(UploadRejected(400, exc.reason, str(exc)))
                            continue
                        good.append((records, n, future))
                    batch = (parts[0] if len(parts) == 1 else ReportBatch.concat(parts)) if parts else None
                if good:
                    await self._add_locked(batch, [(n, future) for _, n, future in good], self.clock())
            except BaseException as exc:
                for _, _, future in items:
                    if not future.done():
                        future.set_exception(exc if isinstance(exc, Exception) else KafkaUnavailableError("cancelled"))
                if not isinstance(exc, Exception):
                    raise

    async def _add_locked(self, batch: ReportBatch, uploads: list[tuple[int, asyncio.Future]], now: float) -> None:
        """Add consecutive uploads (their reports in order in ``batch``), never splitting one over two frames."""
        bucket_ms = int(now // self.bucket_seconds) * self.bucket_seconds * 1000
        if self.batcher.buffered and bucket_ms != self.bucket_ms:
            await self.batcher.flush()  # the frame being filled belongs to an older bucket
        start, i = 0, 0
        while i < len(uploads):
            if uploads[i][0] > self.max_records - self.batcher.buffered:
                await self.batcher.flush()  # the frame being filled is complete for this upload
            if not self.batcher.buffered:
                self.bucket_ms = bucket_ms
            room = self.max_records - self.batcher.buffered
            j, size, position = i, 0, self.added
            waiters = []
            while j < len(uploads) and size + uploads[j][0] <= room:
                n, future = uploads[j]
                waiters.append(_Waiter(position + n, future, position))
                position += n
                size += n
                j += 1
            if not waiters:
                raise AssertionError(f"an upload of {uploads[i][0]} reports exceeds the frame bound {self.max_records}")
            self.waiters.extend(waiters)
            self.added = position
            try:
                await self.batcher.add(batch if start == 0 and size == len(batch) else batch.slice(start, start + size))
            except BaseException:
                # Refused before buffering (the batcher is closed): forget these uploads' positions.
                for waiter in reversed(waiters):
                    if self.waiters and self.waiters[-1] is waiter:
                        self.waiters.pop()
                self.added -= size
                raise
            start, i = start + size, j

    async def _dispatch(self, frame: bytes) -> None:
        """FrameBatcher's send: hand the frame to Kafka without waiting for the acknowledgement."""
        records = (len(frame) - wire.HEADER_SIZE) // self.record_size
        start, end = self.dispatched, self.dispatched + records
        self.dispatched = end
        mine = []
        while self.waiters and self.waiters[0].end <= end:
            waiter = self.waiters.popleft()
            assert waiter.start >= start, "an upload spans two frames"
            mine.append(waiter.future)
        self.outlet.produce(frame, self.bucket_ms, records, mine, self.version)

    async def close(self) -> None:
        while self.drains:
            await asyncio.gather(*list(self.drains), return_exceptions=True)
        await self.batcher.close()


class KafkaOutlet:
    """The collector's one aiokafka producer (``acks=all``) and what the collector knows of Kafka.

    ``available`` turns False when a frame fails with a transient error and True when a
    probe (a metadata request every ``retry_after`` seconds) or a frame succeeds.
    ``queued`` counts reports held in memory: buffered in lanes or in flight.
    """

    def __init__(self, settings, metrics, producer_factory=None):
        self.settings = settings
        self.metrics = metrics
        self.producer = None
        self.available = False
        self.queued = 0
        self.in_flight: set[asyncio.Task] = set()
        self._factory = producer_factory
        self._probe: asyncio.Task | None = None
        self._closing = False
        self.last_error: str | None = "not connected yet"
        self.profile = broker_profile(settings.broker)
        self.idempotent = {"on": True, "off": False}.get(settings.kafka_idempotence, self.profile.idempotent_producer)

    def config(self) -> dict:
        s = self.settings
        return producer_config(s.bootstrap_servers, self.profile, idempotent=self.idempotent,
                               client_id="ocms-collector", linger_ms=0, request_timeout_ms=s.kafka_timeout_ms,
                               retry_backoff_ms=100, max_batch_size=1_048_576)

    async def start(self) -> None:
        """Start connecting in the background; uploads get 503 until Kafka answers."""
        self._probe = asyncio.create_task(self._connect_loop(), name="ocms-collector-kafka")

    async def _connect_loop(self) -> None:
        factory = self._factory or aiokafka_producer
        while not self._closing:
            if self.producer is None:
                producer = factory(**self.config())
                try:
                    await producer.start()
                    await producer.partitions_for(self.settings.source_topic)
                except Exception as exc:
                    self._unavailable(f"cannot reach Kafka at {self.settings.bootstrap_servers}: {type(exc).__name__}: {exc}")
                    try:
                        await producer.stop()
                    except Exception:
                        pass
                    if self.idempotent and self.settings.kafka_idempotence == "auto" and not is_retriable(exc):
                        # The broker answered but refused InitProducerId (no idempotence support).
                        log.warning("Kafka at %s does not support the idempotent producer (%s); producing without "
                                    "it: a frame re-sent after a lost answer may be stored twice",
                                    self.settings.bootstrap_servers, type(exc).__name__)
                        self.idempotent = False
                        continue
                else:
                    self.producer = producer
                    self._available()
            elif not self.available:
                try:
                    ok = await asyncio.wait_for(self.producer.client.force_metadata_update(),
                                                self.settings.kafka_timeout_ms / 1000)
                except Exception as exc:
                    ok = False
                    self.last_error = f"metadata probe failed: {type(exc).__name__}: {exc}"
                if ok:
                    self._available()
            await asyncio.sleep(self.settings.retry_after_seconds if not self.available else 1.0)

    def _available(self) -> None:
        if not self.available:
            log.info("Kafka at %s is available", self.settings.bootstrap_servers)
        self.available = True
        self.last_error = None
        self.metrics.kafka_available.set(1)

    def _unavailable(self, why: str) -> None:
        if self.available:
            log.warning("Kafka unavailable: %s", why)
        self.available = False
        self.last_error = why
        self.metrics.kafka_available.set(0)

    def produce(self, frame: bytes, timestamp_ms: int, records: int, futures: list, version) -> None:
        task = asyncio.create_task(self._produce(frame, timestamp_ms, records, futures, version))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _produce(self, frame: bytes, timestamp_ms: int, records: int, futures: list, version) -> None:
        error: BaseException | None = None
        try:
            if self.producer is None:
                raise KafkaUnavailableError("not connected to Kafka")
            # key=None: frames are keyed by nobody (spread over partitions), never by a device.
            ack = await self.producer.send(self.settings.source_topic, frame, key=None, timestamp_ms=timestamp_ms)
            bound_ms = ACK_TIMEOUTS * self.settings.kafka_timeout_ms
            try:
                await asyncio.wait_for(asyncio.shield(ack), bound_ms / 1000)
            except asyncio.TimeoutError:  # the producer may still deliver it: a 503 never promises absence
                raise KafkaUnavailableError(
                    f"no acknowledgement within {bound_ms} ms ({ACK_TIMEOUTS} x --kafka-timeout-ms)") from None
        except asyncio.CancelledError:
            error = KafkaUnavailableError("the collector stopped before Kafka acknowledged the frame")
            raise
        except Exception as exc:
            error = exc
            if is_retriable(exc) or isinstance(exc, KafkaUnavailableError):
                self._unavailable(f"{type(exc).__name__}: {exc}")
            log.warning("frame of %d reports for %s@%s not acknowledged: %s: %s", records, version.metric,
                        version.version, type(exc).__name__, exc)
        finally:
            self.queued -= records  # ocms_collector_queue_reports reads it when scraped
            if error is None:
                self._available()
                self.metrics.frames_produced.labels(version.metric).inc()
                self.metrics.reports_produced.labels(version.metric).inc(records)
                for f in futures:
                    if not f.done():
                        f.set_result(None)
            else:
                self.metrics.frames_failed.labels(version.metric).inc()
                for f in futures:
                    if not f.done():
                        f.set_exception(KafkaUnavailableError(f"{type(error).__name__}: {error}"))

    async def close(self, lanes) -> None:
        """Send what the lanes hold, wait for every frame in flight, stop the producer."""
        for lane in lanes:
            try:
                await lane.close()
            except Exception as exc:  # pragma: no cover - _dispatch does not raise
                log.warning("closing a lane: %s", exc)
        deadline = time.monotonic() + self.settings.kafka_timeout_ms / 1000 + 1
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.wait(set(self.in_flight), timeout=max(0.0, deadline - time.monotonic()))
        self._closing = True
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.gather(self._probe, return_exceptions=True)
        for task in list(self.in_flight):
            task.cancel()
        await asyncio.gather(*self.in_flight, return_exceptions=True)
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.stop()
