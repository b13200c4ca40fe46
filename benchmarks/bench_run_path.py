"""What `make run`'s fleet actually reaches through the collector, next to the --direct-kafka path.

    .venv/bin/python -m benchmarks.bench_run_path [--duration S] [--cases RATE/FRAME,...] [--direct]

Each case is one real `ocms run --duration S --rate RATE --frame-size FRAME` (embedded broker,
one worker, one `ocms collector`, the fleet in `ocms run`'s own process uploading each frame as
one HTTP upload, --upload-concurrency in flight, and counting a chunk as sent only after every upload of it got its
202, i.e. was acknowledged by Kafka). It prints, per case, the reports/s the fleet reached over
the whole run (from `ocms run`'s last line), whether the worker counted every report (the final
table), and the wall time of the whole command. `--direct` adds the same cases with
`--direct-kafka` (the fleet produces its frames to Kafka itself) for comparison. The first case is
`make run`'s default (2,000 reports/s in frames of 100). The machine's load average is printed:
on a shared 2-CPU machine the figures move with it. A benchmark, not a test: it never fails on speed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CASES = "2000/100,20000/100,50000/100,200000/1000,1000000/1000"
FLEET = re.compile(r"fleet sent ([\d,]+) reports in ([\d,]+) messages in ([\d.]+) s \(([\d,]+) reports/s\) "
                   r"(through the collector|straight to Kafka)")
COUNTED = re.compile(r"final, every report counted:\nreports sent ([\d,]+); counted by the worker ([\d,]+)")


def one(rate: int, frame: int, duration: float, direct: bool, concurrency: int | None) -> dict:
    argv = [sys.executable, "-m", "ocms", "run", "--duration", str(duration), "--rate", str(rate),
            "--frame-size", str(frame), "--every", "100000", "--show", "1", "--seed", "1"]
    if direct:
        argv.append("--direct-kafka")
    elif concurrency:
        argv += ["--upload-concurrency", str(concurrency)]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=duration + 300)
    wall = time.monotonic() - start
    text = done.stdout + done.stderr
    fleet, counted = FLEET.search(text), COUNTED.search(text)
    if done.returncode != 0 or fleet is None:
        tail = "\n".join(text.splitlines()[-8:])
        return {"error": f"exit {done.returncode}: {tail}"}
    number = lambda s: int(s.replace(",", ""))  # noqa: E731
    return {"reports": number(fleet.group(1)), "uploads": number(fleet.group(2)), "seconds": float(fleet.group(3)),
            "rate": number(fleet.group(4)), "path": fleet.group(5),
            "exact": counted is not None and number(counted.group(1)) == number(counted.group(2)), "wall": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds the fleet sends per case [20]")
    parser.add_argument("--cases", default=DEFAULT_CASES, help=f"RATE/FRAME,... [{DEFAULT_CASES}]")
    parser.add_argument("--direct", action="store_true", help="also run each case with --direct-kafka")
    parser.add_argument("--upload-concurrency", type=int, help="ocms run --upload-concurrency [its default]")
    args = parser.parse_args()
    cases = [tuple(int(x) for x in case.split("/")) for case in args.cases.split(",")]
    print(f"ocms run --duration {args.duration:g}; load average before: {os.getloadavg()[0]:.2f}; "
          f"{os.cpu_count()} CPUs", flush=True)
    print(f"{'path':<22} {'target/s':>10} {'frame':>6} {'reached/s':>10} {'of target':>9} {'uploads/s':>9} "
          f"{'reports':>11} {'all counted':>11} {'wall s':>7}", flush=True)
    for rate, frame in cases:
        for direct in ([False, True] if args.direct else [False]):
            r = one(rate, frame, args.duration, direct, args.upload_concurrency)
            label = "--direct-kafka" if direct else "through the collector"
            if "error" in r:
                print(f"{label:<22} {rate:>10,} {frame:>6} failed: {r['error']}", flush=True)
                continue
            print(f"{label:<22} {rate:>10,} {frame:>6} {r['rate']:>10,} {r['rate'] / rate:>9.0%} "
                  f"{r['uploads'] / r['seconds']:>9,.0f} {r['reports']:>11,} {'yes' if r['exact'] else 'NO':>11} "
                  f"{r['wall']:>7.1f}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
