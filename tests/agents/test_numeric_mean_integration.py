"""A numeric metric with a Hybrid mean, end to end (issue 40): devices' numbers through the Python client (part drawn,
the Hybrid report framed with the mean's fingerprint, the others' buckets with the version's) over HTTP to an
``ocms collector``, which takes the mean's fingerprint as a version of the metric -> the embedded broker -> a worker
counting both parts -> /metrics/NAME/histogram and the Prometheus scrape, the mean inside its interval; a fleet twice
as slow is outside it (the negative control).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from producer.reporter import DeviceReporter, HttpTransport, new_device_key
from tests.collector.harness import CollectorProcess
from tests.support.waiting import poll_until

from .harness import Scrape, registry_worker
from .test_numeric_answers import latencies
from .test_numeric_mean_answers import TEXT

pytestmark = pytest.mark.integration  # a broker, a collector and a worker

DEVICES = 4_000


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mean")
    with registry_worker(folder, TEXT, "it-mean") as (registry, broker, worker):
        values = latencies(np.random.default_rng(43), DEVICES)
        collector = CollectorProcess(folder / "registry.yaml", broker.bootstrap_servers, worker.topic, folder)
        collector.start()
        try:
            collector.wait_healthy()

            async def from_devices():  # queued reports of both parts: an upload per parameter set
                transport = HttpTransport(collector.url, max_reports=200, max_latency_s=0.01)
                async with DeviceReporter(registry, transport=transport, device_key=new_device_key()) as reporter:
                    futures = [await reporter.submit("latency_split", float(x)) for x in values]
                    await asyncio.gather(*futures)

            asyncio.run(from_devices())
        finally:
            collector.stop()

        def caught_up():
            status, doc = worker.get("/metrics/latency_split/histogram")
            return doc if status == 200 and doc["n"] >= DEVICES else None

        doc = poll_until(caught_up, 90, "every report of both parts counted")
        yield worker, doc, float(np.clip(values, 0, 2000).mean())


def test_the_hybrid_mean_is_inside_its_interval_end_to_end(fed):
    _, doc, truth = fed
    assert doc["n"] == DEVICES and doc["withheld"] is False
    mean = doc["histogram"]["mean"]
    assert mean["mechanism"] == "hybrid" and abs(mean["reports"] - DEVICES / 2) < 4.5 * (DEVICES * 0.25) ** 0.5
    # the interval is about the devices that drew the mean; all devices' mean is within sampling of it
    sampling = float(np.std(np.clip(latencies(np.random.default_rng(43), DEVICES), 0, 2000))) / mean["reports"] ** 0.5
    assert mean["ci_low"] - 4 * sampling <= truth <= mean["ci_high"] + 4 * sampling, (mean, truth)
    slower = float(np.clip(latencies(np.random.default_rng(3), 40_000, 2.0), 0, 2000).mean())
    assert not mean["ci_low"] <= slower <= mean["ci_high"]
    print(f"hybrid mean {mean['estimate']:.1f} ms [{mean['ci_low']:.1f}, {mean['ci_high']:.1f}] of "
          f"{mean['reports']} reports; devices' clipped mean {truth:.1f} ms")


def test_the_scrape_exports_the_hybrid_mean(fed):
    worker, _, _ = fed
    scrape = Scrape.parse(worker.text("/metrics"))
    names = {"metric": "latency_split", "version": "1", "window": "total"}
    now = worker.get("/metrics/latency_split/histogram")[1]["histogram"]
    assert scrape.get("ocms_numeric_mean", **names) == now["mean"]["estimate"]
    assert scrape.get("ocms_numeric_mean_ci_upper", **names) == now["mean"]["ci_high"]
    info = [dict(labels) for labels in scrape.series("ocms_params_info") if dict(labels)["metric"] == "latency_split"]
    assert len(info) == 1  # the version once, not its mean's part
