"""The seeded fault schedule: which faults, on which hosts, when; and their execution.

A schedule is drawn from its seed alone (:func:`plan`), so a seed that fails replays the same faults in the
same order on the same hosts with the same pauses (what the processes do meanwhile is up to the machine).
Faults run one after another, each with a pause before it; a fault ends when what it broke is started
again (a process) or healed (a link): the next one may follow within a second, so restarts, joins and kills
come in a row, as in the issue's sequences. Kinds:

======================  ======================================================================================
``worker_kill``         SIGKILL a worker, start it again 0-3 s later
``worker_term``         SIGTERM a worker, start it again 0-2 s after it exited
``rolling_restart``     every worker in turn: SIGTERM, start again a second later, the next 1-15 s after
``join_leave``          a spare worker joins and is SIGKILLed (or SIGTERMed) 2-8 s later
``worker_stall``        SIGSTOP a worker for 1.5-3 session timeouts, then SIGCONT (a zombie that wakes up)
``worker_cut``          cut a worker's link for 2-10 s
``collector_kill``      SIGKILL a collector (mid-batch: uploads are in flight), start it again 0-2 s later
``collector_term``      SIGTERM a collector, start it again
``collector_cut``       cut a collector's link for 2-10 s
``broker_down``         (mock) one of the 3 brokers down for 2-6 s
``leader_move``         (mock) a partition's leader moves to another broker
``request_errors``      (mock) the next produce and fetch requests answered with retriable errors
======================  ======================================================================================
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from dataclasses import dataclass, field

WORKER_KINDS = ("worker_kill", "worker_term", "rolling_restart", "join_leave", "worker_stall", "worker_cut")
COLLECTOR_KINDS = ("collector_kill", "collector_term", "collector_cut")
MOCK_KINDS = ("broker_down", "leader_move", "request_errors")
MIN_FAULTS = 5
#: docker-compose's stop_grace_period of the worker (30 s) and the collector (15 s), and some: a process that
#: outlives its SIGTERM by this long is SIGKILLed and reported (ScheduleResult.slow_stops)
EXIT_GRACE_S = 40.0
KINDS = WORKER_KINDS + COLLECTOR_KINDS + MOCK_KINDS


@dataclass
class Fault:
    kind: str
    target: str | None
    pause_s: float  # before it begins
    draws: dict = field(default_factory=dict)  # its own random choices (durations, order)

    def describe(self) -> str:
        extra = ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in self.draws.items())
        return f"{self.kind}({self.target or ''}{', ' if extra and self.target else ''}{extra})"


@dataclass
class Done:
    fault: Fault
    began: float
    ended: float


def plan(seed: int, seconds: float, workers: list[str], spares: list[str], collectors: list[str],
         broker_kind: str, session_s: float, only: tuple[str, ...] = ()) -> list[Fault]:
    """At least MIN_FAULTS faults filling about ``seconds``, from ``seed`` alone (of the kinds ``only`` names,
    when given)."""
    rng = random.Random(seed)
    kinds = list(WORKER_KINDS) * 2 + list(COLLECTOR_KINDS)
    if broker_kind == "mock":
        kinds += list(MOCK_KINDS)
    if not spares:
        kinds = [k for k in kinds if k != "join_leave"]
    if only:
        kinds = [k for k in kinds if k in only] or list(only)
    faults: list[Fault] = []
    budget = 0.0
    while len(faults) < MIN_FAULTS or budget < seconds:
        kind = rng.choice(kinds)
        pause = rng.choice((rng.uniform(0, 1), rng.uniform(1, 6)))
        draws: dict = {}
        target = None
        if kind in ("worker_kill", "worker_term", "worker_stall", "worker_cut"):
            target = rng.choice(workers)
        elif kind in ("collector_kill", "collector_term", "collector_cut"):
            target = rng.choice(collectors)
        elif kind == "join_leave":
            target = rng.choice(spares)
        if kind == "worker_kill":
            draws["down_s"] = rng.uniform(0, 3)
        elif kind in ("worker_term", "collector_term"):
            draws["down_s"] = rng.uniform(0, 2)
        elif kind == "collector_kill":
            draws["down_s"] = rng.uniform(0, 2)
        elif kind == "rolling_restart":
            order = list(workers)
            rng.shuffle(order)
            draws["order"] = ",".join(order)
            draws["gaps"] = ",".join(f"{rng.choice((rng.uniform(1, 3), rng.uniform(3, 15))):.1f}" for _ in order)
        elif kind == "join_leave":
            draws["stay_s"] = rng.uniform(2, 8)
            draws["leave"] = rng.choice(("kill", "term"))
        elif kind == "worker_stall":
            draws["stall_s"] = session_s * rng.uniform(1.5, 3)
        elif kind in ("worker_cut", "collector_cut"):
            draws["cut_s"] = rng.uniform(2, 10)
        elif kind == "broker_down":
            draws["broker"] = rng.randint(1, 3)
            draws["down_s"] = rng.uniform(2, 6)
        elif kind == "leader_move":
            draws["partition"] = rng.randint(0, 3)
            draws["broker"] = rng.randint(1, 3)
        elif kind == "request_errors":
            draws["api"] = rng.choice(("Produce", "Fetch"))
        faults.append(Fault(kind, target, pause, draws))
        budget += pause + _expected_length(faults[-1])
    return faults


def _expected_length(fault: Fault) -> float:
    d = fault.draws
    if fault.kind == "rolling_restart":
        return sum(float(g) + 3 for g in d["gaps"].split(","))
    return sum(v for k, v in d.items() if k.endswith("_s")) + 2


class Nemesis:
    """Runs a plan against a Deployment (and its Network): what it did, with times, in ``done``."""

    def __init__(self, deployment, faults: list[Fault], log=print):
        self.deployment = deployment
        self.network = deployment.network
        self.faults = faults
        self.done: list[Done] = []
        self.log = log
        #: (process name, seconds) of each SIGTERM the process outlived by EXIT_GRACE_S (SIGKILLed then)
        self.slow_stops: list[tuple[str, float]] = []

    async def run(self) -> None:
        for fault in self.faults:
            await asyncio.sleep(fault.pause_s)
            began = time.time()
            self.log(f"  fault {len(self.done) + 1}/{len(self.faults)} at {began:.3f}: {fault.describe()}")
            await getattr(self, fault.kind)(fault)
            self.done.append(Done(fault, began, time.time()))

    # ------------------------------------------------------------------ processes
    def _role(self, name: str):
        return self.deployment.roles[name]

    async def _exit(self, role, sig: int, timeout: float = EXIT_GRACE_S) -> None:
        process = role.process
        if process is None:
            return
        if sig != signal.SIGKILL:
            process.signal(signal.SIGCONT)
        process.signal(sig)
        if not await asyncio.to_thread(process.wait, timeout):
            self.log(f"    {role.name} did not exit {timeout:g} s after signal {sig}: SIGKILL")
            self.slow_stops.append((role.name, timeout))
            process.signal(signal.SIGKILL)
            await asyncio.to_thread(process.wait, 10)

    async def _restart(self, name: str, sig: int, down_s: float) -> None:
        role = self._role(name)
        await self._exit(role, sig)
        await asyncio.sleep(down_s)
        role.start()

    async def worker_kill(self, fault: Fault) -> None:
        await self._restart(fault.target, signal.SIGKILL, fault.draws["down_s"])

    async def worker_term(self, fault: Fault) -> None:
        await self._restart(fault.target, signal.SIGTERM, fault.draws["down_s"])

    async def collector_kill(self, fault: Fault) -> None:
        await self._restart(fault.target, signal.SIGKILL, fault.draws["down_s"])

    async def collector_term(self, fault: Fault) -> None:
        await self._restart(fault.target, signal.SIGTERM, fault.draws["down_s"])

    async def rolling_restart(self, fault: Fault) -> None:
        for name, gap in zip(fault.draws["order"].split(","), fault.draws["gaps"].split(",")):
            await self._restart(name, signal.SIGTERM, 1.0)
            await asyncio.sleep(float(gap))

    async def join_leave(self, fault: Fault) -> None:
        role = self._role(fault.target)
        role.start()
        await asyncio.sleep(fault.draws["stay_s"])
        await self._exit(role, signal.SIGKILL if fault.draws["leave"] == "kill" else signal.SIGTERM)

    async def worker_stall(self, fault: Fault) -> None:
        role = self._role(fault.target)
        role.process.signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(fault.draws["stall_s"])
        finally:
            role.process.signal(signal.SIGCONT)

    async def _cut(self, fault: Fault) -> None:
        self.network.cut(fault.target)
        try:
            await asyncio.sleep(fault.draws["cut_s"])
        finally:
            self.network.heal(fault.target)

    worker_cut = collector_cut = _cut

    # ------------------------------------------------------------------ the mock cluster's broker faults
    async def broker_down(self, fault: Fault) -> None:
        mock = self.deployment.mock
        mock.broker_down(fault.draws["broker"])
        try:
            await asyncio.sleep(fault.draws["down_s"])
        finally:
            mock.broker_up(fault.draws["broker"])

    async def leader_move(self, fault: Fault) -> None:
        self.deployment.mock.partition_set_leader("ocms-reports", fault.draws["partition"], fault.draws["broker"])
        await asyncio.sleep(1)

    async def request_errors(self, fault: Fault) -> None:
        self.deployment.mock.push_request_errors(fault.draws["api"], ["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT",
                                                                      "NOT_LEADER_OR_FOLLOWER"])
        await asyncio.sleep(1)

    # ------------------------------------------------------------------ the end
    async def heal_all(self) -> None:
        """Everything back: links up, stopped processes continued, the base workers and collectors running,
        the spares stopped."""
        for name in self.network.hosts:
            self.network.heal(name)
        for role in self.deployment.roles.values():
            if role.process is not None:
                role.process.signal(signal.SIGCONT)
        for role in self.deployment.roles.values():
            spare = role.name in self.deployment.spare_names
            if spare and role.alive():
                await self._exit(role, signal.SIGTERM)
            elif not spare and not role.alive():
                role.start()
