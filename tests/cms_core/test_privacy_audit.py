"""Privacy audit (issue "Privacy audit"): exact ε of both mechanisms, and a black-box lower bound.

The black-box part runs 2 x 200,000 device-path (CSPRNG) reports per mechanism here, a
few seconds; benchmarks/privacy_audit.py runs the issue's full audit (10^6 per input,
alpha = 0.01). Both compare a Clopper-Pearson lower bound on ε with the claim: it must
not exceed ε (no leak) and must reach 90% of it (the budget is really used). The device
path draws from the OS CSPRNG, so it cannot be seeded: CI uses alpha = 1e-6, making a
false failure a one-in-a-million event, and still reaches 96% of ε at this size.
Negative controls: a device whose keep threshold is computed for 1.25 ε while it claims
ε is caught by both checks; one computed for 0.7 ε falls short of 90%.
"""

import math
from fractions import Fraction

import numpy as np
import pytest

from cms_core import OCMSParams, privatize
from cms_core.audit import (
    black_box_audit,
    clopper_pearson_lower,
    clopper_pearson_upper,
    exact_privacy_loss,
    output_distribution,
    regularized_incomplete_beta,
)
from cms_core.fields import PrimeField
from cms_core.privatize import keep_threshold

CI_TRIALS = 200_000
CI_ALPHA = 1e-6


def small_ocms(epsilon: float) -> OCMSParams:
    """OCMS+RR on a domain small enough to enumerate: d = 5, m = 3, field F(11)."""
    return OCMSParams.build(epsilon, 5, hash_range=3, field=PrimeField(11))


def small_direct(epsilon: float) -> OCMSParams:
    return OCMSParams.build(epsilon, 5, mechanism="direct")


# ----------------------------------------------------------------------- exact
@pytest.mark.parametrize("build", [small_ocms, small_direct], ids=["ocms", "direct"])
@pytest.mark.parametrize("eps", [0.1, 1.0, 2.0, 5.0, 30.0])
def test_exact_ratio_is_e_eps_for_both_mechanisms(build, eps):
    params = build(eps)
    distribution = output_distribution(params, 2)
    assert sum(distribution.values()) == 1
    loss = exact_privacy_loss(params)
    assert loss <= Fraction(math.exp(eps))  # never more loss than claimed, exactly
    # ... and the budget is used, up to float: exp(eps) rounded down two ulps and T floored to 2^-64.
    gap = 1 / (2**64 - keep_threshold(params)) + 1e-15
    assert float(loss) == pytest.approx(math.exp(eps), rel=gap)


@pytest.mark.parametrize("build", [small_ocms, small_direct], ids=["ocms", "direct"])
def test_exact_check_catches_a_leaky_threshold(build):
    claimed = 2.0
    leaky = build(claimed * 1.25)  # the keep threshold of a larger epsilon, claiming 2.0
    assert exact_privacy_loss(leaky) > Fraction(math.exp(claimed))


# ------------------------------------------------------------- Clopper-Pearson
def test_clopper_pearson_matches_known_values():
    # 5 of 10 at 95% two-sided: [0.1871, 0.8129] (standard tables); 0 of 100: 1 - alpha^(1/n).
    assert clopper_pearson_lower(5, 10, 0.025) == pytest.approx(0.187086, abs=1e-6)
    assert clopper_pearson_upper(5, 10, 0.025) == pytest.approx(0.812914, abs=1e-6)
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-9)
    assert clopper_pearson_lower(0, 100, 0.05) == 0.0 and clopper_pearson_upper(100, 100, 0.05) == 1.0
    assert regularized_incomplete_beta(0.3, 2.0, 3.0) == pytest.approx(0.3483, abs=1e-4)


def test_clopper_pearson_covers_at_least_its_level():
    rng = np.random.default_rng(7)
    p, n, alpha = 0.07, 400, 0.05
    hits = rng.binomial(n, p, size=400)
    misses = sum(clopper_pearson_lower(int(k), n, alpha) > p for k in hits)
    assert misses <= 400 * alpha + 3 * math.sqrt(400 * alpha)


# ------------------------------------------------------------------- black box
@pytest.mark.parametrize("params", [
    OCMSParams.build(2.0, 1000),                     # m = 4 in F(1009): the event z = h(x1) != h(x2)
    OCMSParams.build(2.0, 16, mechanism="direct"),   # the event z = x1
    OCMSParams.build(4.0, 16, mechanism="direct"),
], ids=["ocms-eps2", "direct-eps2", "direct-eps4"])
def test_black_box_bound_neither_exceeds_nor_falls_short_of_epsilon(params):
    result = black_box_audit(params, 3, 7, CI_TRIALS, alpha=CI_ALPHA)
    assert not result.leaks, result
    assert result.fraction_of_claim >= 0.9, result


def _leaky_device(claimed: float, factor: float):
    """A device whose keep threshold is computed for factor * claimed while the topic claims ``claimed``."""
    cache = {}

    def device(params: OCMSParams, value: int):
        if params not in cache:
            cache[params] = OCMSParams.build(
                claimed * factor, params.dictionary_size, hash_range=params.hash_range, field=params.field,
                mechanism=params.mechanism,
            )
        return privatize(cache[params], value)

    return device


@pytest.mark.parametrize("params", [
    OCMSParams.build(2.0, 1000), OCMSParams.build(2.0, 16, mechanism="direct"),
], ids=["ocms", "direct"])
def test_black_box_audit_catches_a_leaky_device(params):
    result = black_box_audit(params, 3, 7, CI_TRIALS // 4, alpha=CI_ALPHA, device=_leaky_device(params.epsilon, 1.25))
    assert result.leaks, result


def test_black_box_audit_flags_a_miscalibrated_device():
    # Too much noise (the threshold of 0.7 eps): no leak, but the bound falls short of 90% of the claim.
    params = OCMSParams.build(2.0, 16, mechanism="direct")
    result = black_box_audit(params, 3, 7, CI_TRIALS // 4, alpha=CI_ALPHA, device=_leaky_device(2.0, 0.7))
    assert not result.leaks and result.fraction_of_claim < 0.9, result
