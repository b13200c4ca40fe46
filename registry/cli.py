"""``ocms registry check|lock|describe`` and ``ocms plan --registry``: the commands that read a registry.

Hooked into the ``ocms`` parser by :func:`add_registry_commands` (one call in
agents/cli.py), so the command code lives with the registry.
"""

from __future__ import annotations

import json
import sys

from cms_core.errors import OCMSError

from .output import write_stdout


def add_registry_commands(sub) -> None:
    """Add ``ocms registry ...`` and the ``--registry/--metric`` flags of ``ocms plan`` to the subparsers."""
    reg = sub.add_parser("registry", help="validate, lock and describe a metric registry (deploy/registry.yaml)",
                         description="Commands on a metric registry file; format: docs/registry.md.")
    verbs = reg.add_subparsers(dest="registry_command", required=True, metavar="VERB")

    check = verbs.add_parser("check", help="validate a registry and compare it with its lock (published versions)",
                             description="Validate every field once (errors name file:line, metric and field) and "
                                         "refuse published versions edited in place or removed.")
    check.add_argument("file", help="the registry YAML file")
    check.add_argument("--lock", help="lock file (default: the registry's path with .lock)")
    check.add_argument("--previous", metavar="OLD_FILE",
                       help="also compare with a previous registry file (e.g. `git show main:deploy/registry.yaml`)")
    check.add_argument("--require-locked", action="store_true",
                       help="fail when a version is not in the lock yet (CI: every version must be locked)")
    check.set_defaults(func=cmd_check)

    lock = verbs.add_parser("lock", help="record every version's fingerprint in the lock file (publish new versions)",
                            description="Write the lock after checking that no locked version changed.")
    lock.add_argument("file", help="the registry YAML file")
    lock.add_argument("--lock", help="lock file (default: the registry's path with .lock)")
    lock.set_defaults(func=cmd_lock)

    describe = verbs.add_parser("describe", help="every metric and version: fingerprint, epsilon, m, domain, tracked",
                                description="A table of every metric version (fingerprint, epsilon, m, mechanism, "
                                            "domain, tracked values), or with --json every value of every version, "
                                            "discovery levels included.")
    describe.add_argument("file", help="the registry YAML file")
    describe.add_argument("--metric", help="only this metric")
    describe.add_argument("--json", action="store_true", help="machine-readable output with every value")
    describe.set_defaults(func=cmd_describe)

    device = verbs.add_parser("device-config", help="the minimal JSON a device needs (per metric: newest live "
                              "version, fingerprint, epsilon, m, field, categories)",
                              description="The minimal JSON a device needs to report each metric with its newest "
                                          "live version (fingerprint, epsilon, m, keep threshold, field, categories, "
                                          "discovery levels), and nothing else (docs/registry.md, Device "
                                          "configuration).")
    device.add_argument("file", help="the registry YAML file")
    device.add_argument("--metric", action="append", help="only this metric (repeatable)")
    device.add_argument("--out", help="write to this file instead of stdout")
    device.set_defaults(func=cmd_device_config)

    plan = sub.choices.get("plan")
    if plan is not None:
        plan.add_argument("--registry", metavar="FILE", help="plan every metric of a registry (a row per version) "
                                                             "instead of one parameter set from the flags")
        plan.add_argument("--metric", help="with --registry: only this metric")
        _epsilon_optional(plan)  # required only without --registry (checked in plan_command)
        plan.set_defaults(func=_plan_dispatch(plan.get_default("func")))

    estimate = sub.choices.get("estimate")
    if estimate is not None:
        estimate.add_argument("--registry", metavar="FILE", help="estimate a registry metric (with --metric): its "
                              "parameters and tracked values; values answered by name")
        estimate.add_argument("--metric", help="with --registry: the metric the captures hold")
        _add_metric_version_flag(estimate)
        _epsilon_optional(estimate)  # required only without --registry
        estimate.set_defaults(func=_estimate_dispatch(estimate.get_default("func")))

    simulate = sub.choices.get("simulate")
    if simulate is not None:
        simulate.add_argument("--registry", metavar="FILE", help="report a registry metric (with --metric): its "
                              "parameters, fingerprint and category names; dataset labels map to categories by name")
        simulate.add_argument("--metric", help="with --registry: the metric the fleet reports")
        _add_metric_version_flag(simulate)
        simulate.add_argument("--discovery", action="store_true", help="with --registry: discovery reports (a random "
                              "level each, docs/discovery.md) of a metric with a discovery: block, to a capture (--out)")
        defaults = {"epsilon": simulate.get_default("epsilon"), "dataset": simulate.get_default("dataset")}
        simulate.set_defaults(func=_simulate_dispatch(simulate.get_default("func"), defaults), epsilon=None, dataset=None)


def _epsilon_optional(parser) -> None:
    """``--epsilon`` is required only without ``--registry`` (the registry gives it); the command checks,
    and the help says so."""
    for action in parser._actions:
        if action.dest == "epsilon":
            action.required = False
            action.help = action.help.replace("[required]", "[required without --registry]")


def _add_metric_version_flag(parser) -> None:
    parser.add_argument("--metric-version", type=int, help="with --registry: this version (default the newest live)")


def parameter_flags_given(args) -> list[str]:
    """The parameter-set flags given on a command line that takes every parameter from ``--registry``."""
    return [flag for flag, value in (("--epsilon", args.epsilon), ("--dictionary-size", args.dictionary_size),
                                     ("--strings", args.strings or None), ("--tracked", args.tracked),
                                     ("--hash-range", args.hash_range),
                                     ("--mechanism", getattr(args, "mechanism", None))) if value is not None]


def _plan_dispatch(single):
    def plan_command(args) -> int:
        if args.registry is None:
            if args.metric is not None:
                raise OCMSError("--metric needs --registry FILE")
            if args.epsilon is None:
                raise OCMSError("--epsilon is required (or plan the metrics of a registry with --registry FILE)")
            return single(args)
        return cmd_plan(args)

    return plan_command


def _estimate_dispatch(single):
    def estimate_command(args) -> int:
        if args.registry is None:
            if args.metric is not None or args.metric_version is not None:
                raise OCMSError("--metric/--metric-version need --registry FILE")
            if args.epsilon is None:
                raise OCMSError("--epsilon is required (or estimate a registry metric with --registry FILE --metric NAME)")
            return single(args)
        from .estimate import cmd_estimate

        return cmd_estimate(args)

    return estimate_command


def _simulate_dispatch(single, defaults):
    def simulate_command(args) -> int:
        if args.registry is None:
            if args.metric is not None or args.metric_version is not None or getattr(args, "discovery", False):
                raise OCMSError("--metric/--metric-version/--discovery need --registry FILE")
            for name, value in defaults.items():  # unset only so that --registry can tell them apart
                if getattr(args, name) is None:
                    setattr(args, name, value)
            return single(args)
        from .simulate import cmd_simulate

        return cmd_simulate(args)

    return simulate_command


def _load(path: str):
    from .loader import load_registry

    return load_registry(path)


def _compare_with_lock(reg, lock_path: str | None, previous: str | None):
    import os

    from .lock import compare, default_lock_path, lock_entries, read_lock

    lock_path = lock_path or default_lock_path(reg.path)
    comparison = None
    if os.path.exists(lock_path):
        comparison = compare(reg, read_lock(lock_path), against=lock_path)
    if previous is not None:
        old = compare(reg, lock_entries(_load(previous)), against=previous)
        if comparison is None:
            comparison = old
        else:
            comparison.changed.extend(p for p in old.changed if p not in comparison.changed)
    return lock_path, comparison


def cmd_check(args) -> int:
    reg = _load(args.file)
    lock_path, comparison = _compare_with_lock(reg, args.lock, args.previous)
    versions = list(reg.versions())
    live = sum(v.live for v in versions)
    summary = f"{reg.path}: valid: {len(reg.metrics)} metrics, {len(versions)} versions ({live} live)"
    if comparison is None:
        if args.require_locked:
            raise OCMSError(f"{summary}; no lock file {lock_path}: run `ocms registry lock {args.file}`")
        print(f"{summary}; no lock file {lock_path} (run `ocms registry lock {args.file}` to publish them)")
        _print_mechanism_notes(versions)
        return 0
    comparison.raise_for_changes()
    if comparison.new and args.require_locked:
        raise OCMSError(f"{summary}; not locked yet: {', '.join(comparison.new)}: run `ocms registry lock {args.file}`")
    print(f"{summary}; {len(comparison.locked)} locked versions unchanged"
          + (f"; new, to lock with `ocms registry lock {args.file}`: {', '.join(comparison.new)}" if comparison.new else ""))
    _print_mechanism_notes(versions)
    return 0


def _print_mechanism_notes(versions) -> None:
    """What mechanism auto's picks cost against poisoning, where it is more than twice the other's."""
    for v in versions:
        if v.mechanism_note:
            print(f"note: {v.metric} version {v.version}: {v.mechanism_note}")


def cmd_lock(args) -> int:
    from .lock import write_lock

    reg = _load(args.file)
    lock_path, comparison = _compare_with_lock(reg, args.lock, None)
    if comparison is not None:
        comparison.raise_for_changes()
        new = comparison.new
    else:
        new = [v.binding for v in reg.versions()]
    if not new:
        print(f"{lock_path}: up to date ({len(comparison.locked)} versions)")
        return 0
    write_lock(reg, lock_path)
    print(f"{lock_path}: locked {len(new)} new version{'s' if len(new) != 1 else ''}: {', '.join(new)}")
    return 0


def _selected(reg, name: str | None):
    return (reg.metric(name),) if name is not None else reg.metrics


def _table(rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _size(n: int) -> str:
    for exponent in (128, 64, 32):
        if n == 2**exponent:
            return f"2^{exponent}"
    return f"{n:,}"


def _version_document(version) -> dict:
    """``describe --json`` of a version: every value, a discovery block with each level (binding, fingerprint,
    m, parameters), where MetricVersion.describe() gives the domain's settings and the level count only."""
    doc = version.describe()
    if version.discovery is not None:
        from .discovery import discovery_of

        doc["discovery"] = discovery_of(version).describe()
    return doc


def cmd_describe(args) -> int:
    reg = _load(args.file)
    metrics = _selected(reg, args.metric)
    if args.json:
        doc = {"registry": reg.path, "metrics": [{
            "name": m.name, "description": m.description, "owner": m.owner, "unit": m.unit, "domain": m.domain,
            "latest_version": m.latest.version, "versions": [_version_document(v) for v in m.versions]}
            for m in metrics]}
        write_stdout(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        return 0
    rows = [["metric", "version", "status", "fingerprint", "epsilon", "m", "mechanism", "domain", "size", "tracked"]]
    for m in metrics:
        for v in m.versions:
            rows.append([m.name, str(v.version), "live" if v.live else "retired", v.fingerprint.hex(),
                         f"{v.params.epsilon:g}", f"{v.params.hash_range:,}", v.mechanism, v.domain,
                         _size(v.params.dictionary_size) if v.domain != "strings" else "open", f"{v.tracked_count:,}"])
    out = [_table(rows, right={1, 4, 5, 8, 9}), ""]
    for m in metrics:
        out.append(f"{m.name}: {m.description} (owner {m.owner}" + (f", unit {m.unit}" if m.unit else "") + ")")
    write_stdout("\n".join(out) + "\n")
    return 0


def cmd_device_config(args) -> int:
    from .device import device_config

    text = json.dumps(device_config(_load(args.file), args.metric), indent=1, ensure_ascii=False) + "\n"
    if args.out is None:
        write_stdout(text)
        return 0
    try:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise OCMSError(f"--out {args.out}: {exc.strerror or exc}") from None
    return 0


def cmd_plan(args) -> int:
    from cms_core import planning

    given = parameter_flags_given(args)
    if given:
        raise OCMSError(f"--registry takes every parameter from the registry; drop {', '.join(given)}")
    planning.check_shuffle_flags(args.shuffled, args.delta)
    reg = _load(args.registry)
    n = args.n if args.n is not None else 100_000
    targets = {k: v for k, v in {"target_mse": args.target_mse, "target_ci_half_width": args.target_ci,
                                 "target_l2": args.target_l2}.items() if v is not None}
    records = []
    for m in _selected(reg, args.metric):
        for v in m.versions:
            tracked = v.tracked_count
            record = {"metric": m.name, "version": v.version, "live": v.live, "params": v.params.describe(),
                      "tracked_count": str(tracked),
                      "prediction": planning.predict(v.params, n, args.confidence, tracked),
                      "mechanisms": planning.compare_mechanisms(v.params, n, tracked)}
            record.update(planning.privacy_figures(v.params, n=n, confidence=args.confidence, tracked_count=tracked,
                                                   shuffled=args.shuffled, delta=args.delta))
            record["poisoning"]["note"] = v.mechanism_note  # a pinned mechanism was not auto's pick
            if targets:
                record["reports_needed"] = planning.reports_needed(v.params, confidence=args.confidence,
                                                                   tracked_count=tracked, **targets)
            records.append(record)
    if args.json:
        write_stdout(json.dumps({"registry": reg.path, "n": n, "confidence": args.confidence, "target": targets,
                           "metrics": records}, indent=1) + "\n")
        return 0
    header = ["metric", "version", "epsilon", "mechanism", "m", "field", "report bytes",
              f"{args.confidence:.0%} CI +- (freq)", "CI +- (count)", "objective ocms | direct"]
    if targets:
        header.append("reports needed")
    header += ["fakes for 1%", "for floor"] + (["central eps"] if args.shuffled is not None else [])
    rows = [header]
    for r in records:
        p, pr = r["params"], r["prediction"]
        row = [r["metric"], str(r["version"]) + ("" if r["live"] else " (retired)"), f"{p['epsilon']:g}",
               p["mechanism"], f"{p['hash_range']:,}", p["field"] if p["mechanism"] == "ocms" else "-",
               str(p["report_bytes"]), f"{pr['ci_half_width']:.4g}", f"{pr['ci_half_width_count']:,.0f}",
               _objectives(r["mechanisms"])]
        if targets:
            row.append(f"{r['reports_needed']:,}")
        row += planning.privacy_cells(r["poisoning"], r.get("shuffled"))
        rows.append(row)
    target_text = "".join(f"; reports needed for {k.replace('target_', '')} <= {v:g}" for k, v in targets.items())
    target_text += "; objective: worst-case MSE (l2 loss in mode l2) of each mechanism, * the lower"
    notes = [f"note: {r['metric']} version {r['version']}: {r['poisoning']['note']}" for r in records
             if r["poisoning"]["note"]]
    write_stdout(f"{reg.path}: predictions at n={n:,} reports per version{target_text}\n"
                 + _table(rows, right=set(range(1, len(header))) - {3, 5}) + "\n"
                 + planning.privacy_legend(n, args.confidence, args.shuffled, args.delta) + "\n"
                 + "".join(line + "\n" for line in notes))
    return 0


def _objectives(comparison: dict) -> str:
    """Both mechanisms' objective (what mechanism 'auto' compares), the lower one marked."""
    key = comparison["objective"]
    cells = []
    for name in ("ocms", "direct"):
        row = comparison[name]
        text = "n/a" if row is None else f"{row[key]:.3g}"
        cells.append(text + ("*" if comparison["chosen"] == name else ""))
    return " | ".join(cells)


