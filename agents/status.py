"""What /healthz and the lag gauges say about one worker: readiness, assignment, lags, its consumer group."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from faust.types import TP

from cms_core.version import __version__
from .state import writes_for

if TYPE_CHECKING:  # types only
    from .metrics import PipelineMetrics
    from .processor import PendingBatch
    from .rebalance import GroupWatch
    from .shards import Share
    from .view import ChangelogReader, CountsView


#: /healthz's ``table_bytes`` is at most this old.
TABLE_BYTES_EVERY_S = 2.0


def owned_partitions(app, source_topic: str) -> set[int] | None:
    """Source partitions assigned to this worker; None before the consumer has started."""
    try:
        assignment = app.consumer.assignment()
    except Exception:  # consumer not started yet
        return None
    return {tp.partition for tp in assignment if tp.topic == source_topic}


class StatusSource(Protocol):
    """What the status reads of its worker (``agents.app.OCMSWorker``, which imports this module)."""

    app: Any  # the faust.App, for its consumer
    source_topic: str
    metrics: PipelineMetrics
    reader: ChangelogReader
    table: Any  # the counts table: its values are the stored bytes
    share: Share
    view: CountsView
    group: GroupWatch

    @property
    def pending(self) -> PendingBatch: ...

    def owned_partitions(self) -> set[int] | None: ...


class WorkerStatus:
    def __init__(self, worker: StatusSource):
        self.worker = worker
        self.agent_started = False
        #: A background job that stopped (``agents.app.OCMSWorker.supervised``): the worker exits.
        self.failure: str | None = None
        #: source partition -> the offset after the newest acked message (the lag gauges)
        self.next_offset: dict[int, int] = {}
        self._table_bytes = (-TABLE_BYTES_EVERY_S, 0)  # (when counted, bytes)

    def acked(self, last_offsets: dict[int, int]) -> None:
        self.next_offset.update({p: offset + 1 for p, offset in last_offsets.items()})

    def assigned_partitions(self) -> list[int]:
        return sorted(self.worker.owned_partitions() or ())

    def update_lag_metrics(self) -> None:
        worker = self.worker
        metrics = worker.metrics
        assigned = self.assigned_partitions()
        metrics.assigned.set(len(assigned))
        metrics.view_lag.set(worker.reader.lag)
        for partition in assigned:
            try:
                highwater = worker.app.consumer.highwater(TP(worker.source_topic, partition))
            except Exception:
                continue
            if highwater is not None:
                metrics.lag.labels(str(partition)).set(max(0, highwater - self.next_offset.get(partition, 0)))

    def table_bytes(self) -> int:
        """Bytes of the table values this worker's store holds (its partitions), re-counted at most
        every ``TABLE_BYTES_EVERY_S``: a scan of every key, too slow for each /healthz poll."""
        now = time.monotonic()
        if now - self._table_bytes[0] >= TABLE_BYTES_EVERY_S:
            self._table_bytes = (now, sum(len(value) for value in self.worker.table.values()))
        return self._table_bytes[1]

    def health(self) -> dict:
        worker = self.worker
        caught_up = worker.reader.caught_up.is_set()
        assigned = self.assigned_partitions()
        # "ok" means answers are exact from now on: with --view share, also that this worker's
        # share matches its assignment and is rebuilt (a load balancer's readiness probe), and that
        # its consumer group is settled (while it is not, this worker counts nothing and the
        # assignment it reports may be the one the rebalance is taking away).
        group = worker.group.describe()
        settled = group["reason"] is None
        ready = caught_up and self.agent_started and self.failure is None and settled and worker.share.settled(set(assigned))
        if ready:
            status = "ok"
        elif self.failure:
            status = "failed"
        else:
            status = "rebalancing" if not settled and worker.group.rebalances else "starting"
        return {
            "status": status,
            "version": __version__,  # issue 39 (cms_core/version.py)
            "upgrade_from": writes_for(),  # the earlier release whose stored formats it writes (--upgrade-from)
            "failed": self.failure,
            "group": group,
            "view_caught_up": caught_up,
            "view_keys": worker.view.keys(),
            "view_reports": worker.view.reports(),
            "view_bytes": worker.view.memory_bytes(),
            "table_bytes": self.table_bytes(),
            **worker.share.describe(),
            "view_lag_messages": worker.reader.lag,
            "assigned_partitions": assigned,
            "pending_reports": worker.pending.reports,
        }
