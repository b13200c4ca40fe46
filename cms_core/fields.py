"""Finite fields for the pairwise-independent hash family H_pi (paper Eq. hash_family).

A report carries a hash function h(x) = a0 + a1*x computed in a finite field
F(p^l), reduced to the hash range by ``mod m`` (the family H_api of Section
"Unbiased CMS with Imperfect Hashing"). Two kinds of field are provided:

* :class:`PrimeField` -- F(p), arithmetic mod a prime p. Used when the
  dictionary (and 7m, erratum 5) fit below 2^64 - 59.
* :class:`BinaryField` -- GF(2^l) with a fixed, documented irreducible
  polynomial. Used for dictionaries at or beyond 2^64 - 59, e.g. 128-bit
  fingerprints of strings.

Elements of either field are Python ints in [0, order). An integer value x of
the dictionary is embedded as the field element with the same integer
representation (for GF(2^l): the polynomial whose coefficient bits are the bits
of x), which is injective for x < order, so distinct values stay distinct.

All arithmetic here is exact Python big-integer arithmetic; it is the slow
reference that the compiled kernel must match bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidParameterError

#: Largest prime below 2^64 (used by the paper's Algorithm 1 as PRIME).
PRIME_64 = 2**64 - 59

#: Prime fields up to this order carry 4-byte (or smaller) coefficients and use
#: the 32-bit kernel lanes; above it the next prime field is PRIME_64.
SMALL_PRIME_LIMIT = 2**32

#: Low-weight irreducible polynomials over GF(2), as the integer whose bit i is
#: the coefficient of x^i (the leading term included). Irreducibility is checked
#: by Rabin's test in tests/cms_core/test_fields.py.
#:   GF(2^64):  x^64  + x^4 + x^3 + x + 1
#:   GF(2^128): x^128 + x^7 + x^2 + x + 1   (the GCM polynomial, unreflected)
IRREDUCIBLE_POLYNOMIALS: dict[int, int] = {
    64: (1 << 64) | 0b11011,
    128: (1 << 128) | 0b10000111,
}

# Deterministic Miller-Rabin bases: correct for all n < 3.3e24 > 2^64.
_MR_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)


def is_prime(n: int) -> bool:
    """Deterministic primality test for n < 3.3e24 (covers every field used here)."""
    if n < 2:
        return False
    for small in _MR_BASES:
        if n % small == 0:
            return n == small
    if n >= 3_317_044_064_679_887_385_961_981:
        raise InvalidParameterError("n", n, "primality test is only deterministic below 3.3e24")
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in _MR_BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def next_prime(n: int) -> int:
    """Smallest prime >= n."""
    candidate = max(n, 2)
    while not is_prime(candidate):
        candidate += 1
    return candidate


def clmul(a: int, b: int) -> int:
    """Carry-less (GF(2)[x]) product of two polynomials given as ints."""
    result = 0
    while b:
        if b & 1:
            result ^= a
        a <<= 1
        b >>= 1
    return result


def poly_mod(a: int, modulus: int) -> int:
    """Remainder of polynomial a modulo ``modulus`` over GF(2)."""
    degree = modulus.bit_length() - 1
    while a.bit_length() - 1 >= degree:
        a ^= modulus << (a.bit_length() - 1 - degree)
    return a


@dataclass(frozen=True)
class PrimeField:
    """The prime field F(p)."""

    p: int

    kind = "prime"

    def __post_init__(self):
        if not isinstance(self.p, int) or self.p < 3 or not is_prime(self.p):
            raise InvalidParameterError("field_order", self.p, "a prime field needs a prime order >= 3")
        if self.p > PRIME_64:
            raise InvalidParameterError("field_order", self.p, "prime fields stop at 2^64 - 59; use GF(2^l) above")

    @property
    def order(self) -> int:
        return self.p

    @property
    def bits(self) -> int:
        return (self.p - 1).bit_length()

    def hash_value(self, a0: int, a1: int, x: int) -> int:
        """h(x) = (a0 + a1*x) mod p, the field value before ``mod m``."""
        return (a0 + a1 * x) % self.p

    def descriptor(self) -> bytes:
        return b"prime:" + self.p.to_bytes(8, "big")

    def __str__(self) -> str:
        if self.p == PRIME_64:
            return "F(2^64 - 59)"
        return f"F({self.p})"


@dataclass(frozen=True)
class BinaryField:
    """GF(2^l) = GF(2)[x] / (irreducible polynomial of degree l)."""

    degree: int

    kind = "binary"

    def __post_init__(self):
        if self.degree not in IRREDUCIBLE_POLYNOMIALS:
            raise InvalidParameterError(
                "field_degree", self.degree, f"supported GF(2^l) degrees are {sorted(IRREDUCIBLE_POLYNOMIALS)}"
            )

    @property
    def polynomial(self) -> int:
        return IRREDUCIBLE_POLYNOMIALS[self.degree]

    @property
    def order(self) -> int:
        return 1 << self.degree

    @property
    def bits(self) -> int:
        return self.degree

    def mul(self, a: int, b: int) -> int:
        return poly_mod(clmul(a, b), self.polynomial)

    def hash_value(self, a0: int, a1: int, x: int) -> int:
        """h(x) = a0 + a1*x in GF(2^l) (addition is XOR)."""
        return a0 ^ self.mul(a1, x)

    def descriptor(self) -> bytes:
        return b"binary:" + self.degree.to_bytes(2, "big") + self.polynomial.to_bytes(17, "big")

    def __str__(self) -> str:
        return f"GF(2^{self.degree})"


FiniteField = PrimeField | BinaryField


def choose_field(dictionary_size: int, hash_range: int) -> FiniteField:
    """Smallest supported field for a dictionary [0, d) and hash range m.

    Rules (paper Algorithm 1 ``FiniteFieldSize``, corrected by erratum 5 of docs/paper-errata.md and the
    communication-cost note):

    * need = max(d + 1, 7m): 7m keeps q = floor(p/m) >= 7, which bounds the
      variance cost of imperfect hashing below tau = 1% (erratum 5);
    * need <= 2^32: the smallest prime >= need (small reports);
    * need <= 2^64 - 59: PRIME_64;
    * otherwise GF(2^64) if d <= 2^64 and 7m <= 2^64, else GF(2^128) if
      d <= 2^128. A binary field needs order >= d only: x -> a0 + a1 x is
      pairwise independent on all field elements, so the full 64-bit domain
      fits GF(2^64) (the ``+1`` of the paper does not apply).
    """
    need = max(dictionary_size + 1, 7 * hash_range)
    if need <= SMALL_PRIME_LIMIT:
        p = next_prime(need)
        if p < SMALL_PRIME_LIMIT:
            return PrimeField(p)
    if need <= PRIME_64:
        return PrimeField(PRIME_64)
    for degree in sorted(IRREDUCIBLE_POLYNOMIALS):
        if dictionary_size <= (1 << degree) and 7 * hash_range <= (1 << degree):
            return BinaryField(degree)
    raise InvalidParameterError(
        "dictionary_size", dictionary_size, "larger than 2^128, the biggest supported field"
    )

