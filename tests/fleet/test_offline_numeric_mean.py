"""`ocms estimate` of a numeric metric with a Hybrid mean (issue 40): the captures' mean reports decoded with the
mean's parameters (counted, not refused as foreign) and answered as the worker's /histogram answers them
(cms_core.hybrid.with_mean): the mean inside its interval, the histogram's own kept as histogram_mean."""

from __future__ import annotations

import json

import numpy as np

from cms_core import hybrid, wire
from cms_core.privatize import simulate_reports
from cms_core.reports import ReportBatch, identity_coefficients
from infra.capture import CaptureWriter
from registry import load_registry
from tests.registry.helpers import run, write

from .test_offline_numeric import REGISTRY


def test_ocms_estimate_answers_the_hybrid_mean_from_its_reports(capsys, tmp_path):
    path = write(tmp_path, REGISTRY.replace("buckets: [5,", "mean_mechanism: hybrid, buckets: [5,"))
    version = load_registry(path).metric("latency_ms").latest
    rng = np.random.default_rng(5)
    values = rng.lognormal(np.log(120), 1.1, 20_000)
    parts = rng.integers(0, version.mean.parts, size=values.size)
    z = hybrid.simulate(version.mean.hybrid, values[parts == 0], rng).astype(np.uint32)
    buckets = version.numeric.layout.index(values[parts == 1]).astype(np.uint64)
    capture = tmp_path / "latency.ocap"
    with CaptureWriter(capture) as out:
        out.write(wire.encode_frame(version.mean.carrier, ReportBatch(*identity_coefficients(z.size), z)))
        out.write(wire.encode_frame(version.params, simulate_reports(version.params, buckets, rng)))
    code, out, err = run(capsys, "estimate", "--registry", str(path), "--metric", "latency_ms", str(capture))
    assert code == 0 and "fingerprint" not in err, err  # the mean's reports are the metric's, not foreign
    h = json.loads(out)["histogram"]
    truth = float(np.clip(values[parts == 0], 0, 10_000).mean())
    assert h["mean"]["mechanism"] == "hybrid" and h["mean"]["reports"] == z.size
    assert h["mean"]["ci_low"] <= truth <= h["mean"]["ci_high"], (h["mean"], truth)
    assert h["histogram_mean"]["estimate"] is not None and len(h["quantiles"]) == 3
