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
"""

from __future__ import annotations

import numpy as np

from .errors import InvalidParameterError

METHODS = ("none", "clip", "norm_sub", "simplex")


def clip(f: np.ndarray) -> np.ndarray:
    return np.clip(f, 0.0, 1.0)


def _shift_to_total(f: np.ndarray, total: float) -> np.ndarray:
    """max(f + delta, 0) with the sum equal to ``total`` (> 0); O(D log D)."""
    if f.size == 0:
        return f.copy()
    if total <= 0:
        return np.zeros_like(f)
    s = np.sort(f)[::-1]
    cumulative = np.cumsum(s)
    k = np.arange(1, s.size + 1)
    # The support is the largest k with s_k + (total - cumsum_k)/k > 0.
    shifts = (total - cumulative) / k
    valid = s + shifts > 0
    k_star = int(np.nonzero(valid)[0][-1])
    return np.maximum(f + shifts[k_star], 0.0)


def norm_sub(f: np.ndarray, total: float | None = None) -> np.ndarray:
    """Norm-Sub (Wang et al. 2020); ``total`` defaults to clip(sum f, 0, 1)."""
    if total is None:
        total = float(np.clip(f.sum(), 0.0, 1.0))
    if not 0.0 <= total <= 1.0:
        raise InvalidParameterError("total", total, "must be in [0, 1]")
    return _shift_to_total(f, total)


def project_simplex(f: np.ndarray) -> np.ndarray:
    """Euclidean projection onto {f >= 0, sum f <= 1}."""
    clipped = np.maximum(f, 0.0)
    if clipped.sum() <= 1.0:
        return clipped
    return _shift_to_total(f, 1.0)


def apply(method: str, f: np.ndarray, total: float | None = None) -> np.ndarray:
    if method == "none":
        return f.copy()
    if method == "clip":
        return clip(f)
    if method == "norm_sub":
        return norm_sub(f, total)
    if method == "simplex":
        return project_simplex(f)
    raise InvalidParameterError("postprocess", method, f"expected one of {METHODS}")
