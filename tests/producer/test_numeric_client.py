"""The Python client's numeric reports (issue 40): a number -> its bucket index exactly as the shared vectors say
(tests/vectors/numeric_v1.json, which producer/js and producer/c replay too), then an ordinary report of that
index through the metric's frequency oracle: the wire shape of every other integer metric."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

from cms_core.errors import InvalidParameterError
from cms_core.numeric import BucketLayout
from cms_core.wire import decode_message, peek_header
from producer.ledger import PrivacyLedger
from producer.reporter import DeviceReporter
from registry.loader import parse_registry
from tests.vectors.make_numeric_vectors import REGISTRY as VECTOR_REGISTRY, build

from .test_reporter import FakeProducer

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "vectors" / "numeric_v1.json").read_text("utf-8"))
REGISTRY = parse_registry(VECTOR_REGISTRY, "<numeric vectors>")


def test_the_vectors_file_is_what_the_generator_writes():
    assert build() == VECTORS


@pytest.mark.parametrize("source", ["registry", "device_config"])
def test_every_vector_maps_to_its_bucket(source):
    """From the registry's layout, and from the device config alone (what the JS and C clients get)."""
    configs = {m["name"]: m["numeric"] for m in VECTORS["device_config"]["metrics"]}
    seen = set()
    for case in VECTORS["cases"]:
        value = float(case["value"])  # "Infinity" / "-Infinity" are the infinities
        if source == "registry":
            bucket = REGISTRY.metric(case["metric"]).latest.numeric.bucket(value)
        else:
            c = configs[case["metric"]]
            bucket = BucketLayout.explicit(c["bounds"], c["lower"], c["upper"]).bucket(value)
        assert bucket == case["bucket"], case
        seen.add((case["metric"], case["bucket"]))
    for m in VECTORS["device_config"]["metrics"]:  # every bucket of every layout is some case's answer
        assert {b for name, b in seen if name == m["name"]} == set(range(len(m["numeric"]["bounds"]) + 1))


def test_nan_and_non_numbers_are_refused_naming_the_value():
    spec = REGISTRY.metric("latency_ms").latest.numeric
    for bad in (math.nan, "12", None, True):
        with pytest.raises(InvalidParameterError) as info:
            spec.bucket(bad)
        assert info.value.name == "value"


def test_the_reporter_sends_the_bucket_index_through_the_metrics_oracle_and_charges_it(tmp_path):
    fake, ledger = FakeProducer(), PrivacyLedger(tmp_path / "ledger.db", budget=1_000.0)
    version = REGISTRY.metric("temperature_c").latest  # direct RR over 7 buckets at epsilon 2

    async def go():
        async with DeviceReporter(REGISTRY, bootstrap_servers="fake:9092", topic="t", device_key=b"d",
                                  ledger=ledger, producer_factory=fake) as reporter:
            with pytest.raises(InvalidParameterError):
                await reporter.report("temperature_c", math.nan)  # refused before any charge
            assert ledger.spent("temperature_c") == 0.0
            for _ in range(300):
                await reporter.report("temperature_c", 21.5)  # bucket 5: (17.25, 30]

    asyncio.run(go())
    assert ledger.spent("temperature_c") == pytest.approx(300 * version.params.epsilon)
    reported = []
    for message in fake.delivered:
        assert peek_header(message)[1] == version.fingerprint
        params, batch = decode_message(message, {version.fingerprint: version.params})
        reported.extend(int(z) for z in batch.z)
    # direct RR keeps the true bucket with p = e^2 / (e^2 + 6) = 0.552; 300 reports: 165.6 +- 8.6 (sd)
    keep = math.exp(2) / (math.exp(2) + 6)
    kept = reported.count(5)
    assert abs(kept - 300 * keep) < 4.5 * math.sqrt(300 * keep * (1 - keep))
    # negative control: no other bucket comes near it (each is reported with q = 0.075: 22 +- 4.6)
    assert max(np.bincount(reported, minlength=7)[[0, 1, 2, 3, 4, 6]]) < 300 * keep / 2
