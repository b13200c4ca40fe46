"""What a discovery pass tests and what it can find (docs/discovery.md): each level's parameters (its own
binding and fingerprint, m chosen for the test of f = 0), the Bonferroni-corrected cut-off, and the detection
threshold: the frequency a value needs to survive every level with probability >= 1 - miss.
"""

from __future__ import annotations

import math
from typing import Sequence

from . import theory
from .binomial import binomial_upper_tail, critical_count, match_probability, null_match_probability
from .discovery_domain import STRING_PREFIX_BITS, DiscoveryDomain
from .errors import InvalidParameterError
from .params import OCMSParams


# ---------------------------------------------------------------- parameters

def level_binding(metric: str, version: int, level: int) -> str:
    """The binding of one level's parameters: ``"name@version/levelL"`` (its own fingerprint)."""
    return f"{metric}@{version}/level{level}"


def level_params(metric: str, version: int, epsilon: float, domain: DiscoveryDomain) -> tuple[OCMSParams, ...]:
    """One OCMSParams per level (index L - 1), each at the metric's full epsilon.

    m minimises Var(f = 0) (HashRange in MSE mode with f* = 0, m ~ e^eps + 1): the
    cut-off is a test of f = 0, so that variance sets what can be detected. Strings:
    the integer dictionary [0, 2^63) of parent-hash + step elements (:func:`prefix_element_value`),
    the same at every level; integers: the dictionary [0, 2^prefix_length). Mechanism OCMS+RR.
    """
    out = []
    for level in range(1, domain.levels + 1):
        binding = level_binding(metric, version, level)
        if domain.kind == "strings":
            params = OCMSParams.build(epsilon, 1 << STRING_PREFIX_BITS, mode="mse", f_star=0.0, binding=binding)
        else:
            params = OCMSParams.build(epsilon, 1 << domain.prefix_length(level), mode="mse", f_star=0.0, binding=binding)
        out.append(params)
    return tuple(out)


# ------------------------------------------------------------------- cut-off

def per_test_alpha(alpha: float, levels: int, candidates: int) -> float:
    """Bonferroni: alpha spread evenly over the levels, then over that level's candidates."""
    if not 0.0 < alpha < 1.0:
        raise InvalidParameterError("alpha", alpha, "must be in (0, 1)")
    return alpha / (levels * max(1, candidates))


def cutoff_frequency(params: OCMSParams, n: int, count: int) -> float:
    """The frequency estimate g = A k / n + B at the critical count k (the cut-off on the estimate scale)."""
    if n <= 0:
        return math.inf
    return float(theory.estimate_frequencies(params.estimator_coefficients, count, n))


def detection_probability(params: OCMSParams, n: int, frequency: float, count: int) -> float:
    """P(a prefix of true frequency f survives a level with n reports and critical count k), exactly."""
    return binomial_upper_tail(n, min(1.0, match_probability(params, frequency)), count)


def detection_threshold(params: OCMSParams, reports_per_level: int, levels: int, candidates_per_level: int,
                        *, alpha: float = 0.05, miss: float = 0.05) -> float:
    """Smallest frequency f found with probability >= 1 - ``miss`` when it must survive ``levels`` levels.

    Each level has ``reports_per_level`` reports and ``candidates_per_level``
    candidates (the Bonferroni divisor); the value's prefixes have frequency
    >= f, so surviving every level with probability >= 1 - miss / levels each
    suffices (union bound). Exact binomial tails, bisection on f.
    """
    return levels_detection_threshold([params] * levels, [reports_per_level] * levels, [candidates_per_level] * levels,
                                      alpha=alpha, miss=miss)


#: A window's detection threshold is the frequency found with probability >= 1 - DETECTION_MISS.
DETECTION_MISS = 0.05


def levels_detection_threshold(params_by_level: Sequence[OCMSParams], reports_per_level: Sequence[int],
                               candidates_per_level: Sequence[int], *, alpha: float = 0.05,
                               miss: float = DETECTION_MISS) -> float:
    """Smallest frequency f found with probability >= 1 - ``miss`` when it must survive every level
    L with ``reports_per_level[L-1]`` reports tested at the critical count of
    ``candidates_per_level[L-1]`` candidates (:func:`detection_threshold` with levels that differ:
    one window's). +inf when a level has no reports, or not even f = 1 passes.
    """
    levels = len(params_by_level)
    if not levels or min(int(n) for n in reports_per_level) <= 0:
        return math.inf
    tests = [(params, int(n), critical_count(int(n), null_match_probability(params), per_test_alpha(alpha, levels, k)))
             for params, n, k in zip(params_by_level, reports_per_level, candidates_per_level)]
    target = 1.0 - miss / levels

    def found(f: float) -> bool:
        return all(detection_probability(params, n, f, k) >= target for params, n, k in tests)

    lo, hi = 0.0, 1.0
    if not found(hi):
        return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        if found(mid):
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-9 * hi:  # far below any frequency a report count can tell apart
            break
    return hi


def window_detection_threshold(domain: DiscoveryDomain, params_by_level: Sequence[OCMSParams],
                               reports_per_level: Sequence[int], candidates: Sequence[int], *,
                               alpha: float = 0.05, miss: float = DETECTION_MISS) -> float:
    """The frequency a value needed to be found in this window with probability >= 1 - ``miss``, whatever
    its length (a value that ends earlier must survive fewer levels, so this is enough for it too):
    every level's own reports, its candidates as decoded (``candidates[L-1]``; a level the pass did
    not reach, or reached with fewer, counts one survivor's children, the fewest a found value brings).
    """
    counts = [max(int(candidates[level - 1]) if level <= len(candidates) else 0, domain.branching(level))
              for level in range(1, domain.levels + 1)]
    return levels_detection_threshold(params_by_level, reports_per_level, counts, alpha=alpha, miss=miss)
