"""Estimate records: the one JSON shape of a per-value answer (offline and HTTP).

``ocms estimate`` and the worker's HTTP API both describe a tracked value by
one record::

    {"value": "7", "match_count": 1234, "frequency": ..., "processed": ...,
     "count": ..., "processed_count": ..., "std": ...,
     "ci_low": ..., "ci_high": ..., "count_ci_low": ..., "count_ci_high": ...,
     "processed_ci_low": ..., "processed_ci_high": ...,
     "processed_count_ci_low": ..., "processed_count_ci_high": ..., "above_noise": true}

and an answer listing records carries :func:`noise_fields` beside them
(``noise_floor``, ``noise_floor_count``, ``processed_noise_floor``,
``noise_values``, ``noise_correction``): whether each value stands above the
noise of the whole tracked set (:mod:`cms_core.theory`, "Above the noise").

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
    "processed_ci_low", "processed_ci_high", "processed_count_ci_low", "processed_count_ci_high",
)
#: The multiple-testing correction behind ``above_noise`` and ``noise_floor`` (theory, "Above the noise").
NOISE_CORRECTION = "bonferroni"


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def estimate_record(estimates, match_counts: Sequence, index: int) -> dict:
    """The record of tracked value ``index`` (``estimates``: a :class:`cms_core.sketch.Estimates`)."""
    n = estimates.n
    frequency = float(estimates.frequency[index])
    processed = float(estimates.processed[index])
    ci_low, ci_high = float(estimates.ci_low[index]), float(estimates.ci_high[index])
    low, high = float(estimates.processed_ci_low[index]), float(estimates.processed_ci_high[index])
    record = {"value": value_to_json(estimates.values[index]), "match_count": int(match_counts[index])}
    fields = (frequency, processed, frequency * n, processed * n, float(estimates.std[index]),
              ci_low, ci_high, ci_low * n, ci_high * n, low, high, low * n, high * n)
    for name, x in zip(ESTIMATE_FIELDS, fields):
        record[name] = _finite(x) if n else None
    record["above_noise"] = bool(estimates.above_noise[index]) if n else None
    return record


def noise_fields(estimates) -> dict:
    """The answer-level fields of the noise test: ``noise_floor`` (the frequency a raw estimate must
    exceed to stand above zero among ``noise_values`` tracked values at the answer's confidence),
    ``noise_floor_count`` (the same in reports), ``processed_noise_floor`` (where the floor lands on
    the post-processed scale) and ``noise_correction``; null where there is no floor (n = 0, a
    Chernoff bound that says nothing at this n)."""
    n = estimates.n
    floor = _finite(estimates.noise_floor) if n else None
    return {
        "noise_floor": floor,
        "noise_floor_count": None if floor is None else floor * n,
        "processed_noise_floor": _finite(estimates.processed_noise_floor) if n else None,
        "noise_values": int(estimates.noise_values),
        "noise_correction": NOISE_CORRECTION,
    }


def estimate_records(estimates, match_counts: Sequence, indices: Iterable[int] | None = None) -> list[dict]:
    """Records for ``indices`` (default: every tracked value, in tracked order)."""
    if indices is None:
        indices = range(len(estimates.values))
    return [estimate_record(estimates, match_counts, i) for i in indices]
