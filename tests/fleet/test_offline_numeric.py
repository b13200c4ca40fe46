"""`ocms estimate` of a numeric metric (issue 40): beside the bucket records, the quantiles and the mean with their
intervals, the same cms_core.numeric.window_summary as the worker's /histogram."""

from __future__ import annotations

import json

import numpy as np

from cms_core.numeric import true_summary
from registry import load_registry
from tests.registry.helpers import run, write

REGISTRY = """\
metrics:
  - name: latency_ms
    description: Time to first byte
    owner: web@example.com
    numeric: {lower: 0, upper: 10000, buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]}
    epsilon: 2
    mechanism: direct
"""


def test_ocms_estimate_answers_the_quantiles_and_the_mean(capsys, tmp_path):
    path = write(tmp_path, REGISTRY)
    capture, truth_path = tmp_path / "latency.ocap", tmp_path / "truth.json"
    code, _, _ = run(capsys, "simulate", "--registry", str(path), "--metric", "latency_ms", "--reports", "20000",
                     "--out", str(capture), "--truth", str(truth_path), "--seed", "3")
    assert code == 0
    code, out, _ = run(capsys, "estimate", "--registry", str(path), "--metric", "latency_ms", str(capture))
    doc = json.loads(out)
    assert code == 0 and doc["n"] == 20_000 and len(doc["estimates"]) == 11
    h = doc["histogram"]
    counts = np.zeros(11)
    for row in json.loads(truth_path.read_text())["counts"]:
        counts[int(row["value"])] = row["count"]
    spec = load_registry(path).metric("latency_ms").latest.numeric
    truth = true_summary(spec.layout, counts, spec.quantiles)
    for row in h["quantiles"]:  # seed 3: each inside (a 95% interval; the seed makes it a fixed fact)
        assert row["ci_low"] <= truth["quantiles"][row["q"]] <= row["ci_high"], row
    assert h["mean"]["ci_low"] <= truth["mean"] <= h["mean"]["ci_high"]
    assert h["layout"]["bounds"][0] == 5.0 and [row["le"] for row in h["cdf"]][-1] == 10_000.0


def test_a_tree_metric_is_simulated_level_by_level_and_estimated_from_every_level(capsys, tmp_path):
    """``mechanism: hierarchy``: ``ocms simulate`` frames each device's report with its level's fingerprint (each
    level about a third of the reports), ``ocms estimate`` decodes every level with its own parameters and answers
    the consistent tree's histogram, warning of no level as foreign."""
    from cms_core.wire import peek_header
    from infra.capture import read_capture

    text = REGISTRY.replace("mechanism: direct", "mechanism: hierarchy").replace("buckets: [5,", "branching: 3, buckets: [5,")
    path = write(tmp_path, text)
    capture, truth_path = tmp_path / "latency.ocap", tmp_path / "truth.json"
    code, _, _ = run(capsys, "simulate", "--registry", str(path), "--metric", "latency_ms", "--reports", "30000",
                     "--out", str(capture), "--truth", str(truth_path), "--seed", "4")
    assert code == 0
    version = load_registry(path).metric("latency_ms").latest
    per_level = {level.fingerprint: 0 for level in version.tree_levels()}
    for message in read_capture(capture):
        _, fingerprint, count = peek_header(message)
        per_level[fingerprint] += count  # KeyError: a fingerprint of no level
    assert sum(per_level.values()) == 30_000 and min(per_level.values()) > 30_000 / 3 - 4.5 * 82
    code, out, err = run(capsys, "estimate", "--registry", str(path), "--metric", "latency_ms", str(capture))
    assert code == 0 and "fingerprint" not in err, err
    h = json.loads(out)["histogram"]
    assert sum(level["reports"] for level in h["levels"]) == 30_000
    counts = np.zeros(11)
    for row in json.loads(truth_path.read_text())["counts"]:
        counts[int(row["value"])] = row["count"]
    truth = true_summary(version.numeric.layout, counts, version.numeric.quantiles)
    for row in h["quantiles"]:  # seed 4: each inside (a 95% interval; the seed makes it a fixed fact)
        assert row["ci_low"] <= truth["quantiles"][row["q"]] <= row["ci_high"], row
    assert h["mean"]["ci_low"] <= truth["mean"] <= h["mean"]["ci_high"]
