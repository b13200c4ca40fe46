"""`ocms run` with a numeric metric whose mean is the Hybrid mechanism's (issue 40): the fleet sends each device's
number for the mean's part (tests/fleet/test_simulate_mean.py), and the numeric line shows the private mean with its
interval beside the devices' true clipped mean, then the histogram's own mean beside the bucketized truth."""

from __future__ import annotations

import re
from argparse import Namespace

import numpy as np
import pytest

from fleet import simulator
from fleet.datasets import parse_dataset
from ocms.run import main_table, table_reports
from ocms.run_metric import fleet_dataset, run_metric
from ocms.run_table import numeric_line
from tests.fleet.test_simulate_mean import AIR

from .runs import run_own_registry
from .test_run_numeric import LAYOUT

REGISTRY = AIR % (", mean_mechanism: hybrid", "ocms")
HISTOGRAM = {"quantiles": [{"q": 0.5, "estimate": 24.0, "ci_low": 20.0, "ci_high": 60.0}],
             "mean": {"estimate": 47.0, "ci_low": 40.0, "ci_high": 52.0, "mechanism": "hybrid", "reports": 50},
             "histogram_mean": {"estimate": 44.0, "ci_low": 30.0, "ci_high": 58.0}}


def test_the_hybrid_mean_stands_beside_the_devices_true_mean_and_the_histograms_beside_its_own():
    truth = np.zeros(11)
    truth[[2, 4]] = 50
    line = numeric_line("latency", LAYOUT, truth, {"n": 100, "histogram": HISTOGRAM}, true_mean=48.5)
    assert line == ("latency         numeric  counted 100  p50 24 [20, 60] (true 25), mean 47 [40, 52] "
                    "(Hybrid, true 48.5), histogram mean 44 [30, 58] (true 46.25)")
    only = dict(HISTOGRAM, quantiles=[], histogram_mean=None)  # a version asking only for the mean
    assert numeric_line("latency", LAYOUT, truth, {"n": 50, "histogram": only}, true_mean=48.5).endswith(
        "counted 50  mean 47 [40, 52] (Hybrid, true 48.5)")


def test_a_numeric_registry_metric_takes_a_dataset_of_numbers(tmp_path):
    """``ocms run --registry FILE --dataset nycflights13:air_time``: the minutes bucketized as the devices do and
    kept whole for the Hybrid mean (it was refused: the metric's integers are not the dataset's labels)."""
    (tmp_path / "air.yaml").write_text(REGISTRY, encoding="utf-8")
    args = Namespace(registry=str(tmp_path / "air.yaml"), metric=None, dataset="nycflights13:air_time", epsilon=None)
    dataset = fleet_dataset(args, parse_dataset(args.dataset))
    named = run_metric(args, dataset)
    assert dataset.numbered and dataset.dictionary_size == 21 and named.version.mean is not None
    args.dataset = "nycflights13:dest"  # the default flights do not fit: bucket indices, each at its midpoint
    assert "midpoint" in fleet_dataset(args, parse_dataset(args.dataset)).description


def test_the_main_table_says_which_reports_its_histogram_counts(tmp_path):
    (tmp_path / "air.yaml").write_text(REGISTRY, encoding="utf-8")
    args = Namespace(registry=str(tmp_path / "air.yaml"), metric=None, dataset="nycflights13:air_time", epsilon=None,
                     show=2)
    dataset = fleet_dataset(args, parse_dataset(args.dataset))
    version = run_metric(args, dataset).version
    settings = simulator.SimulationSettings(params=version.params, dataset=dataset, reports=100, mean=version.mean)
    live = simulator.SimulationResult(reports=100, mean_reports=48, counts=np.bincount([3] * 60 + [5] * 40,
                                                                                        minlength=21))
    assert table_reports(settings, live) == 52  # a flat histogram's /estimates count its part alone
    text = main_table(args, settings, live, {"n": 52, "estimates": []})
    assert "the histogram's part: 52 of the 100 reports sent; the other 48 are the Hybrid mean's" in text


@pytest.mark.integration
def test_ocms_run_shows_the_hybrid_mean_of_the_flights_numbers_beside_their_true_mean(tmp_path):
    out = run_own_registry(tmp_path, "air.yaml", REGISTRY, "--dataset", "nycflights13:air_time", "--rate", "4000",
                           "--duration", "3", "--every", "60", "--seed", "7")
    final = out[out.index("final, every report counted"):]
    sent = int(re.search(r"reports sent ([\d,]+)", final).group(1).replace(",", ""))
    line = re.search(r"^air\s+numeric\s+counted ([\d,]+)  .*mean ([-\d.,]+) \[([-\d.,]+), ([-\d.,]+)\] "
                     r"\(Hybrid, true ([-\d.,]+)\), histogram mean .*$", final, re.M)
    assert line and int(line.group(1).replace(",", "")) == sent, final  # /histogram's n: both parts
    estimate, low, high, true = (float(line.group(i).replace(",", "")) for i in range(2, 6))
    sd = (high - low) / (2 * 1.96)  # the stated 95% interval's
    assert abs(estimate - true) <= 4.5 * sd and 20 <= true <= 700, line.group(0)
    assert "the histogram's part:" in final
