"""Direct randomized response (GRR, k-RR; m = d) as a first-class mechanism beside OCMS+RR."""

import math

import numpy as np
import pytest

from cms_core import OCMSParams, OCMSSketch, TrackedValues, kernel, privatize, simulate_reports, theory, wire
from cms_core.errors import FingerprintMismatchError, InvalidParameterError, InvalidReportError, ParameterMismatchError
from cms_core.fields import BinaryField, PrimeField
from cms_core.params import MAX_HASH_RANGE, compare_mechanisms
from cms_core.reports import Report, ReportBatch

from .stats_helpers import chi2_critical, chi2_statistic


def direct(epsilon=2.0, d=16, **kw):
    return OCMSParams.build(epsilon, d, mechanism="direct", **kw)


# ------------------------------------------------------------------ parameters
def test_ocms_fingerprints_unchanged_by_the_mechanism_field():
    # Pinned before direct RR existed: captures and test vectors stay valid.
    assert OCMSParams.build(2.0, 10_000).fingerprint.hex() == "eee2f6ee10f1ea54"
    assert OCMSParams.build(2.0, 10_000, mechanism="ocms") == OCMSParams.build(2.0, 10_000)


def test_direct_params_and_fingerprint():
    p = direct(2.0, 16)
    assert (p.mechanism, p.hash_range, p.is_direct) == ("direct", 16, True)
    assert p.collision_probability == 0 and p.effective_hash_range is None
    assert p.report_bytes == 1 and direct(2.0, 300).report_bytes == 2
    ocms = OCMSParams.build(2.0, 16, hash_range=16)
    assert p.fingerprint != ocms.fingerprint  # same eps, m, d: the mechanism tells them apart
    assert p.fingerprint != direct(2.0, 16, binding="carrier@1").fingerprint
    assert p.describe()["mechanism"] == "direct" and p.describe()["effective_hash_range"] is None
    # Frozen and re-validated like OCMS parameters.
    assert OCMSParams(**{k: getattr(p, k) for k in (
        "epsilon", "hash_range", "field", "dictionary_size", "value_domain", "mode", "f_star", "tracked_count",
        "binding", "mechanism")}) == p


@pytest.mark.parametrize("kwargs, name", [
    (dict(dictionary_size=1), "dictionary_size"),
    (dict(dictionary_size=MAX_HASH_RANGE + 1), "dictionary_size"),
    (dict(dictionary_size=16, hash_range=4), "hash_range"),
    (dict(dictionary_size=16, mode="l2"), "tracked_count"),
])
def test_direct_build_rejects(kwargs, name):
    with pytest.raises(InvalidParameterError) as info:
        OCMSParams.build(2.0, mechanism="direct", **kwargs)
    assert info.value.name == name


def test_direct_rejects_strings_unknown_mechanisms_and_bad_constructions():
    with pytest.raises(InvalidParameterError, match="integer"):
        OCMSParams.build(2.0, value_domain="string", mechanism="direct")
    with pytest.raises(InvalidParameterError) as info:
        OCMSParams.build(2.0, 16, mechanism="grr")
    assert info.value.name == "mechanism"
    with pytest.raises(InvalidParameterError, match="hash_range"):
        OCMSParams.build(2.0, 16, mechanism="auto", hash_range=4)
    with pytest.raises(InvalidParameterError, match="m = d"):
        OCMSParams(2.0, 8, PrimeField(17), 16, mechanism="direct")
    with pytest.raises(InvalidParameterError, match="prime field"):
        OCMSParams(2.0, 16, BinaryField(64), 16, mechanism="direct")
    with pytest.raises(InvalidParameterError, match="mechanism"):
        OCMSParams(2.0, 16, PrimeField(17), 16, mechanism="rappor")


@pytest.mark.parametrize("mode", ["mse", "l2"])
@pytest.mark.parametrize("d", [2, 16, 105, 1000, 100_000])
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0, 5.0])
def test_auto_picks_the_lower_exact_objective(mode, d, eps):
    kw = dict(mode=mode, tracked_count=d if mode == "l2" else None)
    comparison = compare_mechanisms(eps, d, **kw)
    chosen = OCMSParams.build(eps, d, mechanism="auto", **kw)
    assert chosen == comparison.chosen
    objective = (lambda p: p.l2_loss(1.0)) if mode == "l2" else (lambda p: p.worst_case_mse(1.0))
    values = {p.mechanism: objective(p) for p in (comparison.ocms, comparison.direct)}
    assert objective(chosen) == min(values.values())
    assert comparison.describe()["chosen"] == chosen.mechanism


def test_auto_choice_matches_the_issue_rule_of_thumb():
    # Per-value variance at f -> 0: direct (e + d - 2)/(e - 1)^2 vs about 4e/(e - 1)^2: direct wins for
    # d < 3e + 2 (d < 24 at eps = 2). Exactly (m' and the prior f* = 1%) the crossovers are 24 and 126.
    assert OCMSParams.build(2.0, 23, mechanism="auto", mode="mse", f_star=0.01).mechanism == "direct"
    assert OCMSParams.build(2.0, 24, mechanism="auto", mode="mse", f_star=0.01).mechanism == "ocms"
    assert OCMSParams.build(4.0, 125, mechanism="auto", mode="mse", f_star=0.01).mechanism == "direct"
    assert OCMSParams.build(4.0, 126, mechanism="auto", mode="mse", f_star=0.01).mechanism == "ocms"
    assert OCMSParams.build(4.0, 2000, mechanism="auto", mode="l2", tracked_count=2000).mechanism == "ocms"
    # Strings have no direct mechanism: auto is OCMS+RR.
    assert OCMSParams.build(2.0, value_domain="string", mechanism="auto").mechanism == "ocms"
    assert compare_mechanisms(2.0, value_domain="string").direct is None


# ---------------------------------------------------------------------- theory
@pytest.mark.parametrize("eps, d", [(0.5, 2), (2.0, 16), (5.0, 1000)])
def test_variance_and_estimator_are_the_k_rr_formulas(eps, d):
    p = direct(eps, d)
    e = math.exp(eps)
    keep, flip = e / (e + d - 1), 1 / (e + d - 1)
    for f in (0.0, 0.3, 1.0):
        # Var of (M/n - q)/(p - q) with M ~ Binomial(n, f p + (1 - f) q).
        prob = f * keep + (1 - f) * flip
        assert p.variance(f, 1000) == pytest.approx(prob * (1 - prob) / (1000 * (keep - flip) ** 2), rel=1e-9) or f not in (0.0, 1.0)
    assert p.variance(0.0, 1) == pytest.approx((e + d - 2) / (e - 1) ** 2, rel=1e-12)
    assert p.variance(1.0, 1) == pytest.approx(e * (d - 1) / (e - 1) ** 2, rel=1e-12)
    a, b = p.estimator_coefficients
    for m_frac in (0.0, 0.2, 1.0):
        assert a * m_frac + b == pytest.approx((m_frac - flip) / (keep - flip), rel=1e-12, abs=1e-12)


# ------------------------------------------------------------- device and sim
def test_device_path_reports_are_z_with_identity_coefficients():
    p = direct(1.0, 5)
    counts = np.zeros(5)
    trials = 20_000
    for _ in range(trials):
        report = privatize(p, 3)
        assert report.a0 == 0 and report.a1 == 1 and 0 <= report.z < 5
        counts[report.z] += 1
    keep = p.keep_probability
    expected = np.full(5, trials * (1 - keep) / 4)
    expected[3] = trials * keep
    assert chi2_statistic(counts, expected) < chi2_critical(4, 1e-4)


def test_simulation_path_is_seeded_and_has_the_right_law():
    p = direct(2.0, 16)
    values = np.full(50_000, 7, np.uint64)
    a = simulate_reports(p, values, np.random.default_rng(5))
    b = simulate_reports(p, values, np.random.default_rng(5))
    assert np.array_equal(a.z, b.z) and not a.a0.any() and (a.a1 == 1).all()
    counts = np.bincount(a.z, minlength=16)
    keep = p.keep_probability
    expected = np.full(16, 50_000 * (1 - keep) / 15)
    expected[7] = 50_000 * keep
    assert chi2_statistic(counts, expected) < chi2_critical(15, 1e-4)


# ---------------------------------------------------------------------- decode
@pytest.mark.parametrize("d", [2, 16, 1000, (1 << 24) + 3])
def test_decode_is_exact_against_the_slow_references(d):
    p = direct(2.0, d)
    rng = np.random.default_rng(d)
    batch = simulate_reports(p, rng.integers(0, min(d, 40), 3000).astype(np.uint64), rng)
    tracked = TrackedValues.of(p, sorted({0, 1, d - 1, *range(0, min(d, 40), 3)}))
    fast = kernel.match_counts(p, batch, tracked)
    assert np.array_equal(fast, kernel.reference_match_counts(p, batch, tracked))
    assert np.array_equal(fast, kernel.match_counts(p, batch, tracked, backend="numpy"))
    # The identity hash through the OCMS decode (a0 + a1 x mod p mod m = x) agrees too.
    from cms_core import _numpy_backend

    identity = _numpy_backend.match_counts(p.field, p.hash_range, batch.a0, batch.a1, batch.z, tracked.elements)
    assert np.array_equal(fast, identity)
    assert fast.sum() <= len(batch)


def test_decode_of_the_whole_dictionary_sums_to_n():
    p = direct(1.0, 105)
    rng = np.random.default_rng(1)
    batch = simulate_reports(p, rng.integers(0, 105, 10_000).astype(np.uint64), rng)
    counts = kernel.match_counts(p, batch, TrackedValues.range(p, 0, 105))
    assert counts.sum() == 10_000  # every report supports exactly one value
    assert np.array_equal(counts, np.bincount(batch.z, minlength=105))


def test_validate_refuses_non_identity_coefficients():
    p = direct(2.0, 16)
    with pytest.raises(InvalidReportError, match="identity"):
        ReportBatch.from_reports(p, [Report(3, 1, 2)]).validate(p)
    with pytest.raises(InvalidReportError, match="identity"):
        ReportBatch.from_reports(p, [Report(0, 5, 2)]).validate(p)
    with pytest.raises(InvalidReportError, match="z >= hash range"):
        ReportBatch.from_reports(p, [Report(0, 1, 16)]).validate(p)


# ------------------------------------------------------------------------ wire
@pytest.mark.parametrize("d, z_bytes", [(2, 1), (16, 1), (256, 1), (257, 2), (100_000, 3)])
def test_wire_records_are_z_only(d, z_bytes):
    p = direct(2.0, d)
    batch = simulate_reports(p, np.arange(min(d, 50), dtype=np.uint64), np.random.default_rng(0))
    frame = wire.encode_frame(p, batch)
    assert wire.record_size(p) == z_bytes and len(frame) == wire.HEADER_SIZE + len(batch) * z_bytes
    params, decoded = wire.decode_message(frame, {p.fingerprint: p})
    assert params is p and np.array_equal(decoded.z, batch.z)
    assert not decoded.a0.any() and (decoded.a1 == 1).all()
    singles = wire.encode_reports(p, batch)
    assert singles[0] == wire.encode_report(p, batch.to_reports()[0])
    assert all(len(m) == wire.HEADER_SIZE + z_bytes for m in singles)


def test_wire_vectors_of_the_docs():
    # docs/wire-format.md, "Direct randomized response": header | z.
    p = direct(2.0, 16)
    assert wire.encode_report(p, Report(0, 1, 3)).hex() == "4f43010198a056d0a0fd6217" "00000001" "03"
    q = direct(1.0, 1000)
    frame = bytes.fromhex("4f430102201f2c598188239e" "00000002" "03e7" "0007")
    assert wire.encode_frame(q, ReportBatch.from_reports(q, [Report(0, 1, 999), Report(0, 1, 7)])) == frame
    assert wire.decode_message(frame, {q.fingerprint: q})[1].to_reports() == [Report(0, 1, 999), Report(0, 1, 7)]


def test_wire_rejects_direct_faults():
    p = direct(2.0, 10)
    message = bytearray(wire.encode_report(p, Report(0, 1, 4)))
    message[-1] = 10
    with pytest.raises(wire.HashRangeError):
        wire.decode_message(bytes(message), {p.fingerprint: p})
    with pytest.raises(wire.UnknownFingerprintError):
        wire.decode_message(wire.encode_report(p, Report(0, 1, 4)), {OCMSParams.build(2.0, 10).fingerprint: p})
    wide = direct(2.0, 1000)
    with pytest.raises(wire.TruncatedMessageError):
        wire.decode_message(wire.encode_report(wide, Report(0, 1, 999))[:-1], {wide.fingerprint: wide})
    with pytest.raises(wire.OversizedMessageError):
        wire.decode_message(wire.encode_report(wide, Report(0, 1, 999)) + b"\x00", {wide.fingerprint: wide})


# ---------------------------------------------------------------------- sketch
def test_sketch_verbs_for_direct():
    p = direct(2.0, 16)
    rng = np.random.default_rng(3)
    tracked = TrackedValues.range(p, 0, 16)
    values = rng.integers(0, 16, 20_000).astype(np.uint64)
    first = OCMSSketch(p, tracked).update(simulate_reports(p, values[:12_000], rng))
    second = OCMSSketch(p, tracked).update(simulate_reports(p, values[12_000:], rng))
    whole = first.copy().merge(second)
    assert whole.n == 20_000 and whole.counts.sum() == 20_000
    assert OCMSSketch.deserialize(whole.serialize(), p, tracked) == whole
    other = OCMSParams.build(2.0, 16)
    with pytest.raises(FingerprintMismatchError):
        OCMSSketch.deserialize(whole.serialize(), other, TrackedValues.range(other, 0, 16))
    with pytest.raises(ParameterMismatchError):
        whole.merge(OCMSSketch(other, TrackedValues.range(other, 0, 16)))
    est = whole.estimate(postprocess_method="norm_sub")
    assert est.frequency.sum() == pytest.approx(1.0, abs=1e-12)  # k-RR estimates over all d sum to 1
    assert np.allclose(est.variance, p.variance(np.clip(est.frequency, 0, 1), 20_000))
    assert est.processed.sum() == pytest.approx(1.0)
    chernoff = whole.estimate(interval="chernoff", confidence=0.9)
    half = theory.hoeffding_half_width(p.estimator_coefficients[0], 0.9, 20_000)
    assert np.allclose(chernoff.ci_high - chernoff.frequency, half) and np.isfinite(half)


def test_estimates_are_unbiased_and_calibrated():
    # 400 rounds of a fixed dataset; tolerances from the variance formula.
    p = direct(1.0, 16)
    n, rounds = 2000, 400
    rng = np.random.default_rng(11)
    values = np.repeat(np.arange(16, dtype=np.uint64), [400, 300, 200, 100] + [1000 // 12] * 11 + [1000 - 11 * (1000 // 12)])
    assert len(values) == n
    truth = np.bincount(values, minlength=16) / n
    tracked = TrackedValues.range(p, 0, 16)
    estimates = np.empty((rounds, 16))
    covered = 0
    for r in range(rounds):
        est = OCMSSketch(p, tracked).update(simulate_reports(p, values, rng)).estimate(confidence=0.95)
        estimates[r] = est.frequency
        covered += int(((est.ci_low <= truth) & (truth <= est.ci_high)).sum())
    se = np.sqrt(p.variance(truth, n) / rounds)
    assert np.all(np.abs(estimates.mean(axis=0) - truth) < 4.5 * se)
    sample_var = estimates.var(axis=0, ddof=1)
    assert np.all(np.abs(sample_var / p.variance(truth, n) - 1) < 4.5 * math.sqrt(2 / (rounds - 1)))
    coverage = covered / (rounds * 16)
    assert abs(coverage - 0.95) < 4.5 * math.sqrt(0.95 * 0.05 / (rounds * 16))
    # Negative control: the raw support fraction M/n (no debiasing) fails the same unbiasedness check.
    raw = np.array([np.bincount(simulate_reports(p, values, rng).z, minlength=16) / n for _ in range(50)])
    assert np.any(np.abs(raw.mean(axis=0) - truth) > 4.5 * se)
