"""Fence, then read: what a partition holds of a listed frame or shuffled batch, and completing a batch a kill
cut short from its redo copy (:mod:`collector.exactly_once.shared` decides when; this is how).

After a fence (a producer started with the listing owner's transactional id: the broker refuses every later
send of the owner), the listed partition read from the listed offset to its end says what is final: none of
the frames -> never stored; all -> stored; some (a shuffled batch, not one atomic append) -> the missing ones
are produced from the redo copy by the producer that fenced the owner, so a second settler's producer would
fence this one and never produce them twice: whole, once.
"""

from __future__ import annotations

import asyncio
import logging

from .log import FRAME_HEADER, Listing, parse_batch_frame_id, parse_frame_id

log = logging.getLogger(__name__)


class BatchRepair:
    """Scans of the source and redo topics for a listing's frames, and the repair of a batch cut short."""

    def __init__(self, settings, metrics, redo_topic: str):
        self.settings = settings
        self.metrics = metrics
        self.redo_topic = redo_topic
        self._running: dict[bytes, asyncio.Task] = {}  # nonce -> the repair of a batch cut short, while it runs

    def running(self) -> list[asyncio.Task]:
        """The repairs still producing (to cancel at close)."""
        return list(self._running.values())

    async def complete_batch(self, listing: Listing, produce) -> bool:
        """Whether a listed frame or batch is stored, after a fence: none of its frames in the partition ->
        False; all -> True; some (a batch) -> the missing ones are produced from the redo copy (``await
        produce(records, partition)``, by a producer that fenced the batch's owner) and it is True: whole, once."""
        earlier = self._running.get(listing.nonce)
        if earlier is not None:  # a repair a timed-out settle left queued: what it produces is scanned below
            await asyncio.gather(asyncio.shield(earlier), return_exceptions=True)
        found, count = await self.scan_batch(listing.partition, listing.lower, listing.nonce)
        if not found:
            return False
        if len(found) == count:
            return True
        missing = [i for i in range(count) if i not in found]
        copies = await self.read_redo(listing.redo_lower, listing.nonce)
        absent = [i for i in missing if i not in copies]
        if absent:  # cannot happen: the copy is acknowledged before the first frame is sent
            log.error("shuffled batch %s of %s: frames %s are neither in partition %d nor in %s; its retries are "
                      "answered as stored", listing.nonce.hex(), listing.owner, absent, listing.partition,
                      self.redo_topic)
        # A task, waited for shielded: a settle's timeout must not leave it queued unknown to the next
        # settle, which would produce the missing frames again.
        repair = self._running[listing.nonce] = asyncio.ensure_future(
            produce([copies[i] for i in missing if i in copies], listing.partition))
        repair.add_done_callback(lambda task, n=listing.nonce: self._running.pop(n, None)
                                 if self._running.get(n) is task else None)
        await asyncio.shield(repair)
        self.metrics.batches_completed.inc()
        log.info("completed a shuffled batch of %s cut short: %d of its %d frames produced from %s", listing.owner,
                 len(missing) - len(absent), count, self.redo_topic)
        return True

    async def fence_and_complete(self, listing: Listing) -> bool:
        """Another collector's listing: fence its producer with a producer of its transactional id, which then
        produces what :meth:`complete_batch` finds missing (a second settler's producer would fence this one)."""
        from infra.kafka import make_producer

        s = self.settings
        producer = make_producer(s.bootstrap_servers, s.broker, idempotent=True,
                                 transactional_id=listing.owner, client_id="ocms-collector-fence",
                                 request_timeout_ms=s.kafka_timeout_ms, max_batch_size=1_048_576)  # as the outlet's

        async def produce(records: list, partition: int) -> None:
            if not records:
                return
            await producer.begin_transaction()
            futures = [await producer.send(s.source_topic, value, key=None, partition=partition, timestamp_ms=timestamp,
                                           headers=headers) for value, headers, timestamp in records]
            for future in futures:
                await future
            await producer.commit_transaction()

        try:
            await producer.start()  # in the try: a start that fails or is cancelled leaves nothing open
            return await self.complete_batch(listing, produce)
        finally:
            await producer.stop()

    async def scan_batch(self, partition: int, lower: int, nonce: bytes) -> tuple[set[int], int]:
        """(indices found, frame count) of the frames listed with ``nonce`` in ``partition`` at or after ``lower``
        (a plain frame is frame 0 of 1). Reads up to the partition's end as seen after the call began (so
        after a fence), or until every frame is found."""
        found: set[int] = set()
        count = 0

        def match(message) -> bool:
            nonlocal count
            for name, value in message.headers or ():
                if name == FRAME_HEADER:
                    parsed = parse_frame_id(value)
                    if parsed is not None and parsed[0] == nonce:
                        found.add(parsed[1])
                        count = parsed[2]
            return bool(found) and len(found) == count

        await self._read(self.settings.source_topic, partition, lower, match)
        return found, count

    async def read_redo(self, lower: int, nonce: bytes) -> dict[int, tuple[bytes, list, int]]:
        """The redo copies of a shuffled batch's frames: index -> (frame, headers, timestamp_ms)."""
        copies: dict[int, tuple[bytes, list, int]] = {}

        def match(message) -> bool:
            for name, value in message.headers or ():
                if name == FRAME_HEADER:
                    parsed = parse_batch_frame_id(value)
                    if parsed is not None and parsed[0] == nonce:
                        copies[parsed[1]] = (message.value, list(message.headers), message.timestamp)
            return False

        await self._read(self.redo_topic, 0, lower, match)
        return copies

    async def _read(self, topic: str, partition: int, lower: int, match) -> bool:
        """Read ``topic``'s ``partition`` from ``lower`` up to its high watermark as seen after the call
        began (so after a fence), until ``match(message)`` says True; whether it did."""
        from aiokafka import TopicPartition

        from infra.kafka import make_consumer

        s = self.settings
        consumer = make_consumer(s.bootstrap_servers, profile=s.broker, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=50, client_id="ocms-collector-scan",
                                 isolation_level="read_uncommitted", max_partition_fetch_bytes=4 << 20)
        tp = TopicPartition(topic, partition)
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek(tp, lower)
            while True:
                got = await consumer.getmany(tp, timeout_ms=500)
                for message in got.get(tp, ()):
                    if match(message):
                        return True
                highwater = consumer.highwater(tp)
                if highwater is not None and await consumer.position(tp) >= highwater:
                    return False
        finally:
            await consumer.stop()

    async def end_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """Offsets at or below each partition's end (the embedded broker answers too low, never too high)."""
        from aiokafka import TopicPartition

        from infra.kafka import make_consumer

        s = self.settings
        consumer = make_consumer(s.bootstrap_servers, profile=s.broker, client_id="ocms-collector-offsets")
        await consumer.start()
        try:
            ends = await consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
            return {tp.partition: offset for tp, offset in ends.items()}
        finally:
            await consumer.stop()
