"""Regenerate tests/vectors/privatize_v1.json: device-path reports from recorded random bytes.

    .venv/bin/python -m tests.vectors.make_privatize_vectors

Every device client (Python's ``cms_core.privatize``, producer/js, producer/c) reads its
CSPRNG through the randomness contract of :mod:`cms_core.privatize` (the order and width of
every draw). Each case here gives a metric (from ``device_config``, the JSON
``ocms registry device-config`` prints), a value as a device receives it (a JSON string:
category names, integers as decimal digits, strings), the exact random bytes the device
draws (``random_hex``) and what it must produce: the level (discovery), the report
(a0, a1, z; decimal strings) and the wire-v1 message. A client must consume exactly
``random_hex`` (no byte more, none less). ``frames`` pack several reports of one metric
into one frame message; ``invalid`` lists values a device must refuse before it draws.

The committed JSON is the contract; tests/cms_core/test_privatize_vectors.py checks the
Python device path still reproduces it, and the JS and C clients' tests read it, so a case
added here is picked up by all three.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cms_core import wire
from cms_core.privatize import privatize
from cms_core.reports import ReportBatch
from producer.discovery import DiscoveryDevice
from registry.device import device_config
from registry.loader import parse_registry

#: One metric per field kind and mechanism the registry can produce, plus discoverable ones.
REGISTRY = """\
metrics:
  - name: cat_small
    description: categories, OCMS+RR over a small prime field
    owner: vectors
    categories: [home, search, "café", "東京", "🚀", feed, settings, profile, onboarding, deep_link, wallet, maps]
    mechanism: ocms
    epsilon: 2
  - name: cat_direct
    description: categories, direct randomized response
    owner: vectors
    categories: [red, green, blue, "naïve", yellow]
    mechanism: direct
    epsilon: 1
  - name: int_prime64
    description: integers below 2^62 (field F(2^64 - 59))
    owner: vectors
    integers: 2^62
    tracked: ["0", "1"]
    epsilon: 1.5
  - name: int_gf64
    description: 64-bit integers (field GF(2^64))
    owner: vectors
    integers: 2^64
    tracked: ["0", "18446744073709551615"]
    epsilon: 3
  - name: words
    description: open strings (field GF(2^128), 128-bit value fingerprint)
    owner: vectors
    strings: true
    tracked: [the, "café"]
    epsilon: 2.5
    mode: l2
  - name: words_disc
    description: discoverable strings over an alphabet
    owner: vectors
    strings: true
    tracked: [the]
    epsilon: 4
    discovery: {alphabet: "abcdefghijklmnopqrstuvwxyz", max_length: 4}
  - name: utf8_disc
    description: discoverable strings over UTF-8 bytes (prefixes may end inside a character)
    owner: vectors
    strings: true
    tracked: ["café"]
    epsilon: 3
    discovery: {alphabet: utf8, max_length: 6}
  - name: build_disc
    description: discoverable 16-bit integers
    owner: vectors
    integers: 2^16
    tracked: {range: [0, 10]}
    epsilon: 2
    discovery: {bits_per_level: 8}
"""

#: Values per metric, as a device receives them (JSON strings).
VALUES = {
    "cat_small": ["home", "café", "東京", "🚀", "maps", "search"],
    "cat_direct": ["red", "naïve", "yellow", "blue"],
    "int_prime64": ["0", "1", "9007199254740993", "4611686018427387903"],
    "int_gf64": ["0", "9007199254740993", "18446744073709551615", "12345678901234567890"],
    "words": ["the", "café", "", "東京タワー", "a" * 300, "🚀 launch"],
    "words_disc": ["the", "zebra", "a", ""],
    "utf8_disc": ["café", "東京", "ab東京タワー東京", "x"],
    "build_disc": ["0", "255", "256", "65535"],
}

#: Values a device must refuse (nothing drawn, nothing charged), with what is wrong.
INVALID = [
    ("cat_small", "Home", "not a category (names are case-sensitive)"),
    ("cat_direct", "purple", "not a category"),
    ("int_prime64", "4611686018427387904", "outside the dictionary [0, 2^62)"),
    ("int_prime64", "-1", "not a non-negative decimal integer"),
    ("int_prime64", "1e3", "not a non-negative decimal integer"),
    ("int_gf64", "18446744073709551616", "outside the dictionary [0, 2^64)"),
    ("build_disc", "65536", "outside the dictionary [0, 2^16)"),
    ("words_disc", "Zebra", "a character outside the alphabet"),
]

#: Frames: several reports of one metric in one message.
FRAMES = {"cat_small": ["home", "search", "feed", "東京"], "int_gf64": ["1", "2", "3"],
          "words": ["the", "café", "the"], "cat_direct": ["red", "red", "blue"]}


class Recorder:
    """A deterministic byte stream (SHA-256 in counter mode) that records what was drawn."""

    def __init__(self, seed: str, prefix: bytes = b""):
        self.seed, self.pending, self.counter, self.drawn = seed.encode(), bytearray(prefix), 0, bytearray()

    def __call__(self, n: int) -> bytes:
        while len(self.pending) < n:
            self.pending += hashlib.sha256(self.seed + self.counter.to_bytes(8, "big")).digest()
            self.counter += 1
        out, self.pending = bytes(self.pending[:n]), self.pending[n:]
        self.drawn += out
        return out


def report_json(report) -> dict:
    return {"a0": str(report.a0), "a1": str(report.a1), "z": int(report.z)}


def single_case(registry, name: str, value: str, seed: str, prefix: bytes = b"") -> dict:
    version = registry.metric(name).latest
    random = Recorder(seed, prefix)
    case = {"metric": name, "value": value}
    if version.discovery is not None:
        device = DiscoveryDevice.for_version(version, random=random)
        result = device.report(version.value_from_name(value))
        message, params = result.message, device.params_by_level[result.level - 1]
        case["level"] = result.level
    else:
        params = version.params
        message = wire.encode_report(params, privatize(params, version.value_from_name(value), random))
    (report,) = wire.decode_message(message, {params.fingerprint: params})[1].to_reports()
    case["report"] = report_json(report)
    case["random_hex"] = random.drawn.hex()
    case["message_hex"] = message.hex()
    return case


def build() -> dict:
    registry = parse_registry(REGISTRY)
    singles = []
    for name, values in VALUES.items():
        for i, value in enumerate(values):
            singles.append(single_case(registry, name, value, f"{name}/{i}"))
    # Forced rejections: a first draw at or above the bound is thrown away and the next one taken.
    singles.append({**single_case(registry, "int_prime64", "7", "reject/prime64", b"\xff" * 8),
                    "note": "a0's first 8 bytes read 2^64 - 1 >= p = 2^64 - 59: rejected, the next 8 bytes drawn"})
    small = registry.metric("cat_small").latest.params.field.order
    singles.append({**single_case(registry, "cat_small", "home", "reject/small", b"\xff"),
                    "note": f"a0's first byte masked to {(small - 1).bit_length()} bits is "
                            f"{(1 << (small - 1).bit_length()) - 1} >= p = {small}: rejected, the next byte drawn"})
    singles.append({**single_case(registry, "cat_direct", "red", "reject/rr", b"\xff" * 9),
                    "note": "the keep draw 2^64 - 1 >= T (not kept); other = draw_below(m - 1 = 4): its first byte "
                            "masked to 2 bits is 3, accepted"})
    frames = []
    for name, values in FRAMES.items():
        version = registry.metric(name).latest
        random = Recorder(f"frame/{name}")
        reports = [privatize(version.params, version.value_from_name(v), random) for v in values]
        message = wire.encode_frame(version.params, ReportBatch.from_reports(version.params, reports))
        frames.append({"metric": name, "values": values, "random_hex": random.drawn.hex(),
                       "reports": [report_json(r) for r in reports], "message_hex": message.hex()})
    return {
        "format": "ocms privatize v1",
        "contract": "cms_core/privatize.py module doc; docs/device.md 'Randomness contract'",
        "device_config": device_config(registry),
        "singles": singles,
        "frames": frames,
        "invalid": [{"metric": m, "value": v, "reason": r} for m, v, r in INVALID],
    }


PATH = Path(__file__).with_name("privatize_v1.json")


def render() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    PATH.write_text(render(), encoding="utf-8")
    print(f"wrote {PATH}")


if __name__ == "__main__":
    main()
