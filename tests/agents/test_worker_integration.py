"""The Faust worker end to end (issue 4, tests 1-6), on the embedded broker and, for the tests that
matter on a real Kafka (exact counts, SIGKILL, a second worker, retention), on librdkafka's mock
cluster with the production ``kafka`` path (tests/brokers.py; issue 29).

Every expectation is an offline cms_core decode of exactly the messages sent
(``fleet.offline``), compared to the integer: match counts and n, and the
estimates computed from them.
"""

from __future__ import annotations

import asyncio
import random
import struct
import threading
import time
from collections import Counter

import numpy as np
import pytest

from cms_core import OCMSParams, OCMSSketch, TrackedValues, wire
from fleet.offline import sketch_from_messages
from infra.kafka import make_consumer

from infra.mock_cluster import start_broker
from tests.brokers import BROKERS, MOCK_MARKS, MOCK_SESSION_ARGS, endpoint, on_brokers
from tests.support.topics import consume
from tests.support.waiting import poll_until

from .harness import Message, Scrape, WorkerProcess, report_messages, send

pytestmark = pytest.mark.integration  # a broker and workers

PARAMS = OCMSParams.build(2.0, 1000)
TRACKED = TrackedValues.range(PARAMS, 0, 1000)
WATCH = "0,1,2,500"
BUCKET = 60
#: The single-metric flags describe the metric "default"; --epsilon is its version 1 (labels carry names).
NAMED = {"metric": "default", "version": "1"}


@pytest.fixture(scope="module", params=BROKERS)
def broker(request):
    with start_broker(request.param) as b:
        yield b


def zipf_values(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.3, n) - 1) % 1000


def offline(messages) -> OCMSSketch:
    sketch, rejected = sketch_from_messages(PARAMS, TRACKED, [m.value for m in messages])
    assert not rejected
    return sketch


def assert_same_as_offline(doc: dict, sketch: OCMSSketch) -> None:
    assert doc["n"] == sketch.n
    assert [r["match_count"] for r in doc["estimates"]] == sketch.counts.tolist()
    expected = sketch.estimate().as_records()
    for got, want in zip(doc["estimates"], expected):
        for field in ("frequency", "count", "std", "ci_low", "ci_high"):
            assert got[field] == want[field], (got["value"], field)


def all_committed(broker, group: str, topic: str, partitions: int = 4) -> bool:
    """True when ``group``'s committed offset is the end of every partition of ``topic``."""
    from aiokafka import TopicPartition

    async def check() -> bool:
        bootstrap, profile = endpoint(broker)
        consumer = make_consumer(bootstrap, profile=profile, group_id=group)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            ends = await consumer.end_offsets(tps)
            committed = [await consumer.committed(tp) for tp in tps]
            return all((c or 0) >= ends[tp] for c, tp in zip(committed, tps))
        finally:
            await consumer.stop()

    return asyncio.run(check())


def start_worker(broker, tmp_path_factory, app_id: str, *args: str) -> WorkerProcess:
    """A worker of ``app_id`` (its topic too); on the mock with short sessions (MOCK_SESSION_ARGS)."""
    log_dir = tmp_path_factory.mktemp(app_id)
    if broker.profile.name == "mock":
        args = (*MOCK_SESSION_ARGS, *args)
    worker = WorkerProcess(broker, app_id, app_id, log_dir, "--epsilon", "2",
                           "--dictionary-size", "1000", "--watch", WATCH, "--bucket-seconds", str(BUCKET), *args)
    return worker.start()


# ------------------------------------------------------------------ tests 1, 5, 6: one fed worker
@pytest.fixture(scope="module")
def fed(broker, tmp_path_factory):
    """100,000 reports (99 frames of 1,000 spread over the last ~10 minutes + 1,000 single reports)."""
    worker = start_worker(broker, tmp_path_factory, "it-main")
    try:
        worker.wait_healthy()
        now_ms = int(time.time() * 1000)
        frames = report_messages(PARAMS, zipf_values(99_000, 1), 1000, seed=2,
                                 timestamps_ms=[now_ms - 600_000 + i * 6_000 for i in range(99)])
        singles = report_messages(PARAMS, zipf_values(1_000, 3), 1, seed=4, timestamps_ms=[now_ms - 20_000] * 1000)
        messages = frames + singles
        random.Random(5).shuffle(messages)
        send(broker, worker.topic, messages)
        worker.wait_for_n(100_000)
        yield worker, messages
    finally:
        worker.stop()


def test_1_estimates_equal_offline_decode_exactly(fed):
    worker, messages = fed
    status, doc = worker.get("/estimates")
    assert status == 200 and doc["window"] == {"kind": "total"}
    assert_same_as_offline(doc, offline(messages))
    status, one = worker.get("/estimates/7")
    assert status == 200 and one["estimate"] == doc["estimates"][7]
    status, top = worker.get("/topk", k="5")
    assert [int(r["value"]) for r in top["top"]] == sorted(range(1000), key=lambda v: -doc["estimates"][v]["frequency"])[:5]
    status, params = worker.get("/params")
    assert params["parameter_sets"][0]["fingerprint"] == PARAMS.fingerprint.hex()
    assert params["parameter_sets"][0]["reports"] == 100_000


def test_5_trend_and_ranges_equal_offline_decode_of_their_reports(fed):
    worker, messages = fed
    stamps = [m.timestamp_ms / 1000 for m in messages]
    lo = (int(min(stamps)) // BUCKET + 2) * BUCKET  # a range strictly inside the data
    hi = lo + 5 * BUCKET
    status, trend = worker.get("/trend", value="3", **{"from": str(lo), "to": str(hi), "step": "60"})
    assert status == 200, trend
    assert [p["from"] for p in trend["points"]] == list(range(lo, hi, BUCKET))
    for point in trend["points"]:
        inside = [m for m, t in zip(messages, stamps) if point["from"] <= t < point["to"]]
        sketch = offline(inside)
        assert point["n"] == sketch.n > 0
        assert point["match_count"] == int(sketch.counts[3])
        assert point["frequency"] == sketch.estimate().as_records()[3]["frequency"]
    status, coarse = worker.get("/trend", value="3", **{"from": str(lo), "to": str(hi), "step": "2m"})
    assert [p["n"] for p in coarse["points"]] == [
        sum(p["n"] for p in trend["points"][i:i + 2]) for i in range(0, 5, 2)
    ]
    status, ranged = worker.get("/estimates", **{"from": str(lo), "to": str(hi)})
    assert ranged["window"] == {"kind": "range", "from": lo, "to": hi, "bucket_seconds": BUCKET}
    assert_same_as_offline(ranged, offline([m for m, t in zip(messages, stamps) if lo <= t < hi]))
    status, bad = worker.get("/trend", value="3", step="45")
    assert status == 400 and bad["parameter"] == "step"
    for query, name in [({"confidence": "2"}, "confidence"), ({"k": "0"}, "k"), ({"from": "yesterday-ish"}, "from"),
                        ({"params": "00"}, "params"), ({"postprocess": "magic"}, "postprocess")]:
        status, bad = worker.get("/topk", **query)
        assert status == 400 and bad["parameter"] == name, bad
    assert worker.get("/estimates/abc")[0] == 400
    assert worker.get("/estimates/5000")[0] == 404


def test_6_metrics_equal_the_api(fed):
    worker, _ = fed
    scrape = Scrape.parse(worker.text("/metrics"))
    fp = PARAMS.fingerprint.hex()
    status, total = worker.get("/estimates")
    start = int(scrape.get("ocms_latest_bucket_start_timestamp_seconds", **NAMED))
    status, latest = worker.get("/estimates", **{"from": str(start), "to": str(start + BUCKET)})
    assert latest["n"] > 0
    fields = {"ratio": "frequency", "count": "count", "stddev_ratio": "std", "ci_lower_ratio": "ci_low",
              "ci_upper_ratio": "ci_high", "ci_lower_count": "count_ci_low", "ci_upper_count": "count_ci_high"}
    exported = {dict(labels)["value"] for labels in scrape.series("ocms_estimate_ratio")}
    top = {r["value"] for r in worker.get("/topk", k="20")[1]["top"]}
    assert exported == {"0", "1", "2", "500"} | {str(v) for v in top}
    assert scrape.get("ocms_estimate_values_omitted", **NAMED) == 1000 - len(exported)
    for window, doc in (("total", total), ("latest_bucket", latest)):
        assert scrape.get("ocms_params_reports", **NAMED, window=window) == doc["n"]
        for value in exported:
            record = doc["estimates"][int(value)]
            for suffix, field in fields.items():
                got = scrape.get(f"ocms_estimate_{suffix}", **NAMED, value=value, window=window)
                assert got == record[field], (window, value, suffix)
    assert scrape.get("ocms_reports_accepted_total", **NAMED) == 100_000
    assert scrape.get("ocms_params_info", **NAMED, fingerprint=fp, mechanism="ocms", epsilon="2",
                      hash_range=str(PARAMS.hash_range), field=PARAMS.describe()["field"], mode="mse") == 1.0


# ------------------------------------------------------------------ test 2: SIGKILL x3
def kill_while_streaming(broker, worker, app_id: str, messages, total: int, *, thresholds, interval: float,
                         rate: float, before_kill=lambda: None) -> list[int]:
    """Send ``messages`` (``total`` reports) at ``rate`` while a thread SIGKILLs and restarts ``worker`` as its count
    passes each threshold (``before_kill()`` first); then check it was killed mid-stream, that its
    counts equal the offline decode, and that nothing is left to replay (every source message
    committed, nothing pending). Returns the counts seen at the kills."""
    progress, failures = [], []

    def killer():
        try:
            for threshold in thresholds:  # SIGKILL as the count passes each
                # 503 (no "n") while a restarted worker rebuilds its share of the view
                progress.append(poll_until(lambda: worker.get("/estimates")[1].get("n", -1), 120,
                                           f"n to reach {threshold}", until=lambda n: n >= threshold, interval=interval))
                before_kill()
                worker.kill()
                worker.start()
        except BaseException as exc:  # surfaced by the main thread
            failures.append(exc)

    thread = threading.Thread(target=killer)
    try:
        thread.start()
        send(broker, worker.topic, messages, rate=rate)
        thread.join()
        assert not failures, failures
        assert any(0 < p < total for p in progress), progress  # killed mid-stream
        doc = worker.wait_for_n(total, timeout=120)
        assert_same_as_offline(doc, offline(messages))
        # Nothing arrives late and double counted: once every source message is committed
        # (each only after its checkpoint) and nothing is pending, no replay is left.
        poll_until(lambda: all_committed(broker, app_id, worker.topic)
                   and worker.get("/healthz")[1]["pending_reports"] == 0, 60, "the source topic committed and nothing pending")
        assert worker.get("/estimates")[1]["n"] == total
    finally:
        thread.join()
    return progress


@pytest.mark.parametrize("broker, store", [("embedded", "memory"), ("embedded", "rocksdb"),
                                           pytest.param("mock", "memory", marks=MOCK_MARKS, id="mock-memory")],
                         indirect=["broker"])
def test_2_sigkill_three_times_mid_stream_still_exact(broker, tmp_path_factory, store):
    """memory: state rebuilt from the changelog; rocksdb (production): local state survives the kill
    and may be ahead of the changelog, which replayed keys re-assert."""
    app_id = f"it-kill-{store}"
    store_url = "memory://" if store == "memory" else "rocksdb://" + str(tmp_path_factory.mktemp("rocks"))
    worker = start_worker(broker, tmp_path_factory, app_id, "--batch-max-seconds", "0.1", "--store", store_url)
    worker.wait_healthy()
    messages = report_messages(PARAMS, zipf_values(60_000, 11), 200, seed=12)
    try:  # 300 frames over ~12 s
        kill_while_streaming(broker, worker, app_id, messages, 60_000, thresholds=(10_000, 25_000, 40_000),
                             interval=0.05, rate=25)
        assert worker.starts == 4
    finally:
        worker.stop()


@on_brokers("embedded")
def test_2b_sigkill_while_checkpoints_run_behind_the_intake_still_exact(broker, tmp_path_factory):
    """Full batches (400 reports: two frames) checkpointed behind the intake, acks chained, commits
    coalesced and batches grown under load (agents.app.OCMSWorker.batch_full), SIGKILLed three times
    while the stream and then each restart's backlog are counted: exact all the same, and the
    workers did grow batches past batch_max_reports (the path under test did run)."""
    app_id = "it-kill-behind"
    worker = start_worker(broker, tmp_path_factory, app_id, "--batch-max-reports", "400")
    worker.wait_healthy()
    messages = report_messages(PARAMS, zipf_values(60_000, 13), 200, seed=14)
    grown = []

    def grown_batches() -> float:
        """Batches of this worker process above 1,000 reports (2.5 x batch_max_reports: grown under load)."""
        scrape = Scrape.parse(worker.text("/metrics"))
        return scrape.get("ocms_batch_reports_count") - scrape.get("ocms_batch_reports_bucket", le="1000.0")

    try:  # 300 frames over ~3 s
        kill_while_streaming(broker, worker, app_id, messages, 60_000, thresholds=(8_000, 24_000, 40_000),
                             interval=0.02, rate=100, before_kill=lambda: grown.append(grown_batches()))
        grown.append(grown_batches())
        assert sum(grown) > 0, grown
    finally:
        worker.stop()


@on_brokers("embedded")
def test_a_clean_stop_flushes_the_pending_batch(broker, tmp_path_factory):
    """SIGTERM with a micro-batch pending: it is written and acked before exit, so the
    restarted worker shows it at once instead of replaying it after the batch timer."""
    slow_batches = ("--batch-max-seconds", "60")
    worker = start_worker(broker, tmp_path_factory, "it-clean-stop", *slow_batches)
    worker.wait_healthy()
    messages = report_messages(PARAMS, zipf_values(500, 21), 1, seed=22)
    send(broker, worker.topic, messages)
    poll_until(lambda: worker.get("/healthz")[1]["pending_reports"], 30, "the 500 reports pending",
               until=lambda pending: pending >= 500)
    assert worker.get("/estimates")[1]["n"] == 0  # still pending: the 60 s timer has not fired
    started = time.monotonic()
    worker.stop()
    assert worker.process.returncode == 0 and time.monotonic() - started < 10
    log = next(worker.log_dir.glob("*-1.log")).read_text()
    assert "wait_empty" not in log, log[-2000:]
    worker.start()
    try:
        worker.wait_healthy()
        doc = worker.wait_for_n(500, timeout=15)  # far less than the 60 s a replayed batch would wait
        assert_same_as_offline(doc, offline(messages))
    finally:
        worker.stop()


# ------------------------------------------------------------------ test 3: two workers
# Not on the mock: when a second member joins, librdkafka 2.0.2's mock answers the follower's SyncGroup
# INVALID_REQUEST in a state where Kafka answers REBALANCE_IN_PROGRESS (2 of 3 tries, staggered starts too),
# and aiokafka 0.14 then never rejoins (docs/operating.md, broker profiles).
@on_brokers("embedded")
def test_3_two_workers_answer_like_one(broker, tmp_path_factory):
    a = start_worker(broker, tmp_path_factory, "it-two")
    b = WorkerProcess(broker, "it-two", "it-two", a.log_dir, *a.args).start()
    try:
        a.wait_healthy()
        b.wait_healthy()
        messages = report_messages(PARAMS, zipf_values(40_000, 21), 200, seed=22)
        messages += report_messages(PARAMS, zipf_values(500, 23), 1, seed=24)
        send(broker, a.topic, messages, rate=200)
        doc_a, doc_b = a.wait_for_n(40_500), b.wait_for_n(40_500)
        assert doc_a == doc_b
        assert_same_as_offline(doc_a, offline(messages))
        owned = [set(w.get("/healthz")[1]["assigned_partitions"]) for w in (a, b)]
        assert owned[0] and owned[1] and not owned[0] & owned[1] and owned[0] | owned[1] == {0, 1, 2, 3}
        scrapes = [Scrape.parse(w.text("/metrics")) for w in (a, b)]
        # Each worker exports the series of the metrics its share holds (the default --view share):
        # one metric here, so exactly one worker exports it, and max without (instance) still
        # gives one series per value. With --view all both would export the same series.
        for name in ("ocms_estimate_ratio", "ocms_estimate_ci_upper_count"):
            series = [{k: v for k, v in s.series(name).items() if dict(k)["window"] == "total"} for s in scrapes]
            assert sorted(map(bool, series)) == [False, True], [len(s) for s in series]
        for labels, upper in (series[0] or series[1]).items():  # the exporting worker's figures are the answers'
            assert upper == doc_a["estimates"][int(dict(labels)["value"])]["count_ci_high"]
        accepted = sum(s.get("ocms_reports_accepted_total", **NAMED) for s in scrapes
                       if ("ocms_reports_accepted_total", frozenset(NAMED.items())) in s.samples)
        assert accepted == 40_500  # each report counted by exactly one worker
    finally:
        a.stop()
        b.stop()


# ------------------------------------------------------------------ test 4: malformed storm
def malformed_messages(now_ms: int) -> list[tuple[Message, str]]:
    rng = np.random.default_rng(31)
    good = report_messages(PARAMS, np.arange(10), 10, seed=32)[0].value
    single = report_messages(PARAMS, np.arange(1), 1, seed=33)[0].value
    other = OCMSParams.build(4.0, 1000)
    header = bytearray(good[:16])
    bad_version = bytes([0x4F, 0x43, 2]) + good[3:]
    bad_kind = good[:3] + bytes([3]) + good[4:]
    out = [
        (Message(b"", b"k"), "empty"),
        (Message(None, b"tombstone"), "empty"),
        (Message(b"X" + rng.bytes(99), b"k"), "bad_magic"),
        (Message(b'{"foreign": "json", "value": 3}', b"k"), "bad_magic"),
        (Message(rng.bytes(4096).replace(b"OC", b"XX"), b"k"), "bad_magic"),
        (Message(bad_version, b"k"), "bad_version"),
        (Message(bad_kind, b"k"), "bad_kind"),
        (Message(report_messages(other, np.arange(5), 5, seed=34)[0].value, b"k"), "unknown_fingerprint"),
        (Message(good[:-3], b"k"), "truncated"),
        (Message(good[:9], b"k"), "truncated"),
        (Message(good + b"\0", b"k"), "oversized"),
        (Message(good + good[16:21], b"k"), "count_mismatch"),
        (Message(bytes(header[:12]) + struct.pack(">I", 0), b"k"), "count_mismatch"),
        (Message(single[:16] + b"\xff\xff" + single[18:], b"k"), "coefficient_out_of_field"),
        (Message(single[:-1] + b"\xff", b"k"), "z_out_of_range"),
        (Message(good, b"k", now_ms - 2 * 3_600_000), "expired"),
        (Message(good, b"k", now_ms + 3_600_000), "future_timestamp"),
    ]
    return out * 3


@on_brokers("embedded")
def test_4_malformed_storm_goes_to_the_dead_letter_topic(broker, tmp_path_factory):
    worker = start_worker(broker, tmp_path_factory, "it-storm", "--retention-seconds", "3600")
    try:
        worker.wait_healthy()
        valid = report_messages(PARAMS, zipf_values(10_000, 41), 500, seed=42)
        valid += report_messages(PARAMS, zipf_values(200, 43), 1, seed=44)
        bad = malformed_messages(int(time.time() * 1000))
        mixed = valid + [m for m, _ in bad]
        random.Random(45).shuffle(mixed)
        send(broker, worker.topic, mixed)
        doc = worker.wait_for_n(10_200)
        records = consume(broker, worker.topic + "-dlq", len(bad))
        assert len(records) == len(bad)
        reasons = Counter(dict(r.headers)["ocms-reject-reason"].decode() for r in records)
        assert reasons == Counter(reason for _, reason in bad)
        sent = Counter((m.value or b"") for m, _ in bad)
        assert Counter((r.value or b"") for r in records) == sent  # original bytes kept
        assert_same_as_offline(worker.get("/estimates")[1], offline(valid))
        assert doc["n"] == 10_200
        scrape = Scrape.parse(worker.text("/metrics"))
        for reason, count in reasons.items():
            assert scrape.get("ocms_reports_rejected_total", reason=reason) == count
        assert worker.alive() and worker.get("/healthz")[0] == 200
    finally:
        worker.stop()


# ------------------------------------------------------------------ retention (issue 17)
RETENTION_S = 12  # 1 s buckets; long enough that the buckets below outlive the first worker


def view_keys(worker: WorkerProcess) -> int:
    return worker.get("/healthz")[1]["view_keys"]


def start_retention_worker(broker, log_dir, app_id: str, store: str = "memory://") -> WorkerProcess:
    session = MOCK_SESSION_ARGS if broker.profile.name == "mock" else ()
    return WorkerProcess(broker, app_id, app_id, log_dir, *session, "--epsilon", "2", "--dictionary-size",
                         "1000", "--bucket-seconds", "1", "--retention-seconds", str(RETENTION_S),
                         "--store", store).start()


def old_bucket_messages(seed: int) -> list[Message]:
    """Four frames of 10 reports in the four 1 s buckets before now, all with one key (one
    partition): 4 bucket keys + 1 cumulative key, expiring about RETENTION_S - 3 s from now."""
    second = int(time.time())
    stamps = [(second - back) * 1000 + 500 for back in (4, 3, 2, 1)]
    frames = report_messages(PARAMS, zipf_values(40, seed), 10, seed=seed + 1, timestamps_ms=stamps)
    return [Message(m.value, b"one-device", m.timestamp_ms) for m in frames]


@pytest.mark.parametrize("broker, store", [("embedded", "memory"), ("embedded", "rocksdb"),
                                           pytest.param("mock", "memory", marks=MOCK_MARKS, id="mock-memory")],
                         indirect=["broker"])
def test_retention_survives_a_sigkill_and_restart(broker, tmp_path_factory, store):
    """Issue 17 reproduction: buckets written before a SIGKILL are still deleted after the
    restart (tombstones in the changelog, so the view shrinks), not kept for ever; with
    RocksDB the index is rebuilt from the local store, with memory from the changelog."""
    app_id = f"it-retention-{store}"
    store_url = "memory://" if store == "memory" else "rocksdb://" + str(tmp_path_factory.mktemp("rocks"))
    worker = start_retention_worker(broker, tmp_path_factory.mktemp(app_id), app_id, store_url)
    try:
        worker.wait_healthy()
        send(broker, worker.topic, old_bucket_messages(51))
        worker.wait_for_n(40, timeout=30)
        assert view_keys(worker) == 5  # precondition: nothing expired before the kill
        worker.kill()
        worker.start()
        worker.wait_healthy()
        # A report 20 s ahead: its bucket outlives the old ones, so "2 keys" is a stable state.
        ahead = int((time.time() + 20) * 1000)
        later = report_messages(PARAMS, zipf_values(10, 53), 10, seed=54, timestamps_ms=[ahead])
        send(broker, worker.topic, [Message(later[0].value, b"one-device", ahead)])
        worker.wait_for_n(50, timeout=30)
        poll_until(lambda: view_keys(worker), 45, "the four expired buckets written before the restart deleted",
                   until=lambda keys: keys == 2)
        assert worker.get("/estimates")[1]["n"] == 50  # the cumulative key keeps every report
    finally:
        worker.stop()


@on_brokers("embedded")
def test_retention_deletes_buckets_of_a_partition_that_moved(broker, tmp_path_factory):
    """The owner of the partition is SIGKILLed before its buckets expire; the worker that
    takes the partition over deletes them from the changelog, so its view shrinks too."""
    log_dir = tmp_path_factory.mktemp("it-retention-moved")
    workers = [start_retention_worker(broker, log_dir, "it-retention-moved") for _ in range(2)]
    try:
        for w in workers:
            w.wait_healthy()
        send(broker, workers[0].topic, old_bucket_messages(61))
        for w in workers:
            w.wait_for_n(40, timeout=30)

        def accepted(w: WorkerProcess) -> float:
            return Scrape.parse(w.text("/metrics")).samples.get(
                ("ocms_reports_accepted_total", frozenset(NAMED.items())), 0.0)

        owner, heir = sorted(workers, key=accepted, reverse=True)
        assert accepted(owner) == 40 and accepted(heir) == 0
        # precondition: nothing expired yet; the metric's 5 keys are in the view of the worker whose
        # share holds it (--view share), which need not be the owner of the reports' partition
        assert sorted(view_keys(w) for w in workers) == [0, 5]
        owner.kill()
        poll_until(lambda: set(heir.get("/healthz")[1]["assigned_partitions"]), 30,
                   "the surviving worker to take over every partition", until=lambda assigned: assigned == {0, 1, 2, 3})
        poll_until(lambda: view_keys(heir), 45, "the buckets of the partition that moved deleted",
                   until=lambda keys: keys == 1)
        assert heir.get("/estimates")[1]["n"] == 40
    finally:
        for w in workers:
            w.stop()
