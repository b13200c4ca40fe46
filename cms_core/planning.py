"""Capacity planning: what a parameter choice costs and buys (``ocms plan``).

Pure functions over :class:`OCMSParams`; predictions use the exact estimator
variance (with m'), so they are what the sketch will report.
"""

from __future__ import annotations

import math

from . import theory
from .errors import InvalidParameterError
from .params import OCMSParams


def _positive(name: str, value) -> float:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidParameterError(name, value, "must be a finite number > 0")
    return float(value)


def predict(params: OCMSParams, n: int, confidence: float = 0.95, tracked_count: int | None = None) -> dict:
    """Predicted worst-case MSE, CI half-width, and l2 / l1 bounds for n reports."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameterError("n", n, "must be an integer >= 1")
    if not 0 < confidence < 1:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    worst = params.worst_case_mse(n)
    out = {
        "n": n,
        "confidence": confidence,
        "worst_case_mse": worst,
        "worst_case_std": math.sqrt(worst),
        "ci_half_width": theory.normal_z(confidence) * math.sqrt(worst),
        "ci_half_width_count": theory.normal_z(confidence) * math.sqrt(worst) * n,
    }
    count = tracked_count or params.tracked_count
    if count:
        l2 = params.l2_loss(n, count)
        out.update({"tracked_count": count, "l2_loss": l2, "l1_bound": math.sqrt(count * l2)})
    return out


def reports_needed(
    params: OCMSParams,
    *,
    target_mse: float | None = None,
    target_ci_half_width: float | None = None,
    target_l2: float | None = None,
    confidence: float = 0.95,
    tracked_count: int | None = None,
) -> int:
    """Smallest n meeting the one target given (all variances scale as 1/n)."""
    targets = {k: v for k, v in {"target_mse": target_mse, "target_ci_half_width": target_ci_half_width,
                                 "target_l2": target_l2}.items() if v is not None}
    if len(targets) != 1:
        raise InvalidParameterError("target", sorted(targets), "give exactly one target")
    (name, value), = targets.items()
    value = _positive(name, value)
    if name == "target_mse":
        return theory.reports_needed(params.worst_case_mse(1), value)
    if name == "target_ci_half_width":
        return theory.reports_needed(params.worst_case_mse(1), (value / theory.normal_z(confidence)) ** 2)
    count = tracked_count or params.tracked_count
    if not count:
        raise InvalidParameterError("tracked_count", None, "the l2 target needs the number of tracked values")
    return theory.reports_needed(params.l2_loss(1, count), value)
