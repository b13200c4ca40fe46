"""Simulator -> embedded broker -> raw consumer -> offline cms_core decode.

Every report arrives exactly once, and the offline estimates cover the ground
truth with their 95% intervals at the expected rate.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from cms_core import OCMSParams, TrackedValues
from fleet import simulator
from fleet.datasets import parse_dataset
from fleet.offline import sketch_from_messages
from infra.capture import read_capture
from tests.brokers import module_broker
from tests.support.topics import consume

TOPIC = "ocms-it-reports"


broker = module_broker({TOPIC: 4})


@pytest.mark.integration
def test_frames_and_single_reports_arrive_once_and_estimates_cover_truth(broker, tmp_path):
    dataset = parse_dataset("zipf:s=1.1,d=1000")
    params = OCMSParams.build(2.0, dataset.dictionary_size)
    framed = simulator.SimulationSettings(params=params, dataset=dataset, reports=100_000, frame_size=1000, seed=1)
    single = simulator.SimulationSettings(params=params, dataset=dataset, reports=1000, frame_size=1, seed=2)
    r1 = asyncio.run(simulator.run(framed, bootstrap_servers=broker.bootstrap_servers, topic=TOPIC, out=tmp_path / "a.cap"))
    r2 = asyncio.run(simulator.run(single, bootstrap_servers=broker.bootstrap_servers, topic=TOPIC, out=tmp_path / "b.cap"))
    assert (r1.reports, r1.messages, r2.reports, r2.messages) == (100_000, 100, 1000, 1000)

    sent = list(read_capture(tmp_path / "a.cap")) + list(read_capture(tmp_path / "b.cap"))
    received = [record.value for record in consume(broker.bootstrap_servers, TOPIC, len(sent))]
    assert sorted(received) == sorted(sent)  # every message exactly once, byte for byte

    tracked = TrackedValues.range(params, 0, dataset.dictionary_size)
    sketch, rejected = sketch_from_messages(params, tracked, received)
    assert not rejected and sketch.n == 101_000
    truth = r1.counts + r2.counts
    est = sketch.estimate(confidence=0.95)
    f_true = truth / sketch.n
    covered = np.mean((est.ci_low <= f_true) & (f_true <= est.ci_high))
    sd = math.sqrt(0.95 * 0.05 / len(tracked))
    assert abs(covered - 0.95) <= 5 * sd, covered


def test_simulation_is_deterministic_and_truth_matches(tmp_path):
    dataset = parse_dataset("zipf:s=2,d=500")
    params = OCMSParams.build(1.0, 500)
    settings = simulator.SimulationSettings(params=params, dataset=dataset, reports=20_000, frame_size=100, seed=7)
    a = asyncio.run(simulator.run(settings, out=tmp_path / "a.cap"))
    b = asyncio.run(simulator.run(settings, out=tmp_path / "b.cap"))
    assert (tmp_path / "a.cap").read_bytes() == (tmp_path / "b.cap").read_bytes()
    other = asyncio.run(simulator.run(simulator.SimulationSettings(params=params, dataset=dataset, reports=20_000,
                                                                   frame_size=100, seed=8), out=tmp_path / "c.cap"))
    assert (tmp_path / "c.cap").read_bytes() != (tmp_path / "a.cap").read_bytes()
    np.testing.assert_array_equal(a.counts, b.counts)
    # the truth is the histogram of the generated values
    rng_values = np.concatenate([v for v, _, _ in simulator.generate(settings)])
    np.testing.assert_array_equal(a.counts, np.bincount(rng_values.astype(np.int64), minlength=500))
    assert a.counts.sum() == 20_000 and other.counts.sum() == 20_000
    simulator.write_truth(tmp_path / "truth.json", settings, a)
    import json

    doc = json.loads((tmp_path / "truth.json").read_text())
    assert doc["reports"] == 20_000 and sum(c["count"] for c in doc["counts"]) == 20_000
