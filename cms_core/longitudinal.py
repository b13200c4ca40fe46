"""Longitudinal reporting: memoized two-round randomized response (RAPPOR / LOLOHA), issue 38.

A device that reports the same metric every day pays, with one-shot reports, k * eps after k
reports, and anyone who links its reports can average them. Memoization bounds the loss for
life: the device hashes its value with a hash fixed for life, randomizes the hashed value once
(the *first round*, memoized) and re-randomizes that memoized response freshly for each report
(the *second round*). Whoever links all of a device's reports learns at most the memoized
response, which is ``lifetime_epsilon``-LDP (eps_inf) of the value; one report alone is
``epsilon``-LDP (eps_1 < eps_inf).

Notation (LOLOHA: Arcolezi, Pinzon, Palamidessi, Gambs, EDBT 2023; RAPPOR: Erlingsson, Pihur,
Korolova, CCS 2014), over g symbols (g = m, the hash range; g = d for direct RR):

* first round, GRR(eps_inf) over [g] (memoized):
  p1 = e^eps_inf / (e^eps_inf + g - 1),  q1 = 1 / (e^eps_inf + g - 1)
  (:func:`first_round_probabilities`);
* second round, GRR over [g] with keep probability p2 (fresh every report):
  p2 - q2 = (e^eps_1 - 1)(e^eps_inf + g - 1) / ((e^eps_1 + g - 1)(e^eps_inf - 1)),
  p2 = (1 + (g - 1)(p2 - q2)) / g,  q2 = (1 - p2) / (g - 1)
  (:func:`second_round_probabilities`);
* the chain of two symmetric GRRs is a symmetric GRR with
  p* - q* = (p1 - q1)(p2 - q2), so with the p2 above one report is *exactly* GRR(eps_1) over [g]:
  p* = e^eps_1 / (e^eps_1 + g - 1) (:func:`chained_probabilities`). The second round is chosen
  tight: LOLOHA's published p2 (:func:`loloha_second_round_probabilities`, from L-GRR's binary
  analysis) realises less than eps_1 when g > 2 (0.948 at eps_inf = 2, eps_1 = 1, g = 3), and
  so pays variance for privacy it does not claim (4.20 against 3.77 per report there).

Consequences, each tested (tests/cms_core/test_longitudinal.py):

* **Estimator and variance of one day** (one report per device): the reports have exactly the
  law of one-shot OCMS+RR (or direct RR) at (eps_1, g) -- the hash of each device is uniform
  and independent of the others' -- so the unbiased estimator is the one-shot one with the
  chained (p*, q*), g(x) = A M/n + B (:attr:`LongitudinalParams.report`'s coefficients, m'
  included) and its variance the one-shot closed form at (eps_1, g). In LOLOHA's notation,
  f = (C/n - q1'(p2 - q2) - q2) / ((p1 - q1')(p2 - q2)) with q1' = 1/g for hashing (q1 for
  direct RR), and Var = s(1 - s) / (n (p1 - q1')^2 (p2 - q2)^2) at f = 0 with
  s = q1' p2 + (1 - q1') q2 (multi-freq-ldpy's Variance_LONG_PURE); :func:`long_pure_variance`
  is that form, checked against the one-shot one. The worker's decode is therefore the
  one-shot decode at (eps_1, g): nothing but the constants changes.
* **The optimal g** is the one-shot optimum *at eps_1* (the paper's HashRange at eps_1 with the
  metric's f* or D; :func:`cms_core.params.OCMSParams.build`): with the tight second round the
  single-report variance depends on (eps_1, g) only. It is not the one-shot m at eps_inf, and not
  LOLOHA's closed form (:func:`loloha_hash_range`), which optimises its looser p2. g also caps the
  lifetime: a device's hashed values take at most g distinct values, so a metric version costs a
  device at most g * eps_inf over its life whatever its value does (:attr:`max_lifetime_epsilon`).
* **Several reports of one device in one window** are correlated (same hash, same memoized
  response): :func:`window_variance` adds the covariance
  A^2 (p2 - q2)^2 pi (1 - pi) per pair, pi = P(memoized response = h(v)) (p1 for a device
  holding v, c p1 + (1 - c) q1 for the others). As reports per device grow, the window's
  variance tends to the one of memoized responses alone (eps_inf), not to zero.

Validation happens once, in :class:`LongitudinalParams`, with errors naming the bad value
(:class:`cms_core.errors.InvalidParameterError`, an :class:`OCMSError`).

Device path and its randomness contract (docs/device.md, "Longitudinal reports"; vectors in
tests/vectors/longitudinal_v1.json, shared with producer/js and producer/c). A device holds one
secret S (16 to 64 random bytes, kept with its ledger). ``PRF(label)`` is the byte stream
BLAKE2b-512(key=S, data=label || i) for i = 0, 1, ... (i as 4 bytes big-endian), concatenated;
keyed BLAKE2b is a PRF/MAC like RAPPOR's HMAC-SHA256 and is already in every client. F is the
8-byte fingerprint of the report parameters (eps_1, g, field, d, binding "metric@version").

* the hash of (device, metric version): a0 = draw_below(PRF("ocms-longitudinal-v1/hash" || F),
  order), then a1 the same way from the same stream (OCMS+RR; direct RR has the identity);
* the memoized response to a hashed value y (y < 2^32): randomized response over [g] at
  eps_inf drawn from PRF("ocms-longitudinal-v1/memo" || F || y as 4 bytes big-endian), with the
  one-shot contract (keep when draw_bits64 < T1 = keep_threshold at eps_inf, else
  other = draw_below(g - 1) and other + 1 when other >= y): derived, never stored;
* the report: from the CSPRNG, keep the memoized response y1 when draw_bits64 < T2
  (:func:`report_threshold`), else other = draw_below(g - 1), z = other if other < y1 else
  other + 1. The report is (a0, a1, z): today's shape, today's wire format.

The ledger charges eps_inf the first time a hashed value y of a metric version is reported, and
nothing for later reports of it (:func:`seen_key` is what it remembers, as a keyed digest).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from . import kernel, theory
from .errors import InvalidParameterError
from .params import MAX_EPSILON, OCMSParams, check_epsilon
from .privatize import RandomBytes, draw_below, draw_bits64, keep_threshold, randomized_response
from .reports import Report, ReportBatch, identity_coefficients
from .values import encode_value

CONTRACT = b"ocms-longitudinal-v1"
HASH_LABEL = CONTRACT + b"/hash"
MEMO_LABEL = CONTRACT + b"/memo"
SEEN_LABEL = CONTRACT + b"/seen"
MIN_SECRET_BYTES = 16
MAX_SECRET_BYTES = 64  # BLAKE2b's key size
TWO64 = 2**64


# ----------------------------------------------------------------------------- formulas (floats)
def first_round_probabilities(lifetime_epsilon: float, g: int) -> tuple[float, float]:
    """(p1, q1) of the memoized GRR(eps_inf) over [g]."""
    e = math.exp(lifetime_epsilon)
    return e / (e + g - 1), 1.0 / (e + g - 1)


def second_round_probabilities(lifetime_epsilon: float, epsilon: float, g: int) -> tuple[float, float]:
    """(p2, q2) of the fresh round, tight: the chain of both rounds is exactly GRR(eps_1) over [g]."""
    e_inf, e_1 = math.exp(lifetime_epsilon), math.exp(epsilon)
    delta = (e_1 - 1) * (e_inf + g - 1) / ((e_1 + g - 1) * (e_inf - 1))
    p2 = (1 + (g - 1) * delta) / g
    return p2, (1 - p2) / (g - 1)


def loloha_second_round_probabilities(lifetime_epsilon: float, epsilon: float, g: int) -> tuple[float, float]:
    """LOLOHA's published (p2, q2) (L-GRR, Arcolezi et al. 2022): exact for g = 2, below eps_1 for g > 2.

    For comparison only: with it the chain realises :func:`chained_epsilon` < eps_1 when g > 2.
    """
    p1, q1 = first_round_probabilities(lifetime_epsilon, g)
    e = math.exp(epsilon)
    p2 = (q1 - e * p1) / (-p1 * e + g * q1 * e - q1 * e - p1 * (g - 1) + q1)
    return p2, (1 - p2) / (g - 1)


def loloha_hash_range(lifetime_epsilon: float, epsilon: float) -> int:
    """LOLOHA's closed-form optimal g for its own p2 (rounded, >= 2): for comparison only."""
    a, alpha = lifetime_epsilon, epsilon / lifetime_epsilon
    E = math.exp
    root = math.sqrt(E(4 * a) - 14 * E(2 * a) - 12 * E(2 * a * (alpha + 1)) + 12 * E(a * (alpha + 1))
                     + 12 * E(a * (alpha + 3)) + 1)
    g = (root - E(2 * a) + 6 * E(a) - 6 * E(a * alpha) + 1) / (6 * (E(a) - E(a * alpha)))
    return max(int(round(g)), 2)


def chained_probabilities(p1: float, q1: float, p2: float, q2: float, g: int) -> tuple[float, float]:
    """(p*, q*) of one report: P(z = y | y) and P(z = y' | y) for y' != y after both rounds."""
    keep = p1 * p2 + (1 - p1) * q2
    other = p1 * q2 + q1 * p2 + (g - 2) * q1 * q2
    return keep, other


def chained_epsilon(p1: float, q1: float, p2: float, q2: float, g: int) -> float:
    """The epsilon one report realises: ln(p* / q*)."""
    keep, other = chained_probabilities(p1, q1, p2, q2, g)
    return math.log(keep / other)


def long_pure_variance(p1: float, q1: float, p2: float, q2: float, f, n, *, g: int | None = None):
    """Var of the two-round estimator (multi-freq-ldpy's Variance_LONG_PURE), perfect hashing.

    Var = s (1 - s) / (n (p1 - q1')^2 (p2 - q2)^2), s = f (2 p1 p2 - 2 p1 q2 + 2 q2 - 1)
    + p2 q1' + q2 (1 - q1'), written here as s = q1'' + f (p1 - q1')(p2 - q2) with
    q1'' = q1' p2 + (1 - q1') q2. With ``g`` the server's q1' is 1/g (local hashing);
    without, q1' = q1 (direct GRR chain). It draws the holders of the n reports at random, so it
    exceeds :meth:`LongitudinalParams.variance` (fixed holders) by the sampling term f (1 - f) / n.
    """
    q = 1.0 / g if g is not None else q1
    f = np.asarray(f, dtype=np.float64)
    s = q * p2 + (1 - q) * q2 + f * (p1 - q) * (p2 - q2)
    return s * (1 - s) / (np.asarray(n, dtype=np.float64) * (p1 - q) ** 2 * (p2 - q2) ** 2)


# ----------------------------------------------------------------------------- parameters
def check_lifetime_epsilon(lifetime_epsilon, epsilon: float) -> float:
    """eps_inf validated against the per-report eps_1 (errors name ``lifetime_epsilon``)."""
    if isinstance(lifetime_epsilon, bool) or not isinstance(lifetime_epsilon, (int, float)):
        raise InvalidParameterError("lifetime_epsilon", lifetime_epsilon, "must be a real number")
    value = float(lifetime_epsilon)
    if math.isnan(value) or math.isinf(value):
        raise InvalidParameterError("lifetime_epsilon", lifetime_epsilon, "must be finite")
    if value > MAX_EPSILON:
        raise InvalidParameterError("lifetime_epsilon", lifetime_epsilon, f"must be <= {MAX_EPSILON:g}")
    if not value > epsilon:
        raise InvalidParameterError("lifetime_epsilon", lifetime_epsilon,
                                    f"must be above the per-report epsilon {epsilon!r}: the memoized response is "
                                    "what every report of a value reveals together, one report reveals less")
    if value / epsilon < 1 + 1e-9:
        raise InvalidParameterError("lifetime_epsilon", lifetime_epsilon,
                                    f"must exceed the per-report epsilon {epsilon!r} by a relative 1e-9 at least "
                                    "(the second round would have nothing left to randomize)")
    return value


@dataclass(frozen=True)
class LongitudinalParams:
    """A metric version's longitudinal mode: lifetime budget eps_inf per memoized value, eps_1 per report.

    Attributes:
        lifetime_epsilon: eps_inf, what all reports of one memoized (hashed) value reveal together.
        report: the parameters every report is decoded with: epsilon = eps_1 and hash range g
            (one-shot OCMS+RR or direct RR at eps_1; the worker's sketch uses them unchanged).
    """

    lifetime_epsilon: float
    report: OCMSParams

    def __post_init__(self):
        if not isinstance(self.report, OCMSParams):
            raise InvalidParameterError("report", type(self.report).__name__, "must be an OCMSParams")
        object.__setattr__(self, "lifetime_epsilon", check_lifetime_epsilon(self.lifetime_epsilon, self.report.epsilon))
        try:
            self.memo  # the first round must be usable at (eps_inf, g)
        except InvalidParameterError as exc:
            raise InvalidParameterError("lifetime_epsilon", self.lifetime_epsilon, exc.reason) from None

    @classmethod
    def build(cls, lifetime_epsilon: float, epsilon: float, dictionary_size: int | None = None, *,
              mechanism: str = "ocms", **build_args) -> "LongitudinalParams":
        """eps_inf and the report parameters chosen at eps_1 (``OCMSParams.build`` arguments; "auto" compares
        the mechanisms at eps_1, which is what a day's variance depends on)."""
        epsilon = check_epsilon(epsilon)
        check_lifetime_epsilon(lifetime_epsilon, epsilon)
        return cls(lifetime_epsilon, OCMSParams.build(epsilon, dictionary_size, mechanism=mechanism, **build_args))

    # ------------------------------------------------------------------ derived parameters
    @property
    def epsilon(self) -> float:
        """eps_1: what one report reveals."""
        return self.report.epsilon

    @property
    def g(self) -> int:
        return self.report.hash_range

    @property
    def memo(self) -> OCMSParams:
        """The first round's parameters: randomized response over the same [g] at eps_inf (never on the wire)."""
        # keyed by eps_inf: two modes may share one report parameter set (tests, audits' leaky controls)
        return self.report.cached(("longitudinal_memo", self.lifetime_epsilon), lambda: dataclasses.replace(
            self.report, epsilon=self.lifetime_epsilon, mode="fixed", f_star=None, tracked_count=None))

    @property
    def max_lifetime_epsilon(self) -> float:
        """The most one device can spend on this metric version over its life: g * eps_inf."""
        return self.g * self.lifetime_epsilon

    def lifetime_spend(self, distinct_hashed_values: int) -> float:
        """eps_inf per distinct hashed (memoized) value a device has reported: at most g of them."""
        return min(int(distinct_hashed_values), self.g) * self.lifetime_epsilon

    @property
    def probabilities(self) -> dict:
        """p1, q1, p2, q2 and the chained p*, q* (floats, nominal)."""
        p1, q1 = first_round_probabilities(self.lifetime_epsilon, self.g)
        p2, q2 = second_round_probabilities(self.lifetime_epsilon, self.epsilon, self.g)
        keep, other = chained_probabilities(p1, q1, p2, q2, self.g)
        return {"p1": p1, "q1": q1, "p2": p2, "q2": q2, "p_star": keep, "q_star": other}

    # ------------------------------------------------------------------ utility
    @property
    def estimator_coefficients(self) -> tuple[float, float]:
        """(A, B): g(x) = A M/n + B, the one-shot coefficients at (eps_1, g) (the chain is GRR(eps_1))."""
        return self.report.estimator_coefficients

    def variance(self, f, n):
        """Var of one window's estimate with one report per device (a day of daily reports)."""
        return self.report.variance(f, n)

    def report_covariance(self, f):
        """Covariance of the estimates of two reports of one device, averaged over devices, at frequency f."""
        a, _ = self.estimator_coefficients
        p = self.probabilities
        p1, q1, d2 = p["p1"], p["q1"], p["p2"] - p["q2"]
        c = float(self.report.collision_probability)
        pi_other = c * p1 + (1 - c) * q1
        f = np.asarray(f, dtype=np.float64)
        return a * a * d2 * d2 * (f * p1 * (1 - p1) + (1 - f) * pi_other * (1 - pi_other))

    def window_variance(self, f, n, reports_per_device: float = 1.0):
        """Var of a window of n reports in which every device sent ``reports_per_device`` (k) of one value:
        [Var1 + (k - 1) Cov] / n, Var1 the variance per report."""
        k = np.asarray(reports_per_device, dtype=np.float64)
        return (self.variance(f, 1) + (k - 1) * self.report_covariance(f)) / np.asarray(n, dtype=np.float64)

    def memoized_variance(self, f, devices):
        """The limit of :meth:`window_variance` as reports per device grow: what averaging many days
        cannot remove (the memoized responses' noise), for ``devices`` devices."""
        return self.report_covariance(f) / np.asarray(devices, dtype=np.float64)

    # ------------------------------------------------------------------ description
    def describe(self) -> dict:
        """JSON-friendly summary (``ocms plan``, the registry, the worker's answers)."""
        p = self.probabilities
        return {
            "mode": "longitudinal",
            "lifetime_epsilon": self.lifetime_epsilon,
            "epsilon_per_report": self.epsilon,
            "hash_range": self.g,
            "mechanism": self.report.mechanism,
            "max_lifetime_epsilon": self.max_lifetime_epsilon,
            "first_round_keep": p["p1"],
            "second_round_keep": p["p2"],
            "memo_threshold": str(memo_threshold(self)),
            "report_threshold": str(report_threshold(self)),
            "realised_report_epsilon": math.log(realised_report_ratio(self)),
        }


# ----------------------------------------------------------------------------- exact thresholds
def _e_lo(epsilon: float) -> Fraction:
    """exp(eps) lowered by two ulps, exactly as :func:`cms_core.privatize.keep_threshold` does."""
    return Fraction(math.exp(epsilon)) * Fraction(2**52 - 2, 2**52)


def memo_threshold(lp: LongitudinalParams) -> int:
    """T1: the first round keeps y when draw_bits64 < T1 (the one-shot threshold at eps_inf over [g])."""
    return keep_threshold(lp.memo)


def report_threshold(lp: LongitudinalParams) -> int:
    """T2: the second round keeps the memoized response when draw_bits64 < T2.

    Exact rationals from the realised T1: the chain's p* - q* is set to (R - 1)/(R + g - 1),
    R = e^eps_1 lowered by two ulps, and p2 rounded down, so the realised ratio p*/q* never
    exceeds e^eps_1 (:func:`realised_report_ratio`).
    """
    def compute() -> int:
        g = lp.g
        p1 = Fraction(memo_threshold(lp), TWO64)
        q1 = (1 - p1) / (g - 1)
        r = _e_lo(lp.epsilon)
        delta = ((r - 1) / (r + g - 1)) / (p1 - q1)
        if delta >= 1:  # the first round alone is already as private: keep every memoized response
            return TWO64 - 1
        p2 = (1 + (g - 1) * delta) / g
        return min(math.floor(p2 * TWO64), TWO64 - 1)

    return lp.report.cached(("longitudinal_t2", lp.lifetime_epsilon), compute)


def realised_report_ratio(lp: LongitudinalParams) -> Fraction:
    """p*/q* of one report on the device path, exactly (<= e^eps_1)."""
    g = lp.g
    p1 = Fraction(memo_threshold(lp), TWO64)
    p2 = Fraction(report_threshold(lp), TWO64)
    q1, q2 = (1 - p1) / (g - 1), (1 - p2) / (g - 1)
    keep = p1 * p2 + (1 - p1) * q2
    return keep / ((1 - keep) / (g - 1))


def realised_memo_ratio(lp: LongitudinalParams) -> Fraction:
    """p1/q1 of the memoized response on the device path, exactly (<= e^eps_inf)."""
    t = memo_threshold(lp)
    return Fraction(t * (lp.g - 1), TWO64 - t)


# ----------------------------------------------------------------------------- device path
def check_secret(secret) -> bytes:
    if not isinstance(secret, (bytes, bytearray)):
        raise InvalidParameterError("device_secret", type(secret).__name__, "must be bytes")
    if not MIN_SECRET_BYTES <= len(secret) <= MAX_SECRET_BYTES:
        raise InvalidParameterError("device_secret", f"{len(secret)} bytes",
                                    f"must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} random bytes")
    return bytes(secret)


def new_device_secret() -> bytes:
    """32 bytes from the CSPRNG: the device's secret for every longitudinal metric."""
    return os.urandom(32)


def prf_stream(secret: bytes, label: bytes) -> RandomBytes:
    """The byte stream BLAKE2b-512(key=secret, label || i), i = 0, 1, ... (4 bytes big-endian), read in order."""
    secret = check_secret(secret)
    state = {"buffer": b"", "counter": 0}

    def read(n: int) -> bytes:
        while len(state["buffer"]) < n:
            block = hashlib.blake2b(label + state["counter"].to_bytes(4, "big"), key=secret, digest_size=64).digest()
            state["buffer"] += block
            state["counter"] += 1
        out, state["buffer"] = state["buffer"][:n], state["buffer"][n:]
        return out

    return read


def device_hash(lp: LongitudinalParams, secret: bytes) -> tuple[int, int]:
    """(a0, a1) of this device for this metric version, for life; (0, 1) for direct RR."""
    if lp.report.is_direct:
        return 0, 1
    stream = prf_stream(secret, HASH_LABEL + lp.report.fingerprint)
    order = lp.report.field.order
    a0 = draw_below(stream, order)
    return a0, draw_below(stream, order)


def hashed_value(lp: LongitudinalParams, secret: bytes, value) -> int:
    """y: the device's hash of ``value`` in [g] (the value itself for direct RR)."""
    x = encode_value(lp.report, value)
    if lp.report.is_direct:
        return x
    a0, a1 = device_hash(lp, secret)
    return lp.report.field.hash_value(a0, a1, x) % lp.g


def memoized_response(lp: LongitudinalParams, secret: bytes, y: int) -> int:
    """The first round's response to hashed value y: derived from the secret, the same every time."""
    if not 0 <= y < lp.g:
        raise InvalidParameterError("y", y, f"must be a hashed value in [0, {lp.g})")
    stream = prf_stream(secret, MEMO_LABEL + lp.report.fingerprint + y.to_bytes(4, "big"))
    return randomized_response(lp.memo, y, stream)


def second_round(lp: LongitudinalParams, y1: int, random: RandomBytes = os.urandom) -> int:
    """Fresh randomized response of the memoized y1 over [g], keep when draw_bits64 < T2."""
    if draw_bits64(random) < report_threshold(lp):
        return y1
    other = draw_below(random, lp.g - 1)
    return other if other < y1 else other + 1


def seen_key(lp: LongitudinalParams, y: int) -> bytes:
    """What a ledger remembers (as a keyed digest) to charge eps_inf once per hashed value of a version."""
    return SEEN_LABEL + lp.report.fingerprint + y.to_bytes(4, "big")


class LongitudinalReport(NamedTuple):
    report: Report
    hashed: int  # y: the ledger's key (never sent)


def privatize_longitudinal(lp: LongitudinalParams, secret: bytes, value,
                           random: RandomBytes = os.urandom) -> LongitudinalReport:
    """Device path: one report of ``value``; eps_1-LDP alone, all reports of one hashed value eps_inf-LDP.

    ``random`` is the CSPRNG of the second round (``os.urandom``); anything else is for test vectors.
    """
    x = encode_value(lp.report, value)
    if lp.report.is_direct:
        a0, a1, y = 0, 1, x
    else:
        a0, a1 = device_hash(lp, secret)
        y = lp.report.field.hash_value(a0, a1, x) % lp.g
    y1 = memoized_response(lp, secret, y)
    return LongitudinalReport(Report(a0, a1, second_round(lp, y1, random)), y)


# ----------------------------------------------------------------------------- simulation path
@dataclass(frozen=True)
class SimulatedDevices:
    """Seeded fleet state for simulations (never a device): each device's hash and memoized response."""

    a0: np.ndarray
    a1: np.ndarray
    hashed: np.ndarray
    memoized: np.ndarray


def _grr(rng: np.random.Generator, y: np.ndarray, keep: float, g: int) -> np.ndarray:
    n = y.shape[0]
    kept = rng.random(n) < keep
    other = rng.integers(0, g - 1, size=n, dtype=np.uint64)
    other = other + (other >= y).astype(np.uint64)
    return np.where(kept, y, other).astype(np.uint64)


def simulate_devices(lp: LongitudinalParams, elements: np.ndarray, rng: np.random.Generator) -> SimulatedDevices:
    """One device per element (encoded values, constant for life): hashes and memoized first rounds."""
    n = int(elements.shape[0])
    report = lp.report
    if report.is_direct:
        a0, a1 = identity_coefficients(n)
        y = np.asarray(elements, dtype=np.uint64)
    else:
        if report.field.kind != "prime":
            raise InvalidParameterError("field", str(report.field), "the simulation path takes prime fields")
        a0 = rng.integers(0, report.field.order, size=n, dtype=np.uint64)
        a1 = rng.integers(0, report.field.order, size=n, dtype=np.uint64)
        y = kernel.hash_residues(report, a0, a1, elements).astype(np.uint64)
    p1, _ = first_round_probabilities(lp.lifetime_epsilon, lp.g)
    return SimulatedDevices(a0, a1, y, _grr(rng, y, p1, lp.g))


def simulate_day(lp: LongitudinalParams, devices: SimulatedDevices, rng: np.random.Generator) -> ReportBatch:
    """One report per device: a fresh second round of each memoized response."""
    p2, _ = second_round_probabilities(lp.lifetime_epsilon, lp.epsilon, lp.g)
    z = _grr(rng, devices.memoized, p2, lp.g).astype(np.uint32)
    return ReportBatch(devices.a0, devices.a1, z)


__all__ = [
    "LongitudinalParams",
    "LongitudinalReport",
    "SimulatedDevices",
    "chained_epsilon",
    "chained_probabilities",
    "device_hash",
    "first_round_probabilities",
    "hashed_value",
    "long_pure_variance",
    "loloha_hash_range",
    "loloha_second_round_probabilities",
    "memo_threshold",
    "memoized_response",
    "new_device_secret",
    "privatize_longitudinal",
    "prf_stream",
    "realised_memo_ratio",
    "realised_report_ratio",
    "report_threshold",
    "second_round",
    "second_round_probabilities",
    "seen_key",
    "simulate_day",
    "simulate_devices",
]
