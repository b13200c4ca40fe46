"""A numeric metric end to end (issue 40): devices' numbers -> the Python client (clip, bucket, report) and
simulated frames -> the embedded broker -> a worker -> /metrics/NAME/histogram and the Prometheus scrape, with
p50 / p90 / p99 and the mean inside their intervals. The negative control: a fleet twice as slow is outside the
p50 and mean intervals.
"""

from __future__ import annotations

import asyncio
import math
import time

import numpy as np
import pytest

from cms_core.numeric import _quantile_from_cdf
from infra.kafka import EMBEDDED
from producer.reporter import DeviceReporter, new_device_key

from tests.support.waiting import poll_until

from .harness import Scrape, registry_worker, report_messages, send

pytestmark = pytest.mark.integration  # a broker and a worker

REGISTRY = """\
metrics:
  - name: latency_ms
    description: Time to first byte
    owner: web@example.com
    unit: ms
    numeric:
      lower: 0
      upper: 10000
      buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]
      quantiles: [0.5, 0.9, 0.99]
    epsilon: 2
    mechanism: direct
"""
SIMULATED, FROM_CLIENT = 40_000, 400


def latencies(rng, n, scale=1.0):
    return scale * rng.lognormal(mean=math.log(120), sigma=1.1, size=n)


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    rng = np.random.default_rng(40)
    simulated, device = latencies(rng, SIMULATED), latencies(rng, FROM_CLIENT)
    with registry_worker(tmp_path_factory.mktemp("numeric"), REGISTRY, "it-numeric") as (registry, broker, worker):
        version = registry.metric("latency_ms").latest
        now_ms = int(time.time() * 1000)
        send(broker.bootstrap_servers, worker.topic, report_messages(
            version.params, version.numeric.layout.index(simulated), 500, seed=41,
            timestamps_ms=[now_ms - 30_000] * (SIMULATED // 500)))

        async def from_devices():  # the Python client: a number per report, clipped and bucketized there
            async with DeviceReporter(registry, bootstrap_servers=broker.bootstrap_servers, topic=worker.topic,
                                      device_key=new_device_key(), profile=EMBEDDED) as reporter:
                futures = [await reporter.submit("latency_ms", float(x)) for x in device]
                await asyncio.gather(*futures)

        asyncio.run(from_devices())
        total = SIMULATED + FROM_CLIENT

        def caught_up():
            status, doc = worker.get("/metrics/latency_ms/histogram", q="0.75")
            return doc if status == 200 and doc["n"] >= total else None

        doc = poll_until(caught_up, 90, "every report counted")
        values = np.concatenate([simulated, device])
        yield version, worker, doc, values


def test_quantiles_and_mean_are_inside_their_intervals(fed):
    version, _, doc, values = fed
    spec = version.numeric
    assert doc["n"] == SIMULATED + FROM_CLIENT and doc["withheld"] is False
    h = doc["histogram"]
    f = np.bincount(spec.layout.index(values), minlength=spec.buckets) / values.size
    slower = np.bincount(spec.layout.index(latencies(np.random.default_rng(3), values.size, 2.0)),
                         minlength=spec.buckets) / values.size
    assert [row["q"] for row in h["quantiles"]] == [0.5, 0.75, 0.9, 0.99]
    for row in h["quantiles"]:
        truth = _quantile_from_cdf(spec.layout.edges, np.cumsum(f), row["q"])
        assert row["ci_low"] <= truth <= row["ci_high"], row
    p50 = h["quantiles"][0]
    assert not p50["ci_low"] <= _quantile_from_cdf(spec.layout.edges, np.cumsum(slower), 0.5) <= p50["ci_high"]
    mean = float(f @ spec.layout.points)
    assert h["mean"]["ci_low"] <= mean <= h["mean"]["ci_high"]
    assert not h["mean"]["ci_low"] <= float(slower @ spec.layout.points) <= h["mean"]["ci_high"]


def test_the_scrape_exports_the_same_cdf_and_quantiles_and_bad_q_is_a_400(fed):
    _, worker, doc, _ = fed
    scrape = Scrape.parse(worker.text("/metrics"))
    names = {"metric": "latency_ms", "version": "1", "window": "total"}
    now = worker.get("/metrics/latency_ms/histogram")[1]["histogram"]  # the same counts: nothing more was sent
    assert scrape.get("ocms_numeric_cdf_ratio", **names, le="+Inf") == 1.0
    assert scrape.get("ocms_numeric_cdf_ratio", **names, le="100.0") == now["cdf"][4]["monotone"]
    assert scrape.get("ocms_numeric_quantile", **names, quantile="0.5") == now["quantiles"][0]["estimate"]
    assert not [k for k in scrape.series("ocms_numeric_quantile") if dict(k)["quantile"] == "0.75"]  # configured only
    status, err = worker.get("/metrics/latency_ms/histogram", q="2")
    assert status == 400 and err["parameter"] == "q"
