"""Where this worker stands in its consumer group's rebalance, and when one has not settled in time.

A worker counts only while its consumer group is settled: between a rebalance's start (a member
joins, leaves or expires) and the SyncGroup that hands it its partitions it counts nothing, and
with ``--view share`` the shares that move answer 503. :class:`GroupWatch` follows one member
through the phases of a rebalance (the hooks are in :mod:`agents.faust_internals`, 7: aiokafka's
group coordinator has no public events), so that

* ``/healthz`` says why the worker is not ok while it is not settled, e.g. ``rebalancing for 12 s:
  waiting for SyncGroup (generation 19, follower; 4 answers REBALANCE_IN_PROGRESS)``;
* a rebalance that has not settled within :func:`overdue_after` (4 group sessions, at least 10 s)
  is ended by this member: it rejoins as a new member (``GroupWatch.overdue``), logged and counted
  in ``ocms_group_rejoins_total{reason="rebalance_overdue"}``; a table recovery that has not ended
  within it makes the member rejoin (``reason="recovery_overdue"``: Faust recovers again);
* an error aiokafka's coordinator keeps for a caller that never comes (Faust never reads them)
  makes the member rejoin instead, counted with ``reason="coordinator_error"``.

Issue 42 (docs/operating.md "A consumer group that does not settle") has what made a group
never settle on the embedded broker, and the bound on unavailability after a single fault.

The watch is written from the consumer's thread and read by /healthz and /metrics on the worker's
loop: each field is one immutable value, replaced whole.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

#: What a member waits for in each phase (the words /healthz uses).
WAITING_FOR = {
    "starting": "its first JoinGroup",
    "revoking": "the revocation of its partitions (flush and commit)",
    "joining": "JoinGroup",
    "syncing": "SyncGroup",
    "assigning": "the assignment of its partitions",
    "recovering": "the recovery of its table partitions from the changelog",
}
#: Why a member rejoined (the ``reason`` label of ocms_group_rejoins_total).
REJOIN_REASONS = ("rebalance_overdue", "recovery_overdue", "coordinator_error")
#: Answers that are steps of the protocol, not trouble: not shown by /healthz.
ROUTINE_ANSWERS = {("JoinGroup", "MEMBER_ID_REQUIRED")}


def overdue_after(session_timeout_s: float) -> float:
    """How long a rebalance may last before the member ends it by rejoining as a new member.

    A healthy rebalance takes at most: the session timeout (a dead member is noticed), one more
    for a member that starts meanwhile, and the join and sync the broker holds (Tansu holds each
    for about half to 0.8 of a session; Kafka for its rebalance timeout, Faust's 60 s, which four
    30 s sessions cover). Four sessions leave room for that; 10 s at least, for short sessions.
    """
    return max(10.0, 4.0 * session_timeout_s)


class GroupWatch:
    """One member's view of its consumer group: phase, since when it is not settled, the broker's
    error answers in this rebalance, and the rejoins it did."""

    def __init__(self, session_timeout_s: float, *, clock: Callable[[], float] = time.monotonic,
                 recovering: Callable[[], bool] = lambda: False):
        self.session_timeout_s = session_timeout_s
        self.overdue_after_s = overdue_after(session_timeout_s)
        self.clock = clock
        #: Whether Faust still recovers the table partitions of the last assignment (``App.rebalancing``):
        #: until it has, the member counts nothing (its flow stays stopped).
        self.recovering = recovering
        self.phase = "starting"
        #: When the member stopped being settled (its start, or a rebalance's start); None while settled.
        self.unsettled_since: float | None = clock()
        #: When the member last rejoined as a new member: the next may follow one bound later.
        self.last_rejoin_at: float | None = None
        self.generation: int | None = None
        self.member_id: str | None = None
        self.leader = False
        #: (request, error name) -> answers in the current rebalance, e.g. ("SyncGroup", "REBALANCE_IN_PROGRESS").
        self.errors: Counter = Counter()
        self.rebalances = 0
        self.rejoins: dict[str, int] = {reason: 0 for reason in REJOIN_REASONS}
        #: What the member did last in the current rebalance to end it (for /healthz).
        self.last_rejoin: str | None = None

    # ------------------------------------------------------------ events (the coordinator's hooks)
    def _unsettle(self) -> None:
        if self.unsettled_since is None:
            self.unsettled_since = self.clock()
            self.errors = Counter()

    def revoking(self) -> None:
        """A rebalance starts for this member: the revocation callback runs."""
        self._unsettle()
        self.phase = "revoking"

    def joining(self) -> None:
        self._unsettle()
        self.phase = "joining"

    def joined(self, generation: int, member_id: str, leader: bool) -> None:
        self.generation, self.member_id, self.leader = generation, member_id, leader
        self.phase = "syncing"

    def answered(self, request: str, error: str) -> None:
        """The broker answered ``request`` (JoinGroup, SyncGroup, Heartbeat...) with ``error``."""
        if (request, error) not in ROUTINE_ANSWERS:
            self.errors = self.errors + Counter({(request, error): 1})

    def synced(self, generation: int) -> None:
        self.generation = generation
        self.phase = "assigning"

    def assigned(self) -> None:
        """The assignment callback returned: the member is settled once Faust has recovered its tables."""
        self.phase = "recovering"
        self._settle_if_recovered()

    def _settle_if_recovered(self) -> None:
        if self.phase == "recovering" and not self.recovering():
            self.phase = "stable"
            self.unsettled_since = None
            self.last_rejoin = None
            self.rebalances += 1

    def rejoined(self, reason: str, what: str, *, new_member: bool) -> None:
        """The member rejoins the group (``reason``: one of REJOIN_REASONS; ``what``: what it did, for
        /healthz), as a new member (the broker gives it a new member id) when ``new_member``."""
        self._unsettle()
        self.rejoins = {**self.rejoins, reason: self.rejoins.get(reason, 0) + 1}
        self.last_rejoin = what
        self.last_rejoin_at = self.clock()
        if new_member:
            self.member_id, self.generation, self.leader = None, None, False
        self.phase = "joining"

    # ------------------------------------------------------------ what the worker reads
    def settled(self) -> bool:
        self._settle_if_recovered()
        return self.unsettled_since is None

    def unsettled_for(self) -> float:
        """Seconds since the member stopped being settled (0 while settled)."""
        self._settle_if_recovered()
        since = self.unsettled_since
        return 0.0 if since is None else max(0.0, self.clock() - since)

    def overdue(self) -> bool:
        """The rebalance has lasted the bound (or the bound has passed since this member's last rejoin)."""
        self._settle_if_recovered()
        since = self.unsettled_since
        if since is None:
            return False
        start = since if self.last_rejoin_at is None else max(since, self.last_rejoin_at)
        return self.clock() - start >= self.overdue_after_s

    def reason(self) -> str | None:
        """Why the member is not settled, in a sentence (None while settled)."""
        if self.settled():
            return None
        verb = "starting" if self.rebalances == 0 else "rebalancing"
        details = []
        if self.generation is not None and self.phase in ("syncing", "assigning", "recovering"):
            details.append(f"generation {self.generation}, {'leader' if self.leader else 'follower'}")
        if self.errors:
            (request, error), n = self.errors.most_common(1)[0]
            details.append(f"{n} {request} answer{'s' if n > 1 else ''} {error}")
        if self.last_rejoin is not None:
            details.append(self.last_rejoin)
        said = f" ({'; '.join(details)})" if details else ""
        return f"{verb} for {self.unsettled_for():.0f} s: waiting for {WAITING_FOR.get(self.phase, self.phase)}{said}"

    def describe(self) -> dict:
        """The ``group`` part of /healthz."""
        return {
            "state": "stable" if self.settled() else self.phase,
            "unsettled_seconds": round(self.unsettled_for(), 1),
            "reason": self.reason(),
            "generation": self.generation,
            "member_id": self.member_id,
            "leader": self.leader,
            "rebalances": self.rebalances,
            "rejoins": dict(self.rejoins),
            "overdue_after_seconds": self.overdue_after_s,
        }


class GroupCollector:
    """/metrics: the group series of one worker (added to its exposition guard)."""

    def __init__(self, watch: GroupWatch):
        self.watch = watch

    def describe(self):
        return list(self._families())

    def collect(self):
        return self._families()

    def _families(self):
        watch = self.watch
        rejoins = CounterMetricFamily("ocms_group_rejoins", "times this worker rejoined its consumer group as a new "
                                      "member or to recover again, by reason (rebalance_overdue: a rebalance did not settle within "
                                      "the bound; recovery_overdue: the table recovery did not end within it; "
                                      "coordinator_error: aiokafka's coordinator stopped on an error)", labels=["reason"])
        for reason in REJOIN_REASONS:
            rejoins.add_metric([reason], float(watch.rejoins[reason]))
        yield rejoins
        yield CounterMetricFamily("ocms_group_rebalances", "rebalances this worker completed (SyncGroup answered and "
                                  "its partitions assigned)", value=float(watch.rebalances))
        yield GaugeMetricFamily("ocms_group_unsettled_seconds", "seconds since this worker's consumer group stopped "
                                "being settled (0 while settled)", value=watch.unsettled_for())
