"""cms_core.hierarchy: the hierarchical histogram over numeric buckets, its consistent tree, its variance, its
privacy, and the planner's choice between it and direct RR (issue 40).

Statistical tests use fixed seeds; tolerances come from the sampling distribution of what is compared (a sample
variance's relative standard error sqrt(2 / (T - 1)), a sample mean's sd / sqrt(T)), at 4.5 standard deviations,
with negative controls where a wrong formula could still pass."""

import math
from fractions import Fraction

import numpy as np
import pytest

from cms_core import hierarchy, theory
from cms_core.audit import audit_batches
from cms_core.audit import output_distribution as level_distribution
from cms_core.errors import InvalidParameterError, OCMSError
from cms_core.hierarchy import ConsistentTree, HierarchyNoise, HierarchyParams
from cms_core.numeric import BucketLayout, Histogram, direct_rr_functional_variance
from cms_core.planning import choose_numeric_mechanism
from cms_core.reports import ReportBatch

LATENCY = BucketLayout.explicit([5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000], lower=0, upper=20000)
TRUE_12 = np.array([400, 900, 2600, 3100, 1500, 700, 350, 200, 100, 80, 50, 20])  # n = 10,000, a latency shape


def test_the_tree_covers_the_buckets_with_partial_nodes_at_the_right_edge():
    assert hierarchy.level_sizes(12, 4) == (3, 12)
    assert hierarchy.level_sizes(40, 4) == (3, 10, 40)
    assert hierarchy.level_sizes(1024, 2) == tuple(2**i for i in range(1, 11))
    assert hierarchy.level_sizes(12, 12) == (12,)  # B >= k: one level, a flat oracle over the buckets
    params = HierarchyParams.build(40, 1.0, 4)
    assert params.height == 3 and params.name == "hierarchy-B4"
    assert params.node(39, 1) == 2 and params.node(39, 2) == 9 and params.node(39, 3) == 39
    assert [p.dictionary_size for p in params.levels] == [3, 10, 40]
    # every prefix [0, j] takes at most B - 1 nodes per level (Cormode et al. 2019)
    counts = theory.range_node_counts(40, 4)
    assert counts.max() <= 3 and counts.shape == (40, 3)
    assert (counts * np.array([16, 4, 1])).sum(axis=1).tolist() == list(range(1, 41))


def test_a_report_is_one_integer_and_back():
    params = HierarchyParams.build(40, 2.0, 4)
    seen = set()
    for level, p in enumerate(params.levels, start=1):
        for z in range(p.hash_range):
            value = params.report_value(level, z)
            assert params.split_value(value) == (level, z)
            seen.add(value)
    assert seen == set(range(sum(p.hash_range for p in params.levels)))
    with pytest.raises(InvalidParameterError, match="level"):
        params.report_value(4, 0)


@pytest.mark.parametrize("kwargs, name", [
    (dict(buckets=1, epsilon=1.0, branching=2), "buckets"),
    (dict(buckets=5000, epsilon=1.0, branching=2), "buckets"),
    (dict(buckets=2.5, epsilon=1.0, branching=2), "buckets"),
    (dict(buckets=40, epsilon=1.0, branching=1), "branching"),
    (dict(buckets=40, epsilon=1.0, branching=17), "branching"),
    (dict(buckets=40, epsilon=-1.0, branching=4), "epsilon"),
    (dict(buckets=40, epsilon=1.0, branching=4, mechanism="olh"), "mechanism"),
])
def test_parameters_are_validated_with_the_bad_value_named(kwargs, name):
    with pytest.raises(InvalidParameterError) as err:
        HierarchyParams.build(**kwargs)
    assert err.value.name == name and isinstance(err.value, OCMSError)
    assert HierarchyParams.build(40, 1.0, 40).height == 1  # B >= k is a flat oracle, not an error


def test_bad_inputs_to_the_device_and_the_server_are_refused():
    params = HierarchyParams.build(12, 1.0, 4)
    with pytest.raises(InvalidParameterError, match="bucket"):
        hierarchy.privatize_bucket(params, 12)
    with pytest.raises(InvalidParameterError, match="buckets"):
        hierarchy.simulate(params, np.array([0, 12]), np.random.default_rng(0))
    with pytest.raises(InvalidParameterError, match="batches"):
        hierarchy.level_estimates(params, [ReportBatch.empty(params.levels[0])])
    with pytest.raises(InvalidParameterError, match="reports"):
        ConsistentTree.of(params, [0, 0])


def test_a_consistent_input_comes_back_unchanged_and_the_leaves_sum_to_one():
    params = HierarchyParams.build(40, 1.0, 4)
    rng = np.random.default_rng(1)
    x = rng.dirichlet(np.ones(40))
    levels = [np.bincount(params.node(np.arange(40), level), weights=x) for level in range(1, params.height + 1)]
    tree = ConsistentTree.of(params, [300, 500, 200])
    assert np.allclose(tree.leaves(levels), x)
    noisy = [y + rng.normal(0, 0.01, y.size) for y in levels]
    assert tree.leaves(noisy).sum() == pytest.approx(1.0)


def _simulated_cdfs(params, buckets, trials, seed):
    """The consistent CDF of ``trials`` independent runs on the same devices (fresh levels and randomized
    responses each run), one row each, and the tree of the first run."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(trials):
        leaves, _ = hierarchy.estimate(params, hierarchy.simulate(params, buckets, rng))
        rows.append(np.cumsum(leaves))
    return np.array(rows)


@pytest.mark.parametrize("epsilon, branching", [(1.0, 4), (4.0, 2)])
def test_the_cdf_is_unbiased_with_the_variance_the_formula_states(epsilon, branching):
    # k = 12 latency buckets; at epsilon 1 the leaf level is OCMS+RR (the fully random hash's figure), at
    # epsilon 4 every level direct RR (exact)
    params = HierarchyParams.build(12, epsilon, branching)
    assert any(not p.is_direct for p in params.levels) == (epsilon == 1.0)
    buckets = np.repeat(np.arange(12), TRUE_12)
    n = buckets.size
    trials = 400
    cdfs = _simulated_cdfs(params, buckets, trials, seed=int(epsilon * 10) + branching)
    truth = np.cumsum(TRUE_12) / n
    f = TRUE_12 / n
    share = [n // params.height] * params.height  # the levels' expected reports (the runs' vary by ~1%)
    tree = ConsistentTree.of(params, share)
    predicted = tree.functional_variances(f, None)[:-1]
    observed = np.var(cdfs[:, :-1], axis=0, ddof=1)
    bias = np.mean(cdfs[:, :-1], axis=0) - truth[:-1]
    assert np.all(np.abs(bias) < 4.5 * np.sqrt(predicted / trials)), bias / np.sqrt(predicted / trials)
    tolerance = 4.5 * math.sqrt(2 / (trials - 1)) + 0.03  # + 3%: the random level counts and n / (n - 1)
    ratio = observed / predicted
    assert np.all(np.abs(ratio - 1) < tolerance), ratio
    # negative control: as if every level heard all n devices (each device reporting at every level, which
    # would cost h * epsilon), the variance is h times too small
    everyone = ConsistentTree.of(params, [n] * params.height).functional_variances(f, None)[:-1]
    assert np.all(np.abs(observed / everyone - 1) > tolerance)


def test_one_level_is_direct_rr_and_its_variance_is_the_numeric_module_s():
    params = HierarchyParams.build(12, 2.0, 12, mechanism="direct")
    tree = ConsistentTree.of(params, [10_000])
    f = TRUE_12 / TRUE_12.sum()
    for w in ((np.arange(12) <= 3).astype(float), LATENCY.points):
        assert tree.functional_variances(f, w)[0] == pytest.approx(
            direct_rr_functional_variance(2.0, 12, f, w, 10_000), rel=1e-9)
    noise = HierarchyNoise(tree)
    cdf_sd = np.sqrt(noise.cdf_variances(f, 10_000))
    single = [math.sqrt(noise.variance(f, (np.arange(12) <= j).astype(float), 10_000)) for j in range(12)]
    assert np.allclose(cdf_sd, single)


@pytest.mark.parametrize("mechanism", ["direct", "ocms"])
def test_a_flat_oracle_s_cdf_variances_in_closed_form_are_the_solve_s(mechanism):
    """flat_cdf_variances (O(k), what predicted_cdf_variances and the registry's mechanism auto use for one level)
    equals the consistent tree's k x k solve, at uniform and skewed bucket frequencies."""
    from cms_core.hierarchy import flat_cdf_variances

    for k in (2, 12, 40):
        params = HierarchyParams.build(k, 1.0, k, mechanism=mechanism)
        for f in (np.full(k, 1.0 / k), np.random.default_rng(k).dirichlet(np.ones(k))):
            solved = ConsistentTree.of(params, [5_000]).functional_variances(f, None)
            assert np.allclose(flat_cdf_variances(params.levels[0], 5_000, f), solved, rtol=1e-12, atol=1e-18)


def test_the_histogram_s_quantile_intervals_cover_the_median_at_their_level():
    params = HierarchyParams.build(12, 1.0, 4)
    buckets = np.repeat(np.arange(12), TRUE_12)
    rng = np.random.default_rng(43)
    truth = np.cumsum(TRUE_12) / TRUE_12.sum()
    trials, covered = 300, 0
    for _ in range(trials):
        leaves, noise = hierarchy.estimate(params, hierarchy.simulate(params, buckets, rng))
        histogram = Histogram.of(LATENCY, leaves, buckets.size, noise)
        low, high = histogram.cdf_interval()
        covered += bool(low[3] <= truth[3] <= high[3])  # the CDF at 50 ms, near the median
    sd = math.sqrt(0.95 * 0.05 / trials)
    assert covered / trials > 0.95 - 4.5 * sd


# ----------------------------------------------------------------------------- privacy
def test_every_report_is_epsilon_ldp_exactly():
    for epsilon, mechanism in ((1.0, "direct"), (0.5, "ocms")):
        params = HierarchyParams.build(8, epsilon, 2, mechanism=mechanism)
        loss = hierarchy.exact_privacy_loss(params)
        assert loss <= Fraction(math.exp(epsilon)) and float(loss) > math.exp(epsilon) * (1 - 1e-12), float(loss)


def test_negative_control_a_device_reporting_at_every_level_spends_h_times_epsilon():
    params = HierarchyParams.build(8, 1.0, 2, mechanism="direct")

    def every_level(bucket):
        out = {(): Fraction(1)}
        for level, p in enumerate(params.levels, start=1):
            level_out = level_distribution(p, int(params.node(bucket, level)))
            out = {key + (o,): prob * q for key, prob in out.items() for o, q in level_out.items()}
        return out

    first, last = every_level(0), every_level(7)
    worst = max(first[o] / last[o] for o in first)
    assert float(worst) == pytest.approx(math.exp(params.height * 1.0), rel=1e-9) and params.height == 3
    assert worst > Fraction(math.exp(1.0))


def test_black_box_audit_of_the_device_path_finds_no_leak_and_most_of_the_budget():
    params = HierarchyParams.build(8, 2.0, 2, mechanism="direct")
    leaf = params.levels[-1]
    trials = 3000
    kept = {0: [], 7: []}
    for bucket in kept:
        while len(kept[bucket]) < trials:
            report = hierarchy.privatize_bucket(params, bucket)
            if report.level == params.height:
                kept[bucket].append(report.report)
    batches = [ReportBatch.from_reports(leaf, kept[b]) for b in (0, 7)]
    result = audit_batches(leaf, 0, 7, *batches, alpha=0.01, claimed_epsilon=2.0)
    assert not result.leaks and result.fraction_of_claim > 0.75, result


# ----------------------------------------------------------------------------- the planner
def test_the_planner_picks_direct_rr_for_few_buckets_at_high_epsilon_and_a_tree_for_many():
    few = choose_numeric_mechanism(12, 4.0, 100_000)
    assert few["chosen"] == "direct-rr" and few["branching"] == 12
    many = choose_numeric_mechanism(40, 1.0, 100_000)
    assert many["chosen"].startswith("hierarchy-B") and 2 <= many["branching"] <= 16
    assert many["best_hierarchy"] == many["chosen"]
    variances = {name: c["mean_cdf_variance"] for name, c in many["candidates"].items()}
    assert variances[many["chosen"]] == min(variances.values())
    assert variances["direct-rr"] > 2 * variances[many["chosen"]]
    # the predicted variance scales as 1 / n
    tenfold = choose_numeric_mechanism(40, 1.0, 1_000_000)
    assert tenfold["chosen"] == many["chosen"]
    assert tenfold["candidates"][many["chosen"]]["mean_cdf_variance"] == pytest.approx(
        variances[many["chosen"]] / 10, rel=1e-3)


@pytest.mark.parametrize("kwargs, name", [
    (dict(buckets=1, epsilon=1.0, n=10), "buckets"),
    (dict(buckets=12, epsilon=1.0, n=0), "n"),
    (dict(buckets=12, epsilon=0.0, n=10), "epsilon"),
])
def test_the_planner_validates_its_inputs(kwargs, name):
    with pytest.raises(InvalidParameterError) as err:
        choose_numeric_mechanism(**kwargs)
    assert err.value.name == name


def test_the_estimate_from_stored_counts_is_the_estimate_from_the_reports():
    """What the worker stores per level (its report count and every node's match count) gives the same consistent
    leaves as the reports themselves; a level's counts of the wrong size are refused by name."""
    from cms_core import kernel
    from cms_core.values import TrackedValues

    params = HierarchyParams.build(40, 1.0, 4)
    rng = np.random.default_rng(404)
    batches = hierarchy.simulate(params, rng.integers(0, 40, 20_000), rng)
    counted = [(len(b), kernel.match_counts(p, b, TrackedValues.range(p, 0, size)))
               for p, size, b in zip(params.levels, params.sizes, batches)]
    leaves, noise = hierarchy.estimate(params, batches)
    stored, stored_noise = hierarchy.estimate_counts(params, counted)
    np.testing.assert_allclose(stored, leaves, rtol=0, atol=1e-12)
    assert stored_noise.tree.reports == noise.tree.reports
    with pytest.raises(InvalidParameterError) as info:
        hierarchy.estimate_counts(params, [counted[0], counted[1], (counted[2][0], counted[2][1][:-1])])
    assert info.value.name == "level_counts"
    with pytest.raises(InvalidParameterError):
        hierarchy.estimate_counts(params, counted[:2])


def test_the_window_summary_of_a_tree_holds_its_levels_and_each_buckets_interval():
    """cms_core.numeric.tree_window_summary: the consistent leaves as the buckets, each with the interval of its
    exact variance (a bucket's estimate within 4 sd of the truth), n = every level's reports; None without any."""
    from cms_core import kernel
    from cms_core.numeric import tree_window_summary
    from cms_core.values import TrackedValues

    layout = BucketLayout.explicit(list(range(1, 12)), 0, 12)
    params = HierarchyParams.build(12, 2.0, 3)
    rng = np.random.default_rng(12)
    f = np.arange(1, 13) / np.arange(1, 13).sum()
    buckets = rng.choice(12, 30_000, p=f)
    batches = hierarchy.simulate(params, buckets, rng)
    counted = [(len(b), kernel.match_counts(p, b, TrackedValues.range(p, 0, size)))
               for p, size, b in zip(params.levels, params.sizes, batches)]
    doc = tree_window_summary(layout, params, counted, 0.95)
    assert [level["reports"] for level in doc["levels"]] == [len(b) for b in batches]
    truth = np.bincount(buckets, minlength=12) / buckets.size
    for bucket, true in zip(doc["buckets"], truth):
        sd = (bucket["ci_high"] - bucket["estimate"]) / 1.959964
        assert abs(bucket["estimate"] - true) < 4 * sd, bucket
    # negative control: the intervals are tight enough to tell this f from the uniform distribution somewhere
    assert any(not b["ci_low"] <= 1 / 12 <= b["ci_high"] for b in doc["buckets"])
    empty = [(0, np.zeros(size, np.int64)) for size in params.sizes]
    assert tree_window_summary(layout, params, empty, 0.95) is None


def test_every_leafs_variance_without_the_k_by_k_product_is_the_identitys():
    """functional_variances(f, "buckets") (what /histogram's per-bucket intervals use) equals the general formula
    with the identity's rows as weights."""
    params = HierarchyParams.build(40, 1.0, 4)
    tree = ConsistentTree.of(params, [900, 1000, 1100])
    f = np.random.default_rng(41).dirichlet(np.ones(40))
    np.testing.assert_allclose(tree.functional_variances(f, "buckets"), tree.functional_variances(f, np.eye(40)),
                               rtol=1e-12, atol=1e-18)
    assert not np.allclose(tree.functional_variances(f, "buckets"), tree.functional_variances(f, None))  # control
