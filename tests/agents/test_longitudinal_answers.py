"""The worker's answers for a longitudinal metric (issue 38, agents/longitudinal.py).

Devices with constant values report once a day for five days (the seeded simulation path of
cms_core.longitudinal) into a view as the changelog carries it. A one-day window is answered with
the one-shot variance at eps_1 (the two-round chain is exactly GRR(eps_1)); a five-day range and the
total with the variance of five correlated reports per device (LongitudinalParams.window_variance);
the answers and the listing state both budgets; a shuffled window of a hashed longitudinal metric
claims no central epsilon.
"""

import math

import numpy as np
import pytest

from agents.catalog import Catalog
from agents.longitudinal import withhold_central
from agents.state import BucketKey, PartialCounts, encode_bundle
from agents.view import CountsView
from cms_core import kernel
from cms_core import longitudinal as L
from tests.registry.helpers import load

DAY = 86_400
NOW = 1_700_000_000.0 - 1_700_000_000.0 % DAY + 3_600  # an hour into a day
DAYS = [NOW - 3_600 - DAY * (5 - i) for i in range(5)]  # five complete days, the last one the latest complete
TEXT = """
metrics:
  - name: app_theme
    description: Theme the app runs in
    owner: a@example.com
    categories: [light, dark, high_contrast, sepia, system, custom]
    epsilon: 1
    lifetime_epsilon: 2
    mechanism: direct
    bucket: 1d
    retention: 7d
    versions:
      - version: 1
"""
N_DEVICES = 20_000


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    registry = load(tmp_path_factory.mktemp("reg"), TEXT)
    version = registry.metric("app_theme").latest
    lp = version.longitudinal
    fp = version.fingerprint.hex()
    rng = np.random.default_rng(38_038)
    values = rng.choice(6, size=N_DEVICES, p=[0.5, 0.3, 0.1, 0.05, 0.05, 0.0]).astype(np.uint64)
    devices = L.simulate_devices(lp, values, rng)
    tracked = version.tracked_values()
    view = CountsView()
    catalog = Catalog(registry, view, clock=lambda: NOW)
    layout = catalog.state_layout(1)

    def write(key, state):
        view.apply(layout.key_of(key).encode(), encode_bundle({fp: state.to_bytes()}))

    total = np.zeros(6, np.int64)
    for start in DAYS:
        counts = kernel.match_counts(lp.report, L.simulate_day(lp, devices, rng), tracked)
        write(BucketKey(fp, 0, DAY, int(start)), PartialCounts(N_DEVICES, counts, int(start), 0, 0))
        total += counts
    write(BucketKey.total(fp, 0), PartialCounts(N_DEVICES * 5, total, int(DAYS[-1]), 0, 0))
    assert view.rejected == 0
    truth = np.bincount(values.astype(np.int64), minlength=6) / N_DEVICES
    return catalog, lp, truth


def answer(catalog, query):
    return catalog.estimator.finish(catalog.prepare("app_theme", "estimates", query.items()).gather())


def test_one_day_is_the_one_shot_variance_and_says_both_budgets(world):
    catalog, lp, truth = world
    doc = answer(catalog, {"window": "latest_bucket"})
    info = doc["longitudinal"]
    assert info["epsilon_per_report"] == 1.0 and info["lifetime_epsilon"] == 2.0
    assert info["reports_per_device_at_most"] == 1 and "per report" in info["audited_epsilon"]
    freq = np.array([r["frequency"] for r in doc["estimates"]])
    std = np.array([r["std"] for r in doc["estimates"]])
    assert np.allclose(std, np.sqrt(lp.variance(np.clip(freq, 0, 1), N_DEVICES)))
    assert np.all(np.abs(freq - truth) < 4.5 * std)


def test_five_days_widen_to_the_correlated_variance(world):
    catalog, lp, truth = world
    for query in ({"from": str(int(DAYS[0])), "to": str(int(DAYS[-1] + DAY))}, {"window": "total"}):
        doc = answer(catalog, query)
        assert doc["longitudinal"]["reports_per_device_at_most"] == 5, query
        n = doc["n"]
        assert n == 5 * N_DEVICES
        freq = np.array([r["frequency"] for r in doc["estimates"]])
        std = np.array([r["std"] for r in doc["estimates"]])
        expected = np.sqrt(lp.window_variance(np.clip(freq, 0, 1), n, 5))
        assert np.allclose(std, expected)
        assert np.all(std > 1.2 * np.sqrt(lp.variance(np.clip(freq, 0, 1), n)))  # the correlation is not small
        assert np.all(np.abs(freq - truth) < 4.5 * std)
        for r in doc["estimates"]:
            assert r["ci_high"] - r["frequency"] == pytest.approx(1.959963984540054 * r["std"], rel=1e-9)


def test_listing_says_the_mode(world):
    catalog, _, _ = world
    described = catalog.metric("app_theme").describe()
    text = repr(described)
    assert "'reporting': 'longitudinal'" in text and "'lifetime_epsilon': 2.0" in text


def test_a_hashed_longitudinal_metric_claims_no_central_epsilon():
    doc = {"longitudinal": {"mechanism": "ocms", "epsilon_per_report": 1.0, "lifetime_epsilon": 2.0},
           "central_epsilon": 0.3, "central_delta": 1e-9, "central_bound": "x", "central_note": "shuffled ...",
           "points": [{"central_epsilon": 0.4, "central_delta": 1e-9}]}
    out = withhold_central(doc)
    assert out["central_epsilon"] is None and out["points"][0]["central_epsilon"] is None
    assert "pseudonym" in out["central_note"]
    direct = {"longitudinal": {"mechanism": "direct", "lifetime_epsilon": 3.0}, "central_epsilon": 0.3,
              "central_note": "every report of this window was shuffled ..."}
    out = withhold_central(direct)
    assert out["central_epsilon"] == 0.3  # no hash travels: a batch's figure holds per report
    assert "do not compose to k times" in out["central_note"] and "3 per memoized value" in out["central_note"]
    assert math.isfinite(0.3)


def test_trend_points_and_post_processed_answers_are_widened_per_point(world):
    catalog, lp, truth = world
    query = {"value": "light", "from": str(int(DAYS[0])), "to": str(int(DAYS[-1] + DAY))}
    for step, k in ((DAY, 1), (5 * DAY, 5)):
        for post in ("none", "norm_sub"):
            doc = catalog.estimator.finish(catalog.prepare("app_theme", "trend", dict(
                query, step=str(step), postprocess=post).items()).gather())
            points = [p for p in doc["points"] if p["n"]]
            assert points and all(p["n"] == N_DEVICES * k for p in points)
            for p in points:
                expected = math.sqrt(lp.window_variance(min(max(p["frequency"], 0), 1), p["n"], k))
                assert p["std"] == pytest.approx(expected, rel=1e-9)
    doc = answer(catalog, {"window": "total", "postprocess": "norm_sub"})
    assert abs(sum(r["processed"] for r in doc["estimates"]) - 1) < 1e-9
    assert all(r["processed_ci_low"] <= r["processed"] <= r["processed_ci_high"] for r in doc["estimates"])
    assert doc["noise_floor"] > 0


def test_plan_figures_name_loloha_s_cost():
    from registry.longitudinal import plan_fields

    lp = L.LongitudinalParams.build(2.0, 1.0, 1000)
    fields = plan_fields(lp, 100_000)
    assert fields["single_day_variance_ratio"] == 1.0 and fields["max_lifetime_epsilon"] == 2.0 * lp.g
    assert fields["loloha_published_hash_range"] == 3 and fields["loloha_published_variance_ratio"] > 1.05
    assert fields["window_30_days_worst_case_mse"] > fields["memoized_floor_mse"] > 0
