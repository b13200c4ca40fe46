"""What exactly-once retries cost the collector: keyed uploads with the shared log and without it.

    .venv/bin/python -m benchmarks.bench_exactly_once [--duration S] [--rounds R] [--connections C]
        [--only CONFIGS] [--collector-flags FLAGS] [--keep-logs DIR] [--json]

One embedded broker (Tansu, memory) and these servers on it (metric flight_dest of deploy/registry.yaml), one
fresh process per configuration (so no configuration measures what another left in its server):

* ``bare``: an aiohttp handler that reads the body and answers 202 (no parsing, no Kafka): the limit;
* ``shared``: an ``ocms collector`` with the shared idempotency log (the default: retries counted once
  across restarts and replicas, collector/exactly_once/);
* ``process``: one with ``--idempotency-topic off`` (the per-process cache: at-least-once across
  processes);
* ``shuffled``: one with the shared log and ``--shuffle-min-reports 10000``.

wrk posts single-report uploads on ``--connections`` keep-alive connections as fast as it can, each with a
fresh ``Idempotency-Key`` (``*_keyed``, as devices send them) or without one (``*_unkeyed``); then
100-report keyed uploads on 2,048 connections to the shared collector without and with shuffling
(``unshuffled_100``, ``shuffled_100``). Every configuration runs once per round, the order rotating
between rounds, and the median of the rounds is printed: the machine's other load moves single runs by
+-30%, which moves all configurations of a round alike less than it moves one configuration.

Goals (issue 41): ``shared_keyed`` at least 85% of ``process_unkeyed``; ``process_unkeyed`` at least 75%
of ``bare``; ``shuffled_100`` at least 80% of ``unshuffled_100``.

``--json`` prints one object: per configuration ``max_uploads_per_s``, ``p50_ms``, ``p99_ms``,
``server_cpu_us_per_upload`` (the server process's CPU per upload: what the load moves least),
``broker_cpu_us_per_upload`` (the embedded broker's, which shares the 2 cores),
``non_2xx``, each round's rate and CPU per upload (``rounds``, ``rounds_server_cpu_us``,
``rounds_broker_cpu_us``: a cost that grows round by round grows with what the servers keep) and, for the
collectors with the shared log, ``log_records_per_upload`` (listings, outcomes and leases it wrote); ``bare`` (the bare handler's max uploads/s); ``ratios`` and
``goals_met``. This is a benchmark, not a test: it prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from benchmarks.bench_collector import LUA as BENCH_COLLECTOR_LUA
from benchmarks.bench_collector import METRIC, REGISTRY, VERSION, spawn, stop, wait_http, wrk
from benchmarks.experiments.common import cpu_model
from cms_core import wire
from cms_core.privatize import simulate_reports
from infra.broker import EmbeddedBroker
from infra.mock_cluster import BROKER_KINDS, MockCluster
from infra.process import free_port
from ocms.run_collector import collector_command

TOPIC = "bench-exactly-once"
SHUFFLE_N = 10_000
SHUFFLE_CONNECTIONS = 2_048

#: bench_collector's script plus a fresh Idempotency-Key per request when OCMS_BENCH_KEYS=1.
LUA = BENCH_COLLECTOR_LUA + r"""
local keyed = os.getenv("OCMS_BENCH_KEYS") == "1"
local prefix = string.format("bench%d%04d", os.time(), math.random(0, 9999))
local counter = 0
function request()
  if keyed then
    counter = counter + 1
    wrk.headers["Idempotency-Key"] = string.format("%s-%012d", prefix, counter)
  end
  return wrk.format()
end
"""

#: configuration -> (server, keyed, body, connections: None = --connections)
CONFIGURATIONS = {
    "bare": ("bare", False, "one", None),
    "process_unkeyed": ("process", False, "one", None),
    "process_keyed": ("process", True, "one", None),
    "shared_unkeyed": ("shared", False, "one", None),
    "shared_keyed": ("shared", True, "one", None),
    "unshuffled_100": ("shared", True, "hundred", SHUFFLE_CONNECTIONS),
    "shuffled_100": ("shuffled", True, "hundred", SHUFFLE_CONNECTIONS),
}
#: (name, numerator, denominator, goal)
GOALS = (("shared_keyed / process_unkeyed", "shared_keyed", "process_unkeyed", 0.85),
         ("process_unkeyed / bare", "process_unkeyed", "bare", 0.75),
         ("shuffled_100 / unshuffled_100", "shuffled_100", "unshuffled_100", 0.80))


def topic_of(name: str) -> str:
    """The source topic of a configuration's collector (its idempotency log: ``<topic>-idempotency``)."""
    return f"{TOPIC}-{name.replace('_', '-')}"


def servers(broker, tmp: Path, chosen: list[str], collector_flags: tuple[str, ...] = ()) -> tuple[dict, list]:
    """Start one server per configuration; their upload URLs and pids, and the processes (to stop).

    Each configuration has a server of its own, started fresh: what one configuration leaves in a collector
    (200,000 remembered keys, a heap grown by 2,048 connections of 100-report uploads) made the next one on the
    same process 5-10 us per upload slower, round after round, so configurations that shared a server measured
    each other (issue 41). Each collector has its own topic and so its own idempotency log: a collector sharing
    another's log is its replica, and applies every record the other one writes."""
    common = ("--access-log", "false", "--log-level", "warning", "--max-connections", "4096",
              "--max-upload-reports", "100", *collector_flags)
    extra = {"shared": (), "process": ("--idempotency-topic", "off"),
             "shuffled": ("--shuffle-min-reports", str(SHUFFLE_N), "--shuffle-max-seconds", "2")}
    urls, processes = {}, {}
    for name in chosen:
        server = CONFIGURATIONS[name][0]
        port = free_port()
        if server == "bare":
            processes[name] = spawn([sys.executable, "-m", "benchmarks.bench_collector", "--bare-server", str(port),
                                     "--event-loop", "uvloop"], tmp / f"{name}.log")
        else:
            processes[name] = spawn(collector_command(REGISTRY, broker.bootstrap_servers, port, *common,
                                                      "--source-topic", topic_of(name), *extra[server]),
                                    tmp / f"collector-{name}.log")
        urls[name] = f"http://127.0.0.1:{port}"
    try:
        for url in urls.values():
            wait_http(url + "/healthz")
    except BaseException:  # a server that never answered (a refused flag): none is left running
        for process in processes.values():
            stop(process)
        raise
    return ({name: (url + "/v1/reports", processes[name].pid) for name, url in urls.items()},
            list(processes.values()))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log_end(bootstrap: str, topic: str, profile: str = "embedded") -> int:
    """The end offset of partition 0 of ``topic`` (the idempotency log): records written so far."""
    from aiokafka import TopicPartition

    from infra.kafka import PROFILES, make_consumer

    async def end() -> int:
        consumer = make_consumer(bootstrap, profile=PROFILES[profile], client_id="bench-exactly-once-log")
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            return (await consumer.end_offsets([tp]))[tp]
        finally:
            await consumer.stop()

    return asyncio.run(end())


def run(url: str, pid: int, body: Path, lua: Path, keyed: bool, duration: float, connections: int,
        broker_pid: int | None = None, log_records: Callable[[], int] | None = None) -> dict:
    """One wrk run; with the server's and the broker's CPU per upload (less moved by the machine's other load than
    the rate: on 2 cores the broker's share is CPU the collector does not get) and, for a collector with the
    shared log, the log records it wrote per upload (listings, outcomes and leases: each costs the broker and
    every replica's tail)."""
    os.environ["OCMS_BENCH_KEYS"] = "1" if keyed else "0"
    try:
        before = cpu_seconds(pid)
        broker_before = cpu_seconds(broker_pid) if broker_pid else 0.0
        records_before = log_records() if log_records else 0
        result = wrk(url, body, lua, duration=duration, connections=connections)
        requests = max(1, result["requests"])
        result["cpu_us"] = (cpu_seconds(pid) - before) / requests * 1e6
        if broker_pid:
            result["broker_cpu_us"] = (cpu_seconds(broker_pid) - broker_before) / requests * 1e6
        if log_records:
            result["log_records"] = (log_records() - records_before) / requests
        return result
    finally:
        os.environ.pop("OCMS_BENCH_KEYS", None)


def summarize(runs: list[dict]) -> dict:
    return {"max_uploads_per_s": round(statistics.median(r["rate"] for r in runs), 1),
            "p50_ms": round(statistics.median(r["p50_us"] for r in runs) / 1000, 2),
            "p99_ms": round(statistics.median(r["p99_us"] for r in runs) / 1000, 2),
            "server_cpu_us_per_upload": round(statistics.median(r["cpu_us"] for r in runs), 1),
            "broker_cpu_us_per_upload": round(statistics.median(r.get("broker_cpu_us", 0.0) for r in runs), 1),
            "non_2xx": sum(r["non2xx"] + r["socket_errors"] for r in runs),
            "rounds": [round(r["rate"], 1) for r in runs],
            # per round, in order: a cost that grows round by round grows with what the collector keeps
            "rounds_server_cpu_us": [round(r["cpu_us"], 1) for r in runs],
            "rounds_broker_cpu_us": [round(r.get("broker_cpu_us", 0.0), 1) for r in runs],
            **({"log_records_per_upload": round(statistics.median(r["log_records"] for r in runs), 4)}
               if all("log_records" in r for r in runs) else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per wrk run (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every configuration (default 3; the median "
                                                              "is printed)")
    parser.add_argument("--connections", type=int, default=256, help="keep-alive connections of the single-report "
                                                                     "runs (default 256)")
    parser.add_argument("--only", default="", help="comma-separated configurations to run (default all: "
                                                   + ", ".join(CONFIGURATIONS) + ")")
    parser.add_argument("--broker", choices=BROKER_KINDS, default="embedded",
                        help="embedded: Tansu (memory), the default; mock: librdkafka's mock cluster (one broker): "
                             "a fetch's cost there does not grow with the partition, which separates the broker's "
                             "cost from the collector's")
    parser.add_argument("--keep-logs", default="", metavar="DIR",
                        help="copy the broker's and the servers' logs to DIR before the run's files are removed")
    parser.add_argument("--collector-flags", default="", metavar="FLAGS",
                        help="more flags for every collector, as one string (e.g. '--frame-max-latency-ms 1')")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    chosen = [c.strip() for c in args.only.split(",") if c.strip()] or list(CONFIGURATIONS)
    unknown = [c for c in chosen if c not in CONFIGURATIONS]
    if unknown:
        raise SystemExit(f"--only {','.join(unknown)}: not a configuration; choose from {', '.join(CONFIGURATIONS)}")
    if args.rounds < 1 or args.duration <= 0 or args.connections < 1:
        raise SystemExit("--rounds, --duration and --connections must be positive")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk (scripts/ensure_system_packages.sh does it)")
    from registry import load_registry

    version = load_registry(REGISTRY).metric(METRIC).version(VERSION)
    rng = np.random.default_rng(0)
    tmp = Path(tempfile.mkdtemp(prefix="ocms-bench-exactly-once-"))
    bodies = {"one": tmp / "one.bin", "hundred": tmp / "hundred.bin"}
    bodies["one"].write_bytes(wire.encode_reports(version.params, simulate_reports(
        version.params, np.array([7], np.uint64), rng))[0])
    bodies["hundred"].write_bytes(wire.encode_frame(version.params, simulate_reports(
        version.params, (rng.zipf(1.3, 100) % 105).astype(np.uint64), rng)))
    lua = tmp / "post.lua"
    lua.write_text(LUA)
    runs: dict[str, list[dict]] = {name: [] for name in chosen}
    processes = []
    broker = EmbeddedBroker(log_path=tmp / "broker.log") if args.broker == "embedded" else MockCluster(1)
    with broker:
        collectors = [name for name in chosen if CONFIGURATIONS[name][0] != "bare"]
        topics = {topic_of(name): 4 for name in collectors}
        if args.broker == "mock":  # the mock's clients cannot create topics: the collectors' logs too
            topics.update({f"{topic_of(name)}-idempotency{suffix}": 1 for name in collectors
                           for suffix in ("", "-redo")})
            args.collector_flags = f"--broker mock {args.collector_flags}"
        broker.create_topics(topics)
        broker_pid = broker.process.pid if args.broker == "embedded" else broker.pid
        try:
            urls, processes = servers(broker, tmp, chosen, tuple(args.collector_flags.split()))
            for name in chosen:  # warm-up: first calls, allocations, the idempotency log read
                server, keyed, body, connections = CONFIGURATIONS[name]
                run(*urls[name], bodies[body], lua, keyed, 2, connections or args.connections, broker_pid)
            for round_index in range(args.rounds):
                shift = round_index % len(chosen)
                for name in chosen[shift:] + chosen[:shift]:
                    server, keyed, body, connections = CONFIGURATIONS[name]
                    records = (functools.partial(log_end, broker.bootstrap_servers, f"{topic_of(name)}-idempotency",
                                                 args.broker) if server in ("shared", "shuffled") else None)
                    runs[name].append(run(*urls[name], bodies[body], lua, keyed, args.duration,
                                          connections or args.connections, broker_pid, records))
        finally:
            for process in reversed(processes):
                stop(process)
    if args.keep_logs:
        Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
        for path in tmp.glob("*.log"):
            shutil.copy(path, Path(args.keep_logs) / path.name)
    shutil.rmtree(tmp, ignore_errors=True)
    results = {name: summarize(r) for name, r in runs.items()}
    ratios, met = {}, {}
    for label, top, bottom, goal in GOALS:
        if top in results and bottom in results:
            ratios[label] = round(results[top]["max_uploads_per_s"] / results[bottom]["max_uploads_per_s"], 3)
            met[label] = ratios[label] >= goal
    machine = {"broker": args.broker, "cpu": cpu_model(), "cpus": os.cpu_count(), "load_average_at_end": round(os.getloadavg()[0], 2),
               "duration_s": args.duration, "rounds": args.rounds, "connections": args.connections,
               "collector_flags": args.collector_flags,
               "shuffle_connections": SHUFFLE_CONNECTIONS, "shuffle_min_reports": SHUFFLE_N}
    if args.json:
        doc = {**results, "ratios": ratios, "goals_met": met, "machine": machine}
        if "bare" in results:
            doc["bare_config"] = doc.pop("bare")
            doc["bare"] = doc["bare_config"]["max_uploads_per_s"]
        print(json.dumps(doc, indent=2))
        return
    print(f"bench_exactly_once on {machine['cpu']}, {machine['cpus']} CPUs, load average "
          f"{machine['load_average_at_end']:.1f} at the end; embedded broker; wrk 1 thread; median of {args.rounds} "
          f"rounds of {args.duration:g} s; metric {METRIC}")
    print(f"{'configuration':<18} {'uploads':<18} {'conn.':>6} {'max uploads/s':>14} {'p50':>9} {'p99':>9} "
          f"{'CPU/upload':>11} {'broker CPU':>11} {'non-2xx':>8}   rounds")
    for name, r in results.items():
        _, keyed, body, connections = CONFIGURATIONS[name]
        kind = ("100 reports" if body == "hundred" else "1 report") + (", keyed" if keyed else "")
        print(f"{name:<18} {kind:<18} {connections or args.connections:>6} {r['max_uploads_per_s']:>14,.0f} "
              f"{r['p50_ms']:>7.1f}ms {r['p99_ms']:>7.1f}ms {r['server_cpu_us_per_upload']:>9.1f}us "
              f"{r['broker_cpu_us_per_upload']:>9.1f}us {r['non_2xx']:>8}   "
              + " ".join(f"{x:,.0f}" for x in r["rounds"]))
    for label, top, bottom, goal in GOALS:
        if label in ratios:
            print(f"{label:<34} {ratios[label]:6.1%}  (goal {goal:.0%}: {'met' if met[label] else 'not met'})")


if __name__ == "__main__":
    main()
