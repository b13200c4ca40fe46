import math
from fractions import Fraction

import numpy as np
import pytest

from cms_core import InvalidValueError, OCMSParams, privatize
from cms_core.privatize import keep_threshold, realised_probability_ratio, simulate_reports
from cms_core.values import encode_value

from .stats_helpers import chi2_critical, chi2_statistic


@pytest.mark.parametrize("eps, m", [(0.5, 2), (1.0, 3), (2.0, 4), (4.0, 8), (8.0, 55), (30.0, 1000)])
def test_exact_probability_ratio_is_e_eps(eps, m):
    params = OCMSParams.build(eps, 10_000, hash_range=m)
    ratio = realised_probability_ratio(params)
    # never above e^eps (the privacy claim), and equal to it up to the 2^-64 grid
    t = keep_threshold(params)
    assert ratio <= Fraction(math.exp(eps))
    # the 2^-64 grid of the keep probability bounds the relative gap by ~1 / (2^64 - T)
    assert float(ratio) == pytest.approx(math.exp(eps), rel=2.0 / (2**64 - t) + 1e-14)
    assert 0 < t < 2**64
    assert t / 2**64 == pytest.approx(params.keep_probability, rel=1e-15)


def test_ratio_capped_at_extreme_epsilon():
    params = OCMSParams.build(100.0, 10, hash_range=2)
    # keep probability rounds to 1 - 2^-64: the realised eps is lower, never higher
    assert realised_probability_ratio(params) <= Fraction(math.exp(100.0))


def _rr_counts_device(params, x, draws):
    y = None
    counts = np.zeros(params.hash_range, np.int64)
    # Fix the hash by conditioning: count z relative to the report's own h(x).
    keep = 0
    for _ in range(draws):
        r = privatize(params, x)
        y = params.field.hash_value(r.a0, r.a1, encode_value(params, x)) % params.hash_range
        counts[(r.z - y) % params.hash_range] += 1
        keep += r.z == y
    return counts


@pytest.mark.parametrize("eps, m", [(1.0, 3), (2.0, 6)])
def test_device_randomized_response_chi_square(eps, m):
    params = OCMSParams.build(eps, 1000, hash_range=m)
    draws = 12_000
    counts = _rr_counts_device(params, 123, draws)
    keep = params.keep_probability
    expected = np.array([keep] + [(1 - keep) / (m - 1)] * (m - 1)) * draws
    stat = chi2_statistic(counts, expected)
    assert stat < chi2_critical(m - 1, 1e-4), (counts, expected)


def test_chi_square_detects_wrong_keep_probability():
    # negative control: the same test rejects RR with eps off by 20%
    params = OCMSParams.build(2.0, 1000, hash_range=6)
    wrong = OCMSParams.build(2.4, 1000, hash_range=6)
    counts = _rr_counts_device(wrong, 5, 12_000)
    keep = params.keep_probability
    expected = np.array([keep] + [(1 - keep) / 5] * 5) * 12_000
    assert chi2_statistic(counts, expected) > chi2_critical(5, 1e-4)


def test_device_coefficients_uniform_and_in_field():
    params = OCMSParams.build(2.0, 7)  # field F(29): few cells
    order = params.field.order
    draws = 20_000
    hist = np.zeros(order, np.int64)
    for _ in range(draws):
        r = privatize(params, 3)
        assert 0 <= r.a0 < order and 0 <= r.a1 < order and 0 <= r.z < params.hash_range
        hist[r.a1] += 1
    assert chi2_statistic(hist, np.full(order, draws / order)) < chi2_critical(order - 1, 1e-4)


@pytest.mark.parametrize("eps, m", [(1.0, 3), (3.0, 6)])
def test_simulation_path_chi_square_and_seeded(eps, m):
    params = OCMSParams.build(eps, 1000, hash_range=m)
    values = np.full(200_000, 42, np.uint64)
    a = simulate_reports(params, values, np.random.default_rng(5))
    b = simulate_reports(params, values, np.random.default_rng(5))
    np.testing.assert_array_equal(a.z, b.z)
    np.testing.assert_array_equal(a.a0, b.a0)
    from cms_core import kernel

    y = kernel.hash_residues(params, a.a0, a.a1, values)
    rel = (a.z.astype(np.int64) - y.astype(np.int64)) % m
    counts = np.bincount(rel, minlength=m)
    keep = params.keep_probability
    expected = np.array([keep] + [(1 - keep) / (m - 1)] * (m - 1)) * len(values)
    assert chi2_statistic(counts, expected) < chi2_critical(m - 1, 1e-4)


def test_privatize_rejects_bad_values():
    params = OCMSParams.build(2.0, 100)
    for bad in (-1, 100, 2.5, "7", None, True):
        with pytest.raises(InvalidValueError):
            privatize(params, bad)
    strings = OCMSParams.build(2.0, value_domain="string")
    with pytest.raises(InvalidValueError):
        privatize(strings, 5)
    r = privatize(strings, "hello")
    assert r.a0 < 2**128 and r.z < strings.hash_range
