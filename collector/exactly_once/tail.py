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
#: The longest pause between two fetches while the tail would only read back this collector's own records
#: (:meth:`collector.exactly_once.follow.LogFollower._pace`): how late a lone collector may see another's
#: records that follow its own latest (what comes before an own record is read at once).
TAIL_IDLE_SECONDS = 0.25
#: ... and while an own record waits for an earlier offset that an own append in flight may fill.
TAIL_GAP_SECONDS = 0.02
#: One paced poll: long enough for a fetch to answer (the broker holds it up to TAIL_FETCH_WAIT_MS).
TAIL_POLL_MS = 4 * TAIL_FETCH_WAIT_MS


class LogTail:
    """Follows partition 0 of ``topic``: ``on_record(offset, value)`` for each record in log order; ``on_reset()``
    when the broker lost what was read (read afresh from the start); ``on_fetched(highwater, caught_up)`` after
    each fetch (``caught_up``: the tail has reached the log's end once since it started or was reset)."""

    def __init__(self, settings, topic: str, on_record: Callable[[int, bytes], None], on_reset: Callable[[], None],
                 on_fetched: Callable[[int | None, bool, bool], None],
                 pace: Callable[[], Awaitable[None]] | None = None, applied: Callable[[], int] | None = None):
        self.settings = settings
        self.topic = topic
        self.on_record, self.on_reset, self.on_fetched = on_record, on_reset, on_fetched
        self.pace = pace  # awaited after each poll, the partition paused (no fetch meanwhile)
        self.applied = applied  # the reader applied the log up to here (its own appends): not fetched back
        self.fetched = -1  # the greatest offset read from Kafka
        # the greatest offset skipped as applied: never compared with the end a fetch reports, which on the
        # embedded broker may lag the offsets its produce acknowledgements gave (so it is no sign of lost data)
        self.skipped = -1
        self._answered_at = None  # the consumer's time of the latest fetch response
        self.caught_up = False

    def _reset(self) -> None:
        self.fetched = self.skipped = -1
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
                got = await consumer.getmany(tp, timeout_ms=1000 if self.pace is None else TAIL_POLL_MS)
                for message in got.get(tp, ()):
                    if message.offset <= self.fetched:
                        # the log starts over (a broker that lost its data): what it said is gone
                        log.warning("idempotency log %s went back from offset %d to %d; reading it afresh",
                                    self.topic, self.fetched, message.offset)
                        self._reset()
                    self.fetched = message.offset
                    self.on_record(message.offset, message.value)
                highwater = consumer.highwater(tp)
                # a fetch answered since the last poll (the reader counts fetches by it: a read to the end)
                answered_at = consumer.last_poll_timestamp(tp)
                answered, self._answered_at = answered_at != self._answered_at, answered_at
                if answered and highwater is not None and highwater <= self.fetched:
                    # shorter than what was read: a broker that lost its data (the embedded one keeps it in
                    # memory); the embedded broker answers a fetch past the end with nothing, not an error
                    log.warning("idempotency log %s ends at %d, before offset %d read earlier; reading it afresh",
                                self.topic, highwater, self.fetched)
                    self._reset()
                    await consumer.seek_to_beginning(tp)
                    continue
                if not self.caught_up and highwater is not None and await consumer.position(tp) >= highwater:
                    self.caught_up = True
                self.on_fetched(highwater, self.caught_up, answered)
                if self.pace is not None:
                    await self._paced(consumer, tp)
        finally:
            await consumer.stop()

    async def _paced(self, consumer, tp) -> None:
        """The reader's pause between polls, with the partition paused (a fetch in flight is discarded: aiokafka
        drops what a paused partition or a moved position fetched); then the records the reader applied from
        its own appends are skipped, so the next fetch asks only for what follows them."""
        consumer.pause(tp)
        try:
            await self.pace()
        finally:
            applied = self.applied() if self.applied is not None else -1
            if applied > max(self.fetched, self.skipped):
                consumer.seek(tp, applied + 1)
                self.skipped = applied
            consumer.resume(tp)
