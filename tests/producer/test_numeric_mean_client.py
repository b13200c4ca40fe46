"""The Python client's reports of a numeric metric with a Hybrid mean (issue 40): each report draws its part first
(``draw_below(parts)``), part 0 a Hybrid report of the number framed with the mean's fingerprint, the others the
histogram's, byte for byte as tests/vectors/numeric_mean_v1.json says (which producer/js and producer/c are to replay
too); the parts are uniform; the contract is reimplemented here from the device config alone."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cms_core.wire import decode_message, peek_header
from registry.loader import parse_registry
from tests.vectors.make_numeric_mean_vectors import REGISTRY as VECTOR_REGISTRY, build

from .test_numeric_hierarchy_client import Replay, reports_of

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "vectors" / "numeric_mean_v1.json").read_text("utf-8"))
REGISTRY = parse_registry(VECTOR_REGISTRY, "<numeric mean vectors>")


def test_the_vectors_file_is_what_the_generator_writes():
    assert build() == VECTORS


def test_the_reporter_reproduces_every_vector_byte_for_byte(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.producer.test_numeric_hierarchy_client.REGISTRY", REGISTRY)
    cases = VECTORS["cases"]
    sources = [Replay(bytes.fromhex(c["random_hex"])) for c in cases]
    delivered, ledger = reports_of([(c["metric"], float(c["value"])) for c in cases], tmp_path, sources)
    assert [m.hex() for m in delivered] == [c["message_hex"] for c in cases]
    assert all(s.at == len(s.data) for s in sources)  # every recorded byte drawn, none more
    for name in ("latency_split", "startup_mean"):  # one epsilon per report, whatever the part
        epsilon = REGISTRY.metric(name).latest.params.epsilon
        assert ledger.spent(name) == pytest.approx(epsilon * sum(c["metric"] == name for c in cases))


def hybrid_from_config(entry: dict, value: float, random) -> int | None:
    """The contract (make_numeric_mean_vectors' docstring) from the device config's ``mean`` alone."""
    mean = {k: int(v) if isinstance(v, str) else v for k, v in entry["mean"].items()
            if k in ("parts", "lower", "upper", "grid", "window", "pm_share", "pm_keep", "duchi_low", "duchi_step")}

    def bits64():
        return int.from_bytes(random(8), "big")

    def below(n):
        if n == 1:
            return 0
        bits = (n - 1).bit_length()
        while True:
            candidate = int.from_bytes(random((bits + 7) // 8), "big") & ((1 << bits) - 1)
            if candidate < n:
                return candidate

    if below(mean["parts"]) != 0:
        return None
    x = min(max(value, mean["lower"]), mean["upper"])
    s = (x - mean["lower"]) / (mean["upper"] - mean["lower"]) * mean["grid"]
    j = min(math.floor(s), mean["grid"])
    j += bits64() < math.floor((s - j) * 2**64)
    if bits64() < mean["pm_share"]:
        if bits64() < mean["pm_keep"]:
            return j + below(mean["window"])
        other = below(mean["grid"])
        return other if other < j else other + mean["window"]
    return mean["grid"] + mean["window"] + (bits64() < mean["duchi_low"] + j * mean["duchi_step"])


def test_each_vector_follows_from_the_device_config_alone():
    configs = {m["name"]: m for m in VECTORS["device_config"]["metrics"]}
    seen = set()
    for c in VECTORS["cases"]:
        entry = configs[c["metric"]]
        z = hybrid_from_config(entry, float(c["value"]), Replay(bytes.fromhex(c["random_hex"])))
        if c["part"] == 0:
            assert z == c["z"], c
            assert peek_header(bytes.fromhex(c["message_hex"]))[1].hex() == entry["mean"]["fingerprint"]
            seen.add((c["metric"], "duchi" if z >= entry["mean"]["grid"] + entry["mean"]["window"] else "pm"))
        else:
            assert z is None and c["fingerprint"] != entry["mean"]["fingerprint"]
            seen.add((c["metric"], "histogram"))
    assert {("latency_split", "histogram"), ("payload_tree_mean", "histogram"), ("startup_mean", "pm"),
            ("startup_mean", "duchi"), ("tiny_eps_mean", "duchi")} <= seen
    assert ("tiny_eps_mean", "pm") not in seen  # below eps* the Hybrid mechanism is Duchi's alone


def test_parts_are_drawn_uniformly_and_each_report_decodes(tmp_path, monkeypatch):
    """600 reports of latency_split (2 parts): about 300 Hybrid ones (binomial sd 12.2), each decoding with the
    carrier's parameters into [0, M + 2); the others are the histogram's bucket reports."""
    monkeypatch.setattr("tests.producer.test_numeric_hierarchy_client.REGISTRY", REGISTRY)
    version = REGISTRY.metric("latency_split").latest
    delivered, _ = reports_of([("latency_split", 60.0)] * 600, tmp_path)
    mean = [m for m in delivered if peek_header(m)[1] == version.mean.fingerprint]
    rest = [m for m in delivered if peek_header(m)[1] == version.fingerprint]
    assert len(mean) + len(rest) == 600 and abs(len(mean) - 300) < 4.5 * math.sqrt(600 * 0.25)
    z = [int(r) for m in mean for r in decode_message(m, {version.mean.fingerprint: version.mean.carrier})[1].z]
    assert 0 <= min(z) and max(z) < version.mean.hybrid.outputs


def test_a_gateway_frames_the_mean_part_apart(tmp_path, monkeypatch):
    """RegistryGateway takes a Hybrid mean's part as a version of its own and never mixes it with the histogram's."""
    from collections import Counter

    from tests.producer.test_numeric_hierarchy_client import through_gateway

    monkeypatch.setattr("tests.producer.test_numeric_hierarchy_client.REGISTRY", REGISTRY)
    delivered, _ = reports_of([("latency_split", float(x)) for x in range(0, 4000, 20)], tmp_path)
    version = REGISTRY.metric("latency_split").latest
    parts = {version.fingerprint: version, version.mean.fingerprint: version.mean_parts()[0]}
    versions, framed = through_gateway(REGISTRY, delivered, parts)
    assert {v.binding for v in versions} == {"latency_split@1", "latency_split@1/mean"}
    assert framed == Counter(v.binding for v in versions)  # nothing lost, nothing mixed
