"""tests/vectors/longitudinal_v1.json: what the JS and C clients must reproduce byte for byte (issue 38).

The Python device path (cms_core.longitudinal) regenerates the committed file exactly; each case's report
is a second round of the memoized response derived from the secret, its hash the device's for life.
"""

import json

from cms_core import longitudinal as L
from registry.loader import parse_registry
from tests.vectors import make_longitudinal_vectors as vectors


def test_committed_vectors_are_what_the_python_device_path_draws_today():
    committed = vectors.PATH.read_text(encoding="utf-8")
    assert vectors.render() == committed, ("the Python device path no longer reproduces "
                                           "tests/vectors/longitudinal_v1.json; if the contract changed on purpose, "
                                           "bump its format and regenerate")


def test_vectors_cover_every_field_kind_and_both_mechanisms_and_pin_the_hash_per_device():
    doc = json.loads(vectors.PATH.read_text(encoding="utf-8"))
    configs = {m["name"]: m for m in doc["device_config"]["metrics"]}
    assert all("longitudinal" in m for m in configs.values())
    kinds = {(m["field"]["kind"], m["field"].get("degree"), m.get("mechanism", "ocms")) for m in configs.values()}
    assert {("prime", None, "ocms"), ("prime", None, "direct"), ("binary", 64, "ocms"), ("binary", 128, "ocms")} <= kinds
    registry = parse_registry(vectors.REGISTRY)
    by_device: dict = {}
    for c in doc["cases"]:
        lp = registry.metric(c["metric"]).latest.longitudinal
        secret = bytes.fromhex(c["secret_hex"])
        assert (int(c["report"]["a0"]), int(c["report"]["a1"])) == L.device_hash(lp, secret)
        by_device.setdefault((c["metric"], c["secret_hex"]), set()).add((c["report"]["a0"], c["report"]["a1"]))
        assert c["memoized"] == L.memoized_response(lp, secret, c["hashed"])
    assert all(len(hashes) == 1 for hashes in by_device.values())  # one hash per (device, version), for life
    assert len({c["secret_hex"] for c in doc["cases"]}) == 2
