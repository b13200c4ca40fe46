"""Faults under load: Kafka unavailable, a full produce queue, a fuzz of bad bodies.

The promise checked everywhere: every report whose upload got a 202 is in Kafka
(compared as a multiset of raw records read back from the topic), and nothing
is in Kafka that was not uploaded.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import struct
from collections import Counter

import numpy as np
import pytest

from cms_core import wire
from infra.broker import EmbeddedBroker

from tests.support.topics import consume
from tests.support.waiting import poll_until

from .harness import WIRE, CollectorProcess, records_of, reports, request, single_messages
from .loadgen import LoadGenerator

pytestmark = pytest.mark.integration  # a broker and collectors


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        b.create_topics({"col-outage": 2, "col-outage-shuffled": 2, "col-queue": 1, "col-fuzz": 2})
        yield b


def topic_counter(broker, topic, version) -> Counter:
    return Counter(r for record in consume(broker.bootstrap_servers, topic) for r in records_of(record.value, version))


#: Shuffled batches that close by time under the tests' loads (collector/shuffle.py): the same promises hold.
SHUFFLE = ("--shuffle-min-reports", "32", "--shuffle-max-seconds", "0.2")
shuffled_or_not = pytest.mark.parametrize("extra", [(), SHUFFLE], ids=["frames", "shuffled"])


@shuffled_or_not
def test_kafka_unavailable_answers_503_and_no_accepted_report_is_lost(broker, registry_path, dest, tmp_path, extra):
    topic = "col-outage" + ("-shuffled" if extra else "")
    collector = CollectorProcess(registry_path, broker.bootstrap_servers, topic, tmp_path,
                                 "--kafka-timeout-ms", "1500", "--retry-after-seconds", "1", *extra).start()
    load = None
    try:
        collector.wait_healthy()
        load = LoadGenerator(collector.url + "/v1/reports", dest, concurrency=6, seed=1, pause_s=0.01).start()
        poll_until(lambda: load.log.statuses()[202] >= 50, 30, "accepted uploads before the outage")
        os.kill(broker.process.pid, signal.SIGSTOP)  # Kafka stops answering (its data stays)
        try:
            poll_until(lambda: load.log.statuses()[503] >= 20, 30, "503 answers while Kafka is down")
            status, doc, _ = request(collector.url + "/healthz", method="GET")
            assert status == 503 and doc["kafka"] == "unavailable"
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
        accepted_before = load.log.statuses()[202]
        poll_until(lambda: load.log.statuses()[202] >= accepted_before + 50, 60, "traffic resuming after the outage")
        log = load.stop()
        load = None
    finally:
        if load is not None:
            load.stop()
        collector.stop()
    statuses = log.statuses()
    assert set(statuses) <= {202, 503}, statuses
    assert all(o.retry_after for o in log.outcomes if o.status == 503), "every 503 carries Retry-After"
    in_kafka = topic_counter(broker, topic, dest)
    accepted = log.records(202)
    assert not accepted - in_kafka, "a report that got a 202 is missing from Kafka"
    # nothing invented: whatever is there was uploaded (a 503'd frame may still have landed)
    assert not in_kafka - (accepted + log.records(503))


@pytest.mark.parametrize("extra, fill", [(("--max-queued-reports", "10"), 1),
                                         (("--max-queued-reports", "20", "--shuffle-min-reports", "10"), 2)],
                         ids=["frames", "shuffled"])
def test_a_full_produce_queue_answers_503_queue_full(broker, registry_path, dest, tmp_path, extra, fill):
    """Kafka stopped: ``fill`` uploads of 10 reports take every queue place (with shuffling: a batch in
    flight and the next one held), the next upload is answered 503 queue_full at once."""
    import threading

    with CollectorProcess(registry_path, broker.bootstrap_servers, "col-queue", tmp_path, "--max-upload-reports", "10",
                          "--frame-max-reports", "10", "--kafka-timeout-ms", "3000", *extra) as collector:
        body = wire.encode_frame(dest.params, reports(dest, 10, seed=2))
        os.kill(broker.process.pid, signal.SIGSTOP)
        first: list = []
        threads = [threading.Thread(target=lambda: first.append(request(collector.url + "/v1/reports", body)))
                   for _ in range(fill)]
        try:
            for thread in threads:
                thread.start()  # each holds 10 queue places until Kafka answers or times out
            poll_until(lambda: request(collector.url + "/healthz", method="GET")[1].get("queued_reports"), 30,
                       "the queue full", until=lambda queued: queued == 10 * fill)
            status, doc, headers = request(collector.url + "/v1/reports", body)
            assert (status, doc["reason"]) == (503, "queue_full") and headers["Retry-After"] == "2"
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
        for thread in threads:
            thread.join(30)
        assert len(first) == fill and {answer[0] for answer in first} <= {202, 503}



def fuzz_bodies(dest, n: int, seed: int):
    """(body, content type, expected status or None for 'any 4xx') for n hostile uploads."""
    rng = random.Random(seed)
    good = single_messages(dest, 50, seed=seed)
    frame = wire.encode_frame(dest.params, reports(dest, 20, seed=seed + 1))
    fp = dest.fingerprint
    order = dest.params.field.order
    kinds = ["random", "truncated", "oversized", "fingerprint", "z", "coefficient", "count", "ctype", "json", "header"]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        g = rng.choice(good)
        if kind == "random":
            yield os.urandom(rng.randrange(0, 300)), WIRE
        elif kind == "truncated":
            cut = frame[:rng.randrange(0, len(frame))]
            yield cut, WIRE
        elif kind == "oversized":
            yield g + os.urandom(rng.randrange(1, 4)), WIRE
        elif kind == "fingerprint":
            yield g[:4] + os.urandom(8) + g[12:], WIRE
        elif kind == "z":
            yield wire.HEADER.pack(wire.MAGIC, 1, 1, fp, 1) + struct.pack(">HHB", 1, 2, rng.randrange(4, 256)), WIRE
        elif kind == "coefficient":
            yield wire.HEADER.pack(wire.MAGIC, 1, 1, fp, 1) + struct.pack(">HHB", rng.randrange(order, 65536), 1, 0), WIRE
        elif kind == "count":
            yield wire.HEADER.pack(wire.MAGIC, 1, 2, fp, rng.choice([0, 2, 1 << 20, (1 << 32) - 1])) + g[16:], WIRE
        elif kind == "ctype":
            yield g, rng.choice(["text/plain", "image/png", "multipart/form-data; boundary=x", "application/xml"])
        elif kind == "json":
            yield rng.choice([b"{", b"null", b"[1,2]", json.dumps({"reports": "x"}).encode(),
                              json.dumps({"fingerprint": fp.hex(), "reports": [{"a0": 1e308, "a1": "1", "z": "0"}]}).encode(),
                              b'{"a":' * 5000]), "application/json"
        else:
            yield bytes([rng.randrange(256) for _ in range(16)]) + g[16:], WIRE


def test_fuzz_of_10000_hostile_uploads(broker, registry_path, dest, tmp_path):
    import asyncio

    import aiohttp

    with CollectorProcess(registry_path, broker.bootstrap_servers, "col-fuzz", tmp_path,
                          "--body-timeout-seconds", "1", "--max-body-bytes", "65536", "--access-log", "false",
                          "--reject-delay-ms", "0") as collector:
        valid_sent: Counter = Counter()
        answers: Counter = Counter()
        bad_answers: list = []
        bodies = list(fuzz_bodies(dest, 10_000, seed=3))
        valid = single_messages(dest, 500, seed=99)

        async def run() -> None:
            queue = list(enumerate(bodies))
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                async def one(i, body, ctype):
                    async with session.post(collector.url + "/v1/reports", data=body,
                                            headers={"Content-Type": ctype}) as response:
                        doc = await response.json(content_type=None)
                        answers[response.status] += 1
                        if not 400 <= response.status < 500 or not doc.get("reason"):
                            bad_answers.append((body[:40].hex(), ctype, response.status, doc))
                    if i % 20 == 0:  # valid uploads in between: all must be counted exactly
                        message = valid[(i // 20) % len(valid)]
                        async with session.post(collector.url + "/v1/reports", data=message,
                                                headers={"Content-Type": WIRE}) as response:
                            assert response.status == 202, await response.text()
                            valid_sent.update(records_of(message, dest))

                async def lane(items):
                    for i, (body, ctype) in items:
                        await one(i, body, ctype)

                await asyncio.gather(*(lane(queue[k::16]) for k in range(16)))

        rss_before = collector.rss_kib()
        asyncio.run(run())
        # slow and aborted uploads, and bodies over the size limit, on raw sockets
        message = valid[0]
        for _ in range(5):
            sock = socket.create_connection(("127.0.0.1", collector.port), timeout=10)
            sock.sendall(f"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: {WIRE}\r\nContent-Length: 1000\r\n\r\n"
                         .encode() + message)
            if _ % 2:
                sock.close()  # aborted
                continue
            answer = sock.recv(4096).decode(errors="replace")
            sock.close()
            assert answer.startswith("HTTP/1.1 408"), answer
        status, doc, _ = request(collector.url + "/v1/reports", b"\x00" * 70_000)
        assert (status, doc["reason"]) == (413, "body_too_large")
        rss_after = collector.rss_kib()
        assert collector.alive(), "the collector crashed"
        assert not bad_answers, bad_answers[:5]
        assert sum(answers.values()) == 10_000
        assert rss_after - rss_before < 64 * 1024, f"memory grew by {(rss_after - rss_before) / 1024:.0f} MiB"
        in_kafka = topic_counter(broker, "col-fuzz", dest)
        assert in_kafka == valid_sent, "valid reports sent between hostile uploads are in Kafka exactly"
        assert sum(valid_sent.values()) == 500


@shuffled_or_not
def test_sigterm_under_load_answers_what_it_took(broker, registry_path, dest, tmp_path, extra):
    collector = CollectorProcess(registry_path, broker.bootstrap_servers, "col-queue", tmp_path, *extra).start()
    collector.wait_healthy()
    before = topic_counter(broker, "col-queue", dest)
    load = LoadGenerator(collector.url + "/v1/reports", dest, concurrency=8, seed=21).start()
    try:
        poll_until(lambda: load.log.statuses()[202] >= 100, 30, "accepted uploads")
        assert collector.stop() == 0, "a clean stop exits 0"
        poll_until(lambda: load.log.statuses()[None] >= 5, 30, "refused connections after the stop")
    finally:
        log = load.stop()
    statuses = log.statuses()
    assert set(statuses) <= {202, 503, None}, statuses  # never a 500 while stopping
    in_kafka = topic_counter(broker, "col-queue", dest) - before
    assert not log.records(202) - in_kafka, "an upload answered 202 before the stop is missing"


def test_broker_stopped_and_restarted_under_load(registry_path, dest, tmp_path):
    """A real stop (the process exits) and a new broker on the same port. The embedded broker keeps
    data in memory, so what was stored before the stop is gone with it; what got a 202 after the
    restart must be in the new broker, and traffic must resume without restarting the collector."""
    first = EmbeddedBroker().start()
    port = first.port
    # 4 partitions: the collector may reach the new broker before the test creates the topic, and
    # the embedded broker then auto-creates it with 4.
    first.create_topics({"col-restart": 4})
    collector = CollectorProcess(registry_path, first.bootstrap_servers, "col-restart", tmp_path,
                                 "--kafka-timeout-ms", "1500", "--retry-after-seconds", "1").start()
    load = None
    second = None
    try:
        collector.wait_healthy()
        load = LoadGenerator(collector.url + "/v1/reports", dest, concurrency=4, seed=31, pause_s=0.01).start()
        poll_until(lambda: load.log.statuses()[202] >= 30, 30, "accepted uploads before the stop")
        first.stop()
        poll_until(lambda: load.log.statuses()[503] >= 10, 30, "503 answers while the broker is gone")
        marker = len(load.log.outcomes)
        second = EmbeddedBroker(port=port).start()
        second.create_topics({"col-restart": 4})
        poll_until(lambda: sum(o.status == 202 for o in load.log.outcomes[marker:]) >= 50, 60, "traffic resuming")
        log = load.stop()
        load = None
        after = [o for o in log.outcomes[marker:]]
        accepted_after = Counter(r for o in after if o.status == 202 for r in o.records)
        in_kafka = topic_counter(second, "col-restart", dest)
        assert not accepted_after - in_kafka, "a report accepted after the restart is missing"
        assert set(log.statuses()) <= {202, 503}, log.statuses()
    finally:
        if load is not None:
            load.stop()
        collector.stop()
        first.stop()
        if second is not None:
            second.stop()
