"""KafkaOutlet and SharedIdempotency against stand-ins for aiokafka's producer (no broker): what each
upload is answered when a send fails part-way through a group, and that clients are released."""

from __future__ import annotations

import asyncio

import pytest

from collector.app import CollectorMetrics
from collector.exactly_once.shared import SharedIdempotency
from collector.lanes import Member, Unit
from collector.outlet import KafkaOutlet
from collector.settings import CollectorSettings
from infra.kafka import KafkaUnavailableError

from .harness import reports


class Acked:
    """What aiokafka's send future resolves to."""

    def __init__(self, offset: int):
        self.offset = offset


class ScriptedProducer:
    """A transactional producer whose ``send`` raises from its ``fail_from``-th call on (0-based)."""

    def __init__(self, fail_from: int | None = None):
        self.fail_from = fail_from
        self.sent: list[tuple[bytes, int]] = []
        self.stopped = False

    async def begin_transaction(self):
        pass

    async def commit_transaction(self):
        pass

    async def send(self, topic, value, *, key=None, partition=None, timestamp_ms=None, headers=None):
        if self.fail_from is not None and len(self.sent) >= self.fail_from:
            raise KafkaUnavailableError("scripted send failure")
        self.sent.append((value, partition))
        future = asyncio.get_running_loop().create_future()
        future.set_result(Acked(len(self.sent) - 1))
        return future

    async def stop(self):
        self.stopped = True


class LogStandIn:
    """The part of SharedIdempotency the outlet uses for batches without keys (nothing is listed)."""

    enabled = True
    owner = "ocms-collector-test"
    redo_end = 0
    outlet = None

    def __init__(self):
        self.tasks: list[asyncio.Task] = []

    def _spawn(self, coroutine):
        self.tasks.append(asyncio.ensure_future(coroutine))

    def record_outcome(self, nonce, stored):
        pass


def _settings(registry_path, **overrides) -> CollectorSettings:
    return CollectorSettings.build(registry=str(registry_path), bootstrap_servers="127.0.0.1:1", **overrides)


def _batch(loop, dest, uploads: int, per_upload: int) -> Unit:
    """A closed shuffled batch of ``uploads`` uploads without keys (one future each)."""
    from cms_core import wire

    size = wire.record_size(dest.params)
    records = wire.encode_batch(dest.params, reports(dest, uploads * per_upload, seed=7))[wire.HEADER_SIZE:]
    members = [Member((i + 1) * per_upload, loop.create_future(), i * per_upload) for i in range(uploads)]
    return Unit(dest, records, members, 0, size, uploads * per_upload, max_records=per_upload, shuffled=True)


def test_a_batch_whose_every_frame_was_acknowledged_gets_202_when_a_later_batch_fails_to_send(registry_path, dest):
    """Two shuffled batches go in one group; the second one's send fails. The first batch's frames were
    all sent and acknowledged, so its uploads are in Kafka: they must be answered 202, not 503 (a 503 makes
    a device without an Idempotency-Key upload them again: counted twice). The failed batch gets 503."""

    async def main():
        loop = asyncio.get_running_loop()
        outlet = KafkaOutlet(_settings(registry_path, shuffle_min_reports="2"), CollectorMetrics(),
                             log=LogStandIn())
        producer = ScriptedProducer(fail_from=2)  # batch 1: frames 0 and 1 sent; batch 2: its first send fails
        outlet.producer, outlet.available, outlet.committer.partitions = producer, True, [0]
        first, second = _batch(loop, dest, 2, 3), _batch(loop, dest, 2, 3)
        outlet.queued = first.queued + second.queued
        await outlet.committer.commit([first, second])
        await asyncio.gather(*outlet.committer.acks)
        for task in outlet.log.tasks:
            task.cancel()
        await asyncio.gather(*outlet.log.tasks, return_exceptions=True)
        return first, second, producer, outlet

    first, second, producer, outlet = asyncio.run(main())
    assert len(producer.sent) == 2
    assert [w.future.exception() for w in first.members] == [None, None], "every frame of it is in Kafka"
    assert all(isinstance(w.future.exception(), KafkaUnavailableError) for w in second.members)
    assert outlet.queued == 0


class FlakyStartLog(LogStandIn):
    """A log whose start fails the first time (Kafka went away between creating its topic and starting
    its producer), then works."""

    def __init__(self):
        super().__init__()
        self.starts = 0

    async def start(self):
        self.starts += 1
        if self.starts == 1:
            raise KafkaUnavailableError("Unable to bootstrap from [('127.0.0.1', 1)]")

    async def end_offsets(self, topic, partitions):
        return {p: 0 for p in partitions}

    @property
    def repair(self):  # SharedIdempotency.repair: the partition scans (end_offsets here)
        return self

    async def settle_predecessors(self, incarnation):
        pass

    async def close(self):
        pass


class StartingProducer(ScriptedProducer):
    def __init__(self, **config):
        super().__init__()

    async def start(self):
        pass

    async def partitions_for(self, topic):
        return {0}


def test_the_collector_connects_after_its_idempotency_log_failed_to_start_once(registry_path):
    """The outlet's connect loop starts the idempotency log first; when that start failed once (Kafka away
    for a moment), the loop died with it and the collector answered 503 for ever. It must retry."""

    async def main():
        log = FlakyStartLog()
        outlet = KafkaOutlet(_settings(registry_path, retry_after_seconds="1"), CollectorMetrics(),
                             producer_factory=StartingProducer, log=log)
        await outlet.start()
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while not outlet.available and not outlet._probe.done():
                assert asyncio.get_running_loop().time() < deadline, "never connected"
                await asyncio.sleep(0.01)
            died = outlet._probe.done() and not outlet._probe.cancelled() and outlet._probe.exception()
            return outlet.available, log.starts, died
        finally:
            await outlet.close([])

    available, starts, died = asyncio.run(main())
    assert not died, f"the connect loop died: {died!r}"
    assert available and starts == 2


def test_settling_another_collectors_batch_stops_its_fencing_producer_when_the_start_fails(registry_path,
                                                                                         monkeypatch):
    """BatchRepair.fence_and_complete starts a producer of the batch owner's transactional id; when that start fails
    (InitProducerId timed out, the settle's own timeout cancelled it) the producer, its connections and
    metadata task must be released, as fence() does."""
    import infra.kafka
    from collector.exactly_once.log import Listing

    made: list[ScriptedProducer] = []

    class FailingStart(ScriptedProducer):
        async def start(self):
            raise KafkaUnavailableError("InitProducerId timed out")

    def make_producer(*args, **kwargs):
        made.append(FailingStart())
        return made[-1]

    monkeypatch.setattr(infra.kafka, "make_producer", make_producer)
    shared = SharedIdempotency(_settings(registry_path, instance_id="me"), CollectorMetrics())
    listing = Listing(b"n" * 16, "ocms-collector-other", b"i" * 8, 0, 0, 0, b"", 0, 0.0, batch=True)
    with pytest.raises(KafkaUnavailableError):
        asyncio.run(shared.repair.fence_and_complete(listing))
    assert len(made) == 1 and made[0].stopped


def test_a_settle_that_timed_out_during_a_repair_does_not_let_the_next_one_produce_the_frames_again(
        registry_path, monkeypatch):
    """A batch cut short after frame 0 of 2: the settle produces frame 1 from the redo copy. The repair is
    queued behind the committer's work (Committer.repair); if the settle's timeout fires first, the queued
    repair still runs. A second settle (the device's retry) that scans before it landed must wait for it,
    not produce frame 1 a second time (its reports would count twice)."""
    from collector.exactly_once.log import Listing

    async def main():
        shared = SharedIdempotency(_settings(registry_path, instance_id="me"), CollectorMetrics())
        landed = {0}
        produced = []
        queue_moves = asyncio.Event()

        async def scan_batch(partition, lower, nonce):
            return set(landed), 2

        async def read_redo(lower, nonce):
            return {0: (b"frame0", [], 0), 1: (b"frame1", [], 0)}

        monkeypatch.setattr(shared.repair, "scan_batch", scan_batch)
        monkeypatch.setattr(shared.repair, "read_redo", read_redo)

        async def committer(records, done):  # the outlet's queue: what was enqueued is produced, waited for or not
            await queue_moves.wait()
            produced.extend(records)
            landed.add(1)
            if not done.done():
                done.set_result(None)

        queued = []

        async def repair(records, partition):  # as Committer.repair: enqueue, then wait for the acks
            done = asyncio.get_running_loop().create_future()
            queued.append(asyncio.ensure_future(committer(records, done)))
            await done

        listing = Listing(b"n" * 16, "ocms-collector-me", b"i" * 8, 0, 0, 0, b"", 0, 0.0, batch=True)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(shared.repair.complete_batch(listing, repair), 0.05)
        second = asyncio.ensure_future(shared.repair.complete_batch(listing, repair))
        await asyncio.sleep(0.05)
        queue_moves.set()
        stored = await asyncio.wait_for(second, 5)
        await asyncio.gather(*queued, return_exceptions=True)
        await shared.close()
        return stored, produced

    stored, produced = asyncio.run(main())
    assert stored and produced == [(b"frame1", [], 0)], f"frames produced by the repairs: {produced}"


class MemoryLog:
    """The shared log as one list: what SharedIdempotency appends is applied at once (as its tail would)."""

    def __init__(self, shared: SharedIdempotency):
        self.shared = shared
        self.records: list[bytes] = []
        shared.append = self.append

    async def append(self, values: list[bytes]) -> list[int]:
        offsets = []
        for value in values:
            self.records.append(value)
            offsets.append(len(self.records) - 1)
            self.shared.apply(offsets[-1], value)
        return offsets


def _keyed_frame_unit(loop, dest, key: bytes, timestamp_ms: int, seed: int) -> Unit:
    """A plain lane's one-frame unit of one 3-report upload with the Idempotency-Key hash ``key``."""
    from cms_core import wire

    frame = wire.encode_batch(dest.params, reports(dest, 3, seed=seed))
    return Unit.of_frame(dest, frame, [Member(3, loop.create_future(), 0, key)], 0, timestamp_ms,
                         wire.record_size(dest.params))


def test_a_frame_of_a_1_hour_bucket_is_listed_at_the_collectors_clock_and_its_key_outlives_later_listings(
        registry_path, dest):
    """Issue 35, defect 3, at the commit: the listing's time was ``timestamp_ms // 1000``, the start of the
    frame's event-time bucket (50 minutes back for a 1-hour bucket), and the next listing of a 1-minute
    frame made every collector forget it. The listing is dated by the collector's wall clock."""
    from collector.exactly_once.log import ListingLog, decode_listing

    hour_start = 100 * 3600
    wall = [hour_start + 50 * 60]

    async def main():
        loop = asyncio.get_running_loop()
        shared = SharedIdempotency(_settings(registry_path, instance_id="a"), CollectorMetrics(),
                                   wall_clock=lambda: wall[0])
        log = MemoryLog(shared)
        outlet = KafkaOutlet(_settings(registry_path), CollectorMetrics(), log=shared)
        outlet.producer, outlet.available, outlet.committer.partitions = ScriptedProducer(), True, [0]
        hourly = _keyed_frame_unit(loop, dest, b"h" * 16, hour_start * 1000, seed=1)
        outlet.queued = hourly.queued
        await outlet.committer.commit([hourly])
        wall[0] += 10
        minutely = _keyed_frame_unit(loop, dest, b"m" * 16, (wall[0] - wall[0] % 60) * 1000, seed=2)
        outlet.queued += minutely.queued
        await outlet.committer.commit([minutely])
        await asyncio.gather(*outlet.committer.acks)
        while shared._due_flush is not None:  # the outcomes wait a moment to ride in a listing append
            await asyncio.sleep(0.001)
        await asyncio.gather(*shared._tasks)  # then are appended alone
        answers = [m.future.exception() for unit in (hourly, minutely) for m in unit.members]
        return log.records, shared, answers

    records, shared, answers = asyncio.run(main())
    assert answers == [None, None]
    listings = [decode_listing(r, i, 0.0) for i, r in enumerate(records) if r[:1] == b"F"]
    assert [entry.time for entry in listings] == [hour_start + 50 * 60, hour_start + 50 * 60 + 10]
    restarted = ListingLog(900, 1000)
    for offset, record in enumerate(records):
        restarted.apply(offset, record)
    for log in (shared.state, restarted):
        assert log.holder(b"h" * 16).status == "stored" and log.holder(b"m" * 16).status == "stored"


def test_a_settle_never_fences_a_live_owner_whose_transaction_stays_open_past_the_grace_and_fences_a_silent_one(
        registry_path, monkeypatch):
    """Issue 35, defect 5b: a settle at another replica fenced the listing's owner once the listing had been
    known for a grace period (2 x --kafka-timeout-ms + 2 s = 4 s here), though the owner was alive with its
    transaction still open (a slow broker, a long batch): the fence aborted it. The owner here renews its
    lease every second for 20 s with its listing in doubt: every settle answers "pending", none fences.
    Then it goes silent: once the replica's own records span more than the lease, it is fenced and settled."""
    from collector.exactly_once.log import encode_lease, encode_listing
    from collector.exactly_once.shared import IdempotencyPending

    now = [0.0]
    owner, replica = "ocms-collector-a", "ocms-collector-b"

    async def main():
        shared = SharedIdempotency(_settings(registry_path, instance_id="b", kafka_timeout_ms="1000"),
                                   CollectorMetrics(), clock=lambda: now[0], wall_clock=lambda: 10_000 + now[0])
        log = MemoryLog(shared)
        fenced = []

        async def fence_and_complete(listing):  # what a fence and a scan find: the frame is in its partition
            fenced.append(listing.owner)
            return True

        monkeypatch.setattr(shared.repair, "fence_and_complete", fence_and_complete)
        await log.append([encode_listing(b"n" * 16, owner, b"a-incarn", 0, 0, 10_000, [b"k" * 16])])
        listing = shared.holder(b"k" * 16)
        pending = 0
        for second in range(1, 21):  # five times the lease; the owner's transaction is open all along
            now[0] = second
            await log.append([encode_lease(replica, b"b-incarn", 0, shared.listing_time())])
            await log.append([encode_lease(owner, b"a-incarn", 0, 10_000 + second)])
            with pytest.raises(IdempotencyPending) as pending_error:
                await shared.settle(listing)
            assert pending_error.value.retry_after >= 1
            pending += 1
        alive = list(fenced)
        for second in range(21, 27):  # the owner was killed: only the replica's records from here
            now[0] = second
            await log.append([encode_lease(replica, b"b-incarn", 0, shared.listing_time())])
        stored = await shared.settle(listing)
        return pending, alive, fenced, stored, listing.status

    pending, alive, fenced, stored, status = asyncio.run(main())
    assert pending == 20 and alive == [], "a live owner must never be fenced"
    assert fenced == [owner] and stored and status == "stored", "a silent owner is fenced and its listing settled"


def test_a_lone_collectors_tail_pauses_and_wakes_when_an_earlier_record_is_missing(registry_path, monkeypatch):
    """Issue 41: while the tail reads back only this collector's own records it pauses between fetches; it reads
    at once when an own record waits for an earlier offset (another collector's record), when the log is awaited,
    after a fetch that applied a record, and before the log is read once; a settle's read to the end waits for a
    fetch that started after it."""
    import collector.exactly_once.follow as follow_module
    from collector.exactly_once.log import encode_lease_record

    monkeypatch.setattr(follow_module, "TAIL_IDLE_SECONDS", 30)
    lease = encode_lease_record("ocms-collector-other", b"i" * 8, 100)

    async def paused(shared) -> asyncio.Task:
        task = asyncio.create_task(shared._pace())
        await asyncio.sleep(0.01)
        return task

    async def main():
        shared = SharedIdempotency(_settings(registry_path, instance_id="me"), CollectorMetrics())
        assert (await paused(shared)).done()  # the log is not read yet
        shared.ready = True
        shared._read(0, lease)  # a fetch that applied a record: the next one at once
        assert (await paused(shared)).done()
        shared._apply_own([1], [lease])  # read back from its own append: applied in order, no fetch needed
        assert shared._applied == 1
        task = await paused(shared)
        assert not task.done()
        shared._apply_own([3], [lease])  # offset 2 (another collector's) is missing: the tail reads now
        await asyncio.sleep(0.01)
        assert task.done() and shared._applied == 1
        assert (await paused(shared)).done()  # still missing: no pause
        shared._read(2, lease)
        shared._fetched(4, True)
        assert shared._applied == 3
        task = await paused(shared)  # the fetch applied offset 2: no pause; then nothing new
        assert task.done()
        task = await paused(shared)
        assert not task.done()
        waiter = asyncio.create_task(shared.applied(4))  # the log awaited past what is applied
        await asyncio.sleep(0.01)
        assert task.done() and not waiter.done()
        shared._read(4, lease)
        shared._fetched(5, True)
        await asyncio.sleep(0)
        assert waiter.done()
        shared._tail = asyncio.create_task(asyncio.Event().wait())  # a running tail
        end = asyncio.create_task(shared._read_to_end())
        await asyncio.sleep(0.01)
        shared._fetched(5, True)  # may have started before the call
        await asyncio.sleep(0.01)
        assert not end.done()
        shared._fetched(5, True)
        await asyncio.sleep(0.01)
        assert end.done()
        shared._tail.cancel()

    asyncio.run(main())


def count_appends(shared) -> list[list[bytes]]:
    """The kinds of records of each of ``shared``'s appends to the log, as they are made."""
    appends: list[list[bytes]] = []
    append = shared.append

    async def counted(values):
        appends.append([v[:1] for v in values])
        return await append(values)

    shared.append = counted
    return appends


def test_a_keyed_group_is_released_once_listed_and_sent_and_its_outcomes_go_to_the_log_in_one_append(registry_path,
                                                                                                       dest):
    """Issue 41: a lane's next frame waits until the exactly-once commit has listed and sent the group holding its
    previous one (not merely taken it), so a busy lane lists one frame per round trip of the log; and the
    outcomes of a group's stored listings are written in one append (one produce request, not one per unit)."""
    from cms_core import wire

    class BlockingLogProducer(ScriptedProducer):
        def __init__(self):
            super().__init__()
            self.listed = asyncio.Event()

        async def send(self, topic, value, **kwargs):
            if value[:1] == b"F":
                await self.listed.wait()
            return await super().send(topic, value, **kwargs)

    async def main():
        loop = asyncio.get_running_loop()
        settings = _settings(registry_path, instance_id="me")
        shared = SharedIdempotency(settings, CollectorMetrics())
        shared.ready, shared._producer = True, BlockingLogProducer()
        appends = count_appends(shared)
        outlet = KafkaOutlet(settings, CollectorMetrics(), log=shared)
        outlet.producer, outlet.available, outlet.committer.partitions = ScriptedProducer(), True, [0]
        released, units = [], []
        for i in range(2):
            frame = wire.encode_frame(dest.params, reports(dest, 3, seed=i))
            members = [Member(j + 1, loop.create_future(), j, key=bytes([i, j]) * 8) for j in range(3)]
            unit = Unit.of_frame(dest, frame, members, 0, 0, wire.record_size(dest.params))
            unit.on_release = lambda unit=unit: released.append(unit)
            units.append(unit)
            outlet.committer.put(unit)
        outlet.queued = sum(unit.queued for unit in units)
        committer = outlet.committer
        committer._task = asyncio.create_task(committer._run())
        await asyncio.sleep(0.05)
        held = list(released)  # the group is taken, its listing not yet acknowledged
        shared._producer.listed.set()
        await asyncio.gather(*(m.future for unit in units for m in unit.members))
        for _ in range(100):
            if any(kinds[:1] == [b"S"] for kinds in appends):
                break
            await asyncio.sleep(0.01)
        committer._closing = True
        committer._wake.set()
        await asyncio.wait_for(committer._task, 5)
        return held, released, units, appends

    held, released, units, appends = asyncio.run(main())
    assert held == [], "no unit is released while its group's listing is not in the log"
    assert released == units, "both are released once the group is listed and sent"
    assert [kinds for kinds in appends if kinds[0] == b"S"] == [[b"S", b"S"]], appends
    assert [kinds for kinds in appends if kinds[0] == b"F"] == [[b"F", b"F"]], "one listing append for the group"


def test_outcomes_ride_in_the_next_listing_append_or_go_alone_after_a_moment(registry_path):
    """Issue 41: a group's outcomes and the next group's listing go to the log in one produce request; with no
    listing to ride in, the outcomes are appended alone once OUTCOME_RIDE_SECONDS passed."""
    from collector.exactly_once.log import encode_listing

    async def main():
        shared = SharedIdempotency(_settings(registry_path, instance_id="me"), CollectorMetrics())
        shared.ready, shared._producer = True, ScriptedProducer()
        appends = count_appends(shared)
        shared.record_outcomes([(b"a" * 16, True), (b"b" * 16, False)])
        nonce = b"n" * 16
        await shared.write_listings([(nonce, encode_listing(nonce, shared.owner, b"i" * 8, 0, 0, 100, [b"k" * 16]))])
        shared.record_outcomes([(nonce, True)])
        await asyncio.sleep(0.05)
        await asyncio.gather(*shared._tasks)
        return appends, shared

    appends, shared = asyncio.run(main())
    assert appends == [[b"S", b"X", b"F"], [b"S"]], appends
    assert shared.state.holder(b"k" * 16).status == "stored"


def test_a_key_with_another_body_is_refused_while_in_flight_and_once_its_listing_holds_it(registry_path):
    """With the shared log there is no per-process table of answers: the body digest of a key's first attempt is
    kept while it is in flight, then beside the key while this process's listing holds it (SharedIdempotency.claim,
    keep_digests, answered)."""
    from collector.exactly_once.log import Listing

    shared = SharedIdempotency(_settings(registry_path, instance_id="me"), CollectorMetrics())
    shared._secret = b"s" * 32
    key_hash, digest, first = shared.claim("app", "k" * 16, 11)
    assert (digest, first) == (11, True)
    assert shared.claim("app", "k" * 16, 11) == (key_hash, 11, False), "an overlapping attempt with the same body"
    assert shared.claim("app", "k" * 16, 12) is None, "another body while the first is in flight"
    assert shared.claim("other-app", "k" * 16, 12)[2], "the same key of another application is another key"
    shared.answered(key_hash, False)  # the overlapping attempt: the first one is still in flight
    assert shared.claim("app", "k" * 16, 12) is None
    shared.answered(key_hash, True)  # the first attempt ended unlisted (refused, 503): the key is free again
    assert shared.claim("app", "k" * 16, 12)[2]
    listing = Listing(b"n" * 16, shared.owner, b"i" * 8, 0, 0, 0, key_hash, 0, 0.0)
    shared.state.holders.take(key_hash, listing)
    other_key = shared.key_hash("app", "o" * 16)
    shared.keep_digests(listing, [key_hash])  # its listing applied: the digest is kept beside the key
    shared.answered(key_hash, True)
    assert shared.state.holders.digest(key_hash) == 12 and key_hash not in shared.in_flight
    assert shared.claim("app", "k" * 16, 11) is None, "another body once listed"
    assert shared.claim("app", "k" * 16, 12)[2], "a retry with the same body goes on (the log replays the 202)"
    shared.answered(key_hash, True)
    shared.state.holders.release(key_hash, listing)  # the listing failed or was forgotten: the digest with it
    assert shared.state.holders.digest(key_hash) is None
    assert shared.claim("app", "k" * 16, 11)[2], "a key no listing holds takes any body"
    shared.state.holders.take(other_key, Listing(b"m" * 16, "ocms-collector-other", b"i" * 8, 0, 0, 0, other_key,
                                                   0, 0.0))
    late = Listing(b"l" * 16, shared.owner, b"i" * 8, 0, 0, 0, other_key, 1, 0.0)  # the key is held already
    shared.in_flight[other_key] = 13
    shared.keep_digests(late, [other_key])
    assert shared.state.holders.digest(other_key) is None, "only the listing holding a key keeps its digest"
