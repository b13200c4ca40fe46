"""One worker serving 20 registry metrics mixed on one topic, against one single-metric worker.

    .venv/bin/python -m benchmarks.bench_registry_worker [--reports N] [--metrics M] [--rounds R] [--broker mock]

Issue 12's figure: one ``ocms worker --registry`` of M metrics (default 20: categories,
integers and strings, different epsilon, direct RR and OCMS+RR) receives frames of 1,000
reports of every metric interleaved on one topic, produced as fast as the producer can; the
clock stops when the /metrics listing shows every report counted. In the same run, the
single-metric worker of benchmarks/bench_worker.py (d = 10,000, 1,000 tracked, eps 2) counts
the same number of reports: the ratio is the cost of serving many metrics.

Rounds: each round measures both, in alternating order, each on a fresh broker
(the order and what a broker already holds moved single runs by up to 60% on this 2-CPU
machine); the medians and their ratio are the figure. Each run is N = 20,000,000 reports
by default, several seconds: steady state. Shorter runs flatter the mix (at 6,000,000 the
single-metric run lasts about a second, and the start and the last partial batch's wait for
the age bound, 0.2 s, are a large part of it: 68-74% there against 57% at 20,000,000 for the
same code). Worker memory: RSS of both after each run, and the difference per metric.

Brokers (``--broker``): ``embedded`` (default), the Tansu broker and the worker's ``--broker
embedded``; ``mock``, librdkafka's mock cluster of 3 brokers with the topics created beforehand,
both workers on the production ``kafka`` path with ``--broker mock``, as bench_worker's
``--broker mock`` does. The mock keeps only each partition's last 5 MiB or 100,000 batches, so
there the producer is paced to stay within that ahead of the worker (bench_worker.Pacer; the
time it waited is printed); on both brokers a run whose count stops short of (or passes) what
was produced ends the benchmark with an error, never a figure.

This is a benchmark, not a test: it prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import bench_worker
from cms_core import wire
from cms_core.privatize import simulate_reports
from cms_core.values import elements_to_array, encode_value, limbs_for
from infra.mock_cluster import MockCluster, start_broker
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


def registry_payloads(path: Path, n: int) -> tuple[list[bytes], int, int]:
    """(frames of every metric version interleaved one by one, reports in them, metric versions)."""
    registry = load_registry(path)
    versions = [v for m in registry.metrics for v in m.live_versions]
    per_metric = n // len(versions) // FRAME * FRAME
    streams = [frames_of(v, per_metric, seed=i) for i, v in enumerate(versions)]
    payloads = [frame for group in zip(*streams) for frame in group]  # interleaved: one frame of each in turn
    return payloads, per_metric * len(versions), len(versions)


def registry_run(bootstrap: str, log_dir: Path, path: Path, payloads: list[bytes], total: int, versions: int,
                 cluster: MockCluster | None = None) -> dict:
    worker = bench_worker.Worker(bootstrap, "bench-registry", log_dir, metric=("--registry", str(path)),
                                 cluster=cluster)
    try:
        worker.wait_healthy(120)
        run = bench_worker.paced_run(worker, bootstrap, payloads, [FRAME] * len(payloads), worker.view_reports,
                                     f"{versions} metrics", cluster)
        return {"metrics": versions, **run}
    finally:
        worker.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (a bad value exits 2 with a message naming the flag)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=20_000_000, help="reports per worker run (default 20,000,000)")
    parser.add_argument("--metrics", type=int, default=20, help="metrics in the registry (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of (single, mix) in alternating order (default 3)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="value domains the metrics cycle through (default categories,integers,strings)")
    bench_worker.add_broker_option(parser)
    args = parser.parse_args(argv)
    args.kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not args.kinds or set(args.kinds) - set(KINDS):
        parser.error(f"--kinds: choose from {', '.join(KINDS)}")
    if args.metrics < 1:
        parser.error(f"--metrics must be >= 1, got {args.metrics}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.reports < args.metrics * FRAME:
        parser.error(f"--reports must be >= {args.metrics * FRAME:,} (a frame of {FRAME:,} per metric), "
                     f"got {args.reports:,}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        measure(args)
    except bench_worker.CountMismatch as exc:
        sys.exit(f"bench_registry_worker: {exc}")


def measure(args: argparse.Namespace) -> None:
    runs: dict[str, list[dict]] = {"single": [], "mix": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "registry.yaml"
        path.write_text(registry_text(args.metrics, args.kinds), encoding="utf-8")
        payloads, total, versions = registry_payloads(path, args.reports)
        print(bench_worker.machine_line(1000, args.broker))
        for round_ in range(args.rounds):
            for which in ("single", "mix") if round_ % 2 == 0 else ("mix", "single"):
                with start_broker(args.broker) as broker:  # a fresh broker for every run
                    cluster = broker if isinstance(broker, MockCluster) else None
                    if which == "single":
                        r = bench_worker.throughput(broker.bootstrap_servers, folder, total, FRAME, 1000, cluster)
                    else:
                        r = registry_run(broker.bootstrap_servers, folder, path, payloads, total, versions, cluster)
                runs[which].append(r)
                label = "single metric" if which == "single" else f"{versions} metrics ({', '.join(args.kinds)})"
                print(f"round {round_ + 1}, {label}: {bench_worker.run_text(r)}", flush=True)
    single = statistics.median(r["reports_per_s"] for r in runs["single"])
    many = statistics.median(r["reports_per_s"] for r in runs["mix"])
    rss_single = statistics.median(r["rss_mib"] for r in runs["single"])
    rss_many = statistics.median(r["rss_mib"] for r in runs["mix"])
    print(f"median single metric (d=10000, 1,000 tracked): {single:>12,.0f} reports/s (worker RSS {rss_single:.0f} MiB)")
    print(f"median {versions} metrics mixed on one topic:      {many:>12,.0f} reports/s (worker RSS {rss_many:.0f} MiB)")
    print(f"ratio: {many / single:.0%} of the single-metric figure; memory: {(rss_many - rss_single) / versions:.1f} MiB "
          "per metric above the single-metric worker")
    cpu_single = statistics.median(r["worker_cpu_seconds"] / r["reports"] for r in runs["single"]) * 1e6
    cpu_many = statistics.median(r["worker_cpu_seconds"] / r["reports"] for r in runs["mix"]) * 1e6
    print(f"worker CPU per report (medians; steadier than rates on a busy machine): single metric {cpu_single:.2f} us, "
          f"{versions} metrics {cpu_many:.2f} us")


if __name__ == "__main__":
    main()
