"""``ocms registry check|lock|describe|device-config``: the commands on a registry file.

Hooked into the ``ocms`` parser by :func:`add_registry_commands` (one call in
ocms/cli.py), so the command code lives with the registry. The commands that take
a metric (plan, simulate, estimate, worker ...) read ``--registry`` through
registry.flags.metrics_from_args.
"""

from __future__ import annotations

import json

from cms_core.errors import OCMSError

from infra.output import text_table, write_stdout


def add_registry_commands(sub) -> None:
    """Add ``ocms registry ...`` to the subparsers."""
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
    out = [text_table(rows, right={1, 4, 5, 8, 9}), ""]
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
