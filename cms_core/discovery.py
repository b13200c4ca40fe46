"""Discovering unknown values (private heavy hitters) by prefix extension, OCMS+RR as the oracle.

Design and its guarantees: docs/discovery.md. In short:

* A discoverable metric has a **domain**: strings (an alphabet of characters, or
  UTF-8 bytes; a maximum length in symbols; symbols per level) or integers
  (``bits`` <= 64; bits per level). It has ``g`` levels; level L describes the
  first ``prefix_length(L)`` symbols (bits) of a value.
* Each report describes the value's prefix at **one** level chosen uniformly at
  random, independently of the value, with that level's own :class:`OCMSParams`
  (binding ``f"{metric}@{version}/level{L}"``, so every level has its own
  fingerprint and reports of different levels never mix). The report is one
  epsilon-LDP OCMS+RR report; the level is public.
* The server decodes level by level: level 1 tests every one-step extension of
  the empty prefix, level L every one-step extension of level L-1's survivors.
  A candidate **survives** when its match count reaches the level's exact
  binomial critical count at the Bonferroni-corrected level alpha / (g K_L)
  (K_L candidates at level L): the family-wise probability that any
  candidate nobody holds (true frequency 0) survives, at any level, is <= alpha.
* A string prefix that ends inside the level (the value is shorter) carries an
  end marker and is a complete value; complete values keep being counted at
  later levels, whose reports are independent of the selection, and their
  final estimate pools those later levels (unbiased; see :func:`discover`).

The domain and its prefixes are :mod:`cms_core.discovery_domain`; each level's parameters, the cut-off
and the detection thresholds, :mod:`cms_core.discovery_plan`; this module runs the pass (:func:`discover`)
and keeps every name importable from ``cms_core.discovery``.

Pure numerics: reports arrive as decoded :class:`ReportBatch` per level; no I/O.
Every variance and estimator comes from :mod:`cms_core.theory` through
:class:`OCMSSketch` / :class:`OCMSParams`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field as dataclass_field
from typing import Mapping, Sequence

import numpy as np

from . import kernel
from .binomial import critical_count, null_match_probability
from .discovery_domain import (STRING_PREFIX_BITS, UTF8, DiscoveryDomain, Prefix, child_bits, extensions,
                               positive_int, prefix_element_value, prefix_label, prefix_of, prefix_value,
                               prefix_values, root_prefix)
from .discovery_plan import (DETECTION_MISS, cutoff_frequency, detection_probability, detection_threshold,
                             level_binding, level_params, levels_detection_threshold, per_test_alpha,
                             window_detection_threshold)
from .errors import InvalidParameterError, InvalidValueError, ParameterMismatchError
from .fields import PrimeField
from .params import OCMSParams
from .reports import ReportBatch
from .sketch import OCMSSketch
from .values import TrackedValues, value_record

#: Default cap on candidates decoded at one level (the decode is O(reports * candidates)).
DEFAULT_MAX_CANDIDATES = 100_000


# ------------------------------------------------------------------ results

@dataclass
class LevelResult:
    level: int
    reports: int
    candidates: int
    per_test_alpha: float
    cutoff_count: int | None  # None: no candidate left to test at this level
    cutoff_frequency: float
    survivors: list = dataclass_field(default_factory=list)  # (Prefix, frequency, ci_low, ci_high)
    capped: int = 0  # open survivors dropped by max_candidates (largest estimates kept)

    def to_json(self, domain: DiscoveryDomain) -> dict:
        return {
            "level": self.level,
            "prefix_length": domain.prefix_length(self.level),
            "reports": self.reports,
            "candidates": self.candidates,
            "per_test_alpha": self.per_test_alpha,
            "cutoff_count": self.cutoff_count,
            "cutoff_frequency": _finite(self.cutoff_frequency),
            "survivors": [
                {**value_record(prefix_label(domain, p), "prefix"), "ended": p.ended, "frequency": f,
                 "ci_low": lo, "ci_high": hi}
                for p, f, lo, hi in self.survivors
            ],
            "dropped_by_candidate_cap": self.capped,
        }


@dataclass
class DiscoveredValue:
    value: object  # int, str or bytes
    found_at_level: int
    truncated: bool  # a string longer than max_length: only its first max_length symbols are known
    frequency: float
    std: float
    ci_low: float
    ci_high: float
    reports_used: int
    selection_biased: bool  # the estimate reuses the reports that selected it (no later level)

    def to_json(self, total_reports: int) -> dict:
        return {
            **value_record(self.value),  # + bytes_hex, cut_inside_character for bytes that are not whole characters
            "found_at_level": self.found_at_level,
            "truncated": self.truncated,
            "frequency": self.frequency,
            "std": self.std,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "count": self.frequency * total_reports,
            "count_ci_low": self.ci_low * total_reports,
            "count_ci_high": self.ci_high * total_reports,
            "reports_used": self.reports_used,
            "selection_biased": self.selection_biased,
        }


@dataclass
class DiscoveryResult:
    domain: DiscoveryDomain
    alpha: float
    confidence: float
    total_reports: int
    levels: list[LevelResult]
    discovered: list[DiscoveredValue]
    reports_per_level: list[int] = dataclass_field(default_factory=list)  # every level, decoded or not
    #: The frequency a value needed to be found with these reports (:func:`window_detection_threshold`).
    detection_threshold: float = math.inf
    detection_miss: float = DETECTION_MISS

    def to_json(self) -> dict:
        threshold = _finite(self.detection_threshold)
        return {
            "domain": self.domain.describe(),
            "alpha": self.alpha,
            "confidence": self.confidence,
            "reports": self.total_reports,
            "reports_per_level": self.reports_per_level,
            "detection_threshold": threshold,
            "detection_threshold_count": None if threshold is None else threshold * self.total_reports,
            "detection_miss": self.detection_miss,
            "discovered": [d.to_json(self.total_reports) for d in self.discovered],
            "levels": [lv.to_json(self.domain) for lv in self.levels],
        }


def _finite(x: float):
    return float(x) if math.isfinite(x) else None

# ------------------------------------------------------------------ discover

def _runs(elements: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal runs [start, stop) of consecutive integers, in order (candidates of one parent form one)."""
    runs: list[tuple[int, int]] = []
    for e in elements:
        if runs and runs[-1][1] == e:
            runs[-1] = (runs[-1][0], e + 1)
        else:
            runs.append((e, e + 1))
    return runs


#: Runs at least this long are decoded on the kernel's range path; shorter ones as explicit values.
MIN_RANGE_RUN = 8


def _counts(params: OCMSParams, batch: ReportBatch, prefixes: Sequence[Prefix], domain: DiscoveryDomain) -> OCMSSketch:
    """Match counts of ``prefixes``: contiguous runs (a parent's children) on the kernel's range path
    when the field is prime, the rest as explicit values; one sketch over the whole list either way."""
    elements = [prefix_element_value(domain, p) for p in prefixes]
    tracked = TrackedValues.of(params, elements)
    if not isinstance(params.field, PrimeField) or len(batch) == 0:
        return OCMSSketch(params, tracked).update(batch)
    batch.validate(params)
    counts = np.zeros(len(elements), np.int64)
    position, loose = 0, []
    for start, stop in _runs(elements):
        if stop - start >= MIN_RANGE_RUN:
            counts[position:position + stop - start] = kernel.match_counts(params, batch,
                                                                           TrackedValues.range(params, start, stop))
        else:
            loose.extend(range(position, position + stop - start))
        position += stop - start
    if loose:
        some = TrackedValues.of(params, [elements[i] for i in loose])
        counts[loose] = kernel.match_counts(params, batch, some)
    return OCMSSketch(params, tracked, counts, len(batch))


def discover(
    domain: DiscoveryDomain,
    params_by_level: Sequence[OCMSParams],
    batches: Mapping[int, ReportBatch],
    *,
    alpha: float = 0.05,
    confidence: float = 0.95,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
) -> DiscoveryResult:
    """Run prefix extension over one window's reports (``batches[L]``: level L's reports, validated).

    Returns the per-level candidates, cut-offs and survivors, and the discovered
    values with estimates. A complete value (a string that ended, or any survivor
    of the last level) is estimated from the levels *after* the one that found it
    (their reports played no part in selecting it: unbiased, valid CI), pooled
    into one sketch (every string level has the same epsilon, m and field, so the
    same estimator); a value found at the last level has no later level and is
    estimated from the selecting reports (``selection_biased``: biased upward
    near the cut-off).
    """
    _check_discover_inputs(domain, params_by_level, batches, confidence, max_candidates)
    g = domain.levels
    passes = _PrefixExtension(domain, alpha, confidence, max_candidates)
    results: list[LevelResult] = []
    for level in range(1, g + 1):
        if not passes.open_survivors and not passes.completed:
            break
        params = params_by_level[level - 1]
        results.append(passes.level(level, params, batches.get(level) or ReportBatch.empty(params)))
    discovered = sorted((passes.estimate(p, found, stats, params_by_level[found - 1], batches)
                         for p, found, stats in passes.completed), key=lambda d: -d.frequency)
    per_level = [len(batches.get(level) or ()) for level in range(1, g + 1)]
    threshold = window_detection_threshold(domain, params_by_level, per_level, [r.candidates for r in results],
                                           alpha=alpha)
    total = sum(len(b) for b in batches.values())
    return DiscoveryResult(domain, alpha, confidence, total, results, discovered, per_level, threshold)


def _check_discover_inputs(domain: DiscoveryDomain, params_by_level: Sequence[OCMSParams],
                           batches: Mapping[int, ReportBatch], confidence: float, max_candidates: int) -> None:
    if len(params_by_level) != domain.levels:
        raise ParameterMismatchError(f"{len(params_by_level)} level parameter sets for {domain.levels} levels")
    unknown = sorted(set(batches) - set(range(1, domain.levels + 1)))
    if unknown:
        raise InvalidValueError(f"reports for level(s) {unknown}: this domain has levels 1..{domain.levels}")
    positive_int("max_candidates", max_candidates)
    if not 0.0 < confidence < 1.0:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")


class _PrefixExtension:
    """One window's pass, level by level: the open survivors to extend, the complete values found so far
    and, for each, the matches and reports of the levels after the one that found it."""

    def __init__(self, domain: DiscoveryDomain, alpha: float, confidence: float, max_candidates: int):
        self.domain, self.alpha, self.confidence, self.max_candidates = domain, alpha, confidence, max_candidates
        self.open_survivors: list[Prefix] = [root_prefix(domain)]
        self.completed: list[tuple[Prefix, int, tuple]] = []  # (prefix, level found, (freq, std, lo, hi) at discovery)
        self.later_counts: dict[Prefix, list[int]] = {}  # pooled (matches, reports) from levels after discovery

    def level(self, level: int, params: OCMSParams, batch: ReportBatch) -> LevelResult:
        """Test every extension of the open survivors at their cut-off; count the complete values again."""
        domain, g, n = self.domain, self.domain.levels, len(batch)
        candidates = extensions(domain, self.open_survivors, level)
        test_alpha = per_test_alpha(self.alpha, g, len(candidates))
        k = critical_count(n, null_match_probability(params), test_alpha) if candidates else None
        result = LevelResult(level, n, len(candidates), test_alpha, k,
                             cutoff_frequency(params, n, k) if k is not None else math.nan)
        carried = [p for p, _, _ in self.completed]
        tracked = candidates + carried
        if tracked and n:
            sketch = _counts(params, batch, tracked, domain)
            est = sketch.estimate(confidence=self.confidence)
            counts = sketch.counts
        else:
            counts = np.zeros(len(tracked), np.int64)
            est = None
        for i, p in enumerate(carried):
            pooled = self.later_counts.setdefault(p, [0, 0])
            pooled[0] += int(counts[len(candidates) + i])
            pooled[1] += n
        kept = [i for i in range(len(candidates)) if n and k is not None and counts[i] >= k]
        kept.sort(key=lambda i: -counts[i])
        next_open = []
        for i in kept:
            p = candidates[i]
            stats = (float(est.frequency[i]), float(est.std[i]), float(est.ci_low[i]), float(est.ci_high[i]))
            frequency, _, low, high = stats
            result.survivors.append((p, frequency, low, high))
            if p.ended or level == g:
                self.completed.append((p, level, stats))
            else:
                next_open.append(p)
        self.open_survivors = self.capped(next_open, level, result)
        return result

    def capped(self, next_open: list[Prefix], level: int, result: LevelResult) -> list[Prefix]:
        """The survivors to extend at the next level: at most max_candidates children in all (largest first)."""
        if level < self.domain.levels and next_open:
            room = max(1, self.max_candidates // self.domain.branching(level + 1))
            if len(next_open) > room:
                result.capped = len(next_open) - room
                return next_open[:room]
        return next_open

    def estimate(self, p: Prefix, found: int, stats: tuple, params: OCMSParams,
                 batches: Mapping[int, ReportBatch]) -> DiscoveredValue:
        """A complete value's estimate: from the later levels' pooled counts, else from the reports that found it."""
        matches, reports = self.later_counts.get(p, [0, 0])
        truncated = self.domain.kind == "strings" and not p.ended
        if reports:
            tracked = TrackedValues.of(params, [prefix_element_value(self.domain, p)])
            later = OCMSSketch(params, tracked, np.array([matches]), reports).estimate(confidence=self.confidence)
            freq, std, lo, hi = (float(later.frequency[0]), float(later.std[0]), float(later.ci_low[0]),
                                 float(later.ci_high[0]))
            biased = False
        else:
            freq, std, lo, hi = stats
            reports = len(batches.get(found) or ())
            biased = True
        return DiscoveredValue(prefix_label(self.domain, p), found, truncated, freq, std, lo, hi, reports, biased)


def assign_levels(levels: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Simulation: each report's level, uniform on 1..levels and independent of the value (seeded)."""
    return rng.integers(1, levels + 1, size=n)


def simulate_level_reports(domain: DiscoveryDomain, params_by_level: Sequence[OCMSParams], values: Sequence,
                           rng: np.random.Generator) -> dict[int, ReportBatch]:
    """Simulation path (seeded, never on a device): one report per value, at a uniform random level.

    ``values`` may repeat (a sample of a population); a level computes the prefix elements
    of the distinct values drawn at that level only, so the work is O(reports), not
    O(levels x distinct values) (a long tail of values each drawn once or twice).
    """
    from .privatize import simulate_reports
    from .values import encode_value, elements_to_array, limbs_for

    values = list(values)
    levels = assign_levels(domain.levels, len(values), rng)
    distinct: dict = {}
    codes = np.fromiter((distinct.setdefault(v, len(distinct)) for v in values), dtype=np.int64, count=len(values))
    uniques = list(distinct)
    out = {}
    for level in range(1, domain.levels + 1):
        params = params_by_level[level - 1]
        rows = np.flatnonzero(levels == level)
        if rows.size == 0:
            continue
        drawn, row_codes = np.unique(codes[rows], return_inverse=True)
        elements = prefix_values(domain, [uniques[c] for c in drawn.tolist()], level)
        table = elements_to_array([encode_value(params, e) for e in elements], limbs_for(params))
        out[level] = simulate_reports(params, table[row_codes.reshape(-1)], rng)
    return out


__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "STRING_PREFIX_BITS",
    "child_bits",
    "DiscoveredValue",
    "DiscoveryDomain",
    "DiscoveryResult",
    "LevelResult",
    "Prefix",
    "UTF8",
    "assign_levels",
    "cutoff_frequency",
    "detection_probability",
    "detection_threshold",
    "levels_detection_threshold",
    "window_detection_threshold",
    "discover",
    "extensions",
    "level_binding",
    "level_params",
    "per_test_alpha",
    "prefix_element_value",
    "prefix_label",
    "prefix_of",
    "prefix_value",
    "prefix_values",
    "simulate_level_reports",
]
