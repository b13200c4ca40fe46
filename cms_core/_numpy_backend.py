"""numpy-only field arithmetic: the fallback when the compiled kernel is absent,
and the vectorized hash of the simulation path.

Everything works on uint64 columns (GF(2^128): (n, 2) little-endian limbs) and
is bit-exact with the big-integer reference in :mod:`cms_core.fields`.
"""

from __future__ import annotations

import numpy as np

from .fields import PRIME_64, BinaryField, FiniteField, PrimeField

_U32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def _mul64(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Full 64x64 -> 128-bit product as (hi, lo) uint64 columns."""
    a = np.asarray(a, np.uint64)
    b = np.asarray(b, np.uint64)
    al, ah = a & _U32, a >> _S32
    bl, bh = b & _U32, b >> _S32
    ll = al * bl
    lh = al * bh
    hl = ah * bl
    hh = ah * bh
    mid = (ll >> _S32) + (lh & _U32) + (hl & _U32)
    lo = (ll & _U32) | ((mid & _U32) << _S32)
    hi = hh + (lh >> _S32) + (hl >> _S32) + (mid >> _S32)
    return hi, lo


def _add_mod(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """(a + b) mod p for a, b < p <= 2^64 - 59, without overflow surprises."""
    pp = np.uint64(p)
    s = a + b
    wrapped = s < a  # true sum >= 2^64 > p
    # s + 2^64 - p == s + (2^64 - p): valid because the true sum < 2p.
    s = np.where(wrapped, s + np.uint64((1 << 64) - p), s)
    return np.where((~wrapped) & (s >= pp), s - pp, s)


def _mulmod_p64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a * b mod (2^64 - 59), using 2^64 = 59 (mod p)."""
    c = np.uint64((1 << 64) - PRIME_64)  # 59
    hi, lo = _mul64(a, b)
    # hi * 2^64 + lo = hi * 59 + lo; hi*59 < 2^70: split again.
    h2, l2 = _mul64(hi, np.full_like(hi, c))
    s = lo + l2
    carry = (s < lo).astype(np.uint64)
    top = h2 + carry  # <= 59: value = top * 2^64 + s = top * 59 + s
    t = top * c
    s2 = s + t
    carry2 = s2 < s
    s2 = np.where(carry2, s2 + c, s2)  # one more 2^64 -> 59; cannot overflow again
    pp = np.uint64(PRIME_64)
    s2 = np.where(s2 >= pp, s2 - pp, s2)
    return s2


def _mulmod_small(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """a * b mod p for p < 2^32 (the product fits in uint64)."""
    return (np.asarray(a, np.uint64) * np.asarray(b, np.uint64)) % np.uint64(p)


def _clmul_reduce_64(a: np.ndarray, b: np.ndarray, poly_low: int) -> np.ndarray:
    """a * b in GF(2^64) with modulus x^64 + poly_low, bit-serial (shift-and-add)."""
    a = np.array(a, np.uint64, copy=True)
    b = np.asarray(b, np.uint64)
    acc = np.zeros(np.broadcast(a, b).shape, np.uint64)
    a = np.broadcast_to(a, acc.shape).copy()
    low = np.uint64(poly_low)
    one = np.uint64(1)
    top = np.uint64(63)
    for bit in range(64):
        sel = ((b >> np.uint64(bit)) & one).astype(bool)
        acc ^= np.where(sel, a, np.uint64(0))
        carry = (a >> top).astype(bool)
        a = a << one
        a ^= np.where(carry, low, np.uint64(0))
    return acc


def _clmul_reduce_128(a: np.ndarray, b: np.ndarray, poly_low: int) -> np.ndarray:
    """a * b in GF(2^128), (n, 2) limbs, modulus x^128 + poly_low (poly_low < 2^64)."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    a = np.broadcast_to(a, shape).copy()
    b = np.broadcast_to(b, shape)
    acc = np.zeros(shape, np.uint64)
    low = np.uint64(poly_low)
    one = np.uint64(1)
    top = np.uint64(63)
    zero = np.uint64(0)
    for bit in range(128):
        word, off = divmod(bit, 64)
        sel = ((b[..., word] >> np.uint64(off)) & one).astype(bool)
        acc[..., 0] ^= np.where(sel, a[..., 0], zero)
        acc[..., 1] ^= np.where(sel, a[..., 1], zero)
        carry_out = (a[..., 1] >> top).astype(bool)
        a[..., 1] = (a[..., 1] << one) | (a[..., 0] >> top)
        a[..., 0] = (a[..., 0] << one) ^ np.where(carry_out, low, zero)
    return acc


def field_values(field: FiniteField, a0: np.ndarray, a1: np.ndarray, x) -> np.ndarray:
    """h(x) = a0 + a1 x in the field, per report (x a scalar or per-report column)."""
    if isinstance(field, PrimeField):
        x = np.asarray(x, np.uint64)
        if field.order < (1 << 32):
            return (_mulmod_small(a1, x, field.order) + a0) % np.uint64(field.order)
        if field.order != PRIME_64:
            raise NotImplementedError("prime fields between 2^32 and 2^64 - 59 are not used")
        return _add_mod(_mulmod_p64(a1, x), np.asarray(a0, np.uint64), field.order)
    assert isinstance(field, BinaryField)
    poly_low = field.polynomial ^ field.order
    if field.degree == 64:
        return np.asarray(a0, np.uint64) ^ _clmul_reduce_64(a1, np.asarray(x, np.uint64), poly_low)
    return np.asarray(a0, np.uint64) ^ _clmul_reduce_128(a1, np.asarray(x, np.uint64), poly_low)


def residues(values: np.ndarray, m: int) -> np.ndarray:
    """Integer value mod m for field values (uint64 (n,) or (n, 2) limbs), m < 2^32."""
    mm = np.uint64(m)
    if values.ndim == 1:
        return values % mm
    # (hi * 2^64 + lo) mod m = ((hi mod m) * (2^64 mod m) + lo mod m) mod m; products < 2^64.
    c = np.uint64((1 << 64) % m)
    return ((values[..., 1] % mm) * c % mm + values[..., 0] % mm) % mm


def hash_to_range(field: FiniteField, m: int, a0: np.ndarray, a1: np.ndarray, x) -> np.ndarray:
    """Hash of paper Algorithm 1: (a0 + a1 x) mod m, as uint64 residues."""
    return residues(field_values(field, a0, a1, x), m)


def match_counts(field: FiniteField, m: int, a0, a1, z, elements: np.ndarray) -> np.ndarray:
    """For each tracked element x: #reports with hash(x) == z. O(n * D) numpy work."""
    counts = np.zeros(elements.shape[0], np.int64)
    z64 = z.astype(np.uint64)
    for i in range(elements.shape[0]):
        counts[i] = int(np.count_nonzero(hash_to_range(field, m, a0, a1, elements[i]) == z64))
    return counts
