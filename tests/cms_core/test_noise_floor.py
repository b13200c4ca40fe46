"""The noise floor (issue 24, section 2): which of D estimates stand above zero, all at once.

A fleet where only a few values are frequent, simulated through the mechanism with fixed seeds:
values nobody holds are called above the noise in at most alpha of the runs (Bonferroni, the
family-wise rate, with a tolerance of 3 binomial standard deviations over the runs), and the truly
frequent values are above it in every run. Negative controls: the uncorrected per-value test, and
the normal approximation of the floor where n q0 is small, both call too many. Unit tests: the
floor is the exact binomial count at alpha / D on the estimate scale, its variance is Theorem
g_x_def's at f = 0, it falls with n and rises with D and the confidence, and a Monte-Carlo check.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cms_core import OCMSParams, OCMSSketch, TrackedValues, postprocess, theory
from cms_core import binomial
from cms_core.privatize import simulate_reports

from benchmarks.noise_floor import FREQUENT, fleet, false_runs

ALPHA = 0.05
OCMS = OCMSParams.build(2.0, 100_000)  # m = 4
DIRECT = OCMSParams.build(4.0, 1000, mechanism="direct")  # q0 = 1 / (e^4 + 999): n q0 ~ 19 at n = 20,000
TAILNUM_LIKE = OCMSParams.build(4.0, 2**64, mode="l2", tracked_count=4043)  # m = 55, as flight_tailnum


def null_match_probability(params) -> float:
    return binomial.null_match_probability(params)


def floor_of(params, n: int, d: int, confidence: float = 0.95) -> float:
    tracked = TrackedValues.range(params, 0, 1)
    return OCMSSketch(params, tracked, [0], n).estimate(confidence=confidence, noise_values=d).noise_floor


# ------------------------------------------------------------------ the formula

@pytest.mark.parametrize("params", [OCMS, DIRECT, TAILNUM_LIKE], ids=["ocms", "direct", "ocms-m55"])
@pytest.mark.parametrize("n", [50, 1_000, 20_000, 1_000_000])
@pytest.mark.parametrize("d", [1, 16, 4_043])
def test_floor_is_the_exact_binomial_count_at_alpha_over_d(params, n, d):
    q0 = null_match_probability(params)
    level = ALPHA / d
    k = binomial.critical_count(n, q0, level)
    assert binomial.binomial_upper_tail(n, q0, k) <= level < binomial.binomial_upper_tail(n, q0, k - 1)
    a, b = params.estimator_coefficients
    floor = floor_of(params, n, d)
    assert floor == pytest.approx(a * (k - 1) / n + b, rel=1e-12, abs=1e-15)
    # One match more is above the noise, the floor's own count is not (an estimate must exceed it).
    tracked = TrackedValues.range(params, 0, 1)
    below, above = (OCMSSketch(params, tracked, [count], n).estimate(noise_values=d) for count in (k - 1, k))
    assert not below.above_noise[0] and above.above_noise[0]
    assert below.frequency[0] <= floor < above.frequency[0]


@pytest.mark.parametrize("params", [OCMS, DIRECT, TAILNUM_LIKE], ids=["ocms", "direct", "ocms-m55"])
def test_the_null_variance_is_theorem_g_x_def_at_zero(params):
    """Under f = 0 the count is Binomial(n, q0): A^2 q0 (1 - q0) / n is the theorem's Var(0, n)."""
    a, _ = params.estimator_coefficients
    q0 = null_match_probability(params)
    for n in (100, 10_000, 10**7):
        assert a * a * q0 * (1 - q0) / n == pytest.approx(float(params.variance(0.0, n)), rel=1e-9)


@pytest.mark.parametrize("params", [OCMS, DIRECT, TAILNUM_LIKE], ids=["ocms", "direct", "ocms-m55"])
def test_floor_falls_with_n_and_rises_with_d_and_confidence(params):
    ns = [200 * 2**i for i in range(16)]  # 200 .. 6.5 million
    floors = [floor_of(params, n, 4_043) for n in ns]
    assert all(later < earlier for earlier, later in zip(floors, floors[1:])), floors
    by_d = [floor_of(params, 20_000, d) for d in (1, 10, 100, 1_000, 10_000, 100_000)]
    assert all(later > earlier for earlier, later in zip(by_d, by_d[1:])), by_d
    by_confidence = [floor_of(params, 20_000, 100, c) for c in (0.5, 0.8, 0.95, 0.99, 0.999)]
    assert all(later > earlier for earlier, later in zip(by_confidence, by_confidence[1:])), by_confidence
    # Large n q0: the normal approximation z_{1 - alpha/D} sqrt(Var(0, n)) is within 1% of the exact floor.
    n = 10**8
    normal = theory.noise_floor(theory.one_sided_z(theory.bonferroni_level(0.95, 4_043)), params.variance(0.0, n))
    assert floor_of(params, n, 4_043) == pytest.approx(normal, rel=0.01)


def test_floor_is_infinite_when_no_count_can_reach_the_level():
    tracked = TrackedValues.range(OCMS, 0, 1)
    est = OCMSSketch(OCMS, tracked, [3], 3).estimate(noise_values=10**6)  # 3 reports, D = 10^6
    assert est.noise_floor == math.inf and not est.above_noise.any()
    empty = OCMSSketch(OCMS, tracked).estimate()
    assert empty.noise_floor == math.inf and not empty.above_noise.any()


def test_a_family_smaller_than_the_values_estimated_is_refused():
    from cms_core.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="noise_values"):
        OCMSSketch(OCMS, TrackedValues.range(OCMS, 0, 5), [1] * 5, 10).estimate(noise_values=4)


def test_monte_carlo_rate_above_the_floor_is_the_level():
    """Values nobody holds, through the mechanism: the share above the floor of D values at
    confidence c is the per-value level (1 - c) / D, within 4 binomial standard deviations."""
    rng = np.random.default_rng(24)
    n, tracked_count, rounds = 5_000, 50, 400
    tracked = TrackedValues.range(OCMS, 0, tracked_count)
    values = rng.integers(tracked_count, OCMS.dictionary_size, n).astype(np.uint64)  # nobody holds 0..49
    confidence, family = 0.5, 50  # per-value level 0.01: measurable in 20,000 null estimates
    above = 0
    for _ in range(rounds):
        est = OCMSSketch(OCMS, tracked).update(simulate_reports(OCMS, values, rng)).estimate(
            confidence=confidence, noise_values=family)
        above += int(est.above_noise.sum())
    level = (1 - confidence) / family
    k = binomial.critical_count(n, null_match_probability(OCMS), level)
    exact = binomial.binomial_upper_tail(n, null_match_probability(OCMS), k)  # <= level: the count is discrete
    trials = rounds * tracked_count
    assert abs(above - trials * exact) <= 4 * math.sqrt(trials * exact * (1 - exact)), (above, trials * exact)
    assert exact <= level


# ----------------------------------------------------- a fleet with a few frequent values

def family_wise_bound(rounds: int, alpha: float = ALPHA) -> float:
    """alpha R plus 3 binomial standard deviations: runs with any false 'above' the correction allows."""
    return alpha * rounds + 3 * math.sqrt(rounds * alpha * (1 - alpha))


@pytest.mark.slow
@pytest.mark.parametrize("params, seed", [(OCMS, 1), (DIRECT, 2)], ids=["ocms", "direct"])
def test_a_fleet_with_few_frequent_values(params, seed):
    """400 tracked values, 5 frequent (6-15%), the rest held by nobody; 20,000 reports; 300 runs
    (benchmarks/noise_floor.py prints the same figures)."""
    n, tracked_count, rounds = 20_000, 400, 300
    got = false_runs(params, n=n, tracked_count=tracked_count, rounds=rounds, seed=seed)
    assert got["missed"] == 0, got  # the truly frequent: above the floor in every run
    bound = family_wise_bound(rounds)
    assert got["bonferroni"] <= bound, (got, bound)
    nulls_total, per_value = rounds * (tracked_count - len(FREQUENT)), ALPHA / tracked_count
    assert got["false_values"] <= nulls_total * per_value + 3 * math.sqrt(nulls_total * per_value), got
    # Negative control: the uncorrected per-value test finds "frequent" values nobody holds in most runs.
    assert got["uncorrected"] > bound and got["uncorrected"] >= 0.9 * rounds, got
    if params is DIRECT:  # n q0 ~ 19: the normal floor's tail is several times alpha / D
        assert got["normal"] > bound, got


def test_the_normal_floor_is_too_low_where_n_q0_is_small():
    """Why the exact count: at flight_tailnum's parameters the normal floor's tail is 3 x alpha / D."""
    n, d = 5_000, 4_043
    q0 = null_match_probability(TAILNUM_LIKE)
    a, b = TAILNUM_LIKE.estimator_coefficients
    normal = theory.noise_floor(theory.one_sided_z(ALPHA / d), TAILNUM_LIKE.variance(0.0, n))
    first_above = math.floor((normal - b) * n / a) + 1  # the smallest count whose estimate exceeds it
    assert binomial.binomial_upper_tail(n, q0, first_above) > 2 * ALPHA / d
    exact_k = binomial.critical_count(n, q0, ALPHA / d)
    assert exact_k > first_above and floor_of(TAILNUM_LIKE, n, d) > normal


# ------------------------------------------------------------- post-processing

@pytest.mark.parametrize("method", postprocess.METHODS)
def test_the_interval_beside_a_processed_estimate_belongs_to_it(method):
    rng = np.random.default_rng(7)
    n, tracked_count = 3_000, 200
    values = fleet(OCMS, n, tracked_count, rng)
    tracked = TrackedValues.range(OCMS, 0, tracked_count)
    est = OCMSSketch(OCMS, tracked).update(simulate_reports(OCMS, values, rng)).estimate(postprocess_method=method)
    low, high, shown = est.processed_ci_low, est.processed_ci_high, est.processed
    assert (low <= shown).all() and (shown <= high).all()  # the whiskers hold the bar
    if method == "none":
        assert np.array_equal(low, est.ci_low) and np.array_equal(high, est.ci_high)
        return
    assert (low >= 0).all() and (high <= 1).all()  # never a negative low beside a non-negative bar
    assert (est.ci_low < 0).any()  # ... where the raw interval has them
    # Never narrower than the valid interval cut to [0, 1]: it covers the truth at least as often.
    assert (low <= np.clip(est.ci_low, 0, 1)).all() and (high >= np.clip(est.ci_high, 0, 1)).all()
    # The floor moves with the estimates: values above the noise are shown at or above it, the rest at or below.
    assert (shown[est.above_noise] >= est.processed_noise_floor).all()
    assert (shown[~est.above_noise] <= est.processed_noise_floor).all()
    assert est.above_noise[: len(FREQUENT)].all() and not est.above_noise[len(FREQUENT):].all()


def test_norm_sub_reports_the_shift_it_applied():
    f = np.array([0.5, 0.3, 0.1, -0.05, 0.02])
    processed, shift = postprocess.apply_with_shift("norm_sub", f, 0.8)
    assert np.allclose(processed, np.clip(f + shift, 0, 1)) and processed.sum() == pytest.approx(0.8)
    assert np.array_equal(processed, postprocess.norm_sub(f, 0.8))
    processed, shift = postprocess.apply_with_shift("norm_sub", f, 0.0)
    assert shift == -math.inf and not processed.any()
