"""Regenerate tests/vectors/numeric_hierarchy_v1.json: a number -> its report when its numeric metric is a
hierarchical histogram (issue 40), from recorded random bytes.

    .venv/bin/python -m tests.vectors.make_numeric_hierarchy_vectors

The contract is cms_core/hierarchy.py (``draw_node``, then ``cms_core.privatize.privatize``; docs/device.md,
"Numeric metrics"): a device bucketizes its number (tests/vectors/numeric_v1.json), draws its level
``draw_below(h) + 1`` from its CSPRNG before anything else (h = the number of levels of the metric's ``hierarchy``
entry in the device config), takes its bucket's node there, ``bucket // span``, reports the node with that level's
parameters (its ``m``, ``keep_threshold``, ``field``, ``mechanism``) exactly as any report is made
(tests/vectors/privatize_v1.json) and frames it with that level's ``fingerprint``. Each case gives the random bytes
drawn (all of them, none more), the bucket, level, node, report and wire message. The Python client
(tests/producer/test_numeric_hierarchy_client.py) replays every case through DeviceReporter, producer/js through
privatizeWith (producer/js/test/numeric_hierarchy.test.mjs), producer/c through ocms_tree_draw + ocms_privatize and
ocms_report_tree (tests/producer/test_c_numeric_hierarchy.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from cms_core import wire
from cms_core.hierarchy import draw_node
from cms_core.privatize import privatize
from registry.device import device_config
from registry.loader import parse_registry
from tests.vectors.make_privatize_vectors import Recorder, report_json

REGISTRY = """\
metrics:
  - name: latency_tree
    description: 11 explicit buckets, the planner's best tree (direct RR at every level)
    owner: vectors
    numeric: {lower: 0, upper: 10000, buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]}
    epsilon: 2
    mechanism: hierarchy
  - name: payload_tree
    description: 20 base-2 buckets at branching 4, three levels (direct, direct, OCMS+RR over F(29))
    owner: vectors
    numeric: {lower: 1, upper: 1048576, exponential: {scale: 0}, branching: 4}
    epsilon: 1
    mechanism: hierarchy
  - name: size_tree
    description: 40 buckets at branching 4 (direct, OCMS+RR, OCMS+RR)
    owner: vectors
    numeric: {lower: 0, upper: 40, buckets: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39], branching: 4}
    epsilon: 1
    mechanism: hierarchy
"""

#: Numbers per metric, as a device measures them (clipped below and above, on bounds, inside).
VALUES = {
    "latency_tree": [0, 5, 5.000001, 42, 120, 999.5, 10000, 1e9, -3],
    "payload_tree": [1, 2, 3, 1000, 65536, 70000, 1048576, 5e7, 0.5],
    "size_tree": [0, 0.5, 1, 17.3, 31, 39.9, 40, 400],
}
#: Draws per metric (distinct seeds): enough that every level of every metric is drawn by some case.
REPEATS = 3


def _json_number(x: float):
    return x if math.isfinite(x) else ("Infinity" if x > 0 else "-Infinity")


def case(version, value, seed: str) -> dict:
    """The Python device path on recorded bytes: the level and node first, then the level's report."""
    random = Recorder(seed)
    bucket = version.numeric.bucket(value)
    level, node = draw_node(version.hierarchy, bucket, random)
    params = version.tree_levels()[level - 1].params
    message = wire.encode_report(params, privatize(params, node, random))
    (report,) = wire.decode_message(message, {params.fingerprint: params})[1].to_reports()
    return {"metric": version.metric, "value": _json_number(value), "bucket": bucket, "level": level, "node": node,
            "fingerprint": params.fingerprint.hex(), "report": report_json(report), "random_hex": random.drawn.hex(),
            "message_hex": message.hex()}


def repeated_cases(registry, values: dict, repeats: int, case) -> list[dict]:
    """``case(version, value, seed)`` of every value of every metric, ``repeats`` times with distinct seeds."""
    cases = []
    for name, numbers in values.items():
        version = registry.metric(name).latest
        for repeat in range(repeats):
            cases += [case(version, value, f"{name}/{repeat}/{i}") for i, value in enumerate(numbers)]
    return cases


def write_vectors(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path}")


def build() -> dict:
    registry = parse_registry(REGISTRY, "<numeric hierarchy vectors>")
    cases = repeated_cases(registry, VALUES, REPEATS, case)
    return {"format": "ocms numeric hierarchy v1",
            "contract": "cms_core/hierarchy.py draw_node, then cms_core/privatize.py; docs/device.md 'Numeric metrics'",
            "device_config": device_config(registry), "cases": cases}


PATH = Path(__file__).with_name("numeric_hierarchy_v1.json")


def main() -> None:
    write_vectors(PATH, build())


if __name__ == "__main__":
    main()
