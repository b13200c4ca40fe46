"""cms_core.combine: inverse-variance combination of rotated parameter versions (issue 12)."""

from __future__ import annotations

import numpy as np
import pytest

from cms_core import OCMSParams, OCMSSketch, TrackedValues, kernel
from cms_core.combine import combine_frequencies
from cms_core.errors import InvalidParameterError
from cms_core.privatize import simulate_reports

D = 50
V1 = OCMSParams.build(2.0, D, binding="m@1")
V2 = OCMSParams.build(1.0, D, mechanism="direct", binding="m@2")
TRUTH = 1.0 / np.arange(1, D + 1) ** 1.1
TRUTH /= TRUTH.sum()


def estimate(params, n, rng):
    values = rng.choice(D, n, p=TRUTH).astype(np.uint64)
    tracked = TrackedValues.range(params, 0, D)
    batch = simulate_reports(params, values, rng)
    return OCMSSketch(params, tracked, kernel.match_counts(params, batch, tracked), n).estimate()


def test_the_formula_on_fixed_inputs():
    g1, g2 = np.array([0.30, 0.10, np.nan]), np.array([0.20, np.nan, 0.05])
    out = combine_frequencies([(V1, 4000, g1), (V2, 1000, g2)])
    f_bar = (4000 * 0.30 + 1000 * 0.20) / 5000
    w1, w2 = 1 / V1.variance(f_bar, 4000), 1 / V2.variance(f_bar, 1000)
    assert out.frequency[0] == pytest.approx((w1 * 0.30 + w2 * 0.20) / (w1 + w2), rel=1e-12)
    assert out.variance[0] == pytest.approx(1 / (w1 + w2), rel=1e-12)
    assert out.variance[0] < min(V1.variance(f_bar, 4000), V2.variance(f_bar, 1000))
    # A value only one version tracks is that version's estimate (the weight's f_bar is its own).
    assert out.frequency[1] == pytest.approx(0.10) and out.variance[1] == pytest.approx(V1.variance(0.10, 4000))
    assert out.frequency[2] == pytest.approx(0.05) and list(out.reports) == [5000, 4000, 1000]
    assert out.ci_high[0] - out.frequency[0] == pytest.approx(1.959963984540054 * np.sqrt(out.variance[0]))


def test_versions_without_reports_take_no_part_and_bad_input_is_named():
    g = np.array([0.2, 0.1])
    alone = combine_frequencies([(V1, 3000, g), (V2, 0, np.array([np.nan, np.nan]))])
    assert alone.frequency == pytest.approx(g) and alone.n == 3000
    with pytest.raises(InvalidParameterError, match="at least one version"):
        combine_frequencies([(V1, 0, g)])
    with pytest.raises(InvalidParameterError, match="same values"):
        combine_frequencies([(V1, 10, g), (V2, 10, np.zeros(3))])


def test_unbiased_and_nominal_coverage_over_seeded_rounds():
    """300 seeded rounds of two versions (OCMS+RR eps 2, direct RR eps 1) of one distribution:
    the combined estimate is unbiased and its 95% interval covers the truth at the nominal rate
    (tolerance: 4 standard errors of a binomial proportion over rounds x values); a negative
    control, the same interval halved, covers far less."""
    rng = np.random.default_rng(12)
    rounds, inside, inside_half, estimates = 300, 0, 0, []
    for _ in range(rounds):
        e1, e2 = estimate(V1, 3000, rng), estimate(V2, 2000, rng)
        out = combine_frequencies([(V1, 3000, e1.frequency), (V2, 2000, e2.frequency)])
        inside += int(((out.ci_low <= TRUTH) & (TRUTH <= out.ci_high)).sum())
        half = (out.ci_high - out.ci_low) / 4
        inside_half += int((np.abs(out.frequency - TRUTH) <= half).sum())
        estimates.append(out.frequency)
    trials = rounds * D
    coverage = inside / trials
    se = np.sqrt(0.95 * 0.05 / trials)
    assert abs(coverage - 0.95) <= 4 * se + 0.005, coverage
    assert inside_half / trials < 0.75  # the negative control fails clearly
    mean = np.mean(estimates, axis=0)
    spread = np.std(estimates, axis=0, ddof=1) / np.sqrt(rounds)
    assert np.all(np.abs(mean - TRUTH) <= 4.5 * spread)
