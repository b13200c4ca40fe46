"""What exactly-once retries cost the collector: keyed uploads with the shared log and without it.

    .venv/bin/python -m benchmarks.bench_exactly_once [--duration S] [--connections C] [--rate R]

One embedded broker (Tansu, memory) and two `ocms collector` processes on it (metric
flight_dest of deploy/registry.yaml): one with the shared idempotency log (the default:
retries counted once across restarts and replicas, collector/exactly_once/) and one with
``--idempotency-topic off`` (the per-process cache of before). wrk posts single-report uploads,
each with a fresh ``Idempotency-Key`` (as devices send them), and uploads without a key:

1. as fast as wrk can with ``--connections`` keep-alive connections (capacity);
2. paced at ``--rate`` uploads/s (latency at a fixed load, the same for both).

This is a benchmark, not a test: it prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.bench_collector import METRIC, REGISTRY, VERSION, ms, spawn, stop, wait_http, wrk
from benchmarks.bench_collector import LUA as BENCH_COLLECTOR_LUA
from benchmarks.experiments.common import cpu_model
from cms_core import wire
from cms_core.privatize import simulate_reports
from infra.broker import EmbeddedBroker
from infra.process import free_port
from ocms.run_collector import collector_command

TOPIC = "bench-exactly-once"

#: bench_collector's script plus a fresh Idempotency-Key per request when OCMS_BENCH_KEYS=1.
LUA = BENCH_COLLECTOR_LUA + r"""
local keyed = os.getenv("OCMS_BENCH_KEYS") == "1"
local prefix = string.format("bench%d", os.time())
local counter = 0
function request()
  if keyed then
    counter = counter + 1
    wrk.headers["Idempotency-Key"] = string.format("%s-%012d", prefix, counter)
  end
  return wrk.format()
end
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run (default 10)")
    parser.add_argument("--connections", type=int, default=256, help="keep-alive connections of the capacity runs")
    parser.add_argument("--rate", type=float, default=1000.0, help="uploads/s of the paced runs (default 1000)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk (scripts/ensure_system_packages.sh does it)")
    from registry import load_registry

    version = load_registry(REGISTRY).metric(METRIC).version(VERSION)
    tmp = Path(tempfile.mkdtemp(prefix="ocms-bench-exactly-once-"))
    one = tmp / "one.bin"
    one.write_bytes(wire.encode_reports(version.params, simulate_reports(
        version.params, np.array([7], np.uint64), np.random.default_rng(0)))[0])
    lua = tmp / "post.lua"
    lua.write_text(LUA)
    # paced: 20 connections, each waiting delay() after its answer: rate = connections / (delay + latency)
    paced_connections = 20
    delay_ms = max(1.0, paced_connections * 1000 / args.rate - 5)
    results, processes = {}, []
    with EmbeddedBroker(log_path=tmp / "broker.log") as broker:
        broker.create_topics({TOPIC: 4})
        try:
            urls = {}
            for mode, extra in (("shared log", ()), ("per process", ("--idempotency-topic", "off"))):
                port = free_port()
                processes.append(spawn(collector_command(REGISTRY, broker.bootstrap_servers, port, "--source-topic",
                                                         TOPIC, "--access-log", "false", "--log-level", "warning",
                                                         *extra), tmp / f"collector-{port}.log"))
                urls[mode] = f"http://127.0.0.1:{port}/v1/reports"
                wait_http(f"http://127.0.0.1:{port}/healthz")
            for mode, url in urls.items():
                os.environ["OCMS_BENCH_KEYS"] = "1"
                wrk(url, one, lua, duration=2, connections=args.connections)  # warm-up
                for keyed in ("1", "0"):
                    os.environ["OCMS_BENCH_KEYS"] = keyed
                    name = f"{mode}, {'a fresh key per upload' if keyed == '1' else 'no key'}"
                    results[(name, "max")] = wrk(url, one, lua, duration=args.duration, connections=args.connections)
                    results[(name, "paced")] = wrk(url, one, lua, duration=args.duration, connections=paced_connections,
                                                   delay_ms=delay_ms)
        finally:
            for process in reversed(processes):
                stop(process)
            os.environ.pop("OCMS_BENCH_KEYS", None)
    print(f"bench_exactly_once on {cpu_model()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the "
          f"end; embedded broker; wrk 1 thread, {args.duration:g} s per run; metric {METRIC}, single-report uploads")
    print(f"{'collector':<42} {'max uploads/s':>14} {'p50':>9} {'p99':>9}   {'paced uploads/s':>16} {'p50':>9} {'p99':>9} "
          f"{'non-2xx':>8}")
    for name in dict.fromkeys(n for n, _ in results):
        top, paced = results[(name, "max")], results[(name, "paced")]
        bad = top["non2xx"] + top["socket_errors"] + paced["non2xx"] + paced["socket_errors"]
        print(f"{name:<42} {top['rate']:>14,.0f} {ms(top['p50_us']):>9} {ms(top['p99_us']):>9}   "
              f"{paced['rate']:>16,.0f} {ms(paced['p50_us']):>9} {ms(paced['p99_us']):>9} {bad:>8}")
    print(f"(max: {args.connections} connections; paced: {paced_connections} connections with {delay_ms:.0f} ms between "
          f"an answer and the next upload, about {args.rate:,.0f} uploads/s)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
