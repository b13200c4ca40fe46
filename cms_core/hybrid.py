"""The Hybrid mechanism for a numeric metric's mean (issue 40): Wang et al., "Collecting and Analyzing
Multidimensional Data with Local Differential Privacy", ICDE 2019, discretized so that the device draws integers.

**The paper's mechanism** (one value ``t`` in [-1, 1], ``z = e^(eps/2)``):

* *Piecewise Mechanism* (PM, the paper's Algorithm 2): ``C = (z + 1) / (z - 1)``, ``l(t) = (C + 1) t / 2 - (C - 1) / 2``,
  ``r(t) = l(t) + C - 1``; the output is uniform on ``[l(t), r(t)]`` with probability ``z / (z + 1)``, else uniform on
  the rest of ``[-C, C]``. Unbiased; ``Var = t^2 / (z - 1) + (z + 3) / (3 (z - 1)^2)`` (Lemma 1,
  :func:`paper_pm_variance`).
* *Duchi et al.'s one-dimensional mechanism* (the paper's Algorithm 1): ``+-(e^eps + 1) / (e^eps - 1)`` with
  ``P(+) = 1/2 + t (e^eps - 1) / (2 e^eps + 2)``; ``Var = ((e^eps + 1) / (e^eps - 1))^2 - t^2``
  (:func:`paper_duchi_variance`).
* *Hybrid Mechanism* (HM, Section III-C): PM with probability ``alpha``, Duchi's otherwise, each at the full
  epsilon; ``alpha = 1 - e^(-eps/2)`` for ``eps > eps* = ln((-5 + 2 (6353 - 405 sqrt(241))^(1/3) +
  2 (6353 + 405 sqrt(241))^(1/3)) / 27) ~ 0.61``, else 0 (Duchi's alone). Worst-case variance (Lemma 4,
  :func:`paper_hm_worst_variance`): ``(z + 3) / (3 z (z - 1)) + (e^eps + 1)^2 / (z (e^eps - 1)^2)`` above eps*,
  4.29 / 1.04 / 0.22 at eps = 1 / 2 / 4 (docs/privacy-references: Duchi 4.68 / 1.72 / 1.08, PM 5.22 / 1.23 / 0.24).

**What the device runs here** (:class:`HybridParams`, :func:`privatize_value`): the same mechanism on a grid, so every
probability is an integer threshold over 2^64 (as direct RR's keep decision is, :mod:`cms_core.privatize`), the
clients reproduce a report byte for byte from recorded random bytes, and the privacy loss is audited exactly
(floating-point samplers of continuous noise leak through their low bits: Mironov, CCS 2012). The value is clipped to
the metric's ``[lower, upper]``, scaled to ``s`` in ``[0, K]`` (``K`` = :attr:`HybridParams.grid`, even) and
rounded to a neighbouring grid point ``j`` at random, up with probability ``s - floor(s)`` (unbiased: ``E[j] = s``);
``t_j = 2 j / K - 1``. Then

* PM's branch with probability ``A / 2^64`` (``A = floor(alpha 2^64)``): ``M = K + W`` output cells; the ``W``
  cells ``j .. j + W - 1`` (the "window", PM's ``[l(t), r(t)]``) each with probability ``p``, the other ``K``
  cells each with ``q``, ``p / q <= e^eps`` from the integer threshold ``T`` (window kept with probability
  ``T / 2^64``). ``W = max(1, round(K e^(-eps/2)))`` keeps PM's proportions (window / range ``1 / (z + 1)``).
  Cell ``c`` estimates ``a (c - (M - 1) / 2)`` with ``a = 2 / (K W (p - q))``: unbiased, ``E = t_j``.
* Duchi's branch otherwise: ``+`` with probability ``(T0 + j D) / 2^64``, ``T0 + (T0 + K D) = 2^64`` and
  ``(T0 + K D) / T0 <= e^eps``; ``+-v`` with ``v = 2^64 / (K D)`` estimates ``t_j`` without bias.

As K grows this is the paper's HM; at K = 1,024 its worst-case variance is within 1% of Lemma 4's
(tests/cms_core/test_hybrid.py). A report is one integer ``z`` in ``[0, M + 2)``: a PM cell, ``M`` (Duchi's
``-``) or ``M + 1`` (``+``).

**Privacy guarantee.** Each report is epsilon-LDP for the clipped value: every output's probability under any
grid point is at most ``e^eps`` times its probability under any other (PM cell: ``p / q``; Duchi's: ``T_K / T_0``;
the branch is drawn independently of the value, and the two branches' outputs are disjoint), and the randomized
rounding mixes two grid points, so ``P(z | x) <= max_j P(z | j) <= e^eps min_j P(z | j) <= e^eps P(z | x')``.
Audited exactly from the integer thresholds by :func:`exact_privacy_loss`. The bounds, ``K`` and the thresholds
are public.

**Cost.** Device: three or four 64-bit draws (microseconds). Server: a pure fold per window of ``(count, sum of
estimates, sum of their squares)`` (:func:`fold`); the answer (:func:`mean_interval`) is O(1).

**Utility.** The mean of ``n`` reports' estimates is unbiased for the mean of the devices' (clipped, scaled)
values and, the devices' noise being independent, has the variance ``(1 / n^2) sum_i V(t_i)`` with, exactly
(:meth:`HybridParams.variance`, ``lambda = s - floor(s)`` the rounding's fraction),

    V(t) = alpha' [q S + (p - q) a^2 W ((W^2 - 1) / 12 + lambda (1 - lambda))] + alpha' t^2 / (W (p - q))
           + (1 - alpha') v^2 - t^2

where ``alpha' = A / 2^64`` and ``S = sum_c a^2 (c - (M - 1) / 2)^2``: quadratic in ``t`` up to the rounding's
term (at most ``1 / (4 K^2 W (p - q))``, 1e-6 at K = 1,024). The interval (:func:`mean_interval`) is normal with
this variance at the data's second moment, estimated from the reports' squares (clipped to [0, 1]);
in the metric's units every figure scales by ``(upper - lower) / 2`` (variances by its square).

**Limitations.** The mean is of the clipped values (a value outside the bounds counts at the nearer bound); the
grid adds the rounding's variance (included above); the interval is pointwise per window, normal (n of a few
hundred and more).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import struct
from fractions import Fraction

import numpy as np

from .errors import InvalidParameterError
from .privatize import RandomBytes, draw_below, draw_bits64
from .theory import normal_z

#: The input grid K of a Hybrid report (even: the Duchi thresholds T0 = (2^64 - K D) / 2 are integers).
GRID = 1024
#: The paper's eps* (Section III-C): below it HM is Duchi's mechanism alone.
EPS_STAR = math.log((-5 + 2 * (6353 - 405 * math.sqrt(241)) ** (1 / 3) + 2 * (6353 + 405 * math.sqrt(241)) ** (1 / 3))
                    / 27)
TWO64 = 2**64


# ----------------------------------------------------------------------------- the paper's closed forms
def paper_alpha(epsilon: float) -> float:
    """HM's probability of the Piecewise Mechanism: ``1 - e^(-eps/2)`` above eps*, else 0 (Section III-C)."""
    return -math.expm1(-epsilon / 2) if epsilon > EPS_STAR else 0.0


def paper_pm_variance(epsilon: float, t: float) -> float:
    """Var of PM's output at ``t`` (Lemma 1): ``t^2 / (z - 1) + (z + 3) / (3 (z - 1)^2)``, ``z = e^(eps/2)``."""
    z = math.exp(epsilon / 2)
    return t * t / (z - 1) + (z + 3) / (3 * (z - 1) ** 2)


def paper_duchi_variance(epsilon: float, t: float) -> float:
    """Var of Duchi et al.'s one-dimensional output at ``t``: ``((e^eps + 1) / (e^eps - 1))^2 - t^2``."""
    return ((math.exp(epsilon) + 1) / math.expm1(epsilon)) ** 2 - t * t


def paper_hm_worst_variance(epsilon: float) -> float:
    """HM's worst case over ``t`` in [-1, 1] (Lemma 4 above eps*; Duchi's worst, at t = 0, below)."""
    a = paper_alpha(epsilon)
    return max(a * paper_pm_variance(epsilon, t) + (1 - a) * paper_duchi_variance(epsilon, t) for t in (0.0, 1.0))


# ----------------------------------------------------------------------------- the device's parameters
def _e_lo(epsilon: float) -> Fraction:
    """e^eps rounded down by two ulps, as :func:`cms_core.privatize.keep_threshold` takes it: a threshold from it
    never realises a ratio above e^eps."""
    return Fraction(math.exp(epsilon)) * Fraction(2**52 - 2, 2**52)


def _finite(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidParameterError(name, value, "must be a number")
    if not math.isfinite(float(value)):
        raise InvalidParameterError(name, value, "must be finite")
    return float(value)


@dataclasses.dataclass(frozen=True)
class HybridParams:
    """A numeric metric's Hybrid-mechanism parameters: the public bounds, epsilon, the grid ``K`` and the integer
    thresholds the device compares 64-bit draws with (module docstring). Build with :meth:`build`."""

    epsilon: float
    lower: float
    upper: float
    grid: int
    window: int
    pm_share: int  # A: PM's branch when draw_bits64() < A
    pm_keep: int  # T: the window kept when draw_bits64() < T
    duchi_low: int  # T0: Duchi's "+" at grid point j when draw_bits64() < T0 + j D
    duchi_step: int  # D

    @classmethod
    def build(cls, epsilon: float, lower: float, upper: float, grid: int = GRID) -> "HybridParams":
        epsilon = _finite("epsilon", epsilon)
        if not 0.0 < epsilon <= 30.0:
            raise InvalidParameterError("epsilon", epsilon, "must be in (0, 30]")
        lo, hi = _finite("lower", lower), _finite("upper", upper)
        if not lo < hi:
            raise InvalidParameterError("upper", upper, f"must be above lower={lower!r}")
        if isinstance(grid, bool) or not isinstance(grid, int) or grid < 2 or grid % 2 or grid > 1 << 20:
            raise InvalidParameterError("grid", grid, "must be an even integer in [2, 2^20]")
        e_lo = _e_lo(epsilon)
        window = max(1, round(grid * math.exp(-epsilon / 2)))
        keep = e_lo * window / (e_lo * window + grid)  # p / q = e_lo: (keep / W) / ((1 - keep) / K)
        pm_keep = min(math.floor(keep * TWO64), TWO64 - 1)
        span = TWO64 * (e_lo - 1) / (e_lo + 1)  # K D at most this: (2^64 + K D) / (2^64 - K D) <= e_lo
        duchi_step = math.floor(span / grid)
        if duchi_step < 1:
            raise InvalidParameterError("epsilon", epsilon, f"too small for a grid of {grid}")
        pm_share = math.floor(Fraction(paper_alpha(epsilon)) * TWO64)
        return cls(epsilon, lo, hi, grid, window, min(pm_share, TWO64 - 1), pm_keep,
                   (TWO64 - grid * duchi_step) // 2, duchi_step)

    # -- derived exact quantities
    @property
    def cells(self) -> int:
        """M = K + W: PM's output cells."""
        return self.grid + self.window

    @property
    def outputs(self) -> int:
        """Every report value: M PM cells, Duchi's ``-`` (M) and ``+`` (M + 1)."""
        return self.cells + 2

    @property
    def alpha(self) -> float:
        """The realised probability of PM's branch, ``A / 2^64``."""
        return self.pm_share / TWO64

    def _pq(self) -> tuple[Fraction, Fraction]:
        return (Fraction(self.pm_keep, TWO64 * self.window),
                Fraction(TWO64 - self.pm_keep, TWO64 * self.grid))

    @property
    def pm_scale(self) -> float:
        """a = 2 / (K W (p - q)): cell c estimates a (c - (M - 1) / 2)."""
        p, q = self._pq()
        return float(Fraction(2) / (self.grid * self.window * (p - q)))

    @property
    def duchi_value(self) -> float:
        """v = 2^64 / (K D): Duchi's outputs estimate +-v."""
        return TWO64 / (self.grid * self.duchi_step)

    def estimates(self, z) -> np.ndarray:
        """Each report's unbiased estimate of its device's ``t`` in [-1, 1] (reports outside [0, M + 2) refused)."""
        z = np.asarray(z, dtype=np.int64)
        if z.size and (z.min() < 0 or z.max() >= self.outputs):
            raise InvalidParameterError("z", int(z.min() if z.min() < 0 else z.max()),
                                        f"a Hybrid report is in [0, {self.outputs})")
        pm = self.pm_scale * (z - (self.cells - 1) / 2.0)
        duchi = np.where(z == self.cells + 1, self.duchi_value, -self.duchi_value)
        return np.where(z < self.cells, pm, duchi)

    def scale(self, values) -> np.ndarray:
        """Values clipped to ``[lower, upper]``, as ``s`` in [0, K] (the device's arithmetic, vectorized)."""
        x = np.clip(np.asarray(values, dtype=np.float64), self.lower, self.upper)
        return (x - self.lower) / (self.upper - self.lower) * self.grid

    def to_units(self, t: float) -> float:
        """A mean on [-1, 1] in the metric's units."""
        return self.lower + (self.upper - self.lower) * (t + 1.0) / 2.0

    @property
    def unit_scale(self) -> float:
        """(upper - lower) / 2: a standard deviation on [-1, 1] in the metric's units."""
        return (self.upper - self.lower) / 2.0

    # -- variance
    def _terms(self) -> tuple[float, float, float]:
        """(B0, B2, R): E[estimate^2 | t] = B0 + B2 t^2 + R lambda (1 - lambda) (module docstring, Utility)."""
        p, q = self._pq()
        a, w, m, alpha = self.pm_scale, self.window, self.cells, self.alpha
        centred = np.arange(m) - (m - 1) / 2.0
        cell_sum = float(a * a * (centred @ centred))
        gap = float(p - q)
        b0 = alpha * (float(q) * cell_sum + gap * a * a * w * (w * w - 1) / 12.0) + (1 - alpha) * self.duchi_value ** 2
        return b0, alpha / (w * gap), alpha * gap * a * a * w

    def variance(self, values) -> np.ndarray:
        """V(t) of one report's estimate for each value (in the metric's units, clipped), exactly, on [-1, 1]."""
        s = self.scale(values)
        t = 2.0 * s / self.grid - 1.0
        lam = s - np.floor(s)
        b0, b2, r = self._terms()
        return b0 + b2 * t * t + r * lam * (1.0 - lam) - t * t

    def worst_variance(self) -> float:
        """max over t in [-1, 1] of V(t), bounded above by taking the rounding's term at its largest (1/4)."""
        b0, b2, r = self._terms()
        return b0 + r / 4.0 + max(0.0, b2 - 1.0)

    # -- identity
    @property
    def fingerprint(self) -> bytes:
        """8 bytes naming every public parameter a report depends on (frames carry it, as OCMSParams' does)."""
        h = hashlib.blake2b(digest_size=8, person=b"ocms-hybrid-v1")
        h.update(struct.pack(">ddd", self.epsilon, self.lower, self.upper))
        h.update(b"".join(x.to_bytes(8, "big") for x in (self.grid, self.window, self.pm_share, self.pm_keep,
                                                          self.duchi_low, self.duchi_step)))
        return h.digest()

    def to_config(self) -> dict:
        """What a device needs (integers over 2^64 as decimal strings, as the device config's keep_threshold)."""
        return {"lower": self.lower, "upper": self.upper, "grid": self.grid, "window": self.window,
                "pm_share": str(self.pm_share), "pm_keep": str(self.pm_keep), "duchi_low": str(self.duchi_low),
                "duchi_step": str(self.duchi_step)}


# ----------------------------------------------------------------------------- the device
def privatize_value(params: HybridParams, value, random: RandomBytes = os.urandom) -> int:
    """Device path: one epsilon-LDP Hybrid report ``z`` of a number. The randomness contract (docs/device.md,
    "Numeric means"; vectors in tests/vectors/numeric_mean_v1.json), after clipping ``value`` to ``[lower, upper]``
    and ``s = (value - lower) / (upper - lower) * K`` (IEEE doubles, in this order), ``j = floor(s)``:

    1. ``j += 1`` when ``draw_bits64() < floor((s - j) * 2^64)`` (always drawn);
    2. PM's branch when ``draw_bits64() < pm_share``;
    3. PM: ``z = j + draw_below(W)`` when ``draw_bits64() < pm_keep``, else ``o = draw_below(K)`` and
       ``z = o if o < j else o + W``; Duchi's: ``z = M + 1`` when ``draw_bits64() < duchi_low + j duchi_step``,
       else ``z = M``.

    A bool, a non-number or NaN is refused naming ``value``; +-inf is clipped like any value outside the bounds.
    Privacy: epsilon-LDP when ``random`` is a CSPRNG (the default); any other ``random`` reproduces test vectors."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidParameterError("value", value, "a numeric report needs a number")
    x = float(value)
    if math.isnan(x):
        raise InvalidParameterError("value", value, "a numeric report needs a number")
    x = min(max(x, params.lower), params.upper)
    s = (x - params.lower) / (params.upper - params.lower) * params.grid
    j = min(math.floor(s), params.grid)
    up = draw_bits64(random) < math.floor((s - j) * TWO64)
    j += int(up)
    if draw_bits64(random) < params.pm_share:
        if draw_bits64(random) < params.pm_keep:
            return j + draw_below(random, params.window)
        other = draw_below(random, params.grid)
        return other if other < j else other + params.window
    return params.cells + int(draw_bits64(random) < params.duchi_low + j * params.duchi_step)


def draw_mean_message(params: HybridParams, parts: int, carrier, value, random: RandomBytes = os.urandom) -> bytes | None:
    """A device of a numeric version with a Hybrid mean (registry.numeric.MeanSplit): ``draw_below(parts)``
    first, apart from the value (no byte when ``parts`` is 1); part 0 is a Hybrid report of ``value``
    (:func:`privatize_value`) framed as one wire message of the ``carrier`` parameters (z alone, as direct RR's), any
    other part None: the caller reports the histogram's, drawing on from the same ``random``."""
    from . import wire
    from .reports import Report

    if draw_below(random, parts) != 0:
        return None
    return wire.encode_report(carrier, Report(0, 1, privatize_value(params, value, random)))


def simulate(params: HybridParams, values, rng: np.random.Generator) -> np.ndarray:
    """Simulation path (seeded, vectorized; never on a device): one report per value, distributed exactly as
    :func:`privatize_value`'s up to float64 probabilities."""
    s = params.scale(values)
    j = np.minimum(np.floor(s), params.grid).astype(np.int64)
    j += (rng.random(s.size) < s - j).astype(np.int64)
    n = s.size
    pm = rng.random(n) < params.alpha
    keep = rng.random(n) < params.pm_keep / TWO64
    inside = j + rng.integers(0, params.window, size=n)
    other = rng.integers(0, params.grid, size=n)
    outside = np.where(other < j, other, other + params.window)
    plus = rng.random(n) < params.duchi_low / TWO64 + j * (params.duchi_step / TWO64)  # floats: T0 + j D > 2^63
    return np.where(pm, np.where(keep, inside, outside), params.cells + plus.astype(np.int64))


def simulate_split(params: HybridParams, parts: int, values, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Simulation path of :func:`draw_mean_message` (seeded, vectorized; never on a device): each device draws its
    part first, uniformly over ``parts`` and apart from its value (nothing drawn when ``parts`` is 1), and a part-0
    device reports its value with the Hybrid mechanism (:func:`simulate`). Returns (which devices are part 0,
    their reports ``z`` in order); the others report the histogram's."""
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or parts < 1:
        raise InvalidParameterError("parts", parts, "must be an integer >= 1")
    values = np.asarray(values, dtype=np.float64)
    mean = np.ones(values.size, dtype=bool) if parts == 1 else rng.integers(0, parts, size=values.size) == 0
    return mean, simulate(params, values[mean], rng)


# ----------------------------------------------------------------------------- the server
@dataclasses.dataclass(frozen=True)
class MeanFold:
    """A window's Hybrid reports, folded: their count, the sum of their estimates and of the estimates' squares.
    Folding is associative and commutative (:meth:`merge`), so a worker keeps one per window."""

    count: int = 0
    total: float = 0.0
    squares: float = 0.0

    def merge(self, other: "MeanFold") -> "MeanFold":
        return MeanFold(self.count + other.count, self.total + other.total, self.squares + other.squares)


def fold(params: HybridParams, z, into: MeanFold = MeanFold()) -> MeanFold:
    """``into`` with the reports ``z`` added."""
    e = params.estimates(z)
    return into.merge(MeanFold(int(e.size), float(e.sum()), float(e @ e)))


def fold_counts(params: HybridParams, counts) -> MeanFold:
    """The fold of reports given as how many of each report value ``z`` there were (``counts[z]``, z in
    [0, M + 2): what a worker counting the reports as direct RR's values keeps per window)."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.shape != (params.outputs,) or (counts < 0).any():
        raise InvalidParameterError("counts", f"shape {counts.shape}", f"needs {params.outputs} counts >= 0")
    e = params.estimates(np.arange(params.outputs))
    return MeanFold(int(round(counts.sum())), float(counts @ e), float(counts @ (e * e)))


@dataclasses.dataclass(frozen=True)
class MeanEstimate:
    """The mean of a window in the metric's units, its normal interval and standard deviation, and its reports."""

    estimate: float
    low: float
    high: float
    sd: float
    reports: int
    confidence: float

    def to_json(self) -> dict:
        return {"estimate": self.estimate, "ci_low": self.low, "ci_high": self.high, "sd": self.sd,
                "reports": self.reports, "confidence": self.confidence, "mechanism": "hybrid"}


def mean_interval(params: HybridParams, folded: MeanFold, confidence: float = 0.95) -> MeanEstimate | None:
    """The window's mean (clipped values, metric's units) with its ``confidence`` normal interval: the variance is
    ``(B0 + (B2 - 1) m2 + R / 4) / n`` (module docstring, Utility; the rounding's term at its largest) at the
    devices' second moment ``m2`` on [-1, 1], estimated from the reports' squares as ``(mean square - B0 - R / 6) /
    B2`` (unbiased up to the rounding's term, ``E[lambda (1 - lambda)] = 1/6`` for a uniform fraction: 1e-6) and
    clipped to [0, 1]. None without reports."""
    if not 0.0 < confidence < 1.0:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    n = folded.count
    if n <= 0:
        return None
    b0, b2, r = params._terms()
    m2 = min(max((folded.squares / n - b0 - r / 6.0) / b2, 0.0), 1.0) if b2 > 0 else 1.0
    variance = max(b0 + (b2 - 1.0) * m2 + r / 4.0, 0.0) / n
    t = folded.total / n
    sd = math.sqrt(variance) * params.unit_scale
    half = normal_z(confidence) * sd
    centre = params.to_units(t)
    return MeanEstimate(centre, centre - half, centre + half, sd, n, float(confidence))


def with_mean(doc: dict | None, params: HybridParams, counts, confidence: float, empty: dict) -> dict | None:
    """A numeric answer ``doc`` (None: no bucket reports) with its ``mean`` the Hybrid one of the report ``counts``
    (:func:`fold_counts`, :func:`mean_interval`) and the histogram's own kept as ``histogram_mean``; without bucket
    reports, ``empty`` (the answer's fields of a distribution with no bucket) holds the mean. ``doc`` unchanged
    without Hybrid reports. The worker's /histogram and ``ocms estimate`` both answer through it."""
    mean = mean_interval(params, fold_counts(params, counts), confidence)
    if mean is None:
        return doc
    doc = dict(empty) if doc is None else doc
    doc["histogram_mean"] = doc.get("mean")
    doc["mean"] = mean.to_json()
    return doc


def mean_variance(params: HybridParams, n: int, values=None) -> float:
    """The variance of the mean of ``n`` reports in the metric's units: at the given ``values`` (one per device,
    ``n`` ignored) exactly, or the worst case over every value (the planner's figure, before any data)."""
    if values is not None:
        v = params.variance(values)
        return float(v.sum() / v.size ** 2) * params.unit_scale ** 2
    if n < 1:
        return math.inf
    return params.worst_variance() / n * params.unit_scale ** 2


# ----------------------------------------------------------------------------- audit
def _output_numerators(params: HybridParams, j: int) -> list[int]:
    """P(z | grid point j) for every z, times the common denominator 2^128 W K (exact integers)."""
    w, k, m = params.window, params.grid, params.cells
    a, t = params.pm_share, params.pm_keep
    inside, outside = a * t * k, a * (TWO64 - t) * w
    row = [inside if j <= c < j + w else outside for c in range(m)]
    plus = params.duchi_low + j * params.duchi_step
    rest = (TWO64 - a) * w * k
    return row + [rest * (TWO64 - plus), rest * plus]


def exact_privacy_loss(params: HybridParams, points=None) -> Fraction:
    """max over outputs z and grid points j, j' of P(z | j) / P(z | j'): the realised e^eps of the device path,
    exactly, from its integer thresholds (every grid point by default: O(K (K + W)) integer comparisons, about a
    second at K = 1,024). A real input mixes two neighbouring grid points (module docstring), so this bounds
    every input's loss."""
    points = range(params.grid + 1) if points is None else points
    high = low = None
    for j in points:
        row = _output_numerators(params, int(j))
        if high is None:
            high, low = list(row), list(row)
            continue
        high = [max(x, y) for x, y in zip(high, row)]
        low = [min(x, y) for x, y in zip(low, row)]
    if high is None:
        raise InvalidParameterError("points", points, "needs at least one grid point")
    if any(l == 0 < h for h, l in zip(high, low)):
        raise InvalidParameterError("params", "hybrid", "an output has zero probability under some input only")
    return max(Fraction(h, l) for h, l in zip(high, low) if h)  # an output no input gives (alpha = 0) is no loss


__all__ = ["EPS_STAR", "GRID", "HybridParams", "MeanEstimate", "MeanFold", "exact_privacy_loss", "fold", "fold_counts",
           "draw_mean_message", "mean_interval", "mean_variance", "with_mean", "paper_alpha", "paper_duchi_variance", "paper_hm_worst_variance",
           "paper_pm_variance", "privatize_value", "simulate", "simulate_split"]
