import pytest

from cms_core.errors import InvalidParameterError
from cms_core.fields import (
    IRREDUCIBLE_POLYNOMIALS,
    PRIME_64,
    SMALL_PRIME_LIMIT,
    BinaryField,
    PrimeField,
    choose_field,
    clmul,
    is_prime,
    next_prime,
    poly_mod,
)


def test_primality_known_values():
    assert is_prime(PRIME_64)
    assert not is_prime(2**64 - 57)
    assert is_prime(2**32 - 5) and not is_prime(2**32 - 3)
    assert [n for n in range(30) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    assert not is_prime(3215031751)  # strong pseudoprime to bases 2, 3, 5, 7
    assert next_prime(1001) == 1009


def _poly_gcd(a: int, b: int) -> int:
    while b:
        a, b = b, poly_mod(a, b)
    return a


def _x_pow_2k_mod(k: int, f: int) -> int:
    r = 0b10  # x
    for _ in range(k):
        r = poly_mod(clmul(r, r), f)
    return r


@pytest.mark.parametrize("degree", sorted(IRREDUCIBLE_POLYNOMIALS))
def test_polynomials_are_irreducible_rabin(degree):
    # Rabin: f of degree l is irreducible iff x^(2^l) = x mod f and
    # gcd(x^(2^(l/q)) - x, f) = 1 for every prime q | l (here only q = 2).
    f = IRREDUCIBLE_POLYNOMIALS[degree]
    assert f.bit_length() - 1 == degree
    assert _x_pow_2k_mod(degree, f) == 0b10
    assert _poly_gcd(_x_pow_2k_mod(degree // 2, f) ^ 0b10, f) == 1


def test_reducible_polynomial_fails_rabin():
    # negative control: x^64 + 1 = (x + 1)^64 is reducible
    f = (1 << 64) | 1
    assert _poly_gcd(_x_pow_2k_mod(32, f) ^ 0b10, f) != 1


@pytest.mark.parametrize("degree", [64, 128])
def test_binary_field_axioms_sample(degree):
    field = BinaryField(degree)
    a, b, c = 0x1234567890ABCDEF ^ (7 << (degree - 3)), 0xFEDCBA0987654321, (1 << degree) - 1
    assert field.mul(a, b) == field.mul(b, a)
    assert field.mul(field.mul(a, b), c) == field.mul(a, field.mul(b, c))
    assert field.mul(a, b ^ c) == field.mul(a, b) ^ field.mul(a, c)
    assert field.mul(a, 1) == a
    # Fermat: a^(2^l - 1) = 1 for a != 0
    acc, base, e = 1, a, (1 << degree) - 1
    while e:
        if e & 1:
            acc = field.mul(acc, base)
        base = field.mul(base, base)
        e >>= 1
    assert acc == 1


def test_choose_field_boundaries():
    assert choose_field(1000, 4) == PrimeField(1009)
    assert choose_field(10, 100) == PrimeField(701)  # 7m dominates (erratum 5)
    assert choose_field(SMALL_PRIME_LIMIT - 10, 4) == PrimeField(2**32 - 5)
    assert choose_field(SMALL_PRIME_LIMIT - 4, 4) == PrimeField(PRIME_64)  # next prime > 2^32
    assert choose_field(2**40, 4) == PrimeField(PRIME_64)
    assert choose_field(PRIME_64 - 1, 4) == PrimeField(PRIME_64)
    assert choose_field(PRIME_64, 4) == BinaryField(64)
    assert choose_field(2**64, 4) == BinaryField(64)
    assert choose_field(2**64 + 1, 4) == BinaryField(128)
    assert choose_field(2**128, 4) == BinaryField(128)
    with pytest.raises(InvalidParameterError, match="dictionary_size"):
        choose_field(2**128 + 1, 4)


def test_field_validation():
    with pytest.raises(InvalidParameterError, match="field_order=1000"):
        PrimeField(1000)
    with pytest.raises(InvalidParameterError, match="field_order"):
        PrimeField(2**64 + 13)
    with pytest.raises(InvalidParameterError, match="field_degree=32"):
        BinaryField(32)


def test_prime_hash_reference():
    f = PrimeField(PRIME_64)
    assert f.hash_value(PRIME_64 - 1, PRIME_64 - 1, PRIME_64 - 1) == ((PRIME_64 - 1) * PRIME_64) % PRIME_64
    assert f.hash_value(5, 0, 123) == 5
