"""Source-topic intake: hand fetched source messages straight to the worker.

Why: Faust delivers every message through ``Consumer._drain_messages`` ->
``wait_first(callback, suspend_flow)`` (four asyncio tasks per message) -> the
conductor -> a channel queue -> the agent's stream -> an ``Event``. With one
report per message that path cost ~120 us of the worker's ~170 us per message
(py-spy, see benchmarks/bench_worker.py), capping the worker near 6k messages/s.
The worker does not need any of it: it batches messages itself and acks them
only after their counts are written.

So the consumer's ``getmany`` (the fetcher's source of messages) keeps the
bookkeeping Faust does per message (read offset, offset gaps, the unacked set
that a rebalance and a clean stop wait on) and gives source-topic messages to
``app.intake`` synchronously; every other topic (the table's changelog during
recovery) still takes Faust's normal path. Partition assignment, flow control on
rebalance, commits (of acked offsets only) and table recovery are unchanged:
the agent still subscribes the source topic, it just receives nothing. Before
Faust waits for unacked messages (rebalance, clean stop) the pending batch is
flushed, so a clean stop leaves nothing to replay.

What Faust's streams skip is skipped here too: messages fetched while the flow
is held (rebalance, table recovery) or in an older consumer generation. The
seek to the committed offset that precedes every flow resume fetches them
again; the worker also drops a pending copy that such a seek re-delivers
(``OCMSWorker.receive``), so a micro-batch never counts a message twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

import faust
from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.types import TP, Message

#: Yield to the event loop after this many intake messages (web pages and timers stay responsive).
YIELD_EVERY = 500


class Intake(Protocol):
    source_topic: str

    def receive(self, message: Message) -> bool:
        """Take one source message; True when the micro-batch is full and should be flushed."""

    async def flush(self) -> None: ...


class IntakeConsumerThread(aiokafka_driver.AIOKafkaConsumerThread):
    """Faust's consumer thread with the fetch wait taken from ``app.fetch_max_wait_ms``."""

    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        # Faust hard-codes fetch_max_wait_ms=1500; aiokafka reads the attribute when it starts.
        wait = getattr(self.app, "fetch_max_wait_ms", None)
        if wait is not None:
            consumer._fetch_max_wait_ms = wait
        return consumer


class IntakeConsumer(aiokafka_driver.Consumer):
    """Faust's aiokafka consumer, with source-topic messages handed to ``app.intake``."""

    def _new_consumer_thread(self):
        return IntakeConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        intake: Intake | None = getattr(self.app, "intake", None)
        if intake is None:
            async for item in super().getmany(timeout):
                yield item
            return
        source = intake.source_topic
        read_offset = self._read_offset
        app = self.app
        flow_active = app.flow_control.is_active
        since_yield = 0
        async for tp, message in super().getmany(timeout):
            if tp.topic != source:
                yield tp, message
                continue
            if not flow_active() or message.generation_id != app.consumer_generation_id:
                # Faust's streams drop these too: fetched while a rebalance or table recovery
                # holds the flow (the table partition may not be recovered yet), or fetched in
                # an older generation. The seek to the committed offset that precedes every
                # flow resume fetches them again; counting this copy as well would count twice.
                continue
            offset = message.offset
            last = read_offset[tp]
            if last is not None and offset < last:
                continue  # already read before a seek: Faust drops these too
            if last is not None and offset - last > 1:
                # Offsets the broker skipped (compaction, transaction markers) can never be
                # acked; recording them as a gap lets the committed offset move past them.
                await self._add_gap(tp, last + 1, offset)
            self.track_message(message)
            read_offset[tp] = offset
            if intake.receive(message):
                await intake.flush()
            since_yield += 1
            if since_yield >= YIELD_EVERY:
                since_yield = 0
                await asyncio.sleep(0)

    def untrack(self, message: Message) -> None:
        """Forget a tracked message that will be delivered again (no ack: it is not counted)."""
        self._unacked_messages.discard(message)


class IntakeTransport(aiokafka_driver.Transport):
    Consumer = IntakeConsumer


class IntakeApp(faust.App):
    """A Faust app whose consumer hands source messages to ``intake`` (set before start)."""

    intake: Intake | None = None
    #: The consumer's fetch wait (ms); None keeps Faust's 1,500 ms.
    fetch_max_wait_ms: int | None = None

    def _new_transport(self):
        return IntakeTransport(self.conf.broker_consumer, self)

    async def _consumer_wait_empty(self, consumer, logger) -> None:
        # Faust waits here, on a rebalance and on a clean stop, until every tracked message
        # is acked. The worker's pending micro-batch is only acked by a flush: flush it now
        # rather than leave the wait to the batch timer (or, on stop, to time out and have
        # the batch replayed by the next owner).
        if self.intake is not None:
            await self.intake.flush()
        await super()._consumer_wait_empty(consumer, logger)
