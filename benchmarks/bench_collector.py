"""Collector throughput and latency with wrk, side by side with a bare aiohttp handler.

    .venv/bin/python -m benchmarks.bench_collector [--duration S] [--connections C] [--event-loop L[,L]] [--quick]

One embedded broker (Tansu, memory), one `ocms collector` process (metric
flight_dest of deploy/registry.yaml) and, as the limit, a bare aiohttp handler in
its own process that reads the body and answers 202 (same server library, same
event loop, no work). Both run on uvloop, the collector's default event loop
(``--event-loop``); the first two runs are repeated with both on asyncio's own
loop, side by side (``--event-loop uvloop`` alone skips that, ``asyncio,uvloop``
swaps the roles). The load generator is wrk (Debian package `wrk`), with
keep-alive connections and a Lua script that POSTs a wire-v1 body. Runs:

1. bare handler, single-report uploads, as fast as wrk can;
2. collector, single-report uploads, as fast as wrk can (every 202 is a Kafka ack);
3. collector, uploads of 100 reports (reports/s = uploads/s x 100);
4. collector, single-report uploads paced at half of run 2's rate: p50/p99 time to 202;
5. the same paced valid traffic while a second wrk sends malformed bodies as fast as it can
   (a reject storm): what the valid uploads still get;
6. runs 1 and 2 again on each further event loop of ``--event-loop``;
7. end to end: a device uploads one report through the collector, a worker counts it;
   the time from the upload's start until the worker's API shows it (p50/p99).

Access logs are off in both servers (a log line per request is the operator's
choice and costs the same everywhere). This is a benchmark, not a test: it
prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from benchmarks.experiments.common import cpu_model, cpu_times, steal_fraction
from cms_core import wire
from cms_core.privatize import simulate_reports
from infra.broker import EmbeddedBroker
from infra.process import free_port, stop_process_group
from ocms.process import WorkerChild
from ocms.run_collector import collector_command

ROOT = Path(__file__).resolve().parents[1]

REGISTRY = ROOT / "deploy" / "registry.yaml"
METRIC = "flight_dest"
TOPIC = "bench-collector"
VERSION = 1  # flight_dest has one version

LUA = r"""
local f = io.open(os.getenv("OCMS_BENCH_BODY"), "rb")
wrk.method = "POST"
wrk.body = f:read("*all")
f:close()
wrk.headers["Content-Type"] = "application/vnd.ocms.wire-v1"
local pace = tonumber(os.getenv("OCMS_BENCH_DELAY_MS") or "0")
if pace > 0 then
  function delay()
    return pace
  end
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('OCMS_RESULT {"requests": %d, "duration_us": %d, "non2xx": %d, "socket_errors": %d, '
    .. '"p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


# ----------------------------------------------------------------------------- the bare handler


def bare_server(port: int, event_loop: str) -> None:
    from aiohttp import web

    from collector.cli import loop_factory

    async def accept(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"status": 202, "reason": "accepted"}, status=202)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/reports", accept)
    app.router.add_get("/healthz", healthz)
    factory = loop_factory(event_loop)  # the collector's own choice of loop, so the limit is like for like
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, backlog=1024,  # as the collector's
                loop=factory() if factory is not None else asyncio.new_event_loop())


# ---------------------------------------------------------------------------------- processes


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer 200 within {timeout:.0f} s")


def spawn(command: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as fh:
        return subprocess.Popen(command, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={k: v for k, v in os.environ.items() if not k.startswith("OCMS_")})


def stop(process: subprocess.Popen | None) -> None:
    if process is not None:
        stop_process_group(process, 20)


# ---------------------------------------------------------------------------------------- wrk


def wrk(url: str, body: Path, lua: Path, *, duration: float, connections: int, delay_ms: float = 0.0) -> dict:
    env = {**os.environ, "OCMS_BENCH_BODY": str(body), "OCMS_BENCH_DELAY_MS": f"{delay_ms:.3f}"}
    done = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration:g}s", "--timeout", "10s", "-s", str(lua), url],
                          capture_output=True, text=True, env=env, timeout=duration + 60)
    for line in done.stdout.splitlines():
        if line.startswith("OCMS_RESULT "):
            result = json.loads(line[len("OCMS_RESULT "):])
            result["rate"] = result["requests"] / (result["duration_us"] / 1e6)
            return result
    raise SystemExit(f"wrk printed no result:\n{done.stdout}\n{done.stderr}")


def ms(us: float) -> str:
    return f"{us / 1000:.1f} ms"


# --------------------------------------------------------------------------------- end to end


def end_to_end(collector_url: str, worker_url: str, version, probes: int) -> list[float]:
    """Seconds from the start of a one-report upload until the worker's total shows it."""
    body = wire.encode_reports(version.params, simulate_reports(
        version.params, np.arange(probes, dtype=np.uint64) % 100, np.random.default_rng(1)))
    latencies = []

    def counted() -> int:
        with urllib.request.urlopen(worker_url + "/estimates", timeout=5) as response:
            return json.loads(response.read())["n"]

    for message in body:
        before = counted()
        started = time.monotonic()
        request = urllib.request.Request(collector_url + "/v1/reports", data=message, method="POST",
                                         headers={"Content-Type": "application/vnd.ocms.wire-v1"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 202
        while counted() <= before:
            if time.monotonic() - started > 30:
                raise SystemExit("the worker did not count a report within 30 s")
            time.sleep(0.01)
        latencies.append(time.monotonic() - started)
    return latencies


# ------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per wrk run (default 15)")
    parser.add_argument("--connections", type=int, default=512, help="keep-alive connections (default 512: an upload waits for its Kafka ack, so fewer connections measure latency, not capacity)")
    parser.add_argument("--probes", type=int, default=200, help="end-to-end probes (default 200)")
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke run)")
    parser.add_argument("--event-loop", default="uvloop,asyncio",
                        help="comma-separated event loops (uvloop, asyncio) of the bare handler and the collector: "
                             "every run on the first; the bare and single-report runs also on each other one, "
                             "for comparison (default uvloop,asyncio)")
    parser.add_argument("--bare-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server:
        bare_server(args.bare_server, args.event_loop)
        return
    args.event_loops = [name.strip() for name in args.event_loop.split(",") if name.strip()]
    if not args.event_loops or any(name not in ("uvloop", "asyncio") for name in args.event_loops):
        raise SystemExit(f"--event-loop {args.event_loop}: expected uvloop, asyncio or both, comma-separated")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk (scripts/ensure_system_packages.sh does it)")
    if args.quick:
        args.duration, args.probes = 4.0, 30

    from registry import load_registry

    version = load_registry(REGISTRY).metric(METRIC).version(VERSION)
    rng = np.random.default_rng(0)
    tmp = Path(tempfile.mkdtemp(prefix="ocms-bench-collector-"))
    one = tmp / "one.bin"
    one.write_bytes(wire.encode_reports(version.params, simulate_reports(version.params, np.array([7], np.uint64), rng))[0])
    hundred = tmp / "hundred.bin"
    values = (rng.zipf(1.3, 100) % 105).astype(np.uint64)
    hundred.write_bytes(wire.encode_frame(version.params, simulate_reports(version.params, values, rng)))
    garbage = tmp / "garbage.bin"
    garbage.write_bytes(b"OC\x01\x01" + os.urandom(20))  # unknown fingerprint: 400
    lua = tmp / "post.lua"
    lua.write_text(LUA)

    processes: list[subprocess.Popen] = []
    results: dict = {}
    main_loop, other_loops = args.event_loops[0], args.event_loops[1:]
    steal_before = cpu_times()
    with EmbeddedBroker(log_path=tmp / "broker.log") as broker:
        broker.create_topics({TOPIC: 4})

        def servers(event_loop: str) -> tuple[list[subprocess.Popen], str, str]:
            """A bare handler and a collector, both on ``event_loop``, answering; warmed up."""
            bare_port, collector_port = free_port(), free_port()
            started = [spawn([sys.executable, "-m", "benchmarks.bench_collector", "--bare-server", str(bare_port),
                              "--event-loop", event_loop],
                             tmp / f"bare-{event_loop}.log"),
                       spawn(collector_command(REGISTRY, broker.bootstrap_servers, collector_port,
                                               "--source-topic", TOPIC, "--access-log", "false", "--log-level",
                                               "warning", "--event-loop", event_loop),
                             tmp / f"collector-{event_loop}.log")]
            processes.extend(started)
            bare_url, collector_url = f"http://127.0.0.1:{bare_port}", f"http://127.0.0.1:{collector_port}"
            wait_http(bare_url + "/healthz")
            wait_http(collector_url + "/healthz")
            for url in (bare_url, collector_url):  # warm-up (first calls, allocations)
                wrk(url + "/v1/reports", one, lua, duration=2, connections=args.connections)
            return started, bare_url, collector_url

        try:
            worker_port = free_port()
            _, bare_url, collector_url = servers(main_loop)
            c = args.connections
            results["bare"] = wrk(bare_url + "/v1/reports", one, lua, duration=args.duration, connections=c)
            results["single"] = wrk(collector_url + "/v1/reports", one, lua, duration=args.duration, connections=c)
            results["hundred"] = wrk(collector_url + "/v1/reports", hundred, lua, duration=args.duration, connections=c)
            half = results["single"]["rate"] / 2
            # wrk waits delay() after each answer (whole milliseconds), so a connection's cycle is
            # delay + latency and the rate is connections / cycle. Choose a whole delay about as long
            # as an answer takes and enough connections for the target rate (32 connections at ~7.5 ms
            # an answer cannot go beyond ~4,300 uploads/s); measure the latency at that pace and
            # calibrate again.
            paced_connections, delay_ms = 32, 0
            latency_ms = 8.0  # a first guess (frame latency 5 ms + Kafka's ack)
            for _ in range(2):
                delay_ms = max(1, round(latency_ms))
                paced_connections = max(8, round(half * (delay_ms + latency_ms) / 1000))
                probe = wrk(collector_url + "/v1/reports", one, lua, duration=3, connections=paced_connections,
                            delay_ms=delay_ms)
                latency_ms = max(0.1, paced_connections * 1000 / probe["rate"] - delay_ms)
            delay_ms = max(1, round(latency_ms))
            paced_connections = max(8, round(half * (delay_ms + latency_ms) / 1000))
            results["paced"] = paced_connections
            results["half"] = wrk(collector_url + "/v1/reports", one, lua, duration=args.duration,
                                  connections=paced_connections, delay_ms=delay_ms)
            # reject storm: the paced valid traffic again, with garbage at full speed beside it
            env = {**os.environ, "OCMS_BENCH_BODY": str(garbage), "OCMS_BENCH_DELAY_MS": "0"}
            storm = subprocess.Popen(["wrk", "-t1", f"-c{c}", f"-d{args.duration + 2:g}s", "-s", str(lua),
                                      collector_url + "/v1/reports"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
            time.sleep(1)  # let the storm reach full speed first
            results["storm_valid"] = wrk(collector_url + "/v1/reports", one, lua, duration=args.duration,
                                         connections=paced_connections, delay_ms=delay_ms)
            out, _ = storm.communicate(timeout=args.duration + 60)
            storm_line = next((line for line in out.splitlines() if line.startswith("OCMS_RESULT ")), None)
            if storm_line:
                storm_result = json.loads(storm_line[len("OCMS_RESULT "):])
                storm_result["rate"] = storm_result["requests"] / (storm_result["duration_us"] / 1e6)
                results["storm"] = storm_result
            # the same two runs on each other event loop, for comparison (then those servers stop)
            for event_loop in other_loops:
                started, other_bare, other_collector = servers(event_loop)
                results[f"bare {event_loop}"] = wrk(other_bare + "/v1/reports", one, lua, duration=args.duration,
                                                    connections=c)
                results[f"single {event_loop}"] = wrk(other_collector + "/v1/reports", one, lua,
                                                      duration=args.duration, connections=c)
                for process in started:
                    stop(process)
            # end to end, with a worker counting the topic
            # The registry's first metric (flight_dest) answers the worker's name-less /estimates.
            worker = WorkerChild(TOPIC, "--registry", str(REGISTRY), "--batch-max-seconds", "0.1",
                                 bootstrap=broker.bootstrap_servers, web_port=worker_port, log=tmp / "worker.log").start()
            processes.append(worker.process)
            worker_url = worker.base_url
            wait_http(worker_url + "/healthz", timeout=120)
            latencies = np.array(end_to_end(collector_url, worker_url, version, args.probes))
            results["e2e"] = {"p50": float(np.percentile(latencies, 50)), "p99": float(np.percentile(latencies, 99)),
                              "n": len(latencies)}
        finally:
            for process in reversed(processes):
                stop(process)
    steal = steal_fraction(steal_before, cpu_times())

    bare, single, hundred_r, half_r, storm_valid = (results[k] for k in ("bare", "single", "hundred", "half", "storm_valid"))
    load = os.getloadavg()[0]
    print(f"bench_collector on {cpu_model()}, {os.cpu_count()} CPUs, load average {load:.1f} at the end, "
          f"CPU steal {'n/a' if steal is None else f'{steal:.0%}'}; "
          f"wrk 1 thread, {args.connections} keep-alive connections, {args.duration:g} s per run; metric {METRIC} "
          f"({len(one.read_bytes())}-byte single report); event loop {main_loop} (both servers)")
    print(f"{'run':<58} {'uploads/s':>10} {'reports/s':>11} {'p50':>9} {'p99':>9} {'non-2xx':>8}")

    def row(name: str, r: dict, per: int, expect_2xx: bool = True) -> None:
        bad = r["non2xx"] + r["socket_errors"]
        print(f"{name:<58} {r['rate']:>10,.0f} {r['rate'] * per:>11,.0f} {ms(r['p50_us']):>9} {ms(r['p99_us']):>9} "
              f"{bad if expect_2xx else '-':>8}")

    row(f"bare aiohttp handler, 202 (the limit) [{main_loop}]", bare, 1)
    row(f"collector, single-report uploads [{main_loop}]", single, 1)
    row("collector, 100-report uploads", hundred_r, 100)
    row(f"collector, single at half rate ({half:,.0f}/s target, {results['paced']} conn.)", half_r, 1)
    row("  same, during a reject storm (valid traffic)", storm_valid, 1)
    if "storm" in results:
        print(f"{'  the storm itself (400 answers)':<58} {results['storm']['rate']:>10,.0f} {'':>11} "
              f"{ms(results['storm']['p50_us']):>9} {ms(results['storm']['p99_us']):>9} {'-':>8}")
    for event_loop in other_loops:
        row(f"bare aiohttp handler, 202 [{event_loop}]", results[f"bare {event_loop}"], 1)
        row(f"collector, single-report uploads [{event_loop}]", results[f"single {event_loop}"], 1)
    if other_loops:
        print("collector / bare on the same loop: " + "; ".join(
            f"{name} {results[s]['rate'] / results[b]['rate']:.0%} ({results[s]['rate']:,.0f} / {results[b]['rate']:,.0f})"
            for name, s, b in [(main_loop, "single", "bare")]
            + [(o, f"single {o}", f"bare {o}") for o in other_loops]))
    e2e = results["e2e"]
    print(f"end to end device -> 202 -> worker API shows it: p50 {e2e['p50'] * 1000:.0f} ms, "
          f"p99 {e2e['p99'] * 1000:.0f} ms over {e2e['n']} probes")
    ratio = single["rate"] / bare["rate"]
    print("goals: single >= 50% of bare: {:.0%} ({}); >= 10k uploads/s: {:,.0f} ({}); 100-report uploads >= 500k "
          "reports/s: {:,.0f} ({}); p99 at half rate <= 50 ms: {} ({}); end to end p99 <= 2 s: {:.2f} s ({})".format(
              ratio, "met" if ratio >= 0.5 else "NOT met", single["rate"], "met" if single["rate"] >= 10_000 else "NOT met",
              hundred_r["rate"] * 100, "met" if hundred_r["rate"] * 100 >= 500_000 else "NOT met",
              ms(half_r["p99_us"]), "met" if half_r["p99_us"] <= 50_000 else "NOT met",
              e2e["p99"], "met" if e2e["p99"] <= 2 else "NOT met"))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
