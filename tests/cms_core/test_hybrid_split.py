"""cms_core.hybrid.simulate_split: the simulation path of draw_mean_message (a device's part first, uniform over
the parts and apart from its value; part 0 a Hybrid report of the value), what the simulated fleet sends."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cms_core import hybrid
from cms_core.errors import InvalidParameterError

PARAMS = hybrid.HybridParams.build(2.0, 0.0, 100.0)


@pytest.mark.parametrize("parts", [2, 4])
def test_one_device_in_parts_reports_the_mean_and_its_reports_estimate_their_values(parts):
    rng = np.random.default_rng(3)
    values = rng.uniform(-10, 120, 60_000)  # clipped to [0, 100] by the mechanism
    mean, z = hybrid.simulate_split(PARAMS, parts, values, rng)
    n = values.size
    assert mean.dtype == bool and z.size == mean.sum()
    assert abs(z.size - n / parts) <= 4.5 * math.sqrt(n * (1 / parts) * (1 - 1 / parts))  # binomial(n, 1/parts)
    got = hybrid.mean_interval(PARAMS, hybrid.fold(PARAMS, z))
    sd = math.sqrt(hybrid.mean_variance(PARAMS, z.size, values[mean]))
    assert abs(got.estimate - float(np.clip(values[mean], 0, 100).mean())) <= 4.5 * sd


def test_one_part_draws_no_part_every_device_reports_the_mean():
    values = np.linspace(0, 100, 1_000)
    mean, z = hybrid.simulate_split(PARAMS, 1, values, np.random.default_rng(7))
    assert mean.all() and np.array_equal(z, hybrid.simulate(PARAMS, values, np.random.default_rng(7)))


@pytest.mark.parametrize("parts", [0, -1, True, 2.0])
def test_parts_must_be_a_whole_number_of_at_least_one(parts):
    with pytest.raises(InvalidParameterError, match="parts"):
        hybrid.simulate_split(PARAMS, parts, [1.0], np.random.default_rng(0))
