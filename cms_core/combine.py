"""Combining the estimates of several parameter versions of one metric (inverse-variance weighting).

A metric whose parameters were rotated (a new version: another epsilon, m or mechanism) is counted
per version: each version's reports give an unbiased estimate g_i of the frequency f of a value
among *its* reports, with variance Var_i(f, n_i) = ``params_i.variance(f, n_i)``. When the versions'
devices share one distribution, the combined estimate is the inverse-variance weighted mean

    g = sum_i w_i g_i / sum_i w_i,   w_i = 1 / Var_i(f_bar, n_i),   Var(g) = 1 / sum_i w_i,

with the weights evaluated at one common plug-in frequency f_bar = clip(sum_i n_i g_i / sum_i n_i, 0, 1)
(so a version's weight does not follow its own noise), and the normal interval g +- z * sqrt(Var(g)).
The noise test of f = 0 (:mod:`cms_core.theory`, "Above the noise") uses the combined variance under
that hypothesis, 1 / sum_i 1/Var_i(0, n_i) (the weights at f = 0), ``null_variance``.
The combination is unbiased for any fixed weights; the plug-in makes the variance and interval
approximate, like the per-version plug-in variance of :class:`cms_core.sketch.OCMSSketch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import theory
from .errors import InvalidParameterError
from .params import OCMSParams


@dataclass(frozen=True)
class Combined:
    """Per value: the combined frequency, its variance, std and normal interval; ``reports`` per value:
    the reports of the versions that track it (the combined count is frequency x reports)."""

    n: int
    reports: np.ndarray
    frequency: np.ndarray
    variance: np.ndarray
    std: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    confidence: float
    null_variance: np.ndarray


def combine_frequencies(parts: Sequence[tuple[OCMSParams, int, np.ndarray]], confidence: float = 0.95) -> Combined:
    """Inverse-variance combination of per-version unbiased frequencies.

    ``parts``: (params, n, frequencies) per version, frequencies of the same values in the same
    order (NaN where a version does not track a value: it then takes no part for that value).
    Versions with n = 0 take no part. A value no version estimates combines to NaN.
    """
    if not 0.0 < confidence < 1.0:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    parts = [(p, int(n), np.asarray(g, dtype=np.float64)) for p, n, g in parts if int(n) > 0]
    if not parts:
        raise InvalidParameterError("parts", 0, "at least one version with reports")
    shape = parts[0][2].shape
    if any(g.shape != shape for _, _, g in parts):
        raise InvalidParameterError("parts", [g.shape for _, _, g in parts], "frequencies of the same values")
    present = [~np.isnan(g) for _, _, g in parts]
    reports = sum(np.where(mask, n, 0) for (_, n, _), mask in zip(parts, present))
    weighted = sum(np.where(mask, n * np.nan_to_num(g), 0.0) for (_, n, g), mask in zip(parts, present))
    with np.errstate(invalid="ignore", divide="ignore"):
        f_bar = np.clip(weighted / reports, 0.0, 1.0)
    f_bar = np.nan_to_num(f_bar)
    weights = [np.where(mask, 1.0 / np.asarray(p.variance(f_bar, n), dtype=np.float64), 0.0)
               for (p, n, _), mask in zip(parts, present)]
    total = sum(weights)
    with np.errstate(invalid="ignore", divide="ignore"):
        frequency = sum(w * np.nan_to_num(g) for w, (_, _, g) in zip(weights, parts)) / total
        variance = 1.0 / total
    frequency = np.where(total > 0, frequency, np.nan)
    variance = np.where(total > 0, variance, np.nan)
    std = np.sqrt(variance)
    half = theory.normal_z(confidence) * std
    null_precision = sum(np.where(mask, 1.0 / np.float64(p.variance(0.0, n)), 0.0) for (p, n, _), mask in zip(parts, present))
    with np.errstate(divide="ignore"):
        null_variance = np.where(null_precision > 0, 1.0 / null_precision, np.nan)
    return Combined(sum(n for _, n, _ in parts), np.asarray(reports, dtype=np.int64), frequency, variance, std, frequency - half, frequency + half,
                    confidence, null_variance)
