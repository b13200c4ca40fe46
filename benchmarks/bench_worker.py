"""Worker throughput and produce-to-visible latency on the embedded broker (or librdkafka's mock).

    .venv/bin/python -m benchmarks.bench_worker [--quick] [--tracked D] [--memory-minutes M] [--broker mock]

One embedded broker (Tansu, memory; ``--broker mock``: librdkafka's mock cluster of 3 brokers,
the worker on the production ``kafka`` path with the ``mock`` profile) and one `ocms worker` process (4 partitions,
D tracked values, default 1,000, of a d = 10,000 dictionary, eps = 2). Each
scenario uses its own topic and consumer group:

* throughput: all messages are produced as fast as the producer can, and the
  clock stops when the worker's API shows every report counted (so the figure is
  what a worker sustains end to end, produce included);
* latency: messages are produced at a fixed rate; a poller reads the counted
  total from the API every 20 ms and each message's produce-to-visible latency
  is the first poll at which the total covers it.

This is a benchmark, not a test: it prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from agents.process import WorkerChild
from benchmarks.experiments.common import cpu_model, cpu_times, steal_fraction
from cms_core import OCMSParams, wire
from cms_core.privatize import simulate_reports
from producer.broker import EmbeddedBroker, free_port
from producer.kafka import EMBEDDED, make_producer
from producer.mock_cluster import MockCluster

ROOT = Path(__file__).resolve().parents[1]

PARAMS = OCMSParams.build(2.0, 10_000)
#: (frame size, reports) of the throughput runs and (frame size, reports/s, seconds) of the latency runs.
THROUGHPUT_RUNS = ((1000, 2_000_000), (100, 1_000_000), (1, 100_000))
LATENCY_RUNS = ((1000, 100_000, 20), (100, 20_000, 20), (1, 2_000, 20))


def messages(n: int, frame: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    values = ((rng.zipf(1.1, n) - 1) % 10_000).astype(np.uint64)
    batch = simulate_reports(PARAMS, values, rng)
    if frame == 1:
        return wire.encode_reports(PARAMS, batch)
    return [wire.encode_frame(PARAMS, batch.slice(i, min(i + frame, n))) for i in range(0, n, frame)]


class Worker:
    """One ``ocms worker`` (agents.process.WorkerChild: own session, dies with the benchmark)."""

    def __init__(self, bootstrap: str, topic: str, log_dir: Path, *extra: str, tracked: int = 1000,
                 cluster: MockCluster | None = None):
        self.port = free_port()
        self.topic = topic
        profile = EMBEDDED if cluster is None else cluster.profile
        if cluster is not None:  # the mock's clients cannot create topics
            cluster.create_topics({topic: 4, topic + "-dlq": 4, f"{topic}-ocms-counts-changelog": 4})
        self.child = WorkerChild(topic, "-e", "2", "-d", "10000", "--tracked-range", f"0:{tracked}", *extra,
                                 bootstrap=bootstrap, web_port=self.port, broker=profile.name,
                                 log=log_dir / f"{topic}.log").start()
        self.process = self.child.process

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return json.loads(r.read())

    def counted(self) -> int:
        return self.get("/params")["parameter_sets"][0]["reports"]

    def wait_healthy(self, timeout: float = 60) -> None:
        self.child.wait_healthy(timeout)

    def rss_mib(self) -> float:
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.child.stop()


async def produce(bootstrap: str, topic: str, payloads: list[bytes], rate: float | None, sent_at: list[float],
                  profile=EMBEDDED) -> None:
    producer = make_producer(bootstrap, profile, acks=1, idempotent=False, linger_ms=2, max_batch_size=1 << 20)
    await producer.start()
    try:
        start = time.monotonic()
        futures = []
        for i, payload in enumerate(payloads):
            if rate:
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            sent_at.append(time.monotonic())
            futures.append(await producer.send(topic, payload, key=b"k%d" % (i % 64)))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def throughput(bootstrap: str, log_dir: Path, n: int, frame: int, tracked: int = 1000,
               cluster: MockCluster | None = None) -> dict:
    topic = f"bench-tp-{frame}-{tracked}"
    worker = Worker(bootstrap, topic, log_dir, tracked=tracked, cluster=cluster)
    try:
        worker.wait_healthy()
        payloads = messages(n, frame, seed=frame)
        ticks = cpu_times()
        start = time.monotonic()
        asyncio.run(produce(bootstrap, topic, payloads, None, [], EMBEDDED if cluster is None else cluster.profile))
        produced = time.monotonic() - start
        while worker.counted() < n:
            time.sleep(0.02)
        seconds = time.monotonic() - start
        return {"frame": frame, "tracked": tracked, "reports": n, "seconds": seconds, "produce_seconds": produced,
                "reports_per_s": n / seconds, "rss_mib": worker.rss_mib(), "steal": steal_fraction(ticks, cpu_times())}
    finally:
        worker.stop()


def latency(bootstrap: str, log_dir: Path, n: int, frame: int, rate_reports: float, tracked: int = 1000,
            cluster: MockCluster | None = None) -> dict:
    topic = f"bench-lat-{frame}-{tracked}"
    worker = Worker(bootstrap, topic, log_dir, tracked=tracked, cluster=cluster)
    try:
        worker.wait_healthy()
        payloads = messages(n, frame, seed=100 + frame)
        per_message = [len(payloads) and min(frame, n - i * frame) for i in range(len(payloads))]
        cumulative = np.cumsum(per_message)
        sent_at: list[float] = []
        visible_at = np.full(len(payloads), np.nan)
        done = False

        def poll():
            next_index = 0
            while not done or next_index < len(payloads):
                counted = worker.counted()
                now = time.monotonic()
                while next_index < len(payloads) and cumulative[next_index] <= counted:
                    visible_at[next_index] = now
                    next_index += 1
                if next_index >= len(payloads):
                    return
                time.sleep(0.02)

        import threading

        poller = threading.Thread(target=poll, daemon=True)
        ticks = cpu_times()
        poller.start()
        asyncio.run(produce(bootstrap, topic, payloads, rate_reports / frame, sent_at,
                            EMBEDDED if cluster is None else cluster.profile))
        done = True
        poller.join(60)
        # Messages of one partition are counted in order, but the counted total mixes partitions:
        # a message is "visible" once the total covers it, a slight overestimate at worst.
        lat = visible_at - np.asarray(sent_at)
        return {"frame": frame, "tracked": tracked, "rate": rate_reports, "reports": n, "p50_s": float(np.nanpercentile(lat, 50)),
                "p99_s": float(np.nanpercentile(lat, 99)), "max_s": float(np.nanmax(lat)),
                "steal": steal_fraction(ticks, cpu_times())}
    finally:
        worker.stop()


def memory_run(bootstrap: str, log_dir: Path, minutes: float, rate: float, tracked: int = 1000,
               samples: int = 20, log=print) -> dict:
    """Worker RSS while a fleet sends frames of 100 at ``rate`` reports/s for ``minutes``."""
    topic = f"bench-memory-{tracked}"
    worker = Worker(bootstrap, topic, log_dir, tracked=tracked)
    series = []
    try:
        worker.wait_healthy()
        series.append({"t_s": 0.0, "rss_mib": worker.rss_mib(), "counted": worker.counted()})
        fleet = subprocess.Popen(
            [sys.executable, "-m", "agents.cli", "simulate", "-e", "2", "--dataset", "zipf:s=1.1,d=10000",
             "--duration", str(minutes * 60), "--rate", str(rate), "--frame-size", "100",
             "--bootstrap-servers", bootstrap, "--topic", topic, "--no-progress"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        start = time.monotonic()
        log(f"worker memory, {rate:,.0f} reports/s in frames of 100 for {minutes:g} min, {tracked:,} tracked:")
        while fleet.poll() is None:
            time.sleep(minutes * 60 / samples)
            sample = {"t_s": time.monotonic() - start, "rss_mib": worker.rss_mib(), "counted": worker.counted()}
            series.append(sample)
            log(f"  t={sample['t_s']:5.0f} s  RSS {sample['rss_mib']:6.1f} MiB  counted {sample['counted']:,}")
        return {"minutes": minutes, "rate": rate, "tracked": tracked, "series": series}
    finally:
        worker.stop()


def machine_line(tracked: int, broker: str = "embedded") -> str:
    return (f"machine: {platform.machine()}, {os.cpu_count()} CPUs ({cpu_model()}); worker: 4 partitions, "
            f"{tracked:,} tracked of d=10000, eps=2, m={PARAMS.hash_range}, {PARAMS.describe()['field']}; "
            f"broker: {broker}")


def print_throughput(r: dict) -> None:
    print(f"  frames of {r['frame']:>4}: {r['reports_per_s']:>12,.0f} reports/s  ({r['reports']:,} reports in "
          f"{r['seconds']:.2f} s; producing took {r['produce_seconds']:.2f} s; worker RSS {r['rss_mib']:.0f} MiB; "
          f"CPU steal {steal_text(r)})", flush=True)


def print_latency(r: dict) -> None:
    print(f"  frames of {r['frame']:>4} at {r['rate']:>7,} reports/s: p50 {r['p50_s'] * 1000:6.0f} ms  "
          f"p99 {r['p99_s'] * 1000:6.0f} ms  max {r['max_s'] * 1000:6.0f} ms  (CPU steal {steal_text(r)})", flush=True)


def steal_text(r: dict) -> str:
    return "n/a" if r.get("steal") is None else f"{r['steal']:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--tracked", type=int, default=1000, help="tracked values D (a prefix of the dictionary)")
    parser.add_argument("--memory-minutes", type=float, help="only the memory run, this long")
    parser.add_argument("--broker", choices=("embedded", "mock"), default="embedded",
                        help="embedded: Tansu (--broker embedded); mock: librdkafka's mock cluster, 3 brokers, "
                             "the worker with the kafka path (mock profile)")
    args = parser.parse_args()
    if not 1 <= args.tracked <= 10_000:
        parser.error(f"--tracked must be in 1..10000 (the dictionary size), got {args.tracked}")
    scale = 0.1 if args.quick else 1.0
    if args.memory_minutes:
        with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
            memory_run(broker.bootstrap_servers, Path(tmp), args.memory_minutes, 5000, args.tracked)
        return
    print(machine_line(args.tracked, args.broker))
    mock = args.broker == "mock"
    with tempfile.TemporaryDirectory() as tmp, (MockCluster(3) if mock else EmbeddedBroker()) as broker:
        log_dir = Path(tmp)
        cluster = broker if mock else None
        print("throughput (produce as fast as possible, clock stops when the API shows all counted):")
        for frame, n in THROUGHPUT_RUNS:
            print_throughput(throughput(broker.bootstrap_servers, log_dir, int(n * scale), frame, args.tracked,
                                        cluster))
        print("produce-to-visible latency at a steady rate (API polled every 20 ms):")
        for frame, rate, seconds in LATENCY_RUNS:
            print_latency(latency(broker.bootstrap_servers, log_dir, int(rate * seconds * scale), frame, rate,
                                  args.tracked, cluster))


if __name__ == "__main__":
    main()
