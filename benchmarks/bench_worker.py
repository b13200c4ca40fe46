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

On the mock the producer is paced (:class:`Pacer`): the mock keeps only each partition's last
5 MiB or 100,000 batches and drops older ones whether read or not, so a producer far ahead of
the worker would lose data before the worker read it. Every run checks that the worker counts
exactly what was produced (:func:`wait_counted`): a count that stops short, or passes the total,
ends the benchmark with an error instead of a figure.

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
from typing import Callable, Sequence

import numpy as np

from benchmarks.experiments.common import cpu_model, cpu_times, steal_fraction
from cms_core import OCMSParams, wire
from cms_core.errors import OCMSError
from cms_core.privatize import simulate_reports
from infra.broker import EmbeddedBroker
from infra.kafka import EMBEDDED, make_producer
from infra.mock_cluster import BROKER_KINDS, MockCluster, start_broker
from infra.process import free_port
from ocms.process import WorkerChild, worker_topics

ROOT = Path(__file__).resolve().parents[1]

PARAMS = OCMSParams.build(2.0, 10_000)
#: (frame size, reports) of the throughput runs and (frame size, reports/s, seconds) of the latency runs.
THROUGHPUT_RUNS = ((1000, 2_000_000), (100, 1_000_000), (1, 100_000))
LATENCY_RUNS = ((1000, 100_000, 20), (100, 20_000, 20), (1, 2_000, 20))
#: Messages are keyed k0..k63 in turn (the producer's partitioner spreads them over the partitions).
KEYS = 64
#: What librdkafka's mock keeps of each partition (rdkafka_mock.c: older batches are dropped, read or not).
MOCK_PARTITION_BYTES = 5 << 20
MOCK_PARTITION_BATCHES = 100_000
#: A run whose count has not moved for this long while short of the total has lost reports.
STALL_SECONDS = 60.0


def messages(n: int, frame: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    values = ((rng.zipf(1.1, n) - 1) % 10_000).astype(np.uint64)
    batch = simulate_reports(PARAMS, values, rng)
    if frame == 1:
        return wire.encode_reports(PARAMS, batch)
    return [wire.encode_frame(PARAMS, batch.slice(i, min(i + frame, n))) for i in range(0, n, frame)]


class CountMismatch(OCMSError, RuntimeError):
    """The worker did not count exactly the reports produced (some were lost, or counted twice)."""


class Worker:
    """One ``ocms worker`` (ocms.process.WorkerChild: own session, dies with the benchmark).

    ``metric`` gives the flags of what it counts (default: the single metric, eps 2, d = 10,000,
    ``tracked`` values tracked); on the mock (``cluster``) its topics are created first (the mock's
    clients cannot) and it runs with ``--broker mock``."""

    def __init__(self, bootstrap: str, topic: str, log_dir: Path, *extra: str, tracked: int = 1000,
                 cluster: MockCluster | None = None, metric: Sequence[str] | None = None):
        self.port = free_port()
        self.topic = topic
        profile = EMBEDDED if cluster is None else cluster.profile
        if not profile.clients_create_topics:
            cluster.create_topics(worker_topics(topic, topic))
        if metric is None:
            metric = ("-e", "2", "-d", "10000", "--tracked-range", f"0:{tracked}")
        self.child = WorkerChild(topic, *metric, *extra, bootstrap=bootstrap, web_port=self.port,
                                 broker=profile.name, log=log_dir / f"{topic}.log").start()
        self.process = self.child.process

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return json.loads(r.read())

    def counted(self) -> int:
        """Reports of the (single) metric the API shows counted."""
        return self.get("/params")["parameter_sets"][0]["reports"]

    def view_reports(self) -> int:
        """Reports the worker's view counts, every metric together (/healthz: cheap whatever the number of
        metrics, so a poll every 20 ms costs the worker little; the /metrics listing cost it a third of its
        CPU at 300 metrics, py-spy)."""
        return self.get("/healthz")["view_reports"]

    def taken(self) -> int:
        """Reports the worker has read from the topic, at least: counted or in its pending batch (the
        batch being checkpointed is in neither, so this lags what it read by at most that batch)."""
        health = self.get("/healthz")
        return health["view_reports"] + health["pending_reports"]

    def wait_healthy(self, timeout: float = 60) -> None:
        self.child.wait_healthy(timeout)

    def rss_mib(self) -> float:
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the worker process has used so far, every thread together."""
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.child.stop()


def message_key(i: int) -> bytes:
    return b"k%d" % (i % KEYS)


class Pacer:
    """Keeps a producer within what librdkafka's mock keeps of each partition ahead of the worker.

    The mock keeps each partition's last 5 MiB or 100,000 batches and drops older ones, read or
    not: a producer that ran further ahead of the worker than that would lose reports before the
    worker read them. Before each message the producer waits until, on every partition, the
    messages sent beyond what the worker has taken (``taken()``: reports counted or pending) hold
    at most ``limit_bytes`` and ``limit_messages`` (each message at most one batch). Which
    messages were taken is inferred from the count as if they were read in the order sent (the
    partitions are read side by side); the count check at the end (:func:`wait_counted`) catches
    any loss this misjudges. ``waited`` is the time the producer spent waiting."""

    def __init__(self, taken: Callable[[], int], payloads: Sequence[bytes], reports: Sequence[int], partitions: int = 4,
                 limit_bytes: int = MOCK_PARTITION_BYTES * 4 // 5, limit_messages: int = MOCK_PARTITION_BATCHES // 2):
        from aiokafka.partitioner import DefaultPartitioner  # what the producer uses for keyed messages

        partitioner, every = DefaultPartitioner(), list(range(partitions))
        partition_of_key = [partitioner(message_key(k), every, every) for k in range(KEYS)]
        sizes = np.zeros((len(payloads) + 1, partitions), dtype=np.int64)
        for i, payload in enumerate(payloads):
            sizes[i + 1, partition_of_key[i % KEYS]] = len(payload)
        self.bytes_before = np.cumsum(sizes, axis=0)  # [i, p]: bytes of messages 0..i-1 on partition p
        self.messages_before = np.cumsum(sizes > 0, axis=0)
        self.reports_through = np.cumsum(reports)  # [i]: reports in messages 0..i
        self.taken, self.limit_bytes, self.limit_messages = taken, limit_bytes, limit_messages
        self.waited = 0.0
        self.sendable = self.room(0)

    def room(self, taken: int) -> int:
        """How many messages may have been sent once the worker has taken ``taken`` reports: on no
        partition do the messages beyond those wholly taken pass the limits (at least one more)."""
        read = int(np.searchsorted(self.reports_through, taken, side="right"))  # messages wholly taken
        sendable = len(self.reports_through)
        for p in range(self.bytes_before.shape[1]):
            for before, limit in ((self.bytes_before[:, p], self.limit_bytes),
                                  (self.messages_before[:, p], self.limit_messages)):
                sendable = min(sendable, int(np.searchsorted(before, before[read] + limit, side="right")) - 1)
        return max(sendable, read + 1)

    async def wait_for_room(self, i: int) -> None:
        """Return once message ``i`` may be sent (the check per message is one comparison)."""
        if i < self.sendable:
            return
        start = time.monotonic()
        loop = asyncio.get_running_loop()
        while True:
            self.sendable = self.room(await loop.run_in_executor(None, self.taken))
            if i < self.sendable:
                break
            await asyncio.sleep(0.01)
        self.waited += time.monotonic() - start


async def produce(bootstrap: str, topic: str, payloads: list[bytes], rate: float | None, sent_at: list[float],
                  profile=EMBEDDED, pacer: Pacer | None = None) -> None:
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
            if pacer is not None:
                await pacer.wait_for_room(i)
            sent_at.append(time.monotonic())
            futures.append(await producer.send(topic, payload, key=message_key(i)))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def wait_counted(counted: Callable[[], int], total: int, what: str, stall_seconds: float = STALL_SECONDS) -> None:
    """Wait until ``counted()`` is ``total``; CountMismatch if it passes it, or stays short of it
    without moving for ``stall_seconds`` (reports lost: on the mock, dropped before they were read)."""
    last, moved = -1, time.monotonic()
    while True:
        count = counted()
        if count == total:
            return
        if count > total:
            raise CountMismatch(f"{what}: the worker counted {count:,} reports, {count - total:,} more than the "
                                f"{total:,} produced")
        now = time.monotonic()
        if count != last:
            last, moved = count, now
        elif now - moved > stall_seconds:
            raise CountMismatch(f"{what}: the worker counted {count:,} of the {total:,} reports produced and has not "
                                f"moved for {stall_seconds:.0f} s: {total - count:,} reports were lost (on the mock: "
                                "dropped from a partition before the worker read them)")
        time.sleep(0.02)


def paced_run(worker: Worker, bootstrap: str, payloads: list[bytes], reports: Sequence[int],
              counted: Callable[[], int], what: str, cluster: MockCluster | None = None) -> dict:
    """Produce ``payloads`` to a healthy ``worker`` as fast as the producer can (paced on the mock), and
    time it until ``counted()`` shows every report; the figures of one throughput run."""
    total = int(np.sum(reports))
    pacer = None if cluster is None else Pacer(worker.taken, payloads, reports)
    ticks = cpu_times()
    worker_cpu = worker.cpu_seconds()
    start = time.monotonic()
    asyncio.run(produce(bootstrap, worker.topic, payloads, None, [], EMBEDDED if cluster is None else cluster.profile,
                        pacer))
    produced = time.monotonic() - start
    wait_counted(counted, total, what)
    seconds = time.monotonic() - start
    worker_cpu = worker.cpu_seconds() - worker_cpu
    return {"reports": total, "seconds": seconds, "produce_seconds": produced, "reports_per_s": total / seconds,
            "worker_cpu_seconds": worker_cpu,
            "paced_seconds": None if pacer is None else pacer.waited, "rss_mib": worker.rss_mib(),
            "steal": steal_fraction(ticks, cpu_times())}


def throughput(bootstrap: str, log_dir: Path, n: int, frame: int, tracked: int = 1000,
               cluster: MockCluster | None = None) -> dict:
    topic = f"bench-tp-{frame}-{tracked}"
    worker = Worker(bootstrap, topic, log_dir, tracked=tracked, cluster=cluster)
    try:
        worker.wait_healthy()
        payloads = messages(n, frame, seed=frame)
        reports = report_counts(n, frame)
        return {"frame": frame, "tracked": tracked, **paced_run(worker, bootstrap, payloads, reports, worker.counted,
                                                                f"frames of {frame}", cluster)}
    finally:
        worker.stop()


def report_counts(n: int, frame: int) -> list[int]:
    """Reports in each message of ``messages(n, frame, ...)``."""
    return [min(frame, n - i) for i in range(0, n, frame)]


def latency(bootstrap: str, log_dir: Path, n: int, frame: int, rate_reports: float, tracked: int = 1000,
            cluster: MockCluster | None = None) -> dict:
    topic = f"bench-lat-{frame}-{tracked}"
    worker = Worker(bootstrap, topic, log_dir, tracked=tracked, cluster=cluster)
    try:
        worker.wait_healthy()
        payloads = messages(n, frame, seed=100 + frame)
        per_message = report_counts(n, frame)
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
                            EMBEDDED if cluster is None else cluster.profile,
                            None if cluster is None else Pacer(worker.taken, payloads, per_message)))
        done = True
        poller.join(60)
        wait_counted(worker.counted, n, f"frames of {frame} at {rate_reports:,} reports/s")
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
            [sys.executable, "-m", "ocms", "simulate", "-e", "2", "--dataset", "zipf:s=1.1,d=10000",
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
    print(f"  frames of {r['frame']:>4}: {run_text(r)}", flush=True)


def run_text(r: dict) -> str:
    """One throughput run's figures (paced_run's dict): rate, time, producing time, pacing, the worker's CPU
    time (every thread: on a busy machine a steadier figure of its cost than the rate), RSS, steal."""
    paced = "" if r.get("paced_seconds") is None else f", {r['paced_seconds']:.2f} s of it paced to the worker"
    cpu = r.get("worker_cpu_seconds")
    cpu = "" if cpu is None else f"worker CPU {cpu:.2f} s = {cpu / r['reports'] * 1e6:.2f} us/report; "
    return (f"{r['reports_per_s']:>12,.0f} reports/s  ({r['reports']:,} reports in {r['seconds']:.2f} s; producing "
            f"took {r['produce_seconds']:.2f} s{paced}; {cpu}worker RSS {r['rss_mib']:.0f} MiB; CPU steal {steal_text(r)})")


def print_latency(r: dict) -> None:
    print(f"  frames of {r['frame']:>4} at {r['rate']:>7,} reports/s: p50 {r['p50_s'] * 1000:6.0f} ms  "
          f"p99 {r['p99_s'] * 1000:6.0f} ms  max {r['max_s'] * 1000:6.0f} ms  (CPU steal {steal_text(r)})", flush=True)


def steal_text(r: dict) -> str:
    return "n/a" if r.get("steal") is None else f"{r['steal']:.0%}"


def add_broker_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker", choices=BROKER_KINDS, default="embedded",
                        help="embedded: Tansu (the worker with --broker embedded); mock: librdkafka's mock cluster, "
                             "3 brokers, topics created beforehand, the worker on the kafka path with --broker mock "
                             "and the producer paced to what the mock keeps of each partition")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--tracked", type=int, default=1000, help="tracked values D (a prefix of the dictionary)")
    parser.add_argument("--memory-minutes", type=float, help="only the memory run, this long")
    add_broker_option(parser)
    args = parser.parse_args()
    try:
        run(parser, args)
    except CountMismatch as exc:
        sys.exit(f"bench_worker: {exc}")


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not 1 <= args.tracked <= 10_000:
        parser.error(f"--tracked must be in 1..10000 (the dictionary size), got {args.tracked}")
    if args.memory_minutes and args.broker != "embedded":
        parser.error("--memory-minutes runs on the embedded broker only (a 10-minute fleet outgrows what the mock "
                     "keeps of a partition)")
    scale = 0.1 if args.quick else 1.0
    if args.memory_minutes:
        with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
            memory_run(broker.bootstrap_servers, Path(tmp), args.memory_minutes, 5000, args.tracked)
        return
    print(machine_line(args.tracked, args.broker))
    with tempfile.TemporaryDirectory() as tmp, start_broker(args.broker) as broker:
        log_dir = Path(tmp)
        cluster = broker if isinstance(broker, MockCluster) else None
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
