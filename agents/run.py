"""``ocms run``: the whole pipeline on one machine, for a first look.

Starts the embedded broker (or uses ``--bootstrap-servers``), one worker
process and a simulated fleet sending a real dataset at a visible rate, then
prints where to look and, every few seconds, the ground truth sent so far next
to the worker's live estimates for the most frequent values. Ctrl-C (or
SIGTERM) stops the fleet, then the worker, then the broker; every child runs in
its own session and is killed by process group if it does not stop in time, so
nothing is left behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

from cms_core.errors import OCMSError

ROOT = Path(__file__).resolve().parents[1]


class ChildWorker:
    """``ocms worker`` as a child process in its own session."""

    def __init__(self, command: list[str]):
        self.process = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout)


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _wait_healthy(base: str, worker: ChildWorker, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.process.poll() is not None:
            raise OCMSError(f"the worker exited with status {worker.process.returncode}")
        try:
            if _get(base + "/healthz")["status"] == "ok":
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise OCMSError(f"the worker did not become healthy within {timeout:.0f} s")


def _table(dataset, truth: np.ndarray, sent: int, doc: dict, show: int) -> str:
    records = doc.get("estimates", [])
    order = np.argsort(-truth, kind="stable")[:show]
    lines = [f"reports sent {sent:,}; counted by the worker {doc.get('n', 0):,}",
             f"  {'value':>12} {'true count':>11} {'estimate':>10}   95% CI of the count"]
    scale = doc.get("n", 0) / sent if sent else 0.0  # compare like with like while the worker catches up
    for value in order:
        label = dataset.label(int(value))
        rec = records[int(value)] if int(value) < len(records) else {}
        if rec.get("count") is not None:  # records of n = 0 hold null estimates (cms_core.records)
            lines.append(f"  {label:>12} {truth[value] * scale:>11,.0f} {rec['count']:>10,.0f}   "
                         f"[{rec['count_ci_low']:,.0f}, {rec['count_ci_high']:,.0f}]")
        else:
            lines.append(f"  {label:>12} {truth[value] * scale:>11,.0f} {'-':>10}")
    return "\n".join(lines)


async def _pipeline(args, settings, bootstrap: str, topic: str, base: str, stop: asyncio.Event) -> None:
    from producer import simulator

    live = simulator.SimulationResult()
    task = asyncio.create_task(simulator.run(settings, bootstrap_servers=bootstrap, topic=topic, progress=False,
                                             should_stop=stop.is_set, result=live))
    try:
        while not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=args.every)
            except asyncio.TimeoutError:
                pass
            if live.counts is None:
                continue
            try:
                doc = await asyncio.to_thread(_get, base + "/estimates")
            except OSError as exc:
                print(f"(worker API not answering: {exc})", flush=True)
                continue
            print(_table(settings.dataset, live.counts, live.reports, doc, args.show) + "\n", flush=True)
        await task
    finally:
        stop.set()
        if not task.done():
            await task


def run(args) -> int:
    from cms_core import OCMSParams
    from producer import simulator
    from producer.broker import EmbeddedBroker, create_topics, free_port
    from producer.datasets import parse_dataset

    dataset = parse_dataset(args.dataset)
    params = OCMSParams.build(args.epsilon, dataset.dictionary_size)
    if dataset.dictionary_size > 100_000:
        raise OCMSError(f"--dataset {args.dataset}: d={dataset.dictionary_size:,} is too large to track whole here")
    run_id = time.strftime("%Y%m%d-%H%M%S")
    topic = args.topic or ("ocms-reports" if not args.bootstrap_servers else f"ocms-run-{run_id}")
    app_id = "ocms-run" if not args.bootstrap_servers else f"ocms-run-{run_id}"
    web_port = args.web_port or free_port()
    base = f"http://127.0.0.1:{web_port}"
    settings = simulator.SimulationSettings(params=params, dataset=dataset, duration_s=args.duration or 10.0**9,
                                            rate=args.rate, frame_size=args.frame_size, seed=args.seed)
    broker = worker = None
    stop_requested = False

    def on_signal(signum, frame):
        nonlocal stop_requested
        stop_requested = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        if args.bootstrap_servers:
            bootstrap = args.bootstrap_servers
            print(f"using Kafka at {bootstrap} (topic {topic})", flush=True)
        else:
            broker = EmbeddedBroker().start()
            bootstrap = broker.bootstrap_servers
            print(f"embedded broker (Tansu, memory storage) on {bootstrap}", flush=True)
        asyncio.run(create_topics(bootstrap, {topic: args.partitions}))
        command = [sys.executable, "-m", "agents.cli", "worker", "--epsilon", str(args.epsilon),
                   "--dictionary-size", str(dataset.dictionary_size), "--bootstrap-servers", bootstrap,
                   "--broker", "kafka" if args.bootstrap_servers else "embedded", "--app-id", app_id,
                   "--source-topic", topic, "--dead-letter-topic", topic + "-dlq", "--partitions", str(args.partitions),
                   "--web-port", str(web_port), "--log-level", "warning"]
        worker = ChildWorker(command)
        _wait_healthy(base, worker)
        print(f"""
worker API   {base}/estimates   {base}/topk?k=10   {base}/params   {base}/healthz
metrics      {base}/metrics
try          curl -s '{base}/estimates/0'
fleet        {dataset.description}: eps={args.epsilon:g}, {args.rate:,.0f} reports/s in frames of {args.frame_size}
Ctrl-C stops everything.
""", flush=True)
        stop = None

        async def main():
            nonlocal stop
            stop = asyncio.Event()
            await _pipeline(args, settings, bootstrap, topic, base, stop)

        asyncio.run(main())
    except KeyboardInterrupt:
        print("\nstopping: fleet, worker, broker ...", flush=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if worker is not None:
            worker.stop()
        if broker is not None:
            broker.stop()
    print("stopped.", flush=True)
    return 0
