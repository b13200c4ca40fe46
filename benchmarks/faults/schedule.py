"""One fault schedule, end to end: hosts, the deployment, traffic, the nemesis, the settle, the checker.

1. Hosts and the deployment (benchmarks.faults.deployment): a broker, 3 workers (+1 spare that joins and
   leaves), 2 collectors sharing the idempotency log, with shuffling on or off (drawn from the seed).
2. Traffic from the start (benchmarks.faults.traffic): devices uploading with retries and a ledger, a query
   loop per worker over every metric, /healthz polls.
3. The nemesis runs the seed's plan (benchmarks.faults.nemesis), then heals everything.
4. Settle: uploads stop; those under way are retried until answered 202; then the workers are asked until
   every one answers every metric with the ledger's counts, or ``SETTLE_S`` passes (whatever they answer
   then is what the checker judges).
5. The checker (benchmarks.faults.checker) over the recorded history.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleet.offline import sketch_from_messages
from registry import load_registry

from .checker import Findings, check
from .deployment import Deployment
from .hosts import Network
from .nemesis import Nemesis, plan
from .traffic import Health, Queries, Uploaders

#: After the faults: how long the uploads under way may take to be answered, and the answers to settle.
DRAIN_S = 120.0
SETTLE_S = 120.0
STARTUP_S = 120.0

#: (name, bucket, categories, mechanism, epsilon): metrics with 1-minute and 1-hour buckets (issue 35, 3).
METRICS = (
    ("screen_1m", "1m", 8, "direct", 2),
    ("locale_1m", "1m", 12, "ocms", 3),
    ("error_1h", "1h", 10, "direct", 1),
    ("plan_1h", "1h", 6, "ocms", 2),
)


def registry_text() -> str:
    lines = ["metrics:"]
    for name, bucket, categories, mechanism, epsilon in METRICS:
        values = ", ".join(f"v{i}" for i in range(categories))
        lines += [f"  - name: {name}", f"    description: fault-schedule metric with {bucket} buckets",
                  "    owner: faults@example.com", f"    categories: [{values}]", f"    mechanism: {mechanism}",
                  f"    epsilon: {epsilon}", f"    bucket: {bucket}", "    retention: 30d"]
        if bucket == "1m":
            lines[-1] = "    retention: 24h"
    return "\n".join(lines) + "\n"


@dataclass
class ScheduleResult:
    seed: int
    shuffle: bool
    faults: list
    findings: Findings
    uploads: int
    acked_uploads: int
    seconds: float
    logs: Path | None = None
    notes: list = field(default_factory=list)
    slow_stops: list = field(default_factory=list)  # (process, seconds): SIGTERMs outlived (nemesis.EXIT_GRACE_S)


def _decoders(registry) -> dict:
    def decoder(version):
        def decode(bodies: list[bytes]):
            sketch, rejected = sketch_from_messages(version.params, version.tracked_values(), bodies)
            assert not rejected, rejected
            return sketch.n, tuple(int(c) for c in sketch.counts)
        return decode

    return {name: decoder(registry.metric(name).version(1)) for name, *_ in METRICS}


def _write_history(path: Path, faults, answers, health, expected, final) -> None:
    """What a kept schedule's logs hold beside the processes' own: every fault, answer and /healthz sample (one
    JSON object a line, in time order), the expected counts and the final answers."""
    import dataclasses
    import json

    rows = [{"at": d.began, "fault": d.fault.describe(), "ended": d.ended} for d in faults]
    rows += [{"at": a.began, "answer": dataclasses.asdict(a)} for a in answers]
    rows += [{"at": h.at, "health": {"worker": h.worker, "status": h.status,
                                     **{k: (h.doc or {}).get(k) for k in ("status", "held_shards", "ready_shards",
                                                                           "assigned_partitions", "view_reports")}}}
             for h in health]
    rows.sort(key=lambda r: r["at"])
    rows.append({"expected": {m: [n, list(c)] for m, (n, c) in expected.items()},
                 "final": [dataclasses.asdict(a) for a in final.values()]})
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")


async def _wait(predicate, timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(interval)
    return False


async def every_metric_answered(queries: Queries, workers: dict[str, str], metrics: list[str], timeout: float) -> bool:
    """Whether every worker answered every metric 200 in one round, within ``timeout``."""
    async def all_answer() -> bool:
        answers = [await queries.ask(w, u, m) for w, u in workers.items() for m in metrics]
        return all(a.status == 200 for a in answers)

    return await _wait(all_answer, timeout)


def metric_shapes(registry, seed: int) -> dict:
    """name -> (params, categories, weights) of every metric of METRICS: what the devices (Uploaders) send."""
    shapes = {}
    for name, _, categories, _, _ in METRICS:
        weights = np.random.default_rng(seed).dirichlet(np.ones(categories))
        shapes[name] = (registry.metric(name).version(1).params, categories, weights)
    return shapes


def ledger_counts(uploaders: Uploaders, registry, metrics: list[str]) -> tuple[dict, dict]:
    """(expected: metric -> (n, match counts) of the offline decode of every body answered 202, sent: metric ->
    reports ever sent)."""
    by_metric: dict[str, list[bytes]] = {m: [] for m in metrics}
    sent: dict[str, int] = {m: 0 for m in metrics}
    for u in uploaders.uploads:
        sent[u.metric] += u.reports
    for u in uploaders.acked():
        by_metric[u.metric].append(u.body)
    decoders = _decoders(registry)
    return {m: decoders[m](bodies) for m, bodies in by_metric.items()}, sent


async def wind_down(uploaders: Uploaders, queries: Queries, health, registry, metrics: list[str],
                    workers: dict[str, str], workdir: Path, faults_done) -> tuple[bool, float, dict, dict, dict]:
    """End a run's load: no new uploads and those in flight drained, the ledger's counts, every worker asked until it
    answers them (or SETTLE_S), the query and health loops closed, the history written. Returns (drained, when the
    draining ended, expected, sent, final answers)."""
    uploaders.stop_new()
    drained = await uploaders.drained(DRAIN_S)
    drained_at = time.time()
    expected, sent = ledger_counts(uploaders, registry, metrics)
    final = await settle(queries, workers, metrics, expected, SETTLE_S)
    await queries.close()
    await health.close()
    _write_history(workdir / "history.jsonl", faults_done, queries.answers, health.samples, expected, final)
    return drained, drained_at, expected, sent, final


async def settle(queries: Queries, workers: dict[str, str], metrics: list[str], expected: dict, timeout: float) -> dict:
    """Ask every worker for every metric until all answer the ledger's counts or ``timeout`` passes; the last
    answers, (worker, metric) -> Answer (also kept in the history: they are real queries)."""
    final: dict = {}

    async def settled() -> bool:
        for w, u in workers.items():
            for m in metrics:
                final[(w, m)] = answer = await queries.ask(w, u, m)
                queries.answers.append(answer)  # real queries: the history (and recovery time) holds them
        return all(a.status == 200 and (a.n, a.counts) == expected[a.metric] for a in final.values())

    await _wait(settled, timeout, 1.0)
    return final


def run_schedule(seed: int, seconds: float, broker: str = "embedded", keep_logs: Path | None = None,
                 log=print, kinds: tuple[str, ...] = ()) -> ScheduleResult:
    workdir = Path(tempfile.mkdtemp(prefix="ocms-faults-"))
    try:
        return asyncio.run(_run(seed, seconds, broker, workdir, log, kinds))
    finally:
        if keep_logs is not None:
            target = keep_logs / f"seed-{seed}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(workdir, target, ignore=shutil.ignore_patterns("store"))
        shutil.rmtree(workdir, ignore_errors=True)


async def _run(seed: int, seconds: float, broker: str, workdir: Path, log, kinds: tuple[str, ...]) -> ScheduleResult:
    rng = random.Random(seed)
    shuffle = rng.random() < 0.5
    registry_path = workdir / "registry.yaml"
    registry_path.write_text(registry_text(), encoding="utf-8")
    registry = load_registry(registry_path)
    # A retry window of 60 s (compose keeps the default 900 s) so listings expire within a schedule: a retry
    # comes within seconds, and the expiry rule is exercised (issue 35, 3: 1-hour listings expired at once).
    collector_args = ("--idempotency-window-seconds", "60")
    if shuffle:
        collector_args += ("--shuffle-min-reports", "40", "--shuffle-max-seconds", "1")
    worker_args = ("--session-timeout-seconds", "6") if broker == "mock" else ()
    started = time.time()
    network = Network().start()
    deployment = Deployment(network, workdir, registry_path, broker, collector_args=collector_args,
                            worker_args=worker_args)
    uploaders = queries = health = None
    try:
        await asyncio.to_thread(deployment.start)
        deployment.start_roles("worker", deployment.workers)
        deployment.start_roles("collector")
        workers = {r.name: r.url for r in deployment.worker_roles()[:deployment.workers]}
        collectors = [r.url for r in deployment.collector_roles()]
        metrics = [m[0] for m in METRICS]
        queries = Queries(workers, metrics)
        await queries.start()
        if not await every_metric_answered(queries, workers, metrics, STARTUP_S):
            raise RuntimeError(f"the deployment did not answer every metric within {STARTUP_S:g} s (logs: {workdir})")
        uploaders = Uploaders(collectors, metric_shapes(registry, seed), seed)
        health = Health(workers)
        await uploaders.start()
        await health.start()
        faults = plan(seed, seconds, list(workers), deployment.spare_names, [r.name for r in deployment.collector_roles()],
                      broker, deployment.profile.session_timeout_s if broker != "mock" else 6.0, kinds)
        log(f"schedule seed {seed}: {len(faults)} faults over about {seconds:g} s, shuffling "
            f"{'on' if shuffle else 'off'}, broker {broker}")
        nemesis = Nemesis(deployment, faults, log=log)
        await nemesis.run()
        await nemesis.heal_all()
        last_fault_end = time.time()
        drained, _, expected, sent, final = await wind_down(uploaders, queries, health, registry, metrics, workers,
                                                           workdir, nemesis.done)
        acked = uploaders.acked()
        if any(a.status == 200 and (a.n, a.counts) != expected[a.metric] for a in final.values()):
            from .autopsy import examine

            try:  # where the counts went, while the broker still holds everything
                lines = await asyncio.to_thread(examine, deployment.controller_bootstrap, deployment.profile)
                (workdir / "autopsy.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
            except Exception as exc:  # noqa: BLE001 - a debugging aid must not hide the findings
                (workdir / "autopsy.txt").write_text(f"autopsy failed: {type(exc).__name__}: {exc}\n")
        findings = check(uploads=uploaders.uploads, answers=queries.answers, final_answers=final,
                         health=health.samples, expected=expected, workers=list(workers), metrics=metrics,
                         sent_by_metric=sent, last_fault_end=last_fault_end)
        result = ScheduleResult(seed, shuffle, nemesis.done, findings, len(uploaders.uploads), len(acked),
                                time.time() - started)
        result.slow_stops = list(nemesis.slow_stops)
        if not drained:
            result.notes.append("some uploads were never answered 202")
        return result
    finally:
        for closing in (uploaders, queries, health):
            if closing is not None:
                await closing.close()
        await asyncio.to_thread(deployment.close)
        network.close()
