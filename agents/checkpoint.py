"""The worker's checkpoint: how a micro-batch becomes durable before the consumer moves past it.

The order of the steps is the exactness argument (with :mod:`agents.state`, which explains
why an offset stored beside its counts makes a replay exact):

0. Decode. Read the batch's touched keys from the table (on the event loop, which owns the
   table), then decode, fold and encode on the decode thread (``encoded_plan``: the
   O(reports x D) work) while the loop keeps answering /healthz, feeding the view and
   heartbeating. Nothing of the batch is written or acked before the decode returns.
1. Write tables. Each touched table key's new value (a bundle of member states,
   :mod:`agents.state`): every member's counts together with the highest source offset they
   include. A replay of any of the batch's messages later skips exactly the events a member
   key's state already holds, key by key.
2. Send dead letters: the batch's rejected messages, with a reason header.
3. Wait for the broker: until it has acknowledged every changelog record of step 1 and every
   dead letter of step 2 (``acks=all``). Should a send fail, nothing of the batch is acked:
   the worker crashes and the batch is replayed (exactly, by step 1's offsets).
4. Ack and commit, in order. The consumer commits acked offsets only, so the committed
   offset never passes a message whose counts and dead letter are not on the broker: a
   SIGKILL anywhere replays from an offset whose effects are either in the changelog
   (skipped by offset) or not (counted once).

Steps 0-2 run one batch at a time under ``Checkpoint.lock`` (with one decode thread), in the
order the batches were taken. Group commit: a full batch is checkpointed *behind* the intake
(``batch_full``), so the consumer goes on reading the next batch while this one decodes and
waits for the broker; its steps 3-4 are chained behind the previous batch's steps 3-4. The
argument still holds for each key: a later batch reads the values this one wrote, its
records reach the changelog after this one's, and its messages are acked only after this
batch's are and its own records are acknowledged; if a send fails, no later batch is acked
either. The commit of step 4 runs beside the next batches (one at a time; batches acked
meanwhile share the next): it only moves the offset a restart replays from, and it still
never passes an unacked message. During a rebalance the commit is left to Faust (it commits
acked offsets of the partitions it keeps; a revoked partition's new owner replays, exactly).
A rebalance or clean stop waits for the running checkpoint: Faust waits for the batch's
unacked messages, and ``flush`` for the lock.

Deliberate workaround of faust-streaming #497 (table writes outside the per-event context
raise): a table write needs the "current event" to pick the changelog partition (and the
RocksDB partition store). Writes happen outside any stream iteration, so each runs with the
current event set to a stand-in holding that key's source topic and partition (``TableWriter``):
changelog partition == source partition, as Faust's co-partitioning expects.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import faust

from .faust_internals import PartitionContext, SourcePartition, current_event
from .processor import Batch, BatchPlan, PendingBatch, encoded_plan, table_keys
from .settings import BATCH_GROWTH_FOR_LARGE_STATE, BATCH_GROWTH_UNDER_LOAD, BATCH_REPORTS_PER_STATE_BYTE
from .state import StateKey, StateLayout, member_offsets, newest_bundle

log = logging.getLogger("ocms.worker")

REASON_HEADER = "ocms-reject-reason"


def _observed(task: asyncio.Future) -> asyncio.Future:
    """A chained checkpoint task whose failure its successor or a flush re-raises; marking it
    retrieved here keeps asyncio from also logging it as never retrieved (the worker crashes
    on that failure anyway: ``acknowledged``)."""
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task


class CountsTable(faust.Table):
    """The counts table, keeping the futures of the changelog records it sends so a
    checkpoint can wait until the broker has acknowledged them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.unacknowledged: list[asyncio.Future] = []

    def send_changelog(self, *args, **kwargs):
        future = super().send_changelog(*args, **kwargs)
        self.unacknowledged.append(future)
        return future

    def take_unacknowledged(self) -> list[asyncio.Future]:
        futures, self.unacknowledged = self.unacknowledged, []
        return futures

    def persisted_offset(self, tp) -> None:
        """Where recovery starts reading a changelog partition: always at its beginning (None).

        A RocksDB store remembers the changelog offset of the last record it wrote or read, and Faust's
        recovery reads on from there, taking the store as the log's prefix. It is not, once a worker stalled
        past its session wrote after the partition's new owner: its offset is then past the new owner's
        records, which it never read, and on getting the partition back it resumed from the new owner's
        committed offset with its own older states, skipping every message between them (the fault
        schedules' autopsy: a quarter of a partition's reports lost). Read from the beginning, with each
        member's newest state kept (``apply_changelog_batch``), recovery holds every state ever written.
        The cost: a restart reads each assigned partition's compacted changelog whole, as the view does."""
        return None

    def apply_changelog_batch(self, batch) -> None:
        """Recovery from the changelog: each key takes, member by member, the newer state of what it holds
        and what the record says (``agents.state.newest_bundle``), not simply the later record. A worker
        that stalled past its session and checkpointed after the partition's new owner wrote older states
        last; taken as they came, a new owner recovered them and lost what they lacked (issue 35, 5)."""
        held: dict = {}
        for event in batch:
            message = event.message
            key, value = message.key, message.value
            if value is not None:
                previous = held[key] if key in held else self._stored(key)
                if previous is not None:
                    newest = newest_bundle(previous, value)
                    if newest is not value:
                        message.value = event.value = newest
                        value = newest
            held[key] = value
        super().apply_changelog_batch(batch)

    def _stored(self, key: bytes) -> bytes | None:
        try:
            return self.data[key]
        except KeyError:
            return None


class TableWriter:
    """Writes and deletes table keys outside a stream, each under a stand-in current event of
    its key's source partition (faust-streaming #497: the table picks the changelog partition
    from it)."""

    def __init__(self, table: CountsTable, source_topic: str):
        self.table = table
        self.source_topic = source_topic
        self._contexts: dict[int, PartitionContext] = {}

    def _context(self, partition: int) -> PartitionContext:
        context = self._contexts.get(partition)
        if context is None:
            context = self._contexts[partition] = PartitionContext(SourcePartition(self.source_topic, partition))
        return context

    def read(self, key: StateKey) -> bytes | None:
        return self.table.get(key.encode())

    def write(self, key: StateKey, value: bytes) -> None:
        with current_event(self._context(key.partition)):
            self.table[key.encode()] = value

    def delete(self, key: StateKey) -> None:
        with current_event(self._context(key.partition)):
            self.table.pop(key.encode(), None)

    def take_unacknowledged(self) -> list[asyncio.Future]:
        return self.table.take_unacknowledged()


async def acknowledged(app: faust.App, futures: list) -> None:
    """Wait for the broker's acknowledgement of every future; a failed send crashes the
    worker (what it wrote is not acked, so it is replayed after the restart)."""
    if not futures:
        return
    try:
        await asyncio.gather(*futures)
    except Exception as exc:
        log.error("the broker did not acknowledge a changelog record or dead letter: %s", exc)
        await app.crash(exc)
        raise


@dataclasses.dataclass(frozen=True)
class FoldInputs:
    """What step 0 folds a batch with: per fingerprint its parameters, tracked values and time
    levels, and where its states are stored."""

    params_by_fp: dict
    tracked_by_fp: dict
    levels: dict
    layout: StateLayout


@dataclasses.dataclass(eq=False)
class Checkpoint:
    """The checkpoint chain of one worker (the module docstring has the argument).

    ``on_written(key)`` is called for every table key step 1 writes (the retention index);
    ``on_acked(batch, plan, newest)`` after step 4 (metrics; ``newest`` is the batch's newest
    accepted timestamp, None when it accepted nothing); ``drop_unowned()`` before a batch is
    taken (pending messages of partitions a rebalance took are dropped, not written)."""

    app: faust.App
    writer: TableWriter
    dead_letters: object
    pending: PendingBatch
    fold: FoldInputs
    _: dataclasses.KW_ONLY
    on_written: Callable[[StateKey], None]
    on_acked: Callable[[Batch, BatchPlan, float | None], None]
    drop_unowned: Callable[[], None]
    #: One checkpoint's steps 0-2 or one retention pass at a time.
    lock: asyncio.Lock = dataclasses.field(init=False, default_factory=asyncio.Lock)
    #: Decodes micro-batches off the event loop (O(reports x D): seconds at D = 100,000, which
    #: on the loop stalled /healthz, the view and heartbeats). One thread, and step 0 awaits it
    #: under the lock, so batches are decoded and written in order.
    decoder: ThreadPoolExecutor = dataclasses.field(init=False, default_factory=functools.partial(
        ThreadPoolExecutor, max_workers=1, thread_name_prefix="ocms-decode"))
    #: The newest batch's steps 3-4: each waits for the previous batch's, so batches are acked
    #: in the order they were written.
    _acking: asyncio.Future | None = dataclasses.field(init=False, default=None)
    #: Commits of acked offsets, one at a time; acks made while one runs are committed by the next.
    _committer: asyncio.Future | None = dataclasses.field(init=False, default=None)
    _commit_wanted: bool = dataclasses.field(init=False, default=False)
    #: The checkpoint of a full batch running behind the intake (``batch_full``).
    _behind: asyncio.Future | None = dataclasses.field(init=False, default=None)
    #: Bytes of table values the latest checkpoint wrote (``growth_limit``).
    _rewritten_bytes: int = dataclasses.field(init=False, default=0)

    # ------------------------------------------------------------ entry points
    async def flush(self) -> None:
        """Checkpoint the pending micro-batch, if any, and wait until every batch taken so far
        is acked and committed (the batch timer, a rebalance and a clean stop call this)."""
        await self._checkpoint_pending()
        await self._committed()

    async def batch_full(self) -> None:
        """The intake's call when the micro-batch is full: checkpoint it behind the intake,
        which goes on reading and validating meanwhile (the decode thread and the broker's
        acknowledgements overlap the next batch's intake).

        Group commit: while that checkpoint runs, the next batch may grow to ``growth_limit()``
        reports before the intake waits, and is checkpointed as soon as the running one is done
        and the batches before it are acknowledged (``ready``). A checkpoint has a cost per record
        and per byte of state it writes whatever the batch's size, so under load batches grow until
        that cost is shared by enough reports.
        Memory: at most the batch being checkpointed, the one being acknowledged and the
        growing one."""
        while True:
            behind = self._behind
            if behind is None or behind.done():
                self._behind = None
                if behind is not None:
                    behind.result()  # a failed checkpoint (the broker refused a write) stops the intake here
                if self.ready():
                    self._start_behind()
                    # Let it take the batch now (the lock is free: the previous writes are done), so the
                    # intake's next message starts the next batch instead of growing this one.
                    await asyncio.sleep(0)
                return
            if self.pending.reports < self.growth_limit():
                return  # the running checkpoint takes this batch when it is done
            await asyncio.shield(behind)

    async def write(self, batch: Batch, *, behind: bool = False) -> None:
        """Steps 0-2 for one batch, then steps 3-4 chained behind the previous batch's.

        Without ``behind`` the call returns once the batch is acked and committed. With it (a
        full batch, or a flush that waits for the chain itself) it returns once the previous
        batch is acked, so at most one batch waits for the broker behind the one being written.
        """
        # 0. decode: read the touched table keys here (the table belongs to the loop), then decode,
        # fold and encode on the decode thread while the loop keeps serving.
        fold = self.fold
        stored = {key: self.writer.read(key) for key in table_keys(batch.accepted, fold.layout, fold.levels)}
        plan, writes = await asyncio.get_running_loop().run_in_executor(
            self.decoder, encoded_plan, batch.accepted, stored, fold.layout, fold.params_by_fp, fold.tracked_by_fp,
            fold.levels)
        rewritten = 0
        for key, value in writes:  # 1. write tables
            self.writer.write(key, value)
            self.on_written(key)
            rewritten += len(value)
        self._rewritten_bytes = rewritten
        acknowledgements = self.writer.take_unacknowledged()
        for message, rejection in batch.dead:  # 2. send dead letters
            headers = [
                (REASON_HEADER, rejection.reason.encode()),
                ("ocms-reject-detail", rejection.detail.encode()[:500]),
                ("ocms-source", f"{message.topic}/{message.partition}/{message.offset}".encode()),
            ]
            acknowledgements.append(await self.dead_letters.send(key=message.key, value=message.value, headers=headers))
        # What steps 3-4 need: the messages to ack, not their decoded reports (freed here, so a
        # batch waiting for the broker holds its raw messages only).
        newest = max((m.timestamp for m in batch.accepted), default=None)
        batch = dataclasses.replace(batch, accepted=[])
        previous = self._acking
        acking = self._acking = _observed(asyncio.ensure_future(
            self._ack(batch, plan, acknowledgements, previous, newest)))
        if previous is not None:
            await asyncio.shield(previous)
        if not behind:
            await acking
            await self._committed()

    # ------------------------------------------------------------ steps 3-4
    async def _ack(self, batch: Batch, plan: BatchPlan, acknowledgements: list, previous: asyncio.Future | None,
                   newest: float | None) -> None:
        """Steps 3-4 for one batch, after the previous batch's steps 3-4."""
        if previous is not None:
            await asyncio.shield(previous)  # raises if that batch failed: then nothing of this one is acked
        await acknowledged(self.app, acknowledgements)  # 3. wait for the broker
        ack = self.app.consumer.ack  # 4. ack, and commit soon
        for message in batch.messages:
            ack(message)
        self._request_commit()
        self.on_acked(batch, plan, newest)

    def _request_commit(self) -> None:
        """Commit the acked offsets soon: now if no commit runs, else right after the one that does
        (a commit takes tens of ms on the broker; batches acked meanwhile share the next one)."""
        self._commit_wanted = True
        if self._committer is None or self._committer.done():
            self._committer = asyncio.ensure_future(self._commit_acked())

    async def _commit_acked(self) -> None:
        while self._commit_wanted:
            self._commit_wanted = False
            if not self.app.rebalancing:  # during a rebalance Faust commits what it keeps
                await self.app.consumer.commit()

    async def _committed(self) -> None:
        """Wait until every batch written so far is acked and its offsets committed."""
        while self._acking is not None:
            acking = self._acking
            await asyncio.shield(acking)
            if self._acking is acking:
                self._acking = None
        while self._committer is not None and not self._committer.done():
            await asyncio.shield(self._committer)

    # ------------------------------------------------------------ taking batches
    def ready(self) -> bool:
        """Whether the pending batch should be checkpointed now rather than grow: it is full, and
        the batches before it are acknowledged or it has grown to ``growth_limit()``.

        Why wait for the acknowledgements: a checkpoint rewrites every table key its batch touches
        whatever the batch's size, and with hundreds of metrics that is every group's bundles (128
        records, 9 MB at 1,000 metrics). Taken as soon as it was full, every other batch was the
        200,000 reports that arrived while the previous one was acknowledged, at that whole cost."""
        pending = self.pending
        if not pending.full:
            return False
        acked = self._acking is None or self._acking.done()
        return acked or pending.reports >= self.growth_limit()

    def growth_limit(self) -> int:
        """Reports a batch may grow to while the checkpoints before it run: ``BATCH_GROWTH_UNDER_LOAD``
        x ``batch_max_reports``, or ``BATCH_REPORTS_PER_STATE_BYTE`` reports per byte of table values
        the latest checkpoint rewrote, up to ``BATCH_GROWTH_FOR_LARGE_STATE`` x.

        Why: a checkpoint has a cost per byte of state it rewrites (its bundles are written, sent,
        stored by the broker and read back by every view) whatever the batch's size. With a few
        metrics that is kilobytes; with hundreds every group's bundles are rewritten, 4 MB at 300
        metrics, and at 8 x 200,000 reports a checkpoint that was 2.5 bytes of state per report
        (bench_registry_worker, issue 30). Only under load, and only for such workers: a batch
        is still checkpointed as soon as it is full when nothing is waiting for the broker."""
        base = self.pending.max_reports
        by_state = BATCH_REPORTS_PER_STATE_BYTE * self._rewritten_bytes
        return min(max(BATCH_GROWTH_UNDER_LOAD * base, by_state), BATCH_GROWTH_FOR_LARGE_STATE * base)

    async def rewrite(self, key: StateKey, owned: Callable[[], set[int] | None], held: Callable[[], dict[str, int]]) -> bool:
        """Write a table key's value again, unchanged, when a stale record of it was the changelog's latest
        (``agents.view.CountsView.on_stale``): so the log's last record of the key is the newest, and a
        compaction keeps that one. Only by the key's partition's owner, and only when its value holds every
        member the view holds (``held()``: fingerprint -> highest offset) at least as new; else the owner is
        behind a worker that wrote newer states and overwrites them as it passes them."""
        async with self.lock:
            partitions = owned()
            raw = self.writer.read(key)
            if partitions is None or key.partition not in partitions or raw is None:
                return False
            try:
                mine = member_offsets(raw)
            except Exception:  # noqa: BLE001 - not ours to repair
                return False
            if any(mine.get(fp, -2) < offset for fp, offset in held().items()):
                return False
            self.writer.write(key, raw)
            futures = self.writer.take_unacknowledged()
        await acknowledged(self.app, futures)
        return True

    async def _checkpoint_pending(self) -> None:
        """Take the pending batch under the lock (so batches are written in take order) and
        write it; its acks and commit follow behind."""
        async with self.lock:
            self.drop_unowned()
            if self.pending:
                await self.write(self.pending.take(), behind=True)

    def _start_behind(self) -> None:
        self._behind = _observed(asyncio.ensure_future(self._flush_behind()))

    async def _flush_behind(self) -> None:
        await self._checkpoint_pending()
        if self.ready() and self._behind is asyncio.current_task():
            self._start_behind()  # filled meanwhile: checkpoint it now (the intake may have gone quiet)
