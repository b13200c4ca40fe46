import numpy as np
import pytest

from cms_core import (
    FingerprintMismatchError,
    InvalidParameterError,
    OCMSParams,
    OCMSSketch,
    ParameterMismatchError,
    ReportBatch,
    SerializationError,
    TrackedValues,
    InvalidReportError,
)
from cms_core import postprocess
from cms_core.privatize import simulate_reports

PARAMS = OCMSParams.build(2.0, 1000)
STRING_PARAMS = OCMSParams.build(2.0, value_domain="string")


def _batch(params, n, seed):
    rng = np.random.default_rng(seed)
    return simulate_reports(params, rng.zipf(1.5, n).clip(1, 999).astype(np.uint64), rng)


def test_merge_associative_and_equals_single_sketch():
    tracked = TrackedValues.range(PARAMS, 0, 1000)
    parts = [_batch(PARAMS, 3000, s) for s in range(3)]
    single = OCMSSketch(PARAMS, tracked).update(ReportBatch.concat(parts))
    a, b, c = (OCMSSketch(PARAMS, tracked).update(p) for p in parts)
    left = a.copy().merge(b).merge(c)
    right = a.copy().merge(b.copy().merge(c))
    assert left == right == single
    assert single.n == 9000


def test_merge_refuses_mismatch():
    tracked = TrackedValues.range(PARAMS, 0, 100)
    other_params = OCMSParams.build(2.5, 1000)
    with pytest.raises(ParameterMismatchError):
        OCMSSketch(PARAMS, tracked).merge(OCMSSketch(other_params, TrackedValues.range(other_params, 0, 100)))
    with pytest.raises(ParameterMismatchError):
        OCMSSketch(PARAMS, tracked).merge(OCMSSketch(PARAMS, TrackedValues.range(PARAMS, 0, 101)))
    with pytest.raises(ParameterMismatchError):
        OCMSSketch(other_params, tracked)


@pytest.mark.parametrize("params, tracked_factory", [
    (PARAMS, lambda p: TrackedValues.range(p, 0, 1000)),
    (PARAMS, lambda p: TrackedValues.of(p, [5, 3, 999])),
    (STRING_PARAMS, lambda p: TrackedValues.of(p, ["a", "b", "c"])),
])
def test_serialize_round_trip(params, tracked_factory):
    tracked = tracked_factory(params)
    rng = np.random.default_rng(1)
    values = rng.integers(0, 2**63, (500, 2), dtype=np.uint64) if params.field.bits > 64 else rng.integers(0, 1000, 500).astype(np.uint64)
    sketch = OCMSSketch(params, tracked).update(simulate_reports(params, values, rng))
    data = sketch.serialize()
    assert data[:4] == b"OCMS" and params.fingerprint in data[:16]
    back = OCMSSketch.deserialize(data, params, tracked)
    assert back == sketch
    empty = OCMSSketch(params, tracked)
    assert OCMSSketch.deserialize(empty.serialize(), params, tracked) == empty


def test_serialize_wide_counts_round_trip():
    tracked = TrackedValues.of(PARAMS, [1, 2])
    big = OCMSSketch(PARAMS, tracked, counts=np.array([2**33, 5]), n=2**34)
    assert OCMSSketch.deserialize(big.serialize(), PARAMS, tracked) == big


def test_deserialize_rejects_bad_bytes():
    tracked = TrackedValues.range(PARAMS, 0, 10)
    data = OCMSSketch(PARAMS, tracked).update(_batch(PARAMS, 100, 2)).serialize()
    with pytest.raises(SerializationError, match="truncated"):
        OCMSSketch.deserialize(data[:10], PARAMS, tracked)
    with pytest.raises(SerializationError, match="length"):
        OCMSSketch.deserialize(data[:-1], PARAMS, tracked)
    corrupt = bytearray(data)
    corrupt[40] ^= 1
    with pytest.raises(SerializationError, match="checksum"):
        OCMSSketch.deserialize(bytes(corrupt), PARAMS, tracked)
    with pytest.raises(SerializationError, match="magic"):
        OCMSSketch.deserialize(b"XXXX" + data[4:], PARAMS, tracked)
    with pytest.raises(SerializationError, match="version"):
        OCMSSketch.deserialize(data[:4] + b"\x09" + data[5:], PARAMS, tracked)
    other = OCMSParams.build(3.0, 1000)
    with pytest.raises(FingerprintMismatchError):
        OCMSSketch.deserialize(data, other, TrackedValues.range(other, 0, 10))
    with pytest.raises(FingerprintMismatchError):
        OCMSSketch.deserialize(data, PARAMS, TrackedValues.range(PARAMS, 1, 11))


def test_update_validates_reports():
    tracked = TrackedValues.range(PARAMS, 0, 10)
    batch = _batch(PARAMS, 10, 3)
    sketch = OCMSSketch(PARAMS, tracked)
    bad_z = ReportBatch(batch.a0, batch.a1, np.full(10, PARAMS.hash_range, np.uint32))
    with pytest.raises(InvalidReportError, match="z >= hash range"):
        sketch.update(bad_z)
    bad_a = ReportBatch(np.full(10, PARAMS.field.order, np.uint64), batch.a1, batch.z)
    with pytest.raises(InvalidReportError, match="a0"):
        sketch.update(bad_a)
    assert sketch.n == 0 and not sketch.counts.any()  # nothing counted from a bad batch


def test_estimate_validation_and_empty():
    sketch = OCMSSketch(PARAMS, TrackedValues.range(PARAMS, 0, 5))
    est = sketch.estimate()
    assert np.isnan(est.frequency).all() and np.isinf(est.std).all()
    for kwargs, name in [({"confidence": 1.0}, "confidence"), ({"confidence": 0}, "confidence"),
                         ({"interval": "t"}, "interval"), ({"postprocess_method": "round"}, "postprocess")]:
        with pytest.raises(InvalidParameterError) as info:
            sketch.estimate(**kwargs)
        assert info.value.name == name


def test_estimates_fields_consistent():
    sketch = OCMSSketch(PARAMS, TrackedValues.range(PARAMS, 0, 1000)).update(_batch(PARAMS, 20_000, 4))
    est = sketch.estimate(confidence=0.9, postprocess_method="norm_sub")
    np.testing.assert_allclose(est.count, est.frequency * 20_000)
    assert (est.ci_low < est.frequency).all() and (est.frequency < est.ci_high).all()
    assert est.processed.min() >= 0 and est.processed.sum() == pytest.approx(1.0)
    wide = sketch.estimate(confidence=0.9, interval="chernoff")
    assert ((wide.ci_high - wide.ci_low) > (est.ci_high - est.ci_low)).all()
    rec = est.as_records()[0]
    assert rec["value"] == 0 and isinstance(rec["frequency"], float)


def test_chernoff_interval_infinite_when_n_too_small():
    sketch = OCMSSketch(PARAMS, TrackedValues.range(PARAMS, 0, 3)).update(_batch(PARAMS, 2, 9))
    assert np.isinf(sketch.estimate(interval="chernoff", confidence=0.999).ci_high).all()


def test_postprocess_methods():
    f = np.array([0.5, 0.4, 0.2, -0.05, -0.1])
    clipped = postprocess.clip(f)
    assert clipped.min() == 0 and clipped.max() == 0.5
    ns = postprocess.norm_sub(f, total=1.0)
    assert ns.sum() == pytest.approx(1.0) and ns.min() >= 0
    np.testing.assert_allclose(ns, postprocess.project_simplex(f))  # coincide at total 1
    # brute-force check of the projection: no feasible point on a grid is closer
    sub = postprocess.project_simplex(np.array([0.3, 0.2, -0.1]))
    np.testing.assert_allclose(sub, [0.3, 0.2, 0.0])
    assert postprocess.norm_sub(np.array([-0.1, -0.2])).sum() == 0.0
    with pytest.raises(InvalidParameterError):
        postprocess.norm_sub(f, total=2.0)
