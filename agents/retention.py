"""Retention: delete the buckets of owned partitions that are past their level's retention.

Deletes are tombstones in the changelog, so every worker's view drops the bucket too. What
expires when is indexed from the table itself (``RetentionIndex``) after every
rebalance, so buckets written before a restart or by a partition's previous owner are deleted
as well, and the index follows partitions to their new owner. Nothing happens during a
rebalance: a table partition being recovered is not complete yet. Queries ignore expired
buckets anyway, so a late delete never changes an answer; a replayed message of a deleted
bucket is itself past retention and rejected, so none is counted again.
"""

from __future__ import annotations

import heapq
import logging
from typing import Callable, Iterable

import faust

from cms_core.errors import OCMSError

from .checkpoint import TableWriter, acknowledged
from .state import StateKey

log = logging.getLogger("ocms.worker")

#: Retention deletes run at least this often (seconds), and once per finest bucket width
#: when that is shorter: a bucket cannot expire more often than that.
EXPIRY_INTERVAL_S = 30.0


def expiry_interval(levels) -> float:
    """``levels``: one sequence, or fingerprint -> levels (agents.catalog: one per metric version)."""
    finest = min(lv[0][0] for lv in levels.values()) if isinstance(levels, dict) else levels[0][0]
    return float(min(EXPIRY_INTERVAL_S, finest))


class RetentionIndex:
    """The table keys of the owned partitions, by the time they expire (a min-heap).

    It is derived from the table, never the only record: the worker rebuilds it from the
    table's keys whenever the partitions it owns may have changed (start, restart, a
    rebalance that moved partitions), and adds the keys it writes in between. So buckets
    written before a restart, or by the previous owner of a partition, expire like the rest.
    A table key states its level's retention, so it expires whole (``StateKey.expires_at``).
    """

    def __init__(self):
        self._heap: list[tuple[float, StateKey]] = []
        self._indexed: set[StateKey] = set()

    def __len__(self) -> int:
        return len(self._indexed)

    def reset(self, keys: Iterable[StateKey]) -> None:
        """Index exactly ``keys`` (the table's keys of the owned partitions)."""
        self._indexed = {key for key in keys if not key.is_total}
        self._heap = [(key.expires_at, key) for key in self._indexed]
        heapq.heapify(self._heap)

    def add(self, key: StateKey) -> None:
        if key.is_total or key in self._indexed:
            return
        self._indexed.add(key)
        heapq.heappush(self._heap, (key.expires_at, key))

    def due(self, now: float) -> list[StateKey]:
        """Remove and return the keys expired at ``now``, oldest first."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            _, key = heapq.heappop(self._heap)
            self._indexed.discard(key)
            out.append(key)
        return out


class Retention:
    """``owned()``: the source partitions this worker owns, None before the consumer started."""

    def __init__(self, app: faust.App, writer: TableWriter, owned: Callable[[], set[int] | None]):
        self.app = app
        self.writer = writer
        self.owned = owned
        #: Table keys by expiry, rebuilt from the table whenever ownership may have changed.
        self.index = RetentionIndex()
        self._basis: tuple | None = None  # (rebalance count, owned partitions) indexed

    def add(self, key: StateKey) -> None:
        """A key the checkpoint wrote."""
        self.index.add(key)

    async def expire(self, now: float) -> int:
        """Delete the expired buckets of owned partitions; returns how many."""
        owned = self.owned()
        if owned is None or self.app.rebalancing:
            return 0
        basis = (self.app.rebalancing_count, frozenset(owned))
        if basis != self._basis:
            self.index.reset(self._table_keys(owned))
            self._basis = basis
        deleted = 0
        for key in self.index.due(now):
            if key.partition in owned:
                self.writer.delete(key)
                deleted += 1
        await acknowledged(self.app, self.writer.take_unacknowledged())
        if deleted:
            log.debug("retention deleted %d buckets", deleted)
        return deleted

    def _table_keys(self, owned: set[int]) -> list[StateKey]:
        """The table keys the table holds for the ``owned`` partitions."""
        keys = []
        for raw in list(self.writer.table.keys()):
            try:
                key = StateKey.decode(raw)
            except OCMSError as exc:
                log.warning("table key %r is not a counts key; retention skips it: %s", raw, exc)
                continue
            if key.partition in owned:
                keys.append(key)
        return keys
