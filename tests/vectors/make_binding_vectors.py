"""Regenerate tests/vectors/binding_v1.json: fingerprints of parameters bound to a registry metric.

    PYTHONPATH=. .venv/bin/python tests/vectors/make_binding_vectors.py

Run only when the fingerprint derivation changes on purpose (it must not for published
versions). The committed JSON is the contract: tests/registry/test_binding_vectors.py
recomputes every fingerprint from docs/wire-format.md's description alone and checks
cms_core and the wire bytes against it.
"""

from __future__ import annotations

import json
from pathlib import Path

from cms_core import OCMSParams, Report, ReportBatch, wire

# (binding, build arguments): the shipped registry's kinds of metric, twins with identical numbers,
# a direct-RR version and a non-ASCII binding (cms_core accepts any printable label).
CASES = [
    ("flight_dest@1", {"epsilon": 2.0, "dictionary_size": 105}),
    ("twin_a@1", {"epsilon": 2.0, "dictionary_size": 105}),
    ("twin_a@2", {"epsilon": 2.0, "dictionary_size": 105}),
    ("build_id@1", {"epsilon": 2.0, "dictionary_size": 2**64}),
    ("crash_signature@1", {"epsilon": 3.0, "value_domain": "string", "mode": "l2", "tracked_count": 12}),
    ("app_launches@1", {"epsilon": 2.0, "dictionary_size": 8, "mechanism": "direct"}),
    ("écran@1", {"epsilon": 1.0, "dictionary_size": 1000}),
]


def main() -> None:
    vectors = []
    for binding, kwargs in CASES:
        params = OCMSParams.build(**kwargs, binding=binding)
        unbound = OCMSParams.build(**kwargs)
        report = Report(0, 1, 0) if params.mechanism == "direct" else Report(params.field.order - 1, 1, params.hash_range - 1)
        message = wire.encode_batch(params, ReportBatch.from_reports(params, [report]), kind=wire.KIND_REPORT)
        vectors.append({
            "binding": binding,
            "epsilon": params.epsilon,
            "hash_range": params.hash_range,
            "field": str(params.field),
            "field_descriptor": params.field.descriptor().hex(),
            "dictionary_size": str(params.dictionary_size),
            "value_domain": params.value_domain,
            "mechanism": params.mechanism,
            "fingerprint": params.fingerprint.hex(),
            "unbound_fingerprint": unbound.fingerprint.hex(),
            "single_report": {"a0": str(report.a0), "a1": str(report.a1), "z": report.z, "hex": message.hex()},
        })
    path = Path(__file__).with_name("binding_v1.json")
    path.write_text(json.dumps({"format": "ocms fingerprint v1 with binding", "vectors": vectors}, indent=2,
                               ensure_ascii=False) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
