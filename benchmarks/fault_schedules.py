"""Fault schedules against the deployment as separate hosts, judged by a checker (issue 35).

    python -m benchmarks.fault_schedules --schedules N --seed S --seconds T [--broker embedded|mock] [--json]

Runs N schedules (seeds S, S+1, ...) of about T seconds of faults each (at least 5 faults each): the broker,
3 workers (+1 that joins and leaves) and 2 collectors of docker-compose.yml, each on its own host (a network
namespace: needs root), devices uploading with retries and a ledger of every 202, a query loop asking every
worker for every metric, and a seeded nemesis (benchmarks/faults/nemesis.py). Prints the seed, the schedules
run, the faults injected by kind, uploads, 202s, reports acknowledged and counted, lost, doubled, wrong 200s
and the longest time from the last fault to every answer 200; with ``--json`` one object with the keys
``seed``, ``schedules``, ``faults``, ``acked``, ``counted``, ``lost``, ``doubled``, ``wrong_200``,
``max_recover_s`` (and a ``runs`` list, one entry per schedule). A seed that fails replays the same schedule:
``--seed <its seed> --schedules 1``. Exit status 1 when any schedule broke a rule, 2 on bad flags.
``--keep-logs DIR`` keeps every process's log of the failing schedules (all of them with ``--keep-all``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.faults.hosts import HostsUnavailable


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def seconds(text: str) -> float:
    value = float(text)
    if not 5 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 5 and 3600 seconds, got {text}")
    return value


def kinds(text: str) -> tuple[str, ...]:
    from benchmarks.faults.nemesis import KINDS

    chosen = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in chosen if k not in KINDS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown fault kind(s) {', '.join(unknown) or '(none)'}; expected some of "
                                         f"{', '.join(KINDS)}")
    return chosen


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fault_schedules",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=positive_int, default=1, help="how many schedules (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="the first schedule's seed (default: a fresh one, printed)")
    parser.add_argument("--seconds", type=seconds, default=60.0, help="faults per schedule, seconds (default 60)")
    parser.add_argument("--broker", choices=("embedded", "mock"), default="embedded")
    parser.add_argument("--kinds", type=kinds, default=(), metavar="KIND[,KIND]",
                        help="only these fault kinds (default: every kind; benchmarks/faults/nemesis.py lists them)")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    parser.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                        help="keep the logs of failing schedules under DIR/seed-S")
    parser.add_argument("--keep-all", action="store_true", help="with --keep-logs: keep every schedule's logs")
    return parser.parse_args(argv)


def summarize(seed: int, results: list) -> dict:
    faults = Counter(done.fault.kind for r in results for done in r.faults)
    recover = [r.findings.recover_s for r in results]
    return {
        "seed": seed,
        "schedules": len(results),
        "faults": dict(sorted(faults.items())),
        "uploads": sum(r.uploads for r in results),
        "accepted_uploads": sum(r.acked_uploads for r in results),
        "acked": sum(r.findings.acked for r in results),
        "counted": sum(r.findings.counted for r in results),
        "lost": sum(r.findings.lost for r in results),
        "doubled": sum(r.findings.doubled for r in results),
        "wrong_200": sum(r.findings.wrong_200 for r in results),
        "health_lies": sum(r.findings.health_lies for r in results),
        "unsettled": sum(r.findings.unsettled + r.findings.refused for r in results),
        "retried": sum(r.findings.retried for r in results),
        "in_doubt": sum(r.findings.in_doubt for r in results),
        "never_recovered": sum(1 for s in recover if s is None),
        "slow_stops": [f"seed {r.seed}: {name}" for r in results for name, _ in r.slow_stops],
        "max_recover_s": round(max((s for s in recover if s is not None), default=0.0), 1),
        "failed_seeds": [r.seed for r in results if not r.findings.ok],
        "runs": [{"seed": r.seed, "shuffle": r.shuffle, "faults": [d.fault.describe() for d in r.faults],
                  "acked": r.findings.acked, "counted": r.findings.counted, "lost": r.findings.lost,
                  "doubled": r.findings.doubled, "wrong_200": r.findings.wrong_200,
                  "recover_s": None if r.findings.recover_s is None else round(r.findings.recover_s, 1),
                  "final_mismatch": r.findings.final_mismatch[:4], "wrong_examples": r.findings.wrong_examples[:4],
                  "seconds": round(r.seconds, 1)} for r in results],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    say = (lambda *a, **k: print(*a, **k, file=sys.stderr)) if args.json else print
    from benchmarks.faults.schedule import run_schedule

    say(f"seed {seed} ({args.schedules} schedule(s) of {args.seconds:g} s on the {args.broker} broker; replay one with "
        f"--seed <its seed> --schedules 1)", flush=True)
    results = []
    started = time.time()
    try:
        for i in range(args.schedules):
            schedule_seed = seed + i
            keep = args.keep_logs if args.keep_logs is not None else None
            result = run_schedule(schedule_seed, args.seconds, args.broker, keep_logs=keep,
                                  log=lambda line: say(line, flush=True), kinds=args.kinds)
            if keep is not None and result.findings.ok and not result.slow_stops and not args.keep_all:
                import shutil

                shutil.rmtree(keep / f"seed-{schedule_seed}", ignore_errors=True)
            f = result.findings
            say(f"schedule seed {schedule_seed}: {'ok' if f.ok else 'FAILED'}; acked {f.acked:,}, counted "
                f"{f.counted:,}, lost {f.lost}, doubled {f.doubled}, wrong 200 {f.wrong_200}, health lies "
                f"{f.health_lies}, unsettled {f.unsettled + f.refused}, recovered in "
                f"{'never' if f.recover_s is None else f'{f.recover_s:.1f} s'} ({result.seconds:.0f} s)", flush=True)
            for line in f.final_mismatch[:6] + f.wrong_examples[:6]:
                say(f"    {line}", flush=True)
            results.append(result)
    except HostsUnavailable as exc:
        print(f"fault_schedules: {exc}", file=sys.stderr)
        return 2
    summary = summarize(seed, results)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"seed {seed}: {summary['schedules']} schedules in {time.time() - started:.0f} s")
        print("faults: " + ", ".join(f"{kind} {count}" for kind, count in summary["faults"].items()))
        print(f"uploads {summary['uploads']:,}, 202s {summary['accepted_uploads']:,} ({summary['retried']:,} after a retry, "
              f"{summary['in_doubt']:,} of them after an attempt that got no answer); reports acknowledged "
              f"{summary['acked']:,}, counted {summary['counted']:,}")
        print(f"lost {summary['lost']}, doubled {summary['doubled']}, wrong 200 {summary['wrong_200']}, "
              f"health lies {summary['health_lies']}, unsettled uploads {summary['unsettled']}")
        print(f"longest time from the last fault to every answer 200: {summary['max_recover_s']} s"
              + (f"; never within the settle time in {summary['never_recovered']} schedule(s)"
                 if summary["never_recovered"] else ""))
        if summary["slow_stops"]:
            print("SIGTERMs outlived by 40 s (SIGKILLed): " + ", ".join(summary["slow_stops"]))
        if summary["failed_seeds"]:
            print("failed seeds: " + " ".join(str(s) for s in summary["failed_seeds"]))
    return 1 if summary["failed_seeds"] else 0


if __name__ == "__main__":
    sys.exit(main())
