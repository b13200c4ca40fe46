"""``version=combined``: one answer from every live version of a metric (the inverse-variance combination of
their unbiased estimates, cms_core.combine), with what such an answer may claim (withheld when the versions' reports
together are fewer than the largest ``min_reports``; the largest central epsilon of the versions).

Each version's answer is read through its own :class:`agents.answers.service.EstimateService`; values are
matched by name. ``entry`` is the metric's ``agents.catalog.MetricEntry`` (its spec, its services oldest first,
the names its live versions track), which builds on this module.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from .privacy import withheld as is_withheld
from .request import ApiError, parse_options
from .service import Answer, EstimateService, Job, Read

#: ``version=combined``: every live version's estimate of a value, combined (cms_core.combine).
COMBINED = "combined"
#: What a combined answer reads from each version's answer.
_COMBINED_ENDPOINTS = ("estimates", "estimate_value")


def combined_check(entry, endpoint: str, query: Mapping[str, str], value: str | None) -> Read:
    """The checks of a ``version=combined`` request (each live version's, reading no counts); returns the
    read of :func:`combined_answer`."""
    if endpoint not in _COMBINED_ENDPOINTS:
        raise ApiError("version", f"combined is answered by /estimates and /estimates/VALUE, not /{endpoint}")
    for name, allowed in (("postprocess", "none"), ("interval", "normal")):
        if query.get(name, allowed) != allowed:
            raise ApiError(name, f"version=combined combines the unbiased estimates with normal intervals; "
                                 f"give {name}={allowed} or a single version")
    if "params" in query:
        raise ApiError("params", "version=combined reads every live version; leave params out")
    services = entry.services
    reads = [s.check(endpoint, query, value) if endpoint == "estimates" or _tracks(s, value) else None
             for s in services]
    if endpoint == "estimate_value" and not any(reads):
        services[-1].value_index(value)  # raises the version's 404 naming the value
    confidence = parse_options(query).confidence
    return lambda: combined_answer(entry, endpoint, [r() if r is not None else None for r in reads], confidence)


def combined_answer(entry, endpoint: str, answers: list[Answer | None], confidence: float) -> Answer:
    """The inverse-variance combination of every live version's unbiased estimate of each value, for
    one window (``cms_core.combine``), from each version's ``answers`` (None: a version not tracking the
    value). Values are matched by name; a value some version does not track combines the versions that
    do. Windows under ``min_reports`` (summed over versions) are withheld. Only the raw (unbiased)
    estimates with normal intervals combine."""
    from cms_core import theory
    from cms_core.combine import combine_frequencies
    from cms_core.records import ESTIMATE_FIELDS, NOISE_CORRECTION

    services = entry.services
    work = sum(a.work for a in answers if a is not None)
    tracked_names = entry.tracked_names
    multiplier = theory.one_sided_z(theory.bonferroni_level(confidence, tracked_names))

    def gather() -> Job:
        # Each version's raw answer (not withheld one by one: min_reports applies to the combined n).
        docs = [(s, s.estimator.finish(dataclasses.replace(a.gather(), rename=None)))
                for s, a in zip(services, answers) if a is not None]
        by_version = []
        names: list[str] = []
        seen: set[str] = set()
        for s, doc in docs:
            raw = doc["estimates"] if "estimates" in doc else [doc["estimate"]]
            records = {s.name_of(r["value"]): r for r in raw}
            by_version.append(records)
            for name in records:
                if name not in seen:
                    seen.add(name)
                    names.append(name)
        parts = []
        for (s, doc), records in zip(docs, by_version):
            g = np.array([np.nan if records.get(v, {}).get("frequency") is None else records[v]["frequency"]
                          for v in names], dtype=np.float64)
            parts.append((s.version.params, doc["n"] if records else 0, g))
        n = sum(doc["n"] for _, doc in docs)
        min_reports = max(s.version.min_reports for s in services)
        out = {"metric": entry.name, "version": COMBINED, "combined": True, "min_reports": min_reports,
               "versions": [{"version": s.version.version, "n": doc["n"], "fingerprint": s.fingerprint,
                             "central_epsilon": doc["central_epsilon"]} for s, doc in docs],
               "window": docs[0][1]["window"] if docs else None, "n": n, "confidence": confidence,
               "interval": "normal", "postprocess": "none", **combined_central(docs)}
        withheld = is_withheld(n, min_reports) or not any(p[1] for p in parts)
        out["withheld"] = withheld
        records = []
        # The noise test of f = 0 over every name a live version tracks, at each value's combined
        # variance under that hypothesis (normal: no single binomial count). A value fewer versions
        # track has fewer reports and a higher floor, so each record carries its own; the answer's
        # is the lowest, that of the values every version tracks.
        out.update(noise_floor=None, noise_floor_count=None, processed_noise_floor=None, noise_values=tracked_names,
                   noise_correction=NOISE_CORRECTION)
        if not withheld:
            c = combine_frequencies(parts, confidence)
            floors = theory.noise_floor(multiplier, c.null_variance)
            for i, name in enumerate(names):
                record = {"value": name, "combined": True}
                fields = dict(frequency=c.frequency[i], processed=c.frequency[i], count=c.frequency[i] * c.reports[i],
                              processed_count=c.frequency[i] * c.reports[i], std=c.std[i], ci_low=c.ci_low[i],
                              ci_high=c.ci_high[i], count_ci_low=c.ci_low[i] * c.reports[i],
                              count_ci_high=c.ci_high[i] * c.reports[i], processed_ci_low=c.ci_low[i],
                              processed_ci_high=c.ci_high[i], processed_count_ci_low=c.ci_low[i] * c.reports[i],
                              processed_count_ci_high=c.ci_high[i] * c.reports[i])
                for field in ESTIMATE_FIELDS:
                    x = float(fields[field])
                    record[field] = x if np.isfinite(x) else None
                record["above_noise"] = bool(c.frequency[i] > floors[i])  # NaN (no estimate) is not above
                record["noise_floor"] = float(floors[i]) if np.isfinite(floors[i]) else None
                record["reports"] = int(c.reports[i])
                records.append(record)
            finite = floors[np.isfinite(floors)]
            if finite.size:
                floor = float(finite.min())
                out.update(noise_floor=floor, noise_floor_count=floor * n, processed_noise_floor=floor)
        if endpoint == "estimates":
            out["estimates"] = records
        else:
            out["estimate"] = records[0] if records else None
        return Job("doc", doc=out)

    return Answer(work, gather)


def combined_central(docs: list[tuple[EstimateService, dict]]) -> dict:
    """The central epsilon of a combined answer over (version, its answer) pairs: each version's reports were
    shuffled among their own version's, so a report is protected at its version's figure; the answer states
    the largest (null when a version with reports has none)."""
    counted = [(s, doc) for s, doc in docs if doc["n"]]
    shuffled = sum(doc["shuffled_reports"] for _, doc in docs)
    batches = [doc["shuffle_batch_min"] for _, doc in docs if doc["shuffle_batch_min"]]
    out = {"central_epsilon": None, "central_delta": None, "central_bound": None,
           "shuffle_batch_min": min(batches) if batches else None, "shuffled_reports": shuffled,
           "central_reason": None}
    if counted and all(doc["central_epsilon"] is not None for _, doc in counted):
        out.update(central_epsilon=max(doc["central_epsilon"] for _, doc in counted),
                   central_delta=max(doc["central_delta"] for _, doc in counted), central_bound=counted[0][1]["central_bound"],
                   central_note="the largest central epsilon of the versions combined (each version's reports "
                                "were shuffled among that version's)")
    else:
        reasons = [doc.get("central_reason") for _, doc in counted if doc["central_epsilon"] is None]
        out["central_reason"] = next((r for r in reasons if r), "partly_shuffled") if counted else "no_reports"
        out["central_note"] = "; ".join(f"version {s.version.version}: {doc['central_note']}" for s, doc in counted
                                        if doc["central_epsilon"] is None) if counted else "no reports in this window"
    return out


def _tracks(service: EstimateService, value: str | None) -> bool:
    try:
        service.value_index(value if value is not None else "")
    except ApiError:
        return False
    return True
