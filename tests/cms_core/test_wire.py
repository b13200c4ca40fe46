import json
from pathlib import Path

import numpy as np
import pytest

from cms_core import OCMSParams, Report, ReportBatch, wire
from cms_core.privatize import simulate_reports

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "wire_v1.json").read_text())
PARAMS = {name: OCMSParams.build(**{k: v for k, v in spec.items() if k != "fingerprint"})
          for name, spec in VECTORS["param_sets"].items()}
REGISTRY = {p.fingerprint: p for p in PARAMS.values()}
REASON_CLASSES = {cls.reason: cls for cls in wire.WireFormatError.__subclasses__()}


def test_fingerprints_pinned_by_vectors():
    for name, spec in VECTORS["param_sets"].items():
        assert PARAMS[name].fingerprint.hex() == spec["fingerprint"], name


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["title"])
def test_vector_decodes_to_fields(vector):
    params, batch = wire.decode_message(bytes.fromhex(vector["hex"]), REGISTRY)
    assert params is PARAMS[vector["params"]]
    expected = [Report(int(r["a0"]), int(r["a1"]), r["z"]) for r in vector["records"]]
    assert batch.to_reports() == expected


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["title"])
def test_fields_encode_to_vector(vector):
    params = PARAMS[vector["params"]]
    reports = [Report(int(r["a0"]), int(r["a1"]), r["z"]) for r in vector["records"]]
    msg = wire.encode_batch(params, ReportBatch.from_reports(params, reports), kind=vector["kind"])
    assert msg.hex() == vector["hex"]
    if vector["kind"] == wire.KIND_REPORT:
        assert wire.encode_report(params, reports[0]).hex() == vector["hex"]


@pytest.mark.parametrize("vector", VECTORS["malformed"], ids=lambda v: v["title"])
def test_malformed_vector_raises_its_specific_error(vector):
    with pytest.raises(wire.WireFormatError) as info:
        wire.decode_message(bytes.fromhex(vector["hex"]), REGISTRY)
    assert info.value.reason == vector["reason"]
    assert type(info.value) is REASON_CLASSES[vector["reason"]]


def test_every_reason_has_a_malformed_vector():
    assert {v["reason"] for v in VECTORS["malformed"]} == set(wire.REASONS)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_round_trip_random_frames(name):
    params = PARAMS[name]
    rng = np.random.default_rng(3)
    n = 1000
    values = rng.integers(0, 2**63, (n, 2), dtype=np.uint64) if params.field.bits > 64 else \
        rng.integers(0, min(params.dictionary_size, 2**63), n, dtype=np.uint64)
    batch = simulate_reports(params, values, rng)
    msg = wire.encode_frame(params, batch)
    assert len(msg) == wire.HEADER_SIZE + n * params.report_bytes
    back_params, back = wire.decode_message(msg, REGISTRY)
    assert back_params is params
    np.testing.assert_array_equal(back.a0, batch.a0)
    np.testing.assert_array_equal(back.a1, batch.a1)
    np.testing.assert_array_equal(back.z, batch.z)


def test_small_field_small_reports():
    params = PARAMS["small"]
    assert wire.record_size(params) == 5
    assert len(wire.encode_report(params, Report(1, 2, 3))) == 21


def test_encode_refuses_invalid():
    params = PARAMS["small"]
    with pytest.raises(Exception):
        wire.encode_report(params, Report(10007, 0, 0))
    with pytest.raises(wire.CountMismatchError):
        wire.encode_batch(params, ReportBatch.from_reports(params, [Report(1, 1, 1)] * 2), kind=wire.KIND_REPORT)
    with pytest.raises(wire.CountMismatchError):
        wire.encode_frame(params, ReportBatch.empty(params))


def test_foreign_bytes_never_crash():
    rng = np.random.default_rng(0)
    for size in list(range(0, 40)) + [100, 1000]:
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        with pytest.raises(wire.WireFormatError):
            wire.decode_message(data, REGISTRY)
    for text in (b"", b"{}", b'{"value": 1}', "héllo".encode()):
        with pytest.raises(wire.WireFormatError):
            wire.decode_message(text, REGISTRY)


def test_encode_reports_vectorized_equals_single_encoder():
    params = PARAMS["small"]
    rng = np.random.default_rng(8)
    batch = simulate_reports(params, rng.integers(0, 10_000, 50).astype(np.uint64), rng)
    messages = wire.encode_reports(params, batch)
    assert messages == [wire.encode_report(params, r) for r in batch.to_reports()]
    assert wire.encode_reports(params, ReportBatch.empty(params)) == []


#: Every coefficient width (1, 2, 3, 4, 8, 16 bytes) and z width (1 to 4) the codec produces, direct
#: RR included: 3-byte fields take the padded path, the others are read in place by one numpy view.
WIDTH_SWEEP = [dict(epsilon=2.0, dictionary_size=d) for d in (20, 300, 70_000, 20_000_000, 2**40, 2**64)] + [
    dict(epsilon=2.0, value_domain="string"),
    dict(epsilon=1.0, dictionary_size=1000, hash_range=300),
    dict(epsilon=1.0, dictionary_size=10**6, hash_range=70_000),
    dict(epsilon=1.0, dictionary_size=10**9, hash_range=20_000_000),
] + [dict(epsilon=2.0, dictionary_size=d, mechanism="direct") for d in (16, 300, 70_000, 20_000_000)]


@pytest.mark.parametrize("spec", WIDTH_SWEEP, ids=lambda s: "-".join(f"{v}" for v in s.values()))
def test_every_field_width_decodes_to_what_was_encoded_on_both_paths(spec, monkeypatch):
    params = OCMSParams.build(**spec)
    rng = np.random.default_rng(5)
    n = 257
    if params.field.bits > 64:
        values = rng.integers(0, 2**63, (n, 2), dtype=np.uint64)
    else:
        values = rng.integers(0, min(params.dictionary_size, 2**63), n, dtype=np.uint64)
    batch = simulate_reports(params, values, rng)
    message = wire.encode_frame(params, batch)
    decoded = [wire.decode_message(message, {params.fingerprint: params})[1]]
    monkeypatch.setattr(wire, "_record_dtype", lambda p: None)  # force the padded path
    decoded.append(wire.decode_message(message, {params.fingerprint: params})[1])
    for back in decoded:
        np.testing.assert_array_equal(back.a0, batch.a0)
        np.testing.assert_array_equal(back.a1, batch.a1)
        np.testing.assert_array_equal(back.z, batch.z)
        assert back.a0.dtype == batch.a0.dtype and back.z.dtype == np.uint32


def test_the_shuffled_batch_size_of_a_frame_s_kafka_headers():
    """A shuffling collector's ``ocms-shuffle-n``: 0 without it; the size when it is a count of at least
    the frame's records; None (the caller counts the frame as not shuffled) for anything else."""
    size = wire.shuffled_batch_size
    assert size(None, 5) == 0 and size([], 5) == 0 and size([("ocms-frame", b"x" * 16)], 5) == 0
    assert size([("ocms-shuffle-n", b"50000")], 100) == 50000
    assert size([(b"ocms-shuffle-n", b"7")], 7) == 7 and size({"ocms-shuffle-n": b"12"}, 3) == 12
    for bad in (b"6", b"", b"-8", b"1e5", b"12345678901", "\u0661\u0662".encode(), b"0"):
        assert size([("ocms-shuffle-n", bad)], 7) is None, bad
    assert size([("ocms-shuffle-n", b"10"), ("ocms-shuffle-n", b"10")], 3) is None, "two sizes: neither believed"
