"""The numeric path's worker throughput against the frequency path's (issue 40).

    .venv/bin/python -m benchmarks.bench_numeric_worker [--reports N] [--rounds R] [--json]

One ``ocms worker --registry`` counts N reports of one metric of a registry of four, produced as fast as the
producer can; the clock stops when the worker's /healthz shows every report counted (bench_worker.paced_run:
production included, a count that stops short or passes the total ends the benchmark with an error). The
metrics, each at epsilon 2 with ``mechanism: auto``:

* ``frequency``: 105 categories (flight_dest's size in deploy/registry.yaml);
* ``numeric_21``: flight_air_time's 21 explicit buckets (deploy/registry.yaml);
* ``numeric_40``: 40 buckets, OpenTelemetry's base-2 exponential ones at scale 1 over [1, 2^20] ms;
* ``numeric_21_mean``: ``numeric_21`` with ``mean_mechanism: hybrid``: a Hybrid mean's part beside the histogram
  (``mean_parts`` parts, each device drawing one first: ``cms_core.hybrid.simulate_split``, as the clients do; its
  number is its bucket's midpoint), the part's reports framed with its carrier (``name@version/mean``, direct RR's
  records over the ``M + 2`` report values) and counted by the worker as any version's.

A numeric metric is an integer metric over its bucket indices, so the worker decodes it on the frequency
path's code; what differs is the domain and the mechanism ``auto`` picks for it (``mechanism`` in the output:
a hierarchical histogram for every numeric metric at epsilon 2, whose devices each report one level drawn
uniformly, framed with that level's parameters; ``levels``).
After each run the worker answers the metric's window ``ANSWERS`` times (/estimates for the frequency metric,
/histogram for a numeric one: bucket frequencies, CDFs, quantiles and the mean) and the mean time is printed.
Each round runs every metric once, on a fresh broker, the order rotating between rounds; medians are printed
with the worker's CPU per report (what the machine's other load moves least). Goal (issue 40): every numeric
metric at no less than half the frequency metric's reports/s (``ratios``, ``goal_met``). ``--json`` prints one
object. This is a benchmark, not a test: it prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import bench_worker
from benchmarks.experiments.common import cpu_model
from cms_core import wire
from cms_core.hierarchy import simulate_levels
from cms_core.hybrid import simulate_split
from cms_core.privatize import simulate_reports
from cms_core.reports import ReportBatch, identity_coefficients
from infra.mock_cluster import start_broker
from registry import load_registry

FRAME = 1000
GOAL = 0.5
ANSWERS = 20  # answers timed after each run: the metric's /estimates (frequency) or /histogram (numeric)
AIR_TIME_BOUNDS = (30, 45, 60, 75, 90, 105, 120, 135, 150, 165, 180, 200, 225, 250, 280, 320, 360, 420, 500, 600)
METRICS = {
    "frequency": ["    categories: [" + ", ".join(f"d{i:03d}" for i in range(105)) + "]"],
    "numeric_21": ["    numeric:", "      lower: 20", "      upper: 700",
                   "      buckets: [" + ", ".join(map(str, AIR_TIME_BOUNDS)) + "]"],
    "numeric_40": ["    numeric:", "      lower: 1", "      upper: 1048576", "      exponential: {scale: 1}"],
    "numeric_21_mean": ["    numeric:", "      lower: 20", "      upper: 700",
                        "      buckets: [" + ", ".join(map(str, AIR_TIME_BOUNDS)) + "]", "      mean_mechanism: hybrid"],
}


def registry_text() -> str:
    out = ["metrics:"]
    for name, domain in METRICS.items():
        out += [f"  - name: {name}", f"    description: benchmark metric {name}", "    owner: bench",
                "    epsilon: 2", "    mechanism: auto", *domain]
    return "\n".join(out) + "\n"


def payloads_of(version, n: int, seed: int) -> tuple[list[bytes], list[int]]:
    """Frames of ``n`` reports of ``version`` and their report counts: values on a Zipf-like prior over its domain
    (for a numeric metric its bucket indices, as a device's client sends them). A hierarchical histogram's devices
    each report one level drawn uniformly, framed with that level's parameters (frames of the levels in turn). A
    version with a Hybrid mean: each device draws its part first, part 0 reporting its number (its bucket's
    midpoint) framed with the part's carrier, the others the histogram's."""
    rng = np.random.default_rng(seed)
    hierarchy = getattr(version, "hierarchy", None)
    d = hierarchy.buckets if hierarchy is not None else version.params.dictionary_size
    elements = ((rng.zipf(1.3, n) - 1) % d).astype(np.uint64)
    parts = []
    mean = getattr(version, "mean", None)
    if mean is not None:
        drew, z = simulate_split(mean.hybrid, mean.parts, version.numeric.layout.points[elements.astype(np.int64)], rng)
        parts.append((mean.carrier, ReportBatch(*identity_coefficients(z.size), z.astype(np.uint32))))
        elements = elements[~drew]
    if hierarchy is None:
        parts.append((version.params, simulate_reports(version.params, elements, rng)))
    else:
        parts += list(zip(hierarchy.levels, simulate_levels(hierarchy, elements, rng)[1]))
    frames = [[(wire.encode_frame(params, batch.slice(i, min(i + FRAME, len(batch)))), min(FRAME, len(batch) - i))
               for i in range(0, len(batch), FRAME)] for params, batch in parts]
    mixed = [frame for turn in itertools.zip_longest(*frames) for frame in turn if frame is not None]
    return [payload for payload, _ in mixed], [count for _, count in mixed]


def one_run(bootstrap: str, log_dir: Path, path: Path, metric: str, payloads: tuple[list[bytes], list[int]],
            total: int) -> dict:
    worker = bench_worker.Worker(bootstrap, f"bench-numeric-{metric.replace('_', '-')}", log_dir,
                                 metric=("--registry", str(path)))
    try:
        worker.wait_healthy(120)
        frames, counts = payloads
        run = bench_worker.paced_run(worker, bootstrap, frames, counts, worker.view_reports, metric)
        answer = "estimates" if metric == "frequency" else "histogram"
        started = time.perf_counter()
        for _ in range(ANSWERS):
            worker.get(f"/metrics/{metric}/{answer}")
        return {**run, "answer": answer, "answer_ms": (time.perf_counter() - started) / ANSWERS * 1000}
    finally:
        worker.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=5_000_000, help="reports per run (default 5,000,000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every metric, order rotating (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.reports < FRAME:
        parser.error(f"--reports must be >= {FRAME:,}, got {args.reports:,}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else (lambda *a: print(*a, flush=True))
    n = args.reports // FRAME * FRAME
    runs: dict[str, list[dict]] = {name: [] for name in METRICS}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "registry.yaml"
        path.write_text(registry_text(), encoding="utf-8")
        registry = load_registry(path)
        versions = {name: registry.metric(name).live_versions[-1] for name in METRICS}
        payloads = {name: payloads_of(v, n, seed=i) for i, (name, v) in enumerate(versions.items())}
        say(f"machine: {os.cpu_count()} CPUs ({cpu_model()}); worker: --registry of the {len(METRICS)} metrics, 4 partitions; "
            f"broker: embedded; {n:,} reports per run in frames of {FRAME:,}")
        names = list(METRICS)
        for round_ in range(args.rounds):
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                with start_broker("embedded") as broker:  # a fresh broker for every run
                    try:
                        r = one_run(broker.bootstrap_servers, folder, path, name, payloads[name], n)
                    except bench_worker.CountMismatch as exc:
                        print(f"bench_numeric_worker: {exc}", file=sys.stderr)
                        return 1
                runs[name].append(r)
                say(f"round {round_ + 1}, {name}: {bench_worker.run_text(r)}")
    results = {}
    for name, rs in runs.items():
        params, hierarchy = versions[name].params, getattr(versions[name], "hierarchy", None)
        results[name] = {
            "mechanism": "hierarchy" if hierarchy is not None else params.mechanism,
            "domain": hierarchy.buckets if hierarchy is not None else params.dictionary_size,
            **({"levels": len(hierarchy.levels)} if hierarchy is not None else {}),
            **({"mean_parts": versions[name].mean.parts} if getattr(versions[name], "mean", None) is not None else {}),
            "reports_per_s": round(statistics.median(r["reports_per_s"] for r in rs)),
            "worker_cpu_us_per_report": round(statistics.median(r["worker_cpu_seconds"] / r["reports"] for r in rs)
                                              * 1e6, 3),
            "answer": rs[0]["answer"], "answer_ms": round(statistics.median(r["answer_ms"] for r in rs), 2),
            "rounds": [round(r["reports_per_s"]) for r in rs]}
    frequency = results["frequency"]["reports_per_s"]
    ratios = {name: round(r["reports_per_s"] / frequency, 3) for name, r in results.items() if name != "frequency"}
    doc = {"metrics": results, "ratios": ratios, "goal": GOAL, "goal_met": all(v >= GOAL for v in ratios.values()),
           "reports": n, "rounds": args.rounds}
    if args.json:
        print(json.dumps(doc))
        return 0
    for name, r in results.items():
        print(f"{name:<15} {r['mechanism']:<7} d={r['domain']:<4} {r['reports_per_s']:>12,} reports/s  "
              f"{r['worker_cpu_us_per_report']:.3f} us CPU per report  /{r['answer']} {r['answer_ms']:.1f} ms  "
              f"rounds {r['rounds']}")
    for name, ratio in ratios.items():
        print(f"{name} / frequency: {ratio:.1%} (goal at least {GOAL:.0%}: {'met' if ratio >= GOAL else 'not met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
