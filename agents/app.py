"""The Faust worker: thin wiring of topics, one table, one agent, timers and web pages.

Flow per message: the consumer hands each source message to ``receive``
(``agents.intake``: no per-message Faust event or stream), which validates it
(``processor.MessageValidator``); a rejected one is queued for the dead-letter
topic with its original bytes and a reason header; an accepted one joins the
micro-batch (``processor.PendingBatch``). A batch is checkpointed when it holds
``batch_max_reports`` reports or is ``batch_max_seconds`` old, and before Faust
waits for unacked messages (a rebalance or a clean stop): :mod:`agents.checkpoint`
has the steps (decode, write tables, send dead letters, wait for the broker, ack
and commit, in that order) and why their order makes the counts exact.

Retention (:mod:`agents.retention`): a timer deletes buckets past retention from the
owned partitions of the table. Status (:mod:`agents.status`): /healthz and the lag gauges.
The consumer group (:mod:`agents.rebalance`): where the worker stands in a rebalance, and
the rejoin that ends one that does not settle.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import tempfile
import time

import faust

from cms_core import wire
from infra.kafka import wait_for_late_batches
from infra import kafka_security
from infra.http_edge import server_tls_context
from registry import Registry

from .catalog import Catalog
from .checkpoint import Checkpoint, CountsTable, FoldInputs, TableWriter
from .console import add_console
from .faust_internals import AlignedPartitionAssignor, request_rejoin, warnings_at_start
from .intake import IntakeApp
from .metrics import EstimatesCollector, PipelineMetrics
from .discovery import WorkerDiscovery
from .processor import AcceptedMessage, Batch, BatchPlan, DiscoveryMessage, MessageValidator, PendingBatch, RejectedMessage
from .rebalance import GroupCollector, GroupWatch
from .retention import Retention, expiry_interval
from .shards import Router, Share
from .settings import TABLE_NAME, WorkerSettings
from .state import write_members_for
from .status import WorkerStatus, owned_partitions
from .trust import ClaimCheck
from .view import ChangelogReader, CountsView
from .web import add_pages
from .web_edge import peer_tls

log = logging.getLogger("ocms.worker")


def faust_settings(settings: WorkerSettings) -> dict:
    """faust.App keyword settings; what differs between brokers comes from the broker profile
    (``infra.kafka``: sessions, one-record batches, topic declaration)."""
    if settings.store.startswith("rocksdb://"):
        # rocksdb://PATH: Faust keeps one RocksDB per table partition under its data directory.
        store, datadir = "rocksdb://", settings.store[len("rocksdb://"):] or f"{settings.app_id}-data"
    else:
        # The memory store keeps nothing on disk: Faust is given a directory name it never
        # creates (IntakeApp.create_data_directories), so no run leaves a temp folder behind.
        store, datadir = settings.store, f"{tempfile.gettempdir()}/ocms-{settings.app_id}-unused"
    profile = settings.broker
    conf = dict(
        broker="kafka://" + settings.bootstrap_servers.replace(",", ";kafka://"),
        store=store,
        datadir=datadir,
        topic_partitions=settings.partitions,
        topic_allow_declare=profile.clients_create_topics,
        topic_disable_leader=True,  # no on_leader timer or task: no leader-election topic
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=0,  # every worker reads the whole changelog into its view anyway
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_s / 3),
        producer_acks=-1,
        web_enabled=True,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        # What the other workers forward queries to: a reachable address, never 0.0.0.0 (issue 35, 4: every
        # replica bound to 0.0.0.0 advertised http://0.0.0.0:6066 and the partition-to-worker map collapsed).
        web_host=settings.advertised_web_host,
        autodiscover=False,
        PartitionAssignor=AlignedPartitionAssignor,  # a source partition and its changelog's on one worker
    )
    if profile.one_record_batches:
        conf["producer_max_batch_size"] = 1  # any record exceeds 1 byte: one record per batch
    security = kafka_security.load(settings.kafka_config_file, settings.label("kafka_config_file")) \
        if settings.kafka_config_file else None
    if security is not None and security.faust_credentials() is not None:  # SASL and TLS (infra.kafka_security)
        conf["broker_credentials"] = security.faust_credentials()
    if settings.tls_cert:  # HTTPS, and the other workers forward to https:// (agents.web_edge)
        conf["web_ssl_context"] = server_tls_context(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
        conf["canonical_url"] = f"https://{settings.advertised_web_host}:{settings.web_port}"
    return conf


class OCMSWorker:
    """Owns the Faust app and the worker's state; ``run()`` blocks until stopped.

    Source messages reach ``receive`` from the consumer (the side path, ``agents.intake``); the
    docs/architecture.md ("Why the intake side path") has the measurement that chose it over the agent's stream
    (benchmarks/bench_agent_path.py subclasses this class to measure the agent paths)."""

    #: False leaves source messages on Faust's path to the agent's stream (``consume``).
    side_intake = True

    def __init__(self, settings: WorkerSettings, metrics: Registry):
        self.settings = settings
        kafka_security.use(settings.kafka_config_file)  # SASL and TLS of every Kafka client of this process
        write_members_for(settings.upgrade_from)  # the table member codecs this process writes (--upgrade-from)
        self.source_topic = settings.source_topic  # read by agents.intake
        self._tables_held: tuple = (None, frozenset(), set())  # (generation, table partitions held, told of)
        self.view = CountsView()
        # Every metric version served, by name and fingerprint (a registry, or the single-metric flags').
        self.catalog = Catalog(metrics, self.view, future_tolerance_seconds=settings.future_tolerance_seconds)
        self.view.tracked_sizes = self.catalog.tracked_sizes
        self.view.on_stale = self._stale_record
        self._rewriting: set = set()  # table keys being written again after a stale record (_stale_record)
        self.metrics = PipelineMetrics()  # its guard: one bad series never fails /metrics
        # Discoverable metrics' level reports: acked, read by discovery from the topic, counted by no table.
        self.discovery = WorkerDiscovery.build(self.catalog, settings)
        self.validator = MessageValidator(self.catalog.params_sets, None,
                                          settings.future_tolerance_seconds, self.catalog.retention_by_fp,
                                          discovery_sets=self.discovery.level_params)
        self.fp_hex = {p.fingerprint: p.fingerprint.hex() for p in self.catalog.params_sets}
        levels = self.catalog.levels_by_fp
        layout = self.catalog.state_layout(settings.partitions)
        # Which metrics this worker's view holds (agents.shards): all, or its assigned share.
        self.share = Share(layout, sharded=settings.view == "share")
        self.metrics.guard.add("estimates", EstimatesCollector(self.catalog, serves=self.share.serves_fingerprint))
        self.group = GroupWatch(settings.session_timeout_s)
        self.metrics.guard.add("group", GroupCollector(self.group))
        self.reader = ChangelogReader(self.view, settings.bootstrap_servers, settings.changelog_topic,
                                      settings.partitions, self.share, owned=self.owned_partitions,
                                      settled=lambda: not self.app.rebalancing, profile=settings.broker)
        self.status = WorkerStatus(self)
        self._shuffle_warned = False  # an invalid ocms-shuffle-n header is logged once
        self.claims = ClaimCheck(settings, self.metrics)  # which shuffle claims are believed (cms_core.claims)
        self.app = self._build_app()
        self.group.recovering = lambda: self.app.rebalancing
        self.router = Router(self.app, self.share, settings.changelog_topic, self.reader.current, ssl=peer_tls(settings))
        writer = TableWriter(self.table, settings.source_topic)
        self.retention = Retention(self.app, writer, self.owned_partitions)
        self.checkpoint = Checkpoint(
            self.app, writer, self.dead_letters, PendingBatch(settings.batch_max_reports),
            FoldInputs(self.catalog.params_by_fp, self.catalog.tracked_by_fp, levels, layout),
            on_written=self.retention.add, on_acked=self._acked, drop_unowned=self._drop_unowned)

    @property
    def pending(self) -> PendingBatch:
        return self.checkpoint.pending

    # ------------------------------------------------------------- wiring
    def _build_app(self) -> faust.App:
        s = self.settings
        app = IntakeApp(s.app_id, **faust_settings(s))
        app.create_data_directories = s.store.startswith("rocksdb://")
        app.intake = self if self.side_intake else None
        app.fetch_max_wait_ms = s.broker.fetch_max_wait_ms
        app.group_watch = self.group
        app.leave_group = s.broker.leave_group
        app.leader_sync_delay_ms = s.broker.leader_sync_delay_ms
        if s.broker.late_batches:
            wait_for_late_batches(s.source_topic, on_late=self.late_records)
        raw = dict(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
        self.source = app.topic(s.source_topic, partitions=s.partitions, **raw)
        self.dead_letters = app.topic(s.dead_letter_topic, partitions=s.partitions, **raw)
        # key_type/value_type bytes make the table's own (recovery) serializers raw as well.
        self.table = app.tables.add(CountsTable(app, name=TABLE_NAME, beacon=app.tables.beacon, partitions=s.partitions,
                                                key_type=bytes, value_type=bytes, schema=faust.Schema(**raw)))

        @app.agent(self.source, name="ocms-aggregate")
        async def aggregate(stream):
            # The agent subscribes the source topic (assignment, co-partitioning with the table);
            # its messages reach receive() from the consumer (agents.intake) and its stream stays empty.
            self.status.agent_started = True
            await self.consume(stream)

        @app.timer(interval=max(0.02, s.batch_max_seconds / 4))
        async def flush_old_batch():
            # A full batch is left to the group commit (Checkpoint.ready): it waits for the
            # acknowledgements of the batches before it, growing meanwhile.
            if self.pending.age(time.monotonic()) >= s.batch_max_seconds and (
                    not self.pending.full or self.checkpoint.ready()):
                await self.supervised("the micro-batch timer", self.flush())

        @app.timer(interval=expiry_interval(self.catalog.levels_by_fp))
        async def expire_buckets():
            async with self.checkpoint.lock:
                await self.supervised("the retention timer", self.retention.expire(time.time()))

        @app.timer(interval=1.0)
        async def end_a_stuck_table_recovery():
            # A rebalance that does not settle is ended where the coordinator takes its next join
            # (agents.faust_internals, 7.); a table recovery after the join has no such place.
            if self.group.phase == "recovering" and self.group.overdue():
                log.warning("the table recovery did not end within %.0f s (%s): rejoining the consumer group",
                            self.group.overdue_after_s, self.group.reason())
                if request_rejoin(self.app):
                    self.group.rejoined("recovery_overdue", f"rejoined: the table recovery did not end within "
                                        f"{self.group.overdue_after_s:.0f} s", new_member=False)

        @app.task
        async def read_changelog():
            await self.supervised("the changelog view reader", self.reader.run(), forever=True)

        # Heavy answers off the event loop; closed with the forwarding client when the web server stops.
        self.queries = add_pages(app, self)
        self.discovery.install(app, self.metrics)  # /discovered?metric=NAME (agents/discovery.py)
        add_console(app, self.settings.truth_file)  # the live console at / (agents/console)
        return app

    async def supervised(self, what: str, work, *, forever: bool = False) -> None:
        """Run a background job of the worker (a timer's round, or the view reader, ``forever``). If it
        fails, is cancelled while the worker runs, or a ``forever`` job returns, say so (an error log
        line naming it, /healthz 503 with ``failed``: ``WorkerStatus.failure``) and crash the worker,
        whose supervisor restarts it from its committed offsets: a job that died quietly left /healthz
        at 503 for ever (the view reader) or batches unwritten."""
        try:
            await work
            if not forever:
                return
            error: BaseException = RuntimeError("it returned")
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.app.should_stop or (task is not None and task.cancelling()):
                raise
            error = RuntimeError("it was cancelled")
        except Exception as exc:
            error = exc
        self.status.failure = f"{what} stopped: {type(error).__name__}: {error}"
        log.error("%s; the worker exits (restarted, it resumes from its committed offsets)", self.status.failure)
        await self.app.crash(error)

    async def consume(self, stream) -> None:
        """The agent's stream: empty on the side path, which takes every source message first."""
        async for event in stream.noack().events():
            if self.receive(event.message):
                await self.flush()

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

    def late_records(self, partition: int, first: int, upto: int, given_up: bool) -> None:
        """The consumer's word that offsets ``first``..``upto - 1`` of a source partition were not readable when a
        later batch was (``infra.kafka.wait_for_late_batches``): fetched again, or after the wait passed."""
        if given_up:
            self.metrics.source_offsets_skipped.inc(upto - first)
        else:
            self.metrics.source_late_batches.inc()

    def _shuffle_n(self, message, reports: int) -> int:
        """The shuffled batch a frame's reports came in (``ocms-shuffle-n``), 0 when not shuffled. A header
        that is not a batch size of at least the frame's reports is counted and taken as not shuffled: the
        reports still count, only the claim about them is the weaker (local) one."""
        size = self.claims.size(message, reports)
        if size is None:
            self.metrics.shuffle_header_invalid.inc()
            if not self._shuffle_warned:
                self._shuffle_warned = True
                log.warning("partition %d offset %d: an %s header that is not a batch size of at least the frame's %d "
                            "reports; its reports count as not shuffled (ocms_shuffle_header_invalid_total)",
                            message.partition, message.offset, wire.SHUFFLE_HEADER, reports)
            return 0
        return size

    async def batch_full(self) -> None:
        """The intake's call when ``receive`` says the batch is full (``Checkpoint.batch_full``)."""
        await self.checkpoint.batch_full()

    async def flush(self) -> None:
        """Checkpoint the pending batch and wait until every batch taken is committed."""
        await self.checkpoint.flush()

    def _drop_unowned(self) -> None:
        owned = self.owned_partitions()
        if owned is None:  # consumer not started: nothing can be pending
            return
        dropped = self.pending.keep_partitions(owned)
        if dropped:
            self._untrack(dropped)
            log.warning("dropped %d pending messages of partitions no longer assigned: %s", len(dropped),
                        sorted({m.partition for m in dropped}))

    def _stale_record(self, key) -> None:
        """The view found a stale record of a table key (``CountsView.apply``): if this worker owns the key's
        partition, write the key's value again so the changelog's last record of it is the newest one."""
        owned = self.owned_partitions()
        if owned is None or key.partition not in owned or key in self._rewriting:
            return
        self._rewriting.add(key)
        asyncio.ensure_future(self._rewrite(key))

    async def _rewrite(self, key) -> None:
        try:
            if await self.checkpoint.rewrite(key, self.owned_partitions, lambda: self.view.held_offsets(key)):
                self.metrics.stale_rewrites.inc()
                log.info("wrote table key %s again: a stale record of it was the changelog's latest", key.encode())
        except Exception as exc:  # noqa: BLE001 - the next stale record asks again
            log.warning("writing table key %s again failed: %s: %s", key.encode(), type(exc).__name__, exc)
        finally:
            self._rewriting.discard(key)

    def _untrack(self, messages: list) -> None:
        for message in messages:
            self.app.consumer.untrack(message)  # never acked, so the committed offset stays below it

    def _acked(self, batch: Batch, plan: BatchPlan, newest: float | None) -> None:
        """A batch's messages are acked (checkpoint step 4): count it in the metrics."""
        self.status.acked(batch.last_offsets())
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

    def holds_table_partition(self, partition: int) -> bool:
        """Whether this generation's assignment gave this worker the table (changelog) partition of source
        ``partition`` (the intake drops its messages otherwise: agents.faust_internals, 10). The worker's own
        assignor never parts them; a leader of release 0.2.0 (a rolling upgrade) assigns as Faust does, which
        parted them when a member joined with the source topic alone (issue 35, seed 3077: a worker counted a
        source partition onto a table partition it had not recovered). Such an assignment is logged and the
        worker rejoins, once a generation."""
        generation = self.app.consumer_generation_id
        if self._tables_held[0] != generation:
            assignment = self.app.consumer.assignment()
            held = frozenset(tp.partition for tp in assignment if tp.topic == self.settings.changelog_topic)
            self._tables_held = (generation, held, set())
        _, held, told = self._tables_held
        if partition in held:
            return True
        if not told:
            log.error("source partition %d was assigned without its table partition (the group's leader assigned "
                      "them apart: table partitions here %s); not counting it, rejoining the group",
                      partition, sorted(held))
            request_rejoin(self.app)
        told.add(partition)
        return False

    # ------------------------------------------------------------- status
    def owned_partitions(self) -> set[int] | None:
        """Source partitions assigned to this worker; None before the consumer has started."""
        return owned_partitions(self.app, self.source_topic)

    def health(self) -> dict:
        return self.status.health()

    def update_lag_metrics(self) -> None:
        self.status.update_lag_metrics()

    def run(self) -> int:
        from faust.worker import Worker

        for problem in warnings_at_start():
            log.warning("Faust internals: %s", problem)

        # The catalog, tracked sets and app built above live as long as the worker: the cyclic
        # collector need not trace them again on every full collection (with hundreds of metrics,
        # their label lists and dicts made collections 8% of the event loop's CPU, perf).
        gc.freeze()
        worker = Worker(self.app, loglevel=self.settings.log_level.upper(), quiet=True)
        if not worker.stdout.isatty():
            worker.spinner = None  # its cursor escape codes belong on a terminal, not in a log
        worker.execute_from_commandline()
        return 0


async def prepare_topics(settings: WorkerSettings) -> None:
    """Create the source, dead-letter and changelog topics with the configured partitions (on a broker
    whose clients cannot create topics: check they exist with them)."""
    from infra.kafka import create_topics

    kafka_security.use(settings.kafka_config_file)
    await create_topics(
        settings.bootstrap_servers,
        {settings.source_topic: settings.partitions, settings.dead_letter_topic: settings.partitions,
         settings.changelog_topic: settings.partitions},
        settings.broker, configs={settings.changelog_topic: {"cleanup.policy": "compact"}},
    )
