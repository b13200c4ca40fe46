"""Small statistics helpers for the tests (no scipy dependency)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np


def chi2_critical(df: int, alpha: float) -> float:
    """Upper alpha quantile of chi-square(df), Wilson-Hilferty (accurate to ~1% for df >= 3)."""
    z = NormalDist().inv_cdf(1 - alpha)
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2_statistic(observed: np.ndarray, expected: np.ndarray) -> float:
    return float(((observed - expected) ** 2 / expected).sum())
