"""How long a group of workers is unavailable after one fault (issue 42): the time to settle.

    python -m benchmarks.bench_group_settle [--broker embedded|mock|both] [--faults F,F...] [--json]

Per broker, a group of ``--workers`` workers (``--view share``, the default) serves a registry of
``--metrics`` metrics spread over the four shards, while a producer uploads frames of every metric
and a query thread asks every worker for every metric, all the time. Each fault is done to a
settled group, and the time to settle is measured from the fault until every worker answers
/healthz ``ok``, the workers' assignments cover the four partitions once, and one whole round of
queries (every metric on every worker) is answered 200; then the group is restored to
``--workers`` workers and settled again before the next fault. Faults:

* ``join``: a worker joins;
* ``sigterm``, ``sigkill``: a worker (not the group's leader) stops, or is killed;
* ``leader-sigterm``, ``leader-sigkill``: the group's leader does;
* ``restart``: a worker is SIGTERMed and started again a second later;
* ``kill-restart``: a worker is SIGKILLed and started again at once;
* ``leader-leaves-during-join``: a worker joins, and the leader is SIGTERMed as soon as the newcomer's
  JoinGroup went out (the group is forming: what wedged the embedded broker, issue 42);
* ``issue42``: issue 42's sequence: a rolling restart of every worker (SIGTERM, start again a
  second later, one after another), a newcomer that is SIGKILLed 6 s after it started, then every
  worker restarted ``--apart`` seconds apart; measured from the last restart.

The workers run with the profile's session timeout (3 s embedded) or ``--session-timeout`` on the
mock (6 s, as its tests). Prints one line per fault: seconds to settle, the queries answered 503 (or
not at all) meanwhile, and the rejoins the workers counted (``ocms_group_rejoins_total``). A
benchmark: it prints numbers and never fails on them; a fault that does not settle within
``--limit`` seconds prints ``not settled``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np

from cms_core import wire
from cms_core.privatize import simulate_reports
from infra.kafka import make_producer
from infra.mock_cluster import start_broker
from infra.process import free_port
from ocms.process import WorkerChild, worker_topics
from registry import load_registry

PARTITIONS = 4
FAULTS = ("join", "sigterm", "sigkill", "leader-sigterm", "leader-sigkill", "restart", "kill-restart",
          "leader-leaves-during-join", "issue42")
CATEGORIES = ["a", "b", "c", "d"]


def registry_text(count: int) -> str:
    out = ["metrics:"]
    for i in range(count):
        out += [f"  - name: settle_{i}", f"    description: settle metric {i}", "    owner: bench",
                f"    categories: [{', '.join(CATEGORIES)}]", "    mechanism: direct", "    epsilon: 2"]
    return "\n".join(out) + "\n"


def fetch(url: str, timeout: float = 5.0) -> tuple[int, dict | None]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return exc.code, None
    except (OSError, ValueError):
        return -1, None


class Group:
    """The workers of one run, the uploads and the queries that run beside them."""

    #: The source topic and the workers' consumer group (the app id).
    topic = "settle"

    def __init__(self, broker, kind: str, folder: Path, registry_path: Path, names: list[str], session_s: float | None):
        self.broker, self.kind, self.folder = broker, kind, folder
        self.names = names
        self.registry = load_registry(registry_path)
        self.args = ["--registry", str(registry_path), "--log-level", "info"]
        if session_s is not None:
            self.args += ["--session-timeout-seconds", f"{session_s:g}"]
        self.workers: list[WorkerChild] = []
        self.started = 0
        self.answers: Counter = Counter()
        self.rejoin_counts: dict[int, int] = {}
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    # ------------------------------------------------------------ workers
    def start_worker(self) -> WorkerChild:
        self.started += 1
        port = free_port()
        child = WorkerChild(self.topic, *self.args, bootstrap=self.broker.bootstrap_servers, web_port=port,
                            broker=self.kind if self.kind == "embedded" else "mock", log_level="info",
                            log=self.folder / f"worker-{self.started}-{port}.log").start()
        self.workers.append(child)
        return child

    def remove(self, worker: WorkerChild, sig: int) -> None:
        self.rejoins()  # its count so far stays in the run's sum
        self.workers.remove(worker)
        worker.kill(sig)

    def health(self, worker: WorkerChild) -> dict:
        status, doc = fetch(worker.base_url + "/healthz")
        return doc or {"status": status}

    def leader(self) -> WorkerChild | None:
        for worker in self.workers:
            if (self.health(worker).get("group") or {}).get("leader"):
                return worker
        return None

    def follower(self) -> WorkerChild:
        leader = self.leader()
        return next(w for w in self.workers if w is not leader)

    def rejoins(self) -> int:
        """Rejoins counted by every worker of the run (a stopped worker's last count stays in the sum)."""
        for worker in self.workers:
            counts = (self.health(worker).get("group") or {}).get("rejoins")
            if counts is not None:
                self.rejoin_counts[worker.pid] = sum(counts.values())
        return sum(self.rejoin_counts.values())

    # ------------------------------------------------------------ load
    def run_load(self) -> None:
        self.threads = [threading.Thread(target=self._upload, daemon=True),
                        threading.Thread(target=self._query, daemon=True)]
        for thread in self.threads:
            thread.start()

    def _upload(self) -> None:
        asyncio.run(self._uploads())

    async def _uploads(self) -> None:
        producer = make_producer(self.broker.bootstrap_servers, self.broker.profile, linger_ms=5)
        await producer.start()
        rng = np.random.default_rng(0)
        try:
            while not self.stop.is_set():
                for name in self.names:
                    params = self.registry.metric(name).version(1).params
                    batch = simulate_reports(params, rng.integers(0, len(CATEGORIES), 20).astype(np.uint64), rng)
                    await producer.send(self.topic, wire.encode_frame(params, batch), key=name.encode())
                await asyncio.sleep(0.5)
        finally:
            await producer.stop()

    def _query(self) -> None:
        while not self.stop.is_set():
            for worker in list(self.workers):
                for name in self.names:
                    status, _ = fetch(f"{worker.base_url}/metrics/{name}/estimates")
                    self.answers[status] += 1
            time.sleep(0.05)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
        for worker in self.workers:
            worker.stop()

    # ------------------------------------------------------------ settling
    def settled(self) -> bool:
        """Every worker ok, the partitions assigned once, and a round of every query on every worker all 200."""
        owned: list[int] = []
        for worker in self.workers:
            if not worker.alive():
                return False
            doc = self.health(worker)
            if doc.get("status") != "ok":
                return False
            owned += doc.get("assigned_partitions", [])
        if sorted(owned) != list(range(PARTITIONS)):
            return False
        return all(fetch(f"{w.base_url}/metrics/{name}/estimates")[0] == 200 for w in self.workers for name in self.names)

    def wait_settled(self, since: float, limit: float) -> float | None:
        while time.monotonic() - since < limit:
            if self.settled():
                return time.monotonic() - since
            time.sleep(0.2)
        return None


def do_fault(group: Group, fault: str, apart: float) -> float:
    """Does ``fault`` to the settled ``group``; returns when the measured time starts (monotonic)."""
    if fault == "join":
        group.start_worker()
        return time.monotonic()
    if fault in ("sigterm", "sigkill", "leader-sigterm", "leader-sigkill"):
        victim = group.leader() if fault.startswith("leader") else group.follower()
        at = time.monotonic()
        group.remove(victim, signal.SIGKILL if fault.endswith("sigkill") else signal.SIGTERM)
        return at
    if fault in ("restart", "kill-restart"):
        victim = group.follower()
        at = time.monotonic()
        group.remove(victim, signal.SIGKILL if fault == "kill-restart" else signal.SIGTERM)
        if fault == "restart":
            time.sleep(1)
        group.start_worker()
        return at
    if fault == "leader-leaves-during-join":
        leader = group.leader()
        newcomer = group.start_worker()
        deadline = time.monotonic() + 60
        while "(Re-)joining group" not in newcomer.log.read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.01)
        at = time.monotonic()
        group.remove(leader, signal.SIGTERM)
        return at
    if fault == "issue42":
        for worker in list(group.workers):
            group.remove(worker, signal.SIGTERM)
            time.sleep(1)
            group.start_worker()
        newcomer = group.start_worker()
        time.sleep(6)
        group.remove(newcomer, signal.SIGKILL)
        at = time.monotonic()
        for worker in list(group.workers):
            time.sleep(apart)
            group.remove(worker, signal.SIGTERM)
            time.sleep(1)
            group.start_worker()
            at = time.monotonic()
        return at
    raise ValueError(f"unknown fault {fault!r}")


def restore(group: Group, workers: int, limit: float) -> None:
    while len(group.workers) > workers:
        group.remove(group.workers[-1], signal.SIGTERM)
    while len(group.workers) < workers:
        group.start_worker()
    group.wait_settled(time.monotonic(), limit)


def run(kind: str, faults: list[str], workers: int, metrics: int, session_s: float | None, apart: float,
        limit: float, keep_logs: bool = False) -> list[dict]:
    rows = []
    folder = Path(tempfile.mkdtemp(prefix=f"ocms-settle-{kind}-"))
    with start_broker(kind) as broker:
        path = folder / "registry.yaml"
        path.write_text(registry_text(metrics), encoding="utf-8")
        names = [f"settle_{i}" for i in range(metrics)]
        broker.create_topics(worker_topics(Group.topic, Group.topic, PARTITIONS))
        group = Group(broker, kind, folder, path, names, session_s if kind == "mock" else None)
        try:
            for _ in range(workers):
                group.start_worker()
            first = group.wait_settled(time.monotonic(), limit)
            print(f"{kind}: {workers} workers settled in {first if first is None else round(first, 1)} s; logs in "
                  f"{folder}", flush=True)
            group.run_load()
            for fault in faults:
                before = Counter(group.answers)
                rejoins_before = group.rejoins()
                at = do_fault(group, fault, apart)
                took = group.wait_settled(at, limit)
                answers = group.answers - before
                row = {"broker": kind, "fault": fault, "settle_s": None if took is None else round(took, 1),
                       "answered_200": answers[200], "answered_503": answers[503], "not_answered": answers[-1],
                       "rejoins": group.rejoins() - rejoins_before}
                rows.append(row)
                shown = "not settled" if took is None else f"{took:5.1f} s"
                if took is None:
                    for worker in group.workers:
                        doc = group.health(worker)
                        print(f"  {worker.base_url} {worker.log}: {doc.get('status')} assigned "
                              f"{doc.get('assigned_partitions')} held {doc.get('held_shards')} ready "
                              f"{doc.get('ready_shards')}: {(doc.get('group') or {}).get('reason')}", flush=True)
                        for name in group.names:
                            status, answer = fetch(f"{worker.base_url}/metrics/{name}/estimates")
                            if status != 200:
                                print(f"    {name}: {status} {answer}", flush=True)
                print(f"{kind:8} {fault:26} settled {shown}  queries 200/503/none {answers[200]}/{answers[503]}/"
                      f"{answers[-1]}  rejoins {row['rejoins']}", flush=True)
                restore(group, workers, limit)
        finally:
            group.close()
    if not keep_logs and all(row["settle_s"] is not None for row in rows):
        shutil.rmtree(folder, ignore_errors=True)
    else:
        print(f"{kind}: the workers' logs are kept in {folder}", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=("embedded", "mock", "both"), default="both")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--metrics", type=int, default=8)
    parser.add_argument("--session-timeout", type=float, default=6.0, help="the mock's workers' group session (s)")
    parser.add_argument("--apart", type=float, default=15.0, help="issue42: seconds between the last restarts")
    parser.add_argument("--limit", type=float, default=180.0, help="seconds a fault may take to settle")
    parser.add_argument("--keep-logs", action="store_true", help="keep the workers' logs (kept anyway when a fault "
                        "did not settle)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults: {', '.join(sorted(unknown))}")
    kinds = ("embedded", "mock") if args.broker == "both" else (args.broker,)
    rows = []
    for kind in kinds:
        rows += run(kind, faults, args.workers, args.metrics, args.session_timeout, args.apart, args.limit,
                    args.keep_logs)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
