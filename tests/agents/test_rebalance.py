"""agents.rebalance and the group hooks of agents.faust_internals (7.), without a broker: what the
worker says about its consumer group while a rebalance runs, when it ends one that does not settle,
and what it does instead of LeaveGroup on a broker that mishandles it (issue 42)."""

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka.errors import KafkaError

from agents import faust_internals
from agents.app import OCMSWorker
from agents.faust_internals import watch_group
from agents.rebalance import GroupCollector, GroupWatch, overdue_after
from agents.settings import WorkerSettings
from registry.flags import metrics_from_flags
from tests.agents.harness import Scrape


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_bound_is_four_sessions_and_at_least_ten_seconds():
    assert overdue_after(3.0) == 12.0 and overdue_after(30.0) == 120.0 and overdue_after(1.0) == 10.0


def test_a_member_says_what_it_waits_for_until_its_partitions_are_assigned():
    clock = Clock()
    watch = GroupWatch(3.0, clock=clock)
    assert not watch.settled() and watch.reason() == "starting for 0 s: waiting for its first JoinGroup"
    watch.joining()
    watch.answered("JoinGroup", "MEMBER_ID_REQUIRED")  # a step of the protocol, not trouble: not shown
    clock.now += 2
    watch.joined(generation=19, member_id="m-1", leader=False)
    for _ in range(4):
        watch.answered("SyncGroup", "REBALANCE_IN_PROGRESS")
    clock.now += 10
    assert watch.reason() == ("starting for 12 s: waiting for SyncGroup (generation 19, follower; "
                              "4 SyncGroup answers REBALANCE_IN_PROGRESS)")
    watch.synced(19)
    assert watch.reason().endswith("waiting for the assignment of its partitions (generation 19, follower; "
                                   "4 SyncGroup answers REBALANCE_IN_PROGRESS)")
    watch.assigned()
    assert watch.settled() and watch.reason() is None and watch.unsettled_for() == 0
    assert watch.describe()["state"] == "stable" and watch.rebalances == 1
    # the next rebalance is "rebalancing", starts a new clock and forgets the last one's answers
    clock.now += 100
    watch.revoking()
    clock.now += 1
    assert watch.reason() == "rebalancing for 1 s: waiting for the revocation of its partitions (flush and commit)"


def test_a_rebalance_is_overdue_after_the_bound_and_again_one_bound_after_each_rejoin():
    clock = Clock()
    watch = GroupWatch(3.0, clock=clock)
    watch.joining()
    clock.now += 11.9
    assert not watch.overdue()
    clock.now += 0.1
    assert watch.overdue()
    watch.rejoined("rebalance_overdue", "rejoined as a new member after 12 s", new_member=True)
    assert not watch.overdue() and watch.member_id is None
    assert watch.rejoins == {"rebalance_overdue": 1, "recovery_overdue": 0, "coordinator_error": 0}
    assert watch.reason() == "starting for 12 s: waiting for JoinGroup (rejoined as a new member after 12 s)"
    clock.now += 12
    assert watch.overdue()  # still not settled: the member may rejoin again, one bound later
    watch.joined(20, "m-2", leader=True)
    watch.synced(20)
    watch.assigned()
    assert not watch.overdue() and watch.reason() is None


def test_a_member_is_settled_only_once_faust_has_recovered_its_tables():
    clock, recovering = Clock(), [True]
    watch = GroupWatch(3.0, clock=clock, recovering=lambda: recovering[0])
    watch.joined(4, "m", leader=False)
    watch.synced(4)
    watch.assigned()
    clock.now += 13
    assert watch.reason() == ("starting for 13 s: waiting for the recovery of its table partitions from the "
                              "changelog (generation 4, follower)")
    assert watch.overdue()  # the worker's timer makes it rejoin (Faust recovers again)
    recovering[0] = False
    assert watch.settled() and watch.rebalances == 1 and not watch.overdue()


def test_the_group_series_of_metrics():
    clock = Clock()
    watch = GroupWatch(3.0, clock=clock)
    clock.now += 5
    watch.rejoined("coordinator_error", "rejoining after the coordinator stopped on INVALID_REQUEST", new_member=False)
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(GroupCollector(watch))
    scrape = Scrape.parse(generate_latest(registry).decode())
    assert scrape.get("ocms_group_rejoins_total", reason="coordinator_error") == 1
    assert scrape.get("ocms_group_rejoins_total", reason="rebalance_overdue") == 0
    assert scrape.get("ocms_group_rebalances_total") == 0
    assert scrape.get("ocms_group_unsettled_seconds") == 5


# ------------------------------------------------------------------ the coordinator's hooks
class FakeCoordinator:
    """The part of aiokafka's GroupCoordinator that watch_group hooks (the drift test checks the real one)."""

    def __init__(self):
        self.group_id = "g"
        self.generation, self.member_id = 7, "m-old"
        self.coordinator_id = None  # no broker to nudge
        self.calls = []
        self._heartbeat_task = self._commit_refresh_task = None
        self.answers = []

    async def _send_req(self, request):
        self.calls.append(type(request).__name__)
        return self.answers.pop(0)

    async def _on_join_prepare(self, previous_assignment):
        self.calls.append("revoke")

    async def _on_join_complete(self, generation, member_id, protocol, member_assignment_bytes):
        self.calls.append("assign")

    async def _do_rejoin_group(self, subscription):
        self.calls.append(f"join as {self.member_id!r}")
        return True

    async def _maybe_leave_group(self):
        self.calls.append(f"LeaveGroup {self.member_id}")
        self.reset_generation()

    def _push_error_to_user(self, exc):
        raise AssertionError("aiokafka's own waits for a caller that never comes")

    def reset_generation(self):
        self.generation, self.member_id = -1, ""
        self.request_rejoin()

    def request_rejoin(self):
        self.calls.append("request_rejoin")


def request(name):
    return type(name, (), {})()


def test_the_hooks_follow_join_sync_and_callbacks():
    coordinator, watch = FakeCoordinator(), GroupWatch(3.0)
    watch_group(coordinator, watch)

    async def rebalance():
        await coordinator._on_join_prepare(None)
        assert watch.phase == "revoking"
        coordinator.answers = [SimpleNamespace(error_code=0, generation_id=8, member_id="m-old", leader_id="m-old"),
                               SimpleNamespace(error_code=27), SimpleNamespace(error_code=0)]
        await coordinator._send_req(request("JoinGroupRequest"))
        assert (watch.phase, watch.generation, watch.leader) == ("syncing", 8, True)
        await coordinator._send_req(request("SyncGroupRequest"))  # REBALANCE_IN_PROGRESS
        assert watch.errors == {("SyncGroup", "REBALANCE_IN_PROGRESS"): 1}
        await coordinator._send_req(request("SyncGroupRequest"))
        assert watch.phase == "assigning"
        await coordinator._on_join_complete(8, "m-old", "faust", b"")
        assert watch.settled()

    asyncio.run(rebalance())


def test_the_leader_waits_before_its_sync_group_where_the_profile_says_so(monkeypatch):
    coordinator, watch = FakeCoordinator(), GroupWatch(6.0)
    watch_group(coordinator, watch, leader_sync_delay_s=0.3)
    waits = []
    real_sleep = asyncio.sleep

    async def sleep(seconds, *args):
        waits.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(faust_internals.asyncio, "sleep", sleep)

    async def syncs():
        coordinator.answers = [SimpleNamespace(error_code=0)] * 2
        await coordinator._send_req(request("SyncGroupRequest"))  # a follower: at once
        watch.joined(5, "m-old", leader=True)
        await coordinator._send_req(request("SyncGroupRequest"))  # the leader: after the others'

    asyncio.run(syncs())
    assert waits == [0.3] and coordinator.calls == ["SyncGroupRequest", "SyncGroupRequest"]


@pytest.mark.parametrize("leave_group", [True, False])
def test_an_overdue_rebalance_makes_the_member_rejoin_as_a_new_member(leave_group):
    clock = Clock()
    coordinator, watch = FakeCoordinator(), GroupWatch(3.0, clock=clock)
    watch_group(coordinator, watch, leave_group=leave_group)

    async def attempts():
        await coordinator._do_rejoin_group(None)  # in time: joins as itself
        clock.now += 12
        await coordinator._do_rejoin_group(None)

    asyncio.run(attempts())
    leave = ["LeaveGroup m-old"] if leave_group else []  # where LeaveGroup is mishandled the old id expires
    assert coordinator.calls == ["join as 'm-old'", *leave, "request_rejoin", "join as ''"]
    assert watch.rejoins["rebalance_overdue"] == 1


def test_a_stopping_member_lets_its_session_expire_where_the_broker_mishandles_leave_group():
    coordinator, watch = FakeCoordinator(), GroupWatch(3.0)
    watch_group(coordinator, watch, leave_group=False)
    asyncio.run(coordinator._maybe_leave_group())  # what aiokafka's close() calls
    assert coordinator.calls == ["request_rejoin"] and coordinator.member_id == ""  # no LeaveGroup sent


def test_an_error_left_for_a_caller_makes_the_member_rejoin_after_a_backoff(monkeypatch):
    monkeypatch.setattr(faust_internals, "COORDINATOR_ERROR_BACKOFF_S", (0.01, 0.02))
    coordinator, watch = FakeCoordinator(), GroupWatch(3.0)
    watch_group(coordinator, watch)

    async def heartbeat_failed():
        raise KafkaError("Unexpected exception in heartbeat task")

    async def errors():
        failed = coordinator._heartbeat_task = asyncio.ensure_future(heartbeat_failed())
        await asyncio.sleep(0)
        # aiokafka awaits what _push_error_to_user returns: it must end, not wait for check_errors()
        await asyncio.wait_for(coordinator._push_error_to_user(KafkaError("InvalidRequestError")), 1)
        assert isinstance(failed.exception(), KafkaError)
        return coordinator._heartbeat_task

    assert asyncio.run(errors()) is None  # the finished task is cleared: the loop would take it up again
    assert "request_rejoin" in coordinator.calls and coordinator.member_id == "m-old"
    assert watch.rejoins["coordinator_error"] == 1
    assert watch.reason().endswith("(rejoining after the coordinator stopped on KafkaError: InvalidRequestError)")


# ------------------------------------------------------------------ /healthz
def test_healthz_says_why_the_worker_is_not_ok_while_its_group_is_not_settled():
    settings = WorkerSettings.build(bootstrap_servers="k:9092", broker="embedded", app_id="unit-rebalance")
    worker = OCMSWorker(settings, metrics_from_flags(epsilon=2, dictionary_size=1000, tracked_range="0:10"))
    assert worker.app.leave_group is False and worker.app.group_watch is worker.group
    health = worker.health()
    assert health["status"] == "starting" and health["group"]["reason"].startswith("starting for ")
    worker.group.joined(3, "m", leader=True)
    worker.group.synced(3)
    worker.group.assigned()
    worker.group.revoking()
    health = worker.health()
    assert health["status"] == "rebalancing"
    assert health["group"]["reason"].startswith("rebalancing for 0 s: waiting for the revocation of its partitions")
    assert health["group"]["overdue_after_seconds"] == 12.0


# ------------------------------------------------------------------ a recovery's records Faust drops
def test_a_batch_faust_drops_while_its_flow_is_stopped_is_fetched_again(monkeypatch):
    """Faust drops a batch that arrives after a rebalance stopped its flow and seeks back to the committed
    offsets; a changelog partition has none, so its records are sought back to the batch's first one."""
    from faust.transport.consumer import Consumer
    from faust.types import TP

    from agents.faust_internals import IntakeConsumer

    source, changelog, idle = TP("reports", 0), TP("app-ocms-counts-changelog", 1), TP("app-ocms-counts-changelog", 2)
    records = {source: [SimpleNamespace(offset=5)], changelog: [SimpleNamespace(offset=10), SimpleNamespace(offset=11)],
               idle: []}

    async def wait_next_records(self, timeout):
        return records, {source, changelog, idle}

    monkeypatch.setattr(Consumer, "_wait_next_records", wait_next_records)
    consumer = object.__new__(IntakeConsumer)
    consumer.app = SimpleNamespace(intake=SimpleNamespace(source_topic="reports"))
    seeks = []

    async def seek(tp, offset):
        seeks.append((tp, offset))

    consumer.seek = seek
    consumer.flow_active = True
    assert asyncio.run(consumer._wait_next_records(1.0))[0] is records and seeks == []  # flowing: Faust yields it
    consumer.flow_active = False
    asyncio.run(consumer._wait_next_records(1.0))
    assert seeks == [(changelog, 10)]  # the source topic is Faust's own seek to committed offsets
