"""Numeric telemetry: a value's bucket on the device; histograms, CDFs, quantiles and means from the bucket frequencies.

A numeric metric (a latency, a size) is reported as the index of its bucket, an integer metric over the ``k``
buckets of a :class:`BucketLayout`, so every device client, the wire format and the worker's decode path are the
ones frequencies use. This module holds the layout (Prometheus' ``le`` buckets or OpenTelemetry's base-2
exponential ones) and what is estimated from the ``k`` unbiased bucket frequencies (:class:`Histogram`).

**Privacy guarantee.** The bucket index goes through the metric version's frequency mechanism (direct RR over
``k`` values, or OCMS+RR) at its epsilon: the same epsilon-LDP as any integer metric, per report. The layout
(bounds, clipping range) is public; everything here is post-processing of the mechanism's output and costs no
privacy.

**Clipping.** A value below ``lower`` counts in the first bucket and one above ``upper`` in the last: quantiles
lie in ``[lower, upper]`` and the mean is the mean of the clipped values, bucketized.

**Utility.** Every linear functional ``L = sum_i w_i f_i`` of the bucket frequencies (a CDF value: ``w`` the
indicator of the buckets up to one bound; the mean: ``w`` the buckets' representative points) is estimated by
``sum_i w_i f_hat_i``, unbiased. Under direct RR over ``k`` (keep probability ``p``, any other value ``q``) the
reports of ``n`` devices whose buckets have frequencies ``f`` give it the variance, exactly,

    Var = (Var_pi(w) / (p - q)^2 - Var_f(w)) / n                             (:func:`direct_rr_functional_variance`)

where ``pi_i = f_i (p - q) + q`` is the distribution of a reported bucket and ``Var_d(w)`` is
``sum_i d_i w_i^2 - (sum_i d_i w_i)^2``: the reports' spread, scaled, less the devices' own spread (the answer is
about these devices, so only the randomized response is noise; the paper's per-value variance, Eq. var_rr, is
the case ``w`` = one indicator). Under OCMS+RR the bucket estimates are
correlated through the hash; :class:`OCMSNoise` takes the covariances of a fully random hash
(:func:`cms_core.theory.ocms_level_terms`; both through :func:`oracle_functional_variance`), and
:class:`BoundedNoise`'s Cauchy-Schwarz bound ``(sum_i |w_i| sd_i)^2`` is never below the truth for any
correlations (1.7 times as wide). Intervals are normal, pointwise (each CDF value, each quantile on its own).

**Post-processing.** The raw estimates can be negative and their cumulative sums non-monotone; the processed CDF
is the least-squares non-decreasing fit in [0, 1] ending at 1 (isotonic regression) with absorbing bounds: 1 from
the first edge where the raw sums reach 1, 0 up to the last where they are at most 0 (:func:`monotone_cdf`, which
says why), and the processed histogram its differences. Both are kept (``raw`` and ``consistent``); the mean is
estimated from ``raw`` (unbiased).

**Limitations.** Quantiles interpolate linearly inside a bucket (as Prometheus' ``histogram_quantile`` does), so
their error includes up to a bucket's width; the mean is of the bucketized distribution (at most half the widest
bucket away from the clipped values' mean). Direct RR over many buckets (hundreds) is noisy; fine resolution
takes the hierarchical histogram of :mod:`cms_core.hierarchy` (its noise, :class:`cms_core.hierarchy.HierarchyNoise`,
is exact after consistency), which :func:`cms_core.planning.choose_numeric_mechanism` picks where it is more accurate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import struct
from typing import Protocol, Sequence

import numpy as np

from . import theory
from .errors import InvalidParameterError
from .theory import normal_z, rr_keep_probability

#: Most buckets a layout may have (an exponential layout over a wide range at a fine scale would exceed it).
MAX_BUCKETS = 4096
#: OpenTelemetry's exponential histograms allow scales -10..20; base = 2 ** (2 ** -scale).
MIN_SCALE, MAX_SCALE = -10, 20


def _finite(name: str, value) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(name, value, "must be a number") from None
    if not math.isfinite(x):
        raise InvalidParameterError(name, value, "must be finite")
    return x


@dataclasses.dataclass(frozen=True)
class BucketLayout:
    """The buckets of a numeric metric: ``k = len(bounds) + 1`` buckets, bucket ``i`` holding the values in
    ``(edges[i], edges[i + 1]]`` where ``edges = (lower, *bounds, upper)``, as Prometheus' ``le`` buckets do
    (a value equal to a bound is in the bucket that bound closes). Values outside ``[lower, upper]`` are
    clipped into the first or last bucket. Build with :meth:`explicit` or :meth:`exponential`."""

    bounds: tuple[float, ...]
    lower: float
    upper: float

    @classmethod
    def explicit(cls, bounds: Sequence[float], lower: float, upper: float) -> "BucketLayout":
        """Buckets closed by ``bounds`` (strictly increasing, strictly inside ``(lower, upper)``)."""
        lo, hi = _finite("lower", lower), _finite("upper", upper)
        if not lo < hi:
            raise InvalidParameterError("upper", upper, f"must be above lower={lower!r}")
        try:
            values = [_finite("bounds", b) for b in bounds]
        except TypeError:
            raise InvalidParameterError("bounds", bounds, "must be a list of numbers") from None
        if not values:
            raise InvalidParameterError("bounds", list(bounds), "needs at least one bound (two buckets)")
        if len(values) + 1 > MAX_BUCKETS:
            raise InvalidParameterError("bounds", f"{len(values)} bounds", f"at most {MAX_BUCKETS - 1}")
        for a, b in zip(values, values[1:]):
            if not a < b:
                raise InvalidParameterError("bounds", list(bounds), f"must increase strictly ({a!r} then {b!r})")
        if not lo < values[0] or not values[-1] < hi:
            raise InvalidParameterError("bounds", list(bounds), f"must lie strictly between lower={lower!r} and "
                                                                  f"upper={upper!r}")
        return cls(tuple(values), lo, hi)

    @classmethod
    def exponential(cls, scale: int, lower: float, upper: float) -> "BucketLayout":
        """OpenTelemetry's base-2 exponential buckets at ``scale`` (base ``2 ** (2 ** -scale)``: scale 0
        doubles, scale 3 grows by 9% a bucket): bounds ``base ** i`` strictly between ``lower > 0`` and
        ``upper``."""
        if isinstance(scale, bool) or not isinstance(scale, int) or not MIN_SCALE <= scale <= MAX_SCALE:
            raise InvalidParameterError("scale", scale, f"must be an integer in [{MIN_SCALE}, {MAX_SCALE}]")
        lo, hi = _finite("lower", lower), _finite("upper", upper)
        if not lo > 0:
            raise InvalidParameterError("lower", lower, "must be above 0 for exponential buckets")
        if not lo < hi:
            raise InvalidParameterError("upper", upper, f"must be above lower={lower!r}")
        base_log2 = 2.0 ** -scale
        first = math.floor(math.log2(lo) / base_log2) + 1
        last = math.ceil(math.log2(hi) / base_log2) - 1
        if last - first + 2 > MAX_BUCKETS:
            raise InvalidParameterError("scale", scale, f"gives {last - first + 2} buckets between {lower!r} and "
                                                        f"{upper!r}; at most {MAX_BUCKETS}: lower the scale")
        bounds = [2.0 ** (i * base_log2) for i in range(first, last + 1)]
        bounds = [b for b in bounds if lo < b < hi]
        if not bounds:
            raise InvalidParameterError("scale", scale, f"leaves no bound between {lower!r} and {upper!r}")
        return cls(tuple(bounds), lo, hi)

    @property
    def buckets(self) -> int:
        return len(self.bounds) + 1

    @property
    def edges(self) -> np.ndarray:
        """``(lower, *bounds, upper)``: bucket ``i`` is ``(edges[i], edges[i + 1]]``."""
        return np.array((self.lower, *self.bounds, self.upper), dtype=np.float64)

    @property
    def points(self) -> np.ndarray:
        """Each bucket's representative point for the mean: its midpoint."""
        edges = self.edges
        return (edges[:-1] + edges[1:]) / 2.0

    @property
    def widest(self) -> float:
        return float(np.max(np.diff(self.edges)))

    def bucket(self, value) -> int:
        """The device's step: one number, clipped into ``[lower, upper]``, to its bucket index (a value equal to a
        bound is in the bucket that bound closes). A bool, a non-number or NaN is refused naming ``value``;
        +-inf is clipped like any value outside the bounds. The shared vectors: tests/vectors/numeric_v1.json."""
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InvalidParameterError("value", value, "a numeric report needs a number")
        return int(self.index([float(value)])[0])

    def index(self, values) -> np.ndarray:
        """The bucket index of each value (clipped into ``[lower, upper]``); NaN is refused."""
        x = np.asarray(values, dtype=np.float64)
        if np.isnan(x).any():
            raise InvalidParameterError("value", "NaN", "a numeric report needs a number")
        return np.searchsorted(np.asarray(self.bounds), x, side="left").astype(np.int64)

    def fingerprint(self) -> bytes:
        """8 bytes naming the layout (part of a numeric metric version's identity)."""
        h = hashlib.blake2b(digest_size=8, person=b"ocms-buckets-v1")
        h.update(struct.pack(f">dd{len(self.bounds)}d", self.lower, self.upper, *self.bounds))
        return h.digest()

    def to_config(self) -> dict:
        """What a device needs to bucketize (the device config's ``buckets``)."""
        return {"lower": self.lower, "upper": self.upper, "bounds": list(self.bounds)}


# ----------------------------------------------------------------------------- noise of a linear functional
class FunctionalNoise(Protocol):
    """The variance of ``sum_i w_i f_hat_i`` from ``n`` reports when the bucket frequencies are ``f``."""

    def variance(self, f: np.ndarray, w: np.ndarray, n: int) -> float: ...


def _distribution(f) -> np.ndarray:
    f = np.clip(np.asarray(f, dtype=np.float64), 0.0, 1.0)
    total = f.sum()
    return f / total if total > 0 else f


def oracle_functional_variance(d: np.ndarray, u: np.ndarray, f: np.ndarray, w: np.ndarray, n: int) -> float:
    """The variance of ``sum_i w_i f_hat_i`` from ``n`` reports of a flat frequency oracle whose one report's
    estimate of bucket ``i`` has second moments ``E[e_i e_j] = d_i [i = j] + u_i u_j`` off the diagonal terms it
    shares (:func:`cms_core.theory.grr_level_terms`, :func:`cms_core.theory.ocms_level_terms`):
    ``(sum_i w_i^2 d_i - (w . u)^2 - Var_f(w)) / n``, the reports' spread less the devices' own (module docstring;
    :mod:`cms_core.hierarchy`'s Utility with one level)."""
    w = np.asarray(w, dtype=np.float64)
    reported = float((w * w) @ d - (w @ u) ** 2)  # Var of one report's w . e for a device drawn from f
    population = float(f @ (w * w) - (f @ w) ** 2)  # the part that is the devices' own spread, not noise
    if n <= 0:
        return math.inf
    return max(reported - population, 0.0) / n


def direct_rr_functional_variance(epsilon: float, k: int, f: np.ndarray, w: np.ndarray, n: int) -> float:
    """Exact variance of ``sum_i w_i f_hat_i`` under direct RR over ``k`` (module docstring): ``d, u`` of
    :func:`cms_core.theory.grr_level_terms` give ``Var_pi(w) / (p - q)^2``."""
    p = rr_keep_probability(epsilon, k)
    f = _distribution(f)
    d, u = theory.grr_level_terms(p, (1.0 - p) / (k - 1), f)
    return oracle_functional_variance(d, u, f, w, n)


@dataclasses.dataclass(frozen=True)
class DirectRRNoise:
    """Direct RR over the ``k`` buckets at ``epsilon``: exact functional variances."""

    epsilon: float
    k: int

    def variance(self, f: np.ndarray, w: np.ndarray, n: int) -> float:
        return direct_rr_functional_variance(self.epsilon, self.k, f, w, n)


@dataclasses.dataclass(frozen=True)
class BoundedNoise:
    """Any frequency oracle with known per-bucket standard deviations: the Cauchy-Schwarz bound
    ``(sum_i |w_i| sd_i)^2`` on a functional's variance (its estimates may be correlated, as OCMS+RR's are)."""

    per_bucket_sd: np.ndarray

    def variance(self, f: np.ndarray, w: np.ndarray, n: int) -> float:
        return float((np.abs(np.asarray(w, dtype=np.float64)) @ self.per_bucket_sd) ** 2)


@dataclasses.dataclass(frozen=True)
class OCMSNoise:
    """OCMS+RR over the buckets (estimator coefficients ``(A, B)``, :attr:`cms_core.params.OCMSParams.estimator_coefficients`):
    the functional variance from :func:`cms_core.theory.ocms_level_terms`, exact for a fully random hash (the
    linear family is pairwise, not 3-wise, independent; its coverage is measured in
    tests/cms_core/test_numeric_answer.py). :class:`BoundedNoise` over the same estimates' standard deviations is
    never below the truth but 1.7 times as wide (the mean of 11 buckets at eps 0.5 and 1)."""

    coefficients: tuple[float, float]

    def variance(self, f: np.ndarray, w: np.ndarray, n: int) -> float:
        f = _distribution(f)
        d, u = theory.ocms_level_terms(self.coefficients, f)
        return oracle_functional_variance(d, u, f, w, n)


def oracle_noise(params) -> FunctionalNoise:
    """The noise of the flat frequency oracle ``params`` (an :class:`cms_core.params.OCMSParams` over the bucket
    indices): direct RR's exact functional variance, or OCMS+RR's (:class:`OCMSNoise`)."""
    if params.is_direct:
        return DirectRRNoise(float(params.epsilon), int(params.hash_range))
    return OCMSNoise(tuple(float(c) for c in params.estimator_coefficients))


# ----------------------------------------------------------------------------- the estimates
def monotone_cdf(raw_cdf: np.ndarray) -> np.ndarray:
    """The processed CDF: the least-squares non-decreasing fit in [0, 1] ending at 1 (isotonic regression,
    :func:`isotonic_cdf`) with *absorbing bounds*: from the first edge where the raw cumulative sums reach 1 on, the
    CDF is 1, and up to the last edge where they are at most 0, it is 0. Its differences are non-negative bucket
    frequencies summing to 1; the raw sums are kept apart (:meth:`Histogram.cdf`).

    Why the bounds absorb: the CDF's noise is symmetric while a distribution's nearly empty ends are where the
    truth sits at a bound (about 1 across a latency's wide tail), so the raw sums wander around the bound by their
    full standard deviation there. Least squares pools those values and stays a pooled average away from the bound
    (clipping removes only the half above it), and the 1-Wasserstein distance weighs that by the tail's width: at
    1,024 buckets, eps = 1, n = 10^5 (tree B2, CDF standard deviation about 0.02) the fit sat at 0.992-0.997 from 2 s
    to 20 s where the truth is above 0.9976, 65-143 ms of distances of 80-154 ms (benchmarks/bench_numeric.py; the
    peer's CDF fitted so is as far off, 83.6 ms: its lead was the running maximum the benchmark repairs it with).
    Once the raw sums touch the bound the stretch beyond is held there, and the median of the distances fell from
    79.5 to 22.4 ms. Quantiles within the noise of a bound pay for it: where the raw sums touch 1 before the true
    0.99 quantile, that quantile is read there (its mean rank error 0.83 -> 1.17 points in that cell, while its
    median error in value shrank from a factor e^0.50 to e^0.27: the plateau had read it at 2.6-13 s against 1.2 s
    in 9 of 20 seeds). A running maximum alone (the benchmark's repair of the peer, and Prometheus' of bucket
    counts) moved that quantile twice as far (1.71 points) and carries any upward excursion across an empty lower
    end (the distribution mirrored: 988 ms, this rule 22 ms). Norm-Sub (one shift for every bucket) had moved the
    median of a skewed latency distribution over 1,024 bins by half the ranks."""
    raw = np.clip(np.append(np.asarray(raw_cdf, dtype=np.float64)[:-1], 1.0), 0.0, 1.0)  # every value <= upper
    fitted = isotonic_cdf(raw_cdf)
    at_one = np.maximum.accumulate(raw) >= 1.0
    at_zero = np.minimum.accumulate(raw[::-1])[::-1] <= 0.0
    return np.where(at_one, 1.0, np.where(at_zero, 0.0, fitted))


def isotonic_cdf(raw_cdf: np.ndarray) -> np.ndarray:
    """The least-squares non-decreasing fit in [0, 1] ending at 1 to ``raw_cdf``: isotonic regression by
    pool-adjacent-violators, then clipped (the least-squares part of :func:`monotone_cdf`)."""
    y = np.append(np.asarray(raw_cdf, dtype=np.float64)[:-1], 1.0)  # every value is at most ``upper``
    values: list[float] = []
    weights: list[int] = []
    for v in y:
        values.append(float(v))
        weights.append(1)
        while len(values) > 1 and values[-2] > values[-1]:
            w = weights[-2] + weights[-1]
            values[-2] = (values[-2] * weights[-2] + values[-1] * weights[-1]) / w
            weights[-2] = w
            values.pop()
            weights.pop()
    fitted = np.repeat(values, weights)
    return np.clip(fitted, 0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


def _quantile_from_cdf(edges: np.ndarray, cdf: np.ndarray, q: float) -> float:
    """The value where a monotone CDF given at the upper edge of each bucket reaches ``q``, linear inside a bucket."""
    below = np.concatenate(([0.0], cdf[:-1]))
    j = int(np.searchsorted(cdf, q - 1e-12, side="left"))
    if j >= cdf.size:
        return float(edges[-1])
    mass = cdf[j] - below[j]
    share = 1.0 if mass <= 0 else min(max((q - below[j]) / mass, 0.0), 1.0)
    return float(edges[j] + share * (edges[j + 1] - edges[j]))


@dataclasses.dataclass(frozen=True)
class Histogram:
    """Everything a window's numeric answer holds, from the ``k`` unbiased bucket frequencies ``raw`` of ``n``
    reports (:meth:`of`). ``consistent`` is the differences of the processed CDF (:func:`monotone_cdf`:
    non-negative, total 1); ``cdf()`` its cumulative sums (monotone, ending at 1), ``cdf(processed=False)`` the raw
    cumulative sums."""

    layout: BucketLayout
    n: int
    raw: np.ndarray
    consistent: np.ndarray
    noise: FunctionalNoise
    confidence: float

    @classmethod
    def of(cls, layout: BucketLayout, raw, n: int, noise: FunctionalNoise, confidence: float = 0.95) -> "Histogram":
        raw = np.asarray(raw, dtype=np.float64)
        if raw.shape != (layout.buckets,):
            raise InvalidParameterError("raw", f"shape {raw.shape}", f"needs one frequency per bucket ({layout.buckets})")
        if not 0.0 < confidence < 1.0:
            raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
        if n < 0:
            raise InvalidParameterError("n", n, "must be at least 0")
        consistent = np.diff(monotone_cdf(np.cumsum(raw)), prepend=0.0)
        return cls(layout, int(n), raw, consistent, noise, float(confidence))

    def cdf(self, processed: bool = True) -> np.ndarray:
        """P(value <= edges[i + 1]) for each bucket ``i`` (the last is 1 when processed)."""
        return np.cumsum(self.consistent if processed else self.raw)

    def cdf_sd(self) -> np.ndarray:
        """The standard deviation of each raw CDF value (the variance of its indicator functional; a noise with a
        ``cdf_variances(f, n)`` method gives them all at once)."""
        k = self.layout.buckets
        if hasattr(self.noise, "cdf_variances"):  # a noise with its own (vectorized) CDF variances
            return np.sqrt(np.maximum(self.noise.cdf_variances(self.consistent, self.n), 0.0))
        sd = np.empty(k)
        for j in range(k):
            w = (np.arange(k) <= j).astype(np.float64)
            sd[j] = math.sqrt(self.noise.variance(self.consistent, w, self.n))
        return sd

    def cdf_interval(self) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise normal intervals of the CDF at each bucket's upper edge, clipped to [0, 1] and monotone."""
        z = normal_z(self.confidence)
        cdf, sd = self.cdf(), self.cdf_sd()
        low = np.maximum.accumulate(np.clip(cdf - z * sd, 0.0, 1.0))
        high = np.minimum.accumulate(np.clip(cdf + z * sd, 0.0, 1.0)[::-1])[::-1]
        low[-1] = high[-1] = 1.0  # every value is at most ``upper`` after clipping
        return low, high

    def quantile(self, q: float) -> Interval:
        """The ``q`` quantile (``0 < q < 1``) with an interval from the CDF's: where the upper band reaches ``q``
        and where the lower band does."""
        q = _finite("q", q)
        if not 0.0 < q < 1.0:
            raise InvalidParameterError("q", q, "must be in (0, 1)")
        edges = self.layout.edges
        low, high = self.cdf_interval()
        return Interval(_quantile_from_cdf(edges, self.cdf(), q), _quantile_from_cdf(edges, high, q),
                        _quantile_from_cdf(edges, low, q))

    def mean(self) -> Interval:
        """The mean of the bucketized, clipped values (each bucket at its midpoint), unbiased from ``raw``; the
        interval is normal around it."""
        points = self.layout.points
        estimate = float(self.raw @ points)
        half = normal_z(self.confidence) * math.sqrt(self.noise.variance(self.consistent, points, self.n))
        return Interval(estimate, estimate - half, estimate + half)


#: The quantiles every numeric answer holds (more can be asked for).
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)


def _number(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def summary(histogram: Histogram, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict:
    """A histogram as a JSON-ready answer: per bucket its edges and raw / consistent frequency; the raw and the
    monotone CDF at each bucket's upper edge (``le``) with the monotone one's pointwise interval; each quantile
    and the mean with their intervals (:meth:`Histogram.quantile`, :meth:`Histogram.mean`)."""
    edges = histogram.layout.edges
    raw_cdf, cdf = histogram.cdf(processed=False), histogram.cdf()
    low, high = histogram.cdf_interval()
    mean = histogram.mean()
    out = {
        "buckets": [{"lower": float(edges[i]), "le": float(edges[i + 1]), "raw": float(histogram.raw[i]),
                     "consistent": float(histogram.consistent[i])} for i in range(histogram.layout.buckets)],
        "cdf": [{"le": float(edges[i + 1]), "raw": float(raw_cdf[i]), "monotone": float(cdf[i]),
                 "ci_low": float(low[i]), "ci_high": float(high[i])} for i in range(histogram.layout.buckets)],
        "quantiles": [],
        "mean": {"estimate": _number(mean.estimate), "ci_low": _number(mean.low), "ci_high": _number(mean.high)},
        "confidence": histogram.confidence,
        "clipped_to": [histogram.layout.lower, histogram.layout.upper],
    }
    for q in sorted(set(float(q) for q in quantiles)):
        interval = histogram.quantile(q)
        out["quantiles"].append({"q": q, "estimate": interval.estimate, "ci_low": interval.low,
                                 "ci_high": interval.high})
    return out


def window_summary(layout: BucketLayout, params, frequency, n: int, confidence: float,
                   quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict | None:
    """A numeric metric's answer for one window (the worker's /histogram, ``ocms estimate``): the :func:`summary` of
    the histogram of the ``k`` unbiased bucket ``frequency`` estimates of ``n`` reports of the flat oracle
    ``params`` (:func:`oracle_noise`); None without reports."""
    if n == 0:
        return None
    return summary(Histogram.of(layout, frequency, n, oracle_noise(params), confidence), quantiles)


def tree_window_summary(layout: BucketLayout, hierarchy, level_counts, confidence: float,
                        quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict | None:
    """:func:`window_summary` of a hierarchical histogram (:class:`cms_core.hierarchy.HierarchyParams`) from each
    level's ``(n_l, node match counts)``: the consistent tree's leaves as the raw bucket frequencies, its exact
    noise (:class:`cms_core.hierarchy.HierarchyNoise`) for every interval, and per bucket its standard deviation
    (``sd``); ``n`` is every level's reports. None without reports."""
    from .hierarchy import estimate_counts

    n = sum(int(count) for count, _ in level_counts)
    if n == 0:
        return None
    leaves, noise = estimate_counts(hierarchy, level_counts)
    histogram = Histogram.of(layout, leaves, n, noise, confidence)
    doc = summary(histogram, quantiles)
    half = normal_z(confidence) * np.sqrt(noise.bucket_variances(histogram.consistent))
    for bucket, estimate, width in zip(doc["buckets"], leaves, half):
        bucket.update(estimate=float(estimate), ci_low=float(estimate - width), ci_high=float(estimate + width))
    doc["levels"] = [{"level": level, "nodes": size, "reports": int(count)}
                     for level, (size, (count, _)) in enumerate(zip(hierarchy.sizes, level_counts), start=1)]
    return doc


def true_summary(layout: BucketLayout, counts, quantiles: Sequence[float]) -> dict:
    """What a numeric answer estimates, computed from known bucket counts (a simulated fleet's truth): each
    quantile as :meth:`Histogram.quantile` reads it (linear inside a bucket) and the bucketized mean."""
    f = np.asarray(counts, dtype=np.float64)
    f = f / f.sum() if f.sum() > 0 else f
    return {"quantiles": {float(q): _quantile_from_cdf(layout.edges, np.cumsum(f), float(q)) for q in quantiles},
            "mean": float(f @ layout.points)}


# ----------------------------------------------------------------------------- accuracy (benchmarks, tests)
def rank_error(true_values, q: float, estimate: float) -> float:
    """``|F(estimate) - q|``: how far, in rank, an estimated ``q`` quantile is from the truth (F the empirical CDF)."""
    values = np.sort(np.asarray(true_values, dtype=np.float64))
    return abs(np.searchsorted(values, estimate, side="right") / values.size - q)


def wasserstein(true_values, histogram: Histogram) -> float:
    """The 1-Wasserstein distance between the clipped true values and the processed histogram (values spread
    uniformly inside each bucket), computed on the bucket edges and the true values."""
    return wasserstein_of_cdf(true_values, histogram.layout, histogram.cdf())


def wasserstein_of_cdf(true_values, layout: BucketLayout, cdf) -> float:
    """:func:`wasserstein` for any estimated CDF given at the upper edge of each bucket (a peer's, say)."""
    values = np.clip(np.sort(np.asarray(true_values, dtype=np.float64)), layout.lower, layout.upper)
    edges = layout.edges
    grid = np.unique(np.concatenate((edges, values)))
    true_cdf = np.searchsorted(values, grid, side="right") / values.size
    cdf_at_edges = np.concatenate(([0.0], np.asarray(cdf, dtype=np.float64)))
    est_cdf = np.interp(grid, edges, cdf_at_edges)
    return float(np.sum(np.abs(true_cdf[:-1] - est_cdf[:-1]) * np.diff(grid)))
