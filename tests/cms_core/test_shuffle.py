"""Amplification by shuffling (cms_core.shuffle): FMT21's numerical bound."""

import math

import numpy as np
import pytest

from cms_core.errors import InvalidParameterError
from cms_core.shuffle import _HalfBinomial, central_epsilon, closed_form_central_epsilon, shuffled_delta


def test_matches_the_authors_reference_values():
    # apple/ml-shuffling-amplification README: n = 10^5, eps0 = 4, delta = 1e-6 -> the numerical
    # bound lies between 0.1675385583317841 and 0.172790550755978; the closed form is 0.5378040242374512.
    eps = central_epsilon(10**5, 4.0, 1e-6)
    assert 0.1675385583317841 <= eps <= 0.172790550755978
    assert closed_form_central_epsilon(10**5, 4.0, 1e-6) == pytest.approx(0.5378040242374512, rel=1e-12)


@pytest.mark.parametrize("epsilon0, low, high", [(2.0, 0.01, 0.05), (4.0, 0.02, 0.18)])
def test_lands_in_the_published_range_for_n_from_1e5_to_1e6(epsilon0, low, high):
    for n in (10**5, 10**6):
        assert low <= central_epsilon(n, epsilon0, 1e-6) <= high


def test_monotone_in_n_and_eps0_and_never_above_eps0():
    for epsilon0 in (0.5, 1.0, 2.0, 4.0, 8.0):
        figures = [central_epsilon(n, epsilon0, 1e-6) for n in (1, 2, 10, 100, 10**3, 10**4, 10**5, 10**6)]
        assert all(0 < f <= epsilon0 for f in figures)
        assert all(a >= b for a, b in zip(figures, figures[1:])), figures
    for n in (10**3, 10**5):
        figures = [central_epsilon(n, e0, 1e-6) for e0 in (0.25, 0.5, 1, 2, 4, 6)]
        assert all(a <= b for a, b in zip(figures, figures[1:])), figures
    assert central_epsilon(1, 3.0, 1e-6) == 3.0  # one report: nothing to hide among


def exact_delta(n: int, epsilon0: float, epsilon: float) -> float:
    """D_e^eps(P || Q) by enumerating (c, k) with exact binomials (small n only)."""
    p, alpha, e = math.exp(-epsilon0), 1 / (1 + math.exp(-epsilon0)), math.exp(epsilon)
    total = 0.0
    for c in range(n):
        pc = math.comb(n - 1, c) * p**c * (1 - p) ** (n - 1 - c)
        b = [math.comb(c, k) / 2**c for k in range(c + 1)] + [0.0]
        for k in range(c + 2):
            below = b[k - 1] if k >= 1 else 0.0
            pk, qk = alpha * b[k] + (1 - alpha) * below, alpha * below + (1 - alpha) * b[k]
            total += pc * max(0.0, pk - e * qk)
    return total


@pytest.mark.parametrize("n, epsilon0", [(5, 1.0), (40, 2.0), (120, 0.7)])
def test_delta_is_an_upper_bound_close_to_the_exact_divergence(n, epsilon0):
    for epsilon in (0.05, 0.2, 0.5, epsilon0 * 0.9):
        exact, bound = exact_delta(n, epsilon0, epsilon), shuffled_delta(n, epsilon0, epsilon)
        assert bound >= exact - 1e-15
        assert bound <= exact + 1e-12 + 0.02 * exact  # small n: every c is its own group


def test_the_per_clone_divergence_falls_with_the_number_of_clones():
    """The grouping takes each group's first c as its worst: g(c) must be non-increasing in c."""
    for epsilon0, epsilon in ((1.0, 0.05), (2.0, 0.1), (4.0, 0.3), (4.0, 1.0)):
        alpha, e = 1 / (1 + math.exp(-epsilon0)), math.exp(epsilon)
        margin = alpha - e * (1 - alpha)
        rho = margin / (e * alpha - (1 - alpha))
        beta = rho / (1 + rho)
        values = []
        for c in list(range(0, 400)) + list(range(400, 200_000, 997)):
            table, t = _HalfBinomial.build(c), math.ceil(beta * (c + 1)) - 1
            values.append(0.0 if t < 0 else (1 - e) * table.cdf_at_least(t - 1) + margin * table.pmf_at_most(t))
        values = np.maximum(values, 0.0)
        assert np.all(np.diff(values) <= 1e-15), np.argmax(np.diff(values))


@pytest.mark.parametrize("args, name", [((0, 1.0, 1e-6), "n"), ((1.5, 1.0, 1e-6), "n"), ((10, 0.0, 1e-6), "epsilon0"),
                                        ((10, float("inf"), 1e-6), "epsilon0"), ((10, 1.0, 0.0), "delta"),
                                        ((10, 1.0, 1.0), "delta"), ((True, 1.0, 1e-6), "n")])
def test_bad_arguments_are_named(args, name):
    with pytest.raises(InvalidParameterError, match=name):
        central_epsilon(*args)
