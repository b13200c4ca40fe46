"""The idempotency log's I/O for one collector: append, tail, lease, settle (fence and repair: :mod:`.repair`).

:mod:`collector.exactly_once.commit` lists keys here and reads the log back; this module keeps the
log applied (:class:`collector.exactly_once.log.ListingLog`, in order: :mod:`.follow`, read by :mod:`.tail`)
and settles listings left in doubt.

**Settling a listing in doubt** (its frame or batch may or may not be in Kafka): fence its producer,
then read the listed partition from the listed offset to its end. Frames are produced by a
transactional producer whose transactional id is the collector's (``ocms-collector-<instance>``, the
same across its restarts), used only so that starting a producer with the same id bumps the epoch:
the broker refuses the old producer's sends from then on, so after the fence the partition says what
is final, and the outcome goes to the log. A batch found partly stored (a kill cut its send short) is
completed from its redo copy by the producer that fenced its owner (with the owner's transactional
id, so two settlers never both complete it): whole, once. Who settles:

1. The listing's own producer, when it is this process's current one: the outcome is known here when
   the frame's acknowledgement comes or fails (a failure renews the producer, which fences the old one,
   and the outlet settles its unacknowledged listings as in 2).
2. This collector, for listings of its earlier producers (a killed process with the same instance id, or
   this one before a renewal): the current producer's start fenced them. Done at start, and again at
   every lease renewal while some remain (a retry at another replica waits for it, see 3).
3. Another replica, only for an owner whose **lease** has lapsed. A live collector renews its lease:
   every listing it writes renews it, and while its transactional producer exists (while it may hold
   an open transaction) it writes a lease record (a listing of no keys) whenever it listed nothing for
   :data:`LEASE_RENEW_SECONDS`. A replica fences an owner only when the log shows that owner silent
   for longer than ``lease_s`` (2 x ``--kafka-timeout-ms`` + 2 s, the old grace) measured on the
   replica's *own* clock between the replica's own listings that follow the owner's latest record
   (:meth:`ListingLog.silent_for`): it reads the log to its end and checks again right before the
   fence. While the lease is live it answers 503 ``idempotency_pending``, and the owner settles its
   listings itself (1, 2).

Why a live owner is never fenced: its records reach the log at most ``LEASE_RENEW_SECONDS`` plus one
append apart, well inside ``lease_s``; silence is measured between two of the replica's own records
that both come after the owner's latest one in the log's single order, so a replica whose clock runs
fast or slow, or that reads the log late, sees a live owner's next record before it has measured
``lease_s`` of silence. A collector whose event loop stalls for longer than the lease, or whose log
writes fail for that long, is taken for dead and fenced: its open transaction is then aborted, its
unsent frames are refused and answered 503, and it renews its producer. Exactness never rests on the
lease: it rests on fence-then-read, which is the same for a live and a dead owner. The lease only
keeps a settle from aborting a live collector's transaction (its uploads 503, its producer renewed).
"""

from __future__ import annotations

import array
import asyncio
import logging
import os
import socket
import time

from cms_core.errors import OCMSError

from .follow import LogFollower
from .key import key_topic, kept_key
from .log import ListingLog, Listing, encode_lease, encode_outcome, key_hash
from .repair import BatchRepair
from .tail import LogTail

log = logging.getLogger(__name__)

#: A collector with a transactional producer writes a lease record when it listed nothing for this long.
LEASE_RENEW_SECONDS = 1.0
#: Outcomes known here wait up to this long to ride in the next listing append (one produce request for both
#: under load); then they are appended alone. Longer than a loaded collector's listing round trip (~5 ms at 256
#: connections on 2 cores: a group's outcome is known about one round trip before the listing after next is
#: written), so under load every outcome rides; at 5 ms half went alone, 1.5 appends per group (an append costs
#: aiokafka ~130 us of CPU). What the wait delays is only another replica's view of the outcome.
OUTCOME_RIDE_SECONDS = 0.02


class IdempotencyPending(OCMSError):
    """The key's earlier attempt is in doubt and cannot be settled yet (answer 503, retry later)."""

    def __init__(self, detail: str, retry_after: float):
        super().__init__(detail)
        self.retry_after = retry_after


def default_instance_id(port: int) -> str | None:
    """``host:port`` (unique among live collectors: one process per port), None for a random port."""
    return f"{socket.gethostname()}:{port}" if port else None


class SharedIdempotency(LogFollower):
    """The log's I/O for one collector: append, tail (into a :class:`ListingLog`), lease, settle, fence, scan."""

    def __init__(self, settings, metrics, *, clock=time.monotonic, wall_clock=time.time):
        self.settings = settings
        self.metrics = metrics
        self.topic = settings.idempotency_topic
        #: the copies of listed shuffled batches of several frames, written before their frames
        self.redo_topic = f"{self.topic}-redo"
        self.redo_end = 0  # an offset of the redo topic at or below the next batch's copy
        self.repair = BatchRepair(settings, metrics, self.redo_topic)  # fence-then-read, complete a batch cut short
        instance = settings.instance_id or default_instance_id(settings.port) or os.urandom(8).hex()
        #: the transactional id of this collector's frame producer (the same across its restarts)
        self.owner = f"ocms-collector-{instance}"
        self._secret = idempotency_secret(settings, self.topic)
        self.lease_s = 2 * settings.kafka_timeout_ms / 1000 + 2.0
        self.clock = clock
        self.wall_clock = wall_clock
        self.state = self._fresh_state()
        self.enabled = True
        self.ready = False
        self.committer = None  # the exactly-once Committer producing the frames (set by it)
        self.local: dict[bytes, asyncio.Future] = {}  # nonce -> stored? (listings of this process)
        self.in_flight: dict[bytes, int] = {}  # keyed hash -> body digest of an attempt in flight here (:meth:`claim`)
        self._awaiting: dict[bytes, asyncio.Future] = {}  # nonce -> its Listing once applied
        self._unwritten: dict[bytes, bool] = {}  # outcomes known here whose append failed: written again
        self._due_outcomes: list[tuple[bytes, bool]] = []  # outcomes to ride in the next listing append
        self._due_flush: asyncio.TimerHandle | None = None  # ... or to be appended alone, then
        self._applied = -1  # the log is applied up to here (by the tail, or from this collector's own appends)
        self._own: dict[int, bytes] = {}  # offset -> a record this collector appended there, not applied yet
        self._highwater = 0  # the log's end as the tail last saw it
        self._own_max = -1  # the greatest offset of a record this collector appended (applied from its ack or not)
        self._appending = 0  # appends of this collector sent and not yet acknowledged (they may fill a gap)
        self._tail_applied = False  # the tail applied a record since its last fetch (one this process did not)
        self._tail_wake = asyncio.Event()  # ends the tail's pause (:meth:`_pace`)
        self._fetches = 0  # fetches the tail completed
        self._fetch_waiters: list[tuple[int, asyncio.Future]] = []  # (fetch count awaited, future)
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._settling: dict[bytes, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self._producer = None
        self._tail: asyncio.Task | None = None
        self._lease: asyncio.Task | None = None
        self._predecessors: asyncio.Task | None = None  # the lease's settle of earlier producers' listings
        self._listed_at = float("-inf")  # when this collector last wrote a listing or lease (clock)
        self._lease_failing = False
        self._warned_clock_at = float("-inf")

    def _fresh_state(self) -> ListingLog:
        s = self.settings
        return ListingLog(s.idempotency_window_seconds, s.idempotency_max_keys, self.clock, observer=self.owner)

    # ----------------------------------------------------------------- keys
    def key_hash(self, application: str, key: str) -> bytes:
        """The keyed hash of an upload's key (what the log holds; never the key)."""
        if self._secret is None:
            raise IdempotencyPending("the idempotency log's key is not read yet", self.settings.retry_after_seconds)
        return key_hash(self._secret, application, key)

    def holder(self, key: bytes) -> Listing | None:
        return self.state.holders.get(key)  # ListingLog.holder without its call: asked once per keyed upload

    def claim(self, application: str, key: str, digest: int) -> tuple[bytes, int, bool] | None:
        """An upload's key before it is accepted: (keyed hash, body digest, whether it is the key's first attempt
        in flight here), or None when the key came with another body (answer 422). Raises IdempotencyPending
        before the log's key is read.

        The log answers every retry (this process's, a restart's, another replica's) from the attempt whose
        listing holds the key, so the collector keeps no per-process table of answers beside it (it cost ~7 us
        per keyed upload under load, issue 41). What that table added is kept: a key reused with another body is
        refused while this process holds the first attempt's body digest: in flight (``in_flight``), then beside
        the key in the log's holders table while a listing holds it (:meth:`keep_digests`). An attempt that overlaps one in flight with the same body
        is answered by the log: the first one's 202 once it is listed, 503 while both are in one commit group."""
        key_hash = self.key_hash(application, key)
        in_flight = self.in_flight
        earlier = in_flight.get(key_hash)
        first = earlier is None
        if first:
            earlier = self.state.holders.digest(key_hash)
        if earlier is not None and earlier != digest:
            return None
        if first:
            in_flight[key_hash] = digest
        return key_hash, digest, first

    def answered(self, key_hash: bytes, first: bool) -> None:
        """A claimed upload was answered: its digest is no longer in flight (if it was this key's first attempt)."""
        if first:
            del self.in_flight[key_hash]

    def keep_digests(self, listing: Listing, keys: list[bytes]) -> None:
        """This process's listing was applied: the holders table keeps the body digest of each key it took (``keys``:
        the listing's, in its order, each in flight here) for as long as it holds the key, so a retry with another
        body answers 422 from then on. Kept as soon as the listing is applied, not once its upload is answered: the
        key's slot was just written (in the CPU's caches) and every key of a listing goes in one call. A listing
        that fails releases its keys and their digests with them."""
        in_flight = self.in_flight
        self.state.holders.set_digests(listing.key_hashes, listing,
                                       array.array("q", [in_flight.get(key, -1) for key in keys]).tobytes())

    def listing_time(self) -> int:
        """The time of this collector's next listing: its wall clock, never before the log's clock."""
        return self.state.listing_time(self.wall_clock())

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        from infra.kafka import create_topics, make_producer, wait_for_late_batches

        s = self.settings
        profile = s.broker
        if profile.late_batches:
            # Read past, a late listing of another replica would be missing here for good (a retry of its key
            # stored twice), and a settle's scan would miss a stored frame (infra.kafka, late batches).
            for topic in (self.topic, self.redo_topic, s.source_topic, key_topic(self.topic)):
                wait_for_late_batches(topic, on_late=self._late_batch)
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
        if self._secret is None and getattr(s, "upgrade_from", None):
            # --upgrade-from 0.2: collectors of 0.2.0 share the log, and they hash unkeyed without a secret file
            self._secret = b""
        elif self._secret is None:  # no --idempotency-secret-file: the key kept in Kafka (before any listing)
            self._secret = await kept_key(s, self.topic)
        producer = make_producer(s.bootstrap_servers, profile, idempotent=False, linger_ms=0,
                                 client_id="ocms-collector-log", request_timeout_ms=s.kafka_timeout_ms)
        try:  # a failed start is retried by the caller: nothing of this attempt stays open
            await producer.start()
            if s.shuffle_min_reports:
                self.redo_end = (await self.repair.end_offsets(self.redo_topic, [0])).get(0, 0)
        except BaseException:
            await producer.stop()
            raise
        self._producer = producer
        tail = LogTail(s, self.topic, self._read, self._start_afresh, self._fetched, pace=self._pace,
                       applied=self.applied_offset)
        self._tail = asyncio.create_task(tail.run(), name="ocms-collector-idempotency-tail")
        self._lease = asyncio.create_task(self._lease_loop(), name="ocms-collector-idempotency-lease")

    async def close(self) -> None:
        outcomes = self._take_due_outcomes()
        if outcomes and self._producer is not None:  # else the restart or another replica settles them
            try:
                await asyncio.wait_for(self._append_outcomes(outcomes), self.settings.kafka_timeout_ms / 1000)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        tasks = [t for t in [self._tail, self._lease, self._predecessors, *self._settling.values(),
                             *self.repair.running(), *self._tasks] if t is not None]
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
        """Append records (acks=all); their offsets. Each is applied here without waiting for the tail to read
        it back when the log is applied up to the offset before it (:meth:`_apply_own`)."""
        producer = self._producer
        if producer is None:
            raise ConnectionError("the idempotency log is closed")
        self._appending += 1
        try:
            futures = [await producer.send(self.topic, value, partition=0) for value in values]
            offsets = [(await f).offset for f in futures]
        finally:
            self._appending -= 1
            if not self._appending:
                self._wake_tail_for_gap()  # a failed append leaves its gap to the tail
        self._apply_own(offsets, values)
        return offsets

    async def write_listings(self, listings: list[tuple[bytes, bytes]]) -> list[Listing]:
        """Append listings ((nonce, record) each) and read the log back up to them: each one's :class:`Listing`
        as every collector applies it. On failure their outcome is "never stored" and the error is raised."""
        loop = asyncio.get_running_loop()
        timeout = self.settings.kafka_timeout_ms / 1000
        applied = []
        for nonce, _ in listings:
            self.local[nonce] = loop.create_future()
            applied.append(loop.create_future())
            self._awaiting[nonce] = applied[-1]
        riding = self._take_due_outcomes()  # earlier listings' outcomes, in the same produce request
        try:
            try:
                offsets = await asyncio.wait_for(self.append(
                    [encode_outcome(nonce, stored) for nonce, stored in riding]
                    + [record for _, record in listings]), timeout)
            except Exception:
                for nonce, stored in riding:  # written again at the next lease renewal while pending
                    self._unwritten[nonce] = stored
                raise
            for nonce, _ in riding:
                self._unwritten.pop(nonce, None)
            self._listed_at = self.clock()
            await asyncio.wait_for(self.applied(max(offsets)), timeout)
            return [await asyncio.wait_for(future, timeout) for future in applied]
        except Exception:
            for nonce, _ in listings:
                self._awaiting.pop(nonce, None)
                self.resolve_outcome(nonce, False)
            self.record_outcomes([(nonce, False) for nonce, _ in listings])  # never produced
            raise

    async def append_redo(self, records: list[tuple[bytes, list, int]]) -> None:
        """Write shuffled batches' frames ((frame, headers, timestamp_ms) each, as they will be produced) to the
        redo topic (acks=all)."""
        producer = self._producer
        if producer is None:
            raise ConnectionError("the idempotency log is closed")
        futures = [await producer.send(self.redo_topic, frame, partition=0, timestamp_ms=timestamp_ms, headers=headers)
                   for frame, headers, timestamp_ms in records]
        offsets = [(await f).offset for f in futures]
        self.redo_end = max(self.redo_end, max(offsets) + 1)

    def record_outcome(self, nonce: bytes, stored: bool) -> None:
        """This process knows a listing's outcome: tell waiters here, and the log (in the background)."""
        self.resolve_outcome(nonce, stored)
        self.record_outcomes([(nonce, stored)])

    def record_outcomes(self, outcomes: list[tuple[bytes, bool]]) -> None:
        """Write outcomes ((nonce, stored) each, waiters here told already: :meth:`resolve_outcome`) to the log:
        in the next listing append when one comes within OUTCOME_RIDE_SECONDS, else in one append of their own.
        Nothing waits for them but other collectors' view (a retry there is answered 503 pending until then)."""
        self._due_outcomes.extend(outcomes)
        if self._due_flush is None:
            self._due_flush = asyncio.get_running_loop().call_later(OUTCOME_RIDE_SECONDS, self._flush_outcomes)

    def _take_due_outcomes(self) -> list[tuple[bytes, bool]]:
        if self._due_flush is not None:
            self._due_flush.cancel()
            self._due_flush = None
        outcomes, self._due_outcomes = self._due_outcomes, []
        return outcomes

    def _flush_outcomes(self) -> None:
        outcomes = self._take_due_outcomes()
        if outcomes:
            self._spawn(self._append_outcomes(outcomes))

    def resolve_outcome(self, nonce: bytes, stored: bool) -> None:
        """Tell this process's waiters a listing's outcome (the log is told by :meth:`record_outcomes`)."""
        future = self.local.get(nonce)  # dropped when the tail applies the outcome
        if future is not None and not future.done():
            future.set_result(stored)

    async def _append_outcomes(self, outcomes: list[tuple[bytes, bool]]) -> None:
        try:
            await self.append([encode_outcome(nonce, stored) for nonce, stored in outcomes])
            for nonce, _ in outcomes:
                self._unwritten.pop(nonce, None)
        except Exception as exc:  # written again at the next lease renewal while the listing is pending
            for nonce, stored in outcomes:
                self._unwritten[nonce] = stored
            log.debug("outcomes not written to the idempotency log: %s: %s", type(exc).__name__, exc)

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _late_batch(self, partition: int, first: int, upto: int, given_up: bool) -> None:
        if given_up:
            self.metrics.late_offsets_skipped.inc(upto - first)

    # ---------------------------------------------------------------- lease
    async def _lease_loop(self) -> None:
        """While this collector's transactional producer exists: renew its lease when it listed nothing for
        LEASE_RENEW_SECONDS, write again the outcomes whose append failed, settle its predecessors' listings."""
        while True:
            await asyncio.sleep(LEASE_RENEW_SECONDS / 2)
            committer = self.committer
            if not (self.enabled and self.ready) or committer is None or committer.producer is None:
                continue  # no transactional producer: no open transaction to keep from a fence
            try:
                if self.clock() - self._listed_at >= LEASE_RENEW_SECONDS:
                    lease = encode_lease(self.owner, committer.incarnation, committer.lower.get(0, 0),
                                         self.listing_time())
                    await asyncio.wait_for(self.append([lease]), self.settings.kafka_timeout_ms / 1000)
                    self._listed_at = self.clock()
                rewrite = []
                for nonce, stored in list(self._unwritten.items()):
                    listing = self.state.frames.get(nonce)
                    if listing is None or listing.status != "pending":
                        self._unwritten.pop(nonce, None)
                    else:
                        rewrite.append((nonce, stored))
                if rewrite:
                    await self._append_outcomes(rewrite)
            except Exception as exc:  # the next round tries again; a lease that lapses meanwhile may be fenced
                if not self._lease_failing:
                    log.warning("idempotency lease not renewed: %s: %s; retrying every %.1f s",
                                type(exc).__name__, exc, LEASE_RENEW_SECONDS / 2)
                self._lease_failing = True
                continue
            if self._lease_failing:
                log.info("idempotency lease renewed again")
                self._lease_failing = False
            if (self._predecessors is None or self._predecessors.done()) and any(
                    listing.incarnation != committer.incarnation for listing in self.state.pending_of(self.owner)):
                self._predecessors = asyncio.create_task(self.settle_predecessors(committer.incarnation))

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
            self._tail_wake.set()  # no pause of the tail while a settle runs
            task.add_done_callback(lambda _t, n=listing.nonce: self._settling.pop(n, None))
        return await asyncio.shield(task)

    async def _settle(self, listing: Listing) -> bool:
        committer = self.committer
        timeout = self.settings.kafka_timeout_ms / 1000
        if listing.owner == self.owner and committer is not None and listing.incarnation == committer.incarnation:
            # 1. this producer's own frame: its outcome is known here when its transaction ends
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
            # 2. an earlier producer of this collector: the current producer's start fenced it
            if committer is None or not committer.ready:
                raise IdempotencyPending("this collector's producer is not ready", self.settings.retry_after_seconds)
            stored = await asyncio.wait_for(self.repair.complete_batch(listing, committer.repair), timeout * 12)
        else:
            # 3. another collector's, once its lease lapsed (read the log to its end, then look again)
            self._check_lapsed(listing)
            await asyncio.wait_for(self._read_to_end(), timeout)
            self._check_lapsed(listing)
            stored = await asyncio.wait_for(self.repair.fence_and_complete(listing), timeout * 12)
        await self.append([encode_outcome(listing.nonce, stored)])  # before a new listing of the key
        self.resolve_outcome(listing.nonce, stored)
        self.metrics.idempotency_settled.labels("stored" if stored else "failed").inc()
        log.info("settled an in-doubt frame of %s: %s", listing.owner, "stored" if stored else "never stored")
        return stored

    def _check_lapsed(self, listing: Listing) -> None:
        """Raise IdempotencyPending while the listing's owner may be alive (its lease has not lapsed)."""
        silent = self.state.silent_for(listing.owner)
        if silent <= self.lease_s:
            raise IdempotencyPending("an earlier attempt at another collector is in doubt; that collector is alive "
                                     "and settles it", max(1.0, self.lease_s - silent))

    async def settle_predecessors(self, incarnation: bytes) -> None:
        """Settle the pending listings of earlier producers of this collector's id (a killed process,
        or this one before a renewal), once the log is read: the producer started as ``incarnation``
        fenced them, so their partitions say what is final. Retries then find outcomes, and no other
        replica needs to fence this collector for them."""
        while not self.ready:
            await asyncio.sleep(0.1)
        await self.applied(self._applied)
        for listing in self.state.pending_of(self.owner):
            committer = self.committer
            if committer is None or committer.incarnation != incarnation:
                return  # renewed again meanwhile: the next call does it
            if listing.status == "pending" and listing.incarnation != incarnation:
                try:
                    await self.settle(listing)
                except Exception as exc:  # a retry, or the next lease renewal, settles it
                    log.info("a predecessor's frame not settled yet: %s: %s", type(exc).__name__, exc)


def idempotency_secret(settings, topic: str) -> bytes | None:
    """The key of the Idempotency-Key hashes in ``topic`` from ``--idempotency-secret-file`` (cut to BLAKE2b's
    64 bytes), or None without one: then the key kept in Kafka (:mod:`.key`) is read at start."""
    from cms_core.claims import read_key

    if settings.idempotency_secret_file:
        return read_key(settings.idempotency_secret_file, settings.label("idempotency_secret_file"), 16,
                        "the same file for every collector replica")[:64]
    return None
