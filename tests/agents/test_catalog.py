"""agents.catalog: what a worker serves by name, answered and exported by name.

A two-metric registry (a categorical metric with two direct-RR versions, a string metric with
OCMS) over a CountsView filled with the kernel's counts of simulated reports: every answer is
compared to the offline decode of exactly its version's reports, values travel by name, a
version's reports are never counted under another version or metric (negative control), and
windows under min_reports are withheld in the API and in the exposition.
"""

from __future__ import annotations

import pickle
import textwrap

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agents.catalog import Catalog
from agents.metrics import EstimatesCollector
from agents.answers.request import ApiError
from agents.state import BucketKey, PartialCounts
from agents.view import CountsView
from cms_core import OCMSParams, OCMSSketch, ReportBatch, kernel
from cms_core.privatize import simulate_reports
from cms_core.values import elements_to_array, encode_value, limbs_for
from registry import load_registry
from registry.flags import FLAGS_METRIC, metrics_from_flags

from tests.registry.helpers import screen_metric

REGISTRY = "metrics:\n" + screen_metric("[home, search, feed, settings]", epsilons=(2, 1), added_in_2="[wallet]", fields="""\
    unit: launches
    bucket: 1m
    retention: 24h
    watch: [home, wallet]
    top_k: 2
    min_reports: 300
""") + """\
  - name: word
    description: A typed word
    owner: keyboard@example.com
    strings: true
    tracked: [alpha, beta, gamma, "two words"]
    epsilon: 3
    mode: l2
    mechanism: ocms
    bucket: 5m
    retention: 2h
    watch: [beta]
    top_k: 1
"""

NOW = 1_700_000_000.0
BASE = 1_699_999_800  # a 5-minute (and 1-minute) bucket start, complete at NOW
N = {("screen", 1): 4000, ("screen", 2): 2500, ("word", 1): 3000}


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    path = tmp_path_factory.mktemp("catalog") / "registry.yaml"
    path.write_text(REGISTRY, encoding="utf-8")
    _LOADED["registry"] = load_registry(path)
    return _LOADED["registry"]


_LOADED = {}


def load_registry_version(metric: str, version: int):
    return _LOADED["registry"].metric(metric).version(version)


def true_values(metric: str, version: int, rng) -> np.ndarray:
    n = N[(metric, version)]
    if metric == "screen":
        d = 4 if version == 1 else 5
        weights = np.arange(d, 0, -1, dtype=float)
        return rng.choice(d, n, p=weights / weights.sum()).astype(np.uint64)
    words = ["alpha", "beta", "gamma", "two words", "untracked"]
    params = load_registry_version("word", 1).params
    picks = rng.choice(len(words), n, p=[0.4, 0.3, 0.15, 0.1, 0.05])
    return elements_to_array([encode_value(params, words[i]) for i in picks], limbs_for(params))


@pytest.fixture(scope="module")
def fed(registry):
    """A view holding each version's reports (two partitions, one bucket + the cumulative key),
    and the offline sketch of each version's reports."""
    rng = np.random.default_rng(2026)
    view = CountsView()
    sketches = {}
    for metric in registry.metrics:
        for version in metric.live_versions:
            values = true_values(metric.name, version.version, rng)
            half = len(values) // 2
            parts = [simulate_reports(version.params, values[:half], rng),
                     simulate_reports(version.params, values[half:], rng)]
            batch = ReportBatch.concat(parts)
            tracked = version.tracked_values()
            fp = version.fingerprint.hex()
            for partition, part in enumerate(parts):
                counts = kernel.match_counts(version.params, part, tracked)
                state = PartialCounts(len(part), counts, 10).to_bytes()
                view.apply_state(BucketKey(fp, partition, version.bucket_seconds, BASE), state)
                view.apply_state(BucketKey.total(fp, partition), state)
            sketches[(metric.name, version.version)] = OCMSSketch(
                version.params, tracked, kernel.match_counts(version.params, batch, tracked), len(batch))
    return view, sketches


@pytest.fixture(scope="module")
def catalog(registry, fed):
    view, _ = fed
    return Catalog(registry, view, clock=lambda: NOW)


def answer(catalog, name, endpoint, path_value=None, **query):
    """As the web layer answers: prepare, gather, and finish with the catalog's estimator (every
    served fingerprint); the job is pickled first, as it travels to the answer process."""
    job = catalog.prepare(name, endpoint, list(query.items()), path_value).gather()
    return catalog.estimator.finish(pickle.loads(pickle.dumps(job)))


def test_every_live_version_is_served_with_its_own_fingerprint_tracked_set_and_levels(registry, catalog):
    assert list(catalog.metrics) == ["screen", "word"]
    assert [s.version.version for s in catalog.metric("screen").services] == [1, 2]
    assert len(catalog.by_fingerprint) == 3
    assert catalog.tracked_sizes == {v.fingerprint.hex(): v.tracked_count for v in registry.live_versions()}
    levels = {catalog.labels_of(fp): lv for fp, lv in catalog.levels_by_fp.items()}
    assert levels == {("screen", "1"): ((60, 86_400),), ("screen", "2"): ((60, 86_400),),
                      ("word", "1"): ((300, 7_200),)}
    assert {s.version.mechanism for s in catalog.metric("screen").services} == {"direct"}
    assert catalog.metric("word").default.version.mechanism == "ocms"


@pytest.mark.parametrize("metric,version", list(N))
def test_each_version_answers_exactly_its_own_reports_by_name(catalog, fed, metric, version):
    _, sketches = fed
    sketch = sketches[(metric, version)]
    doc = answer(catalog, metric, "estimates", version=str(version))
    assert (doc["metric"], doc["version"], doc["n"], doc["withheld"]) == (metric, version, N[(metric, version)], False)
    entry = catalog.metric(metric)
    names = next(s for s in entry.services if s.version.version == version).version.tracked_names()
    assert [r["value"] for r in doc["estimates"]] == names
    assert [r["match_count"] for r in doc["estimates"]] == sketch.counts.tolist()
    expected = sketch.estimate().as_records()
    for got, want in zip(doc["estimates"], expected):
        assert got["frequency"] == want["frequency"] and got["ci_high"] == want["ci_high"]


def test_negative_control_no_version_or_metric_counts_another_ones_reports(catalog):
    ns = {(m, v): answer(catalog, m, "estimates", version=str(v))["n"] for m, v in N}
    assert ns == N  # each exactly its own, never a sum over versions or metrics
    assert answer(catalog, "screen", "estimates")["version"] == 2  # default: the newest live version
    assert answer(catalog, "screen", "estimates")["n"] == N[("screen", 2)]


def test_values_by_name(catalog, fed):
    _, sketches = fed
    one = answer(catalog, "screen", "estimate_value", "feed", version="1")
    assert one["estimate"]["value"] == "feed"
    assert one["estimate"]["match_count"] == int(sketches[("screen", 1)].counts[2])
    assert answer(catalog, "screen", "estimate_value", "wallet", version="2")["estimate"]["value"] == "wallet"
    word = answer(catalog, "word", "estimate_value", "two words")
    assert word["estimate"]["match_count"] == int(sketches[("word", 1)].counts[3])
    top = answer(catalog, "screen", "topk", version="1", k="2")
    assert [r["value"] for r in top["top"]] == ["home", "search"]
    trend = answer(catalog, "word", "trend", value="beta", **{"from": str(BASE), "to": str(BASE + 300)})
    assert trend["value"] == "beta" and [p["n"] for p in trend["points"]] == [3000]
    assert trend["points"][0]["match_count"] == int(sketches[("word", 1)].counts[1])


@pytest.mark.parametrize("name,value,version,status,parameter,needle", [
    ("screen", "ATL", None, 404, "value", "'ATL' is not a category of metric 'screen'"),
    ("screen", "wallet", "1", 404, "value", "'wallet' is not a category of metric 'screen' version 1"),
    ("word", "untracked", None, 404, "value", "'untracked' is not a tracked value of metric 'word'"),
])
def test_unknown_values_are_named(catalog, name, value, version, status, parameter, needle):
    query = {} if version is None else {"version": version}
    with pytest.raises(ApiError) as info:
        answer(catalog, name, "estimate_value", value, **query)
    assert (info.value.status, info.value.parameter) == (status, parameter)
    assert needle in info.value.message


def test_unknown_metric_version_and_parameters_are_named(catalog):
    with pytest.raises(ApiError) as info:
        answer(catalog, "flights", "estimates")
    assert info.value.status == 404 and "'flights' is not a metric this worker serves" in info.value.message
    assert "screen, word" in info.value.message
    with pytest.raises(ApiError) as info:
        answer(catalog, "screen", "estimates", version="3")
    assert info.value.status == 404 and info.value.parameter == "version" and "live: 1, 2" in info.value.message
    with pytest.raises(ApiError) as info:
        catalog.prepare("screen", "estimates", [("version", "1"), ("version", "2")])
    assert info.value.parameter == "version"
    with pytest.raises(ApiError) as info:
        answer(catalog, "screen", "estimates", windw="total")
    assert info.value.parameter == "windw" and "did you mean 'window'" in info.value.message


def test_min_reports_withholds_the_window(registry, fed):
    """word has no min_reports; screen's 300: a latest bucket with no reports, and a catalog whose
    screen needs more reports than it has, answer withheld (no estimate, no match counts)."""
    view, _ = fed
    catalog = Catalog(registry, view, clock=lambda: NOW + 3600)
    doc = answer(catalog, "screen", "estimates", window="latest_bucket")
    assert doc["n"] == 0 and doc["withheld"] and doc["estimates"] == [] and doc["min_reports"] == 300
    one = answer(catalog, "screen", "estimate_value", "home", window="latest_bucket")
    assert one["withheld"] and one["estimate"] is None
    trend = answer(catalog, "screen", "trend", value="home", **{"from": str(BASE - 60), "to": str(BASE + 60)})
    assert [(p["n"] > 0, p["withheld"], "frequency" in p, "match_count" in p) for p in trend["points"]] == [
        (False, True, False, False), (True, False, True, True)]
    assert not answer(catalog, "word", "estimates", window="latest_bucket")["withheld"]  # min_reports 0


def scrape(catalog, **options) -> dict:
    registry = CollectorRegistry()
    registry.register(EstimatesCollector(catalog, **options))
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_exposition_labels_carry_names_never_fingerprints(catalog, fed):
    _, sketches = fed
    samples = scrape(catalog)
    ratio = samples["ocms_estimate_ratio"]
    keys = {(labels["metric"], labels["version"], labels["value"], labels["window"]) for labels, _ in ratio}
    # watch (home; wallet only where tracked) + top-K by name, per version, total window
    # (the latest bucket at NOW is BASE - 60, which holds nothing: withheld for screen, empty for word)
    assert keys == {("screen", "1", "home", "total"), ("screen", "1", "search", "total"),
                    ("screen", "2", "home", "total"), ("screen", "2", "search", "total"),
                    ("screen", "2", "wallet", "total"),
                    ("word", "1", "beta", "total"), ("word", "1", "alpha", "total")}
    assert all(set(labels) == {"metric", "version", "value", "window"} for labels, _ in ratio)
    values = {(labels["metric"], labels["version"], labels["value"]): v for labels, v in ratio}
    want = sketches[("word", 1)].estimate().as_records()
    assert values[("word", "1", "beta")] == want[1]["frequency"]
    info = {(labels["metric"], labels["version"]): labels for labels, _ in samples["ocms_params_info"]}
    assert info[("screen", "1")]["mechanism"] == "direct" and info[("word", "1")]["mechanism"] == "ocms"
    assert info[("word", "1")]["fingerprint"] == catalog.metric("word").default.fingerprint
    withheld = {(labels["metric"], labels["version"], labels["window"]): v
                for labels, v in samples["ocms_estimate_withheld"]}
    assert withheld[("screen", "1", "total")] == 0.0 and withheld[("screen", "1", "latest_bucket")] == 1.0
    reports = {(labels["metric"], labels["version"], labels["window"]): v for labels, v in samples["ocms_params_reports"]}
    assert {k[:2]: v for k, v in reports.items() if k[2] == "total"} == {
        ("screen", "1"): 4000, ("screen", "2"): 2500, ("word", "1"): 3000}


def test_withheld_total_exports_no_estimates(registry, fed, tmp_path):
    view, _ = fed
    path = tmp_path / "strict.yaml"
    path.write_text(REGISTRY.replace("min_reports: 300", "min_reports: 3000"), encoding="utf-8")
    catalog = Catalog(load_registry(path), view, clock=lambda: NOW)
    ratio = scrape(catalog)["ocms_estimate_ratio"]
    assert {(labels["metric"], labels["version"]) for labels, _ in ratio} == {("screen", "1"), ("word", "1")}
    doc = answer(catalog, "screen", "estimates", version="2")
    assert doc["withheld"] and doc["n"] == 2500 and doc["estimates"] == []


def test_listing_names_versions_parameters_and_reports(catalog):
    doc = catalog.describe()
    assert [m["name"] for m in doc["metrics"]] == ["screen", "word"]
    screen = doc["metrics"][0]
    assert (screen["owner"], screen["unit"], screen["reports"]) == ("mobile@example.com", "launches", 6500)
    assert [(v["version"], v["epsilon"], v["mechanism"], v["reports"]) for v in screen["versions"]] == [
        (1, 2.0, "direct", 4000), (2, 1.0, "direct", 2500)]
    assert screen["latest_bucket_start"] == BASE
    assert all(len(v["fingerprint"]) == 16 for v in screen["versions"])


def test_single_metric_flags_are_a_one_metric_catalog():
    p1, p2 = OCMSParams.build(2.0, 100), OCMSParams.build(1.0, 100)
    catalog = Catalog(metrics_from_flags(epsilon=2, dictionary_size=100, tracked_range="0:10", watch="3",
                                         extra_epsilon=[1]), CountsView())
    assert list(catalog.metrics) == [FLAGS_METRIC]
    # the rotated --extra-epsilon set is the older version, --epsilon the newest (what name-less routes read)
    assert [s.fingerprint for s in catalog.metric(FLAGS_METRIC).services] == [p2.fingerprint.hex(),
                                                                              p1.fingerprint.hex()]
    assert catalog.primary.default.version.params == p1 and catalog.metric(FLAGS_METRIC).services[0].watch == (3,)
    assert answer(catalog, FLAGS_METRIC, "estimate_value", "7", version="1")["estimate"]["value"] == "7"
    with pytest.raises(ApiError) as info:
        answer(catalog, FLAGS_METRIC, "estimate_value", "abc")
    assert info.value.status == 400 and "'abc'" in info.value.message
    with pytest.raises(ApiError) as info:
        answer(catalog, FLAGS_METRIC, "estimate_value", "50")
    assert info.value.status == 404
    nameless = catalog.estimator.finish(catalog.prepare_primary("params", []).gather())
    assert [(s["fingerprint"], s["primary"]) for s in nameless["parameter_sets"]] == [
        (p1.fingerprint.hex(), True), (p2.fingerprint.hex(), False)]
    doc = catalog.estimator.finish(catalog.prepare_primary("estimates", [("params", p2.fingerprint.hex())]).gather())
    assert doc["params"] == p2.fingerprint.hex() and doc["version"] == 1


def test_worker_flags_cannot_go_with_a_registry_and_the_registry_is_read_once(tmp_path, monkeypatch):
    import registry.loader

    from agents.cli import worker_settings_from_args
    from ocms.cli import build_parser
    from registry.flags import MetricFlagError

    path = tmp_path / "r.yaml"
    path.write_text(textwrap.dedent(REGISTRY), encoding="utf-8")
    args = build_parser().parse_args(["worker", "--registry", str(path), "--epsilon", "2", "--bootstrap-servers", "k"])
    with pytest.raises(MetricFlagError, match="--epsilon: single-metric flag; .* drop --epsilon"):
        worker_settings_from_args(args, {})
    reads = []
    real = registry.loader.read_regular_file
    monkeypatch.setattr(registry.loader, "read_regular_file", lambda *a: reads.append(a) or real(*a))
    args = build_parser().parse_args(["worker", "--bootstrap-servers", "k"])
    settings_, metrics = worker_settings_from_args(args, {"OCMS_REGISTRY": str(path)})
    catalog = Catalog(metrics, CountsView())
    assert list(catalog.metrics) == ["screen", "word"] and len(reads) == 1
    assert not hasattr(settings_, "params") and not hasattr(settings_, "registry")


def test_a_global_cap_bounds_the_exported_values_and_counts_the_rest(catalog):
    full = scrape(catalog)
    exported = {(l["metric"], l["version"], l["value"]) for l, _ in full["ocms_estimate_ratio"]}
    assert len(exported) == 7 and full["ocms_estimate_values_capped"] == [({}, 0.0)]
    capped = scrape(catalog, max_values=4)
    kept = {(l["metric"], l["version"], l["value"]) for l, _ in capped["ocms_estimate_ratio"]}
    assert len(kept) == 4 and kept < exported
    assert capped["ocms_estimate_values_capped"] == [({}, 3.0)]
    # Watched values go first: screen@1 keeps home (watched) before its top-K.
    assert ("screen", "1", "home") in kept


def test_combined_versions_follow_the_inverse_variance_formula(catalog, registry):
    from cms_core.combine import combine_frequencies

    doc = answer(catalog, "screen", "estimates", version="combined")
    assert doc["combined"] and doc["version"] == "combined" and doc["n"] == 6500 and not doc["withheld"]
    assert [v["version"] for v in doc["versions"]] == [1, 2]
    v1, v2 = (answer(catalog, "screen", "estimates", version=str(v)) for v in (1, 2))
    names = [r["value"] for r in v2["estimates"]]  # v2 tracks every v1 category plus wallet
    assert [r["value"] for r in doc["estimates"]] == names
    g1 = [next((r["frequency"] for r in v1["estimates"] if r["value"] == name), float("nan")) for name in names]
    g2 = [r["frequency"] for r in v2["estimates"]]
    spec = registry.metric("screen")
    want = combine_frequencies([(spec.version(1).params, 4000, np.array(g1)), (spec.version(2).params, 2500, np.array(g2))])
    assert [r["frequency"] for r in doc["estimates"]] == pytest.approx(list(want.frequency), rel=1e-12)
    assert [r["ci_high"] for r in doc["estimates"]] == pytest.approx(list(want.ci_high), rel=1e-12)
    wallet = answer(catalog, "screen", "estimate_value", "wallet", version="combined")["estimate"]
    assert wallet["frequency"] == pytest.approx(v2["estimates"][4]["frequency"]) and wallet["reports"] == 2500
    home = answer(catalog, "screen", "estimate_value", "home", version="combined")["estimate"]
    assert home == doc["estimates"][0] and home["reports"] == 6500
    for query, parameter in (({"postprocess": "clip"}, "postprocess"), ({"interval": "chernoff"}, "interval")):
        with pytest.raises(ApiError) as info:
            answer(catalog, "screen", "estimates", version="combined", **query)
        assert info.value.parameter == parameter
    with pytest.raises(ApiError) as info:
        answer(catalog, "screen", "topk", version="combined")
    assert info.value.parameter == "version"
    with pytest.raises(ApiError) as info:
        answer(catalog, "screen", "estimate_value", "ATL", version="combined")
    assert info.value.status == 404 and "'ATL'" in info.value.message


def test_combined_window_under_min_reports_is_withheld(fed, tmp_path):
    view, _ = fed
    path = tmp_path / "strict.yaml"
    path.write_text(REGISTRY.replace("min_reports: 300", "min_reports: 7000"), encoding="utf-8")
    catalog = Catalog(load_registry(path), view, clock=lambda: NOW)
    doc = answer(catalog, "screen", "estimates", version="combined")
    assert doc["withheld"] and doc["estimates"] == [] and doc["n"] == 6500
