"""The Faust worker: thin wiring of topics, one table, one agent, a timer and web pages.

Flow per message: the consumer hands each source message to ``receive``
(``agents.intake``: no per-message Faust event or stream), which validates it
(``processor.MessageValidator``); a rejected one is queued for the dead-letter
topic with its original bytes and a reason header; an accepted one joins the
micro-batch. A batch is flushed when it holds ``batch_max_reports`` reports or
is ``batch_max_seconds`` old, and before Faust waits for unacked messages (a
rebalance or a clean stop): the kernel decodes it into per-key counts
(``processor.plan_batch``), each touched key is written once (counts + highest
offset in one value), dead letters are sent, and only then are the batch's
messages acked, so the committed consumer offset never passes a message whose
counts are not in the changelog (Faust flushes the producer before every commit).

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
import contextlib
import logging
import tempfile
import time
import weakref

import faust
from faust.streams import _current_event

from cms_core.errors import OCMSError

from .console import add_console
from .intake import IntakeApp
from .metrics import EstimatesCollector, PipelineMetrics
from .processor import AcceptedMessage, MessageValidator, RejectedMessage, RetentionIndex, plan_batch
from .query import EstimateService
from .settings import TABLE_NAME, WorkerSettings
from .state import BucketKey, PartialCounts
from .view import ChangelogReader, CountsView
from .web import add_pages

log = logging.getLogger("ocms.worker")

REASON_HEADER = "ocms-reject-reason"
#: Tansu holds a fetch that found no data for its whole max wait (new data does not end
#: it early), so Faust's 1,500 ms wait showed up as ~1 s latency spikes (bench_worker:
#: single reports at 2,000/s, p99 1.08 s with 1,500 ms, 0.38 s with 100 ms).
EMBEDDED_FETCH_MAX_WAIT_MS = 100
#: Retention deletes run at least this often (seconds), and once per finest bucket width
#: when that is shorter: a bucket cannot expire more often than that.
EXPIRY_INTERVAL_S = 30.0


def expiry_interval(levels) -> float:
    return float(min(EXPIRY_INTERVAL_S, levels[0][0]))


class SourcePartition:
    """The part of a source message a table write reads: its topic and partition."""

    __slots__ = ("topic", "partition")

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition


class PartitionContext:
    """Stands in for Faust's current event during a table write: the table reads
    ``event.message`` (topic and partition) to pick the changelog partition."""

    __slots__ = ("message", "__weakref__")

    def __init__(self, message):
        self.message = message


@contextlib.contextmanager
def current_event(event):
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


def faust_settings(settings: WorkerSettings) -> dict:
    """faust.App keyword settings; the embedded broker needs short sessions and one-record batches."""
    if settings.store.startswith("rocksdb://"):
        # rocksdb://PATH: Faust keeps one RocksDB per table partition under its data directory.
        store, datadir = "rocksdb://", settings.store[len("rocksdb://"):] or f"{settings.app_id}-data"
    else:
        # The memory store keeps nothing on disk; Faust still wants a data directory of its own.
        store, datadir = settings.store, tempfile.mkdtemp(prefix=f"ocms-{settings.app_id}-")
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

    def __init__(self, settings: WorkerSettings):
        self.settings = settings
        self.source_topic = settings.source_topic  # read by agents.intake
        self.view = CountsView()
        self.service = EstimateService(settings, self.view)
        self.view.tracked_sizes = {fp: len(t) for fp, t in self.service.tracked.items()}
        self.metrics = PipelineMetrics()
        self.metrics.registry.register(EstimatesCollector(self.service))
        self.validator = MessageValidator(settings.params_sets, settings.retention_seconds,
                                          settings.future_tolerance_seconds)
        self.params_by_fp = self.service.params
        self.tracked_by_fp = self.service.tracked
        self.fp_hex = {p.fingerprint: p.fingerprint.hex() for p in settings.params_sets}
        self.levels = settings.levels()
        self.reader = ChangelogReader(self.view, settings.bootstrap_servers, settings.changelog_topic)
        # micro-batch buffers
        self._messages: list = []  # every source message of the batch, accepted or not
        self._accepted: list[AcceptedMessage] = []
        self._dead: list[tuple[object, RejectedMessage]] = []
        self._pending_reports = 0
        self._first_pending = 0.0
        self._newest_pending: dict[int, int] = {}  # partition -> highest offset in the pending batch
        self._lock = asyncio.Lock()
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
        app.intake = self
        if s.embedded_broker:
            app.fetch_max_wait_ms = EMBEDDED_FETCH_MAX_WAIT_MS
        raw = dict(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
        self.source = app.topic(s.source_topic, partitions=s.partitions, **raw)
        self.dead_letters = app.topic(s.dead_letter_topic, partitions=s.partitions, **raw)
        # key_type/value_type bytes make the table's own (recovery) serializers raw as well.
        self.table = app.Table(TABLE_NAME, partitions=s.partitions, key_type=bytes, value_type=bytes,
                               schema=faust.Schema(**raw))

        @app.agent(self.source, name="ocms-aggregate")
        async def aggregate(stream):
            # The agent subscribes the source topic (assignment, co-partitioning with the
            # table); its messages reach receive() from the consumer (agents.intake), so
            # this stream stays empty. Were one delivered here, it takes the same path.
            self._agent_started = True
            async for event in stream.noack().events():
                if self.receive(event.message):
                    await self.flush()

        @app.timer(interval=max(0.02, s.batch_max_seconds / 4))
        async def flush_old_batch():
            if self._messages and time.monotonic() - self._first_pending >= s.batch_max_seconds:
                await self.flush()

        @app.timer(interval=expiry_interval(self.levels))
        async def expire_buckets():
            async with self._lock:
                self.expire(time.time())

        @app.task
        async def read_changelog():
            await self.reader.run()

        add_pages(app, self)
        add_console(app, self.settings.truth_file)  # the live console at / (agents/console)
        return app

    # --------------------------------------------------------- per message
    def receive(self, message) -> bool:
        """Validate one source message into the micro-batch; True when the batch is full."""
        newest = self._newest_pending.get(message.partition)
        if newest is not None and message.offset <= newest:
            self._forget_pending(message.partition, message.offset)
        self._newest_pending[message.partition] = message.offset
        try:
            params, batch = self.validator.check(message.value, message.timestamp, time.time())
        except RejectedMessage as rejection:
            self._dead.append((message, rejection))
        else:
            self._accepted.append(AcceptedMessage(message.partition, message.offset, message.timestamp,
                                                  self.fp_hex[params.fingerprint], batch))
            self._pending_reports += len(batch)
        if not self._messages:
            self._first_pending = time.monotonic()
        self._messages.append(message)
        return self._pending_reports >= self.settings.batch_max_reports

    def _forget_pending(self, partition: int, offset: int) -> None:
        """The consumer went back to ``offset`` of ``partition`` (a seek to the committed
        offset) while the copies from there on were still pending: they are being delivered
        again, so they are dropped here and counted once, from the new delivery. Without
        this a batch holding both copies counts them twice (each is above the stored offset)."""

        dropped = self._drop_pending(lambda m: m.partition == partition and m.offset >= offset)
        if not dropped:
            return
        self.metrics.redelivered.inc(len(dropped))
        log.warning("partition %d went back to offset %d: %d pending messages are counted once, "
                    "from their new delivery", partition, offset, len(dropped))

    def _drop_unowned(self) -> None:
        """Drop pending messages of source partitions this worker no longer owns (a
        rebalance that took them without Faust's wait for unacked messages): their new
        owner counts them from the committed offset, which they are not below, because
        they were never acked. Writing them here would race the owner's writes."""
        owned = self._owned_partitions()
        if owned is None:  # consumer not started: nothing can be pending
            return
        dropped = self._drop_pending(lambda m: m.partition not in owned)
        if not dropped:
            return
        lost = sorted({m.partition for m in dropped})
        for partition in lost:
            self._newest_pending.pop(partition, None)
        log.warning("dropped %d pending messages of partitions no longer assigned: %s", len(dropped), lost)

    def _drop_pending(self, stale) -> list:
        """Remove the pending messages ``stale`` selects, unacked and uncounted."""
        dropped = [m for m in self._messages if stale(m)]
        if not dropped:
            return dropped
        self._messages = [m for m in self._messages if not stale(m)]
        self._accepted = [a for a in self._accepted if not stale(a)]
        self._dead = [(m, rejection) for m, rejection in self._dead if not stale(m)]
        self._pending_reports = sum(len(a.batch) for a in self._accepted)
        for m in dropped:
            self.app.consumer.untrack(m)  # never acked, so the committed offset stays below it
        return dropped

    # ------------------------------------------------------------- batches
    def _read(self, key: BucketKey) -> PartialCounts | None:
        raw = self.table.get(key.encode())
        return None if raw is None else PartialCounts.from_bytes(raw)

    async def flush(self) -> None:
        async with self._lock:
            self._drop_unowned()
            if not self._messages:
                return
            messages, accepted, dead = self._messages, self._accepted, self._dead
            self._messages, self._accepted, self._dead, self._pending_reports = [], [], [], 0
            self._newest_pending = {}
            last_by_partition = {message.partition: message for message in messages}  # offsets ascend per partition
            plan = plan_batch(accepted, self._read, self.params_by_fp, self.tracked_by_fp, self.levels)
            for key, state in plan.writes:
                with current_event(self._context(key.partition)):
                    self.table[key.encode()] = state.to_bytes()
                self.retention.add(key)
            for message, rejection in dead:
                headers = [
                    (REASON_HEADER, rejection.reason.encode()),
                    ("ocms-reject-detail", rejection.detail.encode()[:500]),
                    ("ocms-source", f"{message.topic}/{message.partition}/{message.offset}".encode()),
                ]
                await self.dead_letters.send(key=message.key, value=message.value, headers=headers)
                self.metrics.rejected.labels(rejection.reason).inc()
                log.info("rejected %s/%d/%d: %s", message.topic, message.partition, message.offset, rejection)
            ack = self.app.consumer.ack
            for message in messages:
                ack(message)
            self._next_offset.update({p: m.offset + 1 for p, m in last_by_partition.items()})
            for fp, n in plan.counted.items():
                self.metrics.accepted.labels(fp).inc(n)
            self.metrics.replayed.inc(plan.replayed)
            if accepted:
                self.metrics.batch_reports.observe(plan.reports)
                self.metrics.decode_seconds.observe(plan.decode_seconds)
                self.metrics.last_processed.set(max(m.timestamp for m in accepted))

    def _context(self, partition: int) -> PartitionContext:
        context = self._contexts.get(partition)
        if context is None:
            context = self._contexts[partition] = PartitionContext(SourcePartition(self.source_topic, partition))
        return context

    def expire(self, now: float) -> int:
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
            "pending_reports": self._pending_reports,
        }

    def run(self) -> int:
        from faust.worker import Worker

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
