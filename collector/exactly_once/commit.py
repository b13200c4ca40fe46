"""The collector's exactly-once commit: how a unit of uploads reaches Kafka so that a retry counts once.

The promise (docs/collector.md, "Retries"): an upload retried with its ``Idempotency-Key`` until it
gets a 202 is counted once, whichever collector process answered which attempt and whatever was
killed in between. A unit (:class:`collector.lanes.Unit`: a plain lane's frame, a frame being a batch
of one, or a shuffled batch) goes through these steps, and their order is the exactness argument
(with :mod:`collector.exactly_once.log`, the rules every collector applies to the shared log, and
:mod:`collector.exactly_once.shared`, which settles what a kill leaves in doubt):

1. List the keys. A random nonce for the unit, a partition chosen for all its frames, and an offset
   at or below that partition's end; one listing in the shared log names the keyed hash of every
   key of its uploads (a batch listing for a shuffled batch), dated by this collector's clock. The
   listing is in the log *before* any frame of the unit is sent.
2. Read the log back up to the listing, and drop held keys. Every collector applies the log in its
   order with the same rule: a listing holds a key only if no earlier listing holds it (pending or
   stored). An upload whose key an earlier listing holds leaves the unit before it is produced (and
   before a batch is shuffled): its answer is that holder's (202 replayed when stored, 503
   ``idempotency_pending`` while in doubt). So of all attempts of an upload, only the one whose
   listing holds the key can be produced.
3. Redo copy. A listed unit of several frames (a shuffled batch: not one atomic append) is written
   whole to the redo topic before its first frame, so whoever settles a batch a kill cut short can
   complete it: a key's batch is then in Kafka whole or not at all.
4. Send in the open transaction. Each frame to the unit's partition, with its nonce in the
   ``ocms-frame`` header. The transaction is there to be fenced, not for visibility: the worker
   reads uncommitted, so a frame in the partition is counted; a fence (a producer started with this
   collector's transactional id) makes the broker refuse every later send of this producer.
5. Outcome. When every frame of the unit is acknowledged its uploads get 202 and the log gets the
   outcome "stored". When one is not, the uploads get 503 and the producer is renewed (the new one's
   start fences this one); the listing is then settled like any in doubt: after the fence, the
   partition from the listed offset says whether the frames are there (completed from the redo copy
   when partly), and that outcome goes to the log. An attempt never stored releases its key to the
   next attempt; a stored one keeps it, and every later attempt is answered from it.

A kill at any step leaves a listing that is settled the same way, by this collector's restart (whose
producer fenced the killed one) or by another replica once the owner's lease lapsed.

Group commit: the committer takes up to GROUP_MAX_UNITS queued units at a time; one append lists them
all (step 1) and one read-back serves them (step 2); steps 3-4 follow in queue order, and their step 5
runs beside the next groups, and writes the group's outcomes in one append. A unit's lane sends its next
frame only once the group is listed and sent, so a busy lane makes one frame per group. Every group's
frames go into one transaction, committed within
TRANSACTION_SECONDS and when the queue runs dry. The argument holds per unit: a later group's listing
is in the log after this group's, so the rule of step 2 sees this group's listings first.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
import secrets
import time

from cms_core.errors import OCMSError
from infra.kafka import KafkaUnavailableError

from ..lanes import Member, Unit
from .log import FRAME_HEADER, NONCE_BYTES, batch_frame_id, encode_batch_listing, encode_listing

log = logging.getLogger(__name__)

#: Most units listed and sent as one group.
GROUP_MAX_UNITS = 256
#: A transaction (only a fence: the worker reads uncommitted) is committed after at most this long.
TRANSACTION_SECONDS = 1.0
#: ... and once no unit came for this long.
IDLE_COMMIT_SECONDS = 0.1


class KeyHeld(OCMSError):
    """An upload left its unit: an earlier listing holds its key (``stored``: replay the 202)."""

    def __init__(self, stored: bool):
        super().__init__("stored by an earlier attempt" if stored else "an earlier attempt is in doubt")
        self.stored = stored


class Committer:
    """Produces the outlet's units through steps 1-5, group by group, with the outlet's transactional producer."""

    def __init__(self, outlet, shared):
        self.outlet = outlet
        self.log = shared  # collector.exactly_once.shared.SharedIdempotency
        self.settings = outlet.settings
        self.units: collections.deque[Unit] = collections.deque()
        self.acks: set[asyncio.Task] = set()  # step 5 of groups sent, waiting for their acknowledgements
        self.incarnation = b""  # changes with every start of the transactional producer
        self.partitions: list[int] = []
        self.lower: dict[int, int] = {}  # partition -> an offset at or below its end
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._committing = False
        self._closing = False
        self._transaction: tuple | None = None  # (producer, monotonic start) of the open transaction
        shared.committer = self

    @property
    def producer(self):
        return self.outlet.producer

    @property
    def ready(self) -> bool:
        return self.outlet.producer is not None and self.outlet.available

    @property
    def running(self) -> bool:
        return self._task is not None

    @property
    def busy(self) -> bool:
        return bool(self.units or self._committing or self.acks)

    async def prepare(self, partitions) -> None:
        """Before a new producer is used: the partitions, and offsets at or below their ends (new frames land after)."""
        self.partitions = sorted(partitions)
        self.lower = dict(await self.log.repair.end_offsets(self.settings.source_topic, self.partitions))

    def connected(self) -> None:
        """A new transactional producer is up: a new incarnation (its start fenced every earlier producer of
        this id), the committer running, and what earlier producers left in doubt settled."""
        self.incarnation = os.urandom(8)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ocms-collector-commit")
        self.outlet.spawn(self.log.settle_predecessors(self.incarnation))
        self._wake.set()

    def put(self, unit: Unit) -> None:
        self.units.append(unit)
        self._wake.set()

    async def repair(self, records: list, partition: int) -> None:
        """Produce frames of a batch cut short, as first written ((frame, headers, timestamp_ms) each), with
        this collector's producer (whose start fenced the batch's producer); return once acknowledged."""
        if not records:
            return
        done = asyncio.get_running_loop().create_future()
        self.put(Unit.repair(records, partition, done))
        await done

    async def stop(self, timeout: float) -> list[Unit]:
        """Commit the open transaction and stop; the units never taken."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            try:  # it commits the open transaction and returns
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            except Exception:
                pass
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        left = list(self.units)
        self.units.clear()
        return left

    # -------------------------------------------------------------- group commit
    async def _run(self) -> None:
        """Commit queued units group by group until closed and drained; commit the transaction when idle."""
        while True:
            if not self.units:
                if self._transaction is not None:
                    self._wake.clear()
                    try:  # a little longer open for the next group, then committed while idle
                        await asyncio.wait_for(self._wake.wait(), IDLE_COMMIT_SECONDS)
                        continue
                    except TimeoutError:
                        await self._end_transaction()
                        continue  # units may have come meanwhile
                if self._closing:
                    await asyncio.gather(*self.acks, return_exceptions=True)
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            group = [self.units.popleft() for _ in range(min(len(self.units), GROUP_MAX_UNITS))]
            self._committing = True
            try:
                await self.commit(group)
            except asyncio.CancelledError:
                self._fail(group, KafkaUnavailableError("the collector stopped before Kafka acknowledged the frame"))
                raise
            except Exception as exc:  # pragma: no cover - commit answers its own failures
                log.exception("committing %d units", len(group))
                self._fail(group, KafkaUnavailableError(f"{type(exc).__name__}: {exc}"))
            finally:
                self._committing = False
                # Its lane may send the next frame once this group is listed and sent (not when the group is
                # taken): what comes meanwhile makes one frame for the next group, so a busy lane lists and
                # sends one frame per round trip of the log instead of a small one right behind each group.
                for unit in group:
                    unit.release()

    def _fail(self, units: list[Unit], error: BaseException) -> None:
        for unit in units:
            self.outlet.finish(unit, error)

    async def commit(self, group: list[Unit]) -> None:
        """Steps 1-4 for a group of units; step 5 is left running beside the next groups (``acks``)."""
        outlet, shared = self.outlet, self.log
        producer, incarnation = outlet.producer, self.incarnation
        if producer is None or not outlet.available:
            self._fail(group, KafkaUnavailableError(outlet.last_error or "not connected to Kafka"))
            return
        timeout = self.settings.kafka_timeout_ms / 1000
        keyed = []
        for unit in group:
            if unit.preset is None:  # a repair goes to its batch's partition, as first written
                unit.nonce = os.urandom(NONCE_BYTES)
                # a shuffled batch's partition from the CSPRNG, as its order; a plain frame's from the faster PRNG
                choose = secrets.choice if unit.shuffled else random.choice
                unit.partition = choose(self.partitions) if self.partitions else 0
                unit.lower = self.lower.get(unit.partition, 0)
                if any(member.key is not None for member in unit.members):
                    keyed.append(unit)
        if keyed:
            # 1. list the keys; 2. read the log back to the listings
            try:
                listings = await shared.write_listings([(unit.nonce, self._listing(unit, incarnation))
                                                         for unit in keyed])
            except Exception as exc:
                outlet.set_unavailable(f"idempotency log: {type(exc).__name__}: {exc}")
                self._fail(group, KafkaUnavailableError(f"the idempotency log did not answer: "
                                                        f"{type(exc).__name__}: {exc}"))
                return
            # 2. an upload whose key an earlier listing holds leaves its unit (before a batch is shuffled)
            for unit, listing in zip(keyed, listings):
                unit.listing = listing
                shared.keep_digests(listing, unit.keys)  # a reused key's 422 (SharedIdempotency.claim)
                kept = self._holding(unit.members, listing)
                if len(kept) != len(unit.members):
                    unit.keep(kept)
        sends: list[tuple[Unit, list]] = []  # (unit, its (frame, headers, timestamp_ms) each)
        for unit in group:
            if unit.preset is not None:
                sends.append((unit, unit.preset))
                continue
            frames = await unit.cut()
            if not frames:  # every upload of it left: nothing to produce
                outlet.finish(unit, None)
                if unit.listing is not None:
                    shared.record_outcome(unit.nonce, False)
                continue
            sends.append((unit, self._records(unit, frames)))
        # 3. the redo copies before any frame (whoever settles a batch a kill cut short completes it)
        redo = [(unit, records) for unit, records in sends if unit.listing is not None and len(records) > 1]
        if redo:
            try:
                await asyncio.wait_for(shared.append_redo([copy for _, records in redo for copy in records]), timeout)
            except Exception as exc:
                outlet.set_unavailable(f"redo topic: {type(exc).__name__}: {exc}")
                failed = {unit for unit, _ in redo}
                for unit in failed:
                    shared.record_outcome(unit.nonce, False)  # never produced
                    outlet.finish(unit, KafkaUnavailableError(f"the redo topic did not answer: "
                                                              f"{type(exc).__name__}: {exc}"))
                sends = [(unit, records) for unit, records in sends if unit not in failed]
        # 4. every frame to its unit's partition, in the open transaction. A unit whose every frame was sent
        # before a send failed is answered by its own acknowledgements (its reports are in Kafka); the unit
        # whose send failed and those after it get the error.
        acks: dict[Unit, list] = {unit: [] for unit, _ in sends}
        errors: dict[Unit, BaseException] = {}
        try:
            await self._open_transaction(producer)
            for unit, records in sends:
                for value, headers, timestamp_ms in records:
                    acks[unit].append(await asyncio.wait_for(producer.send(
                        self.settings.source_topic, value, key=None, partition=unit.partition,
                        timestamp_ms=timestamp_ms, headers=headers), timeout))
        except Exception as exc:
            errors = {unit: exc for unit, records in sends if len(acks[unit]) < len(records)}
        # 5. the outcome, as the acknowledgements come (beside the next groups)
        task = asyncio.create_task(self._outcome(producer, incarnation, [
            (unit, acks[unit], len(records), errors.get(unit)) for unit, records in sends]))
        self.acks.add(task)
        task.add_done_callback(self.acks.discard)

    def _listing(self, unit: Unit, incarnation: bytes) -> bytes:
        """Step 1's record: a plain frame's listing, or a shuffled batch's (with where its redo copy starts)."""
        shared = self.log
        if unit.shuffled:
            return encode_batch_listing(unit.nonce, shared.owner, incarnation, unit.partition, unit.lower,
                                        shared.redo_end, shared.listing_time(), unit.keys)
        return encode_listing(unit.nonce, shared.owner, incarnation, unit.partition, unit.lower,
                              shared.listing_time(), unit.keys)

    def _holding(self, members: list[Member], listing) -> list[Member]:
        """The uploads a listing holds the key of (or without a key); the others are answered: an earlier
        listing holds their key (KeyHeld: the 202 replayed when it is stored, 503 while in doubt)."""
        if listing.taken is None:  # it took every key it lists: its members' keys, each once
            return members
        valid, kept = listing.valid, []
        for member in members:
            if member.key is None or member.key in valid:
                valid.discard(member.key)  # one upload per key (the process cache keeps it so)
                kept.append(member)
                continue
            holder = self.log.holder(member.key)
            if not member.future.done():
                member.future.set_exception(KeyHeld(holder is not None and holder.status == "stored"))
        return kept

    @staticmethod
    def _records(unit: Unit, frames: list[bytes]) -> list[tuple[bytes, list, int]]:
        """Each frame with its headers: a plain frame's nonce, or a listed batch's nonce, index and frame count."""
        if not unit.shuffled:  # a plain frame carries its nonce, listed or not (as it always has)
            return [(frame, [(FRAME_HEADER, unit.nonce)], unit.timestamp_ms) for frame in frames]
        if unit.listing is None:
            return [(frame, unit.headers(frame), unit.timestamp_ms) for frame in frames]
        return [(frame, unit.headers(frame) + [(FRAME_HEADER, batch_frame_id(unit.nonce, i, len(frames)))],
                 unit.timestamp_ms) for i, frame in enumerate(frames)]

    async def _outcome(self, producer, incarnation: bytes, sent: list[tuple[Unit, list, int, BaseException | None]]
                       ) -> None:
        """Step 5: answer each unit once every frame of it is acknowledged (503 if one is not; its listing is then
        settled after renewing the producer, completed from the redo copy if cut short)."""
        timeout = self.settings.kafka_timeout_ms / 1000
        unsure, missing, first_error, stored = [], 0, None, []
        for unit, acks, expected, error in sent:
            acked = 0
            for future in acks:
                try:
                    metadata = await asyncio.wait_for(future, timeout * 2)
                except Exception as exc:
                    error = error or exc
                    continue
                acked += 1
                self.lower[unit.partition] = max(self.lower.get(unit.partition, 0), metadata.offset + 1)
            if error is None and acked == expected:
                # in the partition, so counted (the worker reads uncommitted): 202 whatever the commit does
                unit.frames = expected
                self.outlet.finish(unit, None)
                if unit.listing is not None:
                    self.log.resolve_outcome(unit.nonce, True)
                    stored.append(unit.nonce)
                continue
            error = error or KafkaUnavailableError(f"{expected - acked} of {expected} frames not acknowledged")
            self.outlet.finish(unit, KafkaUnavailableError(f"{type(error).__name__}: {error}"))
            missing += expected - acked
            first_error = first_error or error
            if unit.listing is not None:
                unsure.append(unit)
        if stored:  # one append for the group's stored listings: one produce request, not one per unit
            self.log.record_outcomes([(nonce, True) for nonce in stored])
        if first_error is not None:
            log.warning("%d of %d frames not acknowledged: %s: %s", missing, sum(s[2] for s in sent),
                        type(first_error).__name__, first_error)
            self._renew(producer, f"{type(first_error).__name__}: {first_error}", incarnation, unsure)

    # ------------------------------------------------------------- transactions
    async def _open_transaction(self, producer) -> None:
        """An open transaction of ``producer`` (committing one open longer than TRANSACTION_SECONDS first);
        KafkaUnavailableError when the producer was renewed meanwhile."""
        if self.outlet.producer is not producer:
            raise KafkaUnavailableError("the producer was renewed")
        if self._transaction is not None and time.monotonic() - self._transaction[1] > TRANSACTION_SECONDS:
            await self._end_transaction()
            if self.outlet.producer is not producer:
                raise KafkaUnavailableError("the producer was renewed")
        if self._transaction is None:
            # aiokafka retries transaction requests without end while Kafka is away: bounded here
            await asyncio.wait_for(producer.begin_transaction(), self.settings.kafka_timeout_ms / 1000)
            self._transaction = (producer, time.monotonic())

    async def _end_transaction(self) -> None:
        """Wait for the open transaction's acks and commit it (renew the producer if that fails)."""
        producer, _ = self._transaction
        await asyncio.gather(*self.acks, return_exceptions=True)
        self._transaction = None
        if self.outlet.producer is not producer:
            return  # failed and renewed meanwhile
        try:
            await asyncio.wait_for(producer.commit_transaction(), self.settings.kafka_timeout_ms / 1000)
        except Exception as exc:
            # every frame of it was acknowledged (and answered): only the producer needs renewing
            log.warning("commit of a transaction failed: %s: %s", type(exc).__name__, exc)
            self._renew(producer, f"{type(exc).__name__}: {exc}", self.incarnation, [])

    def _renew(self, producer, why: str, incarnation: bytes, unsure: list[Unit]) -> None:
        """A new producer (its start fences this one), then settle the units whose fate is unknown, in the
        background (a retry of their uploads learns it from the log or settles them itself)."""
        self.outlet.renew(producer, why)
        if unsure:
            self.outlet.spawn(self._settle_own(unsure, incarnation))

    async def _settle_own(self, units: list[Unit], incarnation: bytes) -> None:
        while units and not self._closing:
            if self.outlet.producer is None or self.incarnation == incarnation:  # the fencing producer is not up yet
                await asyncio.sleep(self.settings.retry_after_seconds)
                continue
            try:  # settled (and completed if cut short) as any retry would; the outcome goes to the log
                await self.log.settle(units[0].listing)
            except Exception as exc:
                log.info("settling an unacknowledged frame: %s: %s; retrying", type(exc).__name__, exc)
                await asyncio.sleep(self.settings.retry_after_seconds)
                continue
            units.pop(0)
