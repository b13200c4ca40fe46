"""Privacy audit of the device path: the exact ε of both mechanisms, and a black-box lower bound.

Two independent checks of the claim "every report is ε-LDP":

* **Exact** (:func:`exact_privacy_loss`): the device path's output distribution,
  written with exact rationals from the integer keep threshold it really uses
  (:func:`cms_core.privatize.keep_threshold`), enumerated over every output and
  every pair of inputs of a small domain; the largest probability ratio is the
  mechanism's true e^ε.
* **Black box** (:func:`black_box_audit`), in the spirit of published LDP
  auditing tools (e.g. LDP-Auditor, PETS 2024): sample the real device path
  (CSPRNG) many times on two inputs x1, x2, count a distinguishing event E, and
  bound ε from below with Clopper-Pearson intervals at level alpha:
  ε_lb = ln(lower(P[E | x1]) / upper(P[E | x2])). With probability >= 1 - alpha
  the true ε is at least ε_lb, so ε_lb > ε proves a leak, and ε_lb close to ε
  shows the mechanism uses its budget (is not mis-calibrated). The events are
  the most distinguishing ones: z = x1 for direct RR; z = h(x1) where h(x1) !=
  h(x2) for OCMS+RR (the hash coefficients are public, part of the report).

Runtime: exact O(d^2 * outputs) with Fractions (small domains only); black box
O(trials) device-path calls (about 4 us direct, 9 us OCMS+RR each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np

from . import kernel
from .errors import InvalidParameterError
from .params import OCMSParams
from .privatize import keep_threshold, privatize
from .reports import ReportBatch

#: Largest number of outputs the exact enumeration accepts (p^2 m for OCMS+RR, d for direct).
MAX_EXACT_OUTPUTS = 200_000


# ----------------------------------------------------------------------- exact
def output_distribution(params: OCMSParams, value: int) -> dict[tuple[int, int, int], Fraction]:
    """P(report = (a0, a1, z) | value) of the device path, exactly, for every report with P > 0."""
    keep = Fraction(keep_threshold(params), 2**64)
    other = (1 - keep) / (params.hash_range - 1)
    m = params.hash_range
    if params.is_direct:
        return {(0, 1, z): keep if z == value else other for z in range(m)}
    order = params.field.order
    if order * order * m > MAX_EXACT_OUTPUTS:
        raise InvalidParameterError("field", str(params.field), f"too large to enumerate (p^2 m > {MAX_EXACT_OUTPUTS})")
    coefficient = Fraction(1, order * order)
    out = {}
    for a0 in range(order):
        for a1 in range(order):
            y = params.field.hash_value(a0, a1, value) % m
            for z in range(m):
                out[(a0, a1, z)] = coefficient * (keep if z == y else other)
    return out


def exact_privacy_loss(params: OCMSParams, values=None) -> Fraction:
    """max over outputs and input pairs of P(out | x) / P(out | x'): the realised e^ε, exactly."""
    values = list(range(params.dictionary_size)) if values is None else list(values)
    return worst_probability_ratio([output_distribution(params, x) for x in values], params.mechanism)


def worst_probability_ratio(distributions: list[dict], mechanism: str) -> Fraction:
    """max over outputs and pairs of the output ``distributions`` (one per input) of P(out | x) / P(out | x')."""
    worst = Fraction(0)
    for i, first in enumerate(distributions):
        for j, second in enumerate(distributions):
            if i == j:
                continue
            if first.keys() != second.keys():
                raise InvalidParameterError("params", mechanism, "outputs with zero probability under one input")
            worst = max(worst, max(first[o] / second[o] for o in first))
    return worst


# ------------------------------------------------------------- Clopper-Pearson
def _log_beta_prefactor(x: float, a: float, b: float) -> float:
    return math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    """Lentz's continued fraction for the incomplete beta function (Numerical Recipes 6.4)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            return h
    raise ArithmeticError("incomplete beta continued fraction did not converge")


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) for a, b > 0, x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(_log_beta_prefactor(x, a, b)) * _beta_continued_fraction(x, a, b) / a
    return 1.0 - math.exp(_log_beta_prefactor(x, a, b)) * _beta_continued_fraction(1.0 - x, b, a) / b


def _beta_quantile(q: float, a: float, b: float) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if regularized_incomplete_beta(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return (lo + hi) / 2


def clopper_pearson_lower(successes: int, trials: int, alpha: float) -> float:
    """One-sided exact lower bound: P(p >= bound) >= 1 - alpha."""
    if successes == 0:
        return 0.0
    return _beta_quantile(alpha, successes, trials - successes + 1)


def clopper_pearson_upper(successes: int, trials: int, alpha: float) -> float:
    """One-sided exact upper bound: P(p <= bound) >= 1 - alpha."""
    if successes == trials:
        return 1.0
    return _beta_quantile(1.0 - alpha, successes + 1, trials - successes)


# ------------------------------------------------------------------- black box
@dataclass(frozen=True)
class AuditResult:
    """Counts of the event under each input, and the lower bound on ε they imply."""

    claimed_epsilon: float
    trials: int
    hits_x1: int
    hits_x2: int
    alpha: float
    epsilon_lower_bound: float

    @property
    def leaks(self) -> bool:
        """The bound proves more privacy loss than claimed (at confidence 1 - alpha)."""
        return self.epsilon_lower_bound > self.claimed_epsilon

    @property
    def fraction_of_claim(self) -> float:
        return self.epsilon_lower_bound / self.claimed_epsilon


def distinguishing_event(params: OCMSParams, x1: int, x2: int) -> Callable[[ReportBatch], np.ndarray]:
    """The event most likely under x1 relative to x2, as a vectorized test on reports.

    Direct RR: z = x1. OCMS+RR: z = h(x1) and h(x1) != h(x2) (h from the report's
    public coefficients): P(E | x1) / P(E | x2) = keep (m - 1) / (1 - keep) = e^ε.
    """
    if params.is_direct:
        return lambda batch: batch.z == x1

    def event(batch: ReportBatch) -> np.ndarray:
        n = len(batch)
        h1 = kernel.hash_residues(params, batch.a0, batch.a1, np.full(n, x1, np.uint64))
        h2 = kernel.hash_residues(params, batch.a0, batch.a1, np.full(n, x2, np.uint64))
        return (batch.z == h1) & (h1 != h2)

    return event


def black_box_audit(
    params: OCMSParams,
    x1: int,
    x2: int,
    trials: int,
    *,
    alpha: float = 0.01,
    claimed_epsilon: float | None = None,
    device: Callable[[OCMSParams, int], object] = privatize,
) -> AuditResult:
    """Sample ``device(params, x)`` ``trials`` times for x1 and x2 and bound ε from below.

    ``alpha`` is split between the two one-sided Clopper-Pearson bounds, so the
    lower bound holds with probability >= 1 - alpha. ``device`` defaults to the
    real CSPRNG path; ``claimed_epsilon`` defaults to ``params.epsilon`` (a
    negative control passes a leaky device and the epsilon it claims).
    """
    if trials < 1:
        raise InvalidParameterError("trials", trials, "must be >= 1")
    batches = [ReportBatch.from_reports(params, [device(params, x) for _ in range(trials)]) for x in (x1, x2)]
    return audit_batches(params, x1, x2, *batches, alpha=alpha, claimed_epsilon=claimed_epsilon)


def audit_batches(
    params: OCMSParams,
    x1: int,
    x2: int,
    reports_x1: ReportBatch,
    reports_x2: ReportBatch,
    *,
    alpha: float = 0.01,
    claimed_epsilon: float | None = None,
) -> AuditResult:
    """:func:`black_box_audit` on reports made elsewhere (another device client: producer/js, producer/c),
    ``reports_x1`` all of x1 and ``reports_x2`` all of x2, as many of each."""
    trials = len(reports_x1)
    if trials < 1 or len(reports_x2) != trials:
        raise InvalidParameterError("reports", (len(reports_x1), len(reports_x2)), "need as many (>= 1) reports of x1 and x2")
    event = distinguishing_event(params, x1, x2)
    hits = [int(np.count_nonzero(event(batch))) for batch in (reports_x1, reports_x2)]
    lower = clopper_pearson_lower(hits[0], trials, alpha / 2)
    upper = clopper_pearson_upper(hits[1], trials, alpha / 2)
    bound = math.log(lower / upper) if lower > 0 else -math.inf
    return AuditResult(claimed_epsilon if claimed_epsilon is not None else params.epsilon, trials, hits[0], hits[1],
                       alpha, bound)
