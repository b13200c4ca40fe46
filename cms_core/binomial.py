"""The exact one-sided binomial test of f = 0: a report matches a value nobody holds with probability
q0 = -B/A, so that value's match count is exactly Binomial(n, q0), and it is above the noise (discovery:
it survives a level) when the count reaches the critical count k. :mod:`cms_core.theory` ("Above the
noise") has why this test and not its normal approximation; :func:`cms_core.sketch.noise_test` and
:mod:`cms_core.discovery` both use it.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

import numpy as np

from .errors import InvalidParameterError
from .params import OCMSParams


def binomial_upper_tail(n: int, p: float, k: int) -> float:
    """P(Binomial(n, p) >= k), summed exactly in log space from k upward (terms fall geometrically past the mode)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    lgn = math.lgamma(n + 1)

    def log_term(j: int) -> float:
        return lgn - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_p + (n - j) * log_q

    mode = int((n + 1) * p)
    if k <= mode:  # the complement is the short side: sum the lower tail instead
        return max(0.0, 1.0 - _lower_tail(n, k - 1, log_term))
    total, j, first = 0.0, k, log_term(k)
    while j <= n:
        t = math.exp(log_term(j) - first)
        total += t
        if t < 1e-17 * total:
            break
        j += 1
    return min(1.0, total * math.exp(first))


def _lower_tail(n: int, k: int, log_term) -> float:
    """P(X <= k) summed from k downward."""
    total, j, first = 0.0, k, log_term(k)
    while j >= 0:
        t = math.exp(log_term(j) - first)
        total += t
        if t < 1e-17 * total:
            break
        j -= 1
    return min(1.0, total * math.exp(first))


def null_match_probability(params: OCMSParams) -> float:
    """P(a report matches a value nobody holds): q0 with A q0 + B = 0 (g is unbiased, Theorem g_x_def)."""
    a, b = params.estimator_coefficients
    return -b / a


def match_probability(params: OCMSParams, frequency: float) -> float:
    """P(a report matches a value of true frequency f): q0 + f / A (E[M/n] = (f - B) / A)."""
    a, _ = params.estimator_coefficients
    return null_match_probability(params) + frequency / a


@functools.lru_cache(maxsize=4096)
def critical_count(n: int, p0: float, alpha: float) -> int:
    """Smallest k with P(Binomial(n, p0) >= k) <= alpha: the exact one-sided test of f = 0.

    The binomial pmf over a window of the mean +- a dozen standard deviations (up to where the
    level can fall), from one ``lgamma`` and a cumulative sum of log ratios, summed from the far
    end: O(sqrt(n)) numpy work (about 0.1 ms at n = 10^4, 30 ms at 10^9). Mass outside the window
    is below 1e-30. Cached: answers of one window ask for the same count again.
    """
    if not 0.0 < alpha < 1.0:
        raise InvalidParameterError("alpha", alpha, "must be in (0, 1)")
    if n <= 0 or p0 <= 0.0:
        return 1
    if p0 >= 1.0:
        return n + 1
    mean, sd = n * p0, math.sqrt(n * p0 * (1.0 - p0))
    z = max(NormalDist().inv_cdf(1.0 - alpha), 0.0)
    lo = max(0, int(mean - 12.0 * sd - 12))
    hi = min(n, int(mean + (z + 12.0) * sd + 3.0 * z * z + 12))  # room for the skew of small n p0
    j = np.arange(lo, hi, dtype=np.float64)
    log_first = (math.lgamma(n + 1) - math.lgamma(lo + 1) - math.lgamma(n - lo + 1) + lo * math.log(p0)
                 + (n - lo) * math.log1p(-p0))
    logs = np.empty(hi - lo + 1)
    logs[0] = log_first
    np.cumsum(np.log(n - j) - np.log(j + 1.0) + (math.log(p0) - math.log1p(-p0)), out=logs[1:])
    logs[1:] += log_first
    top = float(logs.max())
    tail = np.cumsum(np.exp(logs - top)[::-1])[::-1] * math.exp(top)  # tail[i] = P(X >= lo + i)
    passing = np.flatnonzero(tail <= alpha)
    return lo + int(passing[0]) if passing.size else hi + 1
