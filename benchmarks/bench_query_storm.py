"""Intake under a storm of maximal queries (issue 17: a query must not stall the worker).

    .venv/bin/python -m benchmarks.bench_query_storm [--tracked 100000] [--seconds 20] [--rounds 2] [--clients 6]

One embedded broker and one `ocms worker` (D tracked values = the whole dictionary,
default 100,000; 10 s buckets kept 600 s; micro-batches of 10,000 reports). History
first: one frame in each of the last 50 buckets, so range queries have buckets to sum.

The storm: ``--clients`` threads send maximal requests back to back (every value
over the whole retention: /estimates, /topk?k=D with simplex, /trend over the whole
retention at the bucket width with and without norm_sub, /estimates/{value} with
norm_sub; bodies read and dropped) while /healthz is polled every 50 ms.

* capacity: reports/s counting a backlog of 400,000 reports produced at once, without
  queries and under the storm, alternating ``--rounds`` times (goal: >= 80% of quiet);
* stream: reports produced at ``--load`` (70%) of the quiet capacity; quiet and storm
  phases of ``--seconds`` alternate ``--rounds`` times; reports counted per second and
  /healthz max and p99 latency (goal < 1 s) per phase, worker CPU, machine load.

Also printed: what the storm got (status counts and median latency per request kind;
503 = turned away because too many heavy answers were waiting).

This is a benchmark, not a test: it prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np


from benchmarks.experiments.common import cpu_model, cpu_times, steal_fraction
from cms_core import OCMSParams, wire
from cms_core.privatize import simulate_reports
from infra.broker import EmbeddedBroker
from infra.process import free_port
from ocms.process import WorkerChild

BUCKET_S = 10
RETENTION_S = 600
HISTORY_BUCKETS = 50
FRAME = 1000
#: The worker's default micro-batch bound. The worker decodes a batch (O(reports x D)) on its
#: decode thread, so a full 200,000-report batch at D = 100,000 no longer holds the event loop
#: (this benchmark used 10,000 while the decode ran on the loop); --batch-max-reports to compare.
BATCH_MAX_REPORTS = 200_000
#: Reports of each capacity run (a backlog produced at once and timed until counted).
CAPACITY_REPORTS = 400_000


class Worker:
    def __init__(self, bootstrap: str, topic: str, log_dir: Path, tracked: int, partitions: int,
                 batch_max_reports: int = BATCH_MAX_REPORTS):
        self.port = free_port()
        self.log_path = log_dir / f"{topic}.log"
        self.child = WorkerChild(  # ocms.process: own session, dies with the benchmark
            topic, "-e", "2", "-d", str(tracked), "--tracked-range", f"0:{tracked}", "--partitions", str(partitions),
            "--bucket-seconds", str(BUCKET_S), "--retention-seconds", str(RETENTION_S),
            "--batch-max-reports", str(batch_max_reports), bootstrap=bootstrap, web_port=self.port,
            log=self.log_path).start()
        self.process = self.child.process

    def url(self, path: str, **query: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}" + (("?" + urllib.parse.urlencode(query)) if query else "")

    def get(self, path: str, timeout: float = 30, **query: str) -> dict:
        with urllib.request.urlopen(self.url(path, **query), timeout=timeout) as r:
            return json.loads(r.read())

    def counted(self) -> int:
        return self.get("/params", timeout=120)["parameter_sets"][0]["reports"]

    def wait(self, condition, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the worker exited ({self.process.returncode}); see {self.log_path}")
            try:
                if condition():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}; see {self.log_path}")

    def stop(self) -> None:
        self.child.stop()


def frames(params: OCMSParams, count: int, size: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    values = ((rng.zipf(1.2, count * size) - 1) % params.dictionary_size).astype(np.uint64)
    batch = simulate_reports(params, values, rng)
    return [wire.encode_frame(params, batch.slice(i * size, (i + 1) * size)) for i in range(count)]


async def produce(bootstrap: str, topic: str, payloads: list[bytes], timestamps_ms: list[int | None]) -> None:
    from infra.kafka import EMBEDDED, make_producer

    producer = make_producer(bootstrap, EMBEDDED, acks=1, linger_ms=2, max_batch_size=1 << 21)
    await producer.start()
    try:
        futures = [await producer.send(topic, p, key=b"k%d" % i, timestamp_ms=t)
                   for i, (p, t) in enumerate(zip(payloads, timestamps_ms))]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def storm_requests(d: int, now: float, rng: random.Random) -> list[tuple[str, str, dict]]:
    """(kind, path, query) of maximal requests: every value, the whole retention."""
    oldest = str(int(now - RETENTION_S + BUCKET_S))
    value = str(rng.randrange(d))
    return [
        ("estimates all values, whole retention", "/estimates", {"from": oldest}),
        ("estimates all values, total", "/estimates", {"postprocess": "clip"}),
        ("topk k=D simplex, whole retention", "/topk", {"k": str(d), "from": oldest, "postprocess": "simplex"}),
        ("trend whole retention", "/trend", {"value": value, "from": oldest, "step": str(BUCKET_S)}),
        ("trend whole retention norm_sub", "/trend", {"value": value, "from": oldest, "step": str(BUCKET_S),
                                                      "postprocess": "norm_sub"}),
        ("estimates/{value} norm_sub", f"/estimates/{value}", {"from": oldest, "postprocess": "norm_sub"}),
    ]


class Storm:
    """Client threads sending maximal requests back to back, and a /healthz poller."""

    def __init__(self, worker: Worker, d: int, clients: int, seed: int):
        self.worker, self.d, self.clients = worker, d, clients
        self.stop = threading.Event()
        self.statuses: dict[str, Counter] = defaultdict(Counter)
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.health: list[float] = []
        self.health_failures = 0
        self.seed = seed
        self.threads: list[threading.Thread] = []

    def _client(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        while not self.stop.is_set():
            kind, path, query = rng.choice(storm_requests(self.d, time.time(), rng))
            start = time.monotonic()
            try:
                with urllib.request.urlopen(self.worker.url(path, **query), timeout=60) as r:
                    while r.read(1 << 20):  # read and drop: the client must not compete for CPU parsing
                        pass
                    status = r.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            except OSError:
                status = "error"
            self.statuses[kind][status] += 1
            self.latencies[kind].append(time.monotonic() - start)

    def _health(self) -> None:
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                with urllib.request.urlopen(self.worker.url("/healthz"), timeout=5) as r:
                    r.read()
                self.health.append(time.monotonic() - start)
            except OSError:
                self.health_failures += 1
                self.health.append(time.monotonic() - start)
            self.stop.wait(0.05)

    def start(self, with_queries: bool) -> "Storm":
        targets = [self._health] + ([lambda i=i: self._client(i) for i in range(self.clients)] if with_queries else [])
        self.threads = [threading.Thread(target=t, daemon=True) for t in targets]
        for t in self.threads:
            t.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(90)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its live children (the answer process)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                pids += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return total


def measure(worker: Worker, seconds: float, storm: Storm) -> dict:
    storm.start(with_queries=storm.clients > 0)
    try:
        ticks = cpu_times()
        own0, worker0 = os.times(), process_cpu(worker.process.pid)
        c0, t0 = worker.counted(), time.monotonic()
        time.sleep(seconds)  # a benchmark phase of fixed length, not a wait for a condition
        c1, t1 = worker.counted(), time.monotonic()
        own1, worker1 = os.times(), process_cpu(worker.process.pid)
        load = os.getloadavg()[0]
    finally:
        storm.finish()
    health = np.array(storm.health) if storm.health else np.array([np.nan])
    return {"reports_per_s": (c1 - c0) / (t1 - t0), "counted_end": c1, "load": load,
            "worker_cpu": (worker1 - worker0) / (t1 - t0),
            "bench_cpu": (own1.user + own1.system - own0.user - own0.system) / (t1 - t0), "health_max_s": float(np.max(health)),
            "health_p99_s": float(np.percentile(health, 99)), "health_polls": len(storm.health),
            "health_failures": storm.health_failures, "steal": steal_fraction(ticks, cpu_times()),
            "statuses": {k: dict(v) for k, v in storm.statuses.items()},
            "latency_p50_s": {k: float(np.median(v)) for k, v in storm.latencies.items()}}


class PacedProducer:
    """Sends a pool of frames round-robin at ``rate`` reports/s from its own thread and loop."""

    def __init__(self, bootstrap: str, topic: str, pool: list[bytes], rate: float):
        self.bootstrap, self.topic, self.pool, self.rate = bootstrap, topic, pool, rate
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        from infra.kafka import EMBEDDED, make_producer

        producer = make_producer(self.bootstrap, EMBEDDED, acks=1, linger_ms=2)
        await producer.start()
        try:
            start = time.monotonic()
            frame = 0
            while not self.stop.is_set():
                due = int((time.monotonic() - start) * self.rate / FRAME)
                while frame < due:
                    await producer.send(self.topic, self.pool[frame % len(self.pool)], key=b"k%d" % frame)
                    frame += 1
                    self.sent += FRAME
                await asyncio.sleep(0.02)
            await producer.flush()
        finally:
            await producer.stop()

    def __enter__(self) -> "PacedProducer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)


def run(tracked: int, seconds: float, clients: int, rounds: int, partitions: int, load: float,
        capacity_reports: int = CAPACITY_REPORTS, log=print, batch_max_reports: int = BATCH_MAX_REPORTS) -> dict:
    params = OCMSParams.build(2.0, tracked)
    topic = f"storm-{tracked}"
    with tempfile.TemporaryDirectory(prefix="ocms-storm-") as tmp, EmbeddedBroker() as broker:
        worker = Worker(broker.bootstrap_servers, topic, Path(tmp), tracked, partitions, batch_max_reports)
        try:
            worker.wait(lambda: worker.get("/healthz", timeout=5)["status"] == "ok", "a healthy worker")
            now = time.time()
            history = frames(params, HISTORY_BUCKETS, 200, seed=1)
            stamps = [int((now - BUCKET_S * (j + 1)) * 1000) for j in range(HISTORY_BUCKETS)]
            asyncio.run(produce(broker.bootstrap_servers, topic, history, stamps))
            expected = 200 * HISTORY_BUCKETS
            worker.wait(lambda: worker.counted() >= expected, "the history to be counted")
            pool = frames(params, 100, FRAME, seed=2)
            backlog = [pool[i % len(pool)] for i in range(max(1, capacity_reports // FRAME))]

            def drain() -> float:
                """Reports/s counting a backlog produced all at once."""
                nonlocal expected
                start = time.monotonic()
                asyncio.run(produce(broker.bootstrap_servers, topic, backlog, [None] * len(backlog)))
                expected += FRAME * len(backlog)
                worker.wait(lambda: worker.counted() >= expected, "the backlog to be counted", timeout=900)
                return FRAME * len(backlog) / (time.monotonic() - start)

            capacities, storm_capacities, storm_health, quiet_health = [], [], [], []
            for r in range(rounds):  # alternate, so background load changes hit both alike
                quiet_poll = Storm(worker, tracked, 0, seed=0).start(with_queries=False)
                try:
                    capacities.append(drain())  # no queries
                finally:
                    quiet_poll.finish()
                quiet_health.append(max(quiet_poll.health or [float("nan")]))
                storm = Storm(worker, tracked, clients, seed=100 + r).start(with_queries=True)
                try:
                    storm_capacities.append(drain())  # the same backlog while the storm runs
                finally:
                    storm.finish()
                storm_health.append(max(storm.health or [float("nan")]))
                log(f"capacity round {r + 1}: quiet {capacities[-1]:,.0f} reports/s, storm {storm_capacities[-1]:,.0f} "
                    f"reports/s ({storm_capacities[-1] / capacities[-1]:.0%}); /healthz max {quiet_health[-1] * 1000:.0f} ms "
                    f"quiet, {storm_health[-1] * 1000:.0f} ms under the storm; load average {os.getloadavg()[0]:.1f}", flush=True)
            capacity = float(np.mean(capacities))
            rate = load * capacity
            log(f"streaming at {rate:,.0f} reports/s ({load:.0%} of the quiet capacity)", flush=True)
            results = []
            with PacedProducer(broker.bootstrap_servers, topic, pool, rate) as producer:
                time.sleep(min(3.0, seconds))  # let the stream settle (a benchmark phase, not a wait for a condition)
                for r in range(rounds):
                    quiet = measure(worker, seconds, Storm(worker, tracked, 0, seed=r))
                    storm = measure(worker, seconds, Storm(worker, tracked, clients, seed=r))
                    results.append((quiet, storm))
                    log(f"stream round {r + 1}: quiet {quiet['reports_per_s']:,.0f} reports/s, storm "
                        f"{storm['reports_per_s']:,.0f} reports/s "
                        f"({storm['reports_per_s'] / max(quiet['reports_per_s'], 1e-9):.0%}); /healthz max "
                        f"{quiet['health_max_s'] * 1000:.0f} ms quiet, {storm['health_max_s'] * 1000:.0f} ms storm; "
                        f"worker CPU {quiet['worker_cpu']:.2f} / {storm['worker_cpu']:.2f} cores, bench CPU "
                        f"{quiet['bench_cpu']:.2f} / {storm['bench_cpu']:.2f}, load average {quiet['load']:.1f} / "
                        f"{storm['load']:.1f}", flush=True)
            return {"tracked": tracked, "batch_max_reports": batch_max_reports, "clients": clients,
                    "seconds": seconds, "rounds": results,
                    "capacity": capacity, "rate": rate, "storm_capacity": float(np.mean(storm_capacities)),
                    "capacities": list(zip(capacities, storm_capacities)),
                    "storm_capacity_health_max_s": max(storm_health), "capacity_health_max_s": max(quiet_health), "sent": producer.sent}
        finally:
            worker.stop()


def report(result: dict, log=print) -> None:
    quiet = np.mean([q["reports_per_s"] for q, _ in result["rounds"]])
    storm = np.mean([s["reports_per_s"] for _, s in result["rounds"]])
    health_max = max(s["health_max_s"] for _, s in result["rounds"])
    health_p99 = max(s["health_p99_s"] for _, s in result["rounds"])
    quiet_health = max(q["health_max_s"] for q, _ in result["rounds"])
    failures = sum(s["health_failures"] for _, s in result["rounds"])
    statuses: dict[str, Counter] = defaultdict(Counter)
    latencies: dict[str, list[float]] = defaultdict(list)
    for _, s in result["rounds"]:
        for kind, counts in s["statuses"].items():
            statuses[kind].update(counts)
        for kind, p50 in s["latency_p50_s"].items():
            latencies[kind].append(p50)
    steals = [x["steal"] for pair in result["rounds"] for x in pair if x["steal"] is not None]
    log(f"machine: {platform.machine()}, {os.cpu_count()} CPUs ({cpu_model()}); worker: D = {result['tracked']:,} "
        f"tracked (whole dictionary), {BUCKET_S} s buckets kept {RETENTION_S} s, frames of {FRAME:,}, batches of "
        f"{result['batch_max_reports']:,}; "
        f"{result['clients']} storm clients; {len(result['rounds'])} x ({result['seconds']:g} s quiet + "
        f"{result['seconds']:g} s storm); CPU steal {f'{max(steals):.0%}' if steals else 'n/a'} at most")
    log(f"capacity quiet       {result['capacity']:12,.0f} reports/s (mean of {len(result['capacities'])} backlogs)")
    log(f"capacity under storm {result['storm_capacity']:12,.0f} reports/s = "
        f"{result['storm_capacity'] / result['capacity']:.0%} of quiet (goal >= 80%); /healthz max "
        f"{result['storm_capacity_health_max_s'] * 1000:.0f} ms meanwhile (quiet backlog: "
        f"{result['capacity_health_max_s'] * 1000:.0f} ms)")
    log(f"stream at {result['rate']:,.0f} reports/s ({result['rate'] / result['capacity']:.0%} of capacity):")
    log(f"intake quiet         {quiet:12,.0f} reports/s")
    log(f"intake under storm   {storm:12,.0f} reports/s = {storm / quiet:.0%} of quiet")
    log(f"/healthz under storm max {health_max * 1000:.0f} ms, p99 {health_p99 * 1000:.0f} ms, {failures} failed "
        f"(goal: max < 1 s); quiet max {quiet_health * 1000:.0f} ms")
    for kind in sorted(statuses):
        counts = ", ".join(f"{status}: {n}" for status, n in sorted(statuses[kind].items(), key=str))
        log(f"  {kind:<40} {counts:<22} median {np.median(latencies[kind]):6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracked", type=int, default=100_000, help="D, tracked values (the whole dictionary)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each quiet and storm phase")
    parser.add_argument("--clients", type=int, default=6, help="storm client threads")
    parser.add_argument("--rounds", type=int, default=2, help="quiet/storm alternations (capacity and stream)")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--load", type=float, default=0.7, help="stream rate as a share of the measured capacity")
    parser.add_argument("--batch-max-reports", type=int, default=BATCH_MAX_REPORTS,
                        help="the worker's micro-batch bound (default %(default)s, the worker's default)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run: D = 1,000, 3 s phases)")
    args = parser.parse_args()
    if args.quick:
        args.tracked, args.seconds, args.rounds = 1000, 3.0, 1
    if args.tracked < 2 or args.seconds <= 0 or args.clients < 1 or args.rounds < 1:
        parser.error("--tracked >= 2, --seconds > 0, --clients >= 1 and --rounds >= 1")
    report(run(args.tracked, args.seconds, args.clients, args.rounds, args.partitions, args.load,
               batch_max_reports=args.batch_max_reports))


if __name__ == "__main__":
    main()
