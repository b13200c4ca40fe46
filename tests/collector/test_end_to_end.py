"""Device -> collector -> Kafka -> worker, exact; and SIGKILLs of the collector under load.

The worker is ``ocms worker --registry`` on the collector's registry
(conftest.worker). Expectations are integers: the worker's n
and match counts against an offline decode of exactly what was delivered. Every test
runs on the embedded broker and on librdkafka's mock cluster (tests/brokers.py:
the production ``kafka`` path, idempotent producer included).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import numpy as np
import pytest

from fleet.offline import sketch_from_messages
from infra.mock_cluster import start_broker
from producer.ledger import PrivacyLedger
from producer.reporter import DeviceReporter, HttpTransport
from tests.agents.harness import ocms
from tests.brokers import BROKERS
from tests.support.topics import consume

from .harness import CollectorProcess, records_of
from .loadgen import LoadGenerator

pytestmark = pytest.mark.integration  # a broker, a worker and collectors

TOPIC = "col-e2e"


@pytest.fixture(scope="module", params=BROKERS)
def broker(request):
    """Overrides conftest's embedded broker: these tests run on both (the conftest worker follows)."""
    with start_broker(request.param) as b:
        yield b


@pytest.fixture(scope="module")
def collector(broker, registry_path, worker, tmp_path_factory):
    with CollectorProcess(registry_path, broker, TOPIC, tmp_path_factory.mktemp("collector")) as c:
        yield c


def test_devices_through_the_collector_are_counted_exactly(collector, worker, dest, tmp_path):
    values = np.random.default_rng(5).zipf(1.4, 600) % 1000

    async def fleet() -> list:
        ledger = PrivacyLedger(tmp_path / "ledger.db", budget=1e6)
        deliveries = []

        async def device(chunk, use_ledger):
            transport = HttpTransport(collector.url, metric="dest", max_reports=25)
            async with DeviceReporter(dest.params, metric="dest", transport=transport,
                                      ledger=ledger if use_ledger else None) as reporter:
                futures = [await reporter.submit(int(v)) for v in chunk]
                deliveries.extend(await asyncio.gather(*futures))
            assert transport.uploads < len(chunk), "queued reports share uploads"

        await asyncio.gather(*(device(values[i::6], i == 0) for i in range(6)))
        spent = ledger.spent("dest")
        ledger.close()
        return deliveries, spent

    deliveries, spent = asyncio.run(fleet())
    assert len(deliveries) == 600
    assert spent == pytest.approx(100 * dest.params.epsilon), "the ledger charged each report of its device"
    doc = worker.wait_for_n(600)
    assert doc["n"] == 600
    sketch, rejected = sketch_from_messages(dest.params, dest.tracked_values(), [d.message for d in deliveries])
    assert not rejected
    assert [r["match_count"] for r in doc["estimates"]] == sketch.counts.tolist()


def test_a_fleet_posts_frames_through_the_collector(collector, worker, dest):
    from cms_core import wire

    before = worker.get("/estimates")[1]["n"]
    from cms_core.privatize import simulate_reports

    batch = simulate_reports(dest.params, np.arange(1000, dtype=np.uint64) % 1000, np.random.default_rng(9))
    frames = [wire.encode_frame(dest.params, batch.slice(i, i + 100)) for i in range(0, 1000, 100)]

    async def fleet():
        transport = HttpTransport(collector.url, metric="dest")
        await transport.start()
        try:
            return await transport.upload_each(frames, concurrency=4)
        finally:
            await transport.stop()

    assert asyncio.run(fleet()) == 10
    assert worker.wait_for_n(before + 1000)["n"] == before + 1000


def test_ocms_simulate_uploads_through_the_collector(collector, worker, registry_path):
    """`ocms simulate --collector` (docker-compose's fleet): every report goes through the front door
    and is counted exactly."""
    before = worker.get("/estimates")[1]["n"]
    code, _, err = ocms("simulate", "--registry", str(registry_path), "--metric", "dest", "--collector", collector.url,
                        "--reports", "1000", "--frame-size", "50", timeout=120)
    assert code == 0, err
    assert f"sent 1,000 reports in 20 messages to the collector {collector.url} (metric dest)" in err
    assert worker.wait_for_n(before + 1000)["n"] == before + 1000


def test_sigkill_of_the_collector_under_load_loses_no_accepted_report(broker, registry_path, collector, worker, dest,
                                                                      tmp_path):
    before = worker.get("/estimates")[1]["n"]
    load = LoadGenerator(collector.url + "/v1/reports", dest, concurrency=8, per_upload=4, seed=7).start()
    try:
        for kill in range(3):
            load.log.wait_for_accepted(40)
            collector.kill()  # SIGKILL: uploads in flight get no answer
            collector.start()
            collector.wait_healthy()
        load.log.wait_for_accepted(40)
    finally:
        log = load.stop()
    statuses = log.statuses()
    assert statuses[None] >= 1, "the kills should have cut some uploads off"
    assert set(statuses) <= {202, None, 503}, statuses
    in_kafka = Counter(r for record in consume(broker, TOPIC)
                       for r in records_of(record.value, dest))
    accepted = log.records(202)
    assert not accepted - in_kafka, "a report that got a 202 is missing"
    # Besides the accepted reports, only reports of uploads cut off by a kill may be there (their
    # frame may have been acknowledged after the answer was lost), and the first test's.
    unanswered = log.records(None)
    total = sum(in_kafka.values())
    doc = worker.wait_for_n(total)
    assert doc["n"] == total, "the worker counts exactly what is in Kafka"
    assert doc["n"] - before >= sum(accepted.values())
    assert doc["n"] - before <= sum(accepted.values()) + sum(unanswered.values())
