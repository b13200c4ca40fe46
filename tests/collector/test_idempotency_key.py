"""The Idempotency-Key hashes are keyed by default (collector/exactly_once/key.py): a key generated at a fresh
deployment's first start and kept in ``<log topic>-key``, the same for every replica and restart; unkeyed only
beside a log that collectors hashing unkeyed already wrote; a secret file wins."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from collector.exactly_once.key import KEY_RECORD, key_topic, kept_key, parse_key_record
from collector.exactly_once.log import LISTING, decode_listing, key_hash
from collector.settings import CollectorSettings
from infra.broker import EmbeddedBroker
from tests.support.topics import consume, produce

from .harness import CollectorProcess, request, single_messages

pytestmark = pytest.mark.integration  # an embedded broker


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        b.create_topics({"key-e2e": 2})
        yield b


def _settings(registry_path, broker) -> CollectorSettings:
    return CollectorSettings.build(registry=str(registry_path), bootstrap_servers=broker.bootstrap_servers,
                                   broker="embedded")


def test_parse_key_record_takes_only_a_well_formed_key():
    good = "ab" * 32
    assert parse_key_record(KEY_RECORD + good.encode()) == good.encode()
    for bad in (None, b"", good.encode(), KEY_RECORD + b"ab" * 31, KEY_RECORD + b"AB" * 32, KEY_RECORD + b"zz" * 32):
        assert parse_key_record(bad) is None, bad


def test_a_fresh_log_gets_one_generated_key_that_every_replica_and_restart_reads(broker, registry_path):
    settings = _settings(registry_path, broker)

    async def main():
        # two replicas starting together both find no key and generate one: both use the first written
        first, second = await asyncio.gather(kept_key(settings, "fresh-log"), kept_key(settings, "fresh-log"))
        later = await kept_key(settings, "fresh-log")  # a restart, or a replica that joins later
        return first, second, later

    first, second, later = asyncio.run(main())
    assert first == second == later
    assert len(first) == 64 and int(first, 16) >= 0
    records = [parse_key_record(r.value) for r in consume(broker.bootstrap_servers, key_topic("fresh-log"))]
    assert records[0] == first


def test_beside_a_log_written_by_unkeyed_collectors_the_hashes_stay_unkeyed(broker, registry_path, caplog):
    """Collectors of 0.2.0 hash unkeyed and never read the key topic: while their records are in the log, a key
    would count a retry that crosses from one of them to a new collector twice. A malformed record in the key
    topic is skipped, not taken for a key."""
    broker.create_topics({"legacy-log": 1, key_topic("legacy-log"): 1})
    produce(broker.bootstrap_servers, [("legacy-log", 0, LISTING + bytes(60), []),
                                       (key_topic("legacy-log"), 0, b"not a key", [])])
    assert asyncio.run(kept_key(_settings(registry_path, broker), "legacy-log")) == b""
    assert "stay unkeyed" in caplog.text and "not an idempotency key record" in caplog.text


def test_the_collector_lists_keyed_hashes_and_a_retry_after_its_restart_is_replayed(broker, registry_path, dest,
                                                                                     tmp_path):
    """End to end: the listing holds the hash under the kept key (not the unkeyed one, which whoever reads the
    log could compute from a key seen elsewhere), and the restarted collector reads the same key: the retry
    of an upload stored before the restart is answered from the log, not stored again."""
    body = b"".join(single_messages(dest, 3, seed=5))
    upload_key = secrets.token_urlsafe(18)
    with CollectorProcess(registry_path, broker.bootstrap_servers, "key-e2e", tmp_path, "--instance-id", "key-a") as c:
        assert request(c.url + "/v1/reports", body, headers={"Idempotency-Key": upload_key})[0] == 202
    kept = next(k for k in (parse_key_record(r.value) for r in consume(broker.bootstrap_servers,
                                                                          key_topic("key-e2e-idempotency"))) if k)
    listed = {k for r in consume(broker.bootstrap_servers, "key-e2e-idempotency") if r.value[:1] == LISTING
              for k in decode_listing(r.value, r.offset, 0.0).keys}
    assert key_hash(kept, "", upload_key) in listed
    assert key_hash(b"", "", upload_key) not in listed
    with CollectorProcess(registry_path, broker.bootstrap_servers, "key-e2e", tmp_path, "--instance-id", "key-a") as c:
        status, _, headers = request(c.url + "/v1/reports", body, headers={"Idempotency-Key": upload_key})
        assert status == 202 and headers.get("Idempotent-Replayed") == "true"
