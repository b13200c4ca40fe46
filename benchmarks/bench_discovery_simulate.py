"""What ``ocms simulate --discovery --dataset file:...`` costs on long-tailed data (issue 24, section 3).

A file of distinct tail-number-like strings (the alphabet and length of deploy/registry.yaml's
``flight_tailnum``: 0-9A-Z, 3 to 7 characters) is sampled uniformly with replacement, so most
values are drawn once or twice: the long tail that made the simulator O(levels x distinct values).
Two cases: 300,000 reports over ~200,000 distinct values drawn, and 10^6 reports over ~655,000.
Each runs the real command (dataset load, sampling, prefix elements, privatization, capture
write) in this process pinned to one core, and prints the command's wall time and the simulator's
own figure (what the command prints). Goal: <= 3 s for the 300k/200k case.

    .venv/bin/python -m benchmarks.bench_discovery_simulate [--seed 1]

Not a test: times depend on the machine. Results are printed, not asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np

REGISTRY = Path(__file__).resolve().parents[1] / "deploy" / "registry.yaml"
METRIC = "flight_tailnum"
ALPHABET = np.array(list("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
#: (reports, distinct lines in the file): n draws from N lines hit N (1 - e^(-n/N)) distinct ones,
#: ~201,000 for the first case and ~657,000 for the second.
CASES = ((300_000, 347_000), (1_000_000, 1_100_000))


def write_values(path: Path, distinct: int, rng: np.random.Generator) -> None:
    values: set[str] = set()
    while len(values) < distinct:
        lengths = rng.integers(3, 8, size=distinct)
        letters = rng.choice(ALPHABET, size=(distinct, 7))
        values.update("".join(row[:k]) for row, k in zip(letters.tolist(), lengths.tolist()))
    path.write_text("\n".join(sorted(values)[:distinct]) + "\n", encoding="utf-8")


def drawn_distinct(truth: Path) -> int:
    import json

    return json.loads(truth.read_text(encoding="utf-8"))["distinct_values"]


def run_case(directory: Path, reports: int, lines: int, seed: int) -> None:
    from ocms.cli import main

    values = directory / f"values-{lines}.txt"
    write_values(values, lines, np.random.default_rng(seed))
    capture, truth = directory / "reports.cap", directory / "truth.json"
    argv = ["simulate", "--registry", str(REGISTRY), "--metric", METRIC, "--discovery",
            "--dataset", f"file:{values}", "--reports", str(reports), "--seed", str(seed),
            "--out", str(capture), "--truth", str(truth)]
    printed = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):  # the status line is on stderr
        status = main(argv)
    wall = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"ocms simulate exited {status}: {printed.getvalue()}")
    simulator = re.search(r"in ([0-9.]+) s$", printed.getvalue().strip())
    print(f"{reports:>9,} reports  {drawn_distinct(truth):>7,} distinct drawn (file of {lines:,})  "
          f"command {wall:6.2f} s  simulator {simulator.group(1) if simulator else '?':>6} s  "
          f"capture {capture.stat().st_size / 1e6:.1f} MB")
    capture.unlink()
    truth.unlink()
    values.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    print(f"ocms simulate --registry deploy/registry.yaml --metric {METRIC} --discovery --dataset file:... "
          f"(one core: cpu {core}; load average {os.getloadavg()[0]:.2f})")
    with tempfile.TemporaryDirectory(prefix="ocms-bench-discovery-simulate-") as directory:
        for reports, lines in CASES:
            run_case(Path(directory), reports, lines, args.seed)


if __name__ == "__main__":
    main()
