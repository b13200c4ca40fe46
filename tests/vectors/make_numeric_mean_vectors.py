"""Regenerate tests/vectors/numeric_mean_v1.json: a number -> its report when its numeric metric has a Hybrid mean
(issue 40, ``numeric.mean_mechanism``), from recorded random bytes.

    .venv/bin/python -m tests.vectors.make_numeric_mean_vectors

The contract (cms_core/hybrid.py ``draw_mean_message`` and ``privatize_value``; docs/device.md, "Numeric means"):
a device draws its part ``draw_below(parts)`` first (no byte when the metric's ``mean.parts`` is 1); part 0 clips
its number to ``[lower, upper]``, computes ``s = (x - lower) / (upper - lower) * grid`` in IEEE doubles and
``j = floor(s)``, rounds ``j`` up when ``draw_bits64() < floor((s - j) * 2^64)``, takes PM's branch when
``draw_bits64() < pm_share``, and then reports ``z`` (PM: ``j + draw_below(window)`` when ``draw_bits64() <
pm_keep``, else ``o = draw_below(grid)``, ``z = o if o < j else o + window``; Duchi's: ``grid + window + 1`` when
``draw_bits64() < duchi_low + j * duchi_step``, else ``grid + window``), framed as a direct-RR report (z alone)
with the ``mean.fingerprint``. Any other part reports the histogram as a metric without a mean does
(tests/vectors/numeric_v1.json, numeric_hierarchy_v1.json), drawing on from the same bytes. Each case gives the
random bytes drawn (all of them, none more), the part (0, or "histogram"), the Hybrid report z or the bucket, and
the wire message. The Python client (tests/producer/test_numeric_mean_client.py) replays every case through
DeviceReporter; producer/js and producer/c are to replay them too.
"""

from __future__ import annotations

import math
from pathlib import Path

from cms_core import wire
from cms_core.hierarchy import draw_node
from cms_core.hybrid import draw_mean_message
from cms_core.privatize import privatize
from registry.device import device_config
from registry.loader import parse_registry
from tests.vectors.make_numeric_hierarchy_vectors import repeated_cases, write_vectors
from tests.vectors.make_privatize_vectors import Recorder

REGISTRY = """\
metrics:
  - name: latency_split
    description: 11 explicit buckets by direct RR and a Hybrid mean (2 parts), eps 1 (PM with probability 0.39)
    owner: vectors
    numeric: {lower: 0, upper: 10000, buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000], mean_mechanism: hybrid}
    epsilon: 1
    mechanism: direct
  - name: payload_tree_mean
    description: 20 base-2 buckets as a tree of 3 levels and a Hybrid mean (4 parts), eps 2
    owner: vectors
    numeric: {lower: 1, upper: 1048576, exponential: {scale: 0}, branching: 4, mean_mechanism: hybrid}
    epsilon: 2
    mechanism: hierarchy
  - name: startup_mean
    description: only the mean (1 part, no part drawn), eps 4 (PM with probability 0.86)
    owner: vectors
    numeric: {lower: -50, upper: 50, buckets: [0], answers: [mean], mean_mechanism: hybrid}
    epsilon: 4
  - name: tiny_eps_mean
    description: only the mean at eps 0.5, below eps* (Duchi's mechanism alone)
    owner: vectors
    numeric: {lower: 0, upper: 1, buckets: [0.5], answers: [mean], mean_mechanism: hybrid}
    epsilon: 0.5
"""

#: Numbers per metric, as a device measures them (clipped below and above, on the bounds, on and off the grid).
VALUES = {
    "latency_split": [0, 5, 42.42, 9999.99, 10000, 1e9, -3],
    "payload_tree_mean": [1, 3, 1000.5, 65536, 1048576, 5e7, 0.5],
    "startup_mean": [-50, -0.1, 0, 12.3456789, 50, 1e300, -math.inf],
    "tiny_eps_mean": [0, 0.1, 0.5, 0.999, 1, 2],
}
#: Draws per metric (distinct seeds): enough that every part, both branches and both PM outcomes are some case's.
REPEATS = 4


def _json_number(x: float):
    return x if math.isfinite(x) else ("Infinity" if x > 0 else "-Infinity")


def case(version, value, seed: str) -> dict:
    """The Python device path on recorded bytes: the part first, then a Hybrid report or the histogram's."""
    random = Recorder(seed)
    mean = version.mean
    out = {"metric": version.metric, "value": _json_number(value)}
    message = draw_mean_message(mean.hybrid, mean.parts, mean.carrier, float(value), random)
    if message is not None:
        (report,) = wire.decode_message(message, {mean.fingerprint: mean.carrier})[1].to_reports()
        out.update(part=0, z=int(report.z), fingerprint=mean.fingerprint.hex())
    else:
        bucket = version.numeric.bucket(value)
        params, node = version.params, bucket
        if version.hierarchy is not None:
            level, node = draw_node(version.hierarchy, bucket, random)
            params = version.tree_levels()[level - 1].params
        message = wire.encode_report(params, privatize(params, node, random))
        out.update(part="histogram", bucket=bucket, fingerprint=params.fingerprint.hex())
    return {**out, "random_hex": random.drawn.hex(), "message_hex": message.hex()}


def build() -> dict:
    registry = parse_registry(REGISTRY, "<numeric mean vectors>")
    cases = repeated_cases(registry, VALUES, REPEATS, case)
    return {"format": "ocms numeric mean v1",
            "contract": "cms_core/hybrid.py draw_mean_message, privatize_value; docs/device.md 'Numeric means'",
            "device_config": device_config(registry), "cases": cases}


PATH = Path(__file__).with_name("numeric_mean_v1.json")


def main() -> None:
    write_vectors(PATH, build())


if __name__ == "__main__":
    main()
