"""One worker serving 20 registry metrics mixed on one topic, against one single-metric worker.

    .venv/bin/python -m benchmarks.bench_registry_worker [--reports N] [--metrics M] [--rounds R]

Issue 12's figure: one ``ocms worker --registry`` of M metrics (default 20: categories,
integers and strings, different epsilon, direct RR and OCMS+RR) receives frames of 1,000
reports of every metric interleaved on one topic, produced as fast as the producer can; the
clock stops when the /metrics listing shows every report counted. In the same run, the
single-metric worker of benchmarks/bench_worker.py (d = 10,000, 1,000 tracked, eps 2) counts
the same number of reports: the ratio is the cost of serving many metrics.

Rounds: each round measures both, in alternating order, each on a fresh embedded broker
(the order and what a broker already holds moved single runs by up to 60% on this 2-CPU
machine); the medians and their ratio are the figure. Each run is N = 20,000,000 reports
by default, several seconds: steady state. Shorter runs flatter the mix (at 6,000,000 the
single-metric run lasts about a second, and the start and the last partial batch's wait for
the age bound, 0.2 s, are a large part of it: 68-74% there against 57% at 20,000,000 for the
same code). Worker memory: RSS of both after each run, and the difference per metric.

This is a benchmark, not a test: it prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np


from benchmarks import bench_worker
from benchmarks.experiments.common import cpu_times, steal_fraction
from agents.process import WorkerChild
from cms_core import wire
from cms_core.privatize import simulate_reports
from cms_core.values import elements_to_array, encode_value, limbs_for
from producer.broker import EmbeddedBroker, free_port
from registry import load_registry

FRAME = 1000
WORDS = [f"word-{i}" for i in range(400)]


KINDS = ("categories", "integers", "strings")


def registry_text(count: int, kinds=KINDS) -> str:
    """``count`` metrics cycling through ``kinds``: categories (direct RR), integers and strings (OCMS+RR)."""
    out = ["metrics:"]
    for i in range(count):
        kind = kinds[i % len(kinds)]
        eps = (1, 2, 3, 4)[i % 4]
        out += [f"  - name: m{i:02d}_{kind}", f"    description: benchmark metric {i}", "    owner: bench",
                f"    epsilon: {eps}", "    top_k: 10"]
        if kind == "categories":
            names = ", ".join(f"c{j}" for j in range(8 + 12 * (i % 5)))
            out += [f"    categories: [{names}]", "    mechanism: direct"]
        elif kind == "integers":
            out += ["    integers: 10000", "    tracked: {range: [0, 1000]}", "    mechanism: ocms"]
        else:
            tracked = ", ".join(f'"{w}"' for w in WORDS[:200])
            out += ["    strings: true", f"    tracked: [{tracked}]", "    mode: l2", "    mechanism: ocms"]
    return "\n".join(out) + "\n"


def frames_of(version, n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    params = version.params
    if version.domain == "strings":
        picks = (rng.zipf(1.2, n) - 1) % len(WORDS)
        codes = {w: encode_value(params, w) for w in WORDS}
        elements = elements_to_array([codes[WORDS[p]] for p in picks], limbs_for(params))
    else:
        d = params.dictionary_size
        elements = ((rng.zipf(1.2, n) - 1) % d).astype(np.uint64)
    batch = simulate_reports(params, elements, rng)
    return [wire.encode_frame(params, batch.slice(i, min(i + FRAME, n))) for i in range(0, n, FRAME)]


def counted(port: int) -> int:
    """Reports the worker's view counts (/healthz: cheap whatever the number of metrics, so the
    poll every 20 ms costs the worker little; the /metrics listing cost it a third of its CPU at
    300 metrics, py-spy)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
        return json.loads(response.read())["view_reports"]


def registry_payloads(path: Path, n: int) -> tuple[list[bytes], int, int]:
    """(frames of every metric version interleaved one by one, reports in them, metric versions)."""
    registry = load_registry(path)
    versions = [v for m in registry.metrics for v in m.live_versions]
    per_metric = n // len(versions) // FRAME * FRAME
    streams = [frames_of(v, per_metric, seed=i) for i, v in enumerate(versions)]
    payloads = [frame for group in zip(*streams) for frame in group]  # interleaved: one frame of each in turn
    return payloads, per_metric * len(versions), len(versions)


def registry_run(bootstrap: str, log_dir: Path, path: Path, payloads: list[bytes], total: int, versions: int) -> dict:
    topic, port = "bench-registry", free_port()
    child = WorkerChild(topic, "--registry", str(path), bootstrap=bootstrap, web_port=port,
                        log=log_dir / f"{topic}.log").start()
    try:
        child.wait_healthy(120)
        ticks = cpu_times()
        start = time.monotonic()
        asyncio.run(bench_worker.produce(bootstrap, topic, payloads, None, []))
        produced = time.monotonic() - start
        while counted(port) < total:
            time.sleep(0.02)
        seconds = time.monotonic() - start
        with open(f"/proc/{child.process.pid}/status") as f:
            rss = next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))
        return {"metrics": versions, "reports": total, "seconds": seconds, "produce_seconds": produced,
                "reports_per_s": total / seconds, "rss_mib": rss, "steal": steal_fraction(ticks, cpu_times())}
    finally:
        child.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=20_000_000, help="reports per worker run (default 20,000,000)")
    parser.add_argument("--metrics", type=int, default=20, help="metrics in the registry (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of (single, mix) in alternating order (default 3)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="value domains the metrics cycle through (default categories,integers,strings)")
    args = parser.parse_args()
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--kinds: choose from {', '.join(KINDS)}")
    if args.rounds < 1 or args.reports < args.metrics * FRAME:
        parser.error(f"--rounds must be >= 1 and --reports >= {args.metrics * FRAME:,} (a frame per metric)")
    runs: dict[str, list[dict]] = {"single": [], "mix": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "registry.yaml"
        path.write_text(registry_text(args.metrics, kinds), encoding="utf-8")
        payloads, total, versions = registry_payloads(path, args.reports)
        print(bench_worker.machine_line(1000))
        for round_ in range(args.rounds):
            for which in ("single", "mix") if round_ % 2 == 0 else ("mix", "single"):
                with EmbeddedBroker() as broker:  # a fresh broker for every run
                    if which == "single":
                        r = bench_worker.throughput(broker.bootstrap_servers, folder, total, FRAME, 1000)
                    else:
                        r = registry_run(broker.bootstrap_servers, folder, path, payloads, total, versions)
                runs[which].append(r)
                label = "single metric" if which == "single" else f"{versions} metrics ({', '.join(kinds)})"
                print(f"round {round_ + 1}, {label}: {r['reports_per_s']:>12,.0f} reports/s  ({r['reports']:,} reports "
                      f"in {r['seconds']:.2f} s; producing took {r['produce_seconds']:.2f} s; worker RSS "
                      f"{r['rss_mib']:.0f} MiB; CPU steal {bench_worker.steal_text(r)})", flush=True)
    single = statistics.median(r["reports_per_s"] for r in runs["single"])
    many = statistics.median(r["reports_per_s"] for r in runs["mix"])
    rss_single = statistics.median(r["rss_mib"] for r in runs["single"])
    rss_many = statistics.median(r["rss_mib"] for r in runs["mix"])
    print(f"median single metric (d=10000, 1,000 tracked): {single:>12,.0f} reports/s (worker RSS {rss_single:.0f} MiB)")
    print(f"median {versions} metrics mixed on one topic:      {many:>12,.0f} reports/s (worker RSS {rss_many:.0f} MiB)")
    print(f"ratio: {many / single:.0%} of the single-metric figure; memory: {(rss_many - rss_single) / versions:.1f} MiB "
          "per metric above the single-metric worker")


if __name__ == "__main__":
    main()
