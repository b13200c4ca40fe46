"""agents.faust_internals: fails when a faust-streaming or aiokafka upgrade changes a
private name the worker relies on.

Each check is exercised both ways: against the installed packages (no drift) and
against a deliberately changed stand-in (the drift is reported), so a check that
could never fail would show up here.
"""

import asyncio
import contextvars
from importlib import metadata

import pytest
from faust.streams import current_event as faust_current_event
from faust.transport.consumer import Consumer as FaustConsumer

from agents import faust_internals
from agents.app import OCMSWorker
from agents.faust_internals import (
    DRAIN_MESSAGES_SHA256,
    PINNED_VERSIONS,
    PartitionContext,
    SourcePartition,
    current_event,
    drift,
    source_sha256,
)
from agents.settings import WorkerSettings
from registry.flags import metrics_from_flags


def test_the_installed_faust_and_aiokafka_are_the_pinned_versions():
    assert {package: metadata.version(package) for package in PINNED_VERSIONS} == PINNED_VERSIONS


def test_nothing_the_worker_relies_on_has_drifted():
    assert drift() == []
    assert faust_internals.warnings_at_start() == []  # a worker on the pinned versions logs nothing


def test_the_copied_drain_messages_still_matches_its_source():
    """IntakeConsumer.getmany repeats _drain_messages' per-message bookkeeping (read offset,
    gap, tracking); a changed original must be re-read before the hash is updated."""
    assert source_sha256(FaustConsumer._drain_messages) == DRAIN_MESSAGES_SHA256


def test_a_changed_version_name_signature_or_source_is_reported(monkeypatch):
    monkeypatch.setitem(PINNED_VERSIONS, "aiokafka", "0.0.1")
    assert any("aiokafka" in p and "0.0.1" in p for p in faust_internals.version_drift())
    assert faust_internals.warnings_at_start()[1:] == []  # versions differ, code still as checked

    async def _add_gap(self, tp, start, stop):  # renamed parameters
        pass

    monkeypatch.setattr(FaustConsumer, "_add_gap", _add_gap)
    monkeypatch.delattr("faust.app.base.App._consumer_wait_empty")
    monkeypatch.setattr(faust_internals, "DRAIN_MESSAGES_SHA256", "0" * 64)
    problems = faust_internals.code_drift()
    assert any("_add_gap takes ('tp', 'start', 'stop')" in p for p in problems), problems
    assert any("_consumer_wait_empty is gone" in p for p in problems), problems
    assert any("_drain_messages changed" in p for p in problems), problems


def test_a_table_write_outside_a_stream_sees_the_stand_in_event():
    """faust-streaming #497: the table reads current_event().message for the partition."""
    context = PartitionContext(SourcePartition("reports", 3))
    assert faust_current_event() is None
    with current_event(context):
        assert faust_current_event() is context
        assert faust_current_event().message.partition == 3 and faust_current_event().message.topic == "reports"
    assert faust_current_event() is None
    assert isinstance(faust_internals._current_event, contextvars.ContextVar)


def test_a_table_write_path_that_stops_using_send_changelog_is_reported(monkeypatch):
    """CountsTable waits for the futures send_changelog returns; a write that bypassed it
    would be acked before the broker holds it."""
    from faust.tables.table import Table

    def on_key_set(self, key, value):
        self.data[key] = value

    monkeypatch.setattr(Table, "on_key_set", on_key_set)
    assert any("on_key_set no longer does" in p for p in faust_internals.code_drift())


@pytest.mark.parametrize("broker, wait_ms", [("embedded", 100), ("kafka", 1500), ("mock", 100)])
def test_the_embedded_broker_gets_a_short_fetch_wait(broker, wait_ms):
    """Tansu and librdkafka's mock hold a fetch that found no data for its whole max wait (Faust's
    1.5 s showed up as ~1 s latency spikes); Kafka answers as data arrives, so Faust's wait stays there."""

    async def fetch_wait():
        settings = WorkerSettings.build(broker=broker, bootstrap_servers="127.0.0.1:1", app_id="unit-fetch")
        worker = OCMSWorker(settings, metrics_from_flags(epsilon=2, dictionary_size=1000, tracked_range="0:10"))
        consumer = worker.app.consumer._thread._create_worker_consumer(worker.app.transport)
        try:
            return faust_internals.fetch_max_wait_ms(consumer)
        finally:
            await consumer.stop()

    assert asyncio.run(fetch_wait()) == wait_ms


# ---------------------------------------------------------------- 10. a source partition and its changelog's
def _assign(assignor_class, subscriptions: dict[str, list[str]]) -> tuple[str, dict[str, dict[str, list[int]]]]:
    """What the group's leader sends each member: Faust's real assignor over 4-partition topics."""
    import faust
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
    from faust.assignor.client_assignment import ClientAssignment, ClientMetadata

    class Cluster:
        def partitions_for_topic(self, topic):
            return {0, 1, 2, 3}

    app = faust.App("aligned-test", broker="kafka://localhost:1")
    changelog = app.Table("counts", partitions=4).changelog_topic.get_topic_name()
    members = {}
    for member, topics in subscriptions.items():
        metadata = ClientMetadata(assignment=ClientAssignment(actives={}, standbys={}), url=f"http://{member}",
                                  changelog_distribution={})
        topics = [changelog if t == "changelog" else t for t in topics]
        members[member] = ConsumerProtocolMemberMetadata(0, sorted(topics), metadata.dumps())
    assigned = assignor_class(app, replicas=0)._perform_assignment(Cluster(), members)
    return changelog, {m: dict(a.assignment) for m, a in assigned.items()}


def test_a_member_subscribed_to_the_source_alone_does_not_split_it_from_the_changelog():
    """Issue 35 (seed 3077): a worker stopped while it started joined with the source topic alone, and
    Faust assigned the source and the changelog apart: a worker counted source partition 1 onto a table
    partition it had not recovered. With the aligned assignor each member's source partitions are its
    changelog partitions, and the partial member gets nothing; Faust's own assignor is the control."""
    subscriptions = {"w1": ["src", "changelog"], "w2": ["src", "changelog"], "w3": ["src"]}
    changelog, faust_way = _assign(faust_internals.PartitionAssignor, subscriptions)
    assert any(a.get("src", []) != a.get(changelog, []) for a in faust_way.values()), faust_way  # the defect
    changelog, aligned = _assign(faust_internals.AlignedPartitionAssignor, subscriptions)
    assert aligned["w3"] == {}
    assert sorted(aligned["w1"]["src"] + aligned["w2"]["src"]) == [0, 1, 2, 3]
    for member in ("w1", "w2"):
        assert aligned[member]["src"] == aligned[member][changelog], aligned


def test_members_that_all_lack_a_topic_are_assigned_as_faust_does():
    subscriptions = {"w1": ["src"], "w2": ["src"]}
    assert _assign(faust_internals.AlignedPartitionAssignor, subscriptions)[1] == \
        _assign(faust_internals.PartitionAssignor, subscriptions)[1]


def test_the_worker_app_uses_the_aligned_assignor():
    from agents.app import faust_settings

    settings = WorkerSettings.build(broker="embedded", bootstrap_servers="127.0.0.1:1", app_id="unit-assignor")
    assert faust_settings(settings)["PartitionAssignor"] is faust_internals.AlignedPartitionAssignor
