"""Exactly-once retries across collector restarts and replicas (docs/collector.md, "Retries").

An upload retried with its ``Idempotency-Key`` must be counted once even when the collector
that took the first attempt was killed after Kafka stored the frame but before the 202 left,
or when the retry reaches another replica. Every collector shares one ordered log: partition 0
of a collector-only topic (``--idempotency-topic``, default ``<source topic>-idempotency``):

* **listing** (one per frame that holds uploads with a key): the frame's random nonce (also a
  Kafka header of the frame, one per frame), the partition it goes to and an offset below it,
  the producing collector (transactional id and producer incarnation), a coarse time, and the
  keyed hashes of the keys of its uploads. Written *before* the frame.
* **outcome**: the frame was stored (``S``) or never will be (``X``).

Every collector applies the log in its order (:class:`ListingLog`, the same result everywhere):
a listing takes a key only if no earlier listing holds it (pending or stored); otherwise the
listing is void for that key. The producing collector reads the log up to its own listing
before producing the frame and takes the uploads whose key the listing did not take out of it
(202 replayed if the holder is stored, 503 ``idempotency_pending`` while it is in doubt).

A listing in doubt (its collector died after writing it) is settled by fencing: frames are
produced by a transactional producer, used only so that starting a producer with the same
transactional id bumps the epoch and the broker refuses the dead one's sends from then on.
After the fence, the nonce is looked for in the listed partition: found or not found is final,
and the outcome is written to the log. The worker is unchanged: it reads every appended frame
(``read_uncommitted``), so "appended" is "counted", on Apache Kafka and on the embedded Tansu
broker alike (whose ``read_committed`` shows aborted records).

Shuffled batches (``--shuffle-min-reports``, collector/shuffle.py) are listed whole: one **batch
listing** (``B``) holds the keys of every upload of the batch, so a key maps to its batch, never to
a frame. The batch's frames all go to the listed partition, each with the header ``ocms-frame`` =
the batch nonce, the frame's index and the batch's frame count. A batch of several frames is not
one atomic append: a collector killed while sending it may leave some of its frames in Kafka and
not others. So before its first frame, a listed batch of more than one frame is written to the
**redo topic** (``<idempotency topic>-redo``, collector-only, the same frames); whoever settles a
batch found partly stored (after the fence) produces the missing frames from there, fenced like
the owner (with the owner's transactional id, so two settlers never both complete it), and the
batch is stored whole: every upload of it counted once.

Nothing of this links a report to its upload in the reports topic: a frame carries one random
nonce (no more than its own offset says; a shuffled batch's frames share theirs), and no key,
hash, count or time of an upload.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import os
import socket
import struct
import time
from dataclasses import dataclass, field

from cms_core.errors import OCMSError

log = logging.getLogger(__name__)

#: The Kafka header of a frame holding its nonce (16 random bytes, one per frame).
FRAME_HEADER = "ocms-frame"
NONCE_BYTES = 16
KEY_HASH_BYTES = 16
#: listing: kind, nonce, partition, lower offset, time (s), incarnation, owner length; then owner, keys.
_LISTING = struct.Struct(">c16sIQQ8sH")
#: batch listing: the same, then the redo topic's lower offset; then owner, keys.
_BATCH_LISTING = struct.Struct(">c16sIQQ8sHQ")
_OUTCOME = struct.Struct(">c16s")
LISTING, BATCH_LISTING, STORED, FAILED = b"F", b"B", b"S", b"X"
#: The ``ocms-frame`` header of a shuffled batch's frame: the batch nonce, the frame's index, the frame count.
_BATCH_FRAME = struct.Struct(">16sII")
#: The tail's fetch wait: Tansu does not answer a waiting fetch when records arrive (Kafka does), so a
#: short wait is what bounds how soon a collector reads its own listing back (about 1-5 ms here).
TAIL_FETCH_WAIT_MS = 5


class IdempotencyPending(OCMSError):
    """The key's earlier attempt is in doubt and cannot be settled yet (answer 503, retry later)."""

    def __init__(self, detail: str, retry_after: float):
        super().__init__(detail)
        self.retry_after = retry_after


class KeyHeld(OCMSError):
    """An upload left its frame: an earlier listing holds its key (``stored``: replay the 202)."""

    def __init__(self, stored: bool):
        super().__init__("stored by an earlier attempt" if stored else "an earlier attempt is in doubt")
        self.stored = stored


def key_hash(secret: bytes, application: str, key: str) -> bytes:
    """The keyed hash of an upload's Idempotency-Key that the log holds (never the key itself)."""
    return hashlib.blake2b(f"{application}\x00{key}".encode(), key=secret, digest_size=KEY_HASH_BYTES,
                           person=b"ocms-idem-v1").digest()


def encode_listing(nonce: bytes, owner: str, incarnation: bytes, partition: int, lower: int, time_s: int,
                   keys: list[bytes]) -> bytes:
    name = owner.encode()
    return _LISTING.pack(LISTING, nonce, partition, lower, time_s, incarnation, len(name)) + name + b"".join(keys)


def encode_batch_listing(nonce: bytes, owner: str, incarnation: bytes, partition: int, lower: int, redo_lower: int,
                         time_s: int, keys: list[bytes]) -> bytes:
    """The listing of a shuffled batch: every key of its uploads, and where its redo copy starts."""
    name = owner.encode()
    return _BATCH_LISTING.pack(BATCH_LISTING, nonce, partition, lower, time_s, incarnation, len(name),
                               redo_lower) + name + b"".join(keys)


def batch_frame_id(nonce: bytes, index: int, count: int) -> bytes:
    """The ``ocms-frame`` header value of frame ``index`` of a shuffled batch of ``count`` frames."""
    return _BATCH_FRAME.pack(nonce, index, count)


def parse_batch_frame_id(value) -> tuple[bytes, int, int] | None:
    """(nonce, index, count) of a shuffled batch's frame header, None for any other value."""
    if not isinstance(value, (bytes, bytearray)) or len(value) != _BATCH_FRAME.size:
        return None
    nonce, index, count = _BATCH_FRAME.unpack(value)
    return (nonce, index, count) if index < count else None


def encode_outcome(nonce: bytes, stored: bool) -> bytes:
    return _OUTCOME.pack(STORED if stored else FAILED, nonce)


@dataclass(eq=False)
class Listing:
    nonce: bytes
    owner: str
    incarnation: bytes
    partition: int
    lower: int
    time: int
    keys: tuple
    offset: int
    seen_at: float
    valid: set = field(default_factory=set)
    status: str = "pending"  # pending | stored | failed
    batch: bool = False  # a shuffled batch's listing (its frames carry batch_frame_id headers)
    redo_lower: int = 0  # an offset of the redo topic at or below the batch's redo copy


def decode_listing(value: bytes, offset: int, seen_at: float) -> Listing:
    batch = value[:1] == BATCH_LISTING
    redo_lower = 0
    if batch:
        _, nonce, partition, lower, time_s, incarnation, size, redo_lower = _BATCH_LISTING.unpack_from(value)
        head = _BATCH_LISTING.size
    else:
        _, nonce, partition, lower, time_s, incarnation, size = _LISTING.unpack_from(value)
        head = _LISTING.size
    start = head + size
    rest = value[start:]
    if len(rest) % KEY_HASH_BYTES:
        raise ValueError("key hashes are not whole")
    keys = tuple(rest[i:i + KEY_HASH_BYTES] for i in range(0, len(rest), KEY_HASH_BYTES))
    return Listing(nonce, value[head:start].decode(), incarnation, partition, lower, time_s, keys, offset, seen_at,
                   batch=batch, redo_lower=redo_lower)


class ListingLog:
    """What every collector computes from the log, in its order (so every collector agrees).

    A listing takes each of its keys that no earlier listing holds (pending or stored; a failed
    listing releases its keys). Listings older than ``window`` seconds (by the log's own times)
    and the oldest beyond ``max_keys`` held keys are forgotten, also in log order.
    """

    def __init__(self, window_s: float, max_keys: int, clock=time.monotonic):
        self.window_s = window_s
        self.max_keys = max_keys
        self.clock = clock
        self.frames: collections.OrderedDict[bytes, Listing] = collections.OrderedDict()
        self.holders: dict[bytes, Listing] = {}
        self.held = 0
        self.bad_records = 0

    def __len__(self) -> int:
        return len(self.holders)

    def holder(self, key: bytes) -> Listing | None:
        return self.holders.get(key)

    def apply(self, offset: int, value: bytes) -> Listing | None:
        """Apply one record; the listing it adds or settles, if any."""
        try:
            kind = value[:1]
            if kind in (LISTING, BATCH_LISTING):
                listing = decode_listing(value, offset, self.clock())
            elif kind in (STORED, FAILED):
                _, nonce = _OUTCOME.unpack(value)
                return self._outcome(nonce, kind == STORED)
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            self.bad_records += 1
            log.warning("idempotency log offset %d: not a collector record (%s); skipped", offset, exc)
            return None
        if listing.nonce in self.frames:
            return None  # a duplicate append (a producer retry): the first one counts
        self._expire(listing.time)
        for key in listing.keys:
            holder = self.holders.get(key)
            if holder is None or holder.status == "failed":
                self.holders[key] = listing
                listing.valid.add(key)
        self.frames[listing.nonce] = listing
        self.held += len(listing.valid)
        while self.held > self.max_keys and self.frames:
            self._drop(next(iter(self.frames)))
        return listing

    def _outcome(self, nonce: bytes, stored: bool) -> Listing | None:
        listing = self.frames.get(nonce)
        if listing is None or listing.status != "pending":
            return None  # forgotten, or settled already (every settler finds the same)
        listing.status = "stored" if stored else "failed"
        if not stored:
            for key in listing.valid:
                if self.holders.get(key) is listing:
                    del self.holders[key]
        return listing

    def _expire(self, now_s: int) -> None:
        while self.frames:
            nonce, first = next(iter(self.frames.items()))
            if first.time >= now_s - self.window_s:
                break
            self._drop(nonce)

    def _drop(self, nonce: bytes) -> None:
        listing = self.frames.pop(nonce)
        self.held -= len(listing.valid)
        for key in listing.valid:
            if self.holders.get(key) is listing:
                del self.holders[key]


def default_instance_id(port: int) -> str | None:
    """``host:port`` (unique among live collectors: one process per port), None for a random port."""
    return f"{socket.gethostname()}:{port}" if port else None


class SharedIdempotency:
    """The log's I/O for one collector: append, tail (into a :class:`ListingLog`), settle, fence, scan."""

    def __init__(self, settings, metrics, *, clock=time.monotonic):
        self.settings = settings
        self.metrics = metrics
        self.topic = settings.idempotency_topic
        #: the copies of listed shuffled batches of several frames, written before their frames
        self.redo_topic = f"{self.topic}-redo"
        self.redo_end = 0  # an offset of the redo topic at or below the next batch's copy
        instance = settings.instance_id or default_instance_id(settings.port) or os.urandom(8).hex()
        #: the transactional id of this collector's frame producer (the same across its restarts)
        self.owner = f"ocms-collector-{instance}"
        secret = b""
        if settings.idempotency_secret_file:
            with open(settings.idempotency_secret_file, "rb") as f:
                secret = f.read().strip()
        self._secret = secret[:64]
        self.grace_s = 2 * settings.kafka_timeout_ms / 1000 + 2.0
        self.state = ListingLog(settings.idempotency_window_seconds, settings.idempotency_max_keys, clock)
        self.clock = clock
        self.enabled = True
        self.ready = False
        self.outlet = None  # the KafkaOutlet producing the frames (set by it)
        self.local: dict[bytes, asyncio.Future] = {}  # nonce -> stored? (listings of this process)
        self._awaiting: dict[bytes, asyncio.Future] = {}  # nonce -> its Listing once applied
        self._applied = -1
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._settling: dict[bytes, asyncio.Task] = {}
        self._repairs: dict[bytes, asyncio.Task] = {}  # nonce -> the repair of a batch cut short, while it runs
        self._tasks: set[asyncio.Task] = set()
        self._producer = None
        self._tail: asyncio.Task | None = None

    # ----------------------------------------------------------------- keys
    def key_hash(self, application: str, key: str) -> bytes:
        """The keyed hash of an upload's key (what the log holds; never the key)."""
        return key_hash(self._secret, application, key)

    def holder(self, key: bytes) -> Listing | None:
        return self.state.holder(key)

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        from producer.kafka import create_topics, make_producer

        s = self.settings
        profile = s.broker
        retention_ms = max(1, 2 * s.idempotency_window_seconds) * 1000
        while True:
            try:
                topics = {self.topic: 1}
                if s.shuffle_min_reports:
                    topics[self.redo_topic] = 1
                await create_topics(s.bootstrap_servers, topics, profile,
                                    configs={t: {"cleanup.policy": "delete", "retention.ms": str(retention_ms)}
                                             for t in topics})
                break
            except Exception as exc:
                if "partitions" in str(exc):  # exists with more partitions: partition 0 is the log
                    log.warning("idempotency topic %s: %s; using its partition 0", self.topic, exc)
                    break
                log.info("idempotency topic %s not created yet: %s: %s", self.topic, type(exc).__name__, exc)
                await asyncio.sleep(s.retry_after_seconds)
        producer = make_producer(s.bootstrap_servers, profile, idempotent=False, linger_ms=0,
                                 client_id="ocms-collector-log", request_timeout_ms=s.kafka_timeout_ms)
        try:  # a failed start is retried by the caller: nothing of this attempt stays open
            await producer.start()
            if s.shuffle_min_reports:
                self.redo_end = (await self.end_offsets(self.redo_topic, [0])).get(0, 0)
        except BaseException:
            await producer.stop()
            raise
        self._producer = producer
        self._tail = asyncio.create_task(self._tail_loop(), name="ocms-collector-idempotency-tail")

    async def close(self) -> None:
        tasks = [t for t in [self._tail, *self._settling.values(), *self._repairs.values(), *self._tasks]
                 if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    def disable(self, why: str) -> None:
        log.warning("exactly-once retries are off: %s; a retry is answered once only by the collector process "
                    "that took its first attempt", why)
        self.enabled = False

    # ------------------------------------------------------------------ log
    async def append(self, values: list[bytes]) -> list[int]:
        """Append records (acks=all); their offsets."""
        producer = self._producer
        if producer is None:
            raise ConnectionError("the idempotency log is closed")
        futures = [await producer.send(self.topic, value, partition=0) for value in values]
        return [(await f).offset for f in futures]

    async def append_redo(self, frames: list[bytes], headers: list[list], timestamps_ms: list[int]) -> None:
        """Write shuffled batches' frames (with the headers and timestamps they will carry) to the redo topic
        (acks=all)."""
        producer = self._producer
        if producer is None:
            raise ConnectionError("the idempotency log is closed")
        futures = [await producer.send(self.redo_topic, frame, partition=0, timestamp_ms=t, headers=h)
                   for frame, h, t in zip(frames, headers, timestamps_ms)]
        offsets = [(await f).offset for f in futures]
        self.redo_end = max(self.redo_end, max(offsets) + 1)

    def expect(self, nonce: bytes) -> asyncio.Future:
        """A future of this nonce's Listing, resolved when the tail applies it."""
        future = self._awaiting[nonce] = asyncio.get_running_loop().create_future()
        return future

    def forget(self, nonce: bytes) -> None:
        self._awaiting.pop(nonce, None)

    def record_outcome(self, nonce: bytes, stored: bool) -> None:
        """This process knows a listing's outcome: tell waiters here, and the log (in the background)."""
        future = self.local.get(nonce)  # dropped when the tail applies the outcome
        if future is not None and not future.done():
            future.set_result(stored)
        self._spawn(self._append_quietly(encode_outcome(nonce, stored)))

    async def _append_quietly(self, value: bytes) -> None:
        try:
            await self.append([value])
        except Exception as exc:  # the outcome is found again by whoever settles the listing
            log.debug("outcome not written to the idempotency log: %s: %s", type(exc).__name__, exc)

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def applied(self, offset: int) -> None:
        """Return once the tail applied the log up to ``offset``."""
        if self._applied >= offset:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, future))
        await future

    async def _tail_loop(self) -> None:
        from aiokafka import TopicPartition

        from producer.kafka import make_consumer

        s = self.settings
        consumer = make_consumer(s.bootstrap_servers, profile=s.broker, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=TAIL_FETCH_WAIT_MS, client_id="ocms-collector-tail",
                                 isolation_level="read_uncommitted")
        tp = TopicPartition(self.topic, 0)
        try:
            while True:
                try:
                    await consumer.start()
                    break
                except Exception as exc:
                    log.info("idempotency log not readable yet: %s: %s", type(exc).__name__, exc)
                    await asyncio.sleep(s.retry_after_seconds)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while True:
                got = await consumer.getmany(tp, timeout_ms=1000)
                for message in got.get(tp, ()):
                    if message.offset <= self._applied:
                        # the log starts over (a broker that lost its data): what it said is gone
                        log.warning("idempotency log %s went back from offset %d to %d; reading it afresh",
                                    self.topic, self._applied, message.offset)
                        self.state = ListingLog(self.state.window_s, self.state.max_keys, self.clock)
                    listing = self.state.apply(message.offset, message.value)
                    if listing is not None:
                        if listing.status == "pending":
                            future = self._awaiting.pop(listing.nonce, None)
                            if future is not None and not future.done():
                                future.set_result(listing)
                        else:
                            self.local.pop(listing.nonce, None)
                    self._applied = message.offset
                highwater = consumer.highwater(tp)
                if highwater is not None and highwater <= self._applied:
                    # shorter than what was read: a broker that lost its data (the embedded one keeps it in
                    # memory); the embedded broker answers a fetch past the end with nothing, not an error
                    log.warning("idempotency log %s ends at %d, before offset %d read earlier; reading it afresh",
                                self.topic, highwater, self._applied)
                    self.state = ListingLog(self.state.window_s, self.state.max_keys, self.clock)
                    self._applied = -1
                    await consumer.seek_to_beginning(tp)
                    continue
                if len(self.local) > 2 * len(self.state.frames) + 1000:  # outcomes never written back
                    self.local = {n: f for n, f in self.local.items() if n in self.state.frames or not f.done()}
                if self._waiters:
                    waiting = []
                    for offset, future in self._waiters:
                        if offset <= self._applied:
                            if not future.done():
                                future.set_result(None)
                        else:
                            waiting.append((offset, future))
                    self._waiters = waiting
                if not self.ready:
                    highwater = consumer.highwater(tp)
                    if highwater is not None and await consumer.position(tp) >= highwater:
                        self.ready = True
                        log.info("idempotency log %s read: %d keys held", self.topic, len(self.state))
                self.metrics.idempotency_keys.set(len(self.state))
        finally:
            await consumer.stop()

    # --------------------------------------------------------------- settle
    async def settle(self, listing: Listing) -> bool:
        """Whether the listing's frame is stored (True) or never will be (False), settled if need be.

        Raises IdempotencyPending when that cannot be known yet (answer 503 and let the client retry).
        """
        if listing.status != "pending":
            return listing.status == "stored"
        task = self._settling.get(listing.nonce)
        if task is None:
            task = self._settling[listing.nonce] = asyncio.create_task(self._settle(listing))
            task.add_done_callback(lambda _t, n=listing.nonce: self._settling.pop(n, None))
        return await asyncio.shield(task)

    async def _settle(self, listing: Listing) -> bool:
        outlet = self.outlet
        timeout = self.settings.kafka_timeout_ms / 1000
        if listing.owner == self.owner and outlet is not None and listing.incarnation == outlet.incarnation:
            # this producer's own frame: its outcome is known here when its transaction ends
            future = self.local.get(listing.nonce)
            if future is None:
                raise IdempotencyPending("the earlier attempt's frame is not known here", 1)
            try:
                stored = await asyncio.wait_for(asyncio.shield(future), timeout)
            except TimeoutError:
                raise IdempotencyPending("the earlier attempt is still waiting for Kafka", 1) from None
            if listing.status == "pending":  # its outcome is known here: in the log before a new listing
                await self.append([encode_outcome(listing.nonce, stored)])
            return stored
        if listing.owner == self.owner:
            # an earlier producer of this collector (a killed process, or this one before its producer was
            # renewed): the current producer's start fenced it, so the partition says what is final
            if outlet is None or outlet.producer is None or not outlet.available:
                raise IdempotencyPending("this collector's producer is not ready", self.settings.retry_after_seconds)
            if listing.batch:
                stored = await asyncio.wait_for(self.complete_batch(listing, outlet.repair), timeout * 12)
        else:
            age = self.clock() - listing.seen_at
            if age < self.grace_s:
                # its collector may be alive and about to say what became of it
                raise IdempotencyPending("an earlier attempt at another collector is in doubt", self.grace_s - age)
            if listing.batch:
                stored = await asyncio.wait_for(self._fence_and_complete(listing), timeout * 12)
            else:
                await asyncio.wait_for(self.fence(listing.owner), timeout * 3)
        if not listing.batch:
            stored = await asyncio.wait_for(self.scan(listing.partition, listing.lower, listing.nonce), timeout * 6)
        await self.append([encode_outcome(listing.nonce, stored)])  # before a new listing of the key
        self.metrics.idempotency_settled.labels("stored" if stored else "failed").inc()
        log.info("settled an in-doubt frame of %s: %s", listing.owner, "stored" if stored else "never stored")
        return stored

    async def settle_predecessors(self, incarnation: bytes) -> None:
        """Settle the pending listings of earlier producers of this collector's id (a killed process,
        or this one before a renewal), once the log is read: the producer started as ``incarnation``
        fenced them, so their partitions say what is final. Retries then find outcomes, and no other
        replica needs to fence this collector for them."""
        while not self.ready:
            await asyncio.sleep(0.1)
        await self.applied(self._applied)
        for listing in list(self.state.frames.values()):
            outlet = self.outlet
            if outlet is None or outlet.incarnation != incarnation:
                return  # renewed again meanwhile: the next call does it
            if listing.status == "pending" and listing.owner == self.owner and listing.incarnation != incarnation:
                try:
                    await self.settle(listing)
                except Exception as exc:  # a retry settles it later
                    log.info("a predecessor's frame not settled yet: %s: %s", type(exc).__name__, exc)

    async def fence(self, owner: str) -> None:
        """Bump ``owner``'s producer epoch: the broker refuses that producer's sends from now on."""
        from producer.kafka import make_producer

        s = self.settings
        producer = make_producer(s.bootstrap_servers, s.broker, idempotent=True, transactional_id=owner,
                                 client_id="ocms-collector-fence", request_timeout_ms=s.kafka_timeout_ms)
        try:
            await producer.start()
        finally:
            await producer.stop()

    async def complete_batch(self, listing: Listing, produce) -> bool:
        """Whether a shuffled batch is stored, after a fence: none of its frames in the partition -> False;
        all -> True; some -> the missing ones are produced from the redo copy (``await produce(records,
        partition)``, by a producer that fenced the batch's owner) and it is True: whole, once."""
        earlier = self._repairs.get(listing.nonce)
        if earlier is not None:  # a repair a timed-out settle left queued: what it produces is scanned below
            await asyncio.gather(asyncio.shield(earlier), return_exceptions=True)
        found, count = await self.scan_batch(listing.partition, listing.lower, listing.nonce)
        if not found:
            return False
        if len(found) == count:
            return True
        missing = [i for i in range(count) if i not in found]
        copies = await self.read_redo(listing.redo_lower, listing.nonce)
        absent = [i for i in missing if i not in copies]
        if absent:  # cannot happen: the copy is acknowledged before the first frame is sent
            log.error("shuffled batch %s of %s: frames %s are neither in partition %d nor in %s; its retries are "
                      "answered as stored", listing.nonce.hex(), listing.owner, absent, listing.partition,
                      self.redo_topic)
        # A task, waited for shielded: a settle's timeout must not leave it queued unknown to the next
        # settle, which would produce the missing frames again.
        repair = self._repairs[listing.nonce] = asyncio.ensure_future(
            produce([copies[i] for i in missing if i in copies], listing.partition))
        repair.add_done_callback(lambda task, n=listing.nonce: self._repairs.pop(n, None)
                                 if self._repairs.get(n) is task else None)
        await asyncio.shield(repair)
        self.metrics.batches_completed.inc()
        log.info("completed a shuffled batch of %s cut short: %d of its %d frames produced from %s", listing.owner,
                 len(missing) - len(absent), count, self.redo_topic)
        return True

    async def _fence_and_complete(self, listing: Listing) -> bool:
        """Another collector's batch: fence it with a producer of its transactional id, which then produces
        what :meth:`complete_batch` finds missing (a second settler's producer would fence this one)."""
        from producer.kafka import make_producer

        s = self.settings
        producer = make_producer(s.bootstrap_servers, s.broker, idempotent=True,
                                 transactional_id=listing.owner, client_id="ocms-collector-fence",
                                 request_timeout_ms=s.kafka_timeout_ms, max_batch_size=1_048_576)  # as the outlet's

        async def produce(records: list, partition: int) -> None:
            if not records:
                return
            await producer.begin_transaction()
            futures = [await producer.send(s.source_topic, value, key=None, partition=partition, timestamp_ms=timestamp,
                                           headers=headers) for value, headers, timestamp in records]
            for future in futures:
                await future
            await producer.commit_transaction()

        try:
            await producer.start()  # in the try: a start that fails or is cancelled leaves nothing open
            return await self.complete_batch(listing, produce)
        finally:
            await producer.stop()

    async def scan_batch(self, partition: int, lower: int, nonce: bytes) -> tuple[set[int], int]:
        """(indices found, frame count) of a shuffled batch's frames in ``partition`` at or after ``lower``."""
        found: set[int] = set()
        count = 0

        def match(message) -> bool:
            nonlocal count
            for name, value in message.headers or ():
                if name == FRAME_HEADER:
                    parsed = parse_batch_frame_id(value)
                    if parsed is not None and parsed[0] == nonce:
                        found.add(parsed[1])
                        count = parsed[2]
            return False

        await self._read(self.settings.source_topic, partition, lower, match)
        return found, count

    async def read_redo(self, lower: int, nonce: bytes) -> dict[int, tuple[bytes, list, int]]:
        """The redo copies of a shuffled batch's frames: index -> (frame, headers, timestamp_ms)."""
        copies: dict[int, tuple[bytes, list, int]] = {}

        def match(message) -> bool:
            for name, value in message.headers or ():
                if name == FRAME_HEADER:
                    parsed = parse_batch_frame_id(value)
                    if parsed is not None and parsed[0] == nonce:
                        copies[parsed[1]] = (message.value, list(message.headers), message.timestamp)
            return False

        await self._read(self.redo_topic, 0, lower, match)
        return copies

    async def _read(self, topic: str, partition: int, lower: int, match) -> bool:
        """Read ``topic``'s ``partition`` from ``lower`` up to its high watermark as seen after the call
        began (so after a fence), until ``match(message)`` says True; whether it did."""
        from aiokafka import TopicPartition

        from producer.kafka import make_consumer

        s = self.settings
        consumer = make_consumer(s.bootstrap_servers, profile=s.broker, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=50, client_id="ocms-collector-scan",
                                 isolation_level="read_uncommitted", max_partition_fetch_bytes=4 << 20)
        tp = TopicPartition(topic, partition)
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek(tp, lower)
            while True:
                got = await consumer.getmany(tp, timeout_ms=500)
                for message in got.get(tp, ()):
                    if match(message):
                        return True
                highwater = consumer.highwater(tp)
                if highwater is not None and await consumer.position(tp) >= highwater:
                    return False
        finally:
            await consumer.stop()

    async def scan(self, partition: int, lower: int, nonce: bytes) -> bool:
        """Whether a frame with this nonce is in the source topic's ``partition`` at or after ``lower``.

        Reads up to the partition's high watermark as seen after the call began (so after a fence)."""
        return await self._read(self.settings.source_topic, partition, lower,
                                lambda m: any(name == FRAME_HEADER and value == nonce for name, value in m.headers or ()))

    async def end_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """Offsets at or below each partition's end (the embedded broker answers too low, never too high)."""
        from aiokafka import TopicPartition

        from producer.kafka import make_consumer

        s = self.settings
        consumer = make_consumer(s.bootstrap_servers, profile=s.broker, client_id="ocms-collector-offsets")
        await consumer.start()
        try:
            ends = await consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
            return {tp.partition: offset for tp, offset in ends.items()}
        finally:
            await consumer.stop()
