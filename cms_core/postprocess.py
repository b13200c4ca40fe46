"""Post-processing of unbiased estimates (the raw values are always kept).

Post-processing an LDP output never weakens the privacy guarantee, but it
trades unbiasedness for lower error, so :class:`cms_core.sketch.Estimates`
always carries the raw unbiased values next to the processed ones.

* ``clip``: min(1, max(0, f)) per value (paper Section "Revisit CMS").
* ``norm_sub``: Norm-Sub of Wang et al., "Locally Differentially Private
  Frequency Estimation with Consistency" (NDSS 2020): find the shift delta
  with sum(max(f + delta, 0)) = total and return max(f + delta, 0). Over the
  full dictionary total = 1; over a tracked subset the default total is the
  estimated tracked mass sum(f) clipped to [0, 1].
* ``simplex``: Euclidean projection onto {f >= 0, sum f <= 1} (the probability
  simplex when the tracked set is the whole dictionary, where it coincides
  with Norm-Sub at total = 1; on a subset it only removes mass when the
  clipped estimates exceed 1).

Every method maps each raw estimate through one monotone map ``x -> clip(x + delta, 0, 1)`` with
one shift ``delta`` for all values (0 for clip and for simplex when it removes nothing;
Norm-Sub's shift otherwise), so the same map tells where the noise floor and the interval
ends land on the processed scale (:func:`apply_with_shift`, :func:`processed_interval`).
"""

from __future__ import annotations

import numpy as np

from .errors import InvalidParameterError

METHODS = ("none", "clip", "norm_sub", "simplex")


def clip(f: np.ndarray) -> np.ndarray:
    return np.clip(f, 0.0, 1.0)


def _shifted_to_total(f: np.ndarray, total: float) -> tuple[np.ndarray, float]:
    """(max(f + delta, 0), delta) with the sum equal to ``total``; delta = -inf when total <= 0. O(D log D)."""
    if f.size == 0:
        return f.copy(), 0.0
    if total <= 0:
        return np.zeros_like(f), -np.inf
    s = np.sort(f)[::-1]
    cumulative = np.cumsum(s)
    k = np.arange(1, s.size + 1)
    # The support is the largest k with s_k + (total - cumsum_k)/k > 0.
    shifts = (total - cumulative) / k
    valid = s + shifts > 0
    k_star = int(np.nonzero(valid)[0][-1])
    return np.maximum(f + shifts[k_star], 0.0), float(shifts[k_star])


def norm_sub(f: np.ndarray, total: float | None = None) -> np.ndarray:
    """Norm-Sub (Wang et al. 2020); ``total`` defaults to clip(sum f, 0, 1)."""
    return _norm_sub_shifted(f, total)[0]


def _norm_sub_shifted(f: np.ndarray, total: float | None) -> tuple[np.ndarray, float]:
    if total is None:
        total = float(np.clip(f.sum(), 0.0, 1.0))
    if not 0.0 <= total <= 1.0:
        raise InvalidParameterError("total", total, "must be in [0, 1]")
    return _shifted_to_total(f, total)


def project_simplex(f: np.ndarray) -> np.ndarray:
    """Euclidean projection onto {f >= 0, sum f <= 1}."""
    return _simplex_shifted(f)[0]


def _simplex_shifted(f: np.ndarray) -> tuple[np.ndarray, float]:
    clipped = np.maximum(f, 0.0)
    if clipped.sum() <= 1.0:
        return clipped, 0.0
    return _shifted_to_total(f, 1.0)


def apply(method: str, f: np.ndarray, total: float | None = None) -> np.ndarray:
    return apply_with_shift(method, f, total)[0]


def apply_with_shift(method: str, f: np.ndarray, total: float | None = None) -> tuple[np.ndarray, float]:
    """(processed, delta): processed == clip(f + delta, 0, 1) elementwise for every method but
    "none" (the identity; delta 0). ``delta`` is -inf when Norm-Sub keeps no mass (all zero)."""
    if method == "none":
        return f.copy(), 0.0
    if method == "clip":
        return clip(f), 0.0
    if method == "norm_sub":
        return _norm_sub_shifted(f, total)
    if method == "simplex":
        return _simplex_shifted(f)
    raise InvalidParameterError("postprocess", method, f"expected one of {METHODS}")


def shifted(method: str, delta: float, x):
    """Where a raw-scale number lands on the processed scale: clip(x + delta, 0, 1) ("none": x)."""
    x = np.asarray(x, dtype=np.float64)
    if method == "none":
        return x
    with np.errstate(invalid="ignore"):
        return np.clip(x + delta, 0.0, 1.0)


def processed_interval(method: str, processed: np.ndarray, ci_low: np.ndarray, ci_high: np.ndarray):
    """The interval shown beside a processed estimate: the raw interval cut to [0, 1] (the true
    frequency lies there, so it covers the truth exactly as often as the raw interval does),
    widened just enough to hold the processed estimate when the method moved it outside (Norm-Sub's
    shift, simplex's projection). Never a negative end beside a non-negative estimate; never narrower
    than the valid interval. "none": the raw interval itself (the estimate shown is the raw one)."""
    if method == "none":
        return np.asarray(ci_low, dtype=np.float64), np.asarray(ci_high, dtype=np.float64)
    low = np.clip(np.asarray(ci_low, dtype=np.float64), 0.0, 1.0)
    high = np.clip(np.asarray(ci_high, dtype=np.float64), 0.0, 1.0)
    return np.minimum(low, processed), np.maximum(high, processed)
