"""``ocms plan``: the parameters devices and workers use, and what they predict, before any report is sent.

One body for the flags' metric and a registry's: a record per metric version (:func:`plan_record`:
its parameters, the prediction at ``--n`` reports, both mechanisms compared, its exposure to
poisoning, with ``--shuffled`` its central epsilon, and the reports a target needs); the flags' one
version is described in full, a registry's versions as a table.
"""

from __future__ import annotations

import json

from infra.output import text_table, write_stdout
from infra.settings import finite_float, int_at_least
from registry.flags import FLAGS_PATH, PARAMETER_SETTINGS, add_metric_flags, metrics_from_args
from registry.values_file import MAX_WHOLE_DICTIONARY

#: ``ocms plan`` predicts at this many reports unless --n says otherwise.
PLAN_REPORTS = 100_000


def plan_record(version, args, targets: dict) -> dict:
    """What ``ocms plan`` says of one metric version: its parameters, the prediction at ``--n`` reports, both
    mechanisms compared, its exposure to poisoning (and with ``--shuffled`` its central epsilon) and, for
    a target, the reports it needs. D (the l2 loss) is the parameters' tracked count, else the version's
    tracked set's size; the noise floor of the poisoning figures also takes a whole integer dictionary a
    worker would track (d <= 100,000) when the flags name no tracked set."""
    from cms_core import planning

    params, n, confidence = version.params, args.n, args.confidence
    tracked = params.tracked_count or version.tracked_count
    record = {"metric": version.metric, "version": version.version, "live": version.live,
              "params": params.describe(), "tracked_count": None if tracked is None else str(tracked),
              "prediction": planning.predict(params, n, confidence, tracked),
              "mechanisms": planning.compare_mechanisms(params, n, tracked)}
    whole = params.dictionary_size if params.value_domain == "integer" and \
        params.dictionary_size <= MAX_WHOLE_DICTIONARY else None
    record.update(planning.privacy_figures(params, n=n, confidence=confidence, tracked_count=tracked or whole,
                                           shuffled=args.shuffled, delta=args.delta))
    record["poisoning"]["note"] = version.mechanism_note  # a pinned mechanism was not auto's pick
    if getattr(version, "longitudinal", None) is not None:  # issue 38: both budgets, a day's and 30 days' variance
        from registry.longitudinal import plan_fields

        record["longitudinal"] = plan_fields(version.longitudinal, n, confidence)
    if getattr(version, "numeric", None) is not None:  # issue 40: the CDF's predicted error, the mechanisms'
        from registry.numeric import plan_fields as numeric_fields

        record["numeric"] = numeric_fields(version, n, confidence)
    if getattr(version, "hierarchy", None) is not None:  # a tree: the figures above are its finest level's
        record["hierarchy"] = version.describe_tree()
    if targets:
        record["reports_needed"] = planning.reports_needed(params, confidence=confidence, tracked_count=tracked,
                                                           **targets)
    return record


def cmd_plan(args) -> int:
    """One body for the flags' metric and a registry's: a record per version (plan_record); the flags' one
    version is described in full, a registry's versions as a table."""
    from cms_core import planning

    planning.check_shuffle_flags(args.shuffled, args.delta)
    registry = metrics_from_args(args)
    metrics = (registry.metric(args.metric),) if args.metric is not None else registry.metrics
    targets = {k: v for k, v in {"target_mse": args.target_mse, "target_ci_half_width": args.target_ci,
                                 "target_l2": args.target_l2}.items() if v is not None}
    records = [plan_record(v, args, targets) for m in metrics for v in m.versions]
    if registry.path == FLAGS_PATH:
        (record,) = records
        text = json.dumps(_flags_plan_document(record, targets), indent=2) + "\n" if args.json else \
            _plan_detail(record, targets)
    elif args.json:
        text = json.dumps({"registry": registry.path, "n": args.n, "confidence": args.confidence, "target": targets,
                           "metrics": records}, indent=1) + "\n"
    else:
        text = _plan_table(registry.path, records, args, targets)
    write_stdout(text)
    return 0


def _flags_plan_document(record: dict, targets: dict) -> dict:
    doc = {key: record[key] for key in ("params", "mechanisms", "prediction", "poisoning", "shuffled", "longitudinal",
                                        "numeric")
           if key in record}
    if targets:
        doc.update(reports_needed=record["reports_needed"], target=targets)
    return doc


def _plan_detail(record: dict, targets: dict) -> str:
    from cms_core import planning

    d, pr = record["params"], record["prediction"]
    lines = [f"epsilon          {d['epsilon']:g}  (mode {d['mode']}" + (f", f*={d['f_star']:g}" if d["f_star"] is not None else "") + ")"]
    if d["mechanism"] == "direct":
        lines += [f"mechanism        direct randomized response, m = d = {d['hash_range']}",
                  f"report size      {d['report_bytes']} bytes payload (z)"]
    else:
        lines += [f"hash range m     {d['hash_range']}   (m' = {d['effective_hash_range']:.12g})",
                  f"field            {d['field']}   (q={d['q']}, r={d['r']})",
                  f"report size      {d['report_bytes']} bytes payload (a0, a1, z)"]
    lines += [f"keep probability {d['keep_probability']:.6g}", f"fingerprint      {d['fingerprint']}",
              f"with n={pr['n']}:",
              f"  worst-case MSE   {pr['worst_case_mse']:.4g}  (std {pr['worst_case_std']:.4g})",
              f"  {pr['confidence']:.0%} CI half-width  +-{pr['ci_half_width']:.4g} in frequency, "
              f"+-{pr['ci_half_width_count']:.4g} in count"]
    if "l2_loss" in pr:
        lines.append(f"  l2 over D={pr['tracked_count']}  {pr['l2_loss']:.4g}; l1 <= {pr['l1_bound']:.4g}")
    lines += planning.comparison_lines(record["mechanisms"])
    lines += planning.privacy_lines(record["poisoning"], record.get("shuffled"))
    if "longitudinal" in record:
        from registry.longitudinal import plan_lines

        lines += plan_lines(record["longitudinal"])
    if targets:
        (name, value), = targets.items()
        lines.append(f"reports needed for {name.replace('target_', '')} <= {value:g}: {record['reports_needed']}")
    return "\n".join(lines) + "\n"


def _plan_table(path: str, records: list[dict], args, targets: dict) -> str:
    from cms_core import planning

    n, confidence = args.n, args.confidence
    header = ["metric", "version", "epsilon", "mechanism", "m", "field", "report bytes",
              f"{confidence:.0%} CI +- (freq)", "CI +- (count)", "objective ocms | direct"]
    if targets:
        header.append("reports needed")
    header += ["fakes for 1%", "for floor"] + (["central eps"] if args.shuffled is not None else [])
    rows = [header]
    for r in records:
        p, pr = r["params"], r["prediction"]
        eps = f"{p['epsilon']:g}" + (f" (life {r['longitudinal']['lifetime_epsilon']:g})" if "longitudinal" in r else "")
        row = [r["metric"], str(r["version"]) + ("" if r["live"] else " (retired)"), eps,
               "hierarchy" if "hierarchy" in r else p["mechanism"], f"{p['hash_range']:,}",
               p["field"] if p["mechanism"] == "ocms" else "-",
               str(p["report_bytes"]), f"{pr['ci_half_width']:.4g}", f"{pr['ci_half_width_count']:,.0f}",
               _objectives(r["mechanisms"])]
        if targets:
            row.append(f"{r['reports_needed']:,}")
        row += planning.privacy_cells(r["poisoning"], r.get("shuffled"))
        rows.append(row)
    target_text = "".join(f"; reports needed for {k.replace('target_', '')} <= {v:g}" for k, v in targets.items())
    target_text += "; objective: worst-case MSE (l2 loss in mode l2) of each mechanism, * the lower"
    if any("hierarchy" in r for r in records):
        target_text += "; a hierarchy's m, field and figures are its finest level's (the buckets)"
    notes = [f"note: {r['metric']} version {r['version']}: {r['poisoning']['note']}" for r in records
             if r["poisoning"]["note"]]
    if any("longitudinal" in r for r in records):
        from registry.longitudinal import plan_lines

        notes += [f"{r['metric']} version {r['version']}: " + "\n  ".join(plan_lines(r["longitudinal"]))
                  for r in records if "longitudinal" in r]
    if any("numeric" in r for r in records):
        from registry.numeric import plan_lines as numeric_lines

        notes += [f"{r['metric']} version {r['version']}: " + "\n  ".join(numeric_lines(r["numeric"]))
                  for r in records if "numeric" in r]
    return (f"{path}: predictions at n={n:,} reports per version{target_text}\n"
            + text_table(rows, right=set(range(1, len(header))) - {3, 5}) + "\n"
            + planning.privacy_legend(n, confidence, args.shuffled, args.delta) + "\n"
            + "".join(line + "\n" for line in notes))


def _objectives(comparison: dict) -> str:
    """Both mechanisms' objective (what mechanism 'auto' compares), the lower one marked."""
    key = comparison["objective"]
    cells = []
    for name in ("ocms", "direct"):
        row = comparison[name]
        text = "n/a" if row is None else f"{row[key]:.3g}"
        cells.append(text + ("*" if comparison["chosen"] == name else ""))
    return " | ".join(cells)


def add_plan_parser(sub) -> None:
    plan = sub.add_parser("plan", help="choose parameters and predict accuracy / reports needed",
                          description="Choose the OCMS+RR parameters devices and workers use (mechanism, hash range m, "
                                      "field, report size) for an epsilon and a dictionary, and predict the accuracy "
                                      "at --n reports or the reports a target needs; with --registry, a row per "
                                      "version of every metric.")
    add_metric_flags(plan, PARAMETER_SETTINGS, registry_help="plan every metric of a registry (a row per version) "
                     "instead of the metric of the flags", metric_help="with --registry: only this metric")
    plan.add_argument("--n", type=int_at_least(1), default=PLAN_REPORTS,
                      help=f"number of reports to predict accuracy for (default {PLAN_REPORTS:,})")
    plan.add_argument("--confidence", type=finite_float, default=0.95, help="CI confidence (default 0.95)")
    plan.add_argument("--target-mse", type=finite_float, help="report the n needed for this worst-case MSE")
    plan.add_argument("--target-ci", type=finite_float, help="report the n needed for this CI half-width (frequency)")
    plan.add_argument("--target-l2", type=finite_float, help="report the n needed for this l2 loss (needs --tracked)")
    plan.add_argument("--shuffled", type=int_at_least(1), metavar="N",
                      help="also print the central epsilon of a batch of N reports shuffled by the collector "
                           "(FMT21 bound; docs/privacy.md)")
    plan.add_argument("--delta", type=finite_float, metavar="D",
                      help="delta of that central (epsilon, delta), in (0, 1/N) (default 1e-6, or the largest "
                           "power of ten below 1/N for N >= 10^6)")
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(func=cmd_plan, parser=plan)
