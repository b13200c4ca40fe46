"""`ocms run` with a numeric metric (issue 40): under the table, the metric's quantiles and mean with their intervals
beside the fleet's truth (ocms/run_table.numeric_line, the truth from cms_core.numeric.true_summary)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cms_core.numeric import BucketLayout, true_summary
from ocms.run_table import numeric_line

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


@pytest.mark.integration
def test_ocms_run_prints_the_quantiles_of_a_numeric_metric(tmp_path):
    out = run_own_registry(
        tmp_path, "latency.yaml",
        "metrics:\n  - name: latency_ms\n    description: Time to first byte\n    owner: you@example.com\n"
        "    numeric: {lower: 0, upper: 10000, buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]}\n"
        "    epsilon: 2\n",
        "--rate", "4000", "--duration", "3", "--every", "60", "--seed", "7")
    final = out[out.index("final, every report counted"):]
    sent = re.search(r"reports sent ([\d,]+)", final).group(1)
    line = re.search(r"^latency_ms\s+numeric\s+counted ([\d,]+)  (.*)$", final, re.M)
    assert line and line.group(1) == sent, final
    shown = re.findall(r"(p\d+|mean) [-\d.,]+ \[[-\d.,]+, [-\d.,]+\] \(true [-\d.,]+\)", line.group(2))
    assert shown == ["p50", "p90", "p99", "mean"], line.group(2)
