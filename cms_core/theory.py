"""Every closed form of OCMS+RR, each once, next to the paper's equation name.

Notation (paper Sections "Revisit Count-mean Sketch" .. "Unbiased CMS with
Imperfect Hashing", corrected by ``docs/paper-errata.md``):

* ``e = e^eps``; ``m`` the hash range; ``n`` the number of reports;
* ``f`` a true frequency in [0, 1]; ``D`` the number of tracked values;
* ``c`` the collision probability c_bar(x, x') of the hash family, 1/m for a
  perfectly pairwise-independent family and 1/m' for H_api (Lemma in
  "Unbiased CMS with Imperfect Hashing"); ``c = 0`` for direct randomized
  response (GRR, k-RR), the CMS whose hash is the identity with m = d, where
  two distinct values never collide.

``e - 1`` is always computed as ``expm1(eps)`` so tiny epsilons keep their
precision. Functions accept numpy arrays for ``f`` where noted.
"""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

import numpy as np

from .errors import InvalidParameterError


# --- Randomized response over [m] (paper Section "Background/LDP", Eq. var_rr) ---

def rr_keep_probability(epsilon: float, m: int) -> float:
    """P(z = y): e / (e + m - 1), written to stay finite for large eps."""
    return 1.0 / (1.0 + (m - 1) * math.exp(-epsilon))


def decode_match_value(epsilon: float, m: int) -> float:
    """Q[v, u] for u = v: (e + m - 2) / (e - 1).

    Errata 1: Algorithm 1 prints (e + m - 1)/(e - 1), which biases every
    estimate by 1/((m - 1)(e - 1)); this is the entry of Q = P^-1.
    """
    return (math.expm1(epsilon) + m - 1) / math.expm1(epsilon)


def decode_mismatch_value(epsilon: float) -> float:
    """Q[v, u] for u != v: -1 / (e - 1) (Algorithm 1 ``Decode``, correct as printed)."""
    return -1.0 / math.expm1(epsilon)


def rr_variance_equal(epsilon: float, m: int) -> float:
    """Var(R | =) of Eq. var_rr: e (m - 1) / (e - 1)^2."""
    with np.errstate(divide="ignore", over="ignore"):
        return np.float64(math.exp(epsilon)) * (m - 1) / np.float64(math.expm1(epsilon)) ** 2


def rr_variance_unequal(epsilon: float, m: int) -> float:
    """Var(R | !=) of Eq. var_rr: (e + m - 2) / (e - 1)^2."""
    with np.errstate(divide="ignore", over="ignore"):
        return (np.float64(math.expm1(epsilon)) + m - 1) / np.float64(math.expm1(epsilon)) ** 2


# --- The device's keep threshold (cms_core.privatize.keep_threshold; docs/cms_core.md "Sampling precision") ---

def min_usable_epsilon(m: int) -> float:
    """Smallest epsilon whose device keep probability T / 2^64 is guaranteed above 1/m (bound 2^-50 + m^2 / ((m-1) 2^63)).

    The device keeps y when a uniform 64-bit integer is below T = floor(2^64 e_lo / (e_lo + m - 1)),
    e_lo = fl(e^eps) (1 - 2^-51) <= e^eps (never more privacy loss than claimed). T / 2^64 > 1/m needs
    e_lo - 1 >= c = m^2 / ((m - 1) 2^64 - m), and fl(e^eps) >= e^eps (1 - 2^-52), so
    eps >= log1p(c) + 3 * 2^-52 + 2^-103 suffices; 2^-50 + m^2 / ((m - 1) 2^63) is above that
    (c <= m^2 / ((m - 1) 2^63) for m >= 2). Below it the rounded keep probability may be 1/m or less:
    a report then says nothing about the value (or favours the other buckets), while every estimator
    divides by e^eps - 1 as if it did. 8.9e-16 at m = 2, 1.0e-15 at m = 1000, 4.7e-10 at m = 2^32 - 1;
    the rounding really fails below 5.6e-16 at m = 2 and 2.3e-10 at m = 2^32 - 1 (tests/cms_core/test_params.py).
    The closed forms fail later (e^eps - 1 squared underflows near 1.5e-154: variances nan). The
    rounding's bias of the estimates stays far below their noise everywhere above the bound.
    """
    return 2.0**-50 + m * m / ((m - 1) * 2.0**63)


# --- Imperfect hashing (Section "Unbiased CMS with Imperfect Hashing", erratum 4 of docs/paper-errata.md) ---

def field_quotient_remainder(field_order: int, m: int) -> tuple[int, int]:
    """q, r with p^l = q m + r, exact integers."""
    return divmod(field_order, m)


def collision_probability(field_order: int, m: int) -> Fraction:
    """c_bar(x1, x2) of H_api (Lemma): ((2q + 1) r + m q^2) / (m q + r)^2, exactly."""
    q, r = field_quotient_remainder(field_order, m)
    return Fraction((2 * q + 1) * r + m * q * q, (m * q + r) ** 2)


def effective_hash_range(field_order: int, m: int) -> Fraction:
    """m' = 1 / c_bar = (m q + r)^2 / ((2q + 1) r + m q^2), exactly (erratum 4)."""
    return 1 / collision_probability(field_order, m)


# --- Estimator g(x) (Theorem g_x_def) as an affine map of the match fraction ---

def estimator_coefficients(epsilon: float, m: int, m_eff: Fraction | None) -> tuple[float, float]:
    """(A, B) with g(x) = A * M/n + B, M = reports whose z matches h(x).

    Sum of decoded values: sum y_hat = (M (e + m - 1) - n) / (e - 1)
    (match value (e+m-2)/(e-1), mismatch -1/(e-1)), so
    g = m'/(n(m'-1)) * sum y_hat - 1/(m'-1)
      = [m'(e + m - 1) / ((m'-1)(e-1))] * M/n - (m' + e - 1) / ((m'-1)(e-1)).
    ``m_eff = None`` means no collisions (c = 0, m' -> infinity: direct RR),
    where g = (M/n - q) / (p - q) = (e + m - 1)/(e - 1) * M/n - 1/(e - 1) with
    p, q the keep and per-symbol flip probabilities (the k-RR estimator).
    """
    em1 = math.expm1(epsilon)
    if m_eff is None:
        return (em1 + m) / em1, -1.0 / em1
    mp = float(m_eff)
    mp_minus_1 = float(m_eff - 1)  # exact subtraction before rounding
    a = mp * (em1 + m) / (mp_minus_1 * em1)
    b = -(mp + em1) / (mp_minus_1 * em1)
    return a, b


def estimate_frequencies(coefficients: tuple[float, float], counts, n):
    """g(x) = A * M(x)/n + B, elementwise (the one place the estimator is applied)."""
    a, b = coefficients
    return a * (np.asarray(counts) / n) + b


# --- Poisoning: the maximal-gain attack (Cao, Jia, Gong, USENIX Security 2021) on the estimator above ---

def poisoning_gain(coefficients: tuple[float, float]) -> float:
    """Rise of a value's estimate per unit fraction of fake reports crafted to support it: A + B.

    A fake report of the maximal-gain attack always matches its target (OCMS+RR: any a0, a1
    and z = h(target); direct RR: z = target), so with a fraction beta of fakes the match
    fraction is (1 - beta) mu + beta and g = (1 - beta) f + beta (A + B): a value held by
    nobody reads beta (A + B). For OCMS+RR with m' = m, A + B = (e + m - 1)/(e - 1)
    = (1 - 1/m)/(p - 1/m), p = e/(e + m - 1); for direct RR over d values (1 - q)/(p - q) = (e + d - 2)/(e - 1),
    which grows with d. No per-report check can see it: every fake is a valid report.
    """
    a, b = coefficients
    return a + b


def fake_fraction_to_reach(gain: float, target_frequency: float, true_frequency: float = 0.0) -> float:
    """The fraction beta of fake reports that lifts a value from f to ``target_frequency``:
    (target - f) / (gain - f), from g = (1 - beta) f + beta gain (0 when already there)."""
    if target_frequency <= true_frequency:
        return 0.0
    return (target_frequency - true_frequency) / (gain - true_frequency)


def estimator_variance(epsilon: float, m: int, c_bar: float, f, n):
    """MSE(g(x)) of Theorem g_x_def (== Var, g is unbiased), for f in [0, 1].

    Var = [ (1 - f)(c V= + (1 - c) V!= + c(1 - c)) + f V= ] / (n (1 - c)^2).
    With c = 1/m it is the pairwise closed form of the errata:
    [(1 - f)(m + e - 1)^2 + f e m^2] / (n (m - 1)(e - 1)^2).
    With c = 0 (direct RR, m = d) it is the k-RR variance
    [(1 - f)(e + d - 2) + f e (d - 1)] / (n (e - 1)^2) (Eq. var_rr).
    Accepts numpy arrays for f and n.
    """
    with np.errstate(divide="ignore", over="ignore"):  # eps -> 0: the variance is +inf
        v_eq = rr_variance_equal(epsilon, m)
        v_ne = rr_variance_unequal(epsilon, m)
        f = np.asarray(f, dtype=np.float64)
        other = c_bar * v_eq + (1.0 - c_bar) * v_ne + c_bar * (1.0 - c_bar)
        return ((1.0 - f) * other + f * v_eq) / (np.asarray(n, dtype=np.float64) * (1.0 - c_bar) ** 2)


# --- Above the noise: which of D estimates stand above zero (Theorem g_x_def at f = 0, Bonferroni) ---
#
# A list of D estimates ranked by size (top-K) reads as "these values are frequent", but the largest
# of D noisy estimates of values nobody holds sits near z_{1 - 1/D} standard deviations, not at 0
# (the winner's curse), so each value's own 95% interval says nothing about the list. The noise test
# asks, for every tracked value at once, "could its true frequency be 0?", at family-wise level
# alpha = 1 - confidence: P(any value of frequency 0 is called above the noise) <= alpha.
#
# Bonferroni, not Holm. Holm's step-down rejects more, but its cut-off for one value depends on how
# many others were rejected: a one-value answer (/estimates/VALUE, a trend point, a watched
# Prometheus series) would have to read all D counts, and the floor would move with the data. With
# Bonferroni the decision depends only on the value's own count and (n, D, confidence), so every
# answer states the same flag for the same value at the cost of what it returns, and the floor is
# one number per answer. What Holm would gain is small where the question matters (a few frequent
# values among many): after k rejections its cut-off is z_{1 - alpha/(D - k)} instead of
# z_{1 - alpha/D} (D = 4,043, alpha = 0.05: 4.217 for both at k = 10, 4.212 at k = 100, 4.153 only
# once k = 1,000 values already stand far above the floor). Both are valid under any dependence
# between the D estimates (theirs share the same reports).
#
# Which distribution: under f = 0 every report matches the value independently with the same
# probability q0 = -B/A (g = A M/n + B is unbiased, Theorem g_x_def), so the match count is exactly
# M ~ Binomial(n, q0) and the estimate's variance there is Var(0, n) = A^2 q0 (1 - q0) / n, the
# theorem's variance at f = 0 -- the variance at the hypothesised frequency, not at the estimate
# (where it differs: Var is linear in f). The test is exact: a value is above the noise when
# M >= k, k the smallest count with P(Binomial(n, q0) >= k) <= alpha / D
# (:func:`cms_core.binomial.critical_count`, the test discovery uses); the noise floor is the
# estimate at k - 1, which an estimate must exceed. Its normal approximation
# z_{1 - alpha/D} sqrt(Var(0, n)) (:func:`noise_floor`) calls too many values above the noise where
# n q0 is small: for deploy/registry.yaml's flight_tailnum (eps 4, m = 55, q0 = 0.018, D = 4,043) its
# tail is 3.1 times alpha/D at n = 5,000 and still 1.37 times at n = 50,000. The exact count is the
# one-sided lower confidence bound of f inverted at f = 0: "above the noise" is "the lower bound,
# simultaneous over the D values, is above 0".

def bonferroni_level(confidence: float, tracked_count: int) -> float:
    """alpha / D: the one-sided level each of the D per-value tests of f = 0 is held to."""
    return (1.0 - confidence) / max(1, int(tracked_count))


def one_sided_z(level: float) -> float:
    """z with P(N(0, 1) > z) = level."""
    return NormalDist().inv_cdf(1.0 - level)


def noise_floor(multiplier: float, null_variance):
    """The normal approximation of the noise floor: ``multiplier`` (z_{1 - alpha/D}, :func:`one_sided_z`
    of :func:`bonferroni_level`) times the standard deviation at f = 0 (``null_variance`` = Var(0, n)
    of Theorem g_x_def at the answer's n). Used where no single binomial count exists (the
    inverse-variance combination of versions, :mod:`cms_core.combine`); one version's answers use
    the exact count (:meth:`cms_core.sketch.OCMSSketch.estimate`). Accepts a numpy array of variances.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        floor = multiplier * np.sqrt(np.asarray(null_variance, dtype=np.float64))
    return float(floor) if floor.ndim == 0 else floor


def pairwise_variance(epsilon: float, m: int, f, n):
    """Var(f_hat(x)) for a pairwise-independent family (errata closed form)."""
    e = math.exp(epsilon)
    em1 = math.expm1(epsilon)
    f = np.asarray(f, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore"):  # eps -> 0: the variance is +inf
        return ((1.0 - f) * (m + em1) ** 2 + f * e * m * m) / (np.asarray(n, dtype=np.float64) * (m - 1) * em1**2)


def worst_case_mse_of(variance, n: float, f_star: float = 1.0) -> float:
    """Worst-case MSE over f in [0, f*] of an unbiased estimator with ``variance(f, n)``.

    Every variance here is linear in f, so the max is at f = 0 or f = f*
    (Section "Optimizing CMS", objective of HashRange in MSE mode).
    """
    return float(max(variance(0.0, n), variance(f_star, n)))


def l2_loss_of(variance, n: float, tracked_count: int) -> float:
    """Worst-case l2 over D tracked values: (D - 1) Var(f=0) + Var(f=1) (errata closed forms)."""
    return float((tracked_count - 1) * variance(0.0, n) + variance(1.0, n))


def l1_bound_of(l2: float, tracked_count: int) -> float:
    """Cauchy-Schwarz bound l1 <= sqrt(D * l2) (Corollary after Theorem optimized_l1l2)."""
    return math.sqrt(tracked_count * l2)


def _pairwise(epsilon: float, m: int):
    return lambda f, n: pairwise_variance(epsilon, m, f, n)


def worst_case_mse(epsilon: float, m: int, n: float, f_star: float = 1.0) -> float:
    """Worst-case MSE of CMS+RR with a pairwise-independent family (c = 1/m)."""
    return worst_case_mse_of(_pairwise(epsilon, m), n, f_star)


def l2_loss(epsilon: float, m: int, n: float, tracked_count: int) -> float:
    """Worst-case l2 of CMS+RR with a pairwise-independent family (c = 1/m)."""
    return l2_loss_of(_pairwise(epsilon, m), n, tracked_count)


def l1_bound(epsilon: float, m: int, n: float, tracked_count: int) -> float:
    """l1 bound of CMS+RR with a pairwise-independent family (c = 1/m)."""
    return l1_bound_of(l2_loss(epsilon, m, n, tracked_count), tracked_count)


def optimized_worst_case_mse(epsilon: float, n: float, f_star: float = 1.0) -> float:
    """Theorem optimized_mse: the continuous optimum of the worst-case MSE.

    f* > 1/2: e^{eps/2} / (n (e^{eps/2} - 1)^2) (erratum 7);
    f* <= 1/2: 2 (Delta_MSE + e) / (n (e - 1)^2).
    """
    if f_star > 0.5:
        return math.exp(epsilon / 2) / (n * math.expm1(epsilon / 2) ** 2)
    return 2 * (delta_mse(epsilon, f_star) + math.exp(epsilon)) / (n * math.expm1(epsilon) ** 2)


def delta_mse(epsilon: float, f_star: float) -> float:
    """Delta_MSE of Theorem optimized_mse."""
    e = math.exp(epsilon)
    return math.exp(epsilon / 2) * math.sqrt(((1 - f_star) * e + f_star) * (f_star * e + 1 - f_star))


def delta_l(epsilon: float, tracked_count: int) -> float:
    """Delta_l of Theorem optimized_l1l2."""
    e = math.exp(epsilon)
    return math.exp(epsilon / 2) * math.sqrt((e + tracked_count - 1) * (tracked_count * e - e + 1))


def continuous_optimal_hash_range(epsilon: float, mode: str, f_star: float = 1.0, tracked_count: int | None = None) -> float:
    """The real-valued minimiser of the objective (HashRange, before rounding).

    mse, f* > 1/2 : 1 + e^{eps/2}
    mse, f* <= 1/2: 1 + Delta_MSE / (f* e + 1 - f*)   (erratum 2: not 1 + Delta_MSE)
    l2            : 1 + Delta_l / (e + D - 1)
    """
    e = math.exp(epsilon)
    if mode == "mse":
        if f_star > 0.5:
            return 1 + math.exp(epsilon / 2)
        return 1 + delta_mse(epsilon, f_star) / (f_star * e + 1 - f_star)
    if mode == "l2":
        return 1 + delta_l(epsilon, tracked_count) / (e + tracked_count - 1)
    raise InvalidParameterError("mode", mode, "expected 'mse' or 'l2'")


def hash_range_objective(epsilon: float, m: int, mode: str, f_star: float = 1.0, tracked_count: int | None = None) -> float:
    """The exact per-report objective m minimises (n = 1)."""
    if mode == "mse":
        return worst_case_mse(epsilon, m, 1.0, f_star)
    return l2_loss(epsilon, m, 1.0, tracked_count)


def optimal_hash_range(epsilon: float, mode: str, f_star: float = 1.0, tracked_count: int | None = None) -> int:
    """Integer m: argmin of the exact objective over floor/ceil of the optimum, m >= 2.

    Errata 3: rounding to the closest integer is not always optimal (e.g. eps
    = 0.7, f* = 1 picks one above). Ties go to the smaller m (smaller reports).
    """
    m_star = continuous_optimal_hash_range(epsilon, mode, f_star, tracked_count)
    candidates = sorted({max(2, math.floor(m_star)), max(2, math.ceil(m_star))})
    return min(candidates, key=lambda m: (hash_range_objective(epsilon, m, mode, f_star, tracked_count), m))


# --- Confidence intervals ---

def normal_z(confidence: float) -> float:
    """Two-sided standard-normal quantile for a confidence level in (0, 1)."""
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def chernoff_alpha(epsilon: float, m: int, confidence: float) -> float:
    """alpha with 2 exp(-alpha^2/3 * (m-1)/(e+m-1)) = 1 - confidence (Theorem cms_rr_bound)."""
    delta = 1.0 - confidence
    return math.sqrt(3.0 * math.log(2.0 / delta) * (math.expm1(epsilon) + m) / (m - 1))


def chernoff_alpha_max(epsilon: float, m: int, n):
    """Largest alpha the theorem covers: sqrt(e n / (m - 1))."""
    return np.sqrt(math.exp(epsilon) * np.asarray(n, dtype=np.float64) / (m - 1))


def hoeffding_half_width(coefficient_a: float, confidence: float, n):
    """Half-width of g = A M/n + B from Hoeffding's inequality on the n independent
    match indicators: P(|M/n - E M/n| >= t) <= 2 exp(-2 n t^2), so
    |A| sqrt(log(2/delta) / (2n)) holds with probability >= confidence.
    Distribution-free; used for direct RR's "chernoff" interval (the paper's
    Theorem cms_rr_bound covers OCMS+RR with random hashing).
    """
    delta = 1.0 - confidence
    return abs(coefficient_a) * np.sqrt(math.log(2.0 / delta) / (2.0 * np.asarray(n, dtype=np.float64)))


def reports_needed(variance_per_report: float, target_variance: float) -> int:
    """Smallest n with variance_per_report / n <= target_variance (variances scale as 1/n)."""
    return max(1, math.ceil(variance_per_report / target_variance))


# --- Linear functionals of one level's frequency oracle, i.i.d. devices (cms_core.hierarchy) ---
#
# A level of the hierarchical histogram (Cormode, Kulkarni, Srivastava, "Answering range queries under local
# differential privacy", PVLDB 2019) hears n_l devices, each a fresh draw from the node distribution f. Its
# node estimates f_hat are unbiased; a linear functional g . f_hat (a range of nodes) then has the variance
# (v - (g . u)^2) / n_l, v = sum_j g_j^2 d_j, with the per-report terms (d, u) below: the
# covariance of one report's node estimates is diag(d) - u u^T. Against the devices' own values (not a
# fresh draw) the devices' spread comes out (cms_core.hierarchy's Utility; numeric.direct_rr_functional_variance's
# population term).

def grr_level_terms(keep: float, other: float, f):
    """(d, u) of direct RR over the level's nodes (keep probability p, any other node q): exact.

    A report is one node Y with P(Y = j) = pi_j = f_j (p - q) + q; the estimate is (1[Y = j] - q) / (p - q),
    whose covariance is (diag(pi) - pi pi^T) / (p - q)^2: d = pi / (p - q)^2, u = pi / (p - q).
    (Eq. var_rr's k-RR variance is the case g = one indicator, with the devices' spread f (1 - f) added.)"""
    f = np.asarray(f, dtype=np.float64)
    gap = keep - other
    pi = f * gap + other
    return pi / gap**2, pi / gap


def ocms_level_terms(coefficients: tuple[float, float], f):
    """(d, u) of OCMS+RR over the level's nodes, g = A M/n + B (Theorem g_x_def): d = A^2 mu (1 - mu) + f^2,
    u = f, with mu = (f - B) / A the match probability of a node.

    The match indicators of two nodes u != v have covariance -(f_u f_v) / A^2 when the hash values of distinct
    values are independent (each report's fresh hash; the linear family H_api is pairwise, not 3-wise,
    independent, so this is the fully random hash's figure, checked by simulation in
    tests/cms_core/test_hierarchy.py): E[1_u 1_v] = (f_u + f_v) a b + (1 - f_u - f_v) b^2 with a = P(match | own
    value), b = P(match | another), and a - b = 1 / A."""
    a, b = coefficients
    f = np.asarray(f, dtype=np.float64)
    mu = (f - b) / a
    return a * a * mu * (1.0 - mu) + f * f, f


def range_node_counts(buckets: int, branching: int) -> np.ndarray:
    """How many nodes of each level (root excluded, leaves last) the B-adic decomposition of the prefix [0, j]
    uses, for every j in [0, k): at most B - 1 per level (Cormode et al. 2019, Section 4: a range query is
    answered by at most 2 (B - 1) nodes per level, a prefix by at most B - 1). Row j, column level - 1."""
    height = 1
    while branching**height < buckets:
        height += 1
    j = np.arange(buckets) + 1  # the prefix [0, j) has j leaves
    counts = np.empty((buckets, height), dtype=np.int64)
    for level in range(1, height + 1):
        span = branching ** (height - level)
        counts[:, level - 1] = (j // span) % branching
    return counts
