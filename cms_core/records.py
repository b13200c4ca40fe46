"""Estimate records: the one JSON shape of a per-value answer (offline and HTTP).

``ocms estimate`` and the worker's HTTP API both describe a tracked value by
one record::

    {"value": "7", "match_count": 1234, "frequency": ..., "processed": ...,
     "count": ..., "processed_count": ..., "std": ...,
     "ci_low": ..., "ci_high": ..., "count_ci_low": ..., "count_ci_high": ...}

``value`` goes through :func:`cms_core.values.value_to_json` (always a JSON
string; integers as decimal digits). ``match_count`` is the integer number of
reports whose hash matched the value (the sufficient statistic; sums of
windows add exactly). Every estimate field is a float, or ``null`` where it has
no finite value: all of them with no reports (n = 0), an interval side that a
bound leaves unbounded (Chernoff beyond its range). JSON has no NaN/Infinity,
so ``null`` keeps every answer parseable by strict readers.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from .values import value_to_json

#: The float fields of a record, in document order after ``value`` and ``match_count``.
ESTIMATE_FIELDS = (
    "frequency", "processed", "count", "processed_count", "std",
    "ci_low", "ci_high", "count_ci_low", "count_ci_high",
)


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def estimate_record(estimates, match_counts: Sequence, index: int) -> dict:
    """The record of tracked value ``index`` (``estimates``: a :class:`cms_core.sketch.Estimates`)."""
    n = estimates.n
    frequency = float(estimates.frequency[index])
    processed = float(estimates.processed[index])
    ci_low, ci_high = float(estimates.ci_low[index]), float(estimates.ci_high[index])
    record = {"value": value_to_json(estimates.values[index]), "match_count": int(match_counts[index])}
    fields = (frequency, processed, frequency * n, processed * n, float(estimates.std[index]),
              ci_low, ci_high, ci_low * n, ci_high * n)
    for name, x in zip(ESTIMATE_FIELDS, fields):
        record[name] = _finite(x) if n else None
    return record


def estimate_records(estimates, match_counts: Sequence, indices: Iterable[int] | None = None) -> list[dict]:
    """Records for ``indices`` (default: every tracked value, in tracked order)."""
    if indices is None:
        indices = range(len(estimates.values))
    return [estimate_record(estimates, match_counts, i) for i in indices]
