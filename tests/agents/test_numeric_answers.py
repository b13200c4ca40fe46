"""The worker's answers for a numeric metric (issue 40): bucket match counts through the integer path, then per
window the bucket frequencies with intervals, the raw and the monotone CDF, quantiles and the mean with intervals,
through the one read path (EstimateService.window_estimate for Prometheus, the same estimate for /histogram).

Devices' latencies (a seeded log-normal) are clipped and bucketized, reported through the metric's oracle (the
seeded simulation path) and counted into a view as the changelog carries them. Tolerances come from the variance
formulas of cms_core.numeric (direct RR: exact; OCMS+RR: the Cauchy-Schwarz bound); the negative controls are
a distribution twice as slow, which the intervals must exclude.
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
from cms_core import kernel
from cms_core.numeric import _quantile_from_cdf
from cms_core.privatize import simulate_reports
from tests.registry.helpers import load

NOW = 1_700_000_000.0
TEXT = """
metrics:
  - name: latency_direct
    description: Time to first byte, direct RR over 11 buckets
    owner: web@example.com
    numeric: {lower: 0, upper: 10000, buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]}
    epsilon: 2
    mechanism: direct
  - name: latency_ocms
    description: The same at epsilon 1 through OCMS+RR (a flat oracle; mechanism auto picks a tree here)
    owner: web@example.com
    numeric: {lower: 0, upper: 10000, buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]}
    epsilon: 1
    mechanism: ocms
    mode: l2
    min_reports: 1000
  - name: screen
    description: a frequency metric
    owner: a@example.com
    categories: [home, search]
    epsilon: 1
"""
N = 60_000


def latencies(rng, n, scale=1.0):
    return scale * rng.lognormal(mean=math.log(120), sigma=1.1, size=n)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    registry = load(tmp_path_factory.mktemp("reg"), TEXT)
    view = CountsView()
    catalog = Catalog(registry, view, clock=lambda: NOW)
    layout = catalog.state_layout(1)
    rng = np.random.default_rng(40_040)
    truth = {}
    for name in ("latency_direct", "latency_ocms"):
        version = registry.metric(name).latest
        values = latencies(rng, N)
        buckets = version.numeric.layout.index(values)
        batch = simulate_reports(version.params, buckets.astype(np.uint64), rng)
        counts = kernel.match_counts(version.params, batch, version.tracked_values())
        fp = version.fingerprint.hex()
        view.apply(layout.key_of(BucketKey.total(fp, 0)).encode(),
                   encode_bundle({fp: PartialCounts(N, counts, int(NOW), 0, 0).to_bytes()}))
        truth[name] = np.bincount(buckets, minlength=version.numeric.buckets) / N
    assert view.rejected == 0
    catalog.view = view  # for the withheld test's second catalog over the same counts
    return catalog, registry, truth


def histogram(catalog, name, query=None):
    doc = catalog.estimator.finish(catalog.prepare(name, "histogram", (query or {}).items()).gather())
    assert doc["metric"] == name and doc["n"] == N
    return doc


def true_quantile(spec, f, q):
    return _quantile_from_cdf(spec.layout.edges, np.cumsum(f), q)


@pytest.mark.parametrize("name", ["latency_direct", "latency_ocms"])
def test_quantiles_and_mean_hold_the_truth_and_exclude_a_twice_slower_fleet(world, name):
    catalog, registry, truth = world
    spec = registry.metric(name).latest.numeric
    doc = histogram(catalog, name)
    h = doc["histogram"]
    assert [q["q"] for q in h["quantiles"]] == [0.5, 0.9, 0.99]
    slower = np.bincount(spec.layout.index(latencies(np.random.default_rng(7), N, 2.0)), minlength=11) / N
    for row in h["quantiles"]:
        assert row["ci_low"] <= true_quantile(spec, truth[name], row["q"]) <= row["ci_high"], row
        if row["q"] == 0.5:  # negative control (the upper quantiles lie in wide buckets: wide intervals)
            assert not row["ci_low"] <= true_quantile(spec, slower, row["q"]) <= row["ci_high"], row
    true_mean = float(truth[name] @ spec.layout.points)
    assert h["mean"]["ci_low"] <= true_mean <= h["mean"]["ci_high"]
    assert not h["mean"]["ci_low"] <= float(slower @ spec.layout.points) <= h["mean"]["ci_high"]


def test_the_raw_cdf_is_within_its_exact_variance_and_the_monotone_one_is_a_cdf(world):
    """Direct RR: the CDF's standard deviation at each edge is exact (direct_rr_functional_variance); each raw
    value within 4 sd of the truth, the sd recovered from the answer's own interval."""
    catalog, registry, truth = world
    h = histogram(catalog, "latency_direct")["histogram"]
    true_cdf = np.cumsum(truth["latency_direct"])
    from cms_core.numeric import direct_rr_functional_variance

    for j, row in enumerate(h["cdf"][:-1]):
        w = (np.arange(11) <= j).astype(float)
        sd = math.sqrt(direct_rr_functional_variance(2.0, 11, truth["latency_direct"], w, N))
        assert abs(row["raw"] - true_cdf[j]) < 4 * sd, (j, row)
    monotone = [row["monotone"] for row in h["cdf"]]
    assert monotone == sorted(monotone) and monotone[-1] == 1.0 and min(monotone) >= 0.0
    assert [row["le"] for row in h["cdf"]] == [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000]
    assert all("above_noise" in b and "ci_low" in b for b in h["buckets"])  # the frequencies' records
    assert sum(b["consistent"] for b in h["buckets"]) == pytest.approx(1.0)


def test_the_request_adds_quantiles_and_bad_parameters_name_themselves(world):
    catalog, _, _ = world
    h = histogram(catalog, "latency_direct", {"q": "0.75,0.999"})["histogram"]
    assert [q["q"] for q in h["quantiles"]] == [0.5, 0.75, 0.9, 0.99, 0.999]
    for raw, says in (("1.5", "must be a number in (0, 1)"), ("median", "is not a number"), ("0.5,", "not a number")):
        with pytest.raises(ApiError) as info:
            catalog.prepare("latency_direct", "histogram", {"q": raw}.items())
        assert (info.value.parameter, info.value.status) == ("q", 400) and says in info.value.message
    with pytest.raises(ApiError) as info:
        catalog.prepare("latency_direct", "histogram", {"k": "3"}.items())
    assert info.value.parameter == "k" and info.value.status == 400
    with pytest.raises(ApiError) as info:
        catalog.prepare("screen", "histogram", {}.items())
    assert (info.value.parameter, info.value.status) == ("metric", 404) and "not numeric" in info.value.message


def test_prometheus_reads_the_same_histogram_through_window_estimate(world):
    catalog, registry, _ = world
    service = catalog.metric("latency_ocms").default
    read = service.window_estimate(Window("total"))
    assert read.histogram == histogram(catalog, "latency_ocms")["histogram"]
    assert not read.withheld  # min_reports 1000 < N


def test_a_withheld_window_has_no_histogram(world, tmp_path):
    catalog, registry, _ = world
    text = TEXT.replace("min_reports: 1000", "min_reports: 100000")
    other = Catalog(load(tmp_path, text), catalog.view, clock=lambda: NOW)
    doc = other.estimator.finish(other.prepare("latency_ocms", "histogram", {}.items()).gather())
    assert doc["withheld"] is True and doc["histogram"] is None
    assert other.metric("latency_ocms").default.window_estimate(Window("total")).histogram is None


def test_prometheus_exports_gauges_of_the_monotone_cdf_quantiles_and_mean(world):
    """The scrape (agents.metrics + agents.numeric_export): gauges only; le from the layout, quantile from the
    registry; every value the /histogram answer's."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from agents.metrics import EstimatesCollector

    catalog, registry, _ = world
    prometheus = CollectorRegistry()
    prometheus.register(EstimatesCollector(catalog, clock=lambda: NOW))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(prometheus).decode())}
    numeric_families = [f for name, f in families.items() if name.startswith("ocms_numeric_")]
    assert {f.type for f in numeric_families} == {"gauge"} and len(numeric_families) == 7
    for name in ("latency_direct", "latency_ocms"):
        h = histogram(catalog, name)["histogram"]
        cdf = {s.labels["le"]: s.value for s in families["ocms_numeric_cdf_ratio"].samples
               if s.labels["metric"] == name and s.labels["window"] == "total"}
        assert list(cdf) == ["5.0", "10.0", "25.0", "50.0", "100.0", "250.0", "500.0", "1000.0", "2500.0",
                             "5000.0", "10000.0", "+Inf"]
        assert list(cdf.values()) == [row["monotone"] for row in h["cdf"]] + [1.0]
        assert list(cdf.values()) == sorted(cdf.values())  # cumulative, never decreasing
        quantiles = {s.labels["quantile"]: s.value for s in families["ocms_numeric_quantile"].samples
                     if s.labels["metric"] == name and s.labels["window"] == "total"}
        assert quantiles == {str(row["q"]): row["estimate"] for row in h["quantiles"]}
        (mean,) = [s.value for s in families["ocms_numeric_mean"].samples
                   if s.labels["metric"] == name and s.labels["window"] == "total"]
        assert mean == h["mean"]["estimate"]
    # the frequency metric has none, and the latest bucket (empty here) exports no numeric series
    assert not any(s.labels["metric"] == "screen" or s.labels["window"] != "total"
                   for f in numeric_families for s in f.samples)


def test_params_and_the_listing_describe_the_layout(world):
    catalog, _, _ = world
    params = catalog.estimator.finish(catalog.prepare("latency_direct", "params", {}.items()).gather())
    assert params["numeric"]["bounds"][:3] == [5.0, 10.0, 25.0] and params["numeric"]["quantiles"] == [0.5, 0.9, 0.99]
    listing = {m["name"]: m for m in catalog.describe()["metrics"]}
    assert listing["latency_ocms"]["versions"][0]["numeric"]["buckets"] == 11
    assert "numeric" not in listing["screen"]["versions"][0]
