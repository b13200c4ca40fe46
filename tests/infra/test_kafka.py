"""infra.kafka: the broker profiles, and what every Kafka client gets under each (no broker needed)."""

import asyncio
import dataclasses
from pathlib import Path

import pytest

from cms_core.errors import OCMSError
from cms_core.params import OCMSParams
from collector.outlet import KafkaOutlet
from collector.settings import CollectorSettings
from infra.framing import KafkaFrameSink
from infra.kafka import (EMBEDDED, KAFKA, MAX_REQUEST_BYTES, MOCK, PROFILES, broker_profile, consumer_config,
                         producer_config, profiles_table, stop_client)
from producer.reporter import DeviceReporter

ROOT = Path(__file__).resolve().parents[2]
PARAMS = OCMSParams.build(2.0, 1000)


# ------------------------------------------------------------------------------ the profiles
def test_each_profile_differs_from_kafka_exactly_where_it_says_why():
    assert KAFKA.differing_settings() == set() and not KAFKA.differences
    for profile in (EMBEDDED, MOCK):
        assert profile.differing_settings() == set(profile.differences), profile.name
        assert all(len(why) > 40 for why in profile.differences.values())
    # the mock may differ only where the mock cannot do what Apache Kafka does: topic creation, held fetches,
    # a group's sync that ends before every member asked for its assignment
    assert MOCK.differing_settings() == {"clients_create_topics", "fetch_max_wait_ms", "leader_sync_delay_ms"}


def test_a_difference_without_a_reason_is_caught():
    sloppy = dataclasses.replace(MOCK, session_timeout_s=6.0)  # differs, and says nothing about it
    assert sloppy.differing_settings() != set(sloppy.differences)


def test_profiles_are_named_and_an_unknown_name_is_refused():
    assert PROFILES == {"kafka": KAFKA, "embedded": EMBEDDED, "mock": MOCK}
    assert broker_profile("mock") is MOCK
    with pytest.raises(OCMSError, match="kafka, embedded, mock"):
        broker_profile("redpanda")


def test_the_readme_operating_notes_hold_the_generated_profile_table():
    # the table sits in a bullet of the operating notes, indented by two spaces
    readme = "\n".join(line.removeprefix("  ") for line in (ROOT / "docs" / "operating.md").read_text().splitlines())
    assert profiles_table() in readme, "regenerate: python -m infra.kafka (and paste it into docs/operating.md)"
    assert readme.count(profiles_table().splitlines()[-1]) == 1, "the profile notes are in docs/operating.md twice"
    for profile in (EMBEDDED, MOCK):
        for why in profile.differences.values():
            assert why in readme


# ------------------------------------------------------------------------------ what clients get
def test_producers_ack_all_with_one_request_bound_and_idempotence_where_the_broker_has_it():
    for profile, idempotent in ((KAFKA, True), (MOCK, True), (EMBEDDED, False)):
        config = producer_config("k:9092", profile, linger_ms=5)
        assert config == {"bootstrap_servers": "k:9092", "acks": "all", "max_request_size": MAX_REQUEST_BYTES,
                          "enable_idempotence": idempotent, "linger_ms": 5}, profile.name
    assert producer_config("k", KAFKA, idempotent=False, acks=1)["enable_idempotence"] is False


def test_consumers_get_the_fetch_wait_of_their_profile_and_group_sessions():
    assert "fetch_max_wait_ms" not in consumer_config("k", KAFKA)  # Kafka answers as data arrives
    assert consumer_config("k", EMBEDDED)["fetch_max_wait_ms"] == consumer_config("k", MOCK)["fetch_max_wait_ms"] == 100
    assert consumer_config("k", KAFKA)["group_id"] is None
    grouped = consumer_config("k", KAFKA, group_id="g")
    assert (grouped["session_timeout_ms"], grouped["heartbeat_interval_ms"]) == (30_000, 3_000)
    grouped = consumer_config("k", EMBEDDED, group_id="g")
    assert (grouped["session_timeout_ms"], grouped["heartbeat_interval_ms"]) == (3_000, 1_000)


class Recorder:
    def __init__(self):
        self.config = None

    def __call__(self, **config):
        self.config = config
        raise RuntimeError("not a producer")


@pytest.mark.parametrize("broker, mode, idempotent", [
    ("kafka", "auto", True), ("mock", "auto", True), ("embedded", "auto", False),
    ("kafka", "off", False), ("embedded", "on", True),
])
def test_what_the_collector_producer_gets(tmp_path, broker, mode, idempotent):
    registry = tmp_path / "r.yaml"
    registry.write_text("metrics: []\n")
    settings = CollectorSettings.build({}, registry=str(registry), bootstrap_servers="k:9092", broker=broker,
                                       kafka_idempotence=mode, kafka_timeout_ms="1500")
    config = KafkaOutlet(settings, metrics=None).config()
    assert config == {"bootstrap_servers": "k:9092", "acks": "all", "max_request_size": MAX_REQUEST_BYTES,
                      "enable_idempotence": idempotent, "client_id": "ocms-collector", "linger_ms": 0,
                      "request_timeout_ms": 1500, "retry_backoff_ms": 100, "max_batch_size": 1_048_576}


def test_the_collector_refuses_an_unknown_broker_naming_the_flag(tmp_path):
    registry = tmp_path / "r.yaml"
    registry.write_text("metrics: []\n")
    with pytest.raises(OCMSError, match="--broker"):
        CollectorSettings.build({}, registry=str(registry), bootstrap_servers="k", broker="tansu")
    with pytest.raises(OCMSError, match="OCMS_BROKER"):
        CollectorSettings.build({"OCMS_BROKER": "tansu"}, registry=str(registry), bootstrap_servers="k")


@pytest.mark.parametrize("profile", [KAFKA, EMBEDDED, MOCK], ids=lambda p: p.name)
def test_what_devices_and_gateways_get(profile):
    factory = Recorder()
    reporter = DeviceReporter(PARAMS, bootstrap_servers="k:9092", topic="t", device_key=b"d", metric="m",
                              profile=profile, producer_factory=factory)
    with pytest.raises(Exception):
        asyncio.run(reporter.start())
    assert factory.config == {"bootstrap_servers": "k:9092", "acks": "all", "max_request_size": MAX_REQUEST_BYTES,
                              "enable_idempotence": profile.idempotent_producer, "linger_ms": 5,
                              "request_timeout_ms": 30_000}
    sink = KafkaFrameSink("k:9092", "t", profile=profile, producer_factory=factory)
    with pytest.raises(RuntimeError):
        asyncio.run(sink.start())
    assert factory.config == {"bootstrap_servers": "k:9092", "acks": "all", "max_request_size": MAX_REQUEST_BYTES,
                              "enable_idempotence": profile.idempotent_producer, "linger_ms": 0}


# ------------------------------------------------------------------------------ stop_client
class StopCancels:
    """A client whose stop() raises CancelledError, as aiokafka's does right after start."""

    async def stop(self):
        raise asyncio.CancelledError()


def test_a_stop_that_raises_cancelled_does_not_mask_the_error_being_handled():
    async def reader():
        try:
            raise ConnectionError("the reader's own failure")
        finally:
            await stop_client(StopCancels())

    with pytest.raises(ConnectionError, match="own failure"):
        asyncio.run(reader())


def test_a_task_that_is_really_cancelled_stays_cancelled():
    async def main():
        started = asyncio.Event()

        async def reader():
            try:
                started.set()
                await asyncio.sleep(60)
            finally:
                await stop_client(StopCancels())

        task = asyncio.create_task(reader())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


@pytest.mark.integration
def test_a_tansu_broker_under_another_profile_is_named_in_a_warning(caplog):
    """Issue 36: a worker or collector started against `ocms broker` without --broker embedded said nothing (and
    a restarted worker waited out the kafka profile's 30 s session); the topic check now says which flag to give."""
    import asyncio
    import logging

    from infra.broker import EmbeddedBroker
    from infra.kafka import create_topics

    with EmbeddedBroker() as broker, caplog.at_level(logging.WARNING, logger="ocms.kafka"):
        asyncio.run(create_topics(broker.bootstrap_servers, {"profile-check": 1}, KAFKA))
        assert any("give --broker embedded" in r.getMessage() for r in caplog.records), caplog.text
        caplog.clear()
        asyncio.run(create_topics(broker.bootstrap_servers, {"profile-check": 1}, EMBEDDED))
        assert not [r for r in caplog.records if r.name == "ocms.kafka"]


def test_a_late_batch_is_waited_for_then_taken_as_a_gap():
    from infra.kafka import LateBatchWait

    now = [100.0]
    late = LateBatchWait(wait_s=10.0, clock=lambda: now[0])
    assert late.verdict("p0", 356, 361) == "late"
    now[0] += 9.9
    assert late.verdict("p0", 356, 361) == "waiting"
    assert late.verdict("p1", 7, 9) == "late"  # each reader key waits on its own
    now[0] += 0.2
    assert late.verdict("p0", 356, 361) == "gap"
    assert late.verdict("p0", 356, 361) == "late"  # a new wait
    late.arrived("p0")
    late.arrived("p1")
    assert not late


def _record_batch(base: int, count: int) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=1000, key=None, value=b"v%d" % (base + i), headers=[])
    buffer = builder.build()
    buffer[0:8] = base.to_bytes(8, "big")  # the batch's base offset
    return bytes(buffer)


def _partition_records(topic: str, data: bytes, fetch_offset: int):
    from aiokafka import TopicPartition
    from aiokafka.consumer.fetcher import PartitionRecords
    from aiokafka.record.memory_records import MemoryRecords

    return PartitionRecords(TopicPartition(topic, 0), MemoryRecords(data), [], fetch_offset, None, None, False, 0)


def test_a_fetch_that_skips_offsets_stops_before_the_hole_until_the_late_batch_is_readable(monkeypatch):
    """Issue 35 (a fault schedule lost 36 reports): Tansu can make a record batch readable after a later one of
    another producer; aiokafka's PartitionRecords then moves its next fetch past the late batch for good. With
    ``wait_for_late_batches`` the records before the hole are returned and the next fetch asks for the hole's
    first offset again; once the batch is there, everything is read in order. aiokafka's own classes are used."""
    from infra import kafka

    now = [0.0]
    monkeypatch.setattr(kafka, "_LATE_WAIT", kafka.LateBatchWait(wait_s=10.0, clock=lambda: now[0]))
    told = []
    kafka.wait_for_late_batches("late-test", on_late=lambda *a: told.append(a))
    records = _partition_records("late-test", _record_batch(0, 3) + _record_batch(5, 2), 0)
    assert [r.offset for r in records] == [0, 1, 2] and records.next_fetch_offset == 3
    again = _partition_records("late-test", _record_batch(5, 2), 3)  # still late
    assert list(again) == [] and again.next_fetch_offset == 3
    arrived = _partition_records("late-test", _record_batch(3, 2) + _record_batch(5, 2), 3)
    assert [r.offset for r in arrived] == [3, 4, 5, 6] and arrived.next_fetch_offset == 7
    assert told == [(0, 3, 5, False)]
    # never readable: after the wait the hole is passed, and said so
    assert list(_partition_records("late-test", _record_batch(9, 1), 7)) == []
    now[0] += 10.5
    assert [r.offset for r in _partition_records("late-test", _record_batch(9, 1), 7)] == [9]
    assert told[-1] == (0, 7, 9, True)
    # other topics are read as aiokafka reads them
    assert [r.offset for r in _partition_records("other", _record_batch(0, 1) + _record_batch(4, 1), 0)] == [0, 4]


def test_the_hole_check_still_fits_aiokafka():
    """infra.kafka wraps the record batches aiokafka's PartitionRecords reads (its private ``_records``, read
    by ``_unpack_records`` from ``next_batch()`` while ``has_next()``, with ``next_fetch_offset``): an upgrade that
    changes them must be re-read before this pin moves."""
    import hashlib
    import inspect
    from importlib import metadata

    from aiokafka.consumer.fetcher import PartitionRecords

    from infra.kafka import PINNED_AIOKAFKA

    assert metadata.version("aiokafka") == PINNED_AIOKAFKA
    source = inspect.getsource(PartitionRecords._unpack_records)
    assert hashlib.sha256(source.encode()).hexdigest() == \
        "b803e6d46480732c7a7faa8e784b338bcdd4e707ea67fba96c013654b04b8a08"
    assert list(inspect.signature(PartitionRecords.__init__).parameters)[:5] == [
        "self", "tp", "records", "aborted_transactions", "fetch_offset"]
