"""Reading the idempotency log: partition 0 of ``--idempotency-topic`` from its first record, for ever, in order.

:class:`LogTail` hands every record to :class:`collector.exactly_once.shared.SharedIdempotency`, which applies it
to the :class:`collector.exactly_once.log.ListingLog` (unless it applied the record already from its own
append). A broker that lost what was read (the embedded one keeps the log in memory: a restart empties it)
shows as an offset at or below one read before, or as an end before it: the log is then read afresh from its
start, and the reader is told to start its state afresh too.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

log = logging.getLogger(__name__)

#: The tail's fetch wait: Tansu does not answer a waiting fetch when records arrive (Kafka does), so a
#: short wait is what bounds how soon a collector reads another collector's listing (about 1-5 ms here).
TAIL_FETCH_WAIT_MS = 5
#: The longest pause between two fetches while the tail only reads back this collector's own records
#: (:meth:`collector.exactly_once.shared.SharedIdempotency._pace`).
TAIL_IDLE_SECONDS = 0.05


class LogTail:
    """Follows partition 0 of ``topic``: ``on_record(offset, value)`` for each record in log order; ``on_reset()``
    when the broker lost what was read (read afresh from the start); ``on_fetched(highwater, caught_up)`` after
    each fetch (``caught_up``: the tail has reached the log's end once since it started or was reset)."""

    def __init__(self, settings, topic: str, on_record: Callable[[int, bytes], None], on_reset: Callable[[], None],
                 on_fetched: Callable[[int | None, bool], None], pace: Callable[[], Awaitable[None]] | None = None):
        self.settings = settings
        self.topic = topic
        self.on_record, self.on_reset, self.on_fetched = on_record, on_reset, on_fetched
        self.pace = pace  # awaited after each fetch that read records
        self.fetched = -1  # the greatest offset read from Kafka
        self.caught_up = False

    def _reset(self) -> None:
        self.fetched = -1
        self.caught_up = False
        self.on_reset()

    async def run(self) -> None:
        from aiokafka import TopicPartition

        from infra.kafka import make_consumer

        s = self.settings
        consumer = make_consumer(s.bootstrap_servers, profile=s.broker, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=TAIL_FETCH_WAIT_MS, client_id="ocms-collector-tail",
                                 isolation_level="read_uncommitted")
        tp = TopicPartition(self.topic, 0)
        try:
            while True:
                try:
                    await consumer.start()
                    break
                except Exception as exc:
                    log.info("idempotency log not readable yet: %s: %s", type(exc).__name__, exc)
                    await asyncio.sleep(s.retry_after_seconds)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while True:
                got = await consumer.getmany(tp, timeout_ms=1000)
                for message in got.get(tp, ()):
                    if message.offset <= self.fetched:
                        # the log starts over (a broker that lost its data): what it said is gone
                        log.warning("idempotency log %s went back from offset %d to %d; reading it afresh",
                                    self.topic, self.fetched, message.offset)
                        self._reset()
                    self.fetched = message.offset
                    self.on_record(message.offset, message.value)
                highwater = consumer.highwater(tp)
                if highwater is not None and highwater <= self.fetched:
                    # shorter than what was read: a broker that lost its data (the embedded one keeps it in
                    # memory); the embedded broker answers a fetch past the end with nothing, not an error
                    log.warning("idempotency log %s ends at %d, before offset %d read earlier; reading it afresh",
                                self.topic, highwater, self.fetched)
                    self._reset()
                    await consumer.seek_to_beginning(tp)
                    continue
                if not self.caught_up and highwater is not None and await consumer.position(tp) >= highwater:
                    self.caught_up = True
                self.on_fetched(highwater, self.caught_up)
                if self.pace is not None and got.get(tp):
                    await self.pace()
        finally:
            await consumer.stop()
