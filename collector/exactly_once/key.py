"""The key of the Idempotency-Key hashes when no ``--idempotency-secret-file`` is given: generated once and kept.

The idempotency log holds a keyed hash of each upload's key, never the key: unkeyed, whoever reads the log
topic could match a key seen elsewhere (a proxy's log, a device's storage) to its upload's listing. Every
collector sharing the log must hash with the same key, across restarts and replicas, so the key is kept in
Kafka, in its own topic ``<idempotency topic>-key`` (one partition, never deleted), which an operator
restricts to the collectors (a Kafka ACL; docs/privacy.md, "Trust model"):

1. the first key record of that topic, in offset order, is the key (two collectors that both generated one
   at their first start both read the first, so they agree);
2. no key there, and the log is empty: a fresh deployment (a live collector writes a lease at least every
   second, so an empty log means none runs): generate 32 bytes from the OS CSPRNG, write them, read 1;
3. no key there, and the log holds records: collectors that hash unkeyed (releases before 0.3.0, or no
   secret file) wrote them, and may still be running: a key now would make a retry that crosses from one
   of them to this one count twice. The hashes stay unkeyed (said in a warning, with how to switch).

With ``--upgrade-from 0.2`` (the first bounce of an upgrade, while 0.2.0 collectors may share the log) a
collector hashes as 0.2.0 does, unkeyed without a secret file, whatever the key topic holds.

A collector that generates a key writes it *before* its first log record, and one that finds the log not
empty reads the key topic again after, so a key that exists then is found: no collector ends up unkeyed
beside a keyed one because of when it started. The key is stored as 64 hex characters, the same bytes a
``--idempotency-secret-file`` would hold, so it can be copied into that file (to roll collectors back to
a release that does not read the topic: the hashes stay the same).
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

#: A key record: this prefix, then the key (64 hex characters).
KEY_RECORD = b"ocms-idempotency-key-v1 "
KEY_HEX_CHARS = 64


def key_topic(log_topic: str) -> str:
    return f"{log_topic}-key"


def parse_key_record(value: bytes | None) -> bytes | None:
    """The key a record of the key topic holds, or None for anything else (skipped with a warning)."""
    if not value or not value.startswith(KEY_RECORD):
        return None
    key = value[len(KEY_RECORD):]
    if len(key) != KEY_HEX_CHARS or any(c not in b"0123456789abcdef" for c in key):
        return None
    return key


async def kept_key(settings, log_topic: str) -> bytes:
    """The key every collector of ``log_topic`` hashes Idempotency-Keys with (b"": unkeyed, case 3)."""
    from infra.kafka import TopicMismatchError, create_topics, wait_for_late_batches

    topic = key_topic(log_topic)
    if settings.broker.late_batches:  # a key another collector wrote first must not be read past (infra.kafka)
        wait_for_late_batches(topic)
    try:
        await create_topics(settings.bootstrap_servers, {topic: 1}, settings.broker,
                            configs={topic: {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}})
    except TopicMismatchError as exc:  # made with more partitions (auto-created): partition 0 holds the key
        log.warning("idempotency key topic %s: %s; using its partition 0", topic, exc)
    key = await _first_key(settings, topic)
    if key is not None:
        log.info("Idempotency-Key hashes are keyed with the key kept in %s", topic)
        return key
    if await _holds_records(settings, log_topic):
        key = await _first_key(settings, topic)  # a collector that generated one wrote it before its first record
        if key is not None:
            log.info("Idempotency-Key hashes are keyed with the key kept in %s", topic)
            return key
        log.warning("the Idempotency-Key hashes in %s stay unkeyed: the log already holds records of collectors "
                    "that hash unkeyed (an earlier release, or no --idempotency-secret-file), and %s holds no key; "
                    "a key now would count a retry that crosses to one of them twice. To key them: give every "
                    "replica the same --idempotency-secret-file, or stop every collector and empty %s (retries of "
                    "uploads in the last --idempotency-window-seconds may then count twice)", log_topic, topic,
                    log_topic)
        return b""
    written_at = await _write_key(settings, topic, os.urandom(KEY_HEX_CHARS // 2).hex().encode("ascii"))
    # read up to this key at least: the broker's end offset can lag what it acknowledged (the embedded one does)
    key = await _first_key(settings, topic, read_to=written_at + 1)
    if key is None:  # what was just acknowledged is not readable: the broker lost it; retried by the caller
        raise ConnectionError(f"the idempotency key written to {topic} cannot be read back")
    log.info("Idempotency-Key hashes are keyed with a key generated now and kept in %s (restrict that topic to "
             "the collectors)", topic)
    return key


async def _first_key(settings, topic: str, read_to: int = 0) -> bytes | None:
    """The first key record of ``topic`` up to its end (and at least up to offset ``read_to``), or None."""
    from aiokafka import TopicPartition

    from infra.kafka import make_consumer

    consumer = make_consumer(settings.bootstrap_servers, profile=settings.broker, auto_offset_reset="earliest",
                             fetch_max_wait_ms=50, client_id="ocms-collector-key", isolation_level="read_uncommitted")
    tp = TopicPartition(topic, 0)
    await consumer.start()
    try:
        consumer.assign([tp])
        end = max((await consumer.end_offsets([tp]))[tp], read_to)
        await consumer.seek_to_beginning(tp)
        while await consumer.position(tp) < end:
            got = await consumer.getmany(tp, timeout_ms=500)
            for message in got.get(tp, ()):
                key = parse_key_record(message.value)
                if key is not None:
                    return key
                log.warning("%s offset %d: not an idempotency key record; skipped", topic, message.offset)
        return None
    finally:
        await consumer.stop()


async def _holds_records(settings, topic: str) -> bool:
    """Whether partition 0 of the idempotency log holds any record now."""
    from aiokafka import TopicPartition

    from infra.kafka import make_consumer

    consumer = make_consumer(settings.bootstrap_servers, profile=settings.broker, client_id="ocms-collector-key")
    tp = TopicPartition(topic, 0)
    await consumer.start()
    try:
        start = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        return end > start
    finally:
        await consumer.stop()


async def _write_key(settings, topic: str, key: bytes) -> int:
    """Write a key record; its offset once acknowledged."""
    from infra.kafka import make_producer

    producer = make_producer(settings.bootstrap_servers, settings.broker, idempotent=False, linger_ms=0,
                             client_id="ocms-collector-key", request_timeout_ms=settings.kafka_timeout_ms)
    await producer.start()
    try:
        return (await (await producer.send(topic, KEY_RECORD + key, partition=0))).offset
    finally:
        await producer.stop()
