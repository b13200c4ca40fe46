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
        out.update({"tracked_count": count, "l2_loss": l2, "l1_bound": theory.l1_bound_of(l2, count)})
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


def compare_mechanisms(params: OCMSParams, n: int = 1, tracked_count: int | None = None) -> dict:
    """Both mechanisms for ``params``' budget and dictionary, and which the exact objective picks.

    Rows: OCMS+RR (m chosen for params' objective, or params' own m if fixed) and
    direct RR (m = d), each with its worst-case MSE over [0, f*] and, when D is
    known, its l2 loss, at n reports. ``chosen`` is what ``mechanism="auto"``
    builds: the lower worst-case MSE (mode mse/fixed) or l2 (mode l2).
    """
    from .params import compare_mechanisms as build_both

    count = tracked_count or params.tracked_count
    mode = "l2" if params.mode == "l2" else "mse"
    f_star = params.f_star if params.f_star is not None else 1.0
    both = build_both(params.epsilon, None if params.value_domain == "string" else params.dictionary_size,
                      mode=mode, f_star=f_star, tracked_count=count if mode == "l2" else None,
                      value_domain=params.value_domain, binding=params.binding)
    ocms = params if params.mechanism == "ocms" else both.ocms
    rows = {}
    for name, candidate in (("ocms", ocms), ("direct", both.direct)):
        if candidate is None:
            rows[name] = None
            continue
        row = {"hash_range": candidate.hash_range, "report_bytes": candidate.report_bytes,
               "worst_case_mse": candidate.worst_case_mse(n, f_star), "fingerprint": candidate.fingerprint.hex()}
        if count:
            row["l2_loss"] = candidate.l2_loss(n, count)
        rows[name] = row
    key = "l2_loss" if mode == "l2" else "worst_case_mse"
    chosen = "ocms"
    if rows["direct"] is not None and rows["direct"][key] < rows["ocms"][key]:
        chosen = "direct"
    return {"n": n, "f_star": f_star, "tracked_count": count, "objective": key, **rows, "chosen": chosen}


def comparison_lines(comparison: dict) -> list[str]:
    """``ocms plan``'s text for :func:`compare_mechanisms`."""
    lines = [f"mechanisms at n={comparison['n']} (worst-case MSE over f in [0, {comparison['f_star']:g}]"
             + (f"; l2 over D={comparison['tracked_count']}" if comparison["tracked_count"] else "") + "):"]
    for name, label in (("ocms", "OCMS+RR"), ("direct", "direct RR")):
        row = comparison[name]
        if row is None:
            lines.append(f"  {label:<10} not available (needs integer values, 2 <= d <= 2^32 - 1)")
            continue
        text = f"  {label:<10} m={row['hash_range']:<6} MSE {row['worst_case_mse']:.4g}"
        if "l2_loss" in row:
            text += f"  l2 {row['l2_loss']:.4g}"
        lines.append(text + f"  ({row['report_bytes']} B/report)")
    pick = {"ocms": "OCMS+RR", "direct": "direct RR"}[comparison["chosen"]]
    lines.append(f"  lower {comparison['objective'].replace('_', ' ')}: {pick} (--mechanism auto picks it)")
    return lines
