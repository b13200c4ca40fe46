"""Exactly-once retries across collector restarts and replicas (collector/exactly_once/).

The promise: a device that retries an upload with its Idempotency-Key until it gets a 202 has
its reports counted once, whichever collector process answered which attempt, and whatever
was killed in between. Checked as multisets of raw records (the topic against what got a 202)
and, with SIGKILLs under load, against the real worker's count.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
import time
from collections import Counter

import numpy as np
import pytest

from cms_core import wire
from collector.exactly_once.log import (FAILED, FRAME_HEADER, STORED, ListingLog, batch_frame_id, encode_batch_listing,
                                        encode_lease, encode_listing, encode_outcome, key_hash, write_leases_for)
from collector.kafka_internals import drift
from infra.broker import EmbeddedBroker
from registry import load_registry
from tests.support.topics import consume, produce
from tests.support.waiting import poll_until

from .harness import REGISTRY_YAML, CollectorProcess, records_of, request, serving_worker, single_messages
from .loadgen import RetryingLoad


# ------------------------------------------------------------------------ the log's rules (no broker)
def key(n: int) -> bytes:
    return n.to_bytes(16, "big")


def listing(nonce: int, keys, time_s: int = 1000, owner: str = "ocms-collector-a") -> bytes:
    return encode_listing(nonce.to_bytes(16, "big"), owner, b"incarnat", 0, 0, time_s, [key(k) for k in keys])


def test_the_first_listing_of_a_key_holds_it_until_it_fails():
    log = ListingLog(window_s=900, max_keys=1000)
    first = log.apply(0, listing(1, [1, 2]))
    assert first.valid == {key(1), key(2)} and log.holder(key(1)) is first
    second = log.apply(1, listing(2, [2, 3]))
    assert second.valid == {key(3)}, "key 2 is held by the pending first listing: void in the second"
    log.apply(2, encode_outcome((1).to_bytes(16, "big"), stored=False))
    assert first.status == "failed" and log.holder(key(1)) is None and log.holder(key(2)) is None
    third = log.apply(3, listing(3, [2]))
    assert third.valid == {key(2)}, "a failed listing releases its keys to later listings"
    log.apply(4, encode_outcome((3).to_bytes(16, "big"), stored=True))
    fourth = log.apply(5, listing(4, [2]))
    assert fourth.valid == set() and log.holder(key(2)).status == "stored"
    # a settled listing stays settled: every settler finds the same, the first outcome counts
    log.apply(6, encode_outcome((3).to_bytes(16, "big"), stored=False))
    assert third.status == "stored"


def test_the_log_forgets_by_its_own_times_and_by_the_key_bound():
    log = ListingLog(window_s=100, max_keys=3)
    log.apply(0, listing(1, [1], time_s=1000))
    log.apply(1, listing(2, [2], time_s=1050))
    log.apply(2, listing(3, [3], time_s=1101))  # listing 1 (t=1000) is older than the window now
    assert log.holder(key(1)) is None and log.holder(key(2)) is not None
    log.apply(3, listing(4, [4, 5], time_s=1102))  # 4 keys held > 3: the oldest listing goes
    assert log.holder(key(2)) is None and {k for k in range(6) if log.holder(key(k))} == {3, 4, 5}
    assert len(log) == 3


def replayed(records: list[bytes], window_s: int = 900, observer: str | None = None) -> ListingLog:
    """The log as a collector reading it afresh (after a restart) computes it."""
    log = ListingLog(window_s=window_s, max_keys=1000, observer=observer)
    for offset, record in enumerate(records):
        log.apply(offset, record)
    return log


def test_keys_listed_for_1_hour_buckets_are_held_for_the_window_on_the_collectors_clock():
    """Issue 35, defect 3: a listing was dated by its frame's event-time bucket, so the listing of an upload
    to a metric with 1-hour buckets, 50 minutes into the hour, was 3,000 s old when written, and was
    forgotten at the next listing of a 1-minute metric: every retry of it was stored again (200 reports
    counted 400). Listings are dated by the collector's clock when written; the log forgets by it, in log
    order, and a collector reading the log afresh after a restart holds the same keys."""
    hour_start = 100 * 3600
    now = hour_start + 50 * 60
    # what the collector wrote before: the hourly upload dated by its bucket, a 1-minute one by its minute
    before = replayed([listing(1, [1, 2], time_s=hour_start), listing(2, [3], time_s=now + 5 - (now + 5) % 60)])
    assert before.holder(key(1)) is None, "the negative control: how the hourly upload's key was lost"

    records: list[bytes] = []
    writer = ListingLog(window_s=900, max_keys=1000)  # what the writing collector has read

    def write(nonce: int, keys: list[int], wall_s: int) -> None:
        records.append(listing(nonce, keys, time_s=writer.listing_time(wall_s)))
        writer.apply(len(records) - 1, records[-1])

    write(1, [1, 2], now)  # uploads of the hourly metric (their frames' timestamp: hour_start)
    write(2, [3], now + 5)  # an upload of a 1-minute metric
    write(3, [4], now + 899)
    for log in (writer, replayed(records)):
        assert log.holder(key(1)) is log.holder(key(2)) is not None and log.clock_s == now + 899
    write(4, [5], now + 901)  # 901 s after the hourly listing on the collectors' clock: past the window
    for log in (writer, replayed(records)):
        assert log.holder(key(1)) is None and log.holder(key(3)) is not None and log.holder(key(5)) is not None


def test_a_collector_whose_clock_is_behind_never_dates_a_listing_before_the_logs_clock():
    """Replicas' clocks differ: the log's clock is the greatest listing time applied, and a writer dates
    its listing no earlier (else a collector 20 minutes behind would write listings forgotten at once)."""
    log = ListingLog(window_s=900, max_keys=1000)
    log.apply(0, listing(1, [1], time_s=10_000))
    behind = log.listing_time(10_000 - 1200)
    assert behind == 10_000 and log.listing_time(10_007.9) == 10_007
    log.apply(1, listing(2, [2], time_s=behind))
    log.apply(2, listing(3, [3], time_s=10_899))
    assert log.holder(key(2)) is not None and log.clock_s == 10_899
    log.apply(3, listing(4, [4], time_s=9_000))  # a slower clock's listing moves the log's clock nowhere
    assert log.clock_s == 10_899 and log.holder(key(1)) is not None


def lease(owner: str, time_s: int) -> bytes:
    return encode_lease(owner, b"incarnat", 0, time_s)


@pytest.fixture(params=[None, "0.2"], ids=["L-leases", "upgrade-from-0.2"])
def lease_kind(request):
    """Leases as this code writes them (``L``), and as it writes them with ``--upgrade-from 0.2`` (``F``)."""
    write_leases_for(request.param)
    yield request.param
    write_leases_for(None)


def test_a_lease_record_is_28_bytes_shorter_than_a_listing_of_no_keys_and_says_the_same(lease_kind):
    record = lease("ocms-collector-b", 10_000)
    assert record[:1] == (b"L" if lease_kind is None else b"F")
    assert len(record) == len("ocms-collector-b") + (19 if lease_kind is None else 47)
    log = ListingLog(window_s=900, max_keys=1000)
    assert log.apply(0, record) is None and log.clock_s == 10_000 and not log.frames and log.bad_records == 0
    assert log.apply(1, record[:-1] + b"\xff") is None and log.bad_records == 1  # not UTF-8: skipped, counted
    assert log.apply(2, record[:12]) is None and log.bad_records == 2  # cut short
    with pytest.raises(ValueError, match="expected one of 0.2"):
        write_leases_for("0.1")


def test_an_owner_is_silent_only_between_the_observers_own_listings_after_its_latest_record(lease_kind):
    """The lease (issue 35, defect 5b): how long an owner of pending listings has said nothing is measured on
    the observer's clock alone, between its own records that follow the owner's latest one in the log, so
    the owner's clock (here 300 s behind) and how late the observer reads never matter."""
    a, b = "ocms-collector-a", "ocms-collector-b"
    records = [listing(1, [1], time_s=9_700, owner=a)]
    log = replayed(records, observer=b)
    assert log.silent_for(a) == 0.0
    for record in (lease(b, 10_000), lease(b, 10_003)):
        records.append(record)
        log.apply(len(records) - 1, record)
    assert log.silent_for(a) == 3.0
    records.append(lease(a, 9_703))  # a renews its lease: alive
    log.apply(len(records) - 1, records[-1])
    assert log.silent_for(a) == 0.0 and log.holder(key(1)) is not None, "a lease holds no key and takes none"
    for record in (lease(b, 10_004), listing(2, [2], time_s=10_009, owner=b)):
        records.append(record)
        log.apply(len(records) - 1, record)
    assert log.silent_for(a) == 5.0 and replayed(records, observer=b).silent_for(a) == 5.0
    assert [entry.nonce for entry in log.pending_of(a)] == [(1).to_bytes(16, "big")]
    log.apply(len(records), encode_outcome((1).to_bytes(16, "big"), stored=True))
    assert log.pending_of(a) == [] and log.silent_for(a) == 0.0, "an owner with nothing pending is waited for by nobody"


def test_the_log_skips_duplicates_and_foreign_records():
    log = ListingLog(window_s=900, max_keys=1000)
    first = log.apply(0, listing(1, [1]))
    assert log.apply(1, listing(1, [1])) is None, "a producer retry's duplicate append"
    assert log.apply(2, b"not a collector record") is None
    assert log.apply(3, b"F" + b"\x00" * 10) is None
    assert log.bad_records == 2 and log.holder(key(1)) is first


def test_kafka_internals_match_the_installed_aiokafka():
    assert drift() == []


# --------------------------------------------------------------------------- against a broker
@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        b.create_topics({"eo-doubt": 2, "eo-replicas": 4, "eo-kill": 4, "eo-kill-shuffled": 4, "eo-batch": 2})
        yield b


def topic_counter(broker, topic, version) -> Counter:
    return Counter(r for record in consume(broker.bootstrap_servers, topic) for r in records_of(record.value, version))


def deployment_key(broker, log_topic: str) -> bytes:
    """The key the collectors of ``log_topic`` hash Idempotency-Keys with (collector/exactly_once/key.py): the
    first key record of its key topic (b"" when none: unkeyed)."""
    from collector.exactly_once.key import key_topic, parse_key_record

    keys = [parse_key_record(r.value) for r in consume(broker.bootstrap_servers, key_topic(log_topic))]
    return next((k for k in keys if k is not None), b"")


def log_outcomes(broker, topic) -> list[bytes]:
    return [r.value[:1] for r in consume(broker.bootstrap_servers, topic) if r.value[:1] in (STORED, FAILED)]


@pytest.mark.integration
def test_an_in_doubt_attempt_of_a_killed_predecessor_is_settled_by_the_partition(broker, registry_path, dest, tmp_path):
    """A collector killed after listing two uploads: one's frame reached Kafka (its 202 was lost), the
    other's did not. The restarted collector (same instance id: its producer fenced the old one) answers
    the first's retry with the stored 202 and stores the second's once."""
    topic, owner = "eo-doubt", "ocms-collector-doubt-a"
    now = int(time.time())
    stored_body = b"".join(single_messages(dest, 3, seed=11))
    lost_body = b"".join(single_messages(dest, 2, seed=12))
    stored_key, lost_key = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    stored_nonce, lost_nonce = os.urandom(16), os.urandom(16)
    frame = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, dest.fingerprint, 3) + b"".join(
        records_of(m, dest)[0] for m in single_messages(dest, 3, seed=11))
    produce(broker.bootstrap_servers, [
        (topic + "-idempotency", 0, encode_listing(stored_nonce, owner, b"old-proc", 1, 0, now,
                                                   [key_hash(b"", "", stored_key)]), []),
        (topic + "-idempotency", 0, encode_listing(lost_nonce, owner, b"old-proc", 0, 0, now,
                                                   [key_hash(b"", "", lost_key)]), []),
        (topic, 1, frame, [(FRAME_HEADER, stored_nonce)]),
    ])
    with CollectorProcess(registry_path, broker.bootstrap_servers, topic, tmp_path, "--instance-id", "doubt-a") as c:
        # settled at start, before any retry (so no other replica has to fence this collector for them)
        poll_until(lambda: sorted(log_outcomes(broker, topic + "-idempotency")), 30, "both attempts settled at start",
                   until=lambda outcomes: outcomes == sorted([FAILED, STORED]), interval=0.2)
        status, doc, headers = request(c.url + "/v1/reports", stored_body, headers={"Idempotency-Key": stored_key})
        assert (status, doc["accepted"], headers.get("Idempotent-Replayed")) == (202, 3, "true"), doc
        status, doc, headers = request(c.url + "/v1/reports", lost_body, headers={"Idempotency-Key": lost_key})
        assert (status, doc["accepted"], headers.get("Idempotent-Replayed")) == (202, 2, None), doc
        status, doc, headers = request(c.url + "/v1/reports", lost_body, headers={"Idempotency-Key": lost_key})
        assert (status, headers.get("Idempotent-Replayed")) == (202, "true")
    in_kafka = topic_counter(broker, topic, dest)
    expected = Counter(r for m in (stored_body, lost_body) for r in records_of_messages(m, dest))
    assert in_kafka == expected, "each upload once: the stored frame is not produced again, the lost one is"


def records_of_messages(body: bytes, version) -> list[bytes]:
    size = wire.HEADER_SIZE + wire.record_size(version.params)
    return [r for i in range(0, len(body), size) for r in records_of(body[i:i + size], version)]


@pytest.mark.integration
def test_an_in_doubt_attempt_of_another_collector_waits_then_is_fenced_and_settled(broker, registry_path, dest,
                                                                                   tmp_path):
    """Another collector listed the upload and went silent: its replica answers 503 idempotency_pending
    (Retry-After) while that collector may still be finishing, then fences it and reads the partition."""
    topic = "eo-doubt"
    body = b"".join(single_messages(dest, 4, seed=21))
    upload_key, nonce = secrets.token_urlsafe(18), os.urandom(16)
    before = topic_counter(broker, topic, dest)
    produce(broker.bootstrap_servers, [
        (topic + "-idempotency", 0, encode_listing(nonce, "ocms-collector-ghost", b"ghostinc", 0, 0, int(time.time()),
                                                   [key_hash(b"", "", upload_key)]), [])])
    with CollectorProcess(registry_path, broker.bootstrap_servers, topic, tmp_path, "--instance-id", "doubt-b",
                          "--kafka-timeout-ms", "1000") as c:
        status, doc, headers = request(c.url + "/v1/reports", body, headers={"Idempotency-Key": upload_key})
        assert (status, doc["reason"]) == (503, "idempotency_pending"), doc
        assert int(headers["Retry-After"]) >= 1
        status, doc, headers = poll_until(
            lambda: request(c.url + "/v1/reports", body, headers={"Idempotency-Key": upload_key}), 30,
            "a 202 once the ghost collector is fenced", until=lambda answer: answer[0] == 202, interval=0.5)
        assert headers.get("Idempotent-Replayed") is None, "the ghost's frame never reached Kafka: stored now"
    assert topic_counter(broker, topic, dest) - before == Counter(records_of_messages(body, dest))


@pytest.mark.integration
def test_a_live_collectors_open_transaction_is_never_fenced_by_a_settle_and_a_killed_ones_is(broker, registry_path,
                                                                                             dest, tmp_path,
                                                                                             monkeypatch):
    """Issue 35, defect 5b: a settle at another replica started a producer with the *live* owner's
    transactional id once its listing was known for a grace (2 x --kafka-timeout-ms + 2 s = 4 s here),
    aborting the owner's open transaction. The owner here is this test, doing what a slow but live
    collector does: it lists an upload, sends its frame in a transaction it keeps open, and renews its
    lease twice a second. For 10 s (2.5 times the grace) every retry at the replica is answered 503
    idempotency_pending, and then the owner's producer still sends in that transaction (a fenced one is
    refused). Then the owner dies (no renewals, the transaction left open): the replica fences it, finds
    the frame, and answers the retry with the stored 202; the upload is in Kafka once."""
    from aiokafka.producer import sender as aiokafka_sender

    from collector import kafka_internals
    from infra.kafka import EMBEDDED, make_producer

    # the owner's transactional producer needs InitProducerId v3 on the embedded broker, as the collector's
    monkeypatch.setattr(aiokafka_sender, "InitProducerIdRequest", kafka_internals.InitProducerIdRequest)
    topic, owner = "eo-lease", "ocms-collector-slow-owner"
    broker.create_topics({topic: 2, topic + "-scratch": 1})
    body = b"".join(single_messages(dest, 4, seed=31))
    upload_key, nonce, incarnation = secrets.token_urlsafe(18), os.urandom(16), os.urandom(8)
    frame = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, dest.fingerprint, 4) + b"".join(
        records_of_messages(body, dest))

    def retry(collector) -> tuple[int, dict, dict]:
        return request(collector.url + "/v1/reports", body, headers={"Idempotency-Key": upload_key})

    async def scenario(collector) -> list:
        log = make_producer(broker.bootstrap_servers, EMBEDDED)
        transactional = make_producer(broker.bootstrap_servers, EMBEDDED, idempotent=True, transactional_id=owner)
        await log.start()
        await transactional.start()
        try:
            # a collector of the same deployment: it hashes with the key the deployment keeps in Kafka
            secret = await asyncio.to_thread(deployment_key, broker, topic + "-idempotency")
            await log.send_and_wait(topic + "-idempotency", encode_listing(
                nonce, owner, incarnation, 1, 0, int(time.time()), [key_hash(secret, "", upload_key)]), partition=0)
            await transactional.begin_transaction()
            await (await transactional.send(topic, frame, partition=1, headers=[(FRAME_HEADER, nonce)]))
            alive = asyncio.Event()
            alive.set()

            async def renew_lease() -> None:  # what a live collector's lease loop writes
                while alive.is_set():
                    renewal = encode_lease(owner, incarnation, 0, int(time.time()))
                    await log.send_and_wait(topic + "-idempotency", renewal, partition=0)
                    await asyncio.sleep(0.5)

            renewing = asyncio.create_task(renew_lease())
            answers = []
            watched_until = time.monotonic() + 10
            while time.monotonic() < watched_until:
                status, doc, _ = await asyncio.to_thread(retry, collector)
                answers.append((status, doc.get("reason")))
                await asyncio.sleep(0.5)  # a device's pace between retries (Retry-After says at least 1 s)
            try:  # a send of a fenced producer is refused
                still_owner = await (await transactional.send(topic + "-scratch", b"still the owner", partition=0))
            except Exception as exc:
                still_owner = exc
            alive.clear()
            await renewing
            return answers, still_owner
        finally:
            await transactional.stop()  # dies with its transaction open
            await log.stop()

    before = topic_counter(broker, topic, dest)
    with CollectorProcess(registry_path, broker.bootstrap_servers, topic, tmp_path, "--instance-id", "lease-b",
                          "--kafka-timeout-ms", "1000") as b:
        answers, still_owner = asyncio.run(scenario(b))
        assert answers and set(answers) == {(503, "idempotency_pending")}, Counter(answers)
        assert not isinstance(still_owner, Exception), f"the live owner's transaction was fenced: {still_owner!r}"
        status, doc, headers = poll_until(lambda: retry(b), 30, "a 202 once the dead owner is fenced",
                                          until=lambda answer: answer[0] == 202, interval=0.5)
        assert headers.get("Idempotent-Replayed") == "true", "the frame sent in the open transaction counts"
    assert topic_counter(broker, topic, dest) - before == Counter(records_of_messages(body, dest))


def cut_batch(broker, topic: str, owner: str, version, seed: int) -> tuple[list[tuple[bytes, str]], Counter]:
    """A shuffled batch of two keyed uploads (3 and 2 reports) as a collector killed in its send would
    leave it: listed, its 3 frames in the redo topic, only frame 0 in the partition. Returns the
    uploads (body, key) and the batch's records."""
    uploads = [(b"".join(single_messages(version, k, seed=seed + k)), secrets.token_urlsafe(18)) for k in (3, 2)]
    records = [r for body, _ in uploads for r in records_of_messages(body, version)]
    order = np.random.default_rng(seed).permutation(len(records))
    shuffled = [records[i] for i in order]
    nonce = os.urandom(16)
    frames = [wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, version.fingerprint, len(part)) + b"".join(part)
              for part in (shuffled[:2], shuffled[2:4], shuffled[4:])]
    headers = [[(wire.SHUFFLE_HEADER, b"5"), (FRAME_HEADER, batch_frame_id(nonce, i, 3))] for i in range(3)]
    listing = encode_batch_listing(nonce, owner, b"old-proc", 1, 0, 0, int(time.time()),
                                   [key_hash(b"", "", key) for _, key in uploads])
    produce(broker.bootstrap_servers, [(topic + "-idempotency", 0, listing, [])]
            + [(topic + "-idempotency-redo", 0, frame, h) for frame, h in zip(frames, headers)]
            + [(topic, 1, frames[0], headers[0])])
    return uploads, Counter(records)


@pytest.mark.integration
@pytest.mark.parametrize("owner, instance", [("ocms-collector-batch-a", "batch-a"), ("ocms-collector-gone", "batch-b")],
                         ids=["own-predecessor", "another-collector"])
def test_a_shuffled_batch_cut_short_by_a_kill_is_completed_from_the_redo_topic(broker, registry_path, dest, tmp_path,
                                                                               owner, instance):
    """Only one of a batch's three frames reached Kafka before its collector died. The collector that
    settles it (the restarted one at its start, or another after fencing the dead one with its
    transactional id) produces the two missing frames from the redo topic: the batch is in Kafka
    once and whole, and the uploads' retries are answered with the stored 202."""
    topic = "eo-batch"
    before = topic_counter(broker, topic, dest)
    uploads, batch = cut_batch(broker, topic, owner, dest, seed=40 if instance == "batch-a" else 50)
    with CollectorProcess(registry_path, broker.bootstrap_servers, topic, tmp_path, "--instance-id", instance,
                          "--kafka-timeout-ms", "1000", *SHUFFLE_ARGS) as c:
        for body, upload_key in uploads:
            deadline = time.monotonic() + 30
            status, doc, headers = request(c.url + "/v1/reports", body, headers={"Idempotency-Key": upload_key})
            while status == 503 and doc["reason"] == "idempotency_pending" and time.monotonic() < deadline:
                time.sleep(0.3)  # another collector's batch: settled after its grace (2 x 1 s + 2 s)
                status, doc, headers = request(c.url + "/v1/reports", body, headers={"Idempotency-Key": upload_key})
            assert (status, headers.get("Idempotent-Replayed")) == (202, "true"), doc
    assert topic_counter(broker, topic, dest) - before == batch, "the batch once, whole"
    assert sorted(log_outcomes(broker, topic + "-idempotency")).count(STORED) >= 1


#: "dest" of the test registry (1-minute buckets) and two metrics with long buckets.
LONG_BUCKETS_YAML = REGISTRY_YAML + """\
  - name: hourly
    description: test metric with 1-hour buckets
    owner: tests@example.com
    integers: 1000
    epsilon: 2
    bucket: 1h
    retention: 30d
  - name: daily
    description: test metric with 1-day buckets
    owner: tests@example.com
    integers: 1000
    epsilon: 2
    bucket: 1d
    retention: 30d
"""


def records_by_version(broker, topic: str, versions) -> dict:
    """The records in the topic per metric version (a frame's fingerprint says whose records it holds)."""
    by_fingerprint = {v.fingerprint: v for v in versions}
    counted = {v.metric: Counter() for v in versions}
    for record in consume(broker.bootstrap_servers, topic):
        version = by_fingerprint.get(wire.HEADER.unpack_from(record.value)[3])
        if version is not None:
            counted[version.metric].update(records_of(record.value, version))
    return counted


@pytest.mark.integration
def test_retries_of_uploads_to_long_bucket_metrics_count_once_at_the_other_replica_and_after_a_restart(broker,
                                                                                                    tmp_path):
    """Issue 35, defect 3: with two collectors sharing the log, retries at the other replica turned 200
    reports of a 1-hour-bucket metric into 400 counted (and of a 1-day one), and after a restart of the same
    collector 10 of 10 retried uploads were stored again: their listings were dated by the frames' bucket
    start and forgotten when a 1-minute metric's listing came. The window here is 120 s, so with listings
    dated by bucket the keys are lost unless the test runs in the first 3 minutes of an hour."""
    topic = "eo-long-buckets"
    broker.create_topics({topic: 2})
    registry = tmp_path / "long-buckets.yaml"
    registry.write_text(LONG_BUCKETS_YAML)
    versions = {name: load_registry(registry).metric(name).version(1) for name in ("hourly", "daily", "dest")}
    uploads = [(b"".join(single_messages(versions[name], 20, seed=7000 + 100 * n + i)), secrets.token_urlsafe(18))
               for n, name in enumerate(("hourly", "daily")) for i in range(10)]
    args = ("--kafka-timeout-ms", "1000", "--idempotency-window-seconds", "120")
    bootstrap = broker.bootstrap_servers
    with CollectorProcess(registry, bootstrap, topic, tmp_path, "--instance-id", "long-a", *args) as a, \
            CollectorProcess(registry, bootstrap, topic, tmp_path, "--instance-id", "long-b", *args) as b:
        for body, upload_key in uploads:
            status, doc, headers = request(a.url + "/v1/reports", body, headers={"Idempotency-Key": upload_key})
            assert (status, headers.get("Idempotent-Replayed")) == (202, None), doc
        for i in range(3):  # later listings, of a metric with 1-minute buckets
            body = b"".join(single_messages(versions["dest"], 2, seed=7500 + i))
            status = request(b.url + "/v1/reports", body, headers={"Idempotency-Key": secrets.token_urlsafe(18)})[0]
            assert status == 202

        def retry_all(collector) -> list:
            return [request(collector.url + "/v1/reports", body, headers={"Idempotency-Key": upload_key})
                    for body, upload_key in uploads]

        answers = poll_until(lambda: retry_all(b), 30, "every retry at the other replica answered",
                             until=lambda got: all(status != 503 for status, _, _ in got), interval=0.5)
        assert [(s, h.get("Idempotent-Replayed")) for s, _, h in answers] == [(202, "true")] * len(uploads)
        a.stop()
        a.start()
        a.wait_healthy()
        answers = poll_until(lambda: retry_all(a), 30, "every retry at the restarted collector answered",
                             until=lambda got: all(status != 503 for status, _, _ in got), interval=0.5)
        assert [(s, h.get("Idempotent-Replayed")) for s, _, h in answers] == [(202, "true")] * len(uploads)
    counted = records_by_version(broker, topic, versions.values())
    for name, (first, last) in (("hourly", (0, 10)), ("daily", (10, 20))):
        sent = Counter(r for body, _ in uploads[first:last] for r in records_of_messages(body, versions[name]))
        assert sum(sent.values()) == 200 and counted[name] == sent, f"{name}: each upload's reports once"


def post_both(urls: list[str], body: bytes, upload_key: str) -> list[int]:
    """The same attempt at every replica at once (a client that gave up on one and tried another)."""
    out: list = [None] * len(urls)

    def one(i):
        out[i] = request(urls[i], body, headers={"Idempotency-Key": upload_key})[0]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(urls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


@pytest.mark.integration
def test_concurrent_attempts_at_two_replicas_store_each_upload_once(broker, registry_path, dest, tmp_path):
    topic = "eo-replicas"
    with CollectorProcess(registry_path, broker.bootstrap_servers, topic, tmp_path, "--instance-id", "rep-a",
                          "--kafka-timeout-ms", "1000") as a, \
            CollectorProcess(registry_path, broker.bootstrap_servers, topic, tmp_path, "--instance-id", "rep-b",
                             "--kafka-timeout-ms", "1000") as b:
        urls = [a.url + "/v1/reports", b.url + "/v1/reports"]
        sent: Counter = Counter()
        answers: Counter = Counter()
        for i in range(40):
            body = b"".join(single_messages(dest, 2, seed=1000 + i))
            upload_key = secrets.token_urlsafe(18)
            statuses = post_both(urls, body, upload_key)
            answers.update(statuses)
            assert set(statuses) <= {202, 503}, statuses
            if 202 not in statuses:  # both in doubt: retry like a device
                poll_until(lambda: [request(url, body, headers={"Idempotency-Key": upload_key})[0] for url in urls], 30,
                           "a 202 from one of the replicas", until=lambda answers: 202 in answers, interval=0.2)
            sent.update(records_of_messages(body, dest))
    assert topic_counter(broker, topic, dest) == sent, "each upload stored once though both replicas took it"
    assert answers[202] >= 40


#: Shuffled batches of at least 48 reports, cut into frames of at most 16: most batches are several
#: frames, so a kill can cut one short (completed from the redo topic by the restarted collector).
SHUFFLE_ARGS = ("--shuffle-min-reports", "48", "--shuffle-max-seconds", "0.5", "--frame-max-reports", "16",
                "--max-upload-reports", "16")


@pytest.mark.integration
@pytest.mark.parametrize("topic, extra", [("eo-kill", ()), ("eo-kill-shuffled", SHUFFLE_ARGS)],
                         ids=["frames", "shuffled"])
def test_sigkill_under_load_with_retrying_devices_counts_every_upload_once(broker, registry_path, dest, topic, extra,
                                                                           tmp_path):
    """SIGKILL the collector under load until at least two uploads whose frame reached Kafka lost
    their 202 to a kill (the case that was stored twice), at least 4 and at most 20 kills; devices retry each
    upload with its key until a 202. Then: the topic holds exactly the accepted reports, the worker
    counts exactly them. With shuffling, a kill may also cut a batch's frames short."""
    with serving_worker(registry_path, broker.bootstrap_servers, topic, tmp_path) as worker:
        collector = CollectorProcess(registry_path, broker.bootstrap_servers, topic, tmp_path,
                                     "--instance-id", "kill-a", *extra).start()
        collector.wait_healthy()
        load = RetryingLoad(collector.url + "/v1/reports", dest, concurrency=24, per_upload=4, seed=7).start()
        kills = 0
        try:
            while kills < 20 and (kills < 4 or sum(o.replayed and o.cut_off for o in list(load.log.outcomes)) < 2):
                load.log.wait_for_accepted(100)
                collector.kill()
                kills += 1
                collector.start()
                collector.wait_healthy()
            load.log.wait_for_accepted(100)
        finally:
            log = load.stop()
            collector.stop()
        assert load.unfinished == 0 and set(log.statuses()) == {202}, log.statuses()
        accepted = log.records(202)
        in_kafka = topic_counter(broker, topic, dest)
        lost, doubled = accepted - in_kafka, in_kafka - accepted
        assert (sum(lost.values()), sum(doubled.values())) == (0, 0), \
            f"lost {sum(lost.values())}, doubled {sum(doubled.values())}"
        replayed_after_kill = sum(o.replayed and o.cut_off for o in log.outcomes)
        assert replayed_after_kill >= 1, f"no 202 was lost to a kill in {kills} kills: the test proved nothing"
        total = sum(accepted.values())
        assert worker.wait_for_n(total)["n"] == total, "the worker counts exactly the accepted reports"
        if extra:
            completed = sum(path.read_text().count("completed a shuffled batch") for path in tmp_path.glob("collector-*"))
            print(f"{kills} kills, {replayed_after_kill} replayed 202s, {completed} batches completed from the redo topic")
