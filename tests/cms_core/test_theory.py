import math
from fractions import Fraction

import numpy as np
import pytest

from cms_core import theory
from cms_core.fields import PRIME_64


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0, 8.0])
@pytest.mark.parametrize("m", [2, 3, 7, 100])
def test_general_variance_reduces_to_pairwise_closed_form(eps, m):
    f = np.linspace(0, 1, 11)
    general = theory.estimator_variance(eps, m, 1.0 / m, f, 1000)
    closed = theory.pairwise_variance(eps, m, f, 1000)
    np.testing.assert_allclose(general, closed, rtol=1e-12)


def test_decode_values_invert_randomized_response():
    # Q = P^-1 for RR over [m]: (P Q)[v, v] = 1 and (P Q)[v, w] = 0.
    for eps, m in [(1.0, 3), (0.3, 2), (5.0, 40)]:
        keep = theory.rr_keep_probability(eps, m)
        other = (1 - keep) / (m - 1)
        match, mismatch = theory.decode_match_value(eps, m), theory.decode_mismatch_value(eps)
        assert keep * match + (m - 1) * other * mismatch == pytest.approx(1.0, abs=1e-12)
        assert keep * mismatch + other * match + (m - 2) * other * mismatch == pytest.approx(0.0, abs=1e-12)
        printed = (math.exp(eps) + m - 1) / math.expm1(eps)  # Algorithm 1 as printed (erratum 1)
        assert keep * printed + (m - 1) * other * mismatch != pytest.approx(1.0, abs=1e-6)


def test_estimator_coefficients_unbiased_at_extremes():
    for eps, m, p in [(1.0, 3, 11), (2.0, 4, 1009), (4.0, 8, PRIME_64)]:
        m_eff = theory.effective_hash_range(p, m)
        a, b = theory.estimator_coefficients(eps, m, m_eff)
        c = float(theory.collision_probability(p, m))
        keep = theory.rr_keep_probability(eps, m)
        # E[M/n] for f(x) = 1 is keep; for f(x) = 0 it is the collision-weighted mix.
        assert a * keep + b == pytest.approx(1.0, abs=1e-12)
        e_match_f0 = c * keep + (1 - c) * (1 - keep) / (m - 1)
        assert a * e_match_f0 + b == pytest.approx(0.0, abs=1e-12)


def test_effective_hash_range_exact_for_prime64():
    m_eff = theory.effective_hash_range(PRIME_64, 4)
    assert isinstance(m_eff, Fraction)
    diff = m_eff - 4
    assert 0 < abs(diff) < Fraction(1, 10**30)
    # erratum 4: float64 arithmetic cannot see it (2^64 - 59 rounds to 2^64)
    assert float(PRIME_64) == 2.0**64


def test_collision_probability_small_field_enumeration():
    p, m = 11, 4
    hits = sum(((a0 + a1 * 2) % p) % m == ((a0 + a1 * 7) % p) % m for a0 in range(p) for a1 in range(p))
    assert theory.collision_probability(p, m) == Fraction(hits, p * p)


@pytest.mark.parametrize("eps", [0.7, 0.8, 1.8, 2.5, 3.0, 4.5])
def test_integer_m_is_not_always_the_rounded_optimum(eps):
    # erratum 3: at these eps (f* = 1) the best integer is one above round().
    rounded = round(1 + math.exp(eps / 2))
    chosen = theory.optimal_hash_range(eps, "mse", 1.0)
    assert chosen == rounded + 1
    assert theory.worst_case_mse(eps, chosen, 1) < theory.worst_case_mse(eps, rounded, 1)


def test_optimal_m_is_global_integer_minimiser():
    for eps in np.linspace(0.05, 10, 60):
        for mode, kw in [("mse", {"f_star": 1.0}), ("mse", {"f_star": 0.1}), ("l2", {"tracked_count": 1000})]:
            m = theory.optimal_hash_range(eps, mode, **kw)
            objective = lambda k: theory.hash_range_objective(eps, k, mode, **kw)  # noqa: E731
            best = min(range(2, max(2 * m + 5, 20)), key=lambda k: (objective(k), k))
            assert m == best, (eps, mode, kw)


def test_appendix_hash_range_typo_is_worse():
    # erratum 2: the appendix's m = 1 + Delta_MSE is up to ~3000x worse in MSE.
    eps, f_star = 8.0, 0.5  # at f* = 0 both forms coincide
    good = theory.optimal_hash_range(eps, "mse", f_star)
    typo = round(1 + theory.delta_mse(eps, f_star))
    ratio = theory.worst_case_mse(eps, typo, 1, f_star) / theory.worst_case_mse(eps, good, 1, f_star)
    assert ratio > 100


def test_optimized_mse_matches_theorem():
    for eps in [0.5, 1, 2, 5]:
        m = 1 + math.exp(eps / 2)
        assert theory.worst_case_mse(eps, m, 10) == pytest.approx(theory.optimized_worst_case_mse(eps, 10), rel=1e-9)
        # f* <= 1/2 branch
        f_star = 0.2
        m2 = theory.continuous_optimal_hash_range(eps, "mse", f_star)
        assert theory.worst_case_mse(eps, m2, 10, f_star) == pytest.approx(
            theory.optimized_worst_case_mse(eps, 10, f_star), rel=1e-9
        )


def test_chernoff_alpha_solves_bound():
    eps, m, conf = 2.0, 4, 0.95
    alpha = theory.chernoff_alpha(eps, m, conf)
    bound = 2 * math.exp(-(alpha**2) / 3 * (m - 1) / (math.exp(eps) + m - 1))
    assert bound == pytest.approx(1 - conf)


def test_reports_needed():
    assert theory.reports_needed(10.0, 0.001) == 10000
    assert theory.reports_needed(10.0, 0.0011) == 9091


# ------------------------------------------------ poisoning (maximal-gain attack)
def test_poisoning_gain_is_the_closed_form_for_both_mechanisms_and_moves_an_estimate_by_it():
    import math

    from cms_core import OCMSParams
    from cms_core.theory import fake_fraction_to_reach

    for epsilon in (1.0, 2.0, 4.0):
        ocms = OCMSParams.build(epsilon=epsilon, dictionary_size=10_000, mechanism="ocms", mode="l2", tracked_count=1000)
        e, m = math.exp(epsilon), ocms.hash_range
        p = e / (e + m - 1)
        # (1 - 1/m)/(p - 1/m) with m' = m; the exact m' of the field moves it by less than 1e-9 here
        assert ocms.poisoning_gain == pytest.approx((1 - 1 / m) / (p - 1 / m), rel=1e-6)
        # 0.3-0.5% of fake reports lift a value nobody holds to 1% (issue 28's figure for eps 1..4, mode l2;
        # mode mse picks a smaller m, a smaller gain: 0.36-0.87%)
        assert 0.002 <= fake_fraction_to_reach(ocms.poisoning_gain, 0.01) <= 0.006
    direct = OCMSParams.build(epsilon=2.0, dictionary_size=1024, mechanism="direct")
    p, q = math.exp(2) / (math.exp(2) + 1023), 1 / (math.exp(2) + 1023)
    assert direct.poisoning_gain == pytest.approx((1 - q) / (p - q)) == pytest.approx((math.exp(2) + 1022) / math.expm1(2))
    assert fake_fraction_to_reach(direct.poisoning_gain, 0.01) == pytest.approx(0.0000620, rel=0.01)  # ~0.006%
    # the estimator itself: beta of always-matching reports over a value nobody holds reads beta * gain
    a, b = direct.estimator_coefficients
    beta = 0.001
    mu = 1 / (math.exp(2) + 1023)  # a non-holder's match probability (q) under direct RR
    assert a * ((1 - beta) * mu + beta) + b == pytest.approx(beta * direct.poisoning_gain, rel=1e-9)
    assert fake_fraction_to_reach(5.0, 0.01, true_frequency=0.02) == 0.0
