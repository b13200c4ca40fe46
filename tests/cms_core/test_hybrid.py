"""cms_core.hybrid: Wang et al.'s Hybrid mechanism for a numeric mean (issue 40), on a grid.

* The paper's closed forms give docs' reference figures; the grid's exact variance is within 1% of Lemma 4's.
* The closed-form variance and unbiasedness are checked against the exact output distribution (the audit's),
  enumerated on a small grid; the device path draws from that same distribution (chi-square).
* Coverage over 400 seeded windows: at 95% the misses are Binomial(400, 0.05) = 20 +- 4.4, accepted in [6, 38]
  (4 sd); the mean error over the windows is within 4 standard errors of 0 (the standard error from the variance
  formula). The negative control, 50% intervals under the same name, misses about 200.
* The exact audit finds e^eps (used, not exceeded); a leaky threshold is caught.
"""

from __future__ import annotations

import math
import random as stdlib_random

import numpy as np
import pytest

from cms_core import hybrid
from cms_core.errors import InvalidParameterError
from cms_core.hybrid import HybridParams, MeanFold, exact_privacy_loss, fold, mean_interval, privatize_value
from tests.cms_core.stats_helpers import chi2_critical, chi2_statistic


def seeded_bytes(seed: int):
    rng = stdlib_random.Random(seed)
    return lambda n: rng.randbytes(n)


def exact_distribution(params: HybridParams, value: float) -> np.ndarray:
    """P(z | value), mixing the two grid points the rounding picks between (the audit's rows)."""
    s = float(params.scale([value])[0])
    j = min(math.floor(s), params.grid)
    lam = s - j
    denominator = 2**128 * params.window * params.grid
    low = np.array(hybrid._output_numerators(params, j), dtype=object)
    row = low if lam == 0 else (1 - lam) * low + lam * np.array(hybrid._output_numerators(params, j + 1), dtype=object)
    return np.array([float(x / denominator) for x in row])


def test_the_papers_closed_forms_give_the_reference_figures():
    # docs' privacy references: worst-case per-user variances on [-1, 1] at eps = 1, 2, 4
    for eps, duchi, pm, hm in ((1, 4.68, 5.22, 4.29), (2, 1.72, 1.23, 1.04), (4, 1.08, 0.24, 0.22)):
        assert hybrid.paper_duchi_variance(eps, 0.0) == pytest.approx(duchi, abs=0.01)
        assert hybrid.paper_pm_variance(eps, 1.0) == pytest.approx(pm, abs=0.01)
        assert hybrid.paper_hm_worst_variance(eps) == pytest.approx(hm, abs=0.01)
    assert hybrid.EPS_STAR == pytest.approx(0.61, abs=0.005)
    assert hybrid.paper_alpha(0.5) == 0.0 and hybrid.paper_alpha(2) == pytest.approx(1 - math.exp(-1))


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
def test_the_grids_worst_variance_is_the_papers_within_one_percent(eps):
    params = HybridParams.build(eps, 0, 10_000)
    assert params.worst_variance() == pytest.approx(hybrid.paper_hm_worst_variance(eps), rel=0.01)
    worst = max(params.variance(np.linspace(0, 10_000, 2049)))
    assert worst <= params.worst_variance() + 1e-12


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_unbiased_and_the_variance_formula_is_exact_on_a_small_grid(eps):
    params = HybridParams.build(eps, -5, 5, grid=8)
    estimates = params.estimates(np.arange(params.outputs))
    for value in (-5, -3.7, -1.25, 0, 0.3, 2.5, 4.99, 5):
        p = exact_distribution(params, value)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        t = value / 5
        assert p @ estimates == pytest.approx(t, abs=1e-9)
        assert p @ estimates**2 - t * t == pytest.approx(params.variance([value])[0], rel=1e-9)


def test_the_device_path_draws_the_audited_distribution():
    params = HybridParams.build(1.5, 0, 100, grid=8)
    random = seeded_bytes(40)
    for value in (0, 37.2, 100):
        draws = 20_000
        observed = np.bincount([privatize_value(params, value, random) for _ in range(draws)],
                               minlength=params.outputs)
        expected = exact_distribution(params, value) * draws
        seen = expected > 0
        assert observed[~seen].sum() == 0
        assert chi2_statistic(observed[seen], expected[seen]) < chi2_critical(int(seen.sum()) - 1, 1e-4)


def windows(params: HybridParams, n: int, trials: int, confidence: float, seed: int):
    """(estimate, ci_low, ci_high, true mean) of ``trials`` windows of ``n`` devices of a skewed latency."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        values = np.minimum(rng.lognormal(5.0, 1.0, n), params.upper)
        estimate = mean_interval(params, fold(params, hybrid.simulate(params, values, rng)), confidence)
        out.append((estimate.estimate, estimate.low, estimate.high, float(values.mean()), estimate.sd))
    return np.array(out)


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_the_mean_is_unbiased_and_its_interval_covers(eps):
    params = HybridParams.build(eps, 0, 2_000)
    rows = windows(params, 1_000, 400, 0.95, seed=int(eps * 10))
    misses = int(np.count_nonzero((rows[:, 3] < rows[:, 1]) | (rows[:, 3] > rows[:, 2])))
    assert 6 <= misses <= 38, misses
    error = rows[:, 0] - rows[:, 3]
    assert abs(error.mean()) < 4 * rows[:, 4].mean() / math.sqrt(len(rows))
    # the interval's sd is the exact variance at the data within a few percent (the second moment is estimated)
    values_sd = math.sqrt(hybrid.mean_variance(params, 0, np.minimum(
        np.random.default_rng(0).lognormal(5.0, 1.0, 1_000), 2_000)))
    assert rows[:, 4].mean() == pytest.approx(values_sd, rel=0.05)


def test_negative_control_half_width_intervals_miss():
    params = HybridParams.build(1.0, 0, 2_000)
    rows = windows(params, 1_000, 400, 0.5, seed=7)
    misses = int(np.count_nonzero((rows[:, 3] < rows[:, 1]) | (rows[:, 3] > rows[:, 2])))
    assert misses > 150, misses


@pytest.mark.parametrize("eps", [0.3, 1.0, 2.0, 4.0, 8.0])
def test_the_exact_audit_finds_the_budget_used_and_not_exceeded(eps):
    params = HybridParams.build(eps, 0, 1)
    loss = exact_privacy_loss(params)
    assert loss <= math.exp(eps)
    assert math.log(loss) == pytest.approx(eps, abs=1e-6)


def test_the_audit_catches_a_leaky_threshold():
    import dataclasses

    params = HybridParams.build(1.0, 0, 1, grid=16)
    leaky_pm = dataclasses.replace(params, pm_keep=HybridParams.build(2.0, 0, 1, grid=16).pm_keep)
    assert math.log(exact_privacy_loss(leaky_pm)) > 1.2  # a threshold of another epsilon
    leaky_duchi = dataclasses.replace(params, duchi_step=params.duchi_step * 2, duchi_low=params.duchi_low
                                      - params.grid * params.duchi_step // 2)
    assert math.log(exact_privacy_loss(leaky_duchi)) > 1.01


def test_the_fold_is_a_pure_merge():
    params = HybridParams.build(2.0, 0, 1)
    z = hybrid.simulate(params, np.linspace(0, 1, 300), np.random.default_rng(3))
    whole = fold(params, z)
    parts = fold(params, z[200:], fold(params, z[:200]))
    assert parts.count == whole.count == 300
    assert parts.total == pytest.approx(whole.total) and parts.squares == pytest.approx(whole.squares)
    assert mean_interval(params, MeanFold()) is None


@pytest.mark.parametrize("kwargs, name", [
    ({"epsilon": 0, "lower": 0, "upper": 1}, "epsilon"),
    ({"epsilon": float("nan"), "lower": 0, "upper": 1}, "epsilon"),
    ({"epsilon": 1, "lower": 5, "upper": 5}, "upper"),
    ({"epsilon": 1, "lower": "0", "upper": 1}, "lower"),
    ({"epsilon": 1, "lower": 0, "upper": 1, "grid": 7}, "grid"),
    ({"epsilon": 1, "lower": 0, "upper": 1, "grid": True}, "grid"),
])
def test_bad_parameters_are_named(kwargs, name):
    with pytest.raises(InvalidParameterError) as caught:
        HybridParams.build(**kwargs)
    assert caught.value.name == name


@pytest.mark.parametrize("value", [True, "12", None, float("nan")])
def test_a_device_refuses_a_non_number(value):
    with pytest.raises(InvalidParameterError, match="value"):
        privatize_value(HybridParams.build(1, 0, 1), value, seeded_bytes(1))


def test_out_of_range_values_are_clipped_and_reports_checked():
    params = HybridParams.build(1, 0, 10)
    assert params.variance([-5, 1e9, float("inf")]).tolist() == params.variance([0, 10, 10]).tolist()
    with pytest.raises(InvalidParameterError, match="z"):
        params.estimates([params.outputs])
    with pytest.raises(InvalidParameterError, match="confidence"):
        mean_interval(params, MeanFold(1, 0.0, 1.0), 1.0)
