"""The central epsilon of shuffled windows in the worker's answers (agents.answers.privacy.central_privacy).

A view whose buckets hold reports a shuffling collector produced (PartialCounts.shuffled and
shuffle_min, agents.state), others not, applied as the changelog carries them (bundles of the
catalog's state layout). Every answer over a window of only shuffled reports
carries the central (epsilon, delta) of its smallest batch, exactly cms_core.shuffle's figure
for that n (through cms_core.planning.shuffled_privacy); a window holding any report that was
not shuffled carries null and says why. Exported to Prometheus the same way.
"""

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agents.answers.combined import combined_central
from agents.catalog import Catalog
from agents.metrics import EstimatesCollector
from agents.answers.privacy import CENTRAL_COST, central_cost, central_privacy
from agents.state import BucketKey, PartialCounts, encode_bundle
from agents.view import CountsView
from cms_core import OCMSParams, TrackedValues, kernel
from registry.flags import metrics_from_flags
from cms_core.planning import SHUFFLE_BOUND, shuffle_delta
from cms_core.privatize import simulate_reports
from cms_core.shuffle import central_epsilon

from .routes import Routes

P = OCMSParams.build(2.0, 1000)
FP = P.fingerprint.hex()
D = 20
NOW = 1_700_000_000.0
B = [1_699_999_740 + 60 * i for i in range(4)]  # four complete base buckets; B[3] is the latest complete one
#: (bucket, partition) -> (reports, shuffled, smallest batch): B[0] shuffled in batches of 3,000 and 5,000;
#: B[1] partly not shuffled; B[2] empty; B[3] one batch of 20,000.
CELLS = {(B[0], 0): (400, 400, 5_000), (B[0], 1): (300, 300, 3_000),
         (B[1], 0): (200, 200, 8_000), (B[1], 1): (100, 0, 0),
         (B[3], 0): (500, 500, 20_000)}


#: The worker's metric flags: one version, P, tracking 0..D-1.
FLAGS = dict(epsilon=2, dictionary_size=1000, tracked_range=f"0:{D}", watch="3", top_k=3)


def catalog(view: CountsView) -> Catalog:
    return Catalog(metrics_from_flags(**FLAGS), view, clock=lambda: NOW)


def fill(cells) -> CountsView:
    rng = np.random.default_rng(28)
    tracked = TrackedValues.range(P, 0, D)
    layout = catalog(CountsView()).state_layout(4)
    assert list(layout.groups) == [FP]
    view, totals = CountsView(), {}

    def write(key: BucketKey, state: PartialCounts) -> None:  # a changelog record: the key's bundle
        view.apply(layout.key_of(key).encode(), encode_bundle({FP: state.to_bytes()}))

    for (start, partition), (n, shuffled, smallest) in cells.items():
        batch = simulate_reports(P, rng.integers(0, D, n).astype(np.uint64), rng)
        counts = kernel.match_counts(P, batch, tracked)
        write(BucketKey(FP, partition, 60, start), PartialCounts(n, counts, start, shuffled, smallest))
        total = totals.setdefault(partition, [0, np.zeros(D, np.int64), 0, 0])
        total[0] += n
        total[1] += counts
        total[2] += shuffled
        total[3] = min(total[3], smallest) if total[3] and smallest else total[3] or smallest
    for partition, (n, counts, shuffled, smallest) in totals.items():
        write(BucketKey.total(FP, partition), PartialCounts(n, counts, B[3], shuffled, smallest))
    assert view.rejected == 0
    return view


@pytest.fixture(scope="module")
def service():
    return Routes(fill(CELLS), lambda: NOW, **FLAGS)


def claimed(batch: int) -> dict:
    """What a window of only shuffled reports, smallest batch ``batch``, must say (cms_core.shuffle directly)."""
    delta = shuffle_delta(batch)
    return {"central_epsilon": central_epsilon(batch, 2.0, delta), "central_delta": delta,
            "central_bound": SHUFFLE_BOUND, "shuffle_batch_min": batch}


def test_a_window_of_shuffled_reports_carries_the_central_epsilon_of_its_smallest_batch(service):
    doc = service.estimates({"from": str(B[0]), "to": str(B[0] + 60)})
    assert doc["n"] == 700 and doc["shuffled_reports"] == 700
    assert {k: doc[k] for k in claimed(3_000)} == claimed(3_000), "the smaller of the bucket's two batches"
    assert doc["central_epsilon"] < 2.0 and "at least 3,000 reports" in doc["central_note"]
    latest = service.estimates({"window": "latest_bucket"})
    assert {k: latest[k] for k in claimed(20_000)} == claimed(20_000)
    assert claimed(20_000)["central_epsilon"] < claimed(3_000)["central_epsilon"]


def test_every_answer_kind_carries_it(service):
    query = {"from": str(B[0]), "to": str(B[0] + 60)}
    want = claimed(3_000)
    for doc in (service.topk(query), service.estimate_value("3", query),
                service.estimate_value("3", dict(query, postprocess="norm_sub"))):
        assert {k: doc[k] for k in want} == want


def test_a_window_with_reports_that_were_not_shuffled_says_null_and_why(service):
    doc = service.estimates({})  # total: B[1] holds 100 reports that were not shuffled
    assert doc["n"] == 1_500 and doc["shuffled_reports"] == 1_400
    assert (doc["central_epsilon"], doc["central_delta"], doc["central_bound"]) == (None, None, None)
    assert doc["shuffle_batch_min"] == 3_000
    assert doc["central_note"].startswith("100 of the 1,500 reports of this window were not shuffled")
    assert doc["central_reason"] == "partly_shuffled"
    unshuffled = Routes(fill({(B[0], 0): (50, 0, 0)}), lambda: NOW, **FLAGS).estimates({})
    assert unshuffled["central_epsilon"] is None and unshuffled["shuffled_reports"] == 0
    assert "no report of this window came in a frame with a verified shuffle claim" in unshuffled["central_note"]
    assert unshuffled["central_reason"] in ("no_claim_key", "not_shuffled")


def test_delta_is_below_one_over_n_for_every_batch_of_the_window_not_only_the_smallest():
    """Issue 37: batches of 500 and 2,000,000 reports in one window. The delta must be below 1/N for the
    large batch (1e-7, not the small batch's 1e-6); epsilon is the small batch's at that delta."""
    got = central_privacy(P, 2_000_500, 2_000_500, 500, 2_000_000)
    assert got["central_delta"] == shuffle_delta(2_000_000) == 1e-7
    assert got["central_delta"] * 2_000_000 < 1
    assert got["central_epsilon"] == central_epsilon(500, P.epsilon, 1e-7)
    assert got["central_epsilon"] > central_epsilon(500, P.epsilon, 1e-6)  # the smaller delta costs epsilon
    assert central_privacy(P, 500, 500, 500, 500)["central_delta"] == 1e-6


@pytest.mark.parametrize("postprocess", ["none", "norm_sub"])
def test_trend_points_carry_their_own(service, postprocess):
    doc = service.trend({"value": "3", "from": str(B[0]), "to": str(B[3] + 60), "postprocess": postprocess})
    points = {p["from"]: p for p in doc["points"]}
    assert points[B[0]]["central_epsilon"] == claimed(3_000)["central_epsilon"]
    assert points[B[0]]["central_delta"] == claimed(3_000)["central_delta"]
    assert points[B[1]]["central_epsilon"] is None and points[B[1]]["shuffled_reports"] == 200
    assert points[B[2]]["central_epsilon"] is None and points[B[2]]["n"] == 0
    assert points[B[3]]["central_epsilon"] == claimed(20_000)["central_epsilon"]
    assert doc["central_epsilon"] is None  # the whole range holds B[1]


def test_an_uncomputed_figure_counts_in_the_answer_s_work(service):
    snapshot = service.view.snapshot(FP, 60, B[0], B[3] + 60)  # buckets whose smallest batches: 3,000, 8,000, 20,000
    for batch in (3_000, 8_000, 20_000):
        central_privacy(P, 10, 10, batch)  # now cached
    assert central_cost(snapshot, 2.0) == 0
    assert central_cost(snapshot, 2.5) == 3 * CENTRAL_COST, "one per smallest batch not computed yet"


def test_prometheus_exports_the_windows_that_have_one_and_nothing_for_the_others(service):
    registry = CollectorRegistry()
    registry.register(EstimatesCollector(catalog(service.view)))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    epsilon = {s.labels["window"]: s.value for s in families["ocms_central_epsilon"].samples}
    delta = {s.labels["window"]: s.value for s in families["ocms_central_delta"].samples}
    assert epsilon == {"latest_bucket": claimed(20_000)["central_epsilon"]}, "total holds unshuffled reports"
    assert delta == {"latest_bucket": shuffle_delta(20_000)}


def test_the_metric_listing_states_it_per_window(service):
    windows = catalog(service.view).describe()["metrics"][0]["versions"][0]["windows"]
    assert windows["latest_bucket"]["central_epsilon"] == claimed(20_000)["central_epsilon"]
    assert windows["total"]["central_epsilon"] is None and windows["total"]["shuffled_reports"] == 1_400


def test_a_combined_answer_states_the_largest_of_its_versions():
    class Version:
        def __init__(self, number):
            self.version = type("V", (), {"version": number})()

    a, b, c = (dict(n=10, **central_privacy(P, 10, *shuffle)) for shuffle in ((10, 3_000), (10, 20_000), (0, 0)))
    both = combined_central([(Version(1), a), (Version(2), b)])
    assert both["central_epsilon"] == claimed(3_000)["central_epsilon"] and both["shuffle_batch_min"] == 3_000
    mixed = combined_central([(Version(1), a), (Version(2), c)])
    assert mixed["central_epsilon"] is None and mixed["central_note"].startswith("version 2: no report")
