"""Shuffling in the collector (--shuffle-min-reports, --shuffle-max-seconds; collector/shuffle.py).

What Kafka must show: the reports of one batch in an order independent of their arrival (a
permutation statistic, with a collector that does not shuffle as the negative control), one
timestamp per batch, frames cut at sizes that depend on the batch alone, no key and no header
that differs between uploads; what the devices must see: a 202 only once the batch is in Kafka.
The worker's central epsilon of shuffled windows is checked end to end at the bottom.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import secrets
import struct
from collections import Counter

import numpy as np
import pytest

from cms_core import claims, wire
from cms_core.planning import shuffle_delta
from cms_core.shuffle import central_epsilon
from collector.exactly_once.log import BATCH_LISTING, FRAME_HEADER, decode_listing, parse_batch_frame_id
from infra.broker import EmbeddedBroker

from tests.support.topics import consume
from tests.support.waiting import poll_until

from .harness import CollectorProcess, collector_metric, records_of, request, serving_worker

SHUFFLED, PLAIN, SHORT, COUNTED, FLEET = "shuf-batches", "shuf-plain", "shuf-short", "shuf-counted", "shuf-fleet"
CLAIM_KEY = secrets.token_hex(32).encode()
N = 200  # reports per shuffled batch


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        b.create_topics({SHUFFLED: 1, PLAIN: 1, SHORT: 1, COUNTED: 4, FLEET: 2})
        yield b


# ---------------------------------------------------------------- the permutation (no broker)
def seeded_urandom(seed: int):
    """A stand-in for os.urandom with a fixed seed (the real CSPRNG cannot be seeded)."""
    rng = np.random.default_rng(seed)
    return lambda size: rng.bytes(size)


def test_fisher_yates_gives_each_draw_sequence_its_own_permutation(monkeypatch):
    """With draws j_i uniform in [0, i] the permutations are uniform iff the n! draw sequences give n!
    distinct permutations: checked for n = 5 by feeding every sequence."""
    import collector.shuffle as shuffle

    n, seen = 5, set()
    for draws in itertools.product(*(range(b) for b in range(n, 1, -1))):
        monkeypatch.setattr(shuffle, "uniform_below", lambda bounds, d=draws: np.asarray(d, np.uint64))
        seen.add(tuple(shuffle.secure_permutation(n)))
    assert len(seen) == math.factorial(n) and all(sorted(p) == list(range(n)) for p in seen)


def test_uniform_below_rejects_the_words_that_would_favour_small_values(monkeypatch):
    """2^64 = 1 (mod 3): the one word 2^64 - 1 would make 0 likelier than 1 and 2; it is drawn again."""
    import collector.shuffle as shuffle

    words = [np.array([2**64 - 1, 7], np.uint64).tobytes(), np.array([5], np.uint64).tobytes()]
    monkeypatch.setattr(shuffle.os, "urandom", lambda size: words.pop(0)[:size])
    assert shuffle.uniform_below(np.array([3, 3], np.uint64)).tolist() == [5 % 3, 7 % 3]
    assert words == []


def test_secure_permutation_is_uniform_and_a_biased_shuffle_is_caught(monkeypatch):
    """60,000 permutations of 4 (seeded stand-in for os.urandom): each of the 24 orders about 2,500 times,
    chi-square under its 1e-4 critical value (df 23: 52.6). Negative control: the classic wrong shuffle
    (j uniform over all n positions) fails the same test."""
    import collector.shuffle as shuffle

    monkeypatch.setattr(shuffle.os, "urandom", seeded_urandom(28))
    n, draws = 4, 60_000
    counts = Counter(tuple(shuffle.secure_permutation(n)) for _ in range(draws))
    critical = 52.62  # scipy.stats.chi2.isf(1e-4, 23)

    def chi2(counts) -> float:
        expected = draws / math.factorial(n)
        return sum((counts.get(p, 0) - expected) ** 2 / expected for p in itertools.permutations(range(n)))

    assert len(counts) == 24 and chi2(counts) < critical
    rng = np.random.default_rng(28)

    def naive() -> tuple:
        order = list(range(n))
        for i in range(n):
            j = int(rng.integers(0, n))
            order[i], order[j] = order[j], order[i]
        return tuple(order)

    assert chi2(Counter(naive() for _ in range(draws))) > critical


def test_the_shuffle_draws_from_os_urandom_not_random(monkeypatch):
    import random

    import collector.shuffle as shuffle

    calls = []
    real = os.urandom
    monkeypatch.setattr(shuffle.os, "urandom", lambda size: calls.append(size) or real(size))
    for name in ("random", "randrange", "randint", "shuffle", "getrandbits"):
        monkeypatch.setattr(random, name, lambda *a, **k: pytest.fail("Python's random module was used"))
    assert sorted(shuffle.secure_permutation(1000)) == list(range(1000))
    assert calls and sum(calls) >= 8 * 999


def test_frames_are_cut_at_sizes_set_by_the_batch_size_alone():
    from collector.shuffle import frame_sizes

    assert frame_sizes(200, 64) == [50, 50, 50, 50]
    assert frame_sizes(10, 64) == [10]
    assert frame_sizes(129, 64) == [43, 43, 43]
    assert all(sum(frame_sizes(n, 16)) == n and max(frame_sizes(n, 16)) <= 16 for n in range(1, 500))


def test_a_batch_closes_at_the_upload_that_reaches_min_reports_even_inside_a_group_validated_together(dest):
    """Uploads submitted in one event-loop turn are validated as one group; the batch still closes at the
    upload that reaches --shuffle-min-reports, so a batch holds at most that many uploads: the keys its
    listing names, which --idempotency-max-keys is checked against (collector/settings.py). It used to close
    after the whole group: 15 keys in a batch of min_reports 10."""
    from collector.lanes import ShuffleLane

    class Outlet:
        batches: list = []

        def send(self, batch):
            self.batches.append(batch)

    async def main():
        outlet = Outlet()
        lane = ShuffleLane(dest, outlet, 64, 0.005, 60, min_reports=10, max_seconds=600)
        bodies = [indexed_report(dest, i)[wire.HEADER_SIZE:] for i in range(25)]
        futures = [lane.submit(body, 1, key=i.to_bytes(16, "big")) for i, body in enumerate(bodies)]
        await asyncio.sleep(0)  # the drain scheduled by the first submit starts: one group of all 25
        await asyncio.gather(*lane.drains)
        assert lane.held == 5, "the last 5 uploads wait for the next batch"
        await lane.close()  # hands them over as a short batch
        return outlet.batches, futures

    batches, futures = asyncio.run(main())
    assert [len(b.keys) for b in batches] == [10, 10, 5]
    assert [b.reports for b in batches] == [10, 10, 5]
    assert [index_of(b.records[i * b.record_size:]) for b in batches for i in range(b.reports)] == list(range(25))
    assert [w.future for b in batches for w in b.members] == futures


# ------------------------------------------------------------------------ against a broker
def indexed_report(version, i: int) -> bytes:
    """A single-report message whose record says ``i`` (a0 = i; a valid report of metric "dest")."""
    record = struct.pack(">HH", i, 1) + b"\x00" * version.params.z_bytes
    return wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_REPORT, version.fingerprint, 1) + record


def index_of(record: bytes) -> int:
    return struct.unpack(">H", record[:2])[0]


async def _upload_in_order(port: int, bodies: list[bytes]) -> list[int]:
    """Each body on its own connection, sent one after the other (request i is on the wire before
    request i + 1 is written); the answers (each waits for its batch) read afterwards."""
    streams = []
    for body in bodies:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/metrics/dest/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.ocms.wire-v1\r\n"
                     b"Idempotency-Key: " + secrets.token_urlsafe(18).encode() +
                     b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        await asyncio.sleep(0.002)  # spacing, so that arrival order is the order written
        streams.append((reader, writer))
    statuses = []
    for reader, writer in streams:
        line = await asyncio.wait_for(reader.readline(), 120)
        statuses.append(int(line.split()[1]))
        writer.close()
    return statuses


def upload_in_order(collector, bodies: list[bytes]) -> list[int]:
    return asyncio.run(_upload_in_order(collector.port, bodies))


def spearman(order: list[int]) -> float:
    """Rank correlation of the arrival index of each report with its position in Kafka."""
    ranks = np.argsort(np.argsort(np.asarray(order)))
    positions = np.arange(len(order))
    return float(np.corrcoef(ranks, positions)[0, 1])


def produced_batches(broker, topic) -> list[list]:
    """The topic's frames grouped by batch (the nonce of their ocms-frame header), in offset order."""
    batches: dict[bytes, list] = {}
    for record in consume(broker.bootstrap_servers, topic):
        batches.setdefault(parse_batch_frame_id(dict(record.headers)[FRAME_HEADER])[0], []).append(record)
    return list(batches.values())


@pytest.fixture(scope="module")
def shuffling(broker, registry_path, tmp_path_factory):
    """Batches of 200 reports cut into frames of at most 64 (max seconds long: batches close by size), their
    claims signed with CLAIM_KEY."""
    folder = tmp_path_factory.mktemp("shuffling")
    (folder / "claim.key").write_bytes(CLAIM_KEY)
    with CollectorProcess(registry_path, broker.bootstrap_servers, SHUFFLED, folder,
                          "--shuffle-min-reports", str(N), "--shuffle-max-seconds", "600", "--frame-max-reports", "64",
                          "--max-upload-reports", "64", "--reject-delay-ms", "0",
                          "--shuffle-claim-key-file", str(folder / "claim.key")) as c:
        yield c


@pytest.mark.integration
def test_a_batch_reaches_kafka_in_an_order_independent_of_arrival(broker, shuffling, registry_path, dest, tmp_path):
    """Uploads 0..199 arrive in order; Kafka holds them in a uniformly random order: the rank correlation
    of arrival and position is about N(0, 1/(N-1)), |rho| < 5 sd (false alarm ~ 6e-7). Two batches give
    two different orders. A collector without shuffling (the negative control) keeps arrival order."""
    orders = []
    for first in (0, N):
        statuses = upload_in_order(shuffling, [indexed_report(dest, i) for i in range(first, first + N)])
        assert statuses == [202] * N
        batch = produced_batches(broker, SHUFFLED)[-1]
        order = [index_of(r) - first for record in batch for r in records_of(record.value, dest)]
        assert sorted(order) == list(range(N)), "every report of the batch once, nothing else"
        orders.append(order)
    bound = 5 / math.sqrt(N - 1)
    for order in orders:
        assert order != sorted(order)
        assert abs(spearman(order)) < bound, f"rank correlation {spearman(order):.3f} with arrival order"
    assert orders[0] != orders[1], "the order differs from batch to batch"

    with CollectorProcess(registry_path, broker.bootstrap_servers, PLAIN, tmp_path, "--reject-delay-ms", "0") as plain:
        assert upload_in_order(plain, [indexed_report(dest, i) for i in range(N)]) == [202] * N
    fifo = [index_of(r) for record in consume(broker.bootstrap_servers, PLAIN) for r in records_of(record.value, dest)]
    assert sorted(fifo) == list(range(N))
    assert spearman(fifo) > 0.9, "negative control: without shuffling Kafka keeps the arrival order"


@pytest.mark.integration
def test_a_batch_has_one_timestamp_equal_frames_and_no_per_upload_header_or_key(broker, shuffling, dest):
    """Every frame of a batch: no key, the batch's one timestamp (a bucket start), the same
    ocms-shuffle-n and ocms-shuffle-batch, a MAC of its own bytes that verifies under the claim key
    (cms_core.claims), and an ocms-frame header that differs between frames only by the frame's index;
    frames are cut at sizes set by n alone. The idempotency log lists the batch's 200 keys in one
    listing (a key maps to its batch, never to a frame); the redo topic holds the batch's frames."""
    statuses = upload_in_order(shuffling, [indexed_report(dest, i) for i in range(N)])
    assert statuses == [202] * N
    batch = produced_batches(broker, SHUFFLED)[-1]
    assert [len(records_of(r.value, dest)) for r in batch] == [50, 50, 50, 50], "4 frames of 200 / 4"
    assert {r.key for r in batch} == {None}
    assert len({r.timestamp for r in batch}) == 1 and batch[0].timestamp % 60_000 == 0
    nonces, batch_ids = set(), set()
    for index, record in enumerate(batch):
        headers = dict(record.headers)
        assert set(headers) == {wire.SHUFFLE_HEADER, FRAME_HEADER, claims.BATCH_HEADER, claims.MAC_HEADER}, \
            record.headers
        assert headers[wire.SHUFFLE_HEADER] == str(N).encode()
        assert claims.verify(CLAIM_KEY, record.headers, record.value, 50) == (N, None)
        batch_ids.add(headers[claims.BATCH_HEADER])
        nonce, position, count = parse_batch_frame_id(headers[FRAME_HEADER])
        assert (position, count) == (index, 4)
        nonces.add(nonce)
    assert len(nonces) == 1 and len(batch_ids) == 1
    log = consume(broker.bootstrap_servers, SHUFFLED + "-idempotency")
    listings = [decode_listing(r.value, r.offset, 0.0) for r in log if r.value[:1] == BATCH_LISTING]
    mine = [x for x in listings if x.nonce in nonces]
    assert len(mine) == 1 and len(mine[0].keys) == N, "one listing naming every key of the batch"
    redo = consume(broker.bootstrap_servers, SHUFFLED + "-idempotency-redo")
    assert sorted(r.value for r in redo if parse_batch_frame_id(dict(r.headers)[FRAME_HEADER])[0] in nonces) == \
        sorted(r.value for r in batch)


@pytest.mark.integration
def test_uploads_wait_for_their_batch_and_a_short_batch_closes_after_max_seconds(broker, registry_path, dest,
                                                                                   tmp_path):
    """Nothing of a batch is in Kafka, and no upload of it answered, while it holds fewer than N
    reports; the N-th report closes it and all are answered 202. With --shuffle-max-seconds a batch
    that never fills is produced with what it holds, and its header says how many."""
    import threading

    with CollectorProcess(registry_path, broker.bootstrap_servers, SHORT, tmp_path, "--shuffle-min-reports", "10",
                          "--shuffle-max-seconds", "600", "--reject-delay-ms", "0") as c:
        answers: list = []
        threads = [threading.Thread(target=lambda i=i: answers.append(
            request(c.url + "/v1/reports", indexed_report(dest, i))[0])) for i in range(9)]
        for t in threads:
            t.start()
        poll_until(lambda: collector_metric(c, "ocms_collector_shuffle_held_reports"), 30, "9 reports held",
                   until=lambda held: held == 9)
        assert answers == [] and consume(broker.bootstrap_servers, SHORT, idle_s=0.5) == []
        assert request(c.url + "/v1/reports", indexed_report(dest, 9))[0] == 202
        for t in threads:
            t.join(30)
        assert answers == [202] * 9
    records = consume(broker.bootstrap_servers, SHORT)
    assert Counter(dict(r.headers)[wire.SHUFFLE_HEADER] for r in records) == {b"10": 1}

    with CollectorProcess(registry_path, broker.bootstrap_servers, SHORT, tmp_path, "--shuffle-min-reports", "1000",
                          "--shuffle-max-seconds", "0.5") as c:
        upload = {"fingerprint": dest.fingerprint.hex(),  # JSON: the reports are encoded again before the shuffle
                  "reports": [{"a0": str(100 + i), "a1": "1", "z": "0"} for i in range(3)]}
        assert request(c.url + "/v1/reports", json.dumps(upload).encode(), content_type="application/json")[0] == 202
    last = consume(broker.bootstrap_servers, SHORT)[-1]
    assert dict(last.headers)[wire.SHUFFLE_HEADER] == b"3"
    assert sorted(records_of(last.value, dest)) == sorted(records_of(indexed_report(dest, 100 + i), dest)[0]
                                                          for i in range(3))


@pytest.mark.integration
def test_ocms_simulate_keeps_uploads_in_flight_so_batches_fill_at_its_rate(broker, registry_path, tmp_path):
    """`ocms simulate --rate R --collector`: a chunk's uploads wait for their shuffled batch, so a fleet that
    waited for each chunk before sending the next (R/10 reports: 20 uploads of 5, fewer than a batch of 200)
    sent nothing more until --shuffle-max-seconds closed the batch (600 s here, past the timeout). Uploads of
    later chunks go out while earlier ones wait: every batch fills (200 reports, closed by size)."""
    from tests.agents.harness import ocms

    with CollectorProcess(registry_path, broker.bootstrap_servers, FLEET, tmp_path, "--shuffle-min-reports",
                          str(N), "--shuffle-max-seconds", "600", "--reject-delay-ms", "0") as c:
        code, _, err = ocms("simulate", "--registry", str(registry_path), "--metric", "dest", "--collector", c.url,
                            "--rate", "1000", "--reports", "2000", "--frame-size", "5", "--upload-concurrency", "48",
                            timeout=240)
        assert code == 0, err
        assert f"sent 2,000 reports in 400 messages to the collector {c.url} (metric dest)" in err
    sizes = Counter(dict(r.headers)[wire.SHUFFLE_HEADER] for r in consume(broker.bootstrap_servers, FLEET))
    assert set(sizes) == {str(N).encode()}, f"every batch closed by size, none by time: {sizes}"


# ------------------------------------------------------------------ the worker's accounting
@pytest.mark.integration
def test_the_worker_states_the_central_epsilon_of_the_smallest_batch_and_null_once_a_report_was_not_shuffled(
        broker, registry_path, dest, tmp_path):
    """Two shuffled batches (50 reports, closed by size; 20, closed after --shuffle-max-seconds) reach
    the worker: every answer over them (name-less and named routes, trend points, the metric listing,
    Prometheus) carries cms_core.shuffle's central epsilon for n = 20 at its delta of the larger batch
    (both below a million: 1e-6). Both hold the claim key (--shuffle-claim-key-file).

    Issue 37's forgery: a 5-report frame written straight to the topic with ``ocms-shuffle-n: 1000000``
    (no MAC, then a MAC under another key) is counted but believed shuffled by nobody: the total window's
    central epsilon becomes null ("partly_shuffled"), shuffled_reports stays 70, and
    ocms_shuffle_claims_rejected_total counts the two frames. Then a collector that does not shuffle adds 5
    reports: still null, and says why."""
    from cms_core import claims

    from tests.agents.harness import Message, send

    expected = central_epsilon(20, dest.params.epsilon, shuffle_delta(50))
    key_file = tmp_path / "claim.key"
    key_file.write_text(secrets.token_hex(32) + "\n")
    key_flag = ("--shuffle-claim-key-file", str(key_file))
    with serving_worker(registry_path, broker.bootstrap_servers, COUNTED, tmp_path, *key_flag) as worker:
        # --shuffle-max-seconds 8: the 50 uploads fill their batch before it (at a load average of 15 on 2 CPUs
        # they took over 0.5 s, and a batch of 48 then one of 2 closed by time; with 3 s it failed once beside
        # the fault schedules and two more test processes); the batch of 20 waits it out
        with CollectorProcess(registry_path, broker.bootstrap_servers, COUNTED, tmp_path, "--shuffle-min-reports",
                              "50", "--shuffle-max-seconds", "8", *key_flag) as c:
            assert upload_in_order(c, [indexed_report(dest, i) for i in range(50)]) == [202] * 50
            assert request(c.url + "/v1/reports", b"".join(indexed_report(dest, 50 + i) for i in range(20)))[0] == 202
        doc = worker.wait_for_n(70)
        want = {"central_epsilon": expected, "central_delta": shuffle_delta(50), "shuffle_batch_min": 20,
                "shuffled_reports": 70, "central_reason": None}
        assert {k: doc[k] for k in want} == want and doc["central_bound"].startswith("FMT21")
        for path, params in (("/metrics/dest/estimates", {}), ("/metrics/dest/topk", {"k": "3"}),
                             ("/metrics/dest/estimates/7", {}), ("/estimates", {"window": "total"})):
            status, answer = worker.get(path, **params)
            assert status == 200 and {k: answer[k] for k in want} == want, path
        status, trend = worker.get("/metrics/dest/trend", value="7", **{"from": "-10m"})
        # one 1-minute point over both batches, or two when the batch of 20 (closed by time, 8 s after its
        # first upload) lands past the minute's end: each point states its own smallest batch's
        points = [(p["n"], p["central_epsilon"]) for p in trend["points"] if p["n"]]
        assert points in ([(70, expected)],
                          [(50, central_epsilon(50, dest.params.epsilon, shuffle_delta(50))), (20, expected)]), points
        status, listing = worker.get("/metrics/dest")
        assert listing["versions"][0]["windows"]["total"]["central_epsilon"] == expected
        gauge = [line for line in worker.text("/metrics").splitlines()
                 if line.startswith('ocms_central_epsilon{metric="dest",version="1",window="total"}')]
        assert [float(line.split()[-1]) for line in gauge] == [expected]

        frame = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, dest.fingerprint, 5) + b"".join(
            indexed_report(dest, 100 + i)[wire.HEADER_SIZE:] for i in range(5))
        other_key = secrets.token_hex(32).encode()
        forged = [Message(frame, b"", None, [(wire.SHUFFLE_HEADER, b"1000000")]),
                  Message(frame, b"", None, claims.claim_headers(other_key, 1_000_000, claims.new_batch_id(), frame))]
        send(broker.bootstrap_servers, COUNTED, forged)
        doc = worker.wait_for_n(80)
        assert doc["central_epsilon"] is None and doc["central_delta"] is None and doc["shuffled_reports"] == 70
        assert doc["central_reason"] == "partly_shuffled" and doc["central_note"].startswith("10 of the 80 reports")
        rejected = {line.split()[0]: float(line.split()[1]) for line in worker.text("/metrics").splitlines()
                    if line.startswith("ocms_shuffle_claims_rejected_total{")}
        assert rejected == {'ocms_shuffle_claims_rejected_total{reason="missing_mac"}': 1.0,
                            'ocms_shuffle_claims_rejected_total{reason="bad_mac"}': 1.0}

        with CollectorProcess(registry_path, broker.bootstrap_servers, COUNTED, tmp_path) as plain:
            assert request(plain.url + "/v1/reports", b"".join(indexed_report(dest, 80 + i) for i in range(5)))[0] == 202
        doc = worker.wait_for_n(85)
        assert doc["central_epsilon"] is None and doc["shuffled_reports"] == 70
        assert doc["central_note"].startswith("15 of the 85 reports of this window were not shuffled")
        assert not [line for line in worker.text("/metrics").splitlines()
                    if line.startswith('ocms_central_epsilon{metric="dest",version="1",window="total"}')]
