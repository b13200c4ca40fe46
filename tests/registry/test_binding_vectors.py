"""The bound fingerprint, recomputed from docs/wire-format.md alone, against the committed vectors."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

from cms_core import OCMSParams, wire
from cms_core.wire import UnknownFingerprintError
from cms_core.params import STRING_DICTIONARY_SIZE

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "binding_v1.json").read_text(encoding="utf-8"))["vectors"]


def documented_fingerprint(epsilon: float, m: int, field_descriptor: bytes, d: int, value_domain: str,
                           mechanism: str, binding: str | None) -> bytes:
    """The derivation exactly as docs/wire-format.md states it (no cms_core code)."""
    h = hashlib.blake2b(digest_size=8, person=b"ocms-params")
    h.update(struct.pack(">BdI", 1, epsilon, m))
    h.update(field_descriptor)
    h.update(d.to_bytes(17, "big"))
    h.update(value_domain.encode())
    if mechanism != "ocms":
        h.update(b"mechanism" + mechanism.encode())
    if binding is not None:
        label = binding.encode("utf-8")
        h.update(b"binding" + len(label).to_bytes(2, "big") + label)
    return h.digest()


def _params(vector) -> OCMSParams:
    kwargs = {"mechanism": vector["mechanism"], "value_domain": vector["value_domain"]}
    d = int(vector["dictionary_size"])
    if vector["value_domain"] == "integer":
        kwargs["dictionary_size"] = d
    else:
        assert d == STRING_DICTIONARY_SIZE
    if vector["mechanism"] == "ocms":
        kwargs["hash_range"] = vector["hash_range"]
    return OCMSParams.build(vector["epsilon"], binding=vector["binding"], **kwargs)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["binding"] for v in VECTORS])
def test_documented_derivation_matches_the_vector_and_cms_core(vector):
    args = (vector["epsilon"], vector["hash_range"], bytes.fromhex(vector["field_descriptor"]),
            int(vector["dictionary_size"]), vector["value_domain"], vector["mechanism"])
    assert documented_fingerprint(*args, vector["binding"]).hex() == vector["fingerprint"]
    assert documented_fingerprint(*args, None).hex() == vector["unbound_fingerprint"]  # wire v1 when unbound
    params = _params(vector)
    assert params.fingerprint.hex() == vector["fingerprint"]
    assert params.field.descriptor().hex() == vector["field_descriptor"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["binding"] for v in VECTORS])
def test_single_report_bytes(vector):
    params = _params(vector)
    data = bytes.fromhex(vector["single_report"]["hex"])
    assert data[4:12].hex() == vector["fingerprint"]  # the header carries the bound fingerprint
    decoded_params, batch = wire.decode_message(data, {params.fingerprint: params})
    assert decoded_params is params
    (report,) = batch.to_reports()
    assert (str(report.a0), str(report.a1), report.z) == (
        vector["single_report"]["a0"], vector["single_report"]["a1"], vector["single_report"]["z"])
    # The same report under the unbound parameters is another message: it names other parameters.
    unbound = OCMSParams.build(**_kwargs(params))
    with pytest.raises(UnknownFingerprintError):
        wire.decode_message(data, {unbound.fingerprint: unbound})


def _kwargs(params: OCMSParams) -> dict:
    out = {"epsilon": params.epsilon, "mechanism": params.mechanism, "value_domain": params.value_domain}
    if params.value_domain == "integer":
        out["dictionary_size"] = params.dictionary_size
    if params.mechanism == "ocms":
        out["hash_range"] = params.hash_range
    return out


def test_identical_numbers_never_share_a_fingerprint():
    by_numbers = {}
    for v in VECTORS:
        key = (v["epsilon"], v["hash_range"], v["field"], v["dictionary_size"], v["value_domain"], v["mechanism"])
        by_numbers.setdefault(key, []).append(v)
    twins = [group for group in by_numbers.values() if len(group) > 1]
    assert twins, "the vectors must hold metrics with identical numbers"
    for group in twins:
        assert len({v["fingerprint"] for v in group}) == len(group)
        assert len({v["unbound_fingerprint"] for v in group}) == 1


def test_the_registry_uses_this_derivation():
    from registry import load_registry

    reg = load_registry(Path(__file__).parents[2] / "deploy" / "registry.yaml")
    shipped = {v.binding: v.fingerprint.hex() for v in reg.versions()}
    for vector in VECTORS:
        if vector["binding"] in shipped:
            assert shipped[vector["binding"]] == vector["fingerprint"], vector["binding"]
