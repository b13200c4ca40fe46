"""The Hadamard family of baseline oracles, for evaluation only: Hadamard Encoding (Bassily-Smith), Apple's
CMS + Hadamard Encoding and Recursive Hadamard Response (Chen et al.), with the Hadamard sign, binary
randomized response and the fast Walsh-Hadamard transform they share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import kernel, theory
from .baselines_oracle import ArrayReports, SignedSumOracle, check_source, check_tracked, check_values
from .errors import InvalidParameterError
from .params import OCMSParams, check_epsilon
from .values import limbs_for

#: Largest dictionary the Hadamard-based oracles accept: row indices x + 1 and
#: the matrix size K must fit in uint64.
MAX_HADAMARD_DICTIONARY = 2**63 - 1
#: Seed of the fixed hash family of CMS+HE (any fixed value; see AppleCMSHE).
DEFAULT_FAMILY_SEED = 0x0C45_2017


def _check_hadamard_dictionary(dictionary_size) -> None:
    if isinstance(dictionary_size, bool) or not isinstance(dictionary_size, int):
        raise InvalidParameterError("dictionary_size", dictionary_size, "must be an integer")
    if not 1 <= dictionary_size <= MAX_HADAMARD_DICTIONARY:
        raise InvalidParameterError("dictionary_size", dictionary_size, f"must be in [1, {MAX_HADAMARD_DICTIONARY}]")


def _next_power_of_two(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def _hadamard_sign(rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """H[i, j] = (-1)^popcount(i & j) (Sylvester order), int8, broadcast."""
    return (1 - 2 * (np.bitwise_count(rows & columns) & 1)).astype(np.int8)


def _binary_rr(true_sign: np.ndarray, keep_probability: float, rng: np.random.Generator) -> np.ndarray:
    keep = rng.random(true_sign.shape[0]) < keep_probability
    return np.where(keep, true_sign, -true_sign).astype(np.int8)


def fwht(matrix: np.ndarray) -> np.ndarray:
    """Fast Walsh-Hadamard transform of each row (length a power of two).

    out[r, u] = sum_v matrix[r, v] * (-1)^popcount(u & v); O(rows * m log m).
    """
    a = np.array(matrix, dtype=np.float64)
    rows, m = a.shape
    if m & (m - 1):
        raise InvalidParameterError("hash_range", m, "the Hadamard transform needs a power of two")
    h = 1
    while h < m:
        a = a.reshape(rows, m // (2 * h), 2, h)
        lo, hi = a[:, :, 0, :], a[:, :, 1, :]
        a = np.stack((lo + hi, lo - hi), axis=2)
        h *= 2
    return a.reshape(rows, m)


# ---------------------------------------------------------------- HE
@dataclass(frozen=True, eq=False)
class HadamardReports(ArrayReports):
    """(column j, perturbed sign in {-1, +1}) per report."""

    column: np.ndarray
    bit: np.ndarray


class HadamardEncoding(SignedSumOracle):
    """Hadamard Encoding (Bassily & Smith 2015), for evaluation only.

    Client: K = the smallest power of two > d; sample a column j uniformly in
    [K], take H[x + 1, j] = (-1)^popcount((x + 1) & j) (row 0, constant, is
    never used), flip it with binary RR, keep probability e/(e + 1).
    Server: f(x) = (e + 1)/(e - 1) * mean_i(bit_i * H[x + 1, j_i]).

    Privacy: eps-LDP per report (j is independent of x; the sign is binary RR).
    Runtime: O(n) to simulate, O(n * D) to decode. Equivalent CMS+RR: m = 2,
    and the K columns are an exactly pairwise-independent family (distinct
    Hadamard rows agree on exactly K/2 columns), so the variance is the
    pairwise closed form with m = 2: ((e + 1)/(e - 1))^2 - f, over n.
    Report: log2(K) + 1 bits.
    """

    _report_type = HadamardReports

    def __init__(self, epsilon: float, dictionary_size: int):
        self.epsilon = check_epsilon(epsilon)  # same validation as OCMS
        _check_hadamard_dictionary(dictionary_size)
        self.name = "he"
        self.dictionary_size = dictionary_size
        self.matrix_size = _next_power_of_two(dictionary_size + 1)
        self.keep_probability = theory.rr_keep_probability(self.epsilon, 2)
        self._scale = 1.0 / math.tanh(self.epsilon / 2.0)  # (e + 1)/(e - 1)

    @property
    def _source(self) -> tuple:
        return ("he", self.epsilon, self.dictionary_size)

    def simulate(self, values: np.ndarray, rng: np.random.Generator) -> HadamardReports:
        """Simulation path (seeded): (j, RR(H[x + 1, j])) per value."""
        x = check_values(values, self.dictionary_size)
        column = rng.integers(0, self.matrix_size, size=x.size, dtype=np.uint64)
        bit = _binary_rr(_hadamard_sign(x + np.uint64(1), column), self.keep_probability, rng)
        return HadamardReports(source=self._source, column=column, bit=bit)

    def _prepare(self, tracked):
        return tracked + np.uint64(1)

    def _signed(self, reports, lo, hi, rows):
        return reports.bit[lo:hi, None] * _hadamard_sign(reports.column[lo:hi, None], rows[None, :])

    def _finalize(self, mean):
        return self._scale * mean

    def variance(self, f, n):
        """theory.estimator_variance with m = 2, c_bar = 1/2 (= pairwise_variance(eps, 2))."""
        return theory.estimator_variance(self.epsilon, 2, 0.5, f, n)

    @property
    def report_bits(self) -> int:
        return (self.matrix_size - 1).bit_length() + 1

    @property
    def equivalent_hash_range(self) -> float:
        return 2.0


# ---------------------------------------------------------------- CMS+HE
@dataclass(frozen=True, eq=False)
class AppleCMSReports(ArrayReports):
    """(hash index j, Hadamard column l, perturbed sign) per report."""

    hash_index: np.ndarray
    column: np.ndarray
    bit: np.ndarray


class AppleCMSHE(SignedSumOracle):
    """Apple's private Count-Mean Sketch with Hadamard encoding, for evaluation only.

    Parameters as in the paper's experiments: k = 2048 hash functions, m = 1024.
    The k functions h_j(x) = ((a_j + b_j x) in the field) mod m are drawn once
    from H_api (the OCMS field for (d, m)) with a fixed seed. Client: pick j
    uniformly in [k], y = h_j(x), pick l uniformly in [m], sign H[y, l], binary
    RR with keep probability e/(e + 1); report (j, l, sign).
    Server: Apple's sketch M[j, l] = sum of signs; with M' = M H (per-row
    Hadamard transform) and c_e = (e + 1)/(e - 1),
        f(x) = (c_e / n * sum_j M'[j, h_j(x)] - c1) / (1 - c1)
             = (mean_i c_e sign_i H[h_{j_i}(x), l_i] - c1) / (1 - c1),
    i.e. Apple's m/(m - 1) (S/n - 1/m) with 1/m replaced by the exact collision
    probability c1 = c_bar(H_api) of the family the k functions are drawn from
    (Apple scales M by k and divides by k again; the factors cancel).

    Bias: E[f(x)] = f(x) averaged over the draw of the k functions. For the
    fixed draw, E[f(x)] - f(x) = sum_{x' != x} f(x') (c_K(x, x') - c1)/(1 - c1),
    c_K the fraction of the k functions colliding x and x'. By the paper's
    Theorem exp_and_var_of_bias this residual bias has mean 0 and standard
    deviation sqrt(sum_{x' != x} f(x')^2 / ((m - 1) k)) = O(1/sqrt(k m)) over
    draws; :meth:`conditional_mean` computes it exactly for a dataset. No
    fixed family of k << d m functions can be exactly pairwise independent.

    Privacy: eps-LDP per report ((j, l) are independent of x; the sign is
    binary RR). Runtime: O(n) to simulate; O(n * D) decoding per report, or
    O(n + k m log m + k D) through the sketch (``method="sketch"``).
    Equivalent CMS+RR (paper, "Recursive CMS"): collision probability
    c = (1 + c1)/2, i.e. m' = 2/(1 + c1) ~ 2m/(m + 1), RR over 2 symbols; the
    variance is exact given per-pair collision rate c1 (the O(1/(k m)) spread
    of c_K changes it by a relative O(c1^2) only). Report: log2 k + log2 m + 1 bits.
    """

    _report_type = AppleCMSReports

    def __init__(self, epsilon: float, dictionary_size: int, *, hash_count: int = 2048, hash_range: int = 1024,
                 family_seed: int = DEFAULT_FAMILY_SEED):
        if isinstance(hash_range, bool) or not isinstance(hash_range, int) or hash_range < 2 or hash_range & (hash_range - 1):
            raise InvalidParameterError("hash_range", hash_range, "must be a power of two >= 2 (Hadamard encoding)")
        if isinstance(hash_count, bool) or not isinstance(hash_count, int) or hash_count < 1:
            raise InvalidParameterError("hash_count", hash_count, "must be a positive integer")
        self.params = OCMSParams.build(epsilon, dictionary_size, hash_range=hash_range)
        if limbs_for(self.params) != 1:
            raise InvalidParameterError("dictionary_size", dictionary_size, "the oracles take uint64 values")
        self.name = "cms-he"
        self.epsilon = self.params.epsilon
        self.dictionary_size = dictionary_size
        self.hash_count = hash_count
        self.hash_range = hash_range
        self.family_seed = family_seed
        family_rng = np.random.default_rng(family_seed)
        order = self.params.field.order
        high = order if order < 2**64 else 2**64
        self._a0 = family_rng.integers(0, high, size=hash_count, dtype=np.uint64, endpoint=False)
        self._a1 = family_rng.integers(0, high, size=hash_count, dtype=np.uint64, endpoint=False)
        self.c1 = float(self.params.collision_probability)
        self.keep_probability = theory.rr_keep_probability(self.epsilon, 2)
        self._scale = 1.0 / math.tanh(self.epsilon / 2.0)

    @property
    def _source(self) -> tuple:
        return ("cms-he", self.epsilon, self.dictionary_size, self.hash_count, self.hash_range, self.family_seed)

    def hash_table(self, values: np.ndarray) -> np.ndarray:
        """h_j(x) for every j in [k] and each value: uint64 (k, len(values))."""
        x = check_values(values, self.dictionary_size)
        k, u = self.hash_count, x.size
        a0 = np.repeat(self._a0, u)
        a1 = np.repeat(self._a1, u)
        return kernel.hash_residues(self.params, a0, a1, np.tile(x, k)).reshape(k, u)

    def simulate(self, values: np.ndarray, rng: np.random.Generator) -> AppleCMSReports:
        """Simulation path (seeded): (j, l, RR(H[h_j(x), l])) per value."""
        x = check_values(values, self.dictionary_size)
        j = rng.integers(0, self.hash_count, size=x.size, dtype=np.int64)
        y = kernel.hash_residues(self.params, self._a0[j], self._a1[j], x)
        l = rng.integers(0, self.hash_range, size=x.size, dtype=np.uint64)
        bit = _binary_rr(_hadamard_sign(y, l), self.keep_probability, rng)
        return AppleCMSReports(source=self._source, hash_index=j, column=l, bit=bit)

    def sketch(self, reports: AppleCMSReports) -> np.ndarray:
        """Apple's sketch: M[j, l] = sum of the signs of reports (j, l); int64 (k, m)."""
        check_source(reports, AppleCMSReports, self._source)
        cell = reports.hash_index * self.hash_range + reports.column.astype(np.int64)
        size = self.hash_count * self.hash_range
        plus = np.bincount(cell[reports.bit > 0], minlength=size)
        minus = np.bincount(cell[reports.bit < 0], minlength=size)
        return (plus - minus).astype(np.int64).reshape(self.hash_count, self.hash_range)

    def estimate_from_sketch(self, sketch: np.ndarray, n: int, tracked: np.ndarray) -> np.ndarray:
        """Apple's server: Hadamard-transform the rows of M, read M'[j, h_j(x)]."""
        tracked = check_tracked(tracked, self.dictionary_size)
        if n == 0:
            return np.full(tracked.size, np.nan)
        transformed = fwht(sketch)
        table = self.hash_table(tracked)
        sums = transformed[np.arange(self.hash_count)[:, None], table.astype(np.int64)].sum(axis=0)
        return self._finalize(sums / n)

    def estimate(self, reports: AppleCMSReports, tracked: np.ndarray, method: str = "auto") -> np.ndarray:
        """Unbiased (over the family draw) estimates; ``method`` "direct", "sketch" or "auto".

        Both methods compute the same number (up to float rounding); "auto"
        takes the cheaper one.
        """
        if method not in ("auto", "direct", "sketch"):
            raise InvalidParameterError("method", method, "expected 'auto', 'direct' or 'sketch'")
        if method == "auto":
            log_m = max(1, (self.hash_range - 1).bit_length())
            method = "direct" if len(reports) * np.size(tracked) <= self.hash_count * self.hash_range * log_m else "sketch"
        if method == "sketch":
            return self.estimate_from_sketch(self.sketch(reports), len(reports), tracked)
        return super().estimate(reports, tracked)

    def _prepare(self, tracked):
        return self.hash_table(tracked)  # (k, D)

    def _signed(self, reports, lo, hi, table):
        rows = table[reports.hash_index[lo:hi]]  # (N, D)
        return reports.bit[lo:hi, None] * _hadamard_sign(rows, reports.column[lo:hi, None])

    def _finalize(self, mean):
        return (self._scale * mean - self.c1) / (1.0 - self.c1)

    def conditional_mean(self, values: np.ndarray, tracked: np.ndarray) -> np.ndarray:
        """E[f(x)] for the fixed family and dataset ``values`` (exact; shows the residual bias)."""
        x = check_values(values, self.dictionary_size)
        tracked = check_tracked(tracked, self.dictionary_size)
        unique, counts = np.unique(x, return_counts=True)
        weights = counts / x.size
        t_table = self.hash_table(tracked)  # (k, D)
        u_table = self.hash_table(unique)  # (k, U)
        collide = (t_table[:, :, None] == u_table[:, None, :]).mean(axis=0)  # (D, U), 1 on x' = x
        return (collide @ weights - self.c1) / (1.0 - self.c1)

    def residual_bias_std(self, values: np.ndarray, tracked: np.ndarray) -> np.ndarray:
        """Theorem exp_and_var_of_bias: sqrt(sum_{x' != x} f(x')^2 / ((m - 1) k)) per tracked x."""
        x = check_values(values, self.dictionary_size)
        tracked = check_tracked(tracked, self.dictionary_size)
        unique, counts = np.unique(x, return_counts=True)
        f = counts / x.size
        total = float((f**2).sum())
        own = np.array([f[unique == t].sum() for t in tracked])
        return np.sqrt((total - own**2) / ((self.hash_range - 1) * self.hash_count))

    def variance(self, f, n):
        """theory.estimator_variance with RR over 2 symbols and c = (1 + c1)/2 (recursive CMS)."""
        return theory.estimator_variance(self.epsilon, 2, (1.0 + self.c1) / 2.0, f, n)

    @property
    def report_bits(self) -> int:
        return (self.hash_count - 1).bit_length() + (self.hash_range - 1).bit_length() + 1

    @property
    def equivalent_hash_range(self) -> float:
        return 2.0 / (1.0 + self.c1)


# ---------------------------------------------------------------- RHR
@dataclass(frozen=True, eq=False)
class RHRReports(ArrayReports):
    """(column j, perturbed 2^b-ary symbol z) per report; z = r + B * [s = -1]."""

    column: np.ndarray
    symbol: np.ndarray


#: Symbols 2^b must fit uint64 arithmetic comfortably.
MAX_RHR_BITS = 62


class RecursiveHadamardResponse(SignedSumOracle):
    """Recursive Hadamard Response (Chen, Kairouz & Ozgur 2020), for evaluation only.

    With b bits and B = 2^(b-1): x -> (q, r) = (x // B, x mod B); K = the
    smallest power of two >= ceil(d / B) + 1. Client: sample j uniformly in
    [K], s = H[q + 1, j]; the 2^b-ary symbol (s, r) goes through 2^b-ary RR
    with keep probability e/(e + 2^b - 1); report (j, z).
    Server (unbiased on every dataset): for x = (q, r),
        f(x) = A * mean_i H[q + 1, j_i] * ([z_i = (+, r)] - [z_i = (-, r)]),
    A = (e + 2^b - 1)/(e - 1), the difference of the RR decode values
    (theory.decode_match_value - theory.decode_mismatch_value).

    Default b = ceil(eps) (the paper: b = eps for a large dictionary), clamped
    to [1, floor(log2 d) + 1] so that 2^(b-1) <= d, and to MAX_RHR_BITS.

    Skewed CMS (paper Section "Recursive Hadamard Response"): two values
    collide with probability 1/2 if they share x mod 2^(b-1), else 0. On
    random data the average collision probability is 2^-b (equivalent m =
    2^b ~ e^eps); on the adversarial dataset where every value shares the
    residue of x (residue mass 1), RHR behaves like HE with c = 1/2 but an RR
    over 2^b symbols, so its MSE exceeds HE's (ratio (e + 2^b - 1)/(e + 1)).

    Variance (fixed dataset, exact): with F = the frequency of values sharing
    x's residue (F >= f), P= = P(z in {(+,r), (-,r)}) for such a value and P!=
    for any other,
        Var = [A^2 (F P= + (1 - F) P!=) - f] / n,
    which is largest at F = 1 (the default: worst case over datasets). The
    paper's c_bar = 1/2 argument plugs c = 1/2 and RR over 2^b into Eq.
    var_hat_f_sym, i.e. theory.estimator_variance(eps, 2^b, 1/2, f, n)
    (:meth:`paper_variance_bound`); that is the variance of the CMS decoder
    2 mean(y_hat) - 1, unbiased only when F = 1, and exceeds the exact
    value above by (2^b - 2)(e + 1 + 2 f (e - 1)) / ((e - 1)^2 n).

    Privacy: eps-LDP per report (j independent of x; z is 2^b-ary RR).
    Runtime: O(n) to simulate, O(n * D) to decode. Report: log2 K + b bits.
    """

    _report_type = RHRReports

    def __init__(self, epsilon: float, dictionary_size: int, *, bits: int | None = None):
        self.epsilon = check_epsilon(epsilon)
        _check_hadamard_dictionary(dictionary_size)
        max_bits = min(dictionary_size.bit_length(), MAX_RHR_BITS)  # floor(log2 d) + 1
        if bits is None:
            bits = min(max(1, math.ceil(self.epsilon)), max_bits)
        elif isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= max_bits:
            raise InvalidParameterError("bits", bits, f"must be an integer in [1, {max_bits}] (2^(b-1) <= d)")
        self.name = "rhr"
        self.dictionary_size = dictionary_size
        self.bits = bits
        self.block = 1 << (bits - 1)  # B = 2^(b-1)
        self.symbols = 1 << bits  # 2^b
        self.matrix_size = _next_power_of_two(-(-dictionary_size // self.block) + 1)
        self.keep_probability = theory.rr_keep_probability(self.epsilon, self.symbols)
        self._scale = theory.decode_match_value(self.epsilon, self.symbols) - theory.decode_mismatch_value(self.epsilon)

    @property
    def _source(self) -> tuple:
        return ("rhr", self.epsilon, self.dictionary_size, self.bits)

    def simulate(self, values: np.ndarray, rng: np.random.Generator) -> RHRReports:
        """Simulation path (seeded): (j, RR_{2^b}((H[q + 1, j], r))) per value."""
        x = check_values(values, self.dictionary_size)
        shift = np.uint64(self.bits - 1)
        q = x >> shift
        r = x & np.uint64(self.block - 1)
        column = rng.integers(0, self.matrix_size, size=x.size, dtype=np.uint64)
        negative = (np.bitwise_count((q + np.uint64(1)) & column) & 1).astype(np.uint64)
        symbol = r + np.uint64(self.block) * negative
        keep = rng.random(x.size) < self.keep_probability
        other = rng.integers(0, self.symbols - 1, size=x.size, dtype=np.uint64)
        other = other + (other >= symbol).astype(np.uint64)
        return RHRReports(source=self._source, column=column, symbol=np.where(keep, symbol, other))

    def _prepare(self, tracked):
        return (tracked >> np.uint64(self.bits - 1)) + np.uint64(1), tracked & np.uint64(self.block - 1)

    def _signed(self, reports, lo, hi, prepared):
        rows, residues = prepared
        z = reports.symbol[lo:hi, None]
        same_block = (z & np.uint64(self.block - 1)) == residues[None, :]
        z_sign = (1 - 2 * (z >> np.uint64(self.bits - 1)).astype(np.int8))  # +1 / -1
        return np.where(same_block, z_sign * _hadamard_sign(reports.column[lo:hi, None], rows[None, :]), 0).astype(np.int8)

    def _finalize(self, mean):
        return self._scale * mean

    def variance(self, f, n, residue_mass=1.0):
        """Exact Var for residue mass F (default 1: the adversarial worst case)."""
        keep = self.keep_probability
        other = (1.0 - keep) / (self.symbols - 1)
        residue_mass = np.asarray(residue_mass, dtype=np.float64)
        second_moment = self._scale**2 * (residue_mass * (keep + other) + (1.0 - residue_mass) * 2.0 * other)
        return (second_moment - np.asarray(f, dtype=np.float64)) / np.asarray(n, dtype=np.float64)

    def paper_variance_bound(self, f, n):
        """The paper's c_bar = 1/2 form: theory.estimator_variance(eps, 2^b, 1/2, f, n) >= Var."""
        return theory.estimator_variance(self.epsilon, self.symbols, 0.5, f, n)

    @property
    def report_bits(self) -> int:
        return (self.matrix_size - 1).bit_length() + self.bits

    @property
    def equivalent_hash_range(self) -> float:
        """2^b: the mean collision probability on random data is 2^-b (the paper's argument)."""
        return float(self.symbols)
