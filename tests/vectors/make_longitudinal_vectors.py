"""Regenerate tests/vectors/longitudinal_v1.json: longitudinal reports from a device secret and recorded bytes.

    .venv/bin/python -m tests.vectors.make_longitudinal_vectors

The contract is cms_core/longitudinal.py's module doc (docs/device.md, "Longitudinal reports"):
the hash of (device, metric version) and the memoized first round are drawn from keyed-BLAKE2b
streams of the device secret (``secret_hex``), the second round from the CSPRNG (here the recorded
``random_hex``, which a client must consume exactly). Each case gives what a client must produce:
the hashed value y (the ledger's key), the memoized response, the report and its wire-v1 message;
``seen_key_hex`` is what the ledger charges eps_inf once for. ``prf`` pins the first 64 bytes of
one stream, to debug a client's PRF alone. Python (tests/cms_core/test_longitudinal_vectors.py),
producer/js and producer/c replay every case.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cms_core import longitudinal as L
from cms_core import wire
from registry.device import device_config
from registry.loader import parse_registry

from .make_privatize_vectors import Recorder, report_json

REGISTRY = """\
metrics:
  - name: cat_small
    description: categories, OCMS+RR over a small prime field, memoized
    owner: vectors
    categories: [home, search, "café", "東京", "🚀", feed, settings, profile, onboarding, deep_link, wallet, maps]
    mechanism: ocms
    epsilon: 1
    lifetime_epsilon: 2
  - name: cat_direct
    description: categories, direct randomized response, memoized
    owner: vectors
    categories: [red, green, blue, "naïve", yellow]
    mechanism: direct
    epsilon: 1
    lifetime_epsilon: 3
  - name: int_prime64
    description: integers below 2^62 (field F(2^64 - 59)), memoized
    owner: vectors
    integers: 2^62
    tracked: ["0", "1"]
    epsilon: 1.07
    lifetime_epsilon: 4.39
  - name: int_gf64
    description: 64-bit integers (field GF(2^64)), memoized
    owner: vectors
    integers: 2^64
    tracked: ["0", "18446744073709551615"]
    epsilon: 2
    lifetime_epsilon: 4
  - name: words
    description: open strings (field GF(2^128)), memoized
    owner: vectors
    strings: true
    tracked: [the]
    epsilon: 0.5
    lifetime_epsilon: 1
"""

VALUES = {
    "cat_small": ["home", "café", "東京", "maps", "home"],
    "cat_direct": ["red", "naïve", "yellow", "red"],
    "int_prime64": ["0", "1", "4611686018427387903"],
    "int_gf64": ["0", "18446744073709551615", "12345678901234567890"],
    "words": ["the", "café", "", "東京タワー"],
}

SECRETS = [hashlib.sha256(b"ocms longitudinal vector secret " + bytes([i])).digest() for i in range(2)]


def case(registry, name: str, value: str, secret: bytes, seed: str) -> dict:
    version = registry.metric(name).latest
    lp = version.longitudinal
    random = Recorder(seed)
    made = L.privatize_longitudinal(lp, secret, version.value_from_name(value), random)
    message = wire.encode_report(lp.report, made.report)
    return {"metric": name, "value": value, "secret_hex": secret.hex(), "hashed": made.hashed,
            "memoized": L.memoized_response(lp, secret, made.hashed), "random_hex": random.drawn.hex(),
            "report": report_json(made.report), "message_hex": message.hex(),
            "seen_key_hex": L.seen_key(lp, made.hashed).hex()}


def build() -> dict:
    registry = parse_registry(REGISTRY)
    cases = []
    for name, values in VALUES.items():
        for i, value in enumerate(values):
            for s, secret in enumerate(SECRETS):
                cases.append(case(registry, name, value, secret, f"{name}/{i}/{s}"))
    lp = registry.metric("int_prime64").latest.longitudinal
    label = L.HASH_LABEL + lp.report.fingerprint
    prf = {"secret_hex": SECRETS[0].hex(), "label_hex": label.hex(),
           "first_64_hex": L.prf_stream(SECRETS[0], label)(64).hex(),
           "next_64_hex": L.prf_stream(SECRETS[0], label)(128)[64:].hex()}
    return {
        "format": "ocms longitudinal v1",
        "contract": "cms_core/longitudinal.py module doc; docs/device.md 'Longitudinal reports'",
        "device_config": device_config(registry),
        "prf": prf,
        "cases": cases,
    }


PATH = Path(__file__).with_name("longitudinal_v1.json")


def render() -> str:
    """The file's text (tests/producer/test_longitudinal_vectors.py compares it with the committed one)."""
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    PATH.write_text(render(), encoding="utf-8")
    print(f"wrote {PATH}")
