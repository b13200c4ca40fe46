"""agents.app without a broker: the wiring of the pending micro-batch and the checkpoint.

The exactness argument (skip events at or below the stored offset) covers replays
*across* batches; a batch that held two copies of one message would count both.
The checkpoint's order (values and dead letters on the broker before any ack) is
checked with a table and topic whose acknowledgements the test releases.
"""

import asyncio
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from faust.types import TP

from agents import checkpoint as checkpoint_module
from agents.app import OCMSWorker
from agents.processor import PendingBatch
from agents.settings import WorkerSettings
from agents.state import BucketKey, StateKey
from cms_core import OCMSParams
from registry.flags import metrics_from_flags

from .harness import report_messages

PARAMS = OCMSParams.build(2.0, 1000)
FRAME = 10
SOURCE = "unit-source"


@pytest.fixture
def worker(monkeypatch):
    settings = WorkerSettings.build(broker="embedded", app_id="unit-app", source_topic=SOURCE)
    worker = OCMSWorker(settings, metrics_from_flags(epsilon=2, dictionary_size=1000, tracked_range="0:100"))
    worker.untracked, worker.owned = [], {0, 1}
    consumer = SimpleNamespace(untrack=worker.untracked.append,
                               assignment=lambda: {TP(SOURCE, p) for p in worker.owned} | {TP("other", 0)})
    monkeypatch.setattr(type(worker.app), "consumer", consumer)
    return worker


def deliveries(partition: int, offsets, seed: int = 1) -> list:
    frames = report_messages(PARAMS, np.arange(FRAME * (max(offsets) + 1)) % 100, FRAME, seed=seed)
    now = time.time()
    return [SimpleNamespace(topic=SOURCE, partition=partition, offset=o, key=frames[o].key,
                            value=frames[o].value, timestamp=now) for o in offsets]


def pending(worker) -> list[tuple[int, int]]:
    return [(a.partition, a.offset) for a in worker.pending.accepted]


def test_a_message_delivered_again_before_the_flush_is_counted_once(worker):
    """A seek back to the committed offset (a rebalance our flush did not see) delivers
    offsets 2..4 of partition 0 again while the first copies are still pending."""
    first = deliveries(0, range(5))
    other = deliveries(1, range(3), seed=2)
    for m in first + other:
        worker.receive(m)
    again = deliveries(0, range(2, 5))
    for m in again:
        worker.receive(m)
    assert sorted(pending(worker)) == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (1, 2)]
    assert worker.pending.reports == 8 * FRAME
    assert worker.untracked == first[2:]  # the stale copies: neither counted nor acked
    assert first[2] not in worker.pending.messages and again[0] in worker.pending.messages
    assert worker.metrics.redelivered._value.get() == 3


def test_a_rejected_message_delivered_again_goes_to_the_dead_letters_once(worker):
    bad = SimpleNamespace(topic=SOURCE, partition=0, offset=0, key=b"k", value=b"junk", timestamp=time.time())
    worker.receive(bad)
    worker.receive(SimpleNamespace(**vars(bad)))
    assert len(worker.pending.dead) == 1 and len(worker.pending) == 1 and worker.pending.reports == 0


def test_offsets_that_move_forward_keep_the_batch(worker):
    for m in deliveries(0, [0, 1, 3, 7]):
        worker.receive(m)
    assert pending(worker) == [(0, 0), (0, 1), (0, 3), (0, 7)] and worker.untracked == []


def test_pending_messages_of_a_partition_no_longer_owned_are_dropped_not_written(worker):
    """A rebalance that took partition 1 without Faust's wait for unacked messages: its
    new owner counts them from the committed offset; this worker must not write them."""
    kept, lost = deliveries(0, range(3)), deliveries(1, range(2), seed=2)
    for m in kept + lost:
        worker.receive(m)
    worker.owned = {0}
    worker._drop_unowned()
    assert pending(worker) == [(0, 0), (0, 1), (0, 2)] and worker.pending.reports == 3 * FRAME
    assert worker.untracked == lost
    worker.receive(deliveries(1, [0], seed=2)[0])  # given back later: a fresh start, no stale copies
    assert pending(worker)[-1] == (1, 0) and worker.untracked == lost


def test_a_frame_s_shuffle_header_is_read_and_a_bad_one_counts_as_not_shuffled(worker, tmp_path):
    """``ocms-shuffle-n`` (a shuffling collector's batch size) travels with the accepted message when its MAC
    verifies (cms_core.claims); a header that cannot be a batch size of the frame (fewer than its 10 reports,
    not digits) is counted and the frame taken as not shuffled: its reports still count. So is a claim
    without a MAC, and every claim of a worker without a claim key (issue 37)."""
    from agents.trust import ClaimCheck
    from cms_core import claims

    key = b"k" * 32
    (tmp_path / "key").write_bytes(key)
    worker.claims = ClaimCheck(SimpleNamespace(shuffle_claim_key_file=str(tmp_path / "key"), label=str),
                               worker.metrics)
    messages = deliveries(0, range(5))
    signed = claims.claim_headers(key, 5000, claims.new_batch_id(), messages[0].value)
    headers = [signed, [("ocms-shuffle-n", b"9")], [("ocms-shuffle-n", b"x1")], None, [("ocms-shuffle-n", b"5000")]]
    for m, h in zip(messages, headers):
        worker.receive(SimpleNamespace(**vars(m), headers=h))
    assert [a.shuffle_n for a in worker.pending.accepted] == [5000, 0, 0, 0, 0]
    assert worker.pending.reports == 5 * FRAME
    assert worker.metrics.shuffle_header_invalid._value.get() == 2
    rejected = worker.metrics.shuffle_claims_rejected
    assert [rejected.labels(r)._value.get() for r in ("invalid_size", "missing_mac")] == [2, 1]


async def settle(worker) -> None:
    """Let every runnable task run until it waits on something the test has not released,
    the checkpoint's decode on the worker's decode thread included (one thread: a no-op
    queued behind the decode runs after it)."""
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.get_running_loop().run_in_executor(worker.checkpoint.decoder, lambda: None)
    for _ in range(20):
        await asyncio.sleep(0)


async def until(condition, timeout: float = 10.0) -> None:
    """Wait for ``condition()`` (the checkpoint decodes on a thread, so 'settled' is a condition, not a count of turns)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.001)
    for _ in range(20):  # then let what the condition released run
        await asyncio.sleep(0)


class HeldTable:
    """The counts table's surface the checkpoint uses; each write's broker acknowledgement
    is a future the test resolves."""

    def __init__(self, journal: list):
        self.journal, self.values, self.futures, self.every_future = journal, {}, [], []

    def get(self, key):
        return self.values.get(key)

    def __setitem__(self, key, value):
        self.values[key] = value
        self.futures.append(asyncio.get_running_loop().create_future())
        self.every_future.append(self.futures[-1])
        self.journal.append("write")

    def take_unacknowledged(self):
        futures, self.futures = self.futures, []
        return futures

    def acknowledge(self, writes: slice = slice(None)) -> None:
        """The broker acknowledges these writes (in write order; default: every write so far), each exactly once."""
        for future in self.every_future[writes]:
            future.set_result(None)

    def acknowledge_the_rest(self) -> None:
        """The broker acknowledges every write it has not answered yet."""
        for future in self.every_future:
            if not future.done():
                future.set_result(None)


def held_worker(worker, monkeypatch):
    journal = []
    worker.checkpoint.writer.table = HeldTable(journal)
    dead_futures = []

    async def send_dead_letter(**kwargs):
        dead_futures.append(asyncio.get_running_loop().create_future())
        journal.append("dead letter")
        return dead_futures[-1]

    async def commit():
        journal.append("commit")

    async def crash(exc):
        journal.append(f"crash: {exc}")

    worker.checkpoint.dead_letters = SimpleNamespace(send=send_dead_letter)
    consumer = type(worker.app).consumer
    consumer.ack = lambda message: journal.append(("ack", message.partition, message.offset))
    consumer.commit = commit
    monkeypatch.setattr(worker.app, "crash", crash)
    # The group-commit tests count the cap in messages: BATCH_GROWTH_UNDER_LOAD x batch_max_reports, not
    # the growth by the state a checkpoint rewrote (test_batches_grow_with_the_state_a_checkpoint_rewrites).
    monkeypatch.setattr(checkpoint_module, "BATCH_REPORTS_PER_STATE_BYTE", 0)
    return journal, dead_futures


def test_the_checkpoint_acks_only_after_the_broker_holds_values_and_dead_letters(worker, monkeypatch):
    journal, dead_futures = held_worker(worker, monkeypatch)
    bad = SimpleNamespace(topic=SOURCE, partition=1, offset=0, key=b"k", value=b"junk", timestamp=time.time())
    for m in deliveries(0, range(3)) + [bad]:
        worker.receive(m)
    reason = worker.pending.dead[0][1].reason

    async def run():
        checkpoint = asyncio.ensure_future(worker.checkpoint.write(worker.pending.take()))
        await until(lambda: "dead letter" in journal)
        assert not checkpoint.done()
        assert journal.count("write") == 2 and journal[-1] == "dead letter"  # bucket + cumulative key
        worker.checkpoint.writer.table.acknowledge()
        await settle(worker)
        assert not checkpoint.done() and not [e for e in journal if e[0] == "ack"]  # one still unacknowledged
        dead_futures[-1].set_result(None)
        await checkpoint

    asyncio.run(run())
    assert journal == ["write", "write", "dead letter", ("ack", 0, 0), ("ack", 0, 1), ("ack", 0, 2), ("ack", 1, 0),
                       "commit"]
    assert worker.metrics.rejected.labels(reason)._value.get() == 1


def test_the_decode_runs_on_the_decode_thread_and_nothing_is_written_before_it_returns(worker, monkeypatch):
    """The O(reports x D) decode leaves the event loop free (/healthz, the view, heartbeats)."""
    journal, _ = held_worker(worker, monkeypatch)
    decoding = threading.Event()
    release = threading.Event()
    seen = []
    real = checkpoint_module.encoded_plan

    def held_decode(*args):
        seen.append((threading.current_thread().name, list(journal)))
        decoding.set()
        assert release.wait(30)
        return real(*args)

    monkeypatch.setattr(checkpoint_module, "encoded_plan", held_decode)
    for m in deliveries(0, range(3)):
        worker.receive(m)

    async def run():
        checkpoint = asyncio.ensure_future(worker.checkpoint.write(worker.pending.take()))
        for _ in range(20):
            await asyncio.sleep(0)
        # The loop runs other work while the decode is held: it just delivered to_thread's answer.
        assert await asyncio.to_thread(decoding.wait, 30)
        assert not checkpoint.done() and journal == []
        release.set()
        await settle(worker)
        worker.checkpoint.writer.table.acknowledge()
        await checkpoint

    asyncio.run(run())
    assert [name.startswith("ocms-decode") for name, _ in seen] == [True] and seen[0][1] == []
    assert journal == ["write", "write", ("ack", 0, 0), ("ack", 0, 1), ("ack", 0, 2), "commit"]


def test_a_send_the_broker_refuses_acks_nothing_and_crashes_the_worker(worker, monkeypatch):
    journal, _ = held_worker(worker, monkeypatch)
    for m in deliveries(0, range(2)):
        worker.receive(m)

    async def run():
        checkpoint = asyncio.ensure_future(worker.checkpoint.write(worker.pending.take()))
        await until(lambda: journal.count("write") == 2)
        worker.checkpoint.writer.table.every_future[0].set_exception(RuntimeError("not leader"))
        with pytest.raises(RuntimeError):
            await checkpoint

    asyncio.run(run())
    assert journal == ["write", "write", "crash: not leader"]


class KeyTable:
    """The table surface retention uses: keys, pop (recording the partition of the current
    event each delete was sent under) and the acknowledgements to wait for."""

    def __init__(self, keys):
        self.values = {key.encode(): b"v" for key in keys}
        self.deleted = []

    def keys(self):
        return self.values.keys()

    def pop(self, key, default=None):
        from faust.streams import current_event as faust_current_event

        self.deleted.append((StateKey.decode(key), faust_current_event().message.partition))
        return self.values.pop(key, default)

    def take_unacknowledged(self):
        return []


def test_retention_is_read_from_the_table_after_every_rebalance(worker, monkeypatch):
    """Buckets this process never wrote (written before a restart, or by the previous owner
    of a partition) expire too; partitions not owned are left to their owner; nothing is
    deleted while a rebalance is under way."""
    fp = PARAMS.fingerprint.hex()
    now = 1_699_999_980  # a multiple of 60
    layout = worker.checkpoint.fold.layout
    old = [layout.key_of(BucketKey(fp, p, 60, now - 86_400 - 120)) for p in (0, 1, 2)]
    fresh = layout.key_of(BucketKey(fp, 0, 60, now - 60))
    table = worker.retention.writer.table = KeyTable(old + [fresh, layout.key_of(BucketKey.total(fp, 0))])
    app = worker.app
    monkeypatch.setattr(app, "rebalancing", True)
    assert asyncio.run(worker.retention.expire(now)) == 0 and table.deleted == []
    monkeypatch.setattr(app, "rebalancing", False)
    assert asyncio.run(worker.retention.expire(now)) == 2  # partitions 0 and 1 are owned, 2 is not
    assert sorted(table.deleted) == [(old[0], 0), (old[1], 1)]  # each under its own partition
    worker.owned = {0, 1, 2}  # partition 2 moved here: its table keys are indexed on the next pass
    monkeypatch.setattr(app, "rebalancing_count", app.rebalancing_count + 1)
    assert asyncio.run(worker.retention.expire(now)) == 1 and table.deleted[-1] == (old[2], 2)
    assert asyncio.run(worker.retention.expire(now + 86_400 - 1)) == 0  # fresh ends at now, retention 24 h
    assert asyncio.run(worker.retention.expire(now + 86_400)) == 1 and table.deleted[-1] == (fresh, 0)
    assert len(table.values) == 1  # the cumulative key never expires


def acks(journal) -> list[tuple[int, int]]:
    return [(e[1], e[2]) for e in journal if isinstance(e, tuple) and e[0] == "ack"]


def test_full_batches_are_checkpointed_behind_the_intake_and_acked_in_the_order_they_were_taken(worker, monkeypatch):
    """Group commit: the intake goes on while a full batch decodes and waits for the broker; the
    next batch grows until the batches before it are acknowledged, or to BATCH_GROWTH_UNDER_LOAD x
    batch_max_reports, where its checkpoint starts (and the intake waits when the one after it
    reaches the cap too). Batches are written one after another, and a later batch's messages are
    never acked before an earlier one's, even when the broker acknowledges the later batch's
    records first."""
    journal, _ = held_worker(worker, monkeypatch)
    worker.checkpoint.pending = PendingBatch(2 * FRAME)  # full at two messages
    cap_messages = checkpoint_module.BATCH_GROWTH_UNDER_LOAD * 2
    messages = deliveries(0, range(2 + 2 * cap_messages))

    async def feed(batch):
        for m in batch:
            if worker.receive(m):
                await worker.batch_full()

    async def run():
        await feed(messages[:2])  # batch 1: full, checkpointed behind the intake
        assert len(worker.pending) == 0
        await until(lambda: journal.count("write") == 2)
        await feed(messages[2:1 + cap_messages])  # batch 2: full, but grows while batch 1 is unacknowledged
        await settle(worker)
        assert len(worker.pending) == cap_messages - 1 and journal.count("write") == 2
        await feed(messages[1 + cap_messages:2 + cap_messages])  # at the cap: its checkpoint starts anyway
        await until(lambda: journal.count("write") == 4)
        assert len(worker.pending) == 0
        await feed(messages[2 + cap_messages:1 + 2 * cap_messages])  # batch 3 grows while batch 2 waits for batch 1
        assert len(worker.pending) == cap_messages - 1 and journal.count("write") == 4
        blocked = asyncio.ensure_future(feed(messages[1 + 2 * cap_messages:]))  # at the cap: the intake waits
        await settle(worker)
        assert not blocked.done()
        worker.checkpoint.writer.table.acknowledge(slice(2, 4))  # batch 2 first
        await settle(worker)
        assert acks(journal) == [] and not blocked.done()
        worker.checkpoint.writer.table.acknowledge(slice(0, 2))
        await until(lambda: len(acks(journal)) == 2 + cap_messages)
        await blocked  # batch 2's checkpoint is done (batch 1 acked), batch 3 is taken
        assert len(worker.pending) == 0
        await until(lambda: journal.count("write") == 6)
        worker.checkpoint.writer.table.acknowledge_the_rest()
        await worker.flush()

    asyncio.run(run())
    assert acks(journal) == [(0, i) for i in range(len(messages))]
    assert journal.index("commit") > journal.index(("ack", 0, 1)) and journal[-1] == "commit"
    assert journal.count("write") == 6  # three batches, a bucket and a cumulative key each


def test_a_full_batch_waits_for_the_acknowledgements_before_it_not_for_the_age_bound(worker, monkeypatch):
    """Under load a full batch is not checkpointed while the batch before it waits for the broker
    (a checkpoint rewrites every touched key whatever the batch's size): Checkpoint.ready, which
    the intake and the age-bound timer (app.flush_old_batch) both ask, says no until the broker
    has acknowledged; then the next message takes it."""
    journal, _ = held_worker(worker, monkeypatch)
    worker.checkpoint.pending = PendingBatch(2 * FRAME)
    messages = deliveries(0, range(5))

    async def run():
        for m in messages[:4]:
            if worker.receive(m):
                await worker.batch_full()
        await until(lambda: journal.count("write") == 2)
        await settle(worker)
        assert len(worker.pending) == 2 and worker.pending.full and not worker.checkpoint.ready()
        worker.checkpoint.writer.table.acknowledge()
        await until(lambda: len(acks(journal)) == 2)
        assert worker.checkpoint.ready()
        if worker.receive(messages[4]):
            await worker.batch_full()
        await until(lambda: journal.count("write") == 4)
        worker.checkpoint.writer.table.acknowledge_the_rest()
        await worker.flush()

    asyncio.run(run())
    assert acks(journal) == [(0, i) for i in range(5)]


def test_batches_grow_with_the_state_a_checkpoint_rewrites(worker, monkeypatch):
    """Under load a batch grows to BATCH_GROWTH_UNDER_LOAD x batch_max_reports, or to a report per
    byte of table values the latest checkpoint rewrote (hundreds of metrics: megabytes), up to
    BATCH_GROWTH_FOR_LARGE_STATE x."""
    journal, _ = held_worker(worker, monkeypatch)
    monkeypatch.setattr(checkpoint_module, "BATCH_REPORTS_PER_STATE_BYTE", 1)
    checkpoint = worker.checkpoint
    # the two table keys below rewrite ~490 bytes (member codec v4: 2-byte counts while n < 65,536), between
    # 8 and 16 batches of 50
    checkpoint.pending = PendingBatch(50)
    base, most = checkpoint_module.BATCH_GROWTH_UNDER_LOAD * 50, checkpoint_module.BATCH_GROWTH_FOR_LARGE_STATE * 50
    assert checkpoint.growth_limit() == base  # nothing written yet
    for m in deliveries(0, range(3)):
        worker.receive(m)

    async def run():
        write = asyncio.ensure_future(checkpoint.write(worker.pending.take()))
        await until(lambda: journal.count("write") == 2)
        checkpoint.writer.table.acknowledge()
        await write

    asyncio.run(run())
    rewritten = sum(len(v) for v in checkpoint.writer.table.values.values())
    assert base < rewritten < most  # the test's two table keys: a bucket and the cumulative key
    assert checkpoint.growth_limit() == rewritten
    checkpoint._rewritten_bytes = 10**9
    assert checkpoint.growth_limit() == most
    monkeypatch.setattr(checkpoint_module, "BATCH_REPORTS_PER_STATE_BYTE", 0)
    assert checkpoint.growth_limit() == base


def test_a_batch_the_broker_refuses_stops_every_later_batch_from_being_acked(worker, monkeypatch):
    journal, _ = held_worker(worker, monkeypatch)
    worker.checkpoint.pending = PendingBatch(2 * FRAME)
    cap_messages = checkpoint_module.BATCH_GROWTH_UNDER_LOAD * 2
    messages = deliveries(0, range(2 + cap_messages + 2))

    async def run():
        for m in messages[:2 + cap_messages]:  # batch 2 reaches the cap: written before batch 1 is acked
            if worker.receive(m):
                await worker.batch_full()
        await until(lambda: journal.count("write") == 4)
        worker.checkpoint.writer.table.acknowledge(slice(2, None))  # batch 2 is on the broker ...
        worker.checkpoint.writer.table.every_future[0].set_exception(RuntimeError("not leader"))  # ... batch 1 is not
        await until(lambda: any(str(e).startswith("crash") for e in journal))
        await settle(worker)
        with pytest.raises(RuntimeError, match="not leader"):  # the intake stops at its next full batch
            for m in messages[2 + cap_messages:]:
                if worker.receive(m):
                    await worker.batch_full()

    asyncio.run(run())
    assert acks(journal) == [] and "commit" not in journal


def test_the_web_server_s_stop_closes_the_forwarding_client_and_the_query_runner():
    """The worker's web server stops with the worker (Faust stops it after the consumer, at a clean stop):
    the router's client (pooled connections to the other workers, ``--view share``) and the runner of
    heavy answers (a thread and the answer process) are released then, not left to the interpreter's exit
    ("Unclosed client session")."""
    from concurrent.futures import ThreadPoolExecutor

    from infra.process import free_port

    settings = WorkerSettings.build(broker="embedded", app_id="unit-stop", source_topic=SOURCE, view="share",
                                    web_host="127.0.0.1", web_port=free_port())
    worker = OCMSWorker(settings, metrics_from_flags(epsilon=2, dictionary_size=1000, tracked_range="0:100"))

    async def run():
        web = worker.app.web
        await web.start_server()
        session = worker.router._client()  # as a first forwarded query creates it
        # The answer process's pool, as a first heavy answer creates it (a thread pool standing in: a unit
        # test starts no process).
        answers = worker.queries.process = ThreadPoolExecutor(max_workers=1)
        assert not session.closed
        await web.stop_server()  # what Faust's web service does when the app stops
        return session, answers

    session, answers = asyncio.run(run())
    assert session.closed
    for executor in (worker.queries.thread, answers):
        with pytest.raises(RuntimeError, match="after shutdown"):
            executor.submit(print)
