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


class TableHoldingIntake(RecordingIntake):
    """An intake that holds the table partitions ``held`` (``OCMSWorker.holds_table_partition``)."""

    def __init__(self, held):
        super().__init__()
        self.held = set(held)
        self.asked: list = []

    def holds_table_partition(self, partition: int) -> bool:
        self.asked.append(partition)
        return partition in self.held


def test_a_source_partition_without_its_table_partition_is_dropped_until_it_is_held(monkeypatch):
    """Issue 35 (seed 3077): a leader that assigned the source topic and the changelog apart gave a worker source
    partition 1 with changelog partitions {0, 3}; it counted partition 1 onto a table partition it had not
    recovered. The intake takes nothing of a partition whose table partition is not held here, and fetches it
    again once it is."""
    tp = TP(SOURCE, 1)
    sink = TableHoldingIntake(held={0, 3})
    batch = [message(SOURCE, 0, 7), message(SOURCE, 1, 20), message(SOURCE, 1, 21)]
    consumer = consumer_with(monkeypatch, batch, sink, fresh_offsets())
    drain(consumer)
    assert sink.received == [batch[0]] and consumer.tracked == [batch[0]]
    assert consumer._dropped_from == {tp: 20} and consumer._read_offset[tp] is None
    sink.held.add(1)  # the next generation's assignment gives it both
    monkeypatch.setattr(aiokafka_driver.Consumer, "getmany", lambda self, timeout: _aiter(batch[1:]))
    drain(consumer)
    assert sink.received == batch and consumer._dropped_from == {}


def test_the_worker_says_which_table_partitions_its_generation_holds_and_rejoins_once(monkeypatch):
    from agents.app import OCMSWorker

    rejoins = []
    monkeypatch.setattr("agents.app.request_rejoin", lambda app: rejoins.append(app) or True)
    changelog = "app-counts-changelog"
    assignment = {TP(SOURCE, 1), TP(SOURCE, 3), TP(changelog, 0), TP(changelog, 3)}
    worker = object.__new__(OCMSWorker)  # no broker: only the assignment is read
    worker.settings = SimpleNamespace(changelog_topic=changelog)
    worker.app = SimpleNamespace(consumer_generation_id=3, consumer=SimpleNamespace(assignment=lambda: assignment))
    worker._tables_held = (None, frozenset(), set())
    assert worker.holds_table_partition(3) and worker.holds_table_partition(0)
    assert not worker.holds_table_partition(1) and not worker.holds_table_partition(1)
    assert len(rejoins) == 1  # once a generation
    assignment = {TP(SOURCE, 1), TP(changelog, 1)}
    worker.app.consumer_generation_id = 4
    assert worker.holds_table_partition(1) and not worker.holds_table_partition(3)
    assert len(rejoins) == 2
