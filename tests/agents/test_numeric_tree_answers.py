"""The worker's answers for a numeric metric reported as a hierarchical histogram (issue 40): each level counted as a
parameter version of its own (every node tracked), the version's /histogram from the consistent tree of every
level's window, with the tree's exact noise; Prometheus reads the same histogram and exports no level on its own.

Devices' latencies (a seeded log-normal) are bucketized, each device draws a level and reports its node through
that level's oracle (cms_core.hierarchy.simulate, seeded), and each level's counts go into a view as the changelog
carries them. Tolerances come from the tree's variance (cms_core.hierarchy.ConsistentTree.functional_variances,
exact after consistency); the negative control is a fleet twice as slow, which the intervals must exclude.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from agents.answers.request import ApiError
from agents.answers.service import Window
from agents.catalog import Catalog
from agents.state import BucketKey, PartialCounts, encode_bundle
from agents.view import CountsView
from cms_core import hierarchy, kernel
from cms_core.numeric import _quantile_from_cdf
from tests.registry.helpers import load

from .test_numeric_answers import N, latencies

NOW = 1_700_000_000.0
BOUNDS = "[5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]"
TEXT = f"""
metrics:
  - name: latency_tree
    description: Time to first byte as a tree (branching 3 over 11 buckets, three levels)
    owner: web@example.com
    numeric: {{lower: 0, upper: 10000, buckets: {BOUNDS}, branching: 3}}
    epsilon: 1
    mechanism: hierarchy
    min_reports: 1000
"""


def count_levels(view, layout, version, buckets, rng):
    """Each level's reports counted into the view as the worker's changelog would carry them."""
    for level, batch in zip(version.tree_levels(), hierarchy.simulate(version.hierarchy, buckets, rng)):
        fp = level.fingerprint.hex()
        counts = kernel.match_counts(level.params, batch, level.tracked_values())
        view.apply(layout.key_of(BucketKey.total(fp, 0)).encode(),
                   encode_bundle({fp: PartialCounts(len(batch), counts, int(NOW), 0, 0).to_bytes()}))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    registry = load(tmp_path_factory.mktemp("reg"), TEXT)
    view = CountsView()
    catalog = Catalog(registry, view, clock=lambda: NOW)
    version = registry.metric("latency_tree").latest
    assert version.hierarchy.height == 3 and version.hierarchy.sizes == (2, 4, 11)
    rng = np.random.default_rng(40_041)
    buckets = version.numeric.layout.index(latencies(rng, N))
    count_levels(view, catalog.state_layout(1), version, buckets, rng)
    assert view.rejected == 0
    return catalog, version, np.bincount(buckets, minlength=11) / N


def histogram(catalog, query=None):
    doc = catalog.estimator.finish(catalog.prepare("latency_tree", "histogram", (query or {}).items()).gather())
    assert doc["metric"] == "latency_tree" and doc["mechanism"] == "hierarchy"
    return doc


def test_every_level_is_counted_under_its_own_fingerprint(world):
    catalog, version, _ = world
    fingerprints = [level.fingerprint.hex() for level in version.tree_levels()]
    assert set(fingerprints) <= set(catalog.by_fingerprint)
    assert [catalog.by_fingerprint[fp].d for fp in fingerprints] == [2, 4, 11]  # every node tracked
    assert [s.fingerprint for s in catalog.metric("latency_tree").services] == [fingerprints[-1]]
    assert catalog.labels_of(fingerprints[0]) == ("latency_tree", "1")
    listing = {m["name"]: m for m in catalog.describe()["metrics"]}
    assert listing["latency_tree"]["reports"] == N  # every level's reports
    assert listing["latency_tree"]["versions"][0]["mechanism"] == "hierarchy"
    params = catalog.estimator.finish(catalog.prepare("latency_tree", "params", {}.items()).gather())
    assert [row["fingerprint"] for row in params["hierarchy"]["levels"]] == fingerprints
    assert listing["latency_tree"]["versions"][0]["hierarchy"]["branching"] == 3


def test_quantiles_and_mean_hold_the_truth_and_exclude_a_twice_slower_fleet(world):
    catalog, version, truth = world
    spec = version.numeric
    doc = histogram(catalog)
    assert doc["n"] == N and doc["withheld"] is False
    h = doc["histogram"]
    assert h["mechanism"] == "hierarchy-B3" and sum(level["reports"] for level in h["levels"]) == N
    slower = np.bincount(spec.layout.index(latencies(np.random.default_rng(7), N, 2.0)), minlength=11) / N
    for row in h["quantiles"]:
        assert row["ci_low"] <= _quantile_from_cdf(spec.layout.edges, np.cumsum(truth), row["q"]) <= row["ci_high"]
        if row["q"] == 0.5:  # negative control
            assert not row["ci_low"] <= _quantile_from_cdf(spec.layout.edges, np.cumsum(slower), 0.5) <= row["ci_high"]
    assert h["mean"]["ci_low"] <= float(truth @ spec.layout.points) <= h["mean"]["ci_high"]
    assert not h["mean"]["ci_low"] <= float(slower @ spec.layout.points) <= h["mean"]["ci_high"]


def test_the_raw_cdf_is_within_the_trees_exact_variance(world):
    """Each raw CDF value within 4 sd of the truth, the sd the consistent tree's at the true distribution for the
    reports each level got; the answer's interval is that sd (at its own estimate) times z."""
    catalog, version, truth = world
    h = histogram(catalog)["histogram"]
    tree = hierarchy.ConsistentTree.of(version.hierarchy, [level["reports"] for level in h["levels"]])
    sd = np.sqrt(tree.functional_variances(truth, None))
    true_cdf = np.cumsum(truth)
    errors = np.array([row["raw"] for row in h["cdf"]]) - true_cdf
    assert np.all(np.abs(errors[:-1]) < 4 * sd[:-1]), (errors, sd)
    assert abs(errors[-1]) < 1e-9  # the total is fixed at 1
    # the tree beats direct RR over the 11 buckets at the same n and epsilon at the median edge (what auto weighs)
    from cms_core.numeric import direct_rr_functional_variance

    median = int(np.searchsorted(true_cdf, 0.5))
    flat = math.sqrt(direct_rr_functional_variance(1.0, 11, truth, (np.arange(11) <= median).astype(float), N))
    assert sd[median] < flat
    # each bucket's own estimate and interval are the tree's (the leaves), within 4 of their sd
    half = np.array([b["ci_high"] - b["estimate"] for b in h["buckets"]])
    estimates = np.array([b["estimate"] for b in h["buckets"]])
    assert np.all(np.abs(estimates - truth) < 4 * half / 1.959964 + 1e-12)
    assert sum(b["consistent"] for b in h["buckets"]) == pytest.approx(1.0)


def test_a_levels_estimate_is_unbiased_only_with_its_level(world):
    """Negative control of the level bookkeeping: the leaves read as if level 1 were level 2 (nodes swapped) lie
    far outside the intervals."""
    catalog, version, truth = world
    service = catalog.metric("latency_tree").default
    fields = service.tree.job_fields(service.tree.snapshots(Window("total")))
    levels = list(fields["levels"])
    n1, c1 = levels[0]
    levels[0] = (n1, c1[::-1].copy())  # the two nodes of level 1 swapped
    swapped = hierarchy.estimate_counts(version.hierarchy, levels)[0]
    right = hierarchy.estimate_counts(version.hierarchy, fields["levels"])[0]
    assert np.abs(np.cumsum(right) - np.cumsum(truth)).max() < np.abs(np.cumsum(swapped) - np.cumsum(truth)).max() / 3


def test_estimates_of_the_version_are_its_finest_level(world):
    """/estimates of a tree version answers its buckets from the reports at the finest level alone (their own n and
    intervals); the coarser levels are no version a request can name."""
    catalog, version, _ = world
    doc = catalog.estimator.finish(catalog.prepare("latency_tree", "estimates", {}.items()).gather())
    leaf_reports = histogram(catalog)["histogram"]["levels"][-1]["reports"]
    assert doc["n"] == leaf_reports < N and len(doc["estimates"]) == 11
    level1 = version.tree_levels()[0].fingerprint.hex()
    with pytest.raises(ApiError) as info:
        catalog.prepare("latency_tree", "estimates", {"params": level1}.items())
    assert info.value.parameter == "params"


def test_prometheus_reads_the_same_histogram_and_no_level_alone(world):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from agents.metrics import EstimatesCollector

    catalog, version, _ = world
    read = catalog.metric("latency_tree").default.window_estimate(Window("total"))
    assert read.histogram == histogram(catalog)["histogram"] and not read.withheld
    prometheus = CollectorRegistry()
    prometheus.register(EstimatesCollector(catalog, clock=lambda: NOW))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(prometheus).decode())}
    quantiles = {s.labels["quantile"]: s.value for s in families["ocms_numeric_quantile"].samples
                 if s.labels["metric"] == "latency_tree" and s.labels["window"] == "total"}
    assert quantiles == {str(row["q"]): row["estimate"] for row in read.histogram["quantiles"]}
    (info,) = [s for s in families["ocms_params_info"].samples if s.labels["metric"] == "latency_tree"]
    assert info.labels["mechanism"] == "hierarchy"  # one version, not one per level


def test_a_window_under_min_reports_counts_every_level(world, tmp_path):
    """min_reports is about the version's reports: 60,000 over three levels clears 30,000 though no level does."""
    catalog, _, _ = world
    view = catalog.metric("latency_tree").default.view
    held = Catalog(load(tmp_path, TEXT.replace("min_reports: 1000", "min_reports: 30000")), view, clock=lambda: NOW)
    doc = held.estimator.finish(held.prepare("latency_tree", "histogram", {}.items()).gather())
    assert doc["withheld"] is False and doc["histogram"] is not None
    more = Catalog(load(tmp_path, TEXT.replace("min_reports: 1000", "min_reports: 60001")), view, clock=lambda: NOW)
    doc = more.estimator.finish(more.prepare("latency_tree", "histogram", {}.items()).gather())
    assert doc["withheld"] is True and doc["histogram"] is None
    assert more.metric("latency_tree").default.window_estimate(Window("total")).histogram is None
