"""Unbiasedness and variance against the closed form, over seeded rounds.

Tolerances come from the sampling distribution: the mean of R estimates has
standard error sqrt(Var / R); the empirical MSE has standard error
sqrt(Var[(g - f)^2] / R), estimated from the same rounds. 5 standard errors
with fixed seeds: a correct implementation passes with overwhelming
probability, and the negative controls below miss by 20+ standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cms_core import OCMSParams, ReportBatch, TrackedValues, OCMSSketch, theory
from cms_core.evaluation import estimates_from_counts, round_match_counts
from cms_core.fields import PrimeField
from cms_core.privatize import simulate_reports

ROUNDS = 2000
N = 2000
SIGMAS = 5.0


def dataset(n: int, d: int) -> tuple[np.ndarray, dict[int, float]]:
    """Value 0 absent, value 1 at 50%, value 2 at 10%, the rest spread over 3..d-1."""
    values = np.empty(n, np.uint64)
    values[: n // 2] = 1
    values[n // 2 : n // 2 + n // 10] = 2
    rest = n - n // 2 - n // 10
    values[n - rest :] = 3 + np.arange(rest) % (d - 3)
    truth = {0: 0.0, 1: (n // 2) / n, 2: (n // 10) / n}
    return values, truth


def check_unbiased_and_variance(estimates: np.ndarray, f: float, variance: float) -> tuple[bool, bool, float]:
    r = estimates.shape[0]
    err = estimates - f
    mean_ok = abs(err.mean()) <= SIGMAS * math.sqrt(variance / r)
    sq = err**2
    mse = sq.mean()
    mse_se = sq.std(ddof=1) / math.sqrt(r)
    var_ok = abs(mse - variance) <= SIGMAS * mse_se
    return mean_ok, var_ok, mse / variance


CASES = [("mse", eps) for eps in (0.5, 1.0, 2.0, 4.0)] + [("l2", eps) for eps in (1.0, 4.0)]


@pytest.mark.parametrize("mode, eps", CASES)
def test_unbiased_with_closed_form_variance(mode, eps):
    d = 1000
    kwargs = {"tracked_count": d} if mode == "l2" else {}
    params = OCMSParams.build(eps, d, mode=mode, **kwargs)
    values, truth = dataset(N, d)
    tracked = np.array(sorted(truth), np.uint64)
    counts = round_match_counts(params, values, tracked, ROUNDS, np.random.default_rng(int(eps * 100)))
    g = estimates_from_counts(params, counts, N)
    for j, x in enumerate(sorted(truth)):
        f = truth[x]
        mean_ok, var_ok, ratio = check_unbiased_and_variance(g[:, j], f, float(params.variance(f, N)))
        assert mean_ok, (mode, eps, x, g[:, j].mean(), f)
        assert var_ok, (mode, eps, x, ratio)


def _printed_decode_estimates(params: OCMSParams, counts: np.ndarray, n: int) -> np.ndarray:
    """Algorithm 1 exactly as printed: match value (e + m - 1)/(e - 1) (erratum 1)."""
    e = math.exp(params.epsilon)
    m = params.hash_range
    mp = float(params.effective_hash_range)
    sum_y = (counts * (e + m - 1) - (n - counts)) / (e - 1)
    return mp / (n * (mp - 1)) * sum_y - 1 / (mp - 1)


def _server_loop(params: OCMSParams, reports, x: int, match_value: float) -> float:
    """Algorithm 1 ``Server`` per report, in Python floats (the paper's reference shape)."""
    mismatch = -1 / math.expm1(params.epsilon)
    total = 0.0
    for a0, a1, z in reports:
        total += match_value if params.field.hash_value(a0, a1, x) % params.hash_range == z else mismatch
    mp = float(params.effective_hash_range)
    return mp / (len(reports) * (mp - 1)) * total - 1 / (mp - 1)


def test_sketch_estimate_equals_per_report_server_loop():
    params = OCMSParams.build(1.0, 100)
    rng = np.random.default_rng(0)
    batch = simulate_reports(params, rng.integers(0, 100, 3000).astype(np.uint64), rng)
    sketch = OCMSSketch(params, TrackedValues.of(params, [0, 7, 99])).update(batch)
    reports = batch.to_reports()
    est = sketch.estimate().frequency
    correct = theory.decode_match_value(params.epsilon, params.hash_range)
    printed = (math.exp(params.epsilon) + params.hash_range - 1) / math.expm1(params.epsilon)
    for i, x in enumerate([0, 7, 99]):
        assert est[i] == pytest.approx(_server_loop(params, reports, x, correct), rel=1e-12, abs=1e-12)
        assert _printed_decode_estimates(params, sketch.counts[i : i + 1], 3000)[0] == pytest.approx(
            _server_loop(params, reports, x, printed), rel=1e-12, abs=1e-12
        )


def test_printed_decode_typo_is_caught():
    # Negative control: the same statistical check rejects Algorithm 1's printed Decode.
    params = OCMSParams.build(1.0, 1000, hash_range=3)
    values, truth = dataset(N, 1000)
    counts = round_match_counts(params, values, np.array([0], np.uint64), 500, np.random.default_rng(9))
    good = estimates_from_counts(params, counts[:, 0], N)
    bad = _printed_decode_estimates(params, counts[:, 0], N)
    var = float(params.variance(0.0, N))
    assert check_unbiased_and_variance(good, 0.0, var)[0]
    assert not check_unbiased_and_variance(bad, 0.0, var)[0]
    # the bias is the errata's 1/((m - 1)(e - 1)) scaled by m'/(m'-1) * E[M/n] ... about 0.29 here
    assert bad.mean() - good.mean() > 0.2


def test_small_field_plain_m_biased_m_prime_not():
    # F(11) with m = 4: q = 2, r = 3, c_bar = 31/121 != 1/4. The estimator with m'
    # is unbiased; the same counts with plain m are measurably biased.
    params = OCMSParams.build(4.0, 10, hash_range=4, field=PrimeField(11))
    assert params.effective_hash_range != 4
    values = np.array([0] * 2 + [1] * 10 + list(range(2, 10)) * 1, np.uint64)  # n = 20
    values = np.tile(values, 100)  # n = 2000: f(0) = 0.1, f(1) = 0.5
    n = values.shape[0]
    counts = round_match_counts(params, values, np.array([0], np.uint64), ROUNDS, np.random.default_rng(21))[:, 0]
    f = 0.1
    g = estimates_from_counts(params, counts, n)
    var = float(params.variance(f, n))
    assert check_unbiased_and_variance(g, f, var) == (True, True, pytest.approx(1.0, abs=0.2))
    a, b = theory.estimator_coefficients(params.epsilon, 4, 4)  # the paper's f_hat: m' := m
    naive = a * counts / n + b
    assert not check_unbiased_and_variance(naive, f, var)[0]
    expected_bias = (4 / 3) * (1 - f) * (float(params.collision_probability) - 0.25)
    assert naive.mean() - f == pytest.approx(expected_bias, abs=5 * math.sqrt(var / ROUNDS))
