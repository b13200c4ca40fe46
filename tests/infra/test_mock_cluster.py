"""infra.mock_cluster: librdkafka's mock cluster in a child process, and its fault injection."""

import asyncio

import pytest

from infra.mock_cluster import MockCluster, MockClusterError
from tests.support.waiting import poll_until

pytestmark = [pytest.mark.integration, pytest.mark.kafka_mock]


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=3) as running:
        yield running


def produce_and_count(bootstrap: str, topic: str, partitions: int, records: int) -> dict[int, int]:
    from aiokafka.structs import TopicPartition

    from infra.kafka import MOCK, make_consumer, make_producer

    async def go():
        producer = make_producer(bootstrap, MOCK, linger_ms=5)  # idempotent, acks=all
        await producer.start()
        try:
            sent = [await producer.send(topic, b"x", partition=i % partitions) for i in range(records)]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
        consumer = make_consumer(bootstrap, profile=MOCK)
        await consumer.start()
        try:
            ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        finally:
            await consumer.stop()
        return {tp.partition: offset for tp, offset in ends.items()}

    return asyncio.run(go())


def test_multi_record_batches_have_exact_end_offsets_and_retriable_errors_are_retried(cluster):
    cluster.create_topics({"mc-basic": 4})
    assert len(cluster.bootstrap_servers.split(",")) == 3
    assert produce_and_count(cluster.bootstrap_servers, "mc-basic", 4, 2000) == {p: 500 for p in range(4)}
    # A leader move plus retriable produce errors: the idempotent producer retries, nothing doubles.
    cluster.partition_set_leader("mc-basic", 0, 2)
    cluster.push_request_errors("Produce", ["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS"])
    assert produce_and_count(cluster.bootstrap_servers, "mc-basic", 4, 400) == {p: 600 for p in range(4)}


def test_bad_commands_are_refused_with_a_message_and_the_cluster_keeps_running(cluster):
    with pytest.raises(KeyError):
        cluster.push_request_errors("NoSuchApi", ["REQUEST_TIMED_OUT"])
    with pytest.raises(MockClusterError, match="broker"):
        cluster.broker_down(99)
    cluster.create_topics({"mc-after": 1})  # still answering


def test_the_child_exits_when_its_parent_goes_away():
    cluster = MockCluster(brokers=1).start()
    child = cluster._process
    child.stdin.close()  # what the parent's death does to the pipe
    status = poll_until(child.poll, 10, f"mock cluster {child.pid} to exit after its stdin closed",
                        until=lambda code: code is not None, interval=0.05)
    assert status == 0, f"mock cluster {child.pid} exited with {status}"
    with pytest.raises(MockClusterError, match="not running"):
        cluster.create_topics({"late": 1})
    cluster.stop()
    with pytest.raises(MockClusterError, match="brokers"):
        MockCluster(brokers=0)
