import math

import pytest

from cms_core import InvalidParameterError, OCMSParams
from cms_core.fields import PRIME_64, BinaryField, PrimeField
from cms_core import theory
from cms_core.params import MAX_EPSILON, MAX_HASH_RANGE, MIN_EPSILON, STRING_DICTIONARY_SIZE, compare_mechanisms
from cms_core.planning import predict
from cms_core.privatize import realised_probability_ratio


@pytest.mark.parametrize(
    "epsilon, fragment",
    [
        (0.0, "epsilon=0.0: must be > 0"),
        (-1.0, "epsilon=-1.0: must be > 0"),
        (math.nan, "epsilon=nan: must be finite"),
        (math.inf, "epsilon=inf: must be finite"),
        (100.5, "epsilon=100.5: must be <= 100"),
        ("2", "epsilon='2': must be a real number"),
        (5e-324, "epsilon=5e-324: must be >= 8.9e-16: below it randomized response keeps the true bucket no more"),
        (1e-320, "must be >= 8.9e-16"),  # issue 24: accepted, then `ocms plan` printed nan
        (8.8e-16, "must be >= 8.9e-16"),
        (True, "epsilon=True: must be a real number"),
    ],
)
def test_bad_epsilon_named(epsilon, fragment):
    with pytest.raises(InvalidParameterError) as info:
        OCMSParams.build(epsilon, 1000)
    assert fragment in str(info.value)
    assert info.value.name == "epsilon"


def test_epsilon_extremes_exactly():
    tiny = OCMSParams.build(MIN_EPSILON, 1000)  # the smallest usable epsilon (issue 24)
    assert tiny.hash_range == 2 and tiny.keep_probability > 0.5
    assert realised_probability_ratio(tiny) > 1  # the device still favours the true bucket
    prediction = predict(tiny, 1000)
    assert all(math.isfinite(v) and v > 0 for k, v in prediction.items() if isinstance(v, float))
    assert all(math.isfinite(c) for c in tiny.estimator_coefficients)
    top = OCMSParams.build(MAX_EPSILON, 10, hash_range=2)
    assert top.epsilon == 100.0 and top.keep_probability == 1.0
    # the optimum m for eps = 100 exceeds the hash-range limit: clear error naming epsilon
    with pytest.raises(InvalidParameterError, match=r"epsilon=100.0: needs a hash range"):
        OCMSParams.build(MAX_EPSILON, 10)
    big = OCMSParams.build(44.0, 10)
    assert big.hash_range <= MAX_HASH_RANGE


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"dictionary_size": 0}, "dictionary_size"),
        ({"dictionary_size": None}, "dictionary_size"),
        ({"dictionary_size": 2.5}, "dictionary_size"),
        ({"dictionary_size": 2**128 + 1}, "dictionary_size"),
        ({"dictionary_size": 100, "mode": "l1"}, "mode"),
        ({"dictionary_size": 100, "f_star": 1.5}, "f_star"),
        ({"dictionary_size": 100, "f_star": -0.1}, "f_star"),
        ({"dictionary_size": 100, "f_star": math.nan}, "f_star"),
        ({"dictionary_size": 100, "mode": "l2"}, "tracked_count"),
        ({"dictionary_size": 100, "mode": "l2", "tracked_count": 0}, "tracked_count"),
        ({"dictionary_size": 100, "hash_range": 1}, "hash_range"),
        ({"dictionary_size": 100, "hash_range": 2**32}, "hash_range"),
        ({"dictionary_size": 100, "value_domain": "float"}, "value_domain"),
        ({"dictionary_size": 100, "value_domain": "string"}, "dictionary_size"),
        ({"dictionary_size": 100, "field": PrimeField(97)}, "field"),
        ({"dictionary_size": 2**64 + 1, "field": BinaryField(64)}, "field"),
        ({"dictionary_size": 100, "hash_range": 60, "field": PrimeField(103)}, "hash_range"),
    ],
)
def test_invalid_combinations_name_the_value(kwargs, name):
    kwargs = dict(kwargs)
    d = kwargs.pop("dictionary_size")
    with pytest.raises(InvalidParameterError) as info:
        OCMSParams.build(1.0, d, **kwargs)
    assert info.value.name == name, str(info.value)


def test_modes_and_fields():
    p = OCMSParams.build(2.0, 10_000)
    assert p.mode == "mse" and p.hash_range == 4 and p.field == PrimeField(10007)
    l2 = OCMSParams.build(2.0, 10_000, mode="l2", tracked_count=10_000)
    assert l2.hash_range == 8 and l2.mode == "l2"  # ~ 1 + e^eps for large D
    fixed = OCMSParams.build(2.0, 10_000, hash_range=1024)
    assert fixed.mode == "fixed" and fixed.field == PrimeField(10007)
    assert OCMSParams.build(2.0, 2**40).field == PrimeField(PRIME_64)
    assert OCMSParams.build(2.0, 2**64).field == BinaryField(64)
    s = OCMSParams.build(2.0, value_domain="string")
    assert s.field == BinaryField(128) and s.dictionary_size == STRING_DICTIONARY_SIZE
    assert s.report_bytes == 16 + 16 + 1
    assert p.report_bytes == 2 + 2 + 1  # small field -> small reports


def test_q_r_m_prime_exact_integers():
    p = OCMSParams.build(1.0, 2**40)
    assert p.q * p.hash_range + p.r == PRIME_64
    assert isinstance(p.q, int) and isinstance(p.r, int)
    assert p.effective_hash_range != p.hash_range


def test_fingerprint_stable_and_sensitive():
    p = OCMSParams.build(2.0, 10_000)
    # pinned: changing this breaks every deployed topic and stored sketch
    assert p.fingerprint.hex() == "eee2f6ee10f1ea54"
    assert len(p.fingerprint) == 8
    assert p.fingerprint != OCMSParams.build(2.0000001, 10_000).fingerprint
    assert p.fingerprint != OCMSParams.build(2.0, 10_001).fingerprint
    assert p.fingerprint != OCMSParams.build(2.0, 10_000, hash_range=5).fingerprint
    # mode only explains how m was chosen: same eps, m, field -> same fingerprint
    assert p.fingerprint == OCMSParams.build(2.0, 10_000, hash_range=4).fingerprint


def test_params_frozen_and_revalidated():
    p = OCMSParams.build(2.0, 1000)
    with pytest.raises(AttributeError):
        p.epsilon = 3.0
    with pytest.raises(InvalidParameterError):
        OCMSParams(epsilon=-1.0, hash_range=4, field=PrimeField(1009), dictionary_size=1000)


def test_binding_separates_fingerprints_and_keeps_unbound_ones():
    unbound = OCMSParams.build(epsilon=2.0, dictionary_size=1000)
    a = OCMSParams.build(epsilon=2.0, dictionary_size=1000, binding="flight_dest@1")
    b = OCMSParams.build(epsilon=2.0, dictionary_size=1000, binding="carrier@1")
    a2 = OCMSParams.build(epsilon=2.0, dictionary_size=1000, binding="flight_dest@2")
    assert len({unbound.fingerprint, a.fingerprint, b.fingerprint, a2.fingerprint}) == 4
    assert a.fingerprint == OCMSParams.build(epsilon=2.0, dictionary_size=1000, binding="flight_dest@1").fingerprint
    # unbound parameters keep the wire-v1 fingerprint of the committed vectors
    assert unbound.binding is None and unbound.describe()["binding"] is None


@pytest.mark.parametrize("binding", ["", "x" * 201, "a\nb", 7, b"x@1"])
def test_bad_binding_names_the_field(binding):
    with pytest.raises(InvalidParameterError, match="binding"):
        OCMSParams.build(epsilon=2.0, dictionary_size=10, binding=binding)


# ------------------------------------------------------------------ the smallest usable epsilon (issue 24)

def _raw_ratio(epsilon: float, m: int):
    """T (m-1) / (2^64 - T) of privatize.keep_threshold, without building parameters (they refuse small epsilons)."""
    from fractions import Fraction

    e_lo = Fraction(math.exp(epsilon)) * Fraction(2**52 - 2, 2**52)
    t = min(math.floor(e_lo / (e_lo + m - 1) * 2**64), 2**64 - 1)
    return Fraction(t * (m - 1), 2**64 - t)


@pytest.mark.parametrize("m", [2, 3, 4, 7, 1000, 2**16, 2**20 + 3, 10**9 + 7, 2**31, 2**32 - 1])
def test_at_and_above_the_bound_the_device_favours_the_true_bucket(m):
    bound = theory.min_usable_epsilon(m)
    params = OCMSParams(epsilon=bound, hash_range=m, field=PrimeField(PRIME_64), dictionary_size=2**32 - 1)
    assert realised_probability_ratio(params) == _raw_ratio(bound, m)  # the same threshold as the device's
    for epsilon in (bound, math.nextafter(bound, 1.0), bound * 1.3, bound * 7, bound * 1e3):
        assert _raw_ratio(epsilon, m) > 1, (m, epsilon)


@pytest.mark.parametrize("m, below", [(2, 5.5e-16), (2**32 - 1, 2.3e-10)])
def test_the_bound_is_close_to_where_the_keep_threshold_really_degenerates(m, below):
    """Negative control: a little under the bound (within a factor 2) the rounded keep probability is <= 1/m."""
    assert theory.min_usable_epsilon(m) < 2.1 * below
    assert _raw_ratio(below, m) <= 1


def test_a_fixed_hash_range_names_its_own_bound():
    with pytest.raises(InvalidParameterError, match=r"must be >= 4.7e-10 with m = 4294967295") as info:
        OCMSParams.build(1e-12, 2**40, hash_range=MAX_HASH_RANGE)
    assert info.value.name == "epsilon"
    assert OCMSParams.build(theory.min_usable_epsilon(MAX_HASH_RANGE), 2**40, hash_range=MAX_HASH_RANGE)


def test_auto_skips_direct_rr_where_its_m_is_unusable():
    comparison = compare_mechanisms(1e-12, 2**32 - 1)
    assert comparison.direct is None and comparison.chosen.mechanism == "ocms"
    assert OCMSParams.build(1e-12, 2**32 - 1, mechanism="auto").hash_range == 2
    with pytest.raises(InvalidParameterError, match="with m = 4294967295"):
        OCMSParams.build(1e-12, 2**32 - 1, mechanism="direct")
