"""Kafka's own failure modes under load, on librdkafka's mock cluster (3 brokers; issue 29).

The whole production path runs with the ``mock`` broker profile (the ``kafka`` path, with topics
created through the mock): devices upload to the collector (the shared idempotency log's
transactional producer, ``acks=all``), the worker (registry metric ``dest``) counts from the
source topic and checkpoints to its changelog. Each test injects one fault while uploads run, heals it, and then checks both promises
over everything in the topic so far:

* every report whose upload got a 202 is in Kafka exactly once, and nothing is there that was
  not uploaded (an upload answered 503 may still have landed: Kafka may store a frame whose
  answer the collector never got);
* the worker's n and match counts equal an offline decode of exactly what is in the topic.

What the pipeline does on each fault is in docs/operating.md (Kafka failures).

The collectors run the default shared idempotency log (collector/exactly_once/: a transactional
producer); the lost-answer test also runs keys per process (``--idempotency-topic off``). Every
upload's reports are unique in the test process (tests/collector/loadgen.py), so a report found
twice in the topic is an upload stored twice: two uploads that drew the same 5-byte report by chance
once looked like that here.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from fleet.offline import sketch_from_messages
from infra.mock_cluster import MockCluster

from tests.support.topics import consume
from tests.support.waiting import poll_until

from .harness import CollectorProcess, records_of, serving_worker
from .loadgen import LoadGenerator, LoadLog

pytestmark = [pytest.mark.kafka_mock, pytest.mark.integration]

TOPIC = "faults"
PER_PROCESS_KEYS = ("--idempotency-topic", "off")  # the lost-answer test's other collectors
CHANGELOG = f"{TOPIC}-worker-ocms-counts-changelog"
PARTITIONS = range(4)
BROKERS = (1, 2, 3)


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=3) as running:
        yield running


@pytest.fixture(scope="module")
def worker(cluster, registry_path, tmp_path_factory):
    with serving_worker(registry_path, cluster, TOPIC, tmp_path_factory.mktemp("worker")) as w:
        yield w


@pytest.fixture(scope="module")
def collector(cluster, registry_path, worker, tmp_path_factory):
    with CollectorProcess(registry_path, cluster, TOPIC, tmp_path_factory.mktemp("collector"),
                          "--kafka-timeout-ms", "1500", "--retry-after-seconds", "1") as c:
        yield c


@pytest.fixture(scope="module")
def uploads() -> list[LoadLog]:
    """Every load log of the module: the topic holds what all of them uploaded."""
    return []


def under_load(collector, dest, uploads: list, fault, *, seed: int, after: int = 40) -> LoadLog:
    """Uploads before, during and after ``fault()`` (which injects the fault and heals it); returns the log
    once ``after`` uploads got a 202 after the fault."""
    load = LoadGenerator(collector.url + "/v1/reports", dest, concurrency=4, per_upload=3, seed=seed,
                         pause_s=0.005).start()
    try:
        poll_until(lambda: load.log.statuses()[202] >= 30, 30, "accepted uploads before the fault")
        fault()
        mark = len(load.log.outcomes)
        poll_until(lambda: sum(o.status == 202 for o in load.log.outcomes[mark:]) >= after, 60,
                   "accepted uploads after the fault")
    finally:
        log = load.stop()
        uploads.append(log)
    return log


def assert_exact(cluster, worker, dest, uploads: list[LoadLog]) -> Counter:
    """Both promises over the whole topic (module docstring); returns the records in Kafka."""
    frames = [record.value for record in consume(cluster, TOPIC)]
    in_kafka = Counter(r for frame in frames for r in records_of(frame, dest))
    accepted = sum((log.records(202) for log in uploads), Counter())
    uploaded = sum((Counter(r for o in log.outcomes for r in o.records) for log in uploads), Counter())
    assert not accepted - in_kafka, "a report that got a 202 is missing from Kafka"
    assert all(in_kafka[r] == 1 for r in accepted), "a report that got a 202 is in Kafka twice"
    assert not in_kafka - uploaded, "Kafka holds a report nobody uploaded, or one twice"
    total = sum(in_kafka.values())
    doc = worker.wait_for_n(total, timeout=60)
    sketch, rejected = sketch_from_messages(dest.params, dest.tracked_values(), frames)
    assert not rejected
    assert doc["n"] == sketch.n == total, "the worker counts exactly what is in Kafka"
    assert [r["match_count"] for r in doc["estimates"]] == sketch.counts.tolist()
    return in_kafka


def other(broker: int, step: int = 1) -> int:
    return BROKERS[(BROKERS.index(broker) + step) % len(BROKERS)]


# ------------------------------------------------------------------------------------------ leaders
def test_the_source_topic_leaders_move_mid_stream(cluster, worker, collector, dest, uploads):
    """Every source partition changes leader while frames are produced and fetched: producers and the
    worker's consumer get NOT_LEADER_OR_FOLLOWER, refresh their metadata and go on."""
    def move():
        for p in PARTITIONS:
            cluster.partition_set_leader(TOPIC, p, BROKERS[p % 3])
        time.sleep(0.5)
        for p in PARTITIONS:
            cluster.partition_set_leader(TOPIC, p, BROKERS[(p + 1) % 3])

    log = under_load(collector, dest, uploads, move, seed=1)
    assert set(log.statuses()) <= {202, 503}, log.statuses()
    assert_exact(cluster, worker, dest, uploads)


def test_the_changelog_leaders_move_while_checkpoints_run(cluster, worker, collector, dest, uploads):
    """Checkpoints (every 0.1 s under load) write to changelog partitions whose leaders move: the
    writes are retried, the checkpoint waits for them, and nothing is counted twice."""
    def move():
        for step in (1, 2):
            for p in PARTITIONS:
                cluster.partition_set_leader(CHANGELOG, p, BROKERS[(p + step) % 3])
            time.sleep(0.3)

    log = under_load(collector, dest, uploads, move, seed=2)
    assert set(log.statuses()) <= {202, 503}, log.statuses()
    assert_exact(cluster, worker, dest, uploads)


# ------------------------------------------------------------------------------------------ brokers
def test_a_broker_goes_down_and_comes_back(cluster, worker, collector, dest, uploads):
    """Broker 2 refuses connections for 5 s, longer than an upload waits for its frame (2 x the collector's
    1.5 s Kafka timeout); its partitions keep it as their leader, as when a broker restarts before Kafka
    moves them. Uploads whose frame went to one of its partitions get 503 with Retry-After, the others 202
    (the idempotent producer re-sends a batch until the broker takes it: without the collector's bound
    they waited for the whole outage); the worker waits for its changelog writes to broker 2 (the
    checkpoint is acked only after them) and goes on."""
    for p in PARTITIONS:  # broker 2 leads half the source and changelog partitions
        cluster.partition_set_leader(TOPIC, p, BROKERS[p % 3])
        cluster.partition_set_leader(CHANGELOG, p, BROKERS[(p + 1) % 3])

    def outage():
        cluster.broker_down(2)
        time.sleep(5)
        cluster.broker_up(2)

    log = under_load(collector, dest, uploads, outage, seed=3)
    statuses = log.statuses()
    assert set(statuses) == {202, 503}, statuses
    assert all(o.retry_after == "1" for o in log.outcomes if o.status == 503)
    assert worker.alive()
    assert_exact(cluster, worker, dest, uploads)


def test_an_added_500_ms_round_trip(cluster, worker, collector, dest, uploads):
    """Every broker answers 500 ms late for 3 s: uploads are slower, none is refused."""
    def slow():
        for b in BROKERS:
            cluster.set_rtt(b, 500)
        time.sleep(3)
        for b in BROKERS:
            cluster.set_rtt(b, 0)

    log = under_load(collector, dest, uploads, slow, seed=4, after=20)
    assert set(log.statuses()) == {202}, log.statuses()
    assert_exact(cluster, worker, dest, uploads)


# ------------------------------------------------------------------------------------------ produce errors
def test_retriable_produce_errors_are_retried(cluster, worker, collector, dest, uploads):
    """NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS on the next 12 produce requests of
    any client (collector frames, changelog records): each is retried, no upload is refused."""
    def errors():
        cluster.push_request_errors("Produce", ["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT",
                                                "NOT_ENOUGH_REPLICAS"] * 4)

    log = under_load(collector, dest, uploads, errors, seed=5)
    assert set(log.statuses()) == {202}, log.statuses()
    assert_exact(cluster, worker, dest, uploads)


def test_a_refused_frame_answers_503_and_nothing_of_it_is_stored(cluster, worker, collector, dest, uploads):
    """A non-retriable produce error (the broker refuses the frame: TOPIC_AUTHORIZATION_FAILED) fails
    the frame at once: its uploads get 503 with Retry-After, the collector logs it, Kafka holds none
    of its reports. The failed send also ends the transaction of the shared log's producer: the
    collector renews it (its start fences the old one) and answers 503 with Retry-After, /healthz
    included, until the new one is up; then the next frames are stored."""
    assert_exact(cluster, worker, dest, uploads)  # quiet: no produce request is in flight now
    for p in PARTITIONS:
        cluster.partition_set_leader(TOPIC, p, 1)
        cluster.partition_set_leader(CHANGELOG, p, 3)
    cluster.broker_push_request_errors(1, "Produce", [("TOPIC_AUTHORIZATION_FAILED", 0)])
    load = LoadGenerator(collector.url + "/v1/reports", dest, concurrency=1, per_upload=3, seed=6)
    refused = load._upload()
    status, doc, headers = request_upload(collector, refused[0])
    assert (status, doc["reason"]) == (503, "kafka_unavailable") and headers["Retry-After"] == "1", doc
    assert "TopicAuthorizationFailedError" in doc["detail"]
    poll_until(lambda: "not acknowledged: TopicAuthorizationFailedError" in collector.log_path.read_text(), 10,
               "the collector's log line for the refused frame")
    collector.wait_healthy()  # the renewed producer is up
    log = under_load(collector, dest, uploads, lambda: None, seed=7, after=10)
    assert set(log.statuses()) == {202}
    in_kafka = assert_exact(cluster, worker, dest, uploads)
    assert not any(in_kafka[r] for r in refused[1]), "a refused frame's report is in Kafka"


def request_upload(collector, body: bytes):
    from .harness import WIRE, request

    return request(collector.url + "/v1/reports", body, content_type=WIRE)


def test_a_refused_changelog_write_stops_the_worker_before_its_checkpoint_commits(cluster, worker, collector, dest,
                                                                                 uploads):
    """The broker refuses a changelog record (non-retriable): the checkpoint is not acked or committed,
    the worker says so and exits; restarted (as its supervisor would), it replays the batch from the
    committed offset and counts it exactly once."""
    for p in PARTITIONS:  # frames go to broker 1, changelog records to broker 3 only
        cluster.partition_set_leader(TOPIC, p, 1)
        cluster.partition_set_leader(CHANGELOG, p, 3)
    assert_exact(cluster, worker, dest, uploads)
    cluster.broker_push_request_errors(3, "Produce", [("TOPIC_AUTHORIZATION_FAILED", 0)])
    load = LoadGenerator(collector.url + "/v1/reports", dest, concurrency=1, per_upload=3, seed=8)
    body, records = load._upload()
    status, doc, _ = request_upload(collector, body)
    assert status == 202, doc
    uploads.append(LoadLog([type(uploads[0].outcomes[0])(202, records)]))
    poll_until(lambda: not worker.alive(), 30, "the worker to stop after the refused changelog write")
    log = worker.log_path.read_text()
    assert "the broker did not acknowledge a changelog record or dead letter" in log, log[-3000:]
    worker.start()  # what a supervisor (compose's restart policy, Kubernetes) does
    assert_exact(cluster, worker, dest, uploads)


# ------------------------------------------------------------------------------------------ lost answers
def test_a_frame_whose_answer_is_lost_is_acknowledged_after_the_retry(cluster, registry_path, dest, tmp_path):
    """Broker 1 stores a frame but answers after the collector's timeout (a lost answer). With the shared
    idempotency log (the default: a transactional producer) aiokafka re-sends it, the mock drops the copy
    by its sequence, and the upload gets its 202: stored once. With keys per process and the idempotent
    producer (the kafka profile) the upload gets its 202 too; Apache Kafka stores the re-sent batch once,
    but librdkafka's mock checks sequences for transactional producers only and keeps both copies (docs/operating.md,
    broker profiles). Without the idempotent producer the upload gets 503 although the frame landed."""
    copies = {}
    for mode, flags in (("shared", ()), ("on", PER_PROCESS_KEYS), ("off", PER_PROCESS_KEYS)):
        topic = f"lost-answer-{mode}"
        cluster.create_topics({topic: 1, f"{topic}-idempotency": 1})
        cluster.partition_set_leader(topic, 0, 1)
        idempotence = "off" if mode == "off" else "on"
        with CollectorProcess(registry_path, cluster, topic, tmp_path, *flags, "--kafka-idempotence", idempotence,
                              "--kafka-timeout-ms", "1500") as collector:
            load = LoadGenerator(collector.url + "/v1/reports", dest, concurrency=1, per_upload=3, seed=9)
            warm, _ = load._upload()
            assert request_upload(collector, warm)[0] == 202
            cluster.broker_push_request_errors(1, "Produce", [("NO_ERROR", 2500)])
            body, records = load._upload()
            status, doc, _ = request_upload(collector, body)
            stored = Counter(r for record in consume(cluster, topic) for r in records_of(record.value, dest))
        copies[mode] = (status, max(stored[r] for r in records))
    assert copies["shared"] == (202, 1), copies  # acknowledged after the re-send, stored once
    assert copies["off"] == (503, 1), copies  # landed once, but the upload was answered 503
    assert copies["on"] == (202, 2), copies  # acknowledged after the re-send; the mock kept both copies
