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
