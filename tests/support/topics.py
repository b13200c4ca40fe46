"""Reading back what a test put on a Kafka topic: from the first offset, outside any consumer group."""

from __future__ import annotations

import asyncio
import time


async def read_topic(broker, topic: str, expected: int = 0, *, idle_s: float = 1.5, timeout: float = 60.0) -> list:
    """The records of ``topic``: at least ``expected`` of them if they come within ``timeout`` s, then
    every further record until ``idle_s`` s pass without one (so duplicates and extras show).

    ``broker`` is a bootstrap address (the embedded broker) or a broker object (``EmbeddedBroker``,
    ``MockCluster``) whose profile the consumer uses (tests.brokers.endpoint).
    """
    from infra.kafka import make_consumer
    from tests.brokers import endpoint

    bootstrap, profile = endpoint(broker)
    consumer = make_consumer(bootstrap, topic, profile=profile, auto_offset_reset="earliest",
                             max_partition_fetch_bytes=8 << 20)
    await consumer.start()
    records: list = []
    try:
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and (len(records) < expected or time.monotonic() - quiet_since < idle_s):
            got = await consumer.getmany(timeout_ms=300)
            for batch in got.values():
                records.extend(batch)
            if got:
                quiet_since = time.monotonic()
    finally:
        await consumer.stop()
    return records


def consume(broker, topic: str, expected: int = 0, *, idle_s: float = 1.5, timeout: float = 60.0) -> list:
    """``read_topic`` outside an event loop."""
    return asyncio.run(read_topic(broker, topic, expected, idle_s=idle_s, timeout=timeout))


def produce(bootstrap: str, records: list[tuple[str, int, bytes, list]]) -> None:
    """(topic, partition, value, headers) appended by a plain producer (a 'dead collector')."""
    from infra.kafka import EMBEDDED, make_producer

    async def run():
        producer = make_producer(bootstrap, EMBEDDED)
        await producer.start()
        try:
            for topic, partition, value, headers in records:
                await producer.send_and_wait(topic, value, partition=partition, headers=headers)
        finally:
            await producer.stop()

    asyncio.run(run())
