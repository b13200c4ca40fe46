"""What shuffling costs the collector: uploads/s and time to 202 with --shuffle-min-reports off, 1,000, 10,000.

    .venv/bin/python -m benchmarks.bench_shuffle [--duration S] [--max-seconds S]

One embedded broker (Tansu, memory) and three `ocms collector` processes on it (metric
flight_dest of deploy/registry.yaml, exactly-once retries on, as by default): one without
shuffling and two with ``--shuffle-min-reports`` 1,000 and 10,000 (``--shuffle-max-seconds``
``--max-seconds``). wrk posts uploads each with a fresh ``Idempotency-Key`` (as devices send
them), as fast as it can:

1. single-report uploads on 2,048 keep-alive connections: an upload waits for its batch, so a
   batch of N single-report uploads needs N connections in flight; with fewer, batches close by
   time (``--max-seconds``) and the time to 202 is about that;
2. 100-report uploads on 512 connections (51,200 reports in flight: batches fill).

Then the CPU cost of the permutation itself (collector.shuffle: Fisher-Yates on os.urandom draws,
and cutting the frames) per batch size. This is a benchmark, not a test: it prints numbers and
never fails on speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_collector import METRIC, REGISTRY, VERSION, ms, spawn, stop, wait_http, wrk
from benchmarks.bench_exactly_once import LUA
from benchmarks.experiments.common import cpu_model
from cms_core import wire
from cms_core.privatize import simulate_reports
from collector.lanes import Unit
from infra.broker import EmbeddedBroker
from infra.process import free_port
from ocms.run_collector import collector_command

TOPIC = "bench-shuffle"
SIZES = (0, 1_000, 10_000)  # --shuffle-min-reports (0: off)
RUNS = (("single-report uploads", "one", 1, 2048), ("100-report uploads", "hundred", 100, 512))


def permutation_seconds(version, n: int, repeat: int = 5) -> float:
    """Median seconds to shuffle a batch of n reports and cut it into frames (what the collector does per batch)."""
    size = wire.record_size(version.params)
    records = os.urandom(n * size)
    times = []
    for _ in range(repeat):
        batch = Unit(version, records, [], 0, size, n, 10_000, shuffled=True)
        started = time.perf_counter()
        batch.shuffled_frames()
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run (default 10)")
    parser.add_argument("--max-seconds", type=float, default=2.0, help="--shuffle-max-seconds of the shuffling "
                                                                       "collectors (default 2)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk (scripts/ensure_system_packages.sh does it)")
    from registry import load_registry

    version = load_registry(REGISTRY).metric(METRIC).version(VERSION)
    rng = np.random.default_rng(0)
    tmp = Path(tempfile.mkdtemp(prefix="ocms-bench-shuffle-"))
    bodies = {"one": tmp / "one.bin", "hundred": tmp / "hundred.bin"}
    bodies["one"].write_bytes(wire.encode_reports(version.params, simulate_reports(
        version.params, np.array([7], np.uint64), rng))[0])
    bodies["hundred"].write_bytes(wire.encode_frame(version.params, simulate_reports(
        version.params, (rng.zipf(1.3, 100) % 105).astype(np.uint64), rng)))
    lua = tmp / "post.lua"
    lua.write_text(LUA)
    os.environ["OCMS_BENCH_KEYS"] = "1"
    results, processes = {}, []
    with EmbeddedBroker(log_path=tmp / "broker.log") as broker:
        broker.create_topics({TOPIC: 4})
        try:
            for n in SIZES:
                port = free_port()
                extra = ("--shuffle-min-reports", str(n), "--shuffle-max-seconds", f"{args.max_seconds:g}") if n else ()
                process = spawn(collector_command(REGISTRY, broker.bootstrap_servers, port, "--source-topic", TOPIC,
                                                  "--access-log", "false", "--log-level", "warning",
                                                  "--max-connections", "4096", "--max-upload-reports", "100",
                                                  "--broker", "embedded", *extra),
                                tmp / f"collector-{port}.log")
                processes.append(process)
                url = f"http://127.0.0.1:{port}"
                wait_http(url + "/healthz")
                wrk(url + "/v1/reports", bodies["hundred"], lua, duration=2, connections=512)  # warm-up
                for name, body, per, connections in RUNS:
                    results[(n, name)] = (wrk(url + "/v1/reports", bodies[body], lua, duration=args.duration,
                                              connections=connections), per, connections)
                stop(process)
        finally:
            for process in reversed(processes):
                stop(process)
            os.environ.pop("OCMS_BENCH_KEYS", None)
    print(f"bench_shuffle on {cpu_model()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
          f"embedded broker; wrk 1 thread, {args.duration:g} s per run; metric {METRIC} "
          f"({wire.record_size(version.params)}-byte records), a fresh Idempotency-Key per upload; "
          f"--shuffle-max-seconds {args.max_seconds:g}")
    print(f"{'collector':<26} {'uploads':<24} {'conn.':>6} {'uploads/s':>10} {'reports/s':>11} {'p50':>10} {'p99':>10} "
          f"{'non-2xx':>8}")
    for (n, name), (r, per, connections) in results.items():
        label = f"shuffle N = {n:,}" if n else "no shuffling"
        print(f"{label:<26} {name:<24} {connections:>6} {r['rate']:>10,.0f} {r['rate'] * per:>11,.0f} "
              f"{ms(r['p50_us']):>10} {ms(r['p99_us']):>10} {r['non2xx'] + r['socket_errors']:>8}")
    print("permutation and frames per batch (collector.shuffle.ShuffledBatch.shuffled_frames, median of 5): " + "; ".join(
        f"N = {n:,}: {permutation_seconds(version, n) * 1000:.1f} ms" for n in (1_000, 10_000, 100_000, 1_000_000)))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
