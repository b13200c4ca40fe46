"""Client side of Algorithm 1: hash with a fresh random h, then randomized response.

Direct randomized response (``params.mechanism == "direct"``) is the same with
the identity hash: z is the randomized response over [d] of the value itself,
and the report carries the constant coefficients (0, 1) (never sent).

Two paths, deliberately named apart:

* :func:`privatize` -- the **device path**. Every random draw comes from the
  operating system's CSPRNG (``os.urandom``), read through the *randomness
  contract* below, which every device client (Python, producer/js, producer/c)
  implements byte for byte. The keep decision compares a
  uniform 64-bit integer with the integer threshold
  T = floor(2^64 * e_lo / (e_lo + m - 1)), where e_lo <= e^eps is exp(eps)
  rounded down by two ulps. The realised probability ratio
  T (m - 1) / (2^64 - T) is therefore <= e^eps (never more privacy loss than
  claimed) and below it by a relative gap of at most
  :func:`ratio_gap_bound` = 2^-51 + 2^-52 + 2^64 / (T (2^64 - T)) (6.7e-16 at
  eps = 2, m = 4, where the exact gap is 4.2e-16; 5.8e-10 at eps = 30,
  m = 1000, gap 2.8e-10); the keep probability is exact to 2^-64. A replaced z is uniform over the m - 1 other
  symbols (rejection sampling, no modulo bias).
* :func:`simulate_reports` -- the **simulation path** for synthetic fleets:
  vectorized, seeded numpy ``Generator``, float64 keep probability. Never use
  it on a device: a seeded PRNG is not a privacy mechanism.

The randomness contract (docs/device.md, "Randomness contract"; vectors in
tests/vectors/privatize_v1.json): a device reads its CSPRNG as a stream of bytes,
``random(n)`` returning the next n bytes.

* ``draw_bits64``: the next 8 bytes, big-endian: uniform on [0, 2^64).
* ``draw_below(n)`` for n >= 1: n = 1 takes no bytes and gives 0; otherwise k is the
  bit length of n - 1, each try takes the next ceil(k / 8) bytes, reads them
  big-endian, keeps the low k bits and is accepted when below n (rejection
  sampling: uniform, no modulo bias; fewer than 2 tries on average).
* A report draws, in this order: a0 = draw_below(field order), a1 =
  draw_below(field order) (OCMS+RR only; direct RR draws none), the keep
  decision draw_bits64() < T, and only when not kept other = draw_below(m - 1),
  z = other if other < y else other + 1.
* A discovery report first draws its level: draw_below(levels) + 1.

The contract fixes the order and the width of every draw so that a recorded byte
stream reproduces a report exactly in every language; with a CSPRNG behind
``random`` the distribution is the mechanism's whatever the contract.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction
from typing import Callable

import numpy as np

from . import kernel
from .params import OCMSParams
from .reports import Report, ReportBatch, identity_coefficients
from .values import encode_value, limbs_for


def keep_threshold(params: OCMSParams) -> int:
    """T with P(keep) = T / 2^64 and T (m-1) / (2^64 - T) <= e^eps (see module doc)."""

    def compute() -> int:
        e_lo = Fraction(math.exp(params.epsilon)) * Fraction(2**52 - 2, 2**52)
        keep = e_lo / (e_lo + params.hash_range - 1)
        return min(math.floor(keep * 2**64), 2**64 - 1)

    return params.cached("keep_threshold", compute)


def realised_probability_ratio(params: OCMSParams) -> Fraction:
    """P(z = y | y) / P(z = y' | y), y' != y, for the device path, exactly."""
    t = keep_threshold(params)
    return Fraction(t * (params.hash_range - 1), 2**64 - t)


def ratio_gap_bound(params: OCMSParams) -> float:
    """Upper bound on the relative gap 1 - T (m-1) / ((2^64 - T) e^eps) of the device path.

    Three terms (docs/cms_core.md, "Sampling precision"): 2^-51, e_lo is
    exp(eps) lowered by the factor (1 - 2^-51) ("two ulps"); 2^-52, math.exp
    is within one ulp of e^eps; 2^64 / (T (2^64 - T)), T = floor(2^64 k) is
    below 2^64 k by less than 1, which lowers k / (1 - k) by a relative
    1 / (2^64 k (1 - k)) at most. The gap is never negative (T (m-1) /
    (2^64 - T) <= e^eps, the privacy claim).
    """
    t = keep_threshold(params)
    return 2.0**-51 + 2.0**-52 + float(Fraction(2**64, t * (2**64 - t)))


#: A device's source of random bytes: ``random(n)`` returns the next n bytes of a CSPRNG.
RandomBytes = Callable[[int], bytes]


def draw_bits64(random: RandomBytes) -> int:
    """Uniform on [0, 2^64): the next 8 bytes, big-endian (the randomness contract, module doc)."""
    return int.from_bytes(random(8), "big")


def draw_below(random: RandomBytes, n: int) -> int:
    """Uniform on [0, n) by rejection over the low bit_length(n - 1) bits of ceil(k / 8) big-endian bytes."""
    if n < 1:
        raise ValueError(f"draw_below: n must be >= 1, got {n}")
    if n == 1:
        return 0
    bits = (n - 1).bit_length()
    width, mask = (bits + 7) // 8, (1 << bits) - 1
    while True:
        candidate = int.from_bytes(random(width), "big") & mask
        if candidate < n:
            return candidate


def randomized_response(params: OCMSParams, y: int, random: RandomBytes = os.urandom) -> int:
    """CSPRNG randomized response over [m] for a hashed value y."""
    if draw_bits64(random) < keep_threshold(params):
        return y
    other = draw_below(random, params.hash_range - 1)
    return other if other < y else other + 1


def privatize(params: OCMSParams, value, random: RandomBytes = os.urandom) -> Report:
    """Device path: one epsilon-LDP report of ``value`` (CSPRNG randomness only).

    Privacy: the report is epsilon-LDP (see :mod:`cms_core.params`) when ``random`` is a
    CSPRNG (the default, ``os.urandom``); any other ``random`` is for reproducing test
    vectors only.
    Runtime: two field draws, one field multiply and one hash; microseconds.
    """
    x = encode_value(params, value)
    if params.is_direct:
        return Report(0, 1, randomized_response(params, x, random))
    order = params.field.order
    a0 = draw_below(random, order)
    a1 = draw_below(random, order)
    y = params.field.hash_value(a0, a1, x) % params.hash_range
    return Report(a0, a1, randomized_response(params, y, random))


def _random_coefficients(params: OCMSParams, rng: np.random.Generator, n: int) -> np.ndarray:
    if params.field.kind == "prime":
        return rng.integers(0, params.field.order, size=n, dtype=np.uint64)
    shape = (n,) if limbs_for(params) == 1 else (n, 2)
    return rng.integers(0, 2**64, size=shape, dtype=np.uint64, endpoint=False)


def simulate_reports(params: OCMSParams, elements: np.ndarray, rng: np.random.Generator) -> ReportBatch:
    """Simulation path: reports for field elements ``elements`` (one per report).

    ``elements`` are encoded values (uint64 (n,), or (n, 2) for GF(2^128)), e.g.
    from :func:`cms_core.values.elements_to_array` or a ``np.arange`` slice.
    Seeded and vectorized; uses the compiled hash when available.
    """
    n = int(elements.shape[0])
    if params.is_direct:
        a0, a1 = identity_coefficients(n)
        y = np.asarray(elements, dtype=np.uint64)
    else:
        a0 = _random_coefficients(params, rng, n)
        a1 = _random_coefficients(params, rng, n)
        y = kernel.hash_residues(params, a0, a1, elements)
    keep = rng.random(n) < params.keep_probability
    other = rng.integers(0, params.hash_range - 1, size=n, dtype=np.uint64)
    other = other + (other >= y).astype(np.uint64)
    z = np.where(keep, y, other).astype(np.uint32)
    return ReportBatch(a0, a1, z)


__all__ = [
    "RandomBytes",
    "draw_below",
    "draw_bits64",
    "keep_threshold",
    "privatize",
    "randomized_response",
    "ratio_gap_bound",
    "realised_probability_ratio",
    "simulate_reports",
]
