"""The global read model: every worker's complete view of the counts table.

Why (scale-out design): a Faust table is partitioned, so a worker holds only
the partitions it owns and would answer for part of the topic. Each worker
therefore also reads the *whole* changelog of the counts table (all
partitions, no consumer group) into this view: latest value per key,
tombstones delete. Writes still come only from the owner of a source
partition; the view is what the API and ``/metrics`` read. With any number of
workers every worker answers for all partitions, and once its view has caught
up with the changelog the answer equals a single worker's (the same integers
from the same keys). It also has no gap while partitions move between workers
in a rebalance. Costs: every worker reads every changelog write (one value per
key per micro-batch; the changelog is compacted on Kafka), and the view holds
keys x D counts (retention / bucket width x partitions x parameter sets).

The view is updated and queried on the event loop only, so a query (which
never awaits) always sees one consistent state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict

import numpy as np

from cms_core.errors import OCMSError

from .state import BucketKey, PartialCounts

log = logging.getLogger(__name__)


class CountsView:
    """Latest PartialCounts per key, indexed by (fingerprint, width, bucket start)."""

    def __init__(self, tracked_sizes: dict[str, int] | None = None):
        self.index: dict[tuple[str, int, int], dict[int, PartialCounts]] = defaultdict(dict)
        self.applied = 0
        self.rejected = 0  # changelog records that are not ours (never counted)
        #: fingerprint -> D; records of other parameter sets or tracked-set sizes are refused
        #: (e.g. a changelog written under another configuration of the same app id).
        self.tracked_sizes = tracked_sizes

    def apply(self, raw_key: bytes | None, raw_value: bytes | None) -> None:
        try:
            key = BucketKey.decode(raw_key or b"")
            state = None if raw_value is None else PartialCounts.from_bytes(raw_value)
        except OCMSError as exc:
            self.rejected += 1
            log.warning("ignoring a changelog record that is not a counts value: %s", exc)
            return
        if self.tracked_sizes is not None and (
            key.fingerprint not in self.tracked_sizes
            or (state is not None and state.counts.shape[0] != self.tracked_sizes[key.fingerprint])
        ):
            self.rejected += 1
            log.warning("ignoring changelog key %s: not a configured parameter set / tracked-set size", key)
            return
        slot = (key.fingerprint, key.width, key.bucket_start)
        if state is None:
            self.index.get(slot, {}).pop(key.partition, None)
            if slot in self.index and not self.index[slot]:
                del self.index[slot]
        else:
            self.index[slot][key.partition] = state
        self.applied += 1

    def sum(self, fingerprint: str, width: int, start: int, tracked_count: int) -> tuple[int, np.ndarray]:
        """(n, counts) of one bucket summed over partitions."""
        n = 0
        counts = np.zeros(tracked_count, np.int64)
        for state in self.index.get((fingerprint, width, start), {}).values():
            n += state.n
            counts += state.counts
        return n, counts

    def sum_range(self, fingerprint: str, width: int, start: int, stop: int, tracked_count: int) -> tuple[int, np.ndarray]:
        """(n, counts) of the buckets of ``width`` starting in [start, stop)."""
        n = 0
        counts = np.zeros(tracked_count, np.int64)
        for bucket in range(start, stop, width):
            bn, bc = self.sum(fingerprint, width, bucket, tracked_count)
            n += bn
            counts += bc
        return n, counts

    def buckets(self, fingerprint: str, width: int) -> list[int]:
        return sorted(start for fp, w, start in self.index if fp == fingerprint and w == width)

    def keys(self) -> int:
        return sum(len(v) for v in self.index.values())


class ChangelogReader:
    """Feeds a CountsView from every partition of the changelog topic (from the beginning)."""

    def __init__(self, view: CountsView, bootstrap_servers: str, topic: str):
        self.view = view
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.caught_up = asyncio.Event()
        self.lag = 0
        self.last_update = 0.0

    async def run(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False, auto_offset_reset="earliest",
            group_id=None, fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            partitions = None
            while partitions is None:
                partitions = consumer.partitions_for_topic(self.topic)
                if partitions is None:
                    await consumer.force_metadata_update()
                    await asyncio.sleep(0.2)
            tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            start_ends = await consumer.end_offsets(tps)
            while True:
                batches = await consumer.getmany(timeout_ms=200, max_records=10_000)
                for records in batches.values():
                    for record in records:
                        self.view.apply(record.key, record.value)
                if batches:
                    self.last_update = time.time()
                if not self.caught_up.is_set():
                    positions = {tp: await consumer.position(tp) for tp in tps}
                    if all(positions[tp] >= start_ends[tp] for tp in tps):
                        self.caught_up.set()
                        log.info("counts view caught up: %d keys", self.view.keys())
                lag = 0
                for tp in tps:
                    highwater = consumer.highwater(tp)
                    if highwater is not None:
                        lag += max(0, highwater - await consumer.position(tp))
                self.lag = lag
        finally:
            await consumer.stop()
