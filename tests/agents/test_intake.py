"""agents.intake without Kafka: which messages the consumer hands to the worker
(the consumer lives in agents.faust_internals, with every private Faust name).

Faust's own ``getmany`` is replaced by a scripted batch, so each test sees exactly
what the fetcher would: the messages it still yields (other topics) and the
bookkeeping it keeps for source messages (unacked set, read offsets, gaps).
"""

import asyncio
from collections import defaultdict
from types import SimpleNamespace

from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.types import TP

from agents import faust_internals
from agents.intake import IntakeApp, IntakeConsumer, IntakeTransport
from infra.kafka import LateBatchWait

SOURCE = "reports"


class RecordingIntake:
    source_topic = SOURCE

    def __init__(self, full_after: int | None = None):
        self.received: list = []
        self.flushes = 0
        self.full_after = full_after

    def receive(self, message) -> bool:
        self.received.append(message)
        return self.full_after is not None and len(self.received) % self.full_after == 0

    async def batch_full(self) -> None:
        self.flushes += 1

    async def flush(self) -> None:
        raise AssertionError("the intake starts a full batch's checkpoint with batch_full, not flush")


GENERATION = 7


class Flow:
    """Faust's flow-control event: suspended during a rebalance and table recovery."""

    def __init__(self, active: bool = True):
        self.active = active

    def is_active(self) -> bool:
        return self.active


def message(topic: str, partition: int, offset: int, generation: int = GENERATION):
    return SimpleNamespace(topic=topic, partition=partition, offset=offset, tp=TP(topic, partition),
                           generation_id=generation)


def consumer_with(monkeypatch, batch, intake_obj, read_offsets=None):
    async def scripted_getmany(self, timeout):
        for m in batch:
            yield m.tp, m

    monkeypatch.setattr(aiokafka_driver.Consumer, "getmany", scripted_getmany)
    consumer = object.__new__(IntakeConsumer)  # no broker: only getmany is exercised
    consumer.app = SimpleNamespace(intake=intake_obj, flow_control=Flow(), consumer_generation_id=GENERATION)
    consumer._read_offset = read_offsets
    consumer.tracked = []
    consumer.gaps = []
    consumer.track_message = consumer.tracked.append

    async def add_gap(tp, offset_from, offset_to):
        consumer.gaps.append((tp, offset_from, offset_to))

    consumer._add_gap = add_gap
    return consumer


def drain(consumer) -> list:
    async def run():
        return [item async for item in consumer.getmany(timeout=0.1)]

    return asyncio.run(run())


def fresh_offsets(*tps):
    offsets = defaultdict(lambda: None)
    offsets.update(tps)
    return offsets


def test_source_messages_go_to_the_intake_and_other_topics_to_faust(monkeypatch):
    batch = [message(SOURCE, 0, 0), message("changelog", 0, 7), message(SOURCE, 1, 0), message(SOURCE, 0, 1)]
    sink = RecordingIntake()
    consumer = consumer_with(monkeypatch, batch, sink, fresh_offsets())
    yielded = drain(consumer)
    assert [m for _, m in yielded] == [batch[1]]
    assert sink.received == [batch[0], batch[2], batch[3]]
    assert consumer.tracked == sink.received  # pending ack until the worker's flush acks them
    assert consumer._read_offset[TP(SOURCE, 0)] == 1 and consumer._read_offset[TP(SOURCE, 1)] == 0
    assert consumer.gaps == []


def test_a_full_batch_is_flushed_before_the_next_message(monkeypatch):
    batch = [message(SOURCE, 0, i) for i in range(7)]
    sink = RecordingIntake(full_after=3)
    drain(consumer_with(monkeypatch, batch, sink, fresh_offsets()))
    assert len(sink.received) == 7 and sink.flushes == 2


def test_messages_below_the_read_offset_are_dropped(monkeypatch):
    """After a seek Faust re-reads from the committed offset; older ones were read already."""
    tp = TP(SOURCE, 0)
    batch = [message(SOURCE, 0, 3), message(SOURCE, 0, 4), message(SOURCE, 0, 5)]
    sink = RecordingIntake()
    drain(consumer_with(monkeypatch, batch, sink, fresh_offsets((tp, 4))))
    assert [m.offset for m in sink.received] == [4, 5]


def test_skipped_offsets_are_recorded_as_a_gap(monkeypatch):
    """Compaction or transaction markers leave offsets that can never be acked."""
    tp = TP(SOURCE, 2)
    batch = [message(SOURCE, 2, 10), message(SOURCE, 2, 11), message(SOURCE, 2, 15)]
    consumer = consumer_with(monkeypatch, batch, RecordingIntake(), fresh_offsets((tp, 9)))
    drain(consumer)
    assert consumer.gaps == [(tp, 12, 15)]


def test_messages_fetched_while_the_flow_is_held_are_dropped(monkeypatch):
    """During a rebalance or table recovery Faust's streams drop what the fetcher returns;
    the seek before the flow resumes fetches it again. Counting this copy too would count
    it twice (the live cause of a double count after a kill: the fetch of a new assignment
    arrived before its table partition was recovered, the re-fetch after the seek again)."""
    tp = TP(SOURCE, 0)
    batch = [message(SOURCE, 0, 0), message(SOURCE, 0, 1), message("changelog", 0, 3)]
    sink = RecordingIntake()
    consumer = consumer_with(monkeypatch, batch, sink, fresh_offsets())
    consumer.app.flow_control.active = False
    yielded = drain(consumer)
    assert sink.received == [] and consumer.tracked == [] and consumer._read_offset[tp] is None
    assert [m for _, m in yielded] == [batch[2]]  # recovery reads the changelog meanwhile
    consumer.app.flow_control.active = True
    drain(consumer)
    assert sink.received == batch[:2]


def test_messages_of_an_older_generation_are_dropped(monkeypatch):
    batch = [message(SOURCE, 0, 5, generation=GENERATION - 1), message(SOURCE, 0, 5)]
    sink = RecordingIntake()
    consumer = consumer_with(monkeypatch, batch, sink, fresh_offsets())
    drain(consumer)
    assert sink.received == [batch[1]] and consumer.tracked == [batch[1]]


def test_untrack_forgets_a_pending_message():
    consumer = object.__new__(IntakeConsumer)
    kept, dropped = object(), object()  # Faust's messages are hashable by identity
    consumer._unacked_messages = {kept, dropped}
    consumer.untrack(dropped)
    assert consumer._unacked_messages == {kept}


def test_without_an_intake_every_message_takes_faust_s_path(monkeypatch):
    batch = [message(SOURCE, 0, 0), message("other", 0, 0)]
    consumer = consumer_with(monkeypatch, batch, None, fresh_offsets())
    assert [m for _, m in drain(consumer)] == batch
    assert consumer.tracked == []


def test_the_loop_yields_to_other_tasks_during_a_long_batch(monkeypatch):
    monkeypatch.setattr(faust_internals, "YIELD_EVERY", 10)
    batch = [message(SOURCE, 0, i) for i in range(100)]
    ticks = []

    async def run():
        consumer = consumer_with(monkeypatch, batch, RecordingIntake(), fresh_offsets())

        async def ticker():
            while True:
                ticks.append(len(consumer.tracked))
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        async for _ in consumer.getmany(timeout=0.1):
            pass
        task.cancel()

    asyncio.run(run())
    assert len(set(ticks)) >= 9  # the ticker ran between chunks, not only before and after


def test_the_app_builds_the_intake_transport():
    app = IntakeApp("intake-test", broker="kafka://127.0.0.1:1", autodiscover=False)
    transport = app._new_transport()
    assert isinstance(transport, IntakeTransport) and transport.Consumer is IntakeConsumer


def test_dropped_messages_are_fetched_again_before_anything_after_them_is_taken(monkeypatch):
    """Issue 35, 2 (found by the fault schedules): messages dropped while the flow was held, and the rest of a
    fetch Faust's getmany never handed over (it stops when the flow stops), were fetched again only by the seek
    to the committed offsets, which aiokafka skips for a partition nothing was committed for. The next owner
    began hundreds of messages in and Faust's commit passed them. Now the intake remembers the lowest offset
    dropped and, when a later one comes first, seeks back to it and takes nothing after it until it comes."""
    tp = TP(SOURCE, 0)
    sink = RecordingIntake()
    fetches = [
        ([message(SOURCE, 0, i) for i in range(10)], 5),  # Faust hands over 0-4, then the flow stops
        ([message(SOURCE, 0, i) for i in range(10, 15)], 5),  # the fetcher moved on: 10-14 come first
        ([message(SOURCE, 0, i) for i in range(5, 15)], 10),  # after the seek: 5-14
    ]
    sought = []

    async def scripted_getmany(self, timeout):
        records, handed = fetches.pop(0)
        self._fetched = {tp: records}
        for m in records[:handed]:
            yield m.tp, m

    consumer = consumer_with(monkeypatch, [], sink, fresh_offsets())
    monkeypatch.setattr(aiokafka_driver.Consumer, "getmany", scripted_getmany)

    async def seek(partition, offset):
        sought.append((partition, offset))
        consumer._read_offset[partition] = offset

    consumer.seek = seek
    for _ in range(3):
        drain(consumer)
    assert [m.offset for m in sink.received] == list(range(15))  # each once, in order
    assert sought == [(tp, 5)] and consumer.gaps == []
    assert consumer._dropped_from == {}


def test_messages_dropped_while_the_flow_is_held_are_fetched_again_if_the_seek_missed_them(monkeypatch):
    tp = TP(SOURCE, 3)
    sink = RecordingIntake()
    consumer = consumer_with(monkeypatch, [message(SOURCE, 3, 40), message(SOURCE, 3, 41)], sink, fresh_offsets())
    consumer.app.flow_control.active = False
    drain(consumer)
    assert consumer._dropped_from == {tp: 40}
    sought = []

    async def seek(partition, offset):
        sought.append((partition, offset))

    consumer.seek = seek
    consumer.app.flow_control.active = True
    monkeypatch.setattr(aiokafka_driver.Consumer, "getmany", lambda self, timeout: _aiter([message(SOURCE, 3, 42)]))
    drain(consumer)
    assert sink.received == [] and sought == [(tp, 40)]


async def _aiter(messages):
    for m in messages:
        yield m.tp, m


class LateRecords(RecordingIntake):
    def __init__(self):
        super().__init__()
        self.late: list = []

    def late_records(self, partition, first, upto, given_up):
        self.late.append((partition, first, upto, given_up))


def scripted_fetches(monkeypatch, consumer, fetches):
    async def scripted_getmany(self, timeout):
        records = fetches.pop(0)
        self._fetched = {m.tp: [r for r in records if r.tp == m.tp] for m in records}
        for m in records:
            yield m.tp, m

    monkeypatch.setattr(aiokafka_driver.Consumer, "getmany", scripted_getmany)
    sought = []

    async def seek(partition, offset):
        sought.append((partition, offset))
        consumer._read_offset[partition] = offset
        consumer._expect(partition, offset)

    consumer.seek = seek
    return sought


def test_offsets_the_broker_makes_visible_late_are_fetched_again_before_later_ones_are_taken(monkeypatch):
    """Issue 35 (a fault schedule lost 36 reports): Tansu made a record batch readable before an earlier one
    of another producer, the fetch from the earlier offset was answered with the later batch, and the intake
    took the difference as a gap: the next checkpoint's per-key offsets passed the late batch for good. Where
    the profile says batches may come late, the intake fetches again from the offset it expects."""
    tp = TP(SOURCE, 2)
    sink = LateRecords()
    consumer = consumer_with(monkeypatch, [], sink, fresh_offsets())
    consumer.app.late_batches = True
    sought = scripted_fetches(monkeypatch, consumer, [
        [message(SOURCE, 2, i) for i in range(350, 356)],
        [message(SOURCE, 2, 361), message(SOURCE, 2, 362)],  # 356-360 not visible yet
        [message(SOURCE, 2, 361), message(SOURCE, 2, 362)],  # still not
        [message(SOURCE, 2, i) for i in range(356, 364)],  # there they are
    ])
    for _ in range(4):
        drain(consumer)
    assert [m.offset for m in sink.received] == list(range(350, 364))  # each once, in order
    assert consumer.gaps == []
    assert sought == [(tp, 356), (tp, 356)]
    assert sink.late == [(2, 356, 361, False)]  # reported once per late run, not per fetch
    assert not consumer._late


def test_offsets_never_delivered_are_taken_as_a_gap_after_the_wait(monkeypatch):
    tp = TP(SOURCE, 0)
    sink = LateRecords()
    consumer = consumer_with(monkeypatch, [], sink, fresh_offsets())
    consumer.app.late_batches = True
    consumer._late = LateBatchWait(wait_s=0.0)
    sought = scripted_fetches(monkeypatch, consumer, [
        [message(SOURCE, 0, 10)],
        [message(SOURCE, 0, 14)],  # 11-13 missing: fetch again
        [message(SOURCE, 0, 14), message(SOURCE, 0, 15)],  # still missing, the wait is over: a gap
    ])
    for _ in range(3):
        drain(consumer)
    assert [m.offset for m in sink.received] == [10, 14, 15]
    assert sought == [(tp, 11)]
    assert consumer.gaps == [(tp, 11, 14)]
    assert sink.late == [(0, 11, 14, False), (0, 11, 14, True)]


def test_without_late_batches_skipped_offsets_are_a_gap_at_once(monkeypatch):
    """A Kafka topic written in transactions has offsets no message holds (the commit markers)."""
    tp = TP(SOURCE, 0)
    sink = LateRecords()
    consumer = consumer_with(monkeypatch, [], sink, fresh_offsets())
    sought = scripted_fetches(monkeypatch, consumer, [[message(SOURCE, 0, 10), message(SOURCE, 0, 12)]])
    drain(consumer)
    assert [m.offset for m in sink.received] == [10, 12] and sought == [] and sink.late == []
    assert consumer.gaps == [(tp, 11, 12)]


def test_the_seek_to_committed_offsets_sets_the_offset_expected_next(monkeypatch):
    """After a rebalance the first message expected is the committed offset; with nothing committed, the
    partition's first offset (a late batch at the very start would otherwise go unnoticed)."""
    committed, fresh = TP(SOURCE, 0), TP(SOURCE, 1)
    consumer = consumer_with(monkeypatch, [], RecordingIntake(), fresh_offsets())
    consumer.app.late_batches = True

    async def perform_seek(self):
        self._read_offset.update({committed: 120, fresh: None, TP("changelog", 0): 7})

    async def earliest_offsets(*partitions):
        assert partitions == (fresh,)
        return {fresh: 0}

    monkeypatch.setattr(aiokafka_driver.Consumer, "perform_seek", perform_seek)
    consumer.earliest_offsets = earliest_offsets
    consumer._next_offset = {TP(SOURCE, 3): 99}  # a partition of the previous assignment
    asyncio.run(consumer.perform_seek())
    assert consumer._next_offset == {committed: 120, fresh: 0}
