"""Privacy amplification by shuffling: the central (ε, δ) of n shuffled ε0-LDP reports.

When a shuffler (a party that strips who sent each report and permutes a batch of n
reports) sits between the devices and the analyst, the analyst's view of the batch is
(ε, δ)-differentially private in the central sense for an ε far below the local ε0.

**The bound.** Feldman, McMillan and Talwar, "Hiding Among the Clones: A Simple and
Nearly Optimal Analysis of Privacy Amplification by Shuffling" (FOCS 2021,
arXiv:2012.12803), Theorem 3.2 with the numerical method of their Appendix E: for any
ε0-LDP randomizer, shuffling n reports is (ε, δ)-DP when the pair of distributions

    P = α·(A, C − A + 1) + (1 − α)·(A + 1, C − A),   Q = the same with α and 1 − α swapped,
    C ~ Bin(n − 1, e^−ε0),  A | C ~ Bin(C, 1/2),  α = e^ε0 / (e^ε0 + 1),

is (ε, δ)-indistinguishable (each of the n − 1 other reports is, with probability
e^−ε0, a "clone" that looks like the target's report on either of two neighbouring
inputs). We compute the hockey-stick divergence D_e^ε(P ‖ Q) exactly up to floating
point, as a rigorous *upper bound* (see :func:`shuffled_delta`), and bisect for the
smallest ε whose δ is at most the target: :func:`central_epsilon`.

Why this bound: it holds for every ε0-LDP randomizer, so for both mechanisms of this
project (OCMS+RR and direct RR) without a per-mechanism analysis; it is within a small
constant of optimal; and its authors published reference values (their repository
apple/ml-shuffling-amplification: n = 10^5, ε0 = 4, δ = 10^-6 gives ε between 0.1675
and 0.1728 numerically, 0.5378 by the closed form), which tests/cms_core/test_shuffle.py
checks. Tighter mechanism-specific bounds exist (e.g. Wang et al.'s variation-ratio
analysis); this one is conservative for them.

**Guarantee, cost, utility.** The returned ε is an upper bound on the central ε of one
shuffled batch of n reports against whoever sees only the shuffled batch (Kafka, the
worker, the analyst); it is never above ε0 and decreases with n. It does not hold
against the shuffler itself (it sees who sent what), and it describes one batch: a
device reporting in k batches composes (k·ε at most). Cost: O(√(n e^-ε0) · groups)
floating-point work once per (n, ε0) and O(groups) per bisection step (milliseconds
for n ≤ 10^7). Utility: shuffling changes no estimate; it only makes the privacy
claim to the analyst stronger.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import InvalidParameterError

#: Above this n the figure for MAX_EXACT_N is returned: the bound only improves with n (more
#: clones), so it is still an upper bound, and the computation stays in milliseconds.
MAX_EXACT_N = 10_000_000

#: The binomial C is evaluated on groups of consecutive values; g(c) is non-increasing in c, so
#: each group contributes at most its mass times g at its lowest c (an upper bound).
_GROUPS = 256

#: Standard deviations of C and of A | C kept in the windows; the mass outside is bounded
#: analytically (Chernoff / geometric tail) and added to δ.
_WINDOW_SD = 13.0


def _check(n, epsilon0, delta) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InvalidParameterError("n", n, "the number of shuffled reports must be an integer >= 1")
    if isinstance(epsilon0, bool) or not isinstance(epsilon0, (int, float)) or not math.isfinite(epsilon0) \
            or epsilon0 <= 0:
        raise InvalidParameterError("epsilon0", epsilon0, "the local epsilon must be a finite number > 0")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise InvalidParameterError("delta", delta, "must be in (0, 1), e.g. 1e-6 (well below 1/n)")


def _log_binomial_pmf(total: int, k: int, log_p: float, log_q: float) -> float:
    return (math.lgamma(total + 1) - math.lgamma(k + 1) - math.lgamma(total - k + 1)
            + k * log_p + (total - k) * log_q)


@dataclass(frozen=True)
class _HalfBinomial:
    """Bin(c, 1/2) on [k0, c//2 + 1]: pmf and cumulative sums from k0 (a lower bound on the CDF)."""

    c: int
    k0: int
    pmf: np.ndarray
    cdf_from_k0: np.ndarray

    @classmethod
    def build(cls, c: int) -> "_HalfBinomial":
        top = c // 2 + 1
        k0 = max(0, int(c / 2 - _WINDOW_SD * math.sqrt(c) / 2) - 64)
        ks = np.arange(k0, top + 1, dtype=np.float64)
        log0 = _log_binomial_pmf(c, k0, -math.log(2), -math.log(2))
        with np.errstate(divide="ignore"):  # c = 0: P(A = 1) = 0, log 0 = -inf
            steps = np.log((c - ks[:-1]) / (ks[:-1] + 1))
        logs = log0 + np.concatenate(([0.0], np.cumsum(steps)))
        pmf = np.exp(logs)
        return cls(c, k0, pmf, np.cumsum(pmf))

    def pmf_at_most(self, k: int) -> float:
        """An upper bound on P(A = k) (exact inside the window; the window's first value below it)."""
        if k < 0 or k > self.c:
            return 0.0
        return float(self.pmf[min(max(k, self.k0), self.k0 + len(self.pmf) - 1) - self.k0])

    def cdf_at_least(self, k: int) -> float:
        """A lower bound on P(A <= k): the window's mass up to k (the mass below k0 is left out)."""
        if k < self.k0:
            return 0.0
        return float(self.cdf_from_k0[min(k, self.k0 + len(self.cdf_from_k0) - 1) - self.k0])


class _Clones:
    """C ~ Bin(n - 1, e^-ε0) grouped, with the per-group Bin(c, 1/2) tables (independent of ε)."""

    def __init__(self, n: int, epsilon0: float):
        self.n, self.epsilon0 = n, epsilon0
        trials = n - 1
        self.alpha = 1.0 / (1.0 + math.exp(-epsilon0))  # e^ε0 / (e^ε0 + 1)
        if trials == 0:
            self.groups, self.masses, self.outside = [0], np.array([1.0]), 0.0
        else:
            p = math.exp(-epsilon0)
            mean, sd = trials * p, math.sqrt(trials * p * (1 - p))
            lo = max(0, int(mean - _WINDOW_SD * sd) - 16)
            hi = min(trials, int(mean + _WINDOW_SD * sd) + 16)
            cs = np.arange(lo, hi + 1, dtype=np.float64)
            log_lo = _log_binomial_pmf(trials, lo, math.log(p), math.log1p(-p))
            steps = np.log((trials - cs[:-1]) / (cs[:-1] + 1)) + math.log(p) - math.log1p(-p)
            pmf = np.exp(log_lo + np.concatenate(([0.0], np.cumsum(steps))))
            edges = np.unique(np.linspace(0, len(cs), min(_GROUPS, len(cs)) + 1).astype(np.int64))
            self.groups = [lo + int(start) for start in edges[:-1]]
            self.masses = np.add.reduceat(pmf, edges[:-1])
            # The mass below lo and above hi, counted with g = 1 (g <= 1): Bernstein's inequality,
            # P(|C - mean| >= x) <= exp(-x^2 / (2 (sd^2 + x/3))) for each tail.
            def tail(x: float) -> float:
                return math.exp(-x * x / (2 * (sd * sd + x / 3)))

            self.outside = (tail(mean - lo) if lo > 0 else 0.0) + (tail(hi - mean) if hi < trials else 0.0)
        self.tables = [_HalfBinomial.build(c) for c in self.groups]

    def delta(self, epsilon: float) -> float:
        """An upper bound on D_e^ε(P ‖ Q) (= D_e^ε(Q ‖ P) by the symmetry of Bin(c, 1/2))."""
        e = math.exp(epsilon)
        alpha = self.alpha
        keep_margin = alpha - e * (1 - alpha)  # > 0 while ε < ε0
        if keep_margin <= 0:
            return 0.0
        rho = keep_margin / (e * alpha - (1 - alpha))
        beta = rho / (1 + rho)
        total = self.outside
        for mass, table in zip(self.masses, self.tables):
            # P_c(k) > e^ε Q_c(k) exactly for k < β (c + 1): the ratio falls as k grows.
            t = math.ceil(beta * (table.c + 1)) - 1
            if t < 0:
                continue
            # Σ_{k<=t} P_c(k) - e^ε Q_c(k) = (1 - e^ε) P(A <= t - 1) + keep_margin · P(A = t).
            g = (1 - e) * table.cdf_at_least(t - 1) + keep_margin * table.pmf_at_most(t)
            # Below the window, P(A <= t - 1) < e^-84 and the lower bound above is still valid.
            total += float(mass) * max(g, 0.0)
        return min(total, 1.0)


@lru_cache(maxsize=4)  # tables of up to ~30 MB each (n = 10^7, small ε0)
def _clones(n: int, epsilon0: float) -> _Clones:
    return _Clones(n, epsilon0)


def shuffled_delta(n: int, epsilon0: float, epsilon: float) -> float:
    """An upper bound on the δ at which n shuffled ε0-LDP reports are (ε, δ)-DP (FMT21, Thm 3.2)."""
    _check(n, epsilon0, 0.5)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon) or epsilon < 0:
        raise InvalidParameterError("epsilon", epsilon, "must be a finite number >= 0")
    return _clones(min(int(n), MAX_EXACT_N), float(epsilon0)).delta(float(epsilon))


def central_epsilon(n: int, epsilon0: float, delta: float, *, tolerance: float = 1e-6) -> float:
    """The central ε of one shuffled batch of n ε0-LDP reports at δ (an upper bound, ≤ ε0).

    Bisection on ε for :func:`shuffled_delta` ≤ ``delta``; the result is the upper end of
    the last interval, so it is never below the true figure of this bound by more than
    ``tolerance`` · ε0 and never above ε0. n above :data:`MAX_EXACT_N` uses that n.
    """
    _check(n, epsilon0, delta)
    clones = _clones(min(int(n), MAX_EXACT_N), float(epsilon0))
    low, high = 0.0, float(epsilon0)
    closed = closed_form_central_epsilon(n, epsilon0, delta)
    if closed is not None and closed < high and clones.delta(closed) <= delta:
        high = closed
    while high - low > tolerance * epsilon0:
        mid = (low + high) / 2
        if clones.delta(mid) <= delta:
            high = mid
        else:
            low = mid
    return high


def closed_form_central_epsilon(n: int, epsilon0: float, delta: float) -> float | None:
    """FMT21's closed form (Theorem 3.1, as in its authors' code), or None outside its regime.

    Valid for ε0 <= ln(n / (16 ln(4/δ))); looser than :func:`central_epsilon` (0.538 vs
    0.17 at n = 10^5, ε0 = 4, δ = 10^-6), kept as a check and a starting bracket.
    """
    _check(n, epsilon0, delta)
    if n < 16 * math.log(4 / delta) or epsilon0 > math.log(n / (16 * math.log(4 / delta))):
        return None
    e0 = math.exp(epsilon0)
    a = 8 * math.sqrt(e0 * math.log(4 / delta)) / math.sqrt(n) + 8 * e0 / n
    first = math.log1p(a)
    return math.log1p((1 - math.exp(-epsilon0)) / (1 + math.exp(-epsilon0 - first)) * a)


__all__ = ["MAX_EXACT_N", "central_epsilon", "closed_form_central_epsilon", "shuffled_delta"]
