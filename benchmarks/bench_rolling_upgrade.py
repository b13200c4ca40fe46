"""A rolling upgrade from the previous release under load, judged by the fault harness's checker (issue 39).

    python -m benchmarks.bench_rolling_upgrade [--seed S] [--warm-seconds T] [--pause-seconds P] [--json]

The previous release is its real code: commit b078575 (release 0.2.0) of this clone, materialised with
``git archive`` (benchmarks.faults.release) and run with this virtual environment. On the embedded broker:
3 workers and 2 collectors of 0.2.0 sharing one consumer group and one idempotency log; devices uploading
through the collectors with retries and a ledger of every 202, a query loop asking every worker for every
metric, /healthz polls (benchmarks.faults.traffic). Then, under that load, the two bounces of CHANGELOG.md
(Unreleased, Upgrading): each worker, then each collector, in turn replaced by this code with ``--upgrade-from
0.2``, then each restarted without ``--upgrade-from``. A worker is stopped, the others take its partitions
(their /healthz ok), then its replacement starts and answers ok: one rebalance at a time.
Uploads stop, those under way are retried until answered, and every worker must answer every metric with the
ledger's counts (benchmarks.faults.checker: no 200 smaller than an earlier one, none above what was sent).

Prints the reports acknowledged and counted, the answers checked (200s), the wrong answers (goal 0: smaller
than an earlier answer, above what was sent, or not the ledger's at the end), lost and doubled reports, the
longest time a metric had no 200 answer from any worker and from a worker that was up, and the longest
rebalance: from a worker's stop until every worker answering /healthz says ok again after the group noticed
(its detection included: on the embedded broker a stopping member's id expires after the 3 s session rather
than leaving), and from its replacement's start until every worker is ok again. The goal is a metric
unavailable no longer than one rebalance (to within 1 s: ``MEASURED_WITHIN_S``). ``--json``: one object with those keys. Exit status 1 when a rule broke, 3 when
the previous release's commit is not in this clone (the message says how to fetch it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.faults.checker import check
from benchmarks.faults.release import PREVIOUS_COMMIT, PREVIOUS_RELEASE, ReleaseMissing, materialise
from benchmarks.faults.schedule import METRICS, every_metric_answered, metric_shapes, registry_text, wind_down
from benchmarks.faults.traffic import Health, Queries, Uploaders
from cms_core.version import __version__
from infra.broker import EmbeddedBroker
from infra.kafka import EMBEDDED, create_topics
from infra.process import free_port
from ocms.process import ROOT, WorkerChild, worker_topics
from ocms.run_collector import CollectorChild
from registry import load_registry

WORKERS = 3
COLLECTORS = 2
PARTITIONS = 4
APP_ID = "ocms-upgrade"
TOPIC = "ocms-upgrade-reports"
UPGRADE_FROM = ".".join(PREVIOUS_RELEASE.split(".")[:2])  # "0.2"
START_S = 180.0  # a process's start on a busy 2-core machine
HEALTH_POLL_S = 0.5  # benchmarks.faults.traffic.Health's interval
#: How closely the two are measured: a rebalance's end to within a /healthz poll, a metric's outage between
#: answers (the last 200 before a stop ended up to a round of the query loop before it, the first after a
#: rebalance began when the loop came round again): two polls' worth.
MEASURED_WITHIN_S = 2 * HEALTH_POLL_S
RELEASE_MISSING = 3  # exit status: the previous release's commit is not in this clone


@dataclass
class Step:
    what: str
    began: float  # the old process's stop began
    ended: float  # the new process answered ok (a worker) or ready (a collector)
    health: dict = field(default_factory=dict)  # the /healthz the new process answered ok with (workers)
    started: float | None = None  # a worker: the others had taken its partitions; its replacement started


@dataclass
class UpgradeResult:
    seed: int
    steps: list
    findings: object
    uploads: int
    answers_200: int
    max_unavailable_s: float  # a metric without a 200 from any worker
    max_unavailable_at_worker_s: float  # a metric without a 200 from a worker that was up
    longest_rebalance_s: float
    seconds: float
    outage: dict = field(default_factory=dict)  # longest_outage: where the longest time without a 200 was

    @property
    def wrong_answers(self) -> int:
        return self.findings.wrong_200 + len(self.findings.final_mismatch)

    @property
    def within_one_rebalance(self) -> bool:
        return self.max_unavailable_s <= self.longest_rebalance_s + MEASURED_WITHIN_S

    @property
    def ok(self) -> bool:
        return self.findings.ok and self.wrong_answers == 0 and self.within_one_rebalance

    def summary(self) -> dict:
        f = self.findings
        return {"seed": self.seed, "from": PREVIOUS_RELEASE, "to": f"{__version__} + Unreleased",
                "steps": [s.what for s in self.steps], "uploads": self.uploads, "acked": f.acked,
                "counted": f.counted, "answers_checked": self.answers_200, "wrong_answers": self.wrong_answers,
                "wrong_200": f.wrong_200, "lost": f.lost, "doubled": f.doubled, "final_mismatch": f.final_mismatch[:5],
                "max_unavailable_s": round(self.max_unavailable_s, 2),
                "max_unavailable_at_worker_s": round(self.max_unavailable_at_worker_s, 2),
                "longest_rebalance_s": round(self.longest_rebalance_s, 2), "longest_outage": self.outage,
                "within_one_rebalance": self.within_one_rebalance, "seconds": round(self.seconds, 1), "ok": self.ok}


def departure_rebalance(samples, stopped_at: float, until: float) -> float:
    """Seconds from a worker's stop to the moment every worker that answers /healthz says ok again after the group
    noticed (one said rebalancing or starting): the rebalance that moves the departed worker's partitions,
    its detection included (on the embedded broker a stopping member's id expires after the session timeout:
    agents.faust_internals), and the replacement's join when it falls in the same rebalance. A worker not
    answering (the stopped one) is left out. 0 when no worker left ok before ``until``."""
    latest: dict[str, str] = {}
    noticed = False
    for sample in sorted((s for s in samples if stopped_at <= s.at <= until and s.status is not None),
                         key=lambda s: s.at):
        latest[sample.worker] = (sample.doc or {}).get("status")
        if latest[sample.worker] != "ok":
            noticed = True
        elif noticed and all(status == "ok" for status in latest.values()):
            return sample.at - stopped_at
    return 0.0


def hold_every_partition(urls: list[str], timeout: float) -> None:
    """Wait until every worker at ``urls`` answers /healthz ok and together they are assigned every partition."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assigned, ok = set(), True
        for url in urls:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
                    doc = json.load(response)
            except urllib.error.HTTPError as exc:  # 503 while not ok: its document says why
                doc = json.load(exc)
            except (OSError, ValueError):
                doc = {}
            ok = ok and doc.get("status") == "ok"
            assigned.update(doc.get("assigned_partitions") or ())
        if ok and assigned == set(range(PARTITIONS)):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the workers at {urls} did not take every partition within {timeout:g} s")


def longest_gap(times: list[tuple[float, float]], start: float, end: float) -> float:
    """The longest stretch of [start, end] in which no 200 was answered: from the end of one 200 answer to the
    beginning of the next (the next one's question was asked then; one that waits on a forward that times out
    does not lengthen the gap by its wait)."""
    return gap_interval(times, start, end)[0]


def gap_interval(times: list[tuple[float, float]], start: float, end: float) -> tuple[float, float, float]:
    """:func:`longest_gap` with where it is: (seconds, from, to)."""
    longest, covered = (0.0, start, start), start
    for began, ended in sorted(t for t in times if start <= t[1] and t[0] <= end):
        if began - covered > longest[0]:
            longest = (began - covered, covered, began)
        covered = max(covered, ended)
    return max(longest, (end - covered, covered, end))


def unavailability(answers, workers: list[str], metrics: list[str], down: dict[str, list[tuple[float, float]]],
                   start: float, end: float) -> tuple[float, float]:
    """(the longest time a metric had no 200 from any worker, ... from a worker outside its own restart)."""
    any_worker = max((longest_gap([(a.began, a.ended) for a in answers if a.metric == metric and a.status == 200],
                                  start, end) for metric in metrics), default=0.0)
    at_worker = 0.0
    for worker in workers:
        for metric in metrics:
            mine = sorted((a for a in answers if a.worker == worker and a.metric == metric), key=lambda a: a.began)
            bad_since = None
            for a in mine:
                if any(lo <= a.began <= hi for lo, hi in down.get(worker, ())):
                    bad_since = None  # its own restart: the worker was not up
                    continue
                if a.status == 200:
                    if bad_since is not None:
                        at_worker = max(at_worker, a.ended - bad_since)
                    bad_since = None
                elif bad_since is None:
                    bad_since = a.began
    return any_worker, at_worker


def longest_outage(answers, health, steps, metrics: list[str], start: float, end: float) -> dict:
    """Where the longest time without a 200 was, for the closing note and for finding its cause: the metric, its
    bounds relative to the step it fell in (the stop, the replacement's start, its ok), the answers asked in it
    by worker and status (with the errors), and each worker's /healthz statuses in it in order."""
    worst = max(((gap_interval([(a.began, a.ended) for a in answers if a.metric == metric and a.status == 200],
                               start, end), metric) for metric in metrics), default=((0.0, start, start), None))
    (seconds, lo, hi), metric = worst
    step = next((s for s in steps if s.began - 1 <= hi and lo <= s.ended + 1), None)
    origin = step.began if step is not None else start
    asked: dict[str, dict[str, int]] = {}
    for a in answers:
        if a.metric == metric and lo <= a.began < hi:
            label = str(a.status) + (f" {a.error}" if a.error and a.status != 200 else "")
            row = asked.setdefault(a.worker, {})
            row[label[:80]] = row.get(label[:80], 0) + 1
    seen: dict[str, list[str]] = {}
    for sample in sorted((s for s in health if lo - 1 <= s.at <= hi + 1), key=lambda s: s.at):
        status = (sample.doc or {}).get("status") if sample.status is not None else "no answer"
        states = seen.setdefault(sample.worker, [])
        if not states or states[-1].split("@")[0] != str(status):
            states.append(f"{status}@{sample.at - origin:+.1f}")
    return {"metric": metric, "seconds": round(seconds, 2), "step": step.what if step else None,
            "from_s": round(lo - origin, 2), "to_s": round(hi - origin, 2),
            "replacement_started_s": round(step.started - origin, 2) if step and step.started else None,
            "step_ended_s": round(step.ended - origin, 2) if step else None, "asked": asked, "health": seen}


class Cluster:
    """The broker, the workers and the collectors of one run; each process by name, replaced in place (same port)."""

    def __init__(self, workdir: Path, old_root: Path):
        self.workdir = workdir
        self.old_root = old_root
        self.registry = workdir / "registry.yaml"
        self.registry.write_text(registry_text(), encoding="utf-8")
        self.broker = EmbeddedBroker(log_path=workdir / "kafka.log")
        self.ports = {f"worker{i}": free_port() for i in range(1, WORKERS + 1)}
        self.ports.update({f"collector{i}": free_port() for i in range(1, COLLECTORS + 1)})
        self.processes: dict[str, object] = {}
        self.generation: dict[str, int] = {}

    def start_broker(self) -> None:
        self.broker.start()
        topics = worker_topics(APP_ID, TOPIC, PARTITIONS)
        changelog = next(t for t in topics if t.endswith("-changelog"))
        asyncio.run(create_topics(self.broker.bootstrap_servers, topics, EMBEDDED,
                                  configs={changelog: {"cleanup.policy": "compact"}}))

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def _log(self, name: str, release: str) -> Path:
        self.generation[name] = self.generation.get(name, 0) + 1
        return self.workdir / f"{name}-{self.generation[name]}-{release}.log"

    def start_worker(self, name: str, old: bool, *flags: str) -> WorkerChild:
        release = PREVIOUS_RELEASE if old else "new"
        child = WorkerChild(TOPIC, "--registry", str(self.registry), "--partitions", str(PARTITIONS), *flags,
                            bootstrap=self.broker.bootstrap_servers, web_port=self.ports[name], app_id=APP_ID,
                            log=self._log(name, release), root=self.old_root if old else ROOT)
        self.processes[name] = child.start()
        return child

    def start_collector(self, name: str, old: bool, *flags: str) -> CollectorChild:
        release = PREVIOUS_RELEASE if old else "new"
        child = CollectorChild(str(self.registry), self.broker.bootstrap_servers, TOPIC, self.ports[name],
                               log=self._log(name, release), root=self.old_root if old else ROOT,
                               extra=("--broker", "embedded", "--idempotency-window-seconds", "60", *flags))
        self.processes[name] = child.start()
        return child

    def close(self) -> None:
        for child in self.processes.values():
            child.stop(timeout=10)
        self.broker.stop()


async def _run(seed: int, workdir: Path, old_root: Path, warm_s: float, pause_s: float, log) -> UpgradeResult:
    started = time.time()
    cluster = Cluster(workdir, old_root)
    registry = load_registry(cluster.registry)
    metrics = [m[0] for m in METRICS]
    workers = [f"worker{i}" for i in range(1, WORKERS + 1)]
    collectors = [f"collector{i}" for i in range(1, COLLECTORS + 1)]
    uploaders = queries = health = None
    steps: list[Step] = []
    down: dict[str, list[tuple[float, float]]] = {}
    try:
        await asyncio.to_thread(cluster.start_broker)
        for name in workers:
            cluster.start_worker(name, old=True)
        for name in collectors:
            cluster.start_collector(name, old=True)
        for name in workers:
            await asyncio.to_thread(cluster.processes[name].wait_healthy, START_S)
        for name in collectors:
            await asyncio.to_thread(cluster.processes[name].wait_ready, START_S)
        urls = {name: cluster.url(name) for name in workers}
        queries = Queries(urls, metrics)
        await queries.start()
        if not await every_metric_answered(queries, urls, metrics, START_S):
            raise RuntimeError(f"the {PREVIOUS_RELEASE} workers did not answer every metric (logs: {workdir})")
        uploaders = Uploaders([cluster.url(c) for c in collectors], metric_shapes(registry, seed), seed,
                              concurrency=16, pause_s=(0.0, 0.1))
        health = Health(urls)
        await uploaders.start()
        await health.start()
        load_began = time.time()
        log(f"release {PREVIOUS_RELEASE} ({PREVIOUS_COMMIT}): {WORKERS} workers, {COLLECTORS} collectors up; "
            f"load for {warm_s:g} s")
        await asyncio.sleep(warm_s)

        async def replace(name: str, bounce: int) -> None:
            """Stop ``name`` and start this code in its place (the first bounce with --upgrade-from), then wait for
            its /healthz to say so (a worker: ok; a collector: ready)."""
            flags = ("--upgrade-from", UPGRADE_FROM) if bounce == 1 else ()
            what = f"{name} -> new{' --upgrade-from ' + UPGRADE_FROM if flags else ''}"
            began = time.time()
            await asyncio.to_thread(cluster.processes[name].stop, 30)
            started = None
            if name in workers:
                # One rebalance at a time: the others take the stopped worker's partitions (the leave), then its
                # replacement joins (a second rebalance), never both at once (a join in the middle of the
                # leave's rebalance can leave a metric unavailable for both, back to back).
                others = [w for w in workers if w != name]
                await asyncio.to_thread(hold_every_partition, [cluster.url(w) for w in others], START_S)
                started = time.time()
                doc = await asyncio.to_thread(cluster.start_worker(name, False, *flags).wait_healthy, START_S)
            else:
                doc = await asyncio.to_thread(cluster.start_collector(name, False, *flags).wait_ready, START_S)
            if doc.get("version") != __version__ or doc.get("upgrade_from") != (UPGRADE_FROM if flags else None):
                raise RuntimeError(f"{name} answered {doc.get('version')}, upgrade_from {doc.get('upgrade_from')}")
            ended = time.time()
            down.setdefault(name, []).append((began, ended))
            steps.append(Step(what, began, ended, {k: doc.get(k) for k in ("version", "upgrade_from")}, started))
            log(f"{what}: {ended - began:.1f} s")
            await asyncio.sleep(pause_s)

        for bounce in (1, 2):  # each bounce: the workers one at a time, then the collectors
            for name in workers + collectors:
                await replace(name, bounce)
        last_step_end = time.time()
        await asyncio.sleep(pause_s)
        drained, load_ended, expected, sent, final = await wind_down(uploaders, queries, health, registry, metrics,
                                                                     urls, workdir, [])
        findings = check(uploads=uploaders.uploads, answers=queries.answers, final_answers=final,
                         health=health.samples, expected=expected, workers=workers, metrics=metrics,
                         sent_by_metric=sent, last_fault_end=last_step_end)
        if not drained:
            findings.unsettled = max(findings.unsettled, 1)
        any_worker, at_worker = unavailability(queries.answers, workers, metrics, down, load_began, load_ended)
        rebalance = max((departure_rebalance(health.samples, since, until)  # each worker's leave, then its join
                         for step in steps if step.started is not None
                         for since, until in ((step.began, step.started), (step.started, step.ended + pause_s))),
                        default=0.0)
        return UpgradeResult(seed, steps, findings, len(uploaders.uploads),
                             sum(1 for a in queries.answers if a.status == 200), any_worker, at_worker, rebalance,
                             time.time() - started,
                             longest_outage(queries.answers, health.samples, steps, metrics, load_began, load_ended))
    finally:
        for closing in (uploaders, queries, health):
            if closing is not None:
                await closing.close()
        await asyncio.to_thread(cluster.close)


def run_upgrade(seed: int, warm_s: float = 10.0, pause_s: float = 3.0, keep_logs: Path | None = None,
                log=print) -> UpgradeResult:
    """One rolling upgrade from the previous release (materialised in a temporary directory, removed after)."""
    workdir = Path(tempfile.mkdtemp(prefix="ocms-upgrade-"))
    try:
        old_root = materialise(PREVIOUS_COMMIT, workdir / f"ocms-{PREVIOUS_RELEASE}", PREVIOUS_RELEASE)
        return asyncio.run(_run(seed, workdir, old_root, warm_s, pause_s, log))
    finally:
        if keep_logs is not None:
            shutil.rmtree(keep_logs, ignore_errors=True)
            shutil.copytree(workdir, keep_logs, ignore=shutil.ignore_patterns(f"ocms-{PREVIOUS_RELEASE}"))
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_rolling_upgrade",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="the traffic's seed (default: a fresh one, printed)")
    parser.add_argument("--warm-seconds", type=float, default=10.0, help="load before the first bounce (default 10)")
    parser.add_argument("--pause-seconds", type=float, default=3.0, help="load between two replacements (default 3)")
    parser.add_argument("--keep-logs", type=Path, default=None, metavar="DIR", help="keep every process's log in DIR")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    say(f"seed {seed}")
    try:
        result = run_upgrade(seed, args.warm_seconds, args.pause_seconds, args.keep_logs, log=say)
    except ReleaseMissing as exc:
        print(f"bench_rolling_upgrade: {exc}", file=sys.stderr)
        return RELEASE_MISSING
    summary = result.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"rolling upgrade {summary['from']} -> {summary['to']} in {summary['seconds']} s "
              f"({len(result.steps)} replacements)")
        print(f"reports acknowledged {summary['acked']:,}, counted {summary['counted']:,} "
              f"(lost {summary['lost']}, doubled {summary['doubled']})")
        print(f"answers checked {summary['answers_checked']:,}; wrong answers {summary['wrong_answers']} (goal 0)")
        print(f"longest a metric was unavailable: {summary['max_unavailable_s']} s from every worker, "
              f"{summary['max_unavailable_at_worker_s']} s at a worker that was up; longest rebalance "
              f"{summary['longest_rebalance_s']} s (goal: no longer than one rebalance: "
              f"{'met' if result.within_one_rebalance else 'NOT met'})")
        print(f"the longest outage: {json.dumps(summary['longest_outage'])}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
