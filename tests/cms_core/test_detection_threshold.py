"""A discovery window's detection threshold (issue 24, section 2): the frequency a value needed to be
found with the window's reports, so that "nothing found" says what it would have taken.

A value planted at the threshold's side is found in at least 95% of seeded runs (tolerance: 3
binomial standard deviations), one planted well below it mostly is not, and the threshold is
the per-level bound of ``detection_threshold`` with each level's own reports and candidates.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cms_core import discovery as D

BYTES = D.DiscoveryDomain(kind="integers", bits=8, bits_per_level=4)  # 2 levels of 16 candidates per parent
PARAMS = D.level_params("planted", 1, 2.0, BYTES)


def test_equal_levels_give_detection_threshold():
    params = PARAMS[0]
    same = D.levels_detection_threshold([params] * 3, [20_000] * 3, [50] * 3)
    assert same == pytest.approx(D.detection_threshold(params, 20_000, 3, 50), rel=1e-6)


def test_the_threshold_falls_with_the_reports_and_rises_with_the_candidates():
    by_n = [D.window_detection_threshold(BYTES, PARAMS, [n, n], [16, 16]) for n in (1_000, 4_000, 16_000, 64_000)]
    assert all(later < earlier for earlier, later in zip(by_n, by_n[1:])), by_n
    assert by_n[-1] == pytest.approx(by_n[-2] / 2, rel=0.2)  # about 1 / sqrt(n)
    few, many = (D.window_detection_threshold(BYTES, PARAMS, [8_000, 8_000], [16, k]) for k in (16, 256))
    assert many > few
    # A level the pass never reached counts one parent's children, the fewest a found value brings.
    assert D.window_detection_threshold(BYTES, PARAMS, [8_000, 8_000], [16]) == few


def test_a_level_without_reports_means_nothing_can_be_found():
    assert D.window_detection_threshold(BYTES, PARAMS, [8_000, 0], [16, 16]) == math.inf
    result = D.discover(BYTES, PARAMS, {})
    assert result.to_json()["detection_threshold"] is None and result.to_json()["detection_threshold_count"] is None


def test_discover_states_the_threshold_in_its_json():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 256, 10_000)
    result = D.discover(BYTES, PARAMS, D.simulate_level_reports(BYTES, PARAMS, values, rng))
    doc = result.to_json()
    expected = D.window_detection_threshold(BYTES, PARAMS, doc["reports_per_level"],
                                            [level["candidates"] for level in doc["levels"]])
    assert doc["detection_threshold"] == expected and doc["detection_miss"] == D.DETECTION_MISS
    assert doc["detection_threshold_count"] == pytest.approx(expected * 10_000)


@pytest.mark.slow
def test_a_value_above_the_threshold_is_found_as_promised():
    rng = np.random.default_rng(24)
    n, rounds = 20_000, 100
    above, below = 0xA7, 0x3C
    f_above, f_below = 0.06, 0.02  # the threshold of these windows is about 0.05
    found_above = found_below = 0
    for _ in range(rounds):
        values = rng.integers(0, 256, n)
        values[: round(f_above * n)] = above
        values[round(f_above * n): round((f_above + f_below) * n)] = below
        result = D.discover(BYTES, PARAMS, D.simulate_level_reports(BYTES, PARAMS, values, rng))
        assert f_below < result.detection_threshold < f_above, result.detection_threshold
        found = {d.value for d in result.discovered}
        found_above += above in found
        found_below += below in found
    miss = D.DETECTION_MISS
    assert found_above >= rounds * (1 - miss) - 3 * math.sqrt(rounds * miss * (1 - miss)), found_above
    assert found_below <= rounds / 2, found_below  # well under the threshold: mostly not found
