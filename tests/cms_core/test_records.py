"""cms_core.records: the one per-value record shape of offline and HTTP answers (issue 18)."""

import json

import numpy as np

from cms_core import OCMSParams, OCMSSketch, TrackedValues
from cms_core.records import ESTIMATE_FIELDS, estimate_records


def test_records_hold_string_values_integer_match_counts_and_floats():
    params = OCMSParams.build(2.0, 2**64)
    tracked = TrackedValues.of(params, [2**64 - 1, 0])
    sketch = OCMSSketch(params, tracked, np.array([700, 300], np.int64), 1000)
    est = sketch.estimate()
    records = estimate_records(est, sketch.counts)
    assert [r["value"] for r in records] == ["18446744073709551615", "0"]
    assert [r["match_count"] for r in records] == [700, 300] and all(type(r["match_count"]) is int for r in records)
    assert list(records[0]) == ["value", "match_count", *ESTIMATE_FIELDS, "above_noise"]
    assert records[0]["frequency"] == est.frequency[0] and records[0]["count_ci_high"] == est.ci_high[0] * 1000
    assert estimate_records(est, sketch.counts, [1]) == records[1:]


def test_no_reports_and_unbounded_intervals_are_null_never_nan_or_infinity():
    params = OCMSParams.build(2.0, value_domain="string")
    tracked = TrackedValues.of(params, ["", " a"])
    empty = OCMSSketch(params, tracked)
    records = estimate_records(empty.estimate(), empty.counts)
    assert all(r[f] is None for r in records for f in ESTIMATE_FIELDS) and [r["value"] for r in records] == ["", " a"]
    few = OCMSSketch(params, tracked, np.array([3, 1], np.int64), 4)
    records = estimate_records(few.estimate(interval="chernoff"), few.counts)
    assert records[0]["ci_high"] is None and records[0]["frequency"] is not None
    json.loads(json.dumps(records, allow_nan=False))  # strict JSON
