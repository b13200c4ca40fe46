"""Regenerate tests/vectors/numeric_v1.json: a number -> its bucket index, for each kind of bucket layout.

    .venv/bin/python -m tests.vectors.make_numeric_vectors

The contract is cms_core/numeric.py (BucketLayout.bucket; docs/device.md, "Numeric metrics"): a device takes the
metric's ``numeric`` entry of the device config (``lower``, ``upper``, ``bounds``: the bounds as numbers, never
recomputed from a scale), clips the number into [lower, upper] and reports the index of the first bound >= it
(a value equal to a bound is in the bucket that bound closes; k = len(bounds) + 1 buckets, the last for values above
every bound). NaN is refused; +-Infinity (written "Infinity", "-Infinity") are clipped. Python
(tests/producer/test_numeric_client.py), producer/js and producer/c replay every case. Each metric pins the flat
oracle ``mechanism: auto`` picked when the file was written (auto now picks hierarchical histograms for most of them,
whose levels are tests/vectors/numeric_hierarchy_v1.json's).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from registry.device import device_config
from registry.loader import parse_registry

REGISTRY = """\
metrics:
  - name: latency_ms
    description: explicit buckets from 0
    owner: vectors
    numeric: {lower: 0, upper: 10000, buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]}
    epsilon: 1
    mechanism: ocms
    mode: l2
  - name: temperature_c
    description: explicit buckets around 0, negative and fractional bounds
    owner: vectors
    numeric: {lower: -40.5, upper: 60, buckets: [-20, -0.1, 0, 0.1, 17.25, 30]}
    epsilon: 2
    mechanism: direct
  - name: payload_bytes
    description: OpenTelemetry base-2 exponential buckets at scale 0 (doubling)
    owner: vectors
    numeric: {lower: 1, upper: 1048576, exponential: {scale: 0}}
    epsilon: 1
    mechanism: ocms
    mode: l2
  - name: duration_s
    description: OpenTelemetry base-2 exponential buckets at scale 3 (9% a bucket), bounds irrational
    owner: vectors
    numeric: {lower: 0.001, upper: 30, exponential: {scale: 3}}
    epsilon: 4
    mechanism: direct
"""


def _json_number(x: float):
    return x if math.isfinite(x) else ("Infinity" if x > 0 else "-Infinity")


def values_for(lower: float, upper: float, bounds: list[float]) -> list[float]:
    """Every bound, just below and above each, the clipping edges and beyond, and the infinities."""
    out = [lower, upper, math.nextafter(lower, -math.inf), math.nextafter(upper, math.inf), lower - 1e6,
           upper + 1e6, -math.inf, math.inf, (lower + upper) / 2]
    for b in bounds:
        out += [b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf)]
    for a, b in zip(bounds, bounds[1:]):
        out.append((a + b) / 2)
    return out


def build() -> dict:
    registry = parse_registry(REGISTRY, "<numeric vectors>")
    config = device_config(registry)
    cases = []
    for metric in registry.metrics:
        spec = metric.latest.numeric
        layout = spec.layout
        for value in values_for(layout.lower, layout.upper, list(layout.bounds)):
            cases.append({"metric": metric.name, "value": _json_number(value), "bucket": spec.bucket(value)})
    return {"format": "ocms numeric v1",
            "contract": "cms_core/numeric.py BucketLayout.bucket; docs/device.md 'Numeric metrics'",
            "device_config": config, "refused": ["NaN"], "cases": cases}


def main() -> None:
    path = Path(__file__).with_name("numeric_v1.json")
    path.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
