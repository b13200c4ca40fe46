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

With exactly-once retries (``collector.exactly_once``, the default) the outlet's producer is
transactional and one committer task produces the frames in groups: it lists each frame's
keyed uploads in the idempotency log, reads the log back to its listings, takes out the uploads
an earlier attempt holds, and produces the group in one transaction, each frame to a partition
it chose and with one random nonce header.

With shuffling (``--shuffle-min-reports``, collector/shuffle.py) a :class:`ShuffleLane` replaces
the frame batcher: it holds uploads until the batch is full or old enough, and the outlet lists
the whole batch, takes out held uploads, permutes what is left, cuts it into frames and answers
every upload of the batch when all its frames are acknowledged.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
import secrets
import time
from dataclasses import dataclass, field

from cms_core import wire
from cms_core.reports import ReportBatch
from producer.gateway import FrameBatcher
from producer.kafka import KafkaUnavailableError, aiokafka_producer, producer_config
from producer.reporter import is_retriable

from .exactly_once import FRAME_HEADER
from .shuffle import THREAD_MIN_REPORTS, ShuffledBatch

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
    key: bytes | None = None  # the keyed hash of the upload's Idempotency-Key (exactly-once retries)


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

    async def add(self, batch: ReportBatch, now: float, key: bytes | None = None) -> asyncio.Future:
        """Buffer one decoded upload; the returned future resolves when its frame is acknowledged."""
        future = asyncio.get_running_loop().create_future()
        async with self.lock:
            await self._add_locked(batch, [(len(batch), future, key)], now)
        return future

    def submit(self, records: bytes, n: int, key: bytes | None = None) -> asyncio.Future:
        """Buffer one upload given as raw records (its framing already checked); validated in a batch.

        Uploads submitted in the same event-loop turn are decoded and validated together with one
        :func:`cms_core.wire.decode_message` call (the per-call cost dominates single-report uploads);
        if that fails, each is decoded alone, so a bad upload gets its own reason and the others go on.
        The future raises UploadRejected for a bad upload, KafkaUnavailableError when its frame fails.
        """
        future = asyncio.get_running_loop().create_future()
        self.pending.append((records, n, future, key))
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
                    _, batch = wire.decode_message(message + b"".join(item[0] for item in items), registry)
                    good = items
                except wire.WireFormatError:
                    good, parts = [], []
                    for item in items:
                        records, n, future, _ = item
                        message = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, fingerprint, n)
                        try:
                            parts.append(wire.decode_message(message + records, registry)[1])
                        except wire.WireFormatError as exc:
                            future.set_exception(UploadRejected(400, exc.reason, str(exc)))
                            continue
                        good.append(item)
                    batch = (parts[0] if len(parts) == 1 else ReportBatch.concat(parts)) if parts else None
                if good:
                    raw = b"".join(item[0] for item in good) if self.keeps_records else None
                    await self._add_locked(batch, [(n, future, key) for _, n, future, key in good], self.clock(), raw)
            except BaseException as exc:
                for _, _, future, _ in items:
                    if not future.done():
                        future.set_exception(exc if isinstance(exc, Exception) else KafkaUnavailableError("cancelled"))
                if not isinstance(exc, Exception):
                    raise

    #: Whether ``_add_locked`` wants the uploads' validated raw records too (a shuffling lane keeps them).
    keeps_records = False

    async def _add_locked(self, batch: ReportBatch, uploads: list[tuple[int, asyncio.Future, bytes | None]],
                          now: float, raw: bytes | None = None) -> None:
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
                n, future, key = uploads[j]
                waiters.append(_Waiter(position + n, future, position, key))
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
            mine.append(waiter)
        self.outlet.produce(frame, self.bucket_ms, records, mine, self.version, start)

    async def close(self) -> None:
        while self.drains:
            await asyncio.gather(*list(self.drains), return_exceptions=True)
        await self.batcher.close()


@dataclass
class ShuffleLane(Lane):
    """A lane that holds uploads until ``min_reports`` reports are held or ``max_seconds`` passed since
    the first, then hands them to the outlet as one :class:`ShuffledBatch` (shuffled, cut, produced)."""

    min_reports: int = 1
    max_seconds: float = 60.0
    keeps_records = True

    def __post_init__(self):
        super().__post_init__()
        self._parts: list[bytes] = []
        self._members: list[_Waiter] = []
        self.held = 0  # reports held for the next batch
        self._timer: asyncio.TimerHandle | None = None

    async def _add_locked(self, batch: ReportBatch, uploads: list[tuple[int, asyncio.Future, bytes | None]],
                          now: float, raw: bytes | None = None) -> None:
        if raw is None:
            raw = wire.encode_batch(self.version.params, batch)[wire.HEADER_SIZE:]
        # The batch closes at the upload that reaches min_reports, even inside a group validated together, so
        # a batch holds fewer than min_reports + --max-upload-reports reports and at most min_reports uploads:
        # the keys one listing names (settings._check_shuffle holds --idempotency-max-keys to that bound).
        start = end = 0  # the bytes of raw not handed to a batch yet
        for n, future, key in uploads:
            self._members.append(_Waiter(self.held + n, future, self.held, key))
            self.held += n
            end += n * self.record_size
            if self.held >= self.min_reports:
                self._parts.append(raw[start:end] if start or end < len(raw) else raw)
                start = end
                self.close_batch()
        if end > start:
            self._parts.append(raw[start:end] if start else raw)
        if self.held and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.max_seconds, self.close_batch)

    def close_batch(self) -> None:
        """Hand what is held to the outlet as one batch (timestamped with the bucket it closes in)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.held:
            return
        bucket_ms = int(self.clock() // self.bucket_seconds) * self.bucket_seconds * 1000
        batch = ShuffledBatch(self.version, b"".join(self._parts), self._members, bucket_ms, self.record_size,
                              self.held, self.max_records)
        self._parts, self._members, self.held = [], [], 0
        self.outlet.produce_batch(batch)

    async def close(self) -> None:
        while self.drains:
            await asyncio.gather(*list(self.drains), return_exceptions=True)
        self.close_batch()  # what it holds, fewer than min_reports: its header says how many
        await self.batcher.close()


@dataclass(eq=False)
class _Frame:
    """A frame waiting for the committer (exactly-once mode)."""

    data: bytes
    timestamp_ms: int
    records: int  # reports as the lane built it: the queue places it holds until answered
    members: list  # the lane's _Waiters of its uploads
    first: int  # the lane position of its first record
    version: object
    nonce: bytes = b""
    partition: int = 0
    lower: int = 0
    listing: object = None  # its Listing in the idempotency log, once read back

    @property
    def keys(self) -> list[bytes]:
        return [w.key for w in self.members if w.key is not None]


#: Most frames listed and sent as one group.
GROUP_MAX_FRAMES = 256
#: A transaction (only a fence: the worker reads uncommitted) is committed after at most this long.
TRANSACTION_SECONDS = 1.0
#: ... and once no frame came for this long.
IDLE_COMMIT_SECONDS = 0.1


class KafkaOutlet:
    """The collector's one aiokafka producer (``acks=all``) and what the collector knows of Kafka.

    ``available`` turns False when a frame fails with a transient error and True when a
    probe (a metadata request every ``retry_after`` seconds) or a frame succeeds.
    ``queued`` counts reports held in memory: buffered in lanes or in flight.

    With ``log`` (a :class:`collector.exactly_once.SharedIdempotency`) the producer is transactional
    and frames go through :meth:`_commit_loop`; a broker that refuses transactions turns it off.
    """

    def __init__(self, settings, metrics, producer_factory=None, log=None):
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
        self.profile = settings.broker
        self.idempotent = {"on": True, "off": False}.get(settings.kafka_idempotence, self.profile.idempotent_producer)
        self.log = log
        self.incarnation = b""  # changes with every start of the transactional producer
        self.frames: collections.deque[_Frame] = collections.deque()
        self._wake = asyncio.Event()
        self._committer: asyncio.Task | None = None
        self._committing = False
        self._transaction: tuple | None = None  # (producer, monotonic start) of the open transaction
        self._acks: set[asyncio.Task] = set()  # groups waiting for their acknowledgements
        self.partitions: list[int] = []
        self.lower: dict[int, int] = {}  # partition -> an offset at or below its end
        if log is not None:
            log.outlet = self

    @property
    def transactional(self) -> bool:
        return self.log is not None and self.log.enabled

    def config(self) -> dict:
        s = self.settings
        config = producer_config(s.bootstrap_servers, self.profile, idempotent=self.idempotent,
                                 client_id="ocms-collector", linger_ms=0, request_timeout_ms=s.kafka_timeout_ms,
                                 retry_backoff_ms=100, max_batch_size=1_048_576)
        if self.transactional:
            config["transactional_id"] = self.log.owner
            config["enable_idempotence"] = True
        return config

    async def start(self) -> None:
        """Start connecting in the background; uploads get 503 until Kafka answers."""
        if self.log is not None:  # the transactional producer's InitProducerId, for the embedded broker too
            from . import kafka_internals

            kafka_internals.install()
        self._probe = asyncio.create_task(self._connect_loop(), name="ocms-collector-kafka")

    async def _connect_loop(self) -> None:
        factory = self._factory or aiokafka_producer
        while self.transactional and not self._closing:
            try:
                await self.log.start()
                break
            except Exception as exc:  # Kafka away for a moment: the loop must live on, or 503 for ever
                self._unavailable(f"cannot start the idempotency log on {self.settings.bootstrap_servers}: "
                                  f"{type(exc).__name__}: {exc}")
                log.warning("%s; retrying in %d s", self.last_error, self.settings.retry_after_seconds)
                await asyncio.sleep(self.settings.retry_after_seconds)
        while not self._closing:
            if self.producer is None:
                producer = factory(**self.config())
                try:
                    await producer.start()
                    partitions = await producer.partitions_for(self.settings.source_topic)
                    if self.transactional:
                        self.partitions = sorted(partitions)
                        ends = await self.log.end_offsets(self.settings.source_topic, self.partitions)
                        self.lower = dict(ends)  # new frames land at or after these
                except Exception as exc:
                    self._unavailable(f"cannot reach Kafka at {self.settings.bootstrap_servers}: {type(exc).__name__}: {exc}")
                    try:
                        await producer.stop()
                    except Exception:
                        pass
                    if self.transactional and not is_retriable(exc):
                        self.log.disable(f"Kafka at {self.settings.bootstrap_servers} refused the transactional "
                                         f"producer ({type(exc).__name__}: {exc})")
                        continue
                    if self.idempotent and self.settings.kafka_idempotence == "auto" and not is_retriable(exc):
                        # The broker answered but refused InitProducerId (no idempotence support).
                        log.warning("Kafka at %s does not support the idempotent producer (%s); producing without "
                                    "it: a frame re-sent after a lost answer may be stored twice",
                                    self.settings.bootstrap_servers, type(exc).__name__)
                        self.idempotent = False
                        continue
                else:
                    self.producer = producer
                    if self.transactional:
                        # a new epoch: every earlier producer of this transactional id is fenced from here on
                        self.incarnation = os.urandom(8)
                        if self._committer is None:
                            self._committer = asyncio.create_task(self._commit_loop(), name="ocms-collector-commit")
                        # settle what a killed predecessor (same id) left in doubt, before other replicas fence us
                        self.log._spawn(self.log.settle_predecessors(self.incarnation))
                    self._available()
                    self._wake.set()
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

    def produce(self, frame: bytes, timestamp_ms: int, records: int, waiters: list, version, first: int = 0) -> None:
        if self._committer is not None and self.transactional:
            self.frames.append(_Frame(frame, timestamp_ms, records, waiters, first, version))
            self._wake.set()
            return
        futures = [w.future for w in waiters]
        task = asyncio.create_task(self._produce(frame, timestamp_ms, records, futures, version))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    def produce_batch(self, batch: ShuffledBatch) -> None:
        """Produce a shuffled batch; its uploads are answered when every frame of it is acknowledged."""
        if self._committer is not None and self.transactional:
            self.frames.append(batch)
            self._wake.set()
            return
        task = asyncio.create_task(self._produce_batch(batch))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _produce_batch(self, batch: ShuffledBatch) -> None:
        """A batch without exactly-once retries: every frame to a partition the producer picks."""
        error: BaseException | None = KafkaUnavailableError("the collector stopped before Kafka acknowledged the batch")
        try:
            frames = await _shuffled(batch)
            error = await self._send_plain(frames, batch.timestamp_ms, batch.headers(),
                                           f"shuffled batch of {batch.reports} reports", batch.version)
            batch.frames = len(frames)
        finally:
            self._finish_batch(batch, error)

    async def _produce(self, frame: bytes, timestamp_ms: int, records: int, futures: list, version) -> None:
        error: BaseException | None = KafkaUnavailableError("the collector stopped before Kafka acknowledged the frame")
        try:
            error = await self._send_plain([frame], timestamp_ms, None, f"frame of {records} reports", version)
        finally:
            self.queued -= records  # ocms_collector_queue_reports reads it when scraped
            if error is None:
                self._available()
                self.metrics.frames_produced.labels(version.metric).inc()
                self.metrics.reports_produced.labels(version.metric).inc(records)
            else:
                self.metrics.frames_failed.labels(version.metric).inc()
            _answer([_Waiter(0, f, 0) for f in futures], error)

    async def _send_plain(self, frames: list[bytes], timestamp_ms: int, headers: list | None, what: str,
                          version) -> BaseException | None:
        """Send frames and wait for their acknowledgements (no exactly-once retries); the error if one failed."""
        try:
            if self.producer is None:
                raise KafkaUnavailableError("not connected to Kafka")
            # key=None: frames are keyed by nobody (spread over partitions), never by a device.
            acks = [await self.producer.send(self.settings.source_topic, frame, key=None, timestamp_ms=timestamp_ms,
                                             headers=headers) for frame in frames]
            bound_ms = ACK_TIMEOUTS * self.settings.kafka_timeout_ms
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.gather(*acks)), bound_ms / 1000)
            except asyncio.TimeoutError:  # the producer may still deliver them: a 503 never promises absence
                raise KafkaUnavailableError(
                    f"no acknowledgement within {bound_ms} ms ({ACK_TIMEOUTS} x --kafka-timeout-ms)") from None
            return None
        except Exception as exc:
            if is_retriable(exc) or isinstance(exc, KafkaUnavailableError):
                self._unavailable(f"{type(exc).__name__}: {exc}")
            log.warning("%s for %s@%s not acknowledged: %s: %s", what, version.metric, version.version,
                        type(exc).__name__, exc)
            return exc

    # ---------------------------------------------------- exactly-once mode
    async def _commit_loop(self) -> None:
        """Produce queued frames group by group until closed and drained.

        A group's listings are written and read back while earlier groups wait for their acks; the
        frames of every group go into one transaction, committed within TRANSACTION_SECONDS (it is
        there to be fenced, not for visibility) and when the queue runs dry.
        """
        while True:
            if not self.frames:
                if self._transaction is not None:
                    self._wake.clear()
                    try:  # a little longer open for the next group, then committed while idle
                        await asyncio.wait_for(self._wake.wait(), IDLE_COMMIT_SECONDS)
                        continue
                    except TimeoutError:
                        await self._end_transaction()
                        continue  # frames may have come meanwhile
                if self._closing:
                    await asyncio.gather(*self._acks, return_exceptions=True)
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if isinstance(self.frames[0], ShuffledBatch):
                batches = []
                while self.frames and len(batches) < GROUP_MAX_FRAMES and isinstance(self.frames[0], ShuffledBatch):
                    batches.append(self.frames.popleft())
                self._committing = True
                try:
                    await self._commit_batches(batches)
                except asyncio.CancelledError:
                    for batch in batches:
                        self._finish_batch(batch, KafkaUnavailableError("the collector stopped before Kafka acknowledged "
                                                                   "the batch"))
                    raise
                except Exception as exc:  # pragma: no cover - _commit_batches answers its own failures
                    log.exception("committing shuffled batches")
                    for batch in batches:
                        self._finish_batch(batch, KafkaUnavailableError(f"{type(exc).__name__}: {exc}"))
                finally:
                    self._committing = False
                continue
            group = []
            while self.frames and len(group) < GROUP_MAX_FRAMES and not isinstance(self.frames[0], ShuffledBatch):
                group.append(self.frames.popleft())
            self._committing = True
            try:
                await self._commit(group)
            except asyncio.CancelledError:
                self._finish(group, KafkaUnavailableError("the collector stopped before Kafka acknowledged the frame"))
                raise
            except Exception as exc:  # pragma: no cover - _commit answers its own failures
                log.exception("committing %d frames", len(group))
                self._finish(group, KafkaUnavailableError(f"{type(exc).__name__}: {exc}"))
            finally:
                self._committing = False

    async def _commit(self, group: list[_Frame]) -> None:
        from .exactly_once import encode_listing

        producer, incarnation, shared = self.producer, self.incarnation, self.log
        if producer is None or not self.available:
            self._finish(group, KafkaUnavailableError(self.last_error or "not connected to Kafka"))
            return
        timeout = self.settings.kafka_timeout_ms / 1000
        keyed = []
        for frame in group:
            frame.nonce = os.urandom(16)
            frame.partition = random.choice(self.partitions) if self.partitions else 0
            frame.lower = self.lower.get(frame.partition, 0)
            if frame.keys:
                keyed.append(frame)
        if keyed:
            # 1. list the keyed uploads of each frame, then read the log back up to the listings
            error = await self._list(keyed, lambda f: encode_listing(f.nonce, shared.owner, incarnation, f.partition,
                                                                     f.lower, f.timestamp_ms // 1000, f.keys))
            if error is not None:
                self._finish(group, error)
                return
            # 2. an upload whose key an earlier listing holds leaves the frame
            for frame in keyed:
                kept = self._listed_members(frame.members, frame.listing)
                if len(kept) != len(frame.members):
                    frame.data = self._without(frame, kept)
        # 3. send the frames in the open transaction; their acks are awaited beside the next groups
        sends, error = [], None
        try:
            await self._open_transaction(producer)
            for frame in group:
                if len(frame.data) > wire.HEADER_SIZE:
                    future = await asyncio.wait_for(producer.send(
                        self.settings.source_topic, frame.data, key=None, partition=frame.partition,
                        timestamp_ms=frame.timestamp_ms, headers=[(FRAME_HEADER, frame.nonce)]), timeout)
                    sends.append((frame, future))
        except Exception as exc:
            error = exc
        task = asyncio.create_task(self._acknowledged(producer, incarnation, group, sends, error))
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    async def _open_transaction(self, producer) -> None:
        """An open transaction of ``producer`` (committing one open longer than TRANSACTION_SECONDS first);
        KafkaUnavailableError when the producer was renewed meanwhile."""
        if self.producer is not producer:
            raise KafkaUnavailableError("the producer was renewed")
        if self._transaction is not None and time.monotonic() - self._transaction[1] > TRANSACTION_SECONDS:
            await self._end_transaction()
            if self.producer is not producer:
                raise KafkaUnavailableError("the producer was renewed")
        if self._transaction is None:
            # aiokafka retries transaction requests without end while Kafka is away: bounded here
            await asyncio.wait_for(producer.begin_transaction(), self.settings.kafka_timeout_ms / 1000)
            self._transaction = (producer, time.monotonic())

    async def _list(self, keyed: list, encode) -> KafkaUnavailableError | None:
        """Append a listing (``encode(item)``) for each of ``keyed`` (frames or batches) and read the log back up
        to them; each gets its ``listing``. On failure they are forgotten (never produced) and the error returned."""
        shared, timeout = self.log, self.settings.kafka_timeout_ms / 1000
        loop = asyncio.get_running_loop()
        listed = []
        for item in keyed:
            shared.local[item.nonce] = loop.create_future()
            listed.append(shared.expect(item.nonce))
        try:
            offsets = await asyncio.wait_for(shared.append([encode(item) for item in keyed]), timeout)
            await asyncio.wait_for(shared.applied(max(offsets)), timeout)
            for item, future in zip(keyed, listed):
                item.listing = await asyncio.wait_for(future, timeout)
        except Exception as exc:
            for item in keyed:
                shared.forget(item.nonce)
                shared.record_outcome(item.nonce, False)  # never produced
            self._unavailable(f"idempotency log: {type(exc).__name__}: {exc}")
            return KafkaUnavailableError(f"the idempotency log did not answer: {type(exc).__name__}: {exc}")
        return None

    def _listed_members(self, members: list, listing) -> list:
        """The uploads a listing holds the key of (or without a key); the others are answered: an earlier
        listing holds their key (KeyHeld: the 202 replayed when it is stored, 503 while in doubt)."""
        from .exactly_once import KeyHeld

        valid, kept = set(listing.valid), []
        for waiter in members:
            if waiter.key is None or waiter.key in valid:
                valid.discard(waiter.key)  # one upload per key (the process cache keeps it so)
                kept.append(waiter)
                continue
            holder = self.log.holder(waiter.key)
            if not waiter.future.done():
                waiter.future.set_exception(KeyHeld(holder is not None and holder.status == "stored"))
        return kept

    async def _acknowledged(self, producer, incarnation: bytes, group: list[_Frame], sends: list,
                            error: BaseException | None) -> None:
        """Answer a group's uploads as its frames are acknowledged; renew the producer if one failed."""
        timeout = self.settings.kafka_timeout_ms / 1000
        acked = set()
        for frame, future in sends:
            try:
                metadata = await asyncio.wait_for(future, timeout * 2)
            except Exception as exc:
                error = error or exc
                continue
            acked.add(frame)
            # in the partition, so counted (the worker reads uncommitted): answered 202 whatever the commit does
            self.lower[frame.partition] = max(self.lower.get(frame.partition, 0), metadata.offset + 1)
            self._finish([frame], None)
            if frame.listing is not None:
                self.log.record_outcome(frame.nonce, True)
        unsure = []
        for frame in group:
            if frame in acked:
                continue
            if len(frame.data) <= wire.HEADER_SIZE:  # every upload of it left: nothing to produce
                self._finish([frame], None)
                if frame.listing is not None:
                    self.log.record_outcome(frame.nonce, False)
                continue
            self._finish([frame], KafkaUnavailableError(f"{type(error).__name__}: {error}"))
            if frame.listing is not None:
                unsure.append(frame)
        if error is not None:
            log.warning("%d of %d frames not acknowledged: %s: %s", len(group) - len(acked), len(group),
                        type(error).__name__, error)
            self._renew(producer, f"{type(error).__name__}: {error}", incarnation, unsure)

    async def _commit_batches(self, batches: list[ShuffledBatch]) -> None:
        """List each shuffled batch whole (one append and one read-back for the group), take out uploads an
        earlier attempt holds, shuffle and cut what is left, write the redo copies of listed batches of
        several frames, then send every batch's frames to its partition in the open transaction; a repair
        batch (``preset``) is sent as it is."""
        from .exactly_once import batch_frame_id, encode_batch_listing

        producer, incarnation, shared = self.producer, self.incarnation, self.log
        if producer is None or not self.available:
            for batch in batches:
                self._finish_batch(batch, KafkaUnavailableError(self.last_error or "not connected to Kafka"))
            return
        timeout = self.settings.kafka_timeout_ms / 1000
        fresh = [batch for batch in batches if batch.preset is None]
        for batch in fresh:
            batch.nonce = os.urandom(16)
            batch.partition = secrets.choice(self.partitions) if self.partitions else 0
            batch.lower = self.lower.get(batch.partition, 0)
        keyed = [batch for batch in fresh if batch.keys]
        if keyed:
            # 1. one listing per batch naming every key of it; the log read back to the group's listings
            error = await self._list(keyed, lambda b: encode_batch_listing(
                b.nonce, shared.owner, incarnation, b.partition, b.lower, shared.redo_end, b.timestamp_ms // 1000, b.keys))
            if error is not None:
                for batch in batches:
                    self._finish_batch(batch, error)
                return
            # 2. an upload whose key an earlier listing holds leaves its batch, before the batch is shuffled
            for batch in keyed:
                kept = self._listed_members(batch.members, batch.listing)
                if len(kept) != len(batch.members):
                    batch.keep(kept)
        # 3. shuffled and cut; the redo copies before any frame (whoever settles a batch a kill cut short completes it)
        records: dict[ShuffledBatch, list] = {}
        for batch in batches:
            if batch.preset is not None:
                records[batch] = batch.preset
                continue
            frames = await _shuffled(batch)
            if not frames:  # every upload of it left
                self._finish_batch(batch, None)
                if batch.listing is not None:
                    shared.record_outcome(batch.nonce, False)
                continue
            common = batch.headers()
            if batch.listing is None:
                records[batch] = [(frame, common, batch.timestamp_ms) for frame in frames]
            else:
                records[batch] = [(frame, common + [(FRAME_HEADER, batch_frame_id(batch.nonce, i, len(frames)))],
                                   batch.timestamp_ms) for i, frame in enumerate(frames)]
        redo = [(batch, r) for batch, r in records.items() if batch.listing is not None and len(r) > 1]
        if redo:
            try:
                copies = [copy for _, r in redo for copy in r]
                await asyncio.wait_for(shared.append_redo([c[0] for c in copies], [c[1] for c in copies],
                                                          [c[2] for c in copies]), timeout)
            except Exception as exc:
                self._unavailable(f"redo topic: {type(exc).__name__}: {exc}")
                for batch, _ in redo:
                    shared.record_outcome(batch.nonce, False)  # never produced
                    self._finish_batch(batch, KafkaUnavailableError(f"the redo topic did not answer: "
                                                               f"{type(exc).__name__}: {exc}"))
                    del records[batch]
        # 4. every frame to its batch's partition, in the open transaction. A batch whose every frame was sent
        # before a send failed is answered by its own acknowledgements (202 when they come: its reports are in
        # Kafka, as _acknowledged answers frames); the batch whose send failed and those after it get the error.
        sends: dict[ShuffledBatch, list] = {batch: [] for batch in records}
        errors: dict[ShuffledBatch, BaseException] = {}
        try:
            await self._open_transaction(producer)
            for batch, frames in records.items():
                for value, headers, timestamp_ms in frames:
                    sends[batch].append(await asyncio.wait_for(producer.send(
                        self.settings.source_topic, value, key=None, partition=batch.partition,
                        timestamp_ms=timestamp_ms, headers=headers), timeout))
        except Exception as exc:
            errors = {batch: exc for batch, frames in records.items() if len(sends[batch]) < len(frames)}
        for batch, frames in records.items():
            task = asyncio.create_task(self._batch_acknowledged(producer, incarnation, batch, sends[batch], len(frames),
                                                                errors.get(batch)))
            self._acks.add(task)
            task.add_done_callback(self._acks.discard)

    async def _batch_acknowledged(self, producer, incarnation: bytes, batch: ShuffledBatch, sends: list, expected: int,
                                  error: BaseException | None) -> None:
        """Answer a batch's uploads once every frame of it is acknowledged (503 to all if one is not; the
        listing is then settled after renewing the producer: completed from the redo copy if cut short)."""
        timeout = self.settings.kafka_timeout_ms / 1000
        acked = 0
        for future in sends:
            try:
                metadata = await asyncio.wait_for(future, timeout * 2)
            except Exception as exc:
                error = error or exc
                continue
            acked += 1
            self.lower[batch.partition] = max(self.lower.get(batch.partition, 0), metadata.offset + 1)
        if error is None and acked == expected:
            batch.frames = expected
            self._finish_batch(batch, None)
            if batch.listing is not None:
                self.log.record_outcome(batch.nonce, True)
            return
        error = error or KafkaUnavailableError(f"{expected - acked} of {expected} frames not acknowledged")
        self._finish_batch(batch, KafkaUnavailableError(f"{type(error).__name__}: {error}"))
        log.warning("%d of %d frames of a shuffled batch not acknowledged: %s: %s", expected - acked, expected,
                    type(error).__name__, error)
        self._renew(producer, f"{type(error).__name__}: {error}", incarnation,
                    [batch] if batch.listing is not None else [])

    async def repair(self, records: list, partition: int) -> None:
        """Produce frames of a batch cut short, as first written ((frame, headers, timestamp_ms) each), with
        this collector's producer (whose start fenced the batch's producer); return once acknowledged."""
        if not records:
            return
        done = asyncio.get_running_loop().create_future()
        self.frames.append(ShuffledBatch(None, b"", [_Waiter(0, done, 0)], records[0][2], 1, 0, preset=records,
                                         partition=partition))
        self._wake.set()
        await done

    def _finish_batch(self, batch: ShuffledBatch, error: BaseException | None) -> None:
        """Answer a batch's uploads (None: every frame acknowledged) and release their queue places."""
        self.queued -= batch.queued
        batch.queued = 0
        if batch.version is None:  # a repair batch: its one member is SharedIdempotency's wait for it
            _answer(batch.members, error)
            return
        metric = batch.version.metric
        if error is None:
            if batch.frames:
                self._available()
                self.metrics.frames_produced.labels(metric).inc(batch.frames)
                self.metrics.reports_produced.labels(metric).inc(batch.reports)
                self.metrics.shuffled_batches.labels(metric).inc()
                self.metrics.shuffled_batch_reports.observe(batch.reports)
        else:
            self.metrics.frames_failed.labels(metric).inc()
        _answer(batch.members, error)

    async def _end_transaction(self) -> None:
        """Wait for the open transaction's acks and commit it (renew the producer if that fails)."""
        producer, _ = self._transaction
        await asyncio.gather(*self._acks, return_exceptions=True)
        self._transaction = None
        if self.producer is not producer:
            return  # failed and renewed meanwhile
        try:
            await asyncio.wait_for(producer.commit_transaction(), self.settings.kafka_timeout_ms / 1000)
        except Exception as exc:
            # every frame of it was acknowledged (and answered): only the producer needs renewing
            log.warning("commit of a transaction failed: %s: %s", type(exc).__name__, exc)
            self._renew(producer, f"{type(exc).__name__}: {exc}", self.incarnation, [])

    def _renew(self, producer, why: str, incarnation: bytes, unsure: list[_Frame]) -> None:
        """A new producer (its start fences this one), then settle the frames whose fate is unknown, in
        the background (a retry of their uploads learns it from the log or settles them itself)."""
        if self.producer is producer:
            self.producer = None
            self._unavailable(why)
            self.log._spawn(self._stop_quietly(producer))
        if unsure:
            self.log._spawn(self._settle_own(unsure, incarnation))

    async def _stop_quietly(self, producer) -> None:
        try:
            await asyncio.wait_for(producer.stop(), self.settings.kafka_timeout_ms / 1000)
        except Exception:
            pass

    async def _settle_own(self, frames: list[_Frame], incarnation: bytes) -> None:
        while frames and not self._closing:
            if self.producer is None or self.incarnation == incarnation:  # the new (fencing) producer is not up yet
                await asyncio.sleep(self.settings.retry_after_seconds)
                continue
            frame = frames[0]
            try:
                if isinstance(frame, ShuffledBatch):  # settled (and completed if cut short) like any retry would
                    stored = await self.log.settle(frame.listing)
                else:
                    stored = await self.log.scan(frame.partition, frame.lower, frame.nonce)
            except Exception as exc:
                log.info("settling an unacknowledged frame: %s: %s; retrying", type(exc).__name__, exc)
                await asyncio.sleep(self.settings.retry_after_seconds)
                continue
            self.log.record_outcome(frame.nonce, stored)
            frames.pop(0)

    def _without(self, frame: _Frame, kept: list) -> bytes:
        """The frame's bytes holding only the ``kept`` uploads."""
        size = wire.record_size(frame.version.params)
        body = frame.data
        parts = [body[wire.HEADER_SIZE + (w.start - frame.first) * size: wire.HEADER_SIZE + (w.end - frame.first) * size]
                 for w in kept]
        count = sum(w.end - w.start for w in kept)
        return wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, frame.version.fingerprint, count) + b"".join(parts)

    def _finish(self, frames: list[_Frame], error: BaseException | None) -> None:
        """Answer the uploads of frames (None: acknowledged) and release their queue places."""
        for frame in frames:
            self.queued -= frame.records
            metric = frame.version.metric
            if error is None:
                produced = (len(frame.data) - wire.HEADER_SIZE) // wire.record_size(frame.version.params)
                if produced:
                    self._available()
                    self.metrics.frames_produced.labels(metric).inc()
                    self.metrics.reports_produced.labels(metric).inc(produced)
            else:
                self.metrics.frames_failed.labels(metric).inc()
            _answer(frame.members, error)

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
        while (self.frames or self._committing or self._acks) and self._committer is not None \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self._closing = True
        self._wake.set()
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.gather(self._probe, return_exceptions=True)
        if self._committer is not None:
            try:  # it commits the open transaction and returns
                await asyncio.wait_for(asyncio.shield(self._committer), self.settings.kafka_timeout_ms / 1000)
            except Exception:
                pass
            self._committer.cancel()
            await asyncio.gather(self._committer, return_exceptions=True)
        stopped = KafkaUnavailableError("the collector stopped before Kafka acknowledged the frame")
        for item in self.frames:
            if isinstance(item, ShuffledBatch):
                self._finish_batch(item, stopped)
            else:
                self._finish([item], stopped)
        self.frames.clear()
        for task in list(self.in_flight):
            task.cancel()
        await asyncio.gather(*self.in_flight, return_exceptions=True)
        if self.log is not None:
            await self.log.close()
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.stop()


def _answer(members: list, error: BaseException | None) -> None:
    """Resolve the uploads' futures: acknowledged (None), or failed with KafkaUnavailableError."""
    failure = None if error is None else error if isinstance(error, KafkaUnavailableError) \
        else KafkaUnavailableError(f"{type(error).__name__}: {error}")
    for waiter in members:
        if not waiter.future.done():
            if failure is None:
                waiter.future.set_result(None)
            else:
                waiter.future.set_exception(failure)


async def _shuffled(batch: ShuffledBatch) -> list[bytes]:
    """The batch's frames (CSPRNG permutation, then cut): on a thread for large batches."""
    if batch.reports > THREAD_MIN_REPORTS:
        return await asyncio.to_thread(batch.shuffled_frames)
    return batch.shuffled_frames()
