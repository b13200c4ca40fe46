"""agents.metrics: the scrape-time estimates collector and the pipeline instruments.

The exposition text is produced by prometheus_client.generate_latest and parsed
back with its own parser; every exported value must equal the EstimateService
answer for the same window (floats compared exactly: the text format writes
repr() of each float).
"""

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agents.answers.service import Window
from agents.metrics import ESTIMATE_FIELDS, EstimatesCollector, PipelineMetrics
from agents.processor import REJECT_REASONS
from agents.state import BucketKey, PartialCounts
from agents.view import CountsView
from cms_core import OCMSParams, ReportBatch, TrackedValues, kernel
from cms_core.privatize import simulate_reports
from tests.agents.routes import Routes

P1 = OCMSParams.build(2.0, 1000)
P2 = OCMSParams.build(1.0, 1000)
FP1, FP2 = P1.fingerprint.hex(), P2.fingerprint.hex()
PARAMS = {FP1: P1, FP2: P2}
D = 50
NOW = 1_700_000_000.0
CUR, LATEST = 1_699_999_980, 1_699_999_920
WATCH = ("3", "7", "41")


#: The worker's metric flags: --epsilon 2 and --extra-epsilon 1, tracked 0..49.
FLAGS = dict(epsilon=2, dictionary_size=1000, extra_epsilon=[1], tracked_range="0:50", watch=",".join(WATCH), top_k=5)


def routes(view: CountsView = None, **flags) -> Routes:
    return Routes(VIEW if view is None else view, lambda: NOW, **{**FLAGS, **flags})


def _fill() -> CountsView:
    """Reports in the buckets LATEST - 60, LATEST and CUR, two partitions, both parameter sets."""
    rng = np.random.default_rng(77)
    weights = 1.0 / np.arange(1, 101) ** 1.2
    weights /= weights.sum()
    view = CountsView()
    for fp, params in PARAMS.items():
        tracked = TrackedValues.range(params, 0, D)
        for partition in (0, 1):
            batches = []
            for start in (LATEST - 60, LATEST, CUR):
                values = rng.choice(100, int(rng.integers(300, 600)), p=weights).astype(np.uint64)
                batch = simulate_reports(params, values, rng)
                batches.append(batch)
                counts = kernel.match_counts(params, batch, tracked)
                view.apply_state(BucketKey(fp, partition, 60, start),
                           PartialCounts(len(batch), counts, start).to_bytes())
            batch = ReportBatch.concat(batches)
            view.apply_state(BucketKey.total(fp, partition),
                       PartialCounts(len(batch), kernel.match_counts(params, batch, tracked), CUR).to_bytes())
    return view


VIEW = _fill()


#: The flags' metric is "default"; its versions are each extra set (1), then the --epsilon set (2).
VERSION = {FP1: "2", FP2: "1"}


def scrape(service: Routes, clock=None) -> dict:
    registry = CollectorRegistry()
    registry.register(EstimatesCollector(service.catalog, clock))
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(family, **labels) -> list:
    if "params" in labels:  # a parameter set is exported as its metric version, never its fingerprint
        labels.update(metric="default", version=VERSION[labels.pop("params")])
    return [s for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())]


@pytest.fixture(scope="module")
def service():
    return routes()


@pytest.fixture(scope="module")
def families(service):
    return scrape(service)


def expected_chosen(service, fp, top_k) -> list[str]:
    """Watch list, then the top-K of the total window (largest first, ties by index) not already watched."""
    records = service.estimates({"params": fp})["estimates"]
    freq = np.array([r["frequency"] for r in records])
    order = [int(i) for i in np.lexsort((np.arange(D), -freq))]
    chosen = list(WATCH)
    for i in order[:top_k]:
        if str(i) not in chosen:
            chosen.append(str(i))
    return chosen


def test_family_names_and_types(families):
    names = {f"ocms_estimate_{suffix}" for suffix, _, _ in ESTIMATE_FIELDS}
    names |= {"ocms_estimate_values_omitted", "ocms_params_reports", "ocms_params_info", "ocms_estimate_withheld",
              "ocms_estimate_values_capped", "ocms_estimate_above_noise", "ocms_estimate_noise_floor_ratio",
              "ocms_estimate_previous_ci_upper_ratio", "ocms_central_epsilon", "ocms_central_delta",
              "ocms_latest_bucket_start_timestamp_seconds"}
    # numeric metrics' families (issue 40, agents/numeric_export.py), described even with no numeric metric
    names |= {"ocms_numeric_cdf_ratio", "ocms_numeric_mean", "ocms_numeric_mean_ci_lower", "ocms_numeric_mean_ci_upper",
              "ocms_numeric_quantile", "ocms_numeric_quantile_ci_lower", "ocms_numeric_quantile_ci_upper"}
    assert set(families) == names
    assert all(f.type == "gauge" for f in families.values())


@pytest.mark.parametrize("fp", [FP1, FP2])
def test_labels_are_watch_plus_topk_and_bounded(service, families, fp):
    chosen = expected_chosen(service, fp, 5)
    assert len(chosen) <= len(WATCH) + 5 and len(set(chosen)) == len(chosen)
    for suffix, _, _ in ESTIMATE_FIELDS:
        family = families[f"ocms_estimate_{suffix}"]
        for window in ("total", "latest_bucket"):
            got = [s.labels["value"] for s in samples(family, params=fp, window=window)]
            assert sorted(got) == sorted(chosen), (suffix, window)
        assert {s.labels["window"] for s in family.samples} == {"total", "latest_bucket"}
        assert {s.labels["version"] for s in family.samples} == {"1", "2"}
        assert {s.labels["metric"] for s in family.samples} == {"default"}
        assert all("params" not in s.labels and "fingerprint" not in s.labels for s in family.samples)


@pytest.mark.parametrize("fp", [FP1, FP2])
def test_omitted_is_d_minus_exported(families, fp):
    exported = {s.labels["value"] for s in samples(families["ocms_estimate_ratio"], params=fp, window="total")}
    (sample,) = samples(families["ocms_estimate_values_omitted"], params=fp)
    assert sample.value == D - len(exported)
    assert len(exported) < D


@pytest.mark.parametrize("fp", [FP1, FP2])
@pytest.mark.parametrize("window", ["total", "latest_bucket"])
def test_values_equal_the_service_answers(service, families, fp, window):
    doc = service.estimates({"params": fp, "window": window})
    if window == "latest_bucket":
        assert doc["window"]["from"] == LATEST
    records = doc["estimates"]
    checked = 0
    for suffix, field, _ in ESTIMATE_FIELDS:
        for sample in samples(families[f"ocms_estimate_{suffix}"], params=fp, window=window):
            assert sample.name == f"ocms_estimate_{suffix}"
            assert sample.value == records[int(sample.labels["value"])][field], (suffix, sample.labels)
            checked += 1
    assert checked == len(ESTIMATE_FIELDS) * len(expected_chosen(service, fp, 5))
    (reports,) = samples(families["ocms_params_reports"], params=fp, window=window)
    assert reports.value == doc["n"] > 0


@pytest.mark.parametrize("fp", [FP1, FP2])
def test_the_export_asks_what_the_api_answers(service, families, fp):
    """One read path (agents.answers.service.EstimateService.window_estimate): the values exported beyond the
    watch list are /topk's top-K in its order, and each window's noise floor, withheld state and central epsilon
    fields are what /estimates answers for that window."""
    top = [r["value"] for r in service.topk({"params": fp, "k": "5"})["top"]]
    exported = [s.labels["value"] for s in samples(families["ocms_estimate_ratio"], params=fp, window="total")]
    assert [v for v in exported if v not in WATCH] == [v for v in top if v not in WATCH]
    for window in ("total", "latest_bucket"):
        doc = service.estimates({"params": fp, "window": window})
        (floor,) = samples(families["ocms_estimate_noise_floor_ratio"], params=fp, window=window)
        (held,) = samples(families["ocms_estimate_withheld"], params=fp, window=window)
        assert (floor.value, held.value) == (doc["noise_floor"], float(doc["withheld"]))
        assert doc["central_epsilon"] is None  # these reports were not shuffled: no central epsilon anywhere
        assert samples(families["ocms_central_epsilon"], params=fp, window=window) == []
    answers = service.catalog.by_fingerprint[fp]
    read = answers.window_estimate(answers.latest_bucket(NOW), top_k=5)
    assert read.central == {k: v for k, v in service.estimates({"params": fp, "window": "latest_bucket"}).items()
                            if k in read.central}
    assert [answers.name_of(str(i)) for i in read.top] == [r["value"] for r in service.topk(
        {"params": fp, "k": "5", "window": "latest_bucket"})["top"]]


def test_a_withheld_window_exports_no_top_k_and_no_estimate():
    """min_reports over every window's n: withheld everywhere, as the API says; nothing of the top-K exported."""
    import dataclasses

    withheld = routes()
    for answers in withheld.catalog.by_fingerprint.values():  # the API and the export read the same rule
        answers.naming = dataclasses.replace(answers.naming, min_reports=10**9)
    families = scrape(withheld)
    for fp in (FP1, FP2):
        assert withheld.topk({"params": fp, "k": "5"})["withheld"] is True
        for window in ("total", "latest_bucket"):
            (held,) = samples(families["ocms_estimate_withheld"], params=fp, window=window)
            assert held.value == 1.0
        assert samples(families["ocms_estimate_ratio"], params=fp) == []
        assert samples(families["ocms_estimate_noise_floor_ratio"], params=fp) == []
        service = withheld.catalog.by_fingerprint[fp]
        assert service.window_estimate(Window("total"), top_k=5).top == ()


@pytest.mark.parametrize("fp", [FP1, FP2])
def test_previous_bucket_upper_bound_is_the_answer_for_that_bucket(service, families, fp):
    """The surge alert's baseline: the upper bound of each value exported in the latest bucket, in the bucket
    before it (LATEST - 60), equal to the API's answer for that range."""
    doc = service.estimates({"params": fp, "window": "range", "from": str(LATEST - 60), "to": str(LATEST)})
    assert doc["window"]["from"] == LATEST - 60 and doc["n"] > 0
    got = {s.labels["value"]: s.value for s in samples(families["ocms_estimate_previous_ci_upper_ratio"], params=fp)}
    latest = {s.labels["value"] for s in samples(families["ocms_estimate_ratio"], params=fp, window="latest_bucket")}
    assert set(got) == latest and len(got) == len(expected_chosen(service, fp, 5))
    for value, upper in got.items():
        assert upper == doc["estimates"][int(value)]["ci_high"], value
    # A scrape one bucket later compares CUR with LATEST; one whose previous bucket is empty exports nothing.
    later = scrape(service, clock=lambda: NOW + 60)
    assert all(s.value == service.estimates({"params": fp, "window": "latest_bucket"})["estimates"][int(s.labels["value"])]["ci_high"]
               for s in samples(later["ocms_estimate_previous_ci_upper_ratio"], params=fp))
    assert samples(scrape(service, clock=lambda: NOW - 60)["ocms_estimate_previous_ci_upper_ratio"], params=fp) == []


@pytest.mark.parametrize("fp", [FP1, FP2])
def test_noise_floor_per_window_is_what_ocms_plan_predicts(service, families, fp):
    """The floor the surge alert reads is the one `ocms plan` states for the same n and D."""
    from cms_core import planning

    for window in ("total", "latest_bucket"):
        n = service.estimates({"params": fp, "window": window})["n"]
        (sample,) = samples(families["ocms_estimate_noise_floor_ratio"], params=fp, window=window)
        assert sample.value == planning.noise_floor(PARAMS[fp], n, 0.95, D) > 0


def test_latest_bucket_excludes_the_current_bucket(service, families):
    (start,) = samples(families["ocms_latest_bucket_start_timestamp_seconds"], params=FP1)
    assert start.value == LATEST
    n_latest, _ = VIEW.sum(FP1, 60, LATEST, D)
    n_cur, _ = VIEW.sum(FP1, 60, CUR, D)
    (reports,) = samples(families["ocms_params_reports"], params=FP1, window="latest_bucket")
    assert reports.value == n_latest and n_latest != n_cur
    (total,) = samples(families["ocms_params_reports"], params=FP1, window="total")
    assert total.value == VIEW.sum(FP1, 0, 0, D)[0] == n_latest + n_cur + VIEW.sum(FP1, 60, LATEST - 60, D)[0]


def test_params_info_labels(families):
    info = families["ocms_params_info"]
    by_fp = {s.labels["fingerprint"]: s for s in info.samples}
    assert set(by_fp) == {FP1, FP2}
    common = {"metric": "default", "mechanism": "ocms", "field": "F(1009)", "mode": "mse"}
    assert by_fp[FP1].labels == dict(common, version=VERSION[FP1], fingerprint=FP1, epsilon="2", hash_range="4")
    assert by_fp[FP2].labels == dict(common, version=VERSION[FP2], fingerprint=FP2, epsilon="1", hash_range="3")
    assert by_fp[FP1].value == by_fp[FP2].value == 1.0


def test_collector_clock_overrides_the_service_clock(service):
    later = scrape(service, clock=lambda: NOW + 60)
    (start,) = samples(later["ocms_latest_bucket_start_timestamp_seconds"], params=FP1)
    assert start.value == CUR
    (reports,) = samples(later["ocms_params_reports"], params=FP1, window="latest_bucket")
    assert reports.value == VIEW.sum(FP1, 60, CUR, D)[0]


def test_top_k_zero_exports_the_watch_list_only():
    service = routes(top_k=0)
    families = scrape(service)
    got = {s.labels["value"] for s in families["ocms_estimate_count"].samples}
    assert got == set(WATCH)
    assert [s.value for s in families["ocms_estimate_values_omitted"].samples] == [D - 3, D - 3]


def test_top_k_beyond_d_exports_every_value_once():
    service = routes(top_k=100, watch=None)
    families = scrape(service)
    got = [s.labels["value"] for s in samples(families["ocms_estimate_ratio"], params=FP2, window="total")]
    assert sorted(got, key=int) == [str(i) for i in range(D)]
    assert [s.value for s in families["ocms_estimate_values_omitted"].samples] == [0.0, 0.0]


def test_empty_view_exports_no_estimates():
    service = routes(CountsView())
    families = scrape(service)
    for suffix, _, _ in ESTIMATE_FIELDS:
        assert families[f"ocms_estimate_{suffix}"].samples == []
    assert sorted(s.value for s in families["ocms_params_reports"].samples) == [0.0] * 4
    # Nothing is exported, so every tracked value is omitted.
    assert [s.value for s in families["ocms_estimate_values_omitted"].samples] == [float(D), float(D)]


def test_pipeline_metrics_precreate_every_reject_reason():
    metrics = PipelineMetrics()
    text = generate_latest(metrics.registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    rejected = families["ocms_reports_rejected"]
    assert rejected.type == "counter"
    assert sorted(s.labels["reason"] for s in rejected.samples) == sorted(REJECT_REASONS)
    assert len(rejected.samples) == len(REJECT_REASONS) == 12
    assert all(s.name == "ocms_reports_rejected_total" and s.value == 0.0 for s in rejected.samples)
    assert not any(name.endswith("_created") for f in families.values() for name in [s.name for s in f.samples])
    assert families["ocms_reports_accepted"].samples == []  # per parameter set, created on first use
    metrics.rejected.labels("expired").inc(3)
    metrics.accepted.labels("default", "1").inc(7)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())}
    values = {s.labels["reason"]: s.value for s in families["ocms_reports_rejected"].samples}
    assert values["expired"] == 3.0 and sum(values.values()) == 3.0
    assert [(s.labels, s.value) for s in families["ocms_reports_accepted"].samples] == [({"metric": "default", "version": "1"}, 7.0)]


def test_pipeline_metrics_registries_are_independent():
    a, b = PipelineMetrics(), PipelineMetrics(CollectorRegistry())
    a.replayed.inc(5)
    text = generate_latest(b.registry).decode()
    (replayed,) = [f for f in text_string_to_metric_families(text) if f.name == "ocms_reports_replayed"]
    assert [s.value for s in replayed.samples] == [0.0]


AWKWARD = [" a", "a ", "a", "", "line\nbreak", "caf\u00e9", "cafe\u0301", "\U0001f389", 'q"\\', "x{y}=z,"]


@pytest.mark.parametrize("domain, values", [
    ("string", AWKWARD),
    ("integer", [2**53 + 1, 2**63, 2**64 - 1, 0]),
])
def test_awkward_value_labels_round_trip_exactly(tmp_path, domain, values):
    """Issue 18: a label is the value as value_to_json writes it and parses back byte for byte."""
    from cms_core.values import elements_to_array, encode_value, limbs_for, value_to_json
    from registry.values_file import write_values_file

    params = OCMSParams.build(2.0, value_domain="string") if domain == "string" else OCMSParams.build(2.0, 2**64)
    path = tmp_path / "tracked.jsonl"
    write_values_file(path, values)
    tracked = TrackedValues.of(params, values)
    rng = np.random.default_rng(4)
    elements = elements_to_array([encode_value(params, v) for v in values for _ in range(30)], limbs_for(params))
    batch = simulate_reports(params, elements, rng)
    view = CountsView()
    fp = params.fingerprint.hex()
    view.apply_state(BucketKey.total(fp, 0),
               PartialCounts(len(batch), kernel.match_counts(params, batch, tracked), 1).to_bytes())
    domain = {"strings": True} if domain == "string" else {"dictionary_size": 2**64}
    service = Routes(view, lambda: NOW, epsilon=2, tracked_file=str(path), top_k=len(values), **domain)
    families = scrape(service)
    exported = [x.labels["value"] for x in families["ocms_estimate_ratio"].samples if x.labels["window"] == "total"]
    assert sorted(exported) == sorted(value_to_json(v) for v in values)
    answers = {r["value"]: r["frequency"] for r in service.estimates({})["estimates"]}
    for sample in families["ocms_estimate_ratio"].samples:
        if sample.labels["window"] == "total":
            assert sample.value == answers[sample.labels["value"]]


# ------------------------------------------- one bad series never fails /metrics (issue 24, section 1)

class _Families:
    """A scrape-time collector yielding fixed series, or raising."""

    def __init__(self, rows=(), error: Exception | None = None):
        self.rows, self.error = rows, error

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        if self.error is not None:
            raise self.error
        family = GaugeMetricFamily("ocms_test_value", "a test family", labels=["value"])
        for label, value in self.rows:
            family.add_metric([label], value)
        yield family


def test_a_bad_series_is_left_out_and_counted_and_the_rest_is_written():
    metrics = PipelineMetrics()
    metrics.rejected.labels("expired").inc(2)
    metrics.guard.add("words", _Families([("café", 0.5), ("caf\udcc3", 0.25), ("東京", 0.125), ("café", 0.0625),
                                          ("🎉", "not a number")]))
    metrics.guard.add("broken", _Families(error=RuntimeError("boom")))
    for _ in range(2):  # counted on every scrape
        text = generate_latest(metrics.registry).decode("utf-8", errors="strict")  # raised before
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [(s.labels["value"], s.value) for s in families["ocms_test_value"].samples] == [("café", 0.5),
                                                                                           ("東京", 0.125)]
    dropped = {(s.labels["collector"], s.labels["reason"]): s.value
               for s in families["ocms_exposition_series_dropped"].samples}
    assert dropped == {("words", "label_not_unicode"): 2.0, ("words", "duplicate_series"): 2.0,
                       ("words", "value_not_number"): 2.0, ("words", "collect_failed"): 0.0,
                       ("broken", "collect_failed"): 2.0, ("broken", "label_not_unicode"): 0.0,
                       ("broken", "duplicate_series"): 0.0, ("broken", "value_not_number"): 0.0}
    assert {s.labels["reason"]: s.value for s in families["ocms_reports_rejected"].samples}["expired"] == 2.0


def test_guarded_collectors_describe_their_families(service):
    """describe() names every family collect() yields, so the registry refuses a clashing name."""
    from prometheus_client import Gauge

    collector = EstimatesCollector(service.catalog)
    assert {f.name for f in collector.describe()} == {f.name for f in collector.collect()}
    assert all(f.samples == [] for f in collector.describe())
    metrics = PipelineMetrics()
    metrics.guard.add("estimates", collector)
    with pytest.raises(ValueError, match="Duplicated"):
        Gauge("ocms_estimate_ratio", "a clash", registry=metrics.registry)
