"""Regenerate tests/vectors/wire_v1.json (run only when the format version changes).

    .venv/bin/python tests/vectors/make_wire_vectors.py

The committed JSON is the contract: tests decode its hex and re-encode its
fields, so an accidental format change fails them.
"""

from __future__ import annotations

import json
from pathlib import Path

from cms_core import OCMSParams, Report, ReportBatch
from cms_core.fields import PRIME_64
from cms_core import wire

PARAM_SETS = {
    "small": {"epsilon": 2.0, "dictionary_size": 10_000},
    "prime64": {"epsilon": 1.0, "dictionary_size": 2**40},
    "gf64": {"epsilon": 3.0, "dictionary_size": 2**64},
    "strings": {"epsilon": 2.0, "value_domain": "string"},
}


def build(name: str) -> OCMSParams:
    return OCMSParams.build(**PARAM_SETS[name])


def main() -> None:
    valid = []
    cases = [
        ("single report, F(10007), m=4", "small", wire.KIND_REPORT, [Report(1, 10006, 3)]),
        ("frame of 3, F(10007), m=4", "small", wire.KIND_FRAME, [Report(0, 0, 0), Report(4242, 17, 1), Report(10006, 1, 2)]),
        ("single report, F(2^64-59), m=3", "prime64", wire.KIND_REPORT, [Report(PRIME_64 - 1, 0, 2)]),
        ("frame of 2, GF(2^64)", "gf64", wire.KIND_FRAME, [Report(2**64 - 1, 2**63, 5), Report(1, 2, 0)]),
        ("single report, GF(2^128) strings", "strings", wire.KIND_REPORT, [Report(2**128 - 1, 2**64, 3)]),
    ]
    for title, pname, kind, reports in cases:
        params = build(pname)
        msg = wire.encode_batch(params, ReportBatch.from_reports(params, reports), kind=kind)
        valid.append({
            "title": title, "params": pname, "kind": kind, "hex": msg.hex(),
            "records": [{"a0": str(r.a0), "a1": str(r.a1), "z": r.z} for r in reports],
        })
    small = build("small")
    good = bytes.fromhex(valid[1]["hex"])
    single = bytes.fromhex(valid[0]["hex"])
    rec = wire.record_size(small)
    malformed = [
        ("bad magic", b"XX" + good[2:], "bad_magic"),
        ("version 2", good[:2] + b"\x02" + good[3:], "bad_version"),
        ("kind 3", good[:3] + b"\x03" + good[4:], "bad_kind"),
        ("unknown fingerprint", good[:4] + b"\x00" * 8 + good[12:], "unknown_fingerprint"),
        ("shorter than the header", good[:10], "truncated"),
        ("body cut in a record", good[:-1], "truncated"),
        ("one stray byte", good + b"\x00", "oversized"),
        ("header says 3, body holds 4", good + good[16 : 16 + rec], "count_mismatch"),
        ("single report with count 2", single[:12] + (2).to_bytes(4, "big") + single[16:] * 2, "count_mismatch"),
        ("empty frame", good[:12] + b"\x00\x00\x00\x00", "count_mismatch"),
        ("a0 = p", good[:16] + (10007).to_bytes(2, "big") + good[18:], "coefficient_out_of_field"),
        ("a1 = 65535", good[:18] + b"\xff\xff" + good[20:], "coefficient_out_of_field"),
        ("z = m", good[:20] + b"\x04" + good[21:], "z_out_of_range"),
    ]
    out = {
        "format": "ocms wire v1",
        "param_sets": {k: {**v, "fingerprint": build(k).fingerprint.hex()} for k, v in PARAM_SETS.items()},
        "valid": valid,
        "malformed": [{"title": t, "params": "small", "hex": m.hex(), "reason": r} for t, m, r in malformed],
    }
    path = Path(__file__).with_name("wire_v1.json")
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
