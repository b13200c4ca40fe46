"""The randomness contract (cms_core.privatize) and its cross-language vectors.

tests/vectors/privatize_v1.json is what the JS (producer/js) and C (producer/c) clients must
reproduce byte for byte; these tests keep the Python device path and the file in step.
"""

import json

import pytest

from cms_core.errors import InvalidValueError
from cms_core.privatize import draw_below, draw_bits64
from tests.vectors import make_privatize_vectors as vectors


class Stream:
    def __init__(self, data: bytes):
        self.data, self.used = data, 0

    def __call__(self, n: int) -> bytes:
        assert self.used + n <= len(self.data), "drew past the recorded bytes"
        out = self.data[self.used:self.used + n]
        self.used += n
        return out


def test_committed_vectors_are_what_the_python_device_path_draws_today():
    committed = vectors.PATH.read_text(encoding="utf-8")
    assert vectors.render() == committed, ("the Python device path no longer reproduces tests/vectors/privatize_v1.json; "
                                           "if the contract changed on purpose, bump its format and regenerate")


def test_vectors_cover_every_field_kind_mechanism_rejection_and_discovery():
    doc = json.loads(vectors.PATH.read_text(encoding="utf-8"))
    configs = {m["name"]: m for m in doc["device_config"]["metrics"]}
    kinds = {(m["field"]["kind"], m["field"].get("degree"), m.get("mechanism", "ocms")) for m in configs.values()}
    assert {("prime", None, "ocms"), ("prime", None, "direct"), ("binary", 64, "ocms"), ("binary", 128, "ocms")} <= kinds
    assert any(int(m["field"].get("order", 0)) == 2**64 - 59 for m in configs.values())
    assert {c["metric"] for c in doc["singles"] if "level" in c} == {"words_disc", "utf8_disc", "build_disc"}
    assert sum("note" in c for c in doc["singles"]) == 3  # the forced rejections
    for case in doc["singles"] + doc["frames"]:
        assert case["message_hex"].startswith("4f4301")


def test_draw_below_takes_whole_bytes_rejects_at_or_above_n_and_draws_nothing_for_one():
    assert draw_below(Stream(b""), 1) == 0
    assert draw_below(Stream(bytes([0xFF, 0x03])), 5) == 3  # 0xff & 7 = 7 >= 5 rejected, then 3
    stream = Stream(bytes([0x01, 0x00]))
    assert draw_below(stream, 257) == 256 and stream.used == 2  # 9 bits: two bytes, big-endian
    assert draw_bits64(Stream(bytes(range(8)))) == 0x0001020304050607
    with pytest.raises(ValueError):
        draw_below(Stream(b""), 0)


@pytest.mark.parametrize("case", json.loads(vectors.PATH.read_text(encoding="utf-8"))["invalid"],
                         ids=lambda c: f"{c['metric']}:{c['value']}")
def test_invalid_values_are_refused_before_any_byte_is_drawn(case):
    from registry.loader import parse_registry

    version = parse_registry(vectors.REGISTRY).metric(case["metric"]).latest
    stream = Stream(b"")
    with pytest.raises(InvalidValueError):
        value = version.value_from_name(case["value"])
        if version.discovery is not None:
            from producer.discovery import DiscoveryDevice

            DiscoveryDevice.for_version(version, random=stream).report(value)
    assert stream.used == 0
