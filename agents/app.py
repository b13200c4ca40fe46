"""The Faust worker: thin wiring of topics, one table, one agent, a timer and web pages.

Flow per message: the consumer hands each source message to ``receive``
(``agents.intake``: no per-message Faust event or stream), which validates it
(``processor.MessageValidator``); a rejected one is queued for the dead-letter
topic with its original bytes and a reason header; an accepted one joins the
micro-batch (``processor.PendingBatch``). A batch is flushed when it holds
``batch_max_reports`` reports or is ``batch_max_seconds`` old, and before Faust
waits for unacked messages (a rebalance or a clean stop); ``OCMSWorker.checkpoint``
then decodes it on a decode thread (off the event loop), writes its table values,
sends its dead letters, waits for the broker's acknowledgements of both, and only
then acks and commits its messages (the order is the exactness argument; see its
docstring). A batch that fills up is checkpointed behind the intake: the consumer
goes on reading the next batch while this one decodes and waits for the broker
(``batch_full``); batches are still written, acknowledged and committed one after
another, in the order they were taken.

Deliberate workaround of faust-streaming #497 (table writes outside the
per-event context raise): a table write needs the "current event" to pick the
changelog partition (and the RocksDB partition store). We flush outside any
stream iteration, so each write runs with the current event set to a stand-in
holding that key's source topic and partition: changelog partition == source
partition, as Faust's co-partitioning expects.

Retention: a timer deletes buckets past retention from the owned partitions of
the table (tombstones: the changelog and every worker's view drop them); what
expires when is indexed from the table itself after every rebalance, so it
survives restarts and follows partitions to their new owner (``expire``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import faust

from cms_core import wire
from cms_core.errors import OCMSError

from .catalog import Catalog
from .console import add_console
from .faust_internals import PartitionContext, SourcePartition, current_event, warnings_at_start
from .intake import IntakeApp
from .metrics import EstimatesCollector, PipelineMetrics
from .discovery import WorkerDiscovery
from .processor import (AcceptedMessage, Batch, DiscoveryMessage, MessageValidator, PendingBatch, RejectedMessage,
                        RetentionIndex, batch_keys, encoded_plan)
from .query import EstimateService
from .settings import BATCH_GROWTH_UNDER_LOAD, TABLE_NAME, WorkerSettings
from .state import BucketKey, PartialCounts
from .view import ChangelogReader, CountsView
from .web import add_pages

log = logging.getLogger("ocms.worker")

REASON_HEADER = "ocms-reject-reason"
#: Tansu holds a fetch that found no data for its whole max wait (new data does not end
#: it early), so Faust's 1,500 ms wait showed up as ~1 s latency spikes (bench_worker:
#: single reports at 2,000/s, p99 1.08 s with 1,500 ms, 0.38 s with 100 ms).
EMBEDDED_FETCH_MAX_WAIT_MS = 100
#: Messages per ``take_events`` list on the "agent-take" intake path (benchmark only).
AGENT_TAKE_MESSAGES = 1000
#: Retention deletes run at least this often (seconds), and once per finest bucket width
#: when that is shorter: a bucket cannot expire more often than that.
EXPIRY_INTERVAL_S = 30.0


def _observed(task: asyncio.Future) -> asyncio.Future:
    """A chained checkpoint task whose failure its successor or a flush re-raises; marking it
    retrieved here keeps asyncio from also logging it as never retrieved (the worker crashes
    on that failure anyway: ``OCMSWorker._acknowledged``)."""
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task


def expiry_interval(levels) -> float:
    """``levels``: one sequence, or fingerprint -> levels (agents.catalog: one per metric version)."""
    finest = min(lv[0][0] for lv in levels.values()) if isinstance(levels, dict) else levels[0][0]
    return float(min(EXPIRY_INTERVAL_S, finest))


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


def faust_settings(settings: WorkerSettings) -> dict:
    """faust.App keyword settings; the embedded broker needs short sessions and one-record batches."""
    if settings.store.startswith("rocksdb://"):
        # rocksdb://PATH: Faust keeps one RocksDB per table partition under its data directory.
        store, datadir = "rocksdb://", settings.store[len("rocksdb://"):] or f"{settings.app_id}-data"
    else:
        # The memory store keeps nothing on disk: Faust is given a directory name it never
        # creates (IntakeApp.create_data_directories), so no run leaves a temp folder behind.
        store, datadir = settings.store, f"{tempfile.gettempdir()}/ocms-{settings.app_id}-unused"
    conf = dict(
        broker="kafka://" + settings.bootstrap_servers.replace(",", ";kafka://"),
        store=store,
        datadir=datadir,
        topic_partitions=settings.partitions,
        topic_allow_declare=True,
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=0,  # every worker reads the whole changelog into its view anyway
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_s / 3),
        producer_acks=-1,
        web_enabled=True,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        autodiscover=False,
    )
    if settings.embedded_broker:
        # Tansu answers end offsets wrongly when a batch holds several records; Faust would then
        # lose the changelog tail on recovery. Batches of one record (any record exceeds 1 byte).
        conf["producer_max_batch_size"] = 1
    return conf


class OCMSWorker:
    """Owns the Faust app and the worker's state; ``run()`` blocks until stopped."""

    #: How source messages reach ``receive``: "side" (the consumer hands them over,
    #: agents.intake), or through the Faust agent's stream, "agent-events" (one event at a
    #: time) or "agent-take" (``take_events`` lists). The side path is the product's; the
    #: README ("Why the intake side path") has the measurement that chose it.
    intake_path = "side"

    def __init__(self, settings: WorkerSettings):
        self.settings = settings
        self.source_topic = settings.source_topic  # read by agents.intake
        self.view = CountsView()
        # Every metric version served, by name and fingerprint (a registry, or the single-metric flags).
        self.catalog = Catalog.build(settings, self.view)
        # The name-less endpoints (/estimates ...): the flags' metric as before, or the registry's first.
        self.service = (EstimateService(settings, self.view) if self.catalog.legacy
                        else self.catalog.primary.default)
        self.view.tracked_sizes = self.catalog.tracked_sizes
        self.metrics = PipelineMetrics()
        self.metrics.guard.add("estimates", EstimatesCollector(self.catalog))  # one bad series never fails /metrics
        # Discoverable metrics' level reports: acked, read by discovery from the topic, counted by no table.
        self.discovery = WorkerDiscovery.build(self.catalog, settings)
        self.validator = MessageValidator(self.catalog.params_sets, settings.retention_seconds,
                                          settings.future_tolerance_seconds, self.catalog.retention_by_fp,
                                          discovery_sets=self.discovery.level_params)
        self.params_by_fp = self.catalog.params_by_fp
        self.tracked_by_fp = self.catalog.tracked_by_fp
        self.fp_hex = {p.fingerprint: p.fingerprint.hex() for p in self.catalog.params_sets}
        self.levels = self.catalog.levels_by_fp
        self.reader = ChangelogReader(self.view, settings.bootstrap_servers, settings.changelog_topic)
        self.pending = PendingBatch(settings.batch_max_reports)
        self._shuffle_warned = False  # an invalid ocms-shuffle-n header is logged once
        self._lock = asyncio.Lock()  # one checkpoint's writes or retention pass at a time
        #: The newest batch's wait for the broker and its acks (steps 3-4 of ``checkpoint``): each
        #: waits for the previous batch's, so batches are acked in the order they were written.
        self._acking: asyncio.Future | None = None
        #: Commits of acked offsets, one at a time; acks made while one runs are committed by the next.
        self._committer: asyncio.Future | None = None
        self._commit_wanted = False
        #: The checkpoint of a full batch running behind the intake (``batch_full``).
        self._behind: asyncio.Future | None = None
        #: Decodes micro-batches off the event loop (O(reports x D): seconds at D = 100,000, which
        #: on the loop stalled /healthz, the view and heartbeats). One thread, and the checkpoint
        #: awaits it under the lock, so batches are decoded and written in order.
        self.decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ocms-decode")
        self._agent_started = False
        self._next_offset: dict[int, int] = {}
        self._contexts: dict[int, PartitionContext] = {}
        #: Bucket keys by expiry, rebuilt from the table whenever ownership may have changed.
        self.retention = RetentionIndex(self.levels)
        self._retention_basis: tuple | None = None  # (rebalance count, owned partitions) indexed
        self.app = self._build_app()

    # ------------------------------------------------------------- wiring
    def _build_app(self) -> faust.App:
        s = self.settings
        app = IntakeApp(s.app_id, **faust_settings(s))
        app.create_data_directories = s.store.startswith("rocksdb://")
        app.intake = self if self.intake_path == "side" else None
        if s.embedded_broker:
            app.fetch_max_wait_ms = EMBEDDED_FETCH_MAX_WAIT_MS
        raw = dict(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
        self.source = app.topic(s.source_topic, partitions=s.partitions, **raw)
        self.dead_letters = app.topic(s.dead_letter_topic, partitions=s.partitions, **raw)
        # key_type/value_type bytes make the table's own (recovery) serializers raw as well.
        self.table = app.tables.add(CountsTable(app, name=TABLE_NAME, beacon=app.tables.beacon, partitions=s.partitions,
                                                key_type=bytes, value_type=bytes, schema=faust.Schema(**raw)))

        @app.agent(self.source, name="ocms-aggregate")
        async def aggregate(stream):
            # The agent subscribes the source topic (assignment, co-partitioning with the
            # table); on the side path its messages reach receive() from the consumer
            # (agents.intake) and this stream stays empty. The agent paths are kept for
            # benchmarks/bench_agent_path.py; either way a message takes receive() and the
            # checkpoint, so what is counted is the same.
            self._agent_started = True
            if self.intake_path == "agent-take":
                async for events in stream.noack().take_events(AGENT_TAKE_MESSAGES, within=s.batch_max_seconds):
                    for event in events:
                        if self.receive(event.message):
                            await self.flush()
                    await self.flush()
            else:
                async for event in stream.noack().events():
                    if self.receive(event.message):
                        await self.flush()

        @app.timer(interval=max(0.02, s.batch_max_seconds / 4))
        async def flush_old_batch():
            if self.pending.age(time.monotonic()) >= s.batch_max_seconds:
                await self.flush()

        @app.timer(interval=expiry_interval(self.levels))
        async def expire_buckets():
            async with self._lock:
                await self.expire(time.time())

        @app.task
        async def read_changelog():
            await self.reader.run()

        add_pages(app, self)
        self.discovery.install(app, self.metrics)  # /discovered?metric=NAME (agents/discovery.py)
        add_console(app, self.settings.truth_file)  # the live console at / (agents/console)
        return app

    # --------------------------------------------------------- per message
    def receive(self, message) -> bool:
        """Validate one source message into the micro-batch; True when the batch is full."""
        try:
            params, batch = self.validator.check(message.value, message.timestamp, time.time())
        except RejectedMessage as rejection:
            outcome = rejection
        else:
            if self.validator.is_discovery(params):  # read by discovery from the topic, counted by no table
                outcome = DiscoveryMessage(message.partition, message.offset, params.fingerprint, len(batch))
            else:
                outcome = AcceptedMessage(message.partition, message.offset, message.timestamp,
                                          self.fp_hex[params.fingerprint], batch, self._shuffle_n(message, len(batch)))
        superseded = self.pending.add(message, outcome, time.monotonic())
        if superseded:
            self._untrack(superseded)
            self.metrics.redelivered.inc(len(superseded))
            log.warning("partition %d went back to offset %d: %d pending messages are counted once, "
                        "from their new delivery", message.partition, message.offset, len(superseded))
        return self.pending.full

    def _shuffle_n(self, message, reports: int) -> int:
        """The shuffled batch a frame's reports came in (``ocms-shuffle-n``), 0 when not shuffled. A header
        that is not a batch size of at least the frame's reports is counted and taken as not shuffled: the
        reports still count, only the claim about them is the weaker (local) one."""
        size = wire.shuffled_batch_size(getattr(message, "headers", None), reports)
        if size is None:
            self.metrics.shuffle_header_invalid.inc()
            if not self._shuffle_warned:
                self._shuffle_warned = True
                log.warning("partition %d offset %d: an %s header that is not a batch size of at least the frame's %d "
                            "reports; its reports count as not shuffled (ocms_shuffle_header_invalid_total)",
                            message.partition, message.offset, wire.SHUFFLE_HEADER, reports)
            return 0
        return size

    def _drop_unowned(self) -> None:
        owned = self._owned_partitions()
        if owned is None:  # consumer not started: nothing can be pending
            return
        dropped = self.pending.keep_partitions(owned)
        if dropped:
            self._untrack(dropped)
            log.warning("dropped %d pending messages of partitions no longer assigned: %s", len(dropped),
                        sorted({m.partition for m in dropped}))

    def _untrack(self, messages: list) -> None:
        for message in messages:
            self.app.consumer.untrack(message)  # never acked, so the committed offset stays below it

    # ------------------------------------------------------------- batches
    def _read(self, key: BucketKey) -> PartialCounts | None:
        raw = self.table.get(key.encode())
        return None if raw is None else PartialCounts.from_bytes(raw)

    async def flush(self) -> None:
        """Checkpoint the pending micro-batch, if any, and wait until every batch taken so far
        is acked and committed (the batch timer, a rebalance and a clean stop call this)."""
        await self._checkpoint_pending()
        await self._committed()

    async def _checkpoint_pending(self) -> None:
        """Take the pending batch under the lock (so batches are written in take order) and
        write it; its acks and commit follow behind."""
        async with self._lock:
            self._drop_unowned()
            if self.pending:
                await self.checkpoint(self.pending.take(), behind=True)

    async def batch_full(self) -> None:
        """The intake's call when ``receive`` says the micro-batch is full: checkpoint it behind
        the intake, which goes on reading and validating meanwhile (the decode thread and the
        broker's acknowledgements overlap the next batch's intake).

        Group commit: while that checkpoint runs, the next batch may grow to
        ``BATCH_GROWTH_UNDER_LOAD`` x ``batch_max_reports`` before the intake waits, and is
        checkpointed as soon as the running one is done. A checkpoint costs a changelog record
        per touched key (on the embedded broker one request each) whatever its size, so under
        load batches grow until that cost is shared by enough reports. Memory: at most the
        batch being checkpointed, the one being acknowledged and the growing one."""
        while True:
            behind = self._behind
            if behind is None or behind.done():
                self._behind = None
                if behind is not None:
                    behind.result()  # a failed checkpoint (the broker refused a write) stops the intake here
                if self.pending.full:
                    self._start_behind()
                    # Let it take the batch now (the lock is free: the previous writes are done), so the
                    # intake's next message starts the next batch instead of growing this one.
                    await asyncio.sleep(0)
                return
            if self.pending.reports < BATCH_GROWTH_UNDER_LOAD * self.pending.max_reports:
                return  # the running checkpoint takes this batch when it is done
            await asyncio.shield(behind)

    def _start_behind(self) -> None:
        self._behind = _observed(asyncio.ensure_future(self._flush_behind()))

    async def _flush_behind(self) -> None:
        await self._checkpoint_pending()
        if self.pending.full and self._behind is asyncio.current_task():
            self._start_behind()  # filled meanwhile: checkpoint it now (the intake may have gone quiet)

    async def _committed(self) -> None:
        """Wait until every batch written so far is acked and its offsets committed."""
        while self._acking is not None:
            acking = self._acking
            await asyncio.shield(acking)
            if self._acking is acking:
                self._acking = None
        while self._committer is not None and not self._committer.done():
            await asyncio.shield(self._committer)

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

    async def checkpoint(self, batch: Batch, *, behind: bool = False) -> None:
        """Make one micro-batch durable, then let the consumer move past it.

        The order of the four steps is the exactness argument (with :mod:`agents.state`):

        1. Write each touched key's new value: its counts together with the highest source
           offset they include. A replay of any of the batch's messages later skips exactly
           the events a key's value already holds, key by key.
        2. Send the batch's rejected messages to the dead-letter topic.
        3. Wait until the broker has acknowledged every changelog record of step 1 and every
           dead letter of step 2 (``acks=all``). Should a send fail, nothing of the batch is
           acked: the worker crashes and the batch is replayed (exactly, by step 1's offsets).
        4. Ack the batch's messages and commit. The consumer commits acked offsets only, so
           the committed offset never passes a message whose counts and dead letter are not
           on the broker: a SIGKILL anywhere replays from an offset whose effects are either
           in the changelog (skipped by offset) or not (counted once).

        Before step 1 the batch is decoded on the decode thread (``encoded_plan``: the
        O(reports x D) work), so the loop keeps answering /healthz, feeding the view and
        heartbeating meanwhile. Nothing of the batch is written or acked before the decode
        returns, and the lock (with one decode thread) keeps batches in order, so the steps
        and the argument are unchanged; a SIGKILL during the decode replays the whole batch.
        A rebalance or clean stop waits for it too: Faust waits for the batch's unacked
        messages, and its flush for the lock.

        During a rebalance the commit is left to Faust (it commits acked offsets of the
        partitions it keeps; a revoked partition's new owner replays, exactly).

        With ``behind`` (a full batch, or a flush that waits for the chain itself), steps 3-4
        run after this call returns, chained behind the previous batch's steps 3-4, while the
        next batch may already decode and write (steps 0-2 stay one batch at a time, under the
        worker's lock, in the order the batches were taken). The argument still holds for each
        key: a later batch reads the values this one wrote, its records reach the changelog
        after this one's, and its messages are acked only after this batch's are and its own
        records are acknowledged; if a send fails, no later batch is acked either. The call
        returns once the previous batch is acked, so at most one batch waits for the broker
        behind the one being written. The commit of step 4 runs beside the next batches (one
        at a time; batches acked meanwhile share the next): it only moves the offset a restart
        replays from, and it still never passes an unacked message.
        """
        # 0. decode: read the touched keys here (the table belongs to the loop), then decode, fold
        # and encode on the decode thread while the loop keeps serving. Nothing is written or
        # acked before it returns, so the order below is unchanged.
        states = {key: self._read(key) for key in batch_keys(batch.accepted, self.levels)}
        plan, values = await asyncio.get_running_loop().run_in_executor(
            self.decoder, encoded_plan, batch.accepted, states, self.params_by_fp, self.tracked_by_fp, self.levels)
        for (key, _), value in zip(plan.writes, values):  # 1. table values
            with current_event(self._context(key.partition)):
                self.table[key.encode()] = value
            self.retention.add(key)
        acknowledgements = self.table.take_unacknowledged()
        for message, rejection in batch.dead:  # 2. dead letters
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

    async def _ack(self, batch: Batch, plan, acknowledgements: list, previous: asyncio.Future | None,
                   newest: float | None) -> None:
        """Steps 3-4 of ``checkpoint`` for one batch, after the previous batch's steps 3-4
        (``newest``: the batch's newest accepted timestamp, None when it accepted nothing)."""
        if previous is not None:
            await asyncio.shield(previous)  # raises if that batch failed: then nothing of this one is acked
        await self._acknowledged(acknowledgements)  # 3. on the broker
        ack = self.app.consumer.ack  # 4. ack, and commit soon
        for message in batch.messages:
            ack(message)
        self._request_commit()
        self._next_offset.update({p: offset + 1 for p, offset in batch.last_offsets().items()})
        for message, rejection in batch.dead:
            self.metrics.rejected.labels(rejection.reason).inc()
            log.info("rejected %s/%d/%d: %s", message.topic, message.partition, message.offset, rejection)
        self.discovery.count(batch.discovery)
        for fp, n in plan.counted.items():
            self.metrics.accepted.labels(*self.catalog.labels_of(fp)).inc(n)
        self.metrics.replayed.inc(plan.replayed)
        if newest is not None:
            self.metrics.batch_reports.observe(plan.reports)
            self.metrics.decode_seconds.observe(plan.decode_seconds)
            self.metrics.last_processed.set(newest)

    async def _acknowledged(self, futures: list) -> None:
        """Wait for the broker's acknowledgement of every future; a failed send crashes the
        worker (what it wrote is not acked, so it is replayed after the restart)."""
        if not futures:
            return
        try:
            await asyncio.gather(*futures)
        except Exception as exc:
            log.error("the broker did not acknowledge a changelog record or dead letter: %s", exc)
            await self.app.crash(exc)
            raise

    def _context(self, partition: int) -> PartitionContext:
        context = self._contexts.get(partition)
        if context is None:
            context = self._contexts[partition] = PartitionContext(SourcePartition(self.source_topic, partition))
        return context

    async def expire(self, now: float) -> int:
        """Delete the buckets of owned partitions that are past retention (tombstones in the
        changelog, so every worker's view drops them too); returns how many.

        The index of what expires when is rebuilt from the table (which survives restarts and
        moves with its partitions) after every rebalance, so buckets written before a restart
        or by a partition's previous owner are deleted as well. Nothing happens during a
        rebalance: a table partition being recovered is not complete yet. Queries ignore
        expired buckets anyway, so a late delete never changes an answer; a replayed message
        of a deleted bucket is itself past retention and rejected, so none is counted again.
        """
        owned = self._owned_partitions()
        if owned is None or self.app.rebalancing:
            return 0
        basis = (self.app.rebalancing_count, frozenset(owned))
        if basis != self._retention_basis:
            self.retention.reset(self._table_keys(owned))
            self._retention_basis = basis
        deleted = 0
        for key in self.retention.due(now):
            if key.partition in owned:
                with current_event(self._context(key.partition)):
                    self.table.pop(key.encode(), None)
                deleted += 1
        await self._acknowledged(self.table.take_unacknowledged())
        if deleted:
            log.debug("retention deleted %d buckets", deleted)
        return deleted

    def _table_keys(self, owned: set[int]) -> list[BucketKey]:
        """The bucket keys the table holds for the ``owned`` partitions."""
        keys = []
        for raw in list(self.table.keys()):
            try:
                key = BucketKey.decode(raw)
            except OCMSError as exc:
                log.warning("table key %r is not a bucket key; retention skips it: %s", raw, exc)
                continue
            if key.partition in owned:
                keys.append(key)
        return keys

    # ------------------------------------------------------------- status
    def _owned_partitions(self) -> set[int] | None:
        """Source partitions assigned to this worker; None before the consumer has started."""
        try:
            assignment = self.app.consumer.assignment()
        except Exception:  # consumer not started yet
            return None
        return {tp.partition for tp in assignment if tp.topic == self.source_topic}

    def assigned_partitions(self) -> list[int]:
        return sorted(self._owned_partitions() or ())

    def update_lag_metrics(self) -> None:
        assigned = self.assigned_partitions()
        self.metrics.assigned.set(len(assigned))
        self.metrics.view_lag.set(self.reader.lag)
        for partition in assigned:
            try:
                highwater = self.app.consumer.highwater(self.source_tp(partition))
            except Exception:
                continue
            if highwater is not None:
                self.metrics.lag.labels(str(partition)).set(max(0, highwater - self._next_offset.get(partition, 0)))

    def source_tp(self, partition: int):
        from faust.types import TP

        return TP(self.settings.source_topic, partition)

    def health(self) -> dict:
        ready = self.reader.caught_up.is_set() and self._agent_started
        return {
            "status": "ok" if ready else "starting",
            "view_caught_up": self.reader.caught_up.is_set(),
            "view_keys": self.view.keys(),
            "view_lag_messages": self.reader.lag,
            "assigned_partitions": self.assigned_partitions(),
            "pending_reports": self.pending.reports,
        }

    def run(self) -> int:
        from faust.worker import Worker

        for problem in warnings_at_start():
            log.warning("Faust internals: %s", problem)

        worker = Worker(self.app, loglevel=self.settings.log_level.upper(), quiet=True)
        if not worker.stdout.isatty():
            worker.spinner = None  # its cursor escape codes belong on a terminal, not in a log
        worker.execute_from_commandline()
        return 0


async def prepare_topics(settings: WorkerSettings) -> None:
    """Create the source, dead-letter and changelog topics with the configured partitions."""
    from producer.broker import create_topics

    await create_topics(
        settings.bootstrap_servers,
        {settings.source_topic: settings.partitions, settings.dead_letter_topic: settings.partitions,
         settings.changelog_topic: settings.partitions},
        configs={settings.changelog_topic: {"cleanup.policy": "compact"}},
    )
