"""The intake side path against Faust's agent path, for frames of 1, 100 and 1,000 reports.

    .venv/bin/python -m benchmarks.bench_agent_path [--quick] [--paths side,agent-events,agent-take]
                                                    [--frames 1000,100,1] [--no-latency]

Issue 17: the worker takes source messages from Faust's consumer (``agents.intake``,
"side") instead of through the agent's stream; is that still needed once reports come
in frames? Each path runs the same scenarios as ``benchmarks/bench_worker.py`` (one
embedded broker, one worker, 4 partitions, 1,000 tracked of d = 10,000, eps = 2):

* throughput: produce as fast as possible, the clock stops when the API shows every
  report counted;
* latency: produce at the pipeline rates (frames of 1,000: 100,000 reports/s, of 100:
  20,000/s, single reports: 2,000/s) and read produce-to-visible p50/p99.

Paths (``AgentPathWorker``, this module's subclass of the product's worker, run in the worker process):

* ``side``: the product's; the consumer hands source messages to the worker;
* ``agent-events``: the agent's ``stream.noack().events()``, one event at a time;
* ``agent-take``: the agent's ``stream.noack().take_events(1000, within=0.2 s)``.

Each runs the worker's same validation, micro-batch and checkpoint. Runs alternate
between paths frame by frame, so a busy machine weighs on all of them alike. This is
a benchmark: it prints numbers and never fails on speed. Compare with the targets of
docs/results/pipeline.md (>= 200,000 reports/s with frames, >= 10,000 with single
reports, p99 <= 2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


from agents.app import OCMSWorker
from benchmarks.bench_worker import Worker, machine_line, messages, produce
from benchmarks.experiments.common import cpu_times, steal_fraction
from infra.broker import EmbeddedBroker
from infra.process import free_port
from ocms.process import WorkerChild

PATHS = ("side", "agent-events", "agent-take")
#: frame size -> (reports for the throughput run, reports/s for the latency run)
SCENARIOS = {1000: (2_000_000, 100_000), 100: (1_000_000, 20_000), 1: (100_000, 2_000)}
LATENCY_SECONDS = 20
#: Messages per ``take_events`` list on the "agent-take" path.
AGENT_TAKE_MESSAGES = 1000
#: The worker process: ``python -c BOOT PATH worker ...`` runs the CLI with AgentPathWorker on PATH.
BOOT = "import sys; from benchmarks.bench_agent_path import run_worker_on; sys.exit(run_worker_on(sys.argv.pop(1)))"


class AgentPathWorker(OCMSWorker):
    """The product's worker with source messages taken from the agent's stream (``path`` "agent-events":
    one event at a time; "agent-take": ``take_events`` lists) instead of the consumer's side path."""

    path = "agent-events"

    @property
    def side_intake(self) -> bool:
        return self.path == "side"

    async def consume(self, stream) -> None:
        if self.path != "agent-take":
            return await super().consume(stream)
        async for events in stream.noack().take_events(AGENT_TAKE_MESSAGES, within=self.settings.batch_max_seconds):
            for event in events:
                if self.receive(event.message):
                    await self.flush()
            await self.flush()


def run_worker_on(path: str) -> int:
    """``ocms worker`` (argv) with the worker taking source messages on ``path``."""
    from agents import app
    from ocms import cli

    AgentPathWorker.path = path
    app.OCMSWorker = AgentPathWorker  # cmd_worker imports the class when it runs
    return cli.main()


class PathChild(WorkerChild):
    """``ocms worker`` as a child process, on one intake path (``run_worker_on``)."""

    def __init__(self, path: str, topic: str, *flags: str, **kwargs):
        super().__init__(topic, *flags, **kwargs)
        self.path = path

    @property
    def command(self) -> list[str]:
        worker_and_flags = super().command[3:]  # after [python, -m, ocms]
        return [sys.executable, "-c", BOOT, self.path, *worker_and_flags]


class PathWorker(Worker):
    """bench_worker's worker, started on one intake path."""

    def __init__(self, bootstrap: str, topic: str, log_dir: Path, path: str, tracked: int = 1000):
        self.port = free_port()
        self.topic = topic
        self.child = PathChild(path, topic, "-e", "2", "-d", "10000", "--tracked-range", f"0:{tracked}",
                               bootstrap=bootstrap, web_port=self.port, log=log_dir / f"{topic}.log").start()
        self.process = self.child.process


def throughput(bootstrap: str, log_dir: Path, path: str, frame: int, n: int) -> dict:
    worker = PathWorker(bootstrap, f"agentpath-tp-{path}-{frame}", log_dir, path)
    try:
        worker.wait_healthy()
        payloads = messages(n, frame, seed=frame)
        ticks = cpu_times()
        start = time.monotonic()
        asyncio.run(produce(bootstrap, worker.topic, payloads, None, []))
        deadline = start + 600
        while worker.counted() < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path}, frames of {frame}: not all counted within 600 s")
            time.sleep(0.02)
        seconds = time.monotonic() - start
        return {"path": path, "frame": frame, "reports": n, "seconds": seconds, "reports_per_s": n / seconds,
                "steal": steal_fraction(ticks, cpu_times())}
    finally:
        worker.stop()


def latency(bootstrap: str, log_dir: Path, path: str, frame: int, rate: float, seconds: float) -> dict:
    worker = PathWorker(bootstrap, f"agentpath-lat-{path}-{frame}", log_dir, path)
    try:
        worker.wait_healthy()
        n = int(rate * seconds)
        payloads = messages(n, frame, seed=100 + frame)
        cumulative = np.cumsum([min(frame, n - i * frame) for i in range(len(payloads))])
        sent_at: list[float] = []
        visible_at = np.full(len(payloads), np.nan)

        def poll():
            next_index, deadline = 0, time.monotonic() + seconds + 120
            while next_index < len(payloads) and time.monotonic() < deadline:
                counted, now = worker.counted(), time.monotonic()
                while next_index < len(payloads) and cumulative[next_index] <= counted:
                    visible_at[next_index] = now
                    next_index += 1
                time.sleep(0.02)

        poller = threading.Thread(target=poll, daemon=True)
        ticks = cpu_times()
        poller.start()
        asyncio.run(produce(bootstrap, worker.topic, payloads, rate / frame, sent_at))
        poller.join()
        lat = visible_at - np.asarray(sent_at)
        return {"path": path, "frame": frame, "rate": rate, "p50_s": float(np.nanpercentile(lat, 50)),
                "p99_s": float(np.nanpercentile(lat, 99)), "unseen": int(np.isnan(lat).sum()),
                "steal": steal_fraction(ticks, cpu_times())}
    finally:
        worker.stop()


def steal_text(r: dict) -> str:
    return "n/a" if r.get("steal") is None else f"{r['steal']:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the reports (a smoke run)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("--frames", default="1000,100,1", help="comma-separated frame sizes, of 1000, 100, 1")
    parser.add_argument("--no-latency", action="store_true", help="throughput runs only")
    args = parser.parse_args()
    paths = args.paths.split(",")
    frames = [int(f) for f in args.frames.split(",")]
    if set(paths) - set(PATHS) or set(frames) - set(SCENARIOS):
        parser.error(f"--paths must name {', '.join(PATHS)}; --frames must be of {', '.join(map(str, SCENARIOS))}")
    scale = 0.1 if args.quick else 1.0
    print(machine_line(1000))
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        log_dir = Path(tmp)
        print("throughput (produce as fast as possible, clock stops when the API shows all counted):")
        for frame in frames:
            for path in paths:
                r = throughput(broker.bootstrap_servers, log_dir, path, frame, int(SCENARIOS[frame][0] * scale))
                print(f"  frames of {frame:>4}  {path:<12} {r['reports_per_s']:>12,.0f} reports/s  "
                      f"({r['reports']:,} in {r['seconds']:.2f} s; CPU steal {steal_text(r)})", flush=True)
        if args.no_latency:
            return
        print(f"produce-to-visible latency at the pipeline rates ({LATENCY_SECONDS * scale:g} s each, API polled "
              "every 20 ms):")
        for frame in frames:
            for path in paths:
                rate = SCENARIOS[frame][1]
                r = latency(broker.bootstrap_servers, log_dir, path, frame, rate, LATENCY_SECONDS * scale)
                print(f"  frames of {frame:>4} at {rate:>7,} reports/s  {path:<12} p50 {r['p50_s'] * 1000:6.0f} ms  "
                      f"p99 {r['p99_s'] * 1000:6.0f} ms  (never visible: {r['unseen']}; CPU steal {steal_text(r)})",
                      flush=True)


if __name__ == "__main__":
    main()
