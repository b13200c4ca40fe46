"""agents.answers.service.EstimateService on a CountsView filled from real simulated reports.

Expected answers are computed independently: kernel match counts of the
concatenated reports of exactly the buckets a window covers, then
OCMSSketch(params, tracked, counts, n).estimate(); floats are compared exactly.
"""

from datetime import datetime, timezone

import numpy as np
import pytest

from agents.answers.request import ApiError, parse_options, parse_time
from agents.answers.service import ESTIMATE_COST, MAX_TREND_POINTS, Window, top_indices
from agents.state import BucketKey, PartialCounts, bucket_start
from agents.view import CountsView
from cms_core import OCMSParams, OCMSSketch, ReportBatch, TrackedValues, kernel
from cms_core.privatize import simulate_reports
from cms_core.sketch import EstimateOptions
from cms_core.values import value_to_json
from tests.agents.routes import Routes

P1 = OCMSParams.build(2.0, 1000)
P2 = OCMSParams.build(1.0, 1000)
FP1, FP2 = P1.fingerprint.hex(), P2.fingerprint.hex()
PARAMS = {FP1: P1, FP2: P2}
TRACKED = {fp: TrackedValues.range(p, 0, 50) for fp, p in PARAMS.items()}
D = 50

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z, 20 s into its minute
CUR = 1_699_999_980  # the current (incomplete) base bucket
LATEST = 1_699_999_920  # the latest complete base bucket
BUCKETS = [CUR - 60 * j for j in range(12, -1, -1)]  # 13 base buckets, the last one incomplete
GAP = BUCKETS[5]  # no reports at all
P1_MISSING = {BUCKETS[2], BUCKETS[8]}  # partition 1 has nothing there
OLD_2D = bucket_start(NOW - 2 * 86_400, 600)  # rollup only (base level expired)
OLD_5D = bucket_start(NOW - 5 * 86_400, 600)
BASE_RETENTION, ROLLUP_RETENTION = 86_400, 864_000


#: The worker's metric flags: --epsilon 2 (the newest version) and --extra-epsilon 1, tracked 0..49.
FLAGS = dict(epsilon=2, dictionary_size=1000, extra_epsilon=[1], tracked_range="0:50", watch="3,7", top_k=5,
             rollup_seconds=600, rollup_retention_seconds=ROLLUP_RETENTION)


def routes(view: CountsView, **flags) -> Routes:
    """The name-less routes of a worker started with FLAGS and ``flags``, at NOW."""
    return Routes(view, lambda: NOW, **{**FLAGS, **flags})


def _make_chunks():
    """(fp, partition, base bucket start or None, rollup start, ReportBatch)."""
    rng = np.random.default_rng(2024)
    weights = 1.0 / np.arange(1, 201) ** 1.1
    weights /= weights.sum()
    chunks = []
    for fp, params in PARAMS.items():
        for partition in (0, 1):
            for i, start in enumerate(BUCKETS):
                if start == GAP or (partition == 1 and start in P1_MISSING):
                    continue
                n = int(rng.integers(80, 200))
                values = ((rng.choice(200, n, p=weights) + 3 * (i % 4)) % 200).astype(np.uint64)
                chunks.append((fp, partition, start, bucket_start(start, 600), simulate_reports(params, values, rng)))
            for start in (OLD_2D, OLD_5D):
                values = rng.choice(200, 300, p=weights).astype(np.uint64)
                chunks.append((fp, partition, None, start, simulate_reports(params, values, rng)))
    return chunks


CHUNKS = _make_chunks()


def _fill(view: CountsView) -> None:
    keys: dict = {}
    for fp, partition, base, rollup, batch in CHUNKS:
        targets = [BucketKey(fp, partition, 600, rollup), BucketKey.total(fp, partition)]
        if base is not None:
            targets.append(BucketKey(fp, partition, 60, base))
        for key in targets:
            keys.setdefault(key, []).append(batch)
    for offset, (key, batches) in enumerate(sorted(keys.items())):
        batch = ReportBatch.concat(batches)
        counts = kernel.match_counts(PARAMS[key.fingerprint], batch, TRACKED[key.fingerprint])
        view.apply_state(key, PartialCounts(len(batch), counts, 1000 + offset).to_bytes())


VIEW = CountsView()
_fill(VIEW)


def make_service(**flags) -> Routes:
    return routes(VIEW, **flags)


SERVICE = make_service()


def expected_counts(fp, pred) -> tuple[int, np.ndarray]:
    """Kernel counts of the concatenated reports of the chunks selected by pred(base, rollup)."""
    batches = [b for f, _, base, rollup, b in CHUNKS if f == fp and pred(base, rollup)]
    if not batches:
        return 0, np.zeros(D, np.int64)
    batch = ReportBatch.concat(batches)
    return len(batch), kernel.match_counts(PARAMS[fp], batch, TRACKED[fp])


def expected_records(fp, n, counts, **options) -> list[dict]:
    est = OCMSSketch(PARAMS[fp], TRACKED[fp], counts, n).estimate(**options)
    records = est.as_records()
    for i, record in enumerate(records):
        record["value"] = value_to_json(record["value"])  # every value travels as a JSON string
        record["match_count"] = int(counts[i])
    return records


#: A trend point of reports that were not shuffled: no central epsilon (agents.answers.privacy.central_privacy).
UNSHUFFLED_POINT = {"central_epsilon": None, "central_delta": None, "shuffle_batch_min": None, "shuffled_reports": 0}


def expected_point(fp, n, counts, index, lo, hi, **options) -> dict:
    """A trend point: the value's record, its span, the noise floor at the point's own n, no central epsilon."""
    floor = OCMSSketch(PARAMS[fp], TRACKED[fp], counts, n).estimate(**options).noise_floor
    return dict(expected_records(fp, n, counts, **options)[index], noise_floor=floor, withheld=False,
                **{"from": lo, "to": hi, "n": n}, **UNSHUFFLED_POINT)


def in_base(lo, hi):
    return lambda base, rollup: base is not None and lo <= base < hi


# ------------------------------------------------------------- fixtures
def test_fixture_sanity():
    assert bucket_start(NOW, 60) == CUR and CUR - 60 == LATEST
    assert VIEW.rejected == 0 and VIEW.keys() == 2 * ((12 + 4 + 1) + (10 + 4 + 1))
    assert SERVICE.version.levels == ((60, BASE_RETENTION), (600, ROLLUP_RETENTION))
    assert SERVICE.watch == (3, 7) and len(SERVICE.labels) == D
    assert VIEW.sum(FP1, 60, CUR, D)[0] > 0  # the incomplete bucket has reports
    assert VIEW.sum(FP1, 60, GAP, D)[0] == 0


# ------------------------------------------------------------- totals
@pytest.mark.parametrize("fp", [FP1, FP2])
def test_total_estimates_equal_the_sketch_exactly(fp):
    query = {} if fp == FP1 else {"params": fp}
    doc = SERVICE.estimates(query)
    n, counts = expected_counts(fp, lambda base, rollup: True)
    assert n == sum(len(c[4]) for c in CHUNKS if c[0] == fp) == {FP1: 3998, FP2: 4041}[fp]
    assert doc["params"] == fp and doc["window"] == {"kind": "total"} and doc["n"] == n
    assert (doc["confidence"], doc["interval"], doc["postprocess"]) == (0.95, "normal", "none")
    assert doc["estimates"] == expected_records(fp, n, counts)
    est = OCMSSketch(PARAMS[fp], TRACKED[fp], counts, n).estimate()
    for i, record in enumerate(doc["estimates"]):
        assert record["value"] == str(i) and record["match_count"] == int(counts[i])
        assert record["frequency"] == float(est.frequency[i]) and record["std"] == float(est.std[i])
        assert (record["ci_low"], record["ci_high"]) == (float(est.ci_low[i]), float(est.ci_high[i]))


def test_estimate_value_is_the_same_record():
    whole = SERVICE.estimates({})
    doc = SERVICE.estimate_value("7", {})
    assert doc["estimate"] == whole["estimates"][7] and doc["n"] == whole["n"]
    assert SERVICE.estimate_value("0", {"params": FP2})["estimate"] == SERVICE.estimates({"params": FP2})["estimates"][0]


# ------------------------------------------------------------- ranges
def test_range_is_the_sum_of_exactly_its_buckets():
    doc = SERVICE.estimates({"from": str(BUCKETS[2] + 10), "to": str(BUCKETS[6])})
    assert doc["window"] == {"kind": "range", "from": BUCKETS[2], "to": BUCKETS[6], "bucket_seconds": 60}
    n, counts = expected_counts(FP1, in_base(BUCKETS[2], BUCKETS[6]))  # buckets 2, 3, 4, 5(gap)
    assert doc["n"] == n and doc["estimates"] == expected_records(FP1, n, counts)
    # One second past a bucket edge takes that whole bucket.
    doc = SERVICE.estimates({"from": str(BUCKETS[2]), "to": str(BUCKETS[6] + 1), "window": "range"})
    n, counts = expected_counts(FP1, in_base(BUCKETS[2], BUCKETS[7]))
    assert doc["window"]["to"] == BUCKETS[7] and doc["n"] == n
    assert doc["estimates"] == expected_records(FP1, n, counts)


def test_single_bucket_range_of_the_second_params():
    doc = SERVICE.estimates({"params": FP2, "from": str(BUCKETS[8]), "to": str(BUCKETS[9])})
    n, counts = expected_counts(FP2, in_base(BUCKETS[8], BUCKETS[9]))
    per_partition = [len(c[4]) for c in CHUNKS if c[0] == FP2 and c[2] == BUCKETS[8]]
    assert len(per_partition) == 1 and doc["n"] == n == per_partition[0]  # partition 1 is missing there
    assert doc["estimates"] == expected_records(FP2, n, counts)


def test_range_older_than_base_retention_uses_the_rollup_level():
    lo = bucket_start(NOW - 3 * 86_400, 600)
    hi = 1_700_000_400  # NOW rounded up to 600
    doc = SERVICE.estimates({"from": "-3d"})
    assert doc["window"] == {"kind": "range", "from": lo, "to": hi, "bucket_seconds": 600}
    n, counts = expected_counts(FP1, lambda base, rollup: lo <= rollup < hi)
    n_no_old, _ = expected_counts(FP1, lambda base, rollup: base is not None)
    n_2d, _ = expected_counts(FP1, lambda base, rollup: rollup == OLD_2D)
    assert n == n_no_old + n_2d  # the 5-day-old reports are outside
    assert doc["n"] == n and doc["estimates"] == expected_records(FP1, n, counts)
    doc = SERVICE.estimates({"from": "-6d"})
    assert doc["n"] == expected_counts(FP1, lambda base, rollup: True)[0]


def test_base_retention_boundary_picks_the_level():
    edge = CUR - BASE_RETENTION
    assert SERVICE.estimates({"from": str(edge)})["window"]["bucket_seconds"] == 60
    assert SERVICE.estimates({"from": str(edge - 1)})["window"]["bucket_seconds"] == 600


def test_latest_bucket_is_the_latest_complete_bucket():
    doc = SERVICE.estimates({"window": "latest_bucket"})
    assert doc["window"] == {"kind": "latest_bucket", "from": 1_699_999_920, "to": 1_699_999_980, "bucket_seconds": 60}
    n, counts = expected_counts(FP1, lambda base, rollup: base == LATEST)
    n_cur, _ = expected_counts(FP1, lambda base, rollup: base == CUR)
    assert n > 0 and n_cur > 0 and n != n_cur
    assert doc["n"] == n and doc["estimates"] == expected_records(FP1, n, counts)
    # At an exact bucket edge, the bucket that just ended.
    assert SERVICE.latest_bucket(float(CUR)) == Window("latest_bucket", 60, LATEST, CUR)
    assert SERVICE.latest_bucket(CUR - 0.001) == Window("latest_bucket", 60, LATEST - 60, LATEST)


# -------------------------------------------------------------- trends
def _check_point(fp, point, lo, hi, index):
    n, counts = expected_counts(fp, in_base(lo, hi))
    assert (point["from"], point["to"], point["n"]) == (lo, hi, n)
    if n == 0:
        assert point == {"value": str(index), "match_count": 0, "from": lo, "to": hi, "n": 0, "withheld": False,
                         **UNSHUFFLED_POINT}
    else:
        assert point == expected_point(fp, n, counts, index, lo, hi)


def test_trend_points_equal_their_own_buckets():
    doc = SERVICE.trend({"value": "3", "from": str(BUCKETS[0]), "to": str(CUR + 60)})
    assert doc["value"] == "3" and doc["step"] == 60
    assert doc["window"] == {"kind": "range", "from": BUCKETS[0], "to": CUR + 60, "bucket_seconds": 60}
    assert [p["from"] for p in doc["points"]] == BUCKETS
    for point, lo in zip(doc["points"], BUCKETS):
        _check_point(FP1, point, lo, lo + 60, 3)
    assert doc["n"] == expected_counts(FP1, lambda base, rollup: base is not None)[0]


def test_trend_step_aggregates_buckets():
    doc = SERVICE.trend({"value": "7", "params": FP2, "from": str(BUCKETS[0]), "to": str(CUR + 60), "step": "3m"})
    assert doc["step"] == 180 and doc["params"] == FP2
    bounds = [(BUCKETS[0] + 180 * i, min(BUCKETS[0] + 180 * (i + 1), CUR + 60)) for i in range(5)]
    assert [(p["from"], p["to"]) for p in doc["points"]] == bounds
    assert bounds[-1] == (CUR, CUR + 60)  # a partial last point
    for point, (lo, hi) in zip(doc["points"], bounds):
        _check_point(FP2, point, lo, hi, 7)


def test_trend_defaults_to_the_last_hour():
    doc = SERVICE.trend({"value": "3"})
    lo, hi = 1_699_996_380, 1_700_000_040
    assert doc["window"] == {"kind": "range", "from": lo, "to": hi, "bucket_seconds": 60}
    assert len(doc["points"]) == 61 and doc["step"] == 60
    assert doc["n"] == expected_counts(FP1, lambda base, rollup: base is not None)[0]


def test_trend_over_the_rollup_level():
    doc = SERVICE.trend({"value": "3", "from": "-3d", "step": "1d"})
    lo = bucket_start(NOW - 3 * 86_400, 600)
    assert doc["window"]["bucket_seconds"] == 600 and doc["step"] == 86_400
    assert [p["from"] for p in doc["points"]] == [lo + 86_400 * i for i in range(4)]
    for point in doc["points"]:
        n, counts = expected_counts(FP1, lambda base, rollup: point["from"] <= rollup < point["to"])
        assert point["n"] == n
        if n:
            assert point["match_count"] == int(counts[3])


# ---------------------------------------------------------------- top-K
def test_topk_order_and_records():
    n, counts = expected_counts(FP1, lambda base, rollup: True)
    records = expected_records(FP1, n, counts)
    freq = np.array([r["frequency"] for r in records])
    order = [int(i) for i in np.lexsort((np.arange(D), -freq))]
    doc = SERVICE.topk({"k": "5"})
    assert doc["k"] == 5 and doc["n"] == n
    assert [r["value"] for r in doc["top"]] == [str(i) for i in order[:5]]
    assert doc["top"] == [records[i] for i in order[:5]]
    assert all(a["frequency"] >= b["frequency"] for a, b in zip(doc["top"], doc["top"][1:]))
    assert SERVICE.topk({})["k"] == 10
    assert [r["value"] for r in SERVICE.topk({"k": "50"})["top"]] == [str(i) for i in order]


def test_topk_orders_by_the_postprocessed_estimate():
    n, counts = expected_counts(FP2, lambda base, rollup: True)
    est = OCMSSketch(P2, TRACKED[FP2], counts, n).estimate(postprocess_method="norm_sub")
    order = [int(i) for i in np.lexsort((np.arange(D), -est.processed))]
    doc = SERVICE.topk({"params": FP2, "k": "4", "postprocess": "norm_sub"})
    assert [r["value"] for r in doc["top"]] == [str(i) for i in order[:4]]
    assert [r["processed"] for r in doc["top"]] == [float(est.processed[i]) for i in order[:4]]


def test_top_indices_breaks_ties_by_index():
    """Documented: 'largest first; ties by index'. Ties at the k-th place are common
    after clip / norm_sub (many estimates become exactly 0)."""

    class Est:
        processed = np.zeros(10)

    Est.processed[5] = 1.0
    assert top_indices(Est, 10) == [5, 0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert top_indices(Est, 3) == [5, 0, 1]


def test_topk_with_clip_ties_by_index():
    n, counts = expected_counts(FP1, lambda base, rollup: True)
    est = OCMSSketch(P1, TRACKED[FP1], counts, n).estimate(postprocess_method="clip")
    positive = int(np.count_nonzero(est.processed > 0))
    zeros = [i for i in range(D) if est.processed[i] == 0.0]
    assert positive + len(zeros) == D and len(zeros) >= 5
    k = positive + 2
    expected = [int(i) for i in np.lexsort((np.arange(D), -est.processed))][:k]
    assert expected[-2:] == zeros[:2]
    doc = SERVICE.topk({"k": str(k), "postprocess": "clip"})
    assert [r["value"] for r in doc["top"]] == [str(i) for i in expected]


# -------------------------------------------------------------- options
def test_options_flow_through_to_the_sketch():
    query = {"confidence": "0.9", "interval": "chernoff", "postprocess": "norm_sub"}
    doc = SERVICE.estimates(query)
    n, counts = expected_counts(FP1, lambda base, rollup: True)
    assert (doc["confidence"], doc["interval"], doc["postprocess"]) == (0.9, "chernoff", "norm_sub")
    expected = expected_records(FP1, n, counts, confidence=0.9, interval="chernoff", postprocess_method="norm_sub")
    assert doc["estimates"] == expected
    default = SERVICE.estimates({})["estimates"]
    assert doc["estimates"][3]["ci_high"] != default[3]["ci_high"]
    assert doc["estimates"][3]["processed"] != default[3]["processed"]
    assert doc["estimates"][3]["frequency"] == default[3]["frequency"]
    doc = SERVICE.estimate_value("3", {"confidence": "0.5", "postprocess": "clip", "window": "latest_bucket"})
    n, counts = expected_counts(FP1, lambda base, rollup: base == LATEST)
    assert doc["estimate"] == expected_records(FP1, n, counts, confidence=0.5, postprocess_method="clip")[3]
    doc = SERVICE.trend({"value": "3", "from": str(LATEST), "to": str(CUR), "interval": "chernoff"})
    assert doc["interval"] == "chernoff"
    assert doc["points"][0] == expected_point(FP1, n, counts, 3, LATEST, CUR, interval="chernoff")
    assert parse_options({}) == EstimateOptions(0.95, "normal", "none")


def test_empty_counts_give_value_and_zero_only():
    service = routes(CountsView())
    doc = service.estimates({})
    assert doc["n"] == 0 and doc["estimates"][4] == {"value": "4", "match_count": 0}
    assert service.topk({"k": "3"})["top"] == []
    assert service.params_doc()["parameter_sets"][0]["reports"] == 0


def test_params_doc():
    doc = SERVICE.params_doc()
    sets = doc["parameter_sets"]
    assert [s["fingerprint"] for s in sets] == [FP1, FP2] and [s["primary"] for s in sets] == [True, False]
    assert [s["reports"] for s in sets] == [expected_counts(fp, lambda b, r: True)[0] for fp in (FP1, FP2)]
    assert all(s["tracked_values"] == D for s in sets) and sets[1]["epsilon"] == 1.0
    assert doc["levels"] == [{"bucket_seconds": 60, "retention_seconds": 86_400},
                             {"bucket_seconds": 600, "retention_seconds": 864_000}]
    assert (doc["watch"], doc["top_k"], doc["bucket_seconds"]) == (["3", "7"], 5, 60)


# ---------------------------------------------------------------- times
@pytest.mark.parametrize(
    "raw, value",
    [
        ("now", NOW),
        (" now ", NOW),
        ("1699999200", 1_699_999_200.0),
        ("1699999200.5", 1_699_999_200.5),
        ("2023-11-14T22:00:00Z", 1_699_999_200.0),
        ("2023-11-14T22:00:00", 1_699_999_200.0),  # naive = UTC
        ("2023-11-14T23:00:00+01:00", 1_699_999_200.0),
        ("-15m", NOW - 900),
        ("now-2h", NOW - 7200),
        ("-1.5h", NOW - 5400),
        ("-90s", NOW - 90),
        ("-1d", NOW - 86_400),
    ],
)
def test_parse_time_accepts(raw, value):
    assert parse_time("from", raw, NOW) == value


@pytest.mark.parametrize("raw", ["yesterday", "-5", "-1", "nan", "inf", "15m", "-15x", "", "now+5m"])
def test_parse_time_refuses(raw):
    with pytest.raises(ApiError) as info:
        parse_time("from", raw, NOW)
    assert info.value.parameter == "from" and info.value.status == 400


@pytest.mark.parametrize(
    "query, lo",
    [
        ({"from": "2023-11-14T22:00:00Z", "to": "now"}, 1_699_999_200),
        ({"from": "1699999200"}, 1_699_999_200),
        ({"from": "-15m"}, 1_699_999_080),
        ({"from": "now-2h", "to": "now"}, 1_699_992_780),
    ],
)
def test_time_formats_select_the_window(query, lo):
    doc = SERVICE.estimates(query)
    assert doc["window"] == {"kind": "range", "from": lo, "to": 1_700_000_040, "bucket_seconds": 60}
    assert doc["n"] == expected_counts(FP1, in_base(lo, 1_700_000_040))[0]


# --------------------------------------------------------------- errors
def bad_values(method: str, parameter: str, *values: str, status: int = 400) -> list:
    """One row per value: ``method`` with only ``parameter=value`` fails naming ``parameter``."""
    return [(method, {parameter: value}, parameter, status) for value in values]


TREND = {"value": "3"}  # a valid trend query the rows below spoil one parameter of

ERRORS = [
    *bad_values("estimates", "params", "deadbeefdeadbeef", P1.fingerprint.hex().upper()),
    *bad_values("estimates", "confidence", "high", "1", "0", "nan"),
    *bad_values("estimates", "interval", "wilson"),
    *bad_values("estimates", "postprocess", "magic"),
    *bad_values("estimates", "window", "week"),
    ("estimates", {"window": "total", "from": "-5m"}, "window", 400),
    ("estimates", {"window": "latest_bucket", "to": "now"}, "window", 400),
    ("estimates", {"window": "range"}, "from", 400),
    ("estimates", {"to": "now"}, "from", 400),
    *bad_values("estimates", "from", "yesterday", "-1"),
    ("estimates", {"from": "-5m", "to": "soon"}, "to", 400),
    ("estimates", {"from": "-5m", "to": "-10m"}, "to", 400),
    ("estimates", {"from": "-5m", "to": "-5m"}, "to", 400),
    *bad_values("estimates", "from", "-11d"),  # older than every level's retention
    *bad_values("topk", "k", "0", "51", "ten", "2.5"),
    ("topk", {"k": "3", "postprocess": "x"}, "postprocess", 400),
    ("trend", {}, "value", 400),
    *bad_values("trend", "value", "x"),
    *bad_values("trend", "value", "99", status=404),
    *[("trend", {**TREND, "step": step}, "step", 400) for step in ("0", "5x", "-60", "90", "45s")],  # 90: not a multiple of the bucket width
    ("trend", {**TREND, "from": "-11d"}, "from", 400),
    ("trend", {**TREND, "from": "-11d", "step": "90"}, "step", 400),
    ("trend", {**TREND, "from": "-1h", "to": str(NOW + 700_000)}, "to", 400),  # far beyond the clock skew
    ("trend", {**TREND, "to": "later"}, "to", 400),
    ("trend", {**TREND, "from": "then"}, "from", 400),
    ("trend", {**TREND, "params": "00"}, "params", 400),
    ("trend", {**TREND, "confidence": "2"}, "confidence", 400),
]


@pytest.mark.parametrize("method, query, parameter, status", ERRORS, ids=[f"{m}-{p}-{i}" for i, (m, q, p, s) in enumerate(ERRORS)])
def test_bad_parameters_name_themselves(method, query, parameter, status):
    with pytest.raises(ApiError) as info:
        getattr(SERVICE, method)(query)
    assert (info.value.parameter, info.value.status) == (parameter, status)
    assert info.value.as_json() == {"error": info.value.message, "parameter": parameter, "status": status}


@pytest.mark.parametrize("value, status", [("abc", 400), ("1.5", 400), ("60", 404), ("5000", 404), ("-1", 400), (" 7", 400), ("", 400),
                                          ("9" * 5000, 404)])
def test_bad_value_in_the_path(value, status):
    with pytest.raises(ApiError) as info:
        SERVICE.estimate_value(value, {})
    assert (info.value.parameter, info.value.status) == ("value", status)


def test_step_that_fits_no_reachable_level_names_step():
    """from -2d is only within the rollup level's retention; a 120 s step is a multiple of
    the base width but not of the rollup width: the bad parameter is the step."""
    with pytest.raises(ApiError) as info:
        SERVICE.trend({"value": "3", "from": "-2d", "step": "120"})
    assert info.value.parameter == "step"


def test_trend_points_limit_boundary():
    service = routes(CountsView(), bucket_seconds=1000, retention_seconds=20_000_000, rollup_seconds=None,
                     rollup_retention_seconds=None)
    # NOW is a multiple of 1000: 10,000 points exactly is allowed, 10,001 is not.
    doc = service.trend({"value": "3", "from": str(NOW - 1000 * MAX_TREND_POINTS)})
    assert len(doc["points"]) == MAX_TREND_POINTS
    with pytest.raises(ApiError) as info:
        service.trend({"value": "3", "from": str(NOW - 1000 * MAX_TREND_POINTS - 1)})
    assert info.value.parameter == "step"


def test_range_never_reads_a_bucket_the_worker_treats_as_expired():
    """Retention (agents.retention) deletes a table key once ``StateKey.expires_at`` has passed, and
    relies on 'queries ignore expired buckets anyway, so a late delete never changes an answer'.
    With a retention that is not a multiple of the bucket width the query's retention
    check lets such a bucket in."""
    from agents.state import StateLayout

    service = routes(CountsView(), retention_seconds=90, rollup_seconds=None, rollup_retention_seconds=None,
                     extra_epsilon=None)
    layout = StateLayout({FP1: service.version.levels}, {FP1: 1})
    bad = []
    for now in (NOW, NOW + 39.0):  # 20 s and 59 s into the current minute
        for age in range(0, 200, 5):
            try:
                window = service.range_window(now - age, now, now)
            except ApiError:
                continue
            for bucket in range(window.start, window.stop, window.width):
                if layout.key_of(BucketKey(FP1, 0, window.width, bucket)).expires_at <= now:
                    bad.append((now, age, bucket))
    assert bad == []


def test_naive_iso_is_utc_whatever_the_local_zone(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert parse_time("from", "2023-11-14T22:00:00", NOW) == 1_699_999_200.0
    finally:
        monkeypatch.undo()
        time.tzset()


def test_iso_time_helper_matches_epoch():
    assert datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc).timestamp() == NOW


# ------------------------------------------------- cost: what an answer returns
class Counting:
    """Counts calls of a function and the tracked-set sizes of the sketches built."""

    def __init__(self, monkeypatch):
        import agents.answers.service as query

        self.sums = 0
        self.sketch_sizes: list[int] = []
        real_sum, real_sketch = query.sum_states, query.OCMSSketch

        def sum_states(snapshot, d):
            self.sums += 1
            return real_sum(snapshot, d)

        def sketch(params, tracked, counts=None, n=0):
            self.sketch_sizes.append(len(tracked))
            return real_sketch(params, tracked, counts, n)

        monkeypatch.setattr(query, "sum_states", sum_states)
        monkeypatch.setattr(query, "OCMSSketch", sketch)


@pytest.mark.parametrize("postprocess", ["none", "clip"])
def test_trend_of_one_value_never_touches_all_d_counts(monkeypatch, postprocess):
    """Issue 17: a trend point built records for all D values to return one (O(P x D))."""
    service = make_service()
    counting = Counting(monkeypatch)
    doc = service.trend({"value": "3", "from": str(BUCKETS[0]), "to": str(CUR + 60), "postprocess": postprocess})
    assert counting.sums == 0  # no point sums the D-vectors
    assert counting.sketch_sizes == [1] * sum(1 for p in doc["points"] if p["n"])  # one-value sketches only
    reference = SERVICE.trend({"value": "3", "from": str(BUCKETS[0]), "to": str(CUR + 60), "postprocess": postprocess})
    assert doc == reference


def test_trend_work_is_linear_in_points_and_independent_of_d():
    small = routes(CountsView())
    big = routes(CountsView(), tracked_range="0:1000", watch=None)
    query = {"value": "3", "from": "-12h", "step": "60"}
    assert big.prepare("trend", query).work == small.prepare("trend", query).work  # D = 1,000 vs 50
    one = small.prepare("trend", {"value": "3", "from": "-1h", "step": "60"}).work
    twelve = small.prepare("trend", {"value": "3", "from": "-12h", "step": "60"}).work
    assert 11 < twelve / one < 13
    # post-processing over all values costs D per point (720 points over 12 h)
    norm = dict(query, postprocess="norm_sub")
    assert big.prepare("trend", norm).work - small.prepare("trend", norm).work >= 720 * (1000 - 50) * ESTIMATE_COST


def test_estimate_of_one_value_reads_one_count(monkeypatch):
    counting = Counting(monkeypatch)
    doc = make_service().estimate_value("7", {"from": str(BUCKETS[0])})
    assert counting.sums == 0 and counting.sketch_sizes == [1]
    assert doc == SERVICE.estimate_value("7", {"from": str(BUCKETS[0])})
    # norm_sub needs every value's estimate: then (and only then) all D counts are summed.
    make_service().estimate_value("7", {"postprocess": "norm_sub"})
    assert counting.sums == 1 and counting.sketch_sizes[-1] == D


def test_answers_over_the_work_limit_are_refused_before_any_work(monkeypatch):
    import agents.answers.service as query

    monkeypatch.setattr(query, "MAX_WORK", 10_000)
    counting = Counting(monkeypatch)
    with pytest.raises(ApiError) as info:
        SERVICE.trend({"value": "3", "from": "-3d", "step": "600", "postprocess": "norm_sub"})
    assert info.value.parameter == "step" and "of work" in info.value.message
    with pytest.raises(ApiError) as info:
        SERVICE.estimates({"from": "-3d"})
    assert info.value.parameter == "from"
    assert counting.sums == 0 and counting.sketch_sizes == []


@pytest.mark.integration
def test_heavy_answers_finish_identically_in_another_process():
    """The web layer computes heavy answers in a spawned process from a pickled Job."""
    import multiprocessing
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    from agents.answers.encode import to_json
    from agents.answers.service import finish_json, start_answer_process

    answers = [SERVICE.prepare("estimates", {"from": str(BUCKETS[0])}),
               SERVICE.prepare("topk", {"k": "7", "postprocess": "simplex"}),
               SERVICE.prepare("estimate_value", {"postprocess": "norm_sub"}, "3"),
               SERVICE.prepare("trend", {"value": "3", "from": str(BUCKETS[0])})]
    jobs = [a.gather() for a in answers]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=start_answer_process,
                             initargs=(SERVICE.estimator.sets, 0)) as pool:
        remote = [body for body, dropped in pool.map(finish_json, jobs) if dropped == {}]
    assert remote == [to_json(SERVICE.estimator.finish(pickle.loads(pickle.dumps(job)))) for job in jobs]
    assert json_loads(remote[0]) == SERVICE.estimates({"from": str(BUCKETS[0])})


def json_loads(body: bytes):
    import json

    return json.loads(body)


def test_unbounded_interval_ends_are_json_null():
    """Chernoff intervals beyond the theorem's range are infinite; JSON has no Infinity."""
    from agents.answers.encode import to_json

    view = CountsView()
    view.apply_state(BucketKey.total(FP1, 0), PartialCounts(3, np.ones(D, np.int64), 1).to_bytes())
    service = routes(view)
    doc = service.estimates({"interval": "chernoff"})
    record = doc["estimates"][0]
    assert record["ci_low"] is None and record["ci_high"] is None and record["count_ci_high"] is None
    assert isinstance(record["frequency"], float)
    assert b"Infinity" not in to_json(doc) and b"NaN" not in to_json(doc)


@pytest.mark.parametrize("seed", range(5))
def test_top_indices_equals_a_full_sort(seed):
    rng = np.random.default_rng(seed)

    class Est:
        processed = np.round(rng.standard_normal(500), 1)  # many ties

    order = [int(i) for i in np.lexsort((np.arange(500), -Est.processed))]
    for k in (1, 5, 37, 499, 500, 900):
        assert top_indices(Est, k) == order[:k]


# ------------------------------------------------------- request checking
def test_unknown_and_repeated_parameters_are_named():
    from agents.answers.request import check_query

    with pytest.raises(ApiError) as info:
        check_query("estimates", [("postprocesss", "clip")])
    assert info.value.parameter == "postprocesss" and "did you mean 'postprocess'" in info.value.message
    with pytest.raises(ApiError) as info:
        check_query("topk", [("k", "3"), ("k", "4")])
    assert info.value.parameter == "k" and "more than once" in info.value.message
    with pytest.raises(ApiError) as info:
        check_query("healthz", [("verbose", "1")])
    assert "no parameters" in info.value.message
    with pytest.raises(ApiError) as info:
        SERVICE.estimates({"form": "-5m"})
    assert info.value.parameter == "form" and "'from'" in info.value.message
    with pytest.raises(ApiError) as info:
        check_query("estimates", [("x" * 5000, "1")])
    assert len(info.value.parameter) < 60 and "5,000 characters" in info.value.parameter


@pytest.mark.parametrize("query, parameter", [
    ({"from": "1e300"}, "from"),
    ({"from": "1e20", "to": "1e21"}, "from"),
    ({"from": "-5m", "to": "1e21"}, "to"),
    ({"from": "9" * 400}, "from"),
    ({"from": "-999999999999999999999d"}, "from"),
    ({"from": "0001-01-01T00:00:00+14:00"}, "from"),
    ({"from": "9999-12-31T00:00:00Z"}, "from"),
    ({"from": str(NOW + 301)}, "from"),
    ({"from": "-5m", "to": str(NOW + 301)}, "to"),
    ({"from": str(NOW + 200)}, "from"),  # within the skew, but after to (now)
])
def test_absurd_times_blame_the_parameter_with_a_short_message(query, parameter):
    for method in ("estimates", "topk"):
        with pytest.raises(ApiError) as info:
            getattr(SERVICE, method)(query)
        assert info.value.parameter == parameter, info.value
        assert len(info.value.message) < 160, info.value.message


def test_times_within_the_accepted_clock_skew_are_answered():
    doc = SERVICE.estimates({"from": "-5m", "to": str(NOW + 299)})
    assert doc["window"]["to"] == bucket_start(NOW + 299, 60) + 60


@pytest.mark.parametrize("step", ["999999999999999999999h", "9" * 400, "864001", "11d"])
def test_absurd_steps_blame_step(step):
    with pytest.raises(ApiError) as info:
        SERVICE.trend({"value": "3", "step": step})
    assert info.value.parameter == "step" and len(info.value.message) < 160


def test_a_record_that_cannot_be_written_is_left_out_of_the_answer_and_counted():
    """Issue 24: one bad record (a lone surrogate, a NaN) never fails a whole JSON answer."""
    import json

    from agents.answers.encode import ANSWER_RECORDS_DROPPED, to_json

    def dropped(field, reason):
        return ANSWER_RECORDS_DROPPED.labels(field, reason)._value.get()

    before = {key: dropped(*key) for key in (("estimates", "text_not_unicode"), ("estimates", "number_not_finite"),
                                               ("survivors", "text_not_unicode"))}
    doc = {"metric": "words", "estimates": [{"value": "café", "frequency": 0.5},
                                            {"value": "caf\udcc3", "frequency": 0.1},
                                            {"value": "東京", "frequency": float("nan")},
                                            {"value": "🎉", "frequency": 0.2}],
           "levels": [{"level": 4, "survivors": [{"prefix": "caf\ufffd", "bytes_hex": "636166c3"},
                                                 {"prefix": "na\udcc3"}]}]}
    body = to_json(doc)
    answer = json.loads(body.decode("utf-8", errors="strict"))
    assert [r["value"] for r in answer["estimates"]] == ["café", "🎉"]
    assert answer["levels"] == [{"level": 4, "survivors": [{"prefix": "caf\ufffd", "bytes_hex": "636166c3"}]}]
    assert answer["dropped_records"] == {"estimates": {"number_not_finite": 1, "text_not_unicode": 1},
                                         "survivors": {"text_not_unicode": 1}}
    assert {key: dropped(*key) - n for key, n in before.items()} == dict.fromkeys(before, 1)
    assert to_json({"value": "café"}) == '{"value":"café"}'.encode("utf-8")  # UTF-8 itself, not \\u escapes
