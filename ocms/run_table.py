"""What ``ocms run`` prints: the truth beside the worker's estimates, the companion metrics' lines and what the
fleet sent. An estimate the worker says is under the noise floor is marked :data:`UNDER_NOISE`.
"""

from __future__ import annotations

import numpy as np

from .run_metric import Companion

def coverage(truth: np.ndarray, records: list[dict], scale: float, dataset=None) -> tuple[int, int]:
    """(values whose scaled true count lies inside the count CI, values with an estimate)."""
    inside = total = 0
    for rec in records:
        if rec.get("count_ci_low") is None:  # n = 0: null estimates
            continue
        true_count = truth[value_id(dataset, rec["value"]) if dataset is not None else int(rec["value"])] * scale
        total += 1
        inside += rec["count_ci_low"] <= true_count <= rec["count_ci_high"]
    return inside, total


#: Marks an estimate under the noise floor in the table and the companion lines.
UNDER_NOISE = "~"


def noise_mark(record: dict) -> str:
    """``UNDER_NOISE`` for a record the worker says is not above the noise floor, else a space."""
    return UNDER_NOISE if record.get("above_noise") is False else " "


def noise_legend(doc: dict, confidence: float = 0.95) -> str | None:
    """The line explaining ``UNDER_NOISE`` with the answer's floor (None before there is one)."""
    floor, count, n = doc.get("noise_floor"), doc.get("noise_floor_count"), doc.get("n", 0)
    if floor is None or count is None or not n:
        return None
    return (f"  {UNDER_NOISE} under the noise floor ({count:,.0f} of {n:,} reports, {floor:.2%}): cannot be told "
            f"from zero among the {doc.get('noise_values', 0):,} tracked values at {confidence:.0%}")


def table(dataset, truth: np.ndarray, sent: int, doc: dict, show: int, confidence: float = 0.95) -> str:
    """Truth next to the estimates for the ``show`` most frequent values, and the coverage line.

    The true count is the fleet's count scaled to the reports the worker counted so far (x counted /
    sent): like with like while the worker catches up. Estimates the worker calls under the noise
    floor are marked ``UNDER_NOISE``, explained by a legend line."""
    records = doc.get("estimates", [])
    counted = doc.get("n", 0)
    order = np.argsort(-truth, kind="stable")[:show]
    scale = counted / sent if sent else 0.0  # compare like with like while the worker catches up
    lines = [f"reports sent {sent:,}; counted by the worker {counted:,} (true counts scaled to the {counted:,} counted)",
             f"  {'value':>12} {'true, scaled':>13} {'estimate':>10}    {confidence:.0%} CI of the count"]
    by_value = {value_id(dataset, rec["value"]): rec for rec in records if "value" in rec}  # names or digits
    for value in order:
        label = dataset.label(int(value))
        rec = by_value.get(int(value), {})
        if rec.get("count") is not None:  # records of n = 0 hold null estimates (cms_core.records)
            lines.append(f"  {label:>12} {truth[value] * scale:>13,.0f} {rec['count']:>10,.0f}{noise_mark(rec)}   "
                         f"[{rec['count_ci_low']:,.0f}, {rec['count_ci_high']:,.0f}]")
        else:
            lines.append(f"  {label:>12} {truth[value] * scale:>13,.0f} {'-':>10}")
    legend = noise_legend(doc, confidence)
    if legend:
        lines.append(legend)
    if doc.get("tree_levels"):
        lines.append(f"  estimates of the consistent tree of its {doc['tree_levels']} levels, every level's reports")
    inside, total = coverage(truth, records, scale, dataset)
    if total:
        lines.append(f"  {inside:,} of {total:,} values inside their {confidence:.0%} CI "
                     f"(about {confidence:.0%} expected: one in {1 / (1 - confidence):.0f} outside is normal)")
    return "\n".join(lines)


def tree_estimates(doc: dict) -> dict:
    """A tree version's /histogram answer ``doc`` (issue 40) as the estimates :func:`table` reads: each bucket's
    count and interval from the consistent tree of every level (its /estimates answer the finest level alone, a
    level's share of the reports). No noise floor: the answer's is its finest level's, not the tree's."""
    n, h = doc.get("n", 0), doc.get("histogram")
    records = [] if h is None else [
        {"value": str(i), "count": b["estimate"] * n, "count_ci_low": b["ci_low"] * n, "count_ci_high": b["ci_high"] * n}
        for i, b in enumerate(h["buckets"])]
    return {"n": n, "estimates": records, "tree_levels": len(h["levels"]) if h is not None else None}


def fleet_line(live, via: str, companions=()) -> str:
    """What the fleet actually reached: reports, seconds and reports/s, and the path it took;
    ``companions``: (metric name, its fleet's result) of the companion metrics, sent beside it."""
    line = (f"fleet sent {live.reports:,} reports in {live.messages:,} messages in {live.seconds:.1f} s "
            f"({live.reports_per_second:,.0f} reports/s) {via}")
    if not companions:
        return line
    reports = live.reports + sum(result.reports for _, result in companions)
    seconds = max([live.seconds] + [result.seconds for _, result in companions])
    each = ", ".join(f"{name} {result.reports:,}" for name, result in companions)
    rate = f"{reports / seconds:,.0f}" if seconds > 0 else "n/a"
    return f"{line}; with the companion metrics ({each}): {reports:,} reports in all ({rate} reports/s)"


def companion_line(companion: Companion, truth, sent: int, docs: dict, show: int = 3) -> str:
    """One line per companion metric: reports, the noise floor, and its ``show`` truly most frequent
    values, by name, with their estimates (95% CI) beside the true counts (scaled to the reports
    counted, as in the table); an estimate under the noise floor is marked as in the table.
    ``docs``: value name -> the worker's /metrics/NAME/estimates/VALUE answer."""
    any_doc = next(iter(docs.values()), {})
    counted = any_doc.get("n", 0)
    head = f"{companion.name:<15} eps={companion.version.params.epsilon:g}  sent {sent:,}  counted {counted:,}"
    if any_doc.get("withheld"):
        return f"{head}  withheld (fewer than {any_doc.get('min_reports', 0):,} reports)"
    if any_doc.get("noise_floor_count") is not None:
        head += f"  noise floor {any_doc['noise_floor_count']:,.0f}"
    scale = counted / sent if sent else 0.0
    parts = []
    for name, doc in docs.items():
        rec = doc.get("estimate") or {}
        true = truth[value_id(companion.dataset, name)] * scale
        if rec.get("count") is None:
            parts.append(f"{name} - (true {true:,.0f})")
        else:
            parts.append(f"{name} {rec['count']:,.0f}{noise_mark(rec).strip()} [{rec['count_ci_low']:,.0f}, "
                         f"{rec['count_ci_high']:,.0f}] (true {true:,.0f})")
    return f"{head}  " + ", ".join(parts)


def numeric_line(name: str, layout, truth, doc: dict, true_mean: float | None = None) -> str:
    """A numeric metric's line under a table (issue 40): its quantiles and mean with their intervals (the worker's
    /histogram answer ``doc``) beside the fleet's truth (``truth``: reports per bucket index; ``true_mean``: the
    devices' clipped mean, for a version with a Hybrid mean)."""
    return f"{name:<15} numeric  counted {doc.get('n', 0):,}  " + numeric_parts(layout, truth, doc, true_mean)


def numeric_companion_line(companion: Companion, truth, sent: int, doc: dict, true_mean: float | None = None) -> str:
    """A numeric companion metric's line (flight_air_time): headed as :func:`companion_line` heads the others
    (epsilon, reports sent and counted), then :func:`numeric_parts` -- its quantiles and mean beside the true ones
    of the flights sent. ``doc``: the worker's /metrics/NAME/histogram answer."""
    head = (f"{companion.name:<15} eps={companion.version.params.epsilon:g}  sent {sent:,}  "
            f"counted {doc.get('n', 0):,}")
    return f"{head}  " + numeric_parts(companion.numeric.layout, truth, doc, true_mean)


def numeric_parts(layout, truth, doc: dict, true_mean: float | None = None) -> str:
    """Each quantile and the mean of a /histogram answer ``doc``, with its interval, beside the truth read from the
    true bucket counts as the answer reads its estimates (cms_core.numeric.true_summary: linear inside a bucket),
    so an interval covers what it is compared with; or why there is no estimate yet. A Hybrid mean (the answer's
    ``mean`` of mechanism ``hybrid``) is the devices' clipped numbers' mean: beside it ``true_mean``, the fleet's
    clipped mean, and after it the histogram's own mean (``histogram_mean``) beside the bucketized truth."""
    from cms_core.numeric import true_summary

    h = doc.get("histogram")
    if h is None:
        return ("withheld (fewer than {:,} reports)".format(doc.get("min_reports", 0))
                if doc.get("withheld") else "no reports yet")
    true = true_summary(layout, truth, [row["q"] for row in h["quantiles"]])
    parts = [f"p{row['q'] * 100:g} {row['estimate']:,.4g} [{row['ci_low']:,.4g}, {row['ci_high']:,.4g}] "
             f"(true {true['quantiles'][row['q']]:,.4g})" for row in h["quantiles"]]
    means = [("mean", h["mean"], true["mean"])]
    if h["mean"].get("mechanism") == "hybrid":
        means = [("mean", h["mean"], true_mean, "Hybrid"), ("histogram mean", h.get("histogram_mean"), true["mean"])]
    for name, mean, truth_of, *how in means:
        if mean is not None and mean["estimate"] is not None:
            beside = ", ".join([*how, *([] if truth_of is None else [f"true {truth_of:,.4g}"])])
            parts.append(f"{name} {mean['estimate']:,.4g} [{mean['ci_low']:,.4g}, {mean['ci_high']:,.4g}]"
                         + (f" ({beside})" if beside else ""))
    return ", ".join(parts)


def companion_values(companion: Companion, truth, show: int = 3) -> list[str]:
    """The names of the ``show`` most frequent values sent so far (what companion_line shows)."""
    if truth is None:
        return []
    return [companion.dataset.label(int(i)) for i in np.argsort(-truth, kind="stable")[:show]]


def value_id(dataset, name: str) -> int:
    """The dataset's value id of a record's value (a category name, or decimal digits)."""
    index = getattr(dataset, "_label_index", None)
    if index is None and dataset.labels is not None:
        index = {label: i for i, label in enumerate(dataset.labels)}
        object.__setattr__(dataset, "_label_index", index)
    if index is not None and name in index:
        return index[name]
    return int(name)
