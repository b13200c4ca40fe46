"""Baseline oracles (cms_core.baselines): unbiasedness and variance over seeded rounds.

Every statistical check uses fixed seeds and tolerances from the sampling
distribution: the mean of R estimates has standard error sqrt(Var / R); the
sample variance of R (near-normal) estimates has relative standard error
sqrt(2 / (R - 1)). SIGMAS standard errors either way. The negative controls
show the same checks reject a wrong decoder.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cms_core import theory
from cms_core.baselines import (
    ORACLE_NAMES,
    AppleCMSHE,
    HadamardEncoding,
    OCMSOracle,
    OptimizedLocalHashing,
    RecursiveHadamardResponse,
    fwht,
    make_oracle,
)
from cms_core.errors import InvalidParameterError, InvalidValueError, ParameterMismatchError

ROUNDS = 500
N = 2000
D_SIZE = 128
SIGMAS = 4.0
VAR_TOL = SIGMAS * math.sqrt(2.0 / (ROUNDS - 1))  # ~0.25


def dataset() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fixed dataset of N values in [0, 128): 5 at 30%, 9 at 10%, 17 at 2%, 3 absent."""
    values = np.concatenate(
        [np.full(600, 5), np.full(200, 9), np.full(40, 17), 20 + np.arange(N - 840) % (D_SIZE - 20)]
    ).astype(np.int64)
    tracked = np.array([5, 9, 17, 3], np.int64)
    truth = np.array([0.3, 0.1, 0.02, 0.0])
    return values, tracked, truth


def theoretical_variance(oracle, truth, tracked, values, n):
    if isinstance(oracle, RecursiveHadamardResponse):
        # RHR's variance depends on the mass sharing x mod 2^(b-1) (default: the worst case, 1).
        mass = np.array([np.mean(values % oracle.block == t % oracle.block) for t in tracked])
        return oracle.variance(truth, n, residue_mass=mass)
    return oracle.variance(truth, n)


def run_rounds(oracle, values, tracked, rounds=ROUNDS, seed=0):
    reports = oracle.simulate(np.tile(values, rounds), np.random.default_rng(seed))
    return oracle.estimate_rounds(reports, tracked, rounds)


CASES = [(name, 2.0) for name in ORACLE_NAMES] + [("rhr", 4.0), ("olh", 0.5), ("mse-ocms", 4.0), ("he", 0.5)]


@pytest.mark.parametrize("name, eps", CASES)
def test_unbiased_with_theoretical_variance(name, eps):
    values, tracked, truth = dataset()
    oracle = make_oracle(name, eps, D_SIZE, tracked_count=len(tracked))
    est = run_rounds(oracle, values, tracked, seed=int(eps * 10) + ORACLE_NAMES.index(name))
    var = theoretical_variance(oracle, truth, tracked, values, N)
    expected = truth
    if isinstance(oracle, AppleCMSHE):
        # The fixed k-function family is not exactly pairwise independent: the
        # estimate is unbiased over family draws, and for this draw its mean is
        # conditional_mean, off the truth by the residual bias of Theorem
        # exp_and_var_of_bias (std sqrt(sum f^2 / ((m - 1) k)) = O(1/sqrt(k m))).
        expected = oracle.conditional_mean(values, tracked)
        assert np.all(np.abs(expected - truth) <= 5 * oracle.residual_bias_std(values, tracked) + 1e-12)
    z = (est.mean(axis=0) - expected) / np.sqrt(var / ROUNDS)
    assert np.all(np.abs(z) <= SIGMAS), (name, z)
    ratio = est.var(axis=0, ddof=1) / var
    # CMS+HE included: its variance is exact up to a relative O(c1^2) ~ 1e-6.
    assert np.all(np.abs(ratio - 1.0) <= VAR_TOL), (name, ratio)


def test_checks_reject_a_wrong_decoder():
    """Negative controls: HE decoded without the (e + 1)/(e - 1) factor, or with
    row x instead of x + 1 (an off-by-one the paper's indexing avoids), fails."""
    values, tracked, truth = dataset()
    he = HadamardEncoding(2.0, D_SIZE)
    reports = he.simulate(np.tile(values, ROUNDS), np.random.default_rng(0))
    se = np.sqrt(he.variance(truth, N) / ROUNDS)
    unscaled = he.estimate_rounds(reports, tracked, ROUNDS) * math.tanh(1.0)
    assert np.max(np.abs((unscaled.mean(axis=0) - truth) / se)) > 10 * SIGMAS
    off_by_one = he.estimate_rounds(reports, tracked - 1, ROUNDS)  # reads rows x, not x + 1
    assert np.max(np.abs((off_by_one.mean(axis=0) - truth) / se)) > 10 * SIGMAS


@pytest.mark.parametrize("name", ORACLE_NAMES)
def test_estimate_rounds_matches_estimate(name):
    values, tracked, _ = dataset()
    oracle = make_oracle(name, 1.5, D_SIZE, tracked_count=len(tracked))
    reports = oracle.simulate(np.tile(values[:300], 3), np.random.default_rng(11))
    batched = oracle.estimate_rounds(reports, tracked, 3)
    single = np.stack([oracle.estimate(reports.slice(i * 300, (i + 1) * 300), tracked) for i in range(3)])
    np.testing.assert_allclose(batched, single, rtol=1e-12, atol=1e-12)
    assert batched.dtype == np.float64 and batched.shape == (3, len(tracked))


def test_cms_he_sketch_path_equals_per_report_decoding():
    values, tracked, _ = dataset()
    cms = AppleCMSHE(2.0, D_SIZE)
    reports = cms.simulate(values, np.random.default_rng(5))
    direct = cms.estimate(reports, tracked, method="direct")
    sketched = cms.estimate(reports, tracked, method="sketch")
    np.testing.assert_allclose(direct, sketched, rtol=0, atol=1e-12)
    assert cms.sketch(reports).sum() == reports.bit.astype(np.int64).sum()


def test_he_and_cms_he_have_the_same_mse():
    """Paper: CMS+HE is CMS+RR with m' = 2m/(m + 1) ~ 2, i.e. HE."""
    values, tracked, truth = dataset()
    he, cms = HadamardEncoding(2.0, D_SIZE), AppleCMSHE(2.0, D_SIZE)
    mse_he = ((run_rounds(he, values, tracked, seed=21) - truth) ** 2).mean()
    mse_cms = ((run_rounds(cms, values, tracked, seed=22) - truth) ** 2).mean()
    # Each MSE averages ROUNDS * D squared near-normal errors: relative SE
    # sqrt(2 / (ROUNDS D)); the ratio of two independent ones sqrt(2) times that.
    tol = SIGMAS * math.sqrt(2.0) * math.sqrt(2.0 / (ROUNDS * len(tracked)))
    assert abs(mse_cms / mse_he - 1.0) <= tol
    assert cms.equivalent_hash_range == pytest.approx(2 * 1024 / 1025, rel=1e-4)
    # Theory agrees: the variances differ by O(1/m).
    np.testing.assert_allclose(cms.variance(truth, N), he.variance(truth, N), rtol=3e-3)


def test_rhr_is_worse_than_he_on_the_adversarial_dataset():
    """Every value shares x mod 2^(b-1): collisions happen with probability 1/2, as
    in HE, but the RR runs over 2^b symbols (paper Section "Recursive Hadamard Response")."""
    eps = 2.5
    rhr, he = RecursiveHadamardResponse(eps, D_SIZE), HadamardEncoding(eps, D_SIZE)
    assert rhr.bits == 3 and rhr.block == 4
    values = (1 + 4 * np.concatenate([np.full(500, 2), np.full(200, 7), np.arange(N - 700) % 32])).astype(np.int64)
    tracked = np.array([9, 29, 1, 13], np.int64)  # all = 1 mod 4
    truth = np.array([np.mean(values == t) for t in tracked])
    err_rhr = run_rounds(rhr, values, tracked, seed=31) - truth
    err_he = run_rounds(he, values, tracked, seed=32) - truth
    mse_rhr, mse_he = (err_rhr**2).mean(), (err_he**2).mean()
    assert mse_rhr > mse_he
    e = math.exp(eps)
    expected_ratio = (e + rhr.symbols - 1) / (e + 1)  # ~1.46 at f ~ 0
    theory_ratio = rhr.variance(truth, N).sum() / he.variance(truth, N).sum()
    assert theory_ratio == pytest.approx(expected_ratio, rel=0.05)
    tol = SIGMAS * math.sqrt(2.0) * math.sqrt(2.0 / (ROUNDS * len(tracked)))
    assert abs((mse_rhr / mse_he) / theory_ratio - 1.0) <= tol
    # Adversarial data is RHR's worst case: the default variance(f, n) is it.
    ratio = err_rhr.var(axis=0, ddof=1) / rhr.variance(truth, N)
    assert np.all(np.abs(ratio - 1.0) <= VAR_TOL)


def test_rhr_paper_cbar_half_decoder():
    """The paper's c_bar = 1/2 CMS decoder g = 2 mean(y_hat) - 1 is unbiased only
    on adversarial data, where its variance is theory.estimator_variance(eps, 2^b, 1/2);
    RHR's pairwise decoder is unbiased everywhere and has the smaller variance."""
    eps = 2.5
    rhr = RecursiveHadamardResponse(eps, D_SIZE)
    b, block, m = rhr.bits, rhr.block, rhr.symbols
    match_v, mismatch_v = theory.decode_match_value(eps, m), theory.decode_mismatch_value(eps)

    def cms_decoder(values, tracked, seed):
        reports = rhr.simulate(np.tile(values, ROUNDS), np.random.default_rng(seed))
        q1 = (tracked // block + 1).astype(np.uint64)
        r = (tracked % block).astype(np.uint64)
        negative = np.bitwise_count(reports.column[:, None] & q1[None, :]) & 1
        hashed = r[None, :] + np.uint64(block) * negative.astype(np.uint64)
        y_hat = np.where(reports.symbol[:, None] == hashed, match_v, mismatch_v)
        return 2 * y_hat.reshape(ROUNDS, N, len(tracked)).mean(axis=1) - 1

    adversarial = (1 + 4 * np.concatenate([np.full(500, 2), np.arange(N - 500) % 32])).astype(np.int64)
    tracked = np.array([9, 1, 13], np.int64)
    truth = np.array([np.mean(adversarial == t) for t in tracked])
    est = cms_decoder(adversarial, tracked, 41)
    bound = rhr.paper_variance_bound(truth, N)
    assert np.all(np.abs(est.mean(axis=0) - truth) <= SIGMAS * np.sqrt(bound / ROUNDS))
    assert np.all(np.abs(est.var(axis=0, ddof=1) / bound - 1.0) <= VAR_TOL)
    exact = rhr.variance(truth, N)
    assert np.all(exact < bound)
    e = math.exp(eps)
    np.testing.assert_allclose(bound - exact, (m - 2) * (e + 1 + 2 * truth * (e - 1)) / ((e - 1) ** 2 * N), rtol=1e-9)
    # On the generic dataset (residue mass < 1) the CMS decoder is biased; RHR's is not.
    values, tracked, truth = dataset()
    est = cms_decoder(values, tracked, 42)
    z = (est.mean(axis=0) - truth) / np.sqrt(rhr.paper_variance_bound(truth, N) / ROUNDS)
    assert np.max(np.abs(z)) > 10 * SIGMAS
    assert b == 3


def test_variance_formulas_and_equivalent_hash_ranges():
    f = np.linspace(0.0, 1.0, 5)
    for eps in (0.5, 2.0, 5.0):
        he = HadamardEncoding(eps, 1000)
        np.testing.assert_allclose(he.variance(f, 100), theory.pairwise_variance(eps, 2, f, 100), rtol=1e-12)
        olh = OptimizedLocalHashing(eps, 1000)
        assert olh.params.hash_range == max(2, round(1 + math.exp(eps))) == round(olh.equivalent_hash_range)
        np.testing.assert_allclose(olh.variance(f, 100), theory.pairwise_variance(eps, olh.params.hash_range, f, 100), rtol=2e-3)
        rhr = RecursiveHadamardResponse(eps, 1000)
        assert rhr.bits == max(1, math.ceil(eps)) and rhr.equivalent_hash_range == 2**rhr.bits
        assert np.all(rhr.variance(f, 100) <= rhr.paper_variance_bound(f, 100) + 1e-15)
        assert np.all(rhr.variance(f, 100) >= he.variance(f, 100) - 1e-15)
        # b = 1 is HE exactly; then the paper's c = 1/2 form is exact too.
        rhr1 = RecursiveHadamardResponse(eps, 1000, bits=1)
        np.testing.assert_allclose(rhr1.variance(f, 100), he.variance(f, 100), rtol=1e-12)
        np.testing.assert_allclose(rhr1.paper_variance_bound(f, 100), he.variance(f, 100), rtol=1e-12)
        # MSE-OCMS+RR is never worse (up to its m' < m imperfect-hashing cost, ~1e-6 here).
        mse = OCMSOracle.mse_optimized(eps, 1000)
        best_baseline = min(o.worst_case_mse(100) for o in (he, olh, rhr, AppleCMSHE(eps, 1000)))
        assert mse.worst_case_mse(100) <= best_baseline * (1 + 1e-5)
    # b is clamped so that 2^(b-1) <= d.
    assert RecursiveHadamardResponse(9.0, 16).bits == 5
    assert RecursiveHadamardResponse(9.0, 15).bits == 4
    with pytest.raises(InvalidParameterError) as err:
        RecursiveHadamardResponse(2.0, 16, bits=6)
    assert err.value.name == "bits"


def test_keep_probabilities_give_exactly_epsilon():
    eps = 1.7
    for oracle, m in [(HadamardEncoding(eps, 100), 2), (AppleCMSHE(eps, 100), 2), (RecursiveHadamardResponse(eps, 100), 4)]:
        p = oracle.keep_probability
        assert p / ((1 - p) / (m - 1)) == pytest.approx(math.exp(eps), rel=1e-12)


def test_report_bits():
    assert HadamardEncoding(2.0, 128).report_bits == 9  # K = 256 > 128
    assert HadamardEncoding(2.0, 127).report_bits == 8  # K = 128 > 127
    assert AppleCMSHE(2.0, 128).report_bits == 11 + 10 + 1
    rhr = RecursiveHadamardResponse(2.0, 128)  # b = 2, B = 2, 64 blocks -> K = 128
    assert rhr.report_bits == 7 + 2
    ocms = OCMSOracle.mse_optimized(2.0, 128)
    assert ocms.report_bits == 2 * ocms.params.field.bits + (ocms.params.hash_range - 1).bit_length()


def test_registry():
    for name in ORACLE_NAMES:
        oracle = make_oracle(name, 1.0, 64, tracked_count=8)
        assert oracle.name == name and oracle.epsilon == 1.0 and oracle.dictionary_size == 64
    assert make_oracle("l-ocms", 1.0, 64, tracked_count=8).params.tracked_count == 8
    with pytest.raises(InvalidParameterError) as err:
        make_oracle("rappor", 1.0, 64)
    assert err.value.name == "oracle" and err.value.value == "rappor"
    with pytest.raises(InvalidParameterError) as err:
        make_oracle("l-ocms", 1.0, 64)
    assert err.value.name == "tracked_count"


def test_input_validation():
    he = HadamardEncoding(1.0, 64)
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidValueError):
        he.simulate(np.array([0, 64]), rng)
    with pytest.raises(InvalidValueError):
        he.simulate(np.array([-1, 3]), rng)
    reports = he.simulate(np.array([1, 2, 3]), rng)
    with pytest.raises(InvalidValueError):
        he.estimate(reports, np.array([1, 1]))
    with pytest.raises(ParameterMismatchError):
        HadamardEncoding(2.0, 64).estimate(reports, np.array([1]))
    with pytest.raises(InvalidParameterError):
        RecursiveHadamardResponse(1.0, 64).estimate(reports, np.array([1]))
    with pytest.raises(InvalidParameterError) as err:
        he.estimate_rounds(reports, np.array([1]), 2)
    assert err.value.name == "rounds"
    with pytest.raises(InvalidParameterError) as err:
        HadamardEncoding(0.0, 64)
    assert err.value.name == "epsilon"
    empty = he.simulate(np.array([], np.int64), rng)
    assert np.isnan(he.estimate(empty, np.array([1, 2]))).all()


def test_fwht_matches_the_hadamard_matrix():
    m = 16
    idx = np.arange(m, dtype=np.uint64)
    h = 1 - 2 * (np.bitwise_count(idx[:, None] & idx[None, :]) & 1).astype(np.int64)
    x = np.random.default_rng(3).integers(-5, 6, size=(3, m))
    np.testing.assert_array_equal(fwht(x), x @ h)
