"""docs/cms_core.md "Sampling precision": the device path's ratio gap, computed exactly (issue 18)."""

from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

from cms_core import OCMSParams
from cms_core.privatize import ratio_gap_bound, realised_probability_ratio


def exact_gap(params: OCMSParams) -> Decimal:
    """1 - T (m-1) / ((2^64 - T) e^eps), with e^eps to 60 digits (float64 cannot see a 1e-16 gap)."""
    with localcontext() as ctx:
        ctx.prec = 60
        ratio = realised_probability_ratio(params)
        e = Decimal(Fraction(params.epsilon).numerator) / Decimal(Fraction(params.epsilon).denominator)
        return 1 - Decimal(ratio.numerator) / Decimal(ratio.denominator) / e.exp()


@pytest.mark.parametrize("eps, m", [(0.1, 2), (0.5, 2), (1.0, 3), (2.0, 4), (4.0, 8), (8.0, 55), (10.0, 149),
                                    (20.0, 10_000), (30.0, 1000)])
def test_gap_is_positive_and_within_the_documented_bound(eps, m):
    params = OCMSParams.build(eps, 10_000, hash_range=m)
    gap = exact_gap(params)
    assert 0 < gap <= Decimal(ratio_gap_bound(params))
    # the deliberate 2^-51 lowering dominates where the flooring term is negligible: a bound
    # that forgets it (1 / (2^64 - T), the old text) is violated
    if eps <= 10:
        assert gap > Decimal(2.0**-51 - 2.0**-52)


def test_documented_examples():
    p = OCMSParams.build(2.0, 10_000, hash_range=4)
    assert float(exact_gap(p)) == pytest.approx(4.2e-16, abs=0.05e-16)
    assert ratio_gap_bound(p) == pytest.approx(6.7e-16, abs=0.05e-16)
    p = OCMSParams.build(30.0, 10_000, hash_range=1000)
    assert float(exact_gap(p)) == pytest.approx(2.8e-10, abs=0.05e-10)
    assert ratio_gap_bound(p) == pytest.approx(5.8e-10, abs=0.05e-10)
