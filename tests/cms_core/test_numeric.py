"""cms_core.numeric: bucket layouts, and histograms, quantiles and means from direct RR over the buckets.

Statistical tests use fixed seeds; tolerances come from the sampling distribution of what is compared (a sample
variance's relative standard error sqrt(2 / (T - 1)), a coverage count's binomial standard deviation), at 4.5
standard deviations, with a negative control where a wrong formula could still pass."""

import math

import numpy as np
import pytest

from cms_core.errors import InvalidParameterError
from cms_core.numeric import (BoundedNoise, BucketLayout, DirectRRNoise, Histogram, direct_rr_functional_variance,
                              isotonic_cdf, monotone_cdf, rank_error, wasserstein, wasserstein_of_cdf)
from cms_core.theory import rr_keep_probability

LATENCY = BucketLayout.explicit([5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000], lower=0, upper=20000)


def test_a_value_on_a_bound_is_in_the_bucket_that_bound_closes_and_values_outside_are_clipped():
    assert LATENCY.buckets == 12
    assert LATENCY.index([-3, 0, 5, 5.0001, 10000, 10001, 1e9]).tolist() == [0, 0, 0, 1, 10, 11, 11]
    assert LATENCY.edges[0] == 0 and LATENCY.edges[-1] == 20000
    with pytest.raises(InvalidParameterError, match="value='NaN'"):
        LATENCY.index([1.0, float("nan")])


@pytest.mark.parametrize("bounds, lower, upper, name", [
    ([], 0, 1, "bounds"),
    ([1, 1], 0, 5, "bounds"),
    ([3, 2], 0, 5, "bounds"),
    ([0, 2], 0, 5, "bounds"),
    ([1, 2], 0, 2, "bounds"),
    ([1], 5, 0, "upper"),
    ([1, float("inf")], 0, 5, "bounds"),
    (["a"], 0, 5, "bounds"),
])
def test_explicit_layouts_are_validated_with_the_bad_field_named(bounds, lower, upper, name):
    with pytest.raises(InvalidParameterError) as err:
        BucketLayout.explicit(bounds, lower, upper)
    assert err.value.name == name


def test_exponential_buckets_follow_opentelemetry_s_base():
    doubling = BucketLayout.exponential(0, lower=1, upper=100)
    assert doubling.bounds == (2, 4, 8, 16, 32, 64)
    finer = BucketLayout.exponential(2, lower=1, upper=100)
    ratios = np.diff(np.log2(finer.bounds))
    assert np.allclose(ratios, 0.25) and finer.bounds[0] > 1 and finer.bounds[-1] < 100
    with pytest.raises(InvalidParameterError, match="lower"):
        BucketLayout.exponential(0, lower=0, upper=10)
    with pytest.raises(InvalidParameterError, match="scale"):
        BucketLayout.exponential(20, lower=1e-9, upper=1e9)
    assert doubling.fingerprint() != finer.fingerprint() and len(doubling.fingerprint()) == 8


def _grr_estimates(true_counts: np.ndarray, epsilon: float, trials: int, rng) -> np.ndarray:
    """Unbiased bucket frequencies of ``trials`` independent runs of direct RR over k (one row each)."""
    k = true_counts.size
    p = rr_keep_probability(epsilon, k)
    q = (1 - p) / (k - 1)
    transition = np.full((k, k), q)
    np.fill_diagonal(transition, p)
    reported = rng.multinomial(np.broadcast_to(true_counts, (trials, k)), np.broadcast_to(transition, (trials, k, k)))
    counts = reported.sum(axis=1)
    n = true_counts.sum()
    return (counts / n - q) / (p - q)


TRUE = np.array([400, 900, 2600, 3100, 1500, 700, 350, 200, 100, 80, 50, 20])  # n = 10,000, a latency shape


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_the_functional_variance_formula_matches_simulation(epsilon):
    rng = np.random.default_rng(40)
    trials = 1500
    estimates = _grr_estimates(TRUE, epsilon, trials, rng)
    f = TRUE / TRUE.sum()
    n = int(TRUE.sum())
    tolerance = 4.5 * math.sqrt(2 / (trials - 1))
    for w in ((np.arange(12) <= 3).astype(float), LATENCY.points):
        predicted = direct_rr_functional_variance(epsilon, 12, f, w, n)
        observed = np.var(estimates @ w, ddof=1)
        assert abs(observed / predicted - 1) < tolerance, (observed, predicted)
    # negative control: the same formula without taking out the devices' own spread (as if the devices were
    # drawn anew for every run) misses by far more at epsilon 4, where little of the spread is noise
    if epsilon == 4.0:
        p = rr_keep_probability(epsilon, 12)
        q = (1 - p) / 11
        w = (np.arange(12) <= 3).astype(float)  # the CDF at 50 ms
        pi = f * (p - q) + q
        drawn_anew = (pi @ (w * w) - (pi @ w) ** 2) / (n * (p - q) ** 2)
        assert abs(np.var(estimates @ w, ddof=1) / drawn_anew - 1) > tolerance


def test_the_mean_interval_covers_the_bucketized_mean_at_its_level_and_a_narrower_one_does_not():
    rng = np.random.default_rng(41)
    trials = 600
    estimates = _grr_estimates(TRUE, 1.0, trials, rng)
    truth = float(TRUE / TRUE.sum() @ LATENCY.points)
    noise = DirectRRNoise(1.0, 12)
    covered = narrow = 0
    for raw in estimates:
        mean = Histogram.of(LATENCY, raw, int(TRUE.sum()), noise).mean()
        covered += mean.low <= truth <= mean.high
        half = (mean.high - mean.low) / 4
        narrow += mean.estimate - half <= truth <= mean.estimate + half
    sd = math.sqrt(0.95 * 0.05 / trials)
    assert abs(covered / trials - 0.95) < 4.5 * sd
    assert narrow / trials < 0.95 - 4.5 * sd  # negative control: half the width covers about 67%


def test_quantiles_fall_within_their_intervals_and_near_the_truth_at_large_n():
    rng = np.random.default_rng(42)
    true_counts = TRUE * 100  # n = 1,000,000
    raw = _grr_estimates(true_counts, 2.0, 1, rng)[0]
    histogram = Histogram.of(LATENCY, raw, int(true_counts.sum()), DirectRRNoise(2.0, 12))
    # the true values spread uniformly inside their buckets
    edges = LATENCY.edges
    values = np.concatenate([rng.uniform(edges[i], edges[i + 1], c) for i, c in enumerate(true_counts)])
    for q in (0.5, 0.9, 0.99):
        estimate = histogram.quantile(q)
        assert estimate.low <= estimate.estimate <= estimate.high
        assert rank_error(values, q, estimate.estimate) < 0.005, q
    assert wasserstein(values, histogram) < 0.01 * LATENCY.upper


def test_the_processed_cdf_is_monotone_and_ends_at_one_when_raw_estimates_go_negative():
    raw = np.array([0.3, -0.05, 0.2, -0.1, 0.4, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    histogram = Histogram.of(LATENCY, raw, 100, DirectRRNoise(1.0, 12))
    cdf = histogram.cdf()
    assert np.all(np.diff(cdf) >= -1e-12) and cdf[-1] == pytest.approx(1.0)
    assert np.any(np.diff(histogram.cdf(processed=False)) < 0)  # the raw one is kept as it is
    low, high = histogram.cdf_interval()
    assert np.all(low <= cdf + 1e-12) and np.all(cdf <= high + 1e-12)
    assert np.all(np.diff(low) >= 0) and np.all(np.diff(high) >= 0)


def test_the_bounds_absorb_where_the_least_squares_fit_leaves_a_plateau_inside_them():
    # a raw CDF that touches 1 at 1 s and wanders just below it beyond, and touches 0 at 10 ms
    raw = np.array([-0.01, 0.02, -0.005, 0.3, 0.7, 0.85, 0.97, 1.004, 0.993, 0.996, 0.992, 1.0])
    least_squares, processed = isotonic_cdf(raw), monotone_cdf(raw)
    assert np.all(processed[7:] == 1.0) and np.all(processed[:3] == 0.0)
    assert np.allclose(processed[3:7], least_squares[3:7])  # in between, the least-squares fit
    # the old behaviour (negative control): the pooled plateau stays below 1 across the tail, and above 0 at 10 ms
    assert np.allclose(least_squares[7:11], (1.004 + 0.993 + 0.996 + 0.992) / 4) and least_squares[2] > 0
    histogram = Histogram.of(LATENCY, np.diff(raw, prepend=0.0), 100, DirectRRNoise(1.0, 12))
    assert np.array_equal(histogram.cdf(), processed) and np.allclose(histogram.cdf(processed=False), raw)


def test_a_trees_wasserstein_distance_over_a_wide_empty_tail_is_not_the_plateaus():
    """256 buckets of 78 ms up to 20 s, latencies around 120 ms, a B2 tree at eps 1 (its CDF's sd about 0.019,
    eight times the mass beyond 2 s): over 10 fixed seeds the processed CDF's median distance is about half the
    least-squares fit's (measured 23.4 against 46.6 ms: 37-201 ms where the fit's plateau sat below 1)."""
    from cms_core import hierarchy

    layout = BucketLayout.explicit(np.linspace(0, 20_000, 257)[1:-1], 0, 20_000)
    params = hierarchy.HierarchyParams.build(256, 1.0, 2)
    processed, least_squares = [], []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        values = np.clip(rng.lognormal(np.log(120.0), 1.0, 100_000), 0, 20_000)
        leaves, noise = hierarchy.estimate(params, hierarchy.simulate(params, layout.index(values), rng))
        processed.append(wasserstein(values, Histogram.of(layout, leaves, values.size, noise)))
        least_squares.append(wasserstein_of_cdf(values, layout, isotonic_cdf(np.cumsum(leaves))))
    assert np.median(processed) < 0.7 * np.median(least_squares), (processed, least_squares)


def test_the_bound_for_correlated_oracles_is_never_below_the_independent_sum():
    sd = np.full(12, 0.01)
    w = LATENCY.points
    assert BoundedNoise(sd).variance(None, w, 1000) >= float(((w * sd) ** 2).sum())


def test_histograms_refuse_a_wrong_shape_and_quantiles_outside_zero_one():
    with pytest.raises(InvalidParameterError, match="raw"):
        Histogram.of(LATENCY, np.zeros(11), 10, DirectRRNoise(1.0, 12))
    histogram = Histogram.of(LATENCY, np.full(12, 1 / 12), 10, DirectRRNoise(1.0, 12))
    for q in (0, 1, 1.5, float("nan")):
        with pytest.raises(InvalidParameterError):
            histogram.quantile(q)
