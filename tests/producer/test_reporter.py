"""DeviceReporter against the real embedded broker, and fake producers for the error paths."""

import asyncio
from collections import Counter
from types import SimpleNamespace

import pytest
from aiokafka.errors import KafkaConnectionError, RequestTimedOutError, TopicAuthorizationFailedError

from cms_core.errors import InvalidParameterError, InvalidValueError, PrivacyBudgetError
from cms_core.params import OCMSParams
from cms_core.wire import decode_message
from infra.kafka import EMBEDDED, is_retriable
from producer.ledger import PrivacyLedger
from producer.reporter import DeliveryError, DeviceReporter, ReporterClosedError, new_device_key
from tests.brokers import module_broker
from tests.support.topics import read_topic

PARAMS = OCMSParams.build(epsilon=2.0, dictionary_size=1000)
REGISTRY = {PARAMS.fingerprint: PARAMS}


broker = module_broker({"dev-reports": 3, "dev-budget": 1, "dev-memo": 1})


def reporter(broker, topic, **kwargs):
    kwargs.setdefault("device_key", new_device_key())
    kwargs.setdefault("metric", "m")
    return DeviceReporter(PARAMS, bootstrap_servers=broker.bootstrap_servers, topic=topic, profile=EMBEDDED, **kwargs)


@pytest.mark.integration
def test_200_reports_from_several_devices_arrive_exactly_once_keyed_by_device(broker, tmp_path):
    keys = [b"device-%d" % i for i in range(4)]

    async def device(i):
        ledger = PrivacyLedger(tmp_path / f"d{i}.db", budget=1000.0)
        async with reporter(broker, "dev-reports", device_key=keys[i], ledger=ledger, memoize=False) as r:
            futures = [await r.submit((7 * j + i) % PARAMS.dictionary_size) for j in range(50)]
            deliveries = await asyncio.gather(*futures)
        assert ledger.spent("m") == 50 * PARAMS.epsilon
        return deliveries

    async def go():
        deliveries = sum(await asyncio.gather(*(device(i) for i in range(4))), [])
        consumed = await read_topic(broker.bootstrap_servers, "dev-reports", 200)
        return deliveries, consumed

    deliveries, consumed = asyncio.run(go())
    assert len(deliveries) == 200 and len(consumed) == 200
    # Exactly once: each acknowledged (partition, offset) is consumed once, with its bytes and key.
    by_position = {(m.partition, m.offset): m for m in consumed}
    assert len(by_position) == 200
    key_partition = {}
    for d in deliveries:
        msg = by_position[(d.partition, d.offset)]
        assert msg.value == d.message
        assert d.attempts == 1 and not d.memoized and d.epsilon_charged == PARAMS.epsilon
        key_partition.setdefault(msg.key, set()).add(msg.partition)
    assert Counter(m.key for m in consumed) == {k: 50 for k in keys}
    assert all(len(parts) == 1 for parts in key_partition.values())  # one device -> one partition
    for m in consumed:
        params, batch = decode_message(m.value, REGISTRY)
        assert params == PARAMS and len(batch) == 1


@pytest.mark.integration
def test_budget_refusal_raises_and_sends_nothing(broker, tmp_path):
    ledger = PrivacyLedger(tmp_path / "l.db", budget=2 * PARAMS.epsilon)

    async def go():
        async with reporter(broker, "dev-budget", ledger=ledger, memoize=False) as r:
            await r.report(1)
            await r.report(2)
            with pytest.raises(PrivacyBudgetError, match="budget 4.0"):
                await r.report(3)
            with pytest.raises(InvalidValueError):
                await r.report(PARAMS.dictionary_size)  # invalid: refused before the ledger
        return await read_topic(broker.bootstrap_servers, "dev-budget", 2)

    consumed = asyncio.run(go())
    assert len(consumed) == 2
    assert ledger.spent("m") == 2 * PARAMS.epsilon and ledger.charges("m") == 2


@pytest.mark.integration
def test_memoized_value_resends_identical_report_for_free(broker, tmp_path):
    ledger = PrivacyLedger(tmp_path / "l.db", budget=PARAMS.epsilon)  # room for one charge only

    async def go():
        async with reporter(broker, "dev-memo", ledger=ledger, memoize=True) as r:
            first = await r.report(5)
            second = await r.report(5)
            with pytest.raises(PrivacyBudgetError):
                await r.report(6)
        return first, second, await read_topic(broker.bootstrap_servers, "dev-memo", 2)

    first, second, consumed = asyncio.run(go())
    assert second.message == first.message
    assert (first.memoized, second.memoized) == (False, True)
    assert (first.epsilon_charged, second.epsilon_charged) == (PARAMS.epsilon, 0.0)
    assert [m.value for m in consumed] == [first.message, first.message]
    assert ledger.charges("m") == 1


def test_invalid_value_charges_nothing(tmp_path):
    ledger = PrivacyLedger(tmp_path / "l.db", budget=10.0)

    async def go():
        async with fake_reporter(FakeProducer(), ledger=ledger) as r:
            for bad in (-1, 1000, 1.5, "7", True, None):
                with pytest.raises(InvalidValueError):
                    await r.report(bad)

    asyncio.run(go())
    assert ledger.spent("m") == 0.0


# ------------------------------------------------------------------ fakes
class FakeProducer:
    """send_and_wait raises the queued errors in turn, then succeeds (optionally gated)."""

    def __init__(self, errors=(), gate: asyncio.Event | None = None, start_error=None):
        self.errors = list(errors)
        self.gate = gate
        self.start_error = start_error
        self.calls = []
        self.sending = asyncio.Event()  # set once send_and_wait has been called
        self.delivered = []
        self.config = None
        self.stopped = False

    def __call__(self, **config):  # used as the producer_factory
        self.config = config
        return self

    async def start(self):
        if self.start_error:
            raise self.start_error

    async def stop(self):
        self.stopped = True

    async def send_and_wait(self, topic, value, key=None):
        self.calls.append((topic, value, key))
        self.sending.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.errors:
            raise self.errors.pop(0)
        self.delivered.append(value)
        return SimpleNamespace(topic=topic, partition=0, offset=len(self.delivered) - 1)


def fake_reporter(fake, **kwargs):
    kwargs.setdefault("device_key", b"dev")
    kwargs.setdefault("metric", "m")
    kwargs.setdefault("retry_backoff_s", 0.001)
    return DeviceReporter(PARAMS, bootstrap_servers="fake:9092", topic="t", producer_factory=fake, **kwargs)


def test_default_producer_config_is_keyed_and_acks_all():
    fake = FakeProducer()

    async def go():
        async with fake_reporter(fake) as r:
            await r.report(1)

    asyncio.run(go())
    assert fake.config["acks"] == "all" and fake.config["bootstrap_servers"] == "fake:9092"
    assert fake.calls[0][0] == "t" and fake.calls[0][2] == b"dev"
    assert fake.stopped


def test_transient_errors_are_retried_then_delivered():
    fake = FakeProducer(errors=[KafkaConnectionError("down"), RequestTimedOutError()])

    async def go():
        async with fake_reporter(fake, max_retries=5) as r:
            return await r.report(3)

    delivery = asyncio.run(go())
    assert delivery.attempts == 3
    assert len(fake.calls) == 3 and len(set(c[1] for c in fake.calls)) == 1  # the same bytes each time
    assert fake.delivered == [delivery.message]


def test_permanent_error_surfaces_without_retry():
    fake = FakeProducer(errors=[TopicAuthorizationFailedError()])

    async def go():
        async with fake_reporter(fake) as r:
            with pytest.raises(DeliveryError, match="permanent") as info:
                await r.report(3)
            assert info.value.attempts == 1 and info.value.retriable is False
            assert isinstance(info.value.__cause__, TopicAuthorizationFailedError)
            return await r.report(4)  # the reporter keeps working

    assert asyncio.run(go()).attempts == 1
    assert len(fake.calls) == 2


def test_retries_are_bounded():
    fake = FakeProducer(errors=[KafkaConnectionError("down")] * 10)

    async def go():
        async with fake_reporter(fake, max_retries=2) as r:
            with pytest.raises(DeliveryError, match="gave up after 3 attempts") as info:
                await r.report(3)
            assert info.value.retriable is True

    asyncio.run(go())
    assert len(fake.calls) == 3


def test_start_failure_is_a_delivery_error():
    with pytest.raises(DeliveryError, match="could not start"):
        asyncio.run(fake_reporter(FakeProducer(start_error=KafkaConnectionError("refused"))).start())


def test_back_pressure_when_the_queue_is_full():
    async def go():
        gate = asyncio.Event()
        fake = FakeProducer(gate=gate)
        async with fake_reporter(fake, queue_size=2, max_in_flight=1) as r:
            futures = [await r.submit(1)]
            await asyncio.wait_for(fake.sending.wait(), 10)  # taken by the sender, blocked in send_and_wait
            futures += [await r.submit(2), await r.submit(3)]  # fill the queue
            assert r.queued == 2
            blocked = asyncio.ensure_future(r.submit(4))
            await asyncio.sleep(0.05)
            assert not blocked.done()  # back-pressure: report() awaits queue space
            assert len(fake.calls) == 1
            gate.set()
            futures.append(await asyncio.wait_for(blocked, 2))
            deliveries = await asyncio.wait_for(asyncio.gather(*futures), 2)
        return fake, deliveries

    fake, deliveries = asyncio.run(go())
    assert [d.offset for d in deliveries] == [0, 1, 2, 3]
    assert len(fake.delivered) == 4


def test_closed_reporter_refuses_reports():
    r = fake_reporter(FakeProducer())
    with pytest.raises(ReporterClosedError):
        asyncio.run(r.report(1))

    async def go():
        async with r:
            pass
        await r.report(1)

    with pytest.raises(ReporterClosedError):
        asyncio.run(go())


def test_close_without_drain_fails_pending_reports():
    async def go():
        fake = FakeProducer(gate=asyncio.Event())  # never released
        r = await fake_reporter(fake, max_in_flight=1).start()
        futures = [await r.submit(v) for v in (1, 2, 3)]
        await asyncio.wait_for(fake.sending.wait(), 10)  # report 1 in flight, 2 and 3 queued
        await r.close(drain=False)
        return await asyncio.gather(*futures, return_exceptions=True)

    results = asyncio.run(go())
    assert all(isinstance(x, ReporterClosedError) for x in results)


def test_retriable_classification():
    assert is_retriable(KafkaConnectionError())
    assert is_retriable(RequestTimedOutError())
    from aiokafka.errors import KafkaTimeoutError, RecordTooLargeError

    assert is_retriable(KafkaTimeoutError())
    assert not is_retriable(RecordTooLargeError())
    assert not is_retriable(TopicAuthorizationFailedError())
    assert not is_retriable(ValueError())


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"device_key": b""}, "device_key"),
        ({"device_key": "str"}, "device_key"),
        ({"metric": ""}, "metric"),
        ({"queue_size": 0}, "queue_size"),
        ({"max_retries": -1}, "max_retries"),
        ({"ledger": object()}, "ledger"),
    ],
)
def test_constructor_validation(kwargs, name):
    with pytest.raises(InvalidParameterError) as info:
        fake_reporter(FakeProducer(), **kwargs)
    assert info.value.name == name
