"""Poisoning exposure (issue 28): the maximal-gain attack against the estimator, offline, and what
``ocms plan`` and mechanism "auto" say about it.

The attack test runs cms_core's own estimator on simulated genuine reports plus crafted fakes
(:func:`cms_core.poisoning.maximal_gain_reports`) and compares the rise of a value nobody holds with
beta * gain (:func:`cms_core.theory.poisoning_gain`). Tolerance: Z_TOLERANCE standard deviations of
the estimate at f = 0 (Theorem g_x_def's variance; the fakes always match, so they add no variance
and the estimate's true spread is sqrt(1 - beta) times that). The fake fraction is chosen so the
predicted rise is RISE_IN_SD standard deviations, far enough from 0 and from the rise of honest
reports of the target (beta * 1) for the negative controls to tell them apart: at least RISE_IN_SD,
and more where the gain is close to 1 (OCMS+RR at eps 4: 1.15), so that beta * gain and beta lie
3 Z_TOLERANCE apart.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from cms_core import InvalidParameterError, OCMSParams, OCMSSketch, TrackedValues, planning, theory
from cms_core.params import POISONING_NOTE_RATIO, compare_mechanisms
from cms_core.poisoning import maximal_gain_reports
from cms_core.privatize import simulate_reports
from cms_core.reports import ReportBatch
from cms_core.values import elements_to_array, encode_value, limbs_for

GENUINE = 200_000
Z_TOLERANCE = 4.0  # two-sided 6e-5 per comparison; fixed seeds make the outcome deterministic anyway
RISE_IN_SD = 20.0

CASES = [  # (mechanism, d or None for strings, epsilon)
    ("ocms", 1024, 2.0), ("direct", 1024, 2.0),
    ("ocms", 64, 1.0), ("direct", 64, 1.0),
    ("ocms", 16, 4.0), ("direct", 16, 4.0),
    ("ocms", None, 4.0),  # strings, GF(2^128): two-limb coefficients
]


def _params(mechanism, d, epsilon):
    if d is None:
        return OCMSParams.build(epsilon, value_domain="string", mechanism=mechanism)
    return OCMSParams.build(epsilon, d, mechanism=mechanism)


def _genuine(params, rng):
    """GENUINE honest reports of values other than the target (integers below d - 1; strings 'v0'..'v999')."""
    if params.value_domain == "string":
        labels = [f"v{i}" for i in rng.integers(0, 1000, GENUINE)]
        elements = elements_to_array([encode_value(params, v) for v in labels], limbs_for(params))
    else:
        elements = rng.integers(0, params.dictionary_size - 1, GENUINE).astype(np.uint64)
    return simulate_reports(params, elements, rng)


def _target(params):
    return "nobody holds this" if params.value_domain == "string" else params.dictionary_size - 1


def _estimate(params, batches) -> float:
    sketch = OCMSSketch(params, TrackedValues.of(params, [_target(params)]))
    for batch in batches:
        sketch.update(batch)
    return float(sketch.estimate().frequency[0])


def _sd_at_zero(params, n) -> float:
    return math.sqrt(float(params.variance(0.0, n)))


@pytest.mark.parametrize("mechanism, d, epsilon", CASES)
def test_maximal_gain_attack_lifts_a_value_nobody_holds_by_beta_times_the_gain(mechanism, d, epsilon):
    params = _params(mechanism, d, epsilon)
    rng = np.random.default_rng([28, int(epsilon * 10), d or 0, mechanism == "direct"])
    genuine = _genuine(params, rng)
    gain = params.poisoning_gain
    rise_in_sd = max(RISE_IN_SD, 3 * Z_TOLERANCE / (1 - 1 / gain))
    fakes_n = math.ceil(rise_in_sd * _sd_at_zero(params, GENUINE) / gain * GENUINE)
    n = GENUINE + fakes_n
    beta, sd = fakes_n / n, _sd_at_zero(params, n)
    fakes = maximal_gain_reports(params, _target(params), fakes_n, rng)
    fakes.validate(params)  # every fake is a valid report

    attacked = _estimate(params, [genuine, fakes])
    assert abs(attacked - beta * gain) <= Z_TOLERANCE * sd, (attacked, beta * gain, sd)

    # Negative control 1: without the fakes the value reads 0, which the tolerance tells from beta * gain.
    clean = _estimate(params, [genuine])
    assert abs(clean) <= Z_TOLERANCE * _sd_at_zero(params, GENUINE)
    assert abs(clean - beta * gain) > Z_TOLERANCE * sd
    # Negative control 2: as many honest devices holding the target lift it by beta only, not beta * gain:
    # the gain is the crafted reports' doing, and the comparison can tell.
    target = elements_to_array([encode_value(params, _target(params))] * fakes_n, limbs_for(params))
    honest = _estimate(params, [genuine, simulate_reports(params, target, rng)])
    assert abs(honest - beta) <= Z_TOLERANCE * math.sqrt(float(params.variance(beta, n)))
    assert abs(honest - beta * gain) > Z_TOLERANCE * sd


def test_crafted_reports_match_the_target_and_look_like_any_report():
    params = OCMSParams.build(2.0, 1000)
    rng = np.random.default_rng(5)
    fakes = maximal_gain_reports(params, 7, 5000, rng)
    counts = OCMSSketch(params, TrackedValues.of(params, [7, 8])).update(fakes).counts
    assert counts.tolist()[0] == 5000  # every fake matches its target ...
    assert abs(counts[1] / 5000 - params.collision_probability) < 0.03  # ... and another value by collision only
    # Coefficients are uniform like a device's; z is whatever the hash of the target gives.
    assert len(np.unique(fakes.a0)) > 900 and set(np.unique(fakes.z)) <= set(range(params.hash_range))
    direct = OCMSParams.build(2.0, 16, mechanism="direct")
    assert set(maximal_gain_reports(direct, 3, 10, rng).z.tolist()) == {3}


# ------------------------------------------------------------------ the exposure ocms plan states


def test_poisoning_exposure_figures():
    params = OCMSParams.build(2.0, 1024)
    doc = planning.poisoning_exposure(params, 100_000, 0.95, 1024)
    gain = params.poisoning_gain
    e = math.exp(2.0)
    # OCMS+RR: (1 - 1/m')/(p - 1/m') with the exact m'; close to (e + m - 1)/(e - 1) at m' ~ m.
    assert gain == pytest.approx((e + 4 - 1) / (e - 1), rel=1e-4)
    assert doc["mechanism"] == "ocms" and doc["gain_per_1pct_fake"] == pytest.approx(gain / 100)
    assert doc["fake_fraction_for_1pct"] == pytest.approx(0.01 / gain)
    direct = doc["mechanisms"]["direct"]
    assert direct["gain"] == pytest.approx((e + 1024 - 2) / (e - 1))  # the d = 1024, eps = 2: 0.006%
    assert direct["fake_fraction_for_1pct"] == pytest.approx(6.2066e-5, rel=1e-4)
    assert doc["fake_fraction_for_noise_floor"] == pytest.approx(doc["noise_floor"] / gain)
    # Without n there is no noise floor; strings have no direct row.
    bare = planning.poisoning_exposure(params)
    assert bare["noise_floor"] is None and bare["fake_fraction_for_noise_floor"] is None
    strings = planning.poisoning_exposure(OCMSParams.build(2.0, value_domain="string"), 1000, 0.95, 10)
    assert strings["mechanisms"]["direct"] is None and strings["note"] is None
    # Direct parameters report their own row.
    own = planning.poisoning_exposure(OCMSParams.build(2.0, 16, mechanism="direct"))
    assert own["mechanism"] == "direct" and own["fake_fraction_for_1pct"] == own["mechanisms"]["direct"]["fake_fraction_for_1pct"]


def _upper_tail(n, p, k):
    """P(Binomial(n, p) >= k), exactly with integers' help (small n)."""
    return math.fsum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))


@pytest.mark.parametrize("epsilon, d, n, tracked", [(2.0, 1024, 400, 1024), (1.0, 16, 300, 16), (4.0, 16, 50, 16)])
def test_noise_floor_is_the_estimate_below_the_exact_bonferroni_count(epsilon, d, n, tracked):
    for mechanism in ("ocms", "direct"):
        params = OCMSParams.build(epsilon, d, mechanism=mechanism)
        floor = planning.noise_floor(params, n, 0.95, tracked)
        a, b = params.estimator_coefficients
        q0, level = -b / a, 0.05 / tracked
        # The critical count from the floor: estimate(k - 1) = floor.
        k = round((floor - b) * n / a) + 1
        assert _upper_tail(n, q0, k) <= level < _upper_tail(n, q0, k - 1)


def test_noise_floor_says_inf_when_nothing_can_stand_above_it():
    params = OCMSParams.build(0.5, 1024, mechanism="direct")
    # One report matches a value nobody holds with probability q0 = 1/(e^0.5 + 1023) > 0.05/1024.
    assert planning.noise_floor(params, 1, 0.95, 1024) == math.inf
    assert math.isfinite(planning.noise_floor(params, 3, 0.95, 1024))
    doc = planning.poisoning_exposure(params, 1, 0.95, 1024)
    assert doc["noise_floor"] is None and doc["fake_fraction_for_noise_floor"] is None


# --------------------------------------------------------------- mechanism auto says what it costs


def test_auto_names_a_pick_more_than_twice_as_exposed_and_keeps_the_pick():
    both = compare_mechanisms(1.0, 9, f_star=0.1)
    assert both.chosen.mechanism == "direct"  # accuracy decides, as before
    ratio = both.direct.poisoning_gain / both.ocms.poisoning_gain
    assert ratio > POISONING_NOTE_RATIO
    note = both.poisoning_note
    assert note.startswith("mechanism auto picks direct RR") and f"{ratio:.2f}x" in note and "pin mechanism ocms" in note
    assert both.describe()["poisoning_note"] == note
    assert compare_mechanisms(2.0, 100).poisoning_note is None  # OCMS+RR picked, far less exposed
    assert compare_mechanisms(2.0, value_domain="string").poisoning_note is None  # no direct RR to compare


def test_auto_never_picks_more_than_twice_the_exposure_silently():
    """Over a grid of budgets, dictionaries and objectives: a note exactly where the pick's gain is > 2x."""
    noted = 0
    for mode, f_star in (("mse", 1.0), ("mse", 0.5), ("mse", 0.1), ("l2", 1.0)):
        for epsilon in (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0):
            for d in (2, 3, 5, 6, 8, 9, 12, 16, 24, 36, 55, 64, 128, 1024):
                both = compare_mechanisms(epsilon, d, mode=mode, f_star=f_star,
                                          tracked_count=d if mode == "l2" else None)
                chosen = both.chosen
                other = both.ocms if chosen is both.direct else both.direct
                more_exposed = chosen.poisoning_gain > POISONING_NOTE_RATIO * other.poisoning_gain
                assert (both.poisoning_note is not None) == more_exposed, (mode, f_star, epsilon, d)
                noted += more_exposed
    assert noted >= 2  # the grid reaches the case (eps 0.5, d 6, f* 0.5: 2.13x; eps 1, d 9, f* 0.1: 2.06x)


# ------------------------------------------------------------------------ the shuffled batch's delta


def test_shuffle_delta_default_and_checks():
    assert planning.shuffle_delta(100_000) == 1e-6
    assert planning.shuffle_delta(999_999) == 1e-6
    assert planning.shuffle_delta(1_000_000) == pytest.approx(1e-7)
    assert planning.shuffle_delta(5_000_000) == pytest.approx(1e-7)
    assert planning.shuffle_delta(10, 0.01) == 0.01
    for reports, delta, name, fragment in [
        (0, None, "shuffled", "integer >= 1"), (2.5, None, "shuffled", "integer >= 1"), (True, None, "shuffled", "integer"),
        (100, 0.0, "delta", "in (0, 1)"), (100, 1.0, "delta", "in (0, 1)"), (100, float("nan"), "delta", "in (0, 1)"),
        (100, 0.01, "delta", "below 1/N = 0.01"), (1000, 0.005, "delta", "below 1/N"),
    ]:
        with pytest.raises(InvalidParameterError, match=re.escape(fragment)) as caught:
            planning.shuffle_delta(reports, delta)
        assert caught.value.name == name
    with pytest.raises(InvalidParameterError, match="--shuffled N") as caught:
        planning.check_shuffle_flags(None, 1e-6)
    assert caught.value.name == "delta"


def test_shuffled_privacy_is_the_fmt21_bound():
    from cms_core.shuffle import central_epsilon

    doc = planning.shuffled_privacy(4.0, 100_000)
    assert doc["central_epsilon"] == central_epsilon(100_000, 4.0, 1e-6)
    assert 0.1675 <= doc["central_epsilon"] <= 0.1728  # the authors' reference interval
    assert doc["delta"] == 1e-6 and doc["local_epsilon"] == 4.0 and doc["bound"].startswith("FMT21")
    assert planning.shuffled_privacy(4.0, 10**6)["delta"] == pytest.approx(1e-7)
