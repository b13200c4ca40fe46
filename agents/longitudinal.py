"""The worker's answers for longitudinal metrics (issue 38, cms_core/longitudinal.py).

A longitudinal version's reports are decoded exactly like one-shot reports at (eps_1, g): one
report has the law of one-shot randomized response at eps_1, so the estimator and the counts are
unchanged. What differs, and what this module adds to an answer:

* **Privacy, stated as it is**: ``longitudinal`` in the answer's header and in the /metrics listing
  gives the mode, eps_1 per report and eps_inf per memoized value for a device's whole life (at most
  g * eps_inf per metric version). With OCMS+RR the fixed hash (a0, a1) is a pseudonym that links a
  device's reports, also inside a shuffled batch, so no central (shuffled) epsilon is claimed
  for such a metric: the local eps_1 is what holds (:func:`withhold_central`). Direct RR reports
  carry no hash, so a batch's central figure is kept, per report; a lifetime total is never amplified.
* **Intervals of windows holding several reports of a device**: a device's reports share its hash
  and memoized response, so they are correlated (:meth:`LongitudinalParams.window_variance`). The
  worker cannot see devices; it assumes a device reports **at most once per base bucket** (set the
  metric's ``bucket`` to its reporting period: ``1d`` for daily reports) and widens every interval,
  standard deviation and noise floor of a window spanning k base buckets to the variance with
  k reports per device (:func:`widen`). One bucket: k = 1, nothing changes. The cumulative
  ("total") window is taken to span the retained base buckets.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from cms_core import postprocess
from cms_core.longitudinal import LongitudinalParams
from cms_core.sketch import Estimates


def version_fields(version) -> dict:
    """``{"longitudinal": {...}}`` for the /metrics listing and /params; {} for one-shot versions."""
    lp = getattr(version, "longitudinal", None)
    if lp is None:
        return {}
    return {"longitudinal": {
        "mode": "longitudinal", "epsilon_per_report": lp.epsilon, "lifetime_epsilon": lp.lifetime_epsilon,
        "max_lifetime_epsilon": lp.max_lifetime_epsilon, "hash_range": lp.g, "mechanism": lp.report.mechanism,
        "audited_epsilon": (f"{lp.epsilon:g} per report; {lp.lifetime_epsilon:g} for all reports of one memoized "
                            f"value over a device's life (at most {lp.max_lifetime_epsilon:g} per device)"),
    }}


def buckets_spanned(start: float, stop: float, bucket_seconds: int) -> int:
    """Base buckets a window [start, stop) touches: the most reports a device sends into it (assumed)."""
    return max(1, math.ceil((stop - start) / bucket_seconds))


def header_fields(service, window) -> dict:
    """The answer header's ``longitudinal`` (with the window's assumed reports per device); {} if one-shot."""
    fields = version_fields(service.version)
    if not fields:
        return {}
    bucket = service.version.bucket_seconds
    if window.kind == "total":
        oldest, newest = service.oldest_bucket(), service.newest_bucket()
        k = 1 if oldest is None else buckets_spanned(oldest, newest + bucket, bucket)
    else:
        k = buckets_spanned(window.start, window.stop, bucket)
    fields["longitudinal"].update(bucket_seconds=bucket, reports_per_device_at_most=k)
    return fields


def for_span(info: dict | None, start: float, stop: float) -> dict | None:
    """``info`` for a trend point [start, stop): its own reports per device."""
    if info is None:
        return None
    return dict(info, reports_per_device_at_most=buckets_spanned(start, stop, info["bucket_seconds"]))


def widen(est: Estimates, params, info: dict | None) -> Estimates:
    """``est`` with the variance of k correlated reports per device (module doc); unchanged for k = 1."""
    if info is None or est.n == 0:
        return est
    k = int(info["reports_per_device_at_most"])
    if k <= 1:
        return est
    lp = LongitudinalParams(info["lifetime_epsilon"], params)
    f = np.clip(est.frequency, 0.0, 1.0)
    variance = np.asarray(lp.window_variance(f, est.n, k), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.sqrt(np.where(est.variance > 0, variance / est.variance, 1.0))
    ci_low = est.frequency - (est.frequency - est.ci_low) * scale
    ci_high = est.frequency + (est.ci_high - est.frequency) * scale
    processed_low, processed_high = postprocess.processed_interval(est.postprocess, est.processed, ci_low, ci_high)
    floor, processed_floor = est.noise_floor, est.processed_noise_floor
    if math.isfinite(floor):
        null = float(lp.window_variance(0.0, est.n, k) / lp.variance(0.0, est.n))
        widened = floor * math.sqrt(null)
        delta = _shift_of(est)
        processed_floor = float(postprocess.shifted(est.postprocess, delta, widened)) if delta is not None \
            else processed_floor
        floor = widened
    return dataclasses.replace(
        est, variance=variance, std=np.sqrt(variance), ci_low=ci_low, ci_high=ci_high,
        processed_ci_low=processed_low, processed_ci_high=processed_high,
        above_noise=est.frequency > floor, noise_floor=floor, processed_noise_floor=processed_floor)


def _shift_of(est: Estimates) -> float | None:
    """The post-processing's additive shift (processed = clip(f + delta)), read off a value it did not clip."""
    if est.postprocess == "none":
        return 0.0
    if est.postprocess == "clip":
        return 0.0
    inside = (est.processed > 0) & (est.processed < 1)
    if not inside.any():
        return None
    i = int(np.flatnonzero(inside)[0])
    return float(est.processed[i] - est.frequency[i])


CENTRAL_FIELDS = ("central_epsilon", "central_delta", "central_bound")


def withhold_central(doc: dict) -> dict:
    """No central (shuffled) epsilon for a longitudinal OCMS+RR metric: the fixed hash links a device's reports."""
    info = doc.get("longitudinal")
    if info is None:
        return doc
    if info.get("mechanism") != "ocms":  # direct RR: no hash travels; the batch's figure holds for one report
        if doc.get("central_epsilon") is not None:
            doc["central_note"] = (doc.get("central_note", "") + f"; longitudinal metric: a device's reports in "
                                   f"several batches share its memoized response, so they do not compose to k times "
                                   f"this figure: what bounds them all is the local {info['lifetime_epsilon']:g} per "
                                   f"memoized value")
        return doc
    note = (f"longitudinal metric: each device's reports carry its hash for life, a pseudonym that finds them in "
            f"any shuffled batch, so no central epsilon is claimed; each report is {info['epsilon_per_report']:g}-DP "
            f"and all reports of one memoized value {info['lifetime_epsilon']:g}-DP")
    for target in [doc] + [p for p in doc.get("points", ()) if isinstance(p, dict)]:
        if target.get("central_epsilon") is not None or "central_note" in target:
            for name in CENTRAL_FIELDS:
                if name in target:
                    target[name] = None
            if "central_note" in target or target is doc:
                target["central_note"] = note
    return doc


__all__ = ["buckets_spanned", "for_span", "header_fields", "version_fields", "widen", "withhold_central"]
