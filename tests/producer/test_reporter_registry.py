"""DeviceReporter speaking names: the real registry (deploy/registry.yaml), the real
embedded broker and a real ledger; each report lands on its metric's live version, the
value name maps to the right id, each metric is charged apart, and a bad metric or value
name is a clear error with nothing charged and nothing sent."""

import asyncio
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from cms_core.errors import InvalidParameterError, InvalidValueError
from cms_core.wire import peek_header
from fleet.offline import sketch_from_messages
from infra.framing import FrameBatcher
from infra.kafka import EMBEDDED
from producer.ledger import PrivacyLedger
from producer.reporter import DeviceReporter, HttpTransport, new_device_key
from registry import UnknownMetricError, load_registry

from tests.brokers import module_broker
from tests.support.topics import read_topic

from .test_reporter import FakeProducer

REGISTRY = load_registry(Path(__file__).resolve().parents[2] / "deploy" / "registry.yaml")
TOPIC = "named-reports"


broker = module_broker({TOPIC: 2})


@pytest.mark.integration
def test_reports_name_metric_and_value_and_charge_each_metric(broker, tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.db", budget=10_000.0)
    sent = Counter({("carrier", "UA"): 300, ("flight_dest", "ATL"): 40, ("app_launches", "wallet"): 5,
                    ("app_launches@1", "home"): 7, ("flight_tailnum", "N14228"): 3})

    async def go():
        async with DeviceReporter(REGISTRY, bootstrap_servers=broker.bootstrap_servers, topic=TOPIC,
                                  device_key=new_device_key(), ledger=ledger, profile=EMBEDDED) as reporter:
            futures = [await reporter.submit(metric, value) for (metric, value), n in sent.items() for _ in range(n)]
            deliveries = await asyncio.gather(*futures)
        return deliveries, await read_topic(broker.bootstrap_servers, TOPIC, sum(sent.values()))

    deliveries, consumed = asyncio.run(go())
    assert len(deliveries) == len(consumed) == sum(sent.values())
    # Each message carries its metric's version fingerprint: the newest live one unless named.
    landed = Counter(REGISTRY.by_fingerprint(peek_header(m.value)[1]).binding for m in consumed)
    assert landed == {"carrier@1": 300, "flight_dest@1": 40, "app_launches@2": 5, "app_launches@1": 7,
                      "flight_tailnum@1": 3}
    # The ledger charges per metric (both app_launches versions share that metric's budget).
    eps = {m.name: {v.version: v.params.epsilon for v in m.versions} for m in REGISTRY.metrics}
    assert ledger.spent("carrier") == pytest.approx(300 * eps["carrier"][1])
    assert ledger.spent("flight_dest") == pytest.approx(40 * eps["flight_dest"][1])
    assert ledger.spent("app_launches") == pytest.approx(5 * eps["app_launches"][2] + 7 * eps["app_launches"][1])
    assert ledger.spent("flight_tailnum") == pytest.approx(3 * eps["flight_tailnum"][1])
    # "UA" became UA's id: its estimate is near 300 and every other carrier's near 0 (5 sigma).
    carrier = REGISTRY.metric("carrier").latest
    sketch, rejected = sketch_from_messages(carrier.params, carrier.tracked_values(),
                                            [m.value for m in consumed if peek_header(m.value)[1] == carrier.fingerprint])
    assert not rejected
    est = sketch.estimate()
    truth = np.zeros(len(carrier.value_names))
    truth[carrier.value_names.index("UA")] = 300
    assert np.all(np.abs(est.count - truth) <= 5 * est.std * est.n), (est.count, truth)
    assert est.count[carrier.value_names.index("UA")] > 150  # the negative control: not a uniform spread


@pytest.mark.parametrize("metric, value, error, says", [
    ("no_such_metric", "ATL", UnknownMetricError, "no metric 'no_such_metric'"),
    ("flight_dest", "XXX", InvalidValueError, "'XXX' is not a category"),
    ("flight_dest", 17, InvalidValueError, "17 is not a category"),
    ("app_launches@9", "home", UnknownMetricError, "no version 9"),
    ("app_launches@x", "home", InvalidParameterError, "NAME@VERSION"),
    ("app_launches@1", "wallet", InvalidValueError, "'wallet' is not a category"),  # added in version 2
    ("build_id", "abc", InvalidValueError, "build_id"),
])
def test_bad_metric_or_value_name_is_a_clear_error_and_charges_nothing(tmp_path, metric, value, error, says):
    fake, ledger = FakeProducer(), PrivacyLedger(tmp_path / "ledger.db", budget=100.0)

    async def go():
        async with DeviceReporter(REGISTRY, bootstrap_servers="fake:9092", topic="t", device_key=b"d",
                                  ledger=ledger, producer_factory=fake) as reporter:
            with pytest.raises(error) as info:
                await reporter.report(metric, value)
            await reporter.report("carrier", "AA")  # the reporter still works afterwards
        return info.value

    exc = asyncio.run(go())
    assert says.replace("'", "") in str(exc).replace("'", ""), str(exc)
    assert len(fake.delivered) == 1
    name = metric.partition("@")[0]
    if name in {m.name for m in REGISTRY.metrics}:
        assert ledger.spent(name) == 0.0
    assert ledger.spent("carrier") == pytest.approx(REGISTRY.metric("carrier").latest.params.epsilon)


def test_selection_argument_shape_and_transport_errors(tmp_path):
    fake = FakeProducer()
    kwargs = dict(bootstrap_servers="fake:9092", topic="t", device_key=b"d", producer_factory=fake)
    with pytest.raises(UnknownMetricError, match="no metric 'nope'"):
        DeviceReporter(REGISTRY, metrics=["carrier", "nope"], **kwargs)
    with pytest.raises(InvalidParameterError) as info:
        DeviceReporter(REGISTRY, metric="carrier", **kwargs)
    assert info.value.name == "metric"
    with pytest.raises(InvalidParameterError) as info:
        DeviceReporter(REGISTRY.metric("carrier").latest.params, metric="carrier", metrics=["carrier"], **kwargs)
    assert info.value.name == "metrics"
    with pytest.raises(InvalidParameterError) as info:
        DeviceReporter(REGISTRY, transport=HttpTransport("http://collector:8080", metric="carrier"))
    assert info.value.name == "transport"
    DeviceReporter(REGISTRY, metrics=["carrier"], transport=HttpTransport("http://collector:8080", metric="carrier"))

    async def go():
        async with DeviceReporter(REGISTRY, metrics=["carrier"], **kwargs) as reporter:
            with pytest.raises(UnknownMetricError, match="its metrics: carrier"):
                await reporter.report("flight_dest", "ATL")  # in the registry, not selected
            with pytest.raises(InvalidParameterError, match="metric, value name"):
                await reporter.report("UA")
        async with DeviceReporter(REGISTRY.metric("carrier").latest.params, metric="carrier", **kwargs) as reporter:
            with pytest.raises(InvalidParameterError, match="one value"):
                await reporter.report("carrier", "UA")

    asyncio.run(go())
    assert fake.delivered == []


# ------------------------------------------------------------------ gateway
def device_messages(binding_counts):
    from cms_core.privatize import privatize
    from cms_core.wire import encode_report

    out = []
    for (metric, value), n in binding_counts.items():
        version = REGISTRY.live_version(metric)
        out += [encode_report(version.params, privatize(version.params, version.value_from_name(value)))] * n
    return out


def test_gateway_batches_each_live_version_apart_and_refuses_unknown_fingerprints():
    from cms_core.params import OCMSParams
    from cms_core.privatize import privatize
    from cms_core.wire import UnknownFingerprintError, WireFormatError, decode_message, encode_report
    from producer.gateway import RegistryGateway

    frames = []

    async def sink(frame):
        frames.append(frame)

    counts = {("carrier", "UA"): 25, ("flight_dest", "ATL"): 12, ("app_launches", "wallet"): 4,
              ("app_launches@1", "home"): 9}
    messages = device_messages(counts)
    stranger = OCMSParams.build(epsilon=1.0, dictionary_size=16, binding="carrier@7")  # same numbers, no such version

    async def go():
        async with RegistryGateway(REGISTRY, send=sink, max_records=10) as gateway:
            versions = [await gateway.add(m) for m in messages]
            with pytest.raises(UnknownFingerprintError, match=f"{stranger.fingerprint.hex()} belongs to no metric"):
                await gateway.add(encode_report(stranger, privatize(stranger, 3)))
            with pytest.raises(WireFormatError, match="shorter than"):  # a damaged header
                await gateway.add(b"\x00" * 5)
        return gateway, versions

    gateway, versions = asyncio.run(go())
    assert Counter(v.binding for v in versions) == {"carrier@1": 25, "flight_dest@1": 12, "app_launches@2": 4,
                                                    "app_launches@1": 9}
    assert {k: v for k, v in gateway.records_by_metric.items() if v} == Counter(v.binding for v in versions)
    by_version = Counter()
    params = {v.fingerprint: v.params for v in REGISTRY.versions()}
    for frame in frames:
        p, batch = decode_message(frame, params)
        assert len(batch) <= 10
        by_version[REGISTRY.by_fingerprint(p.fingerprint).binding] += len(batch)
    assert by_version == Counter(v.binding for v in versions)  # nothing lost, nothing mixed, nothing extra

    only_carrier = RegistryGateway(REGISTRY, send=sink, metrics=["carrier"])
    with pytest.raises(UnknownFingerprintError, match="is flight_dest@1, which is retired or not served here"):
        asyncio.run(only_carrier.add(device_messages({("flight_dest", "ATL"): 1})[0]))


def test_frame_batcher_for_a_registry_metric():
    frames = []

    async def sink(frame):
        frames.append(frame)

    batcher = FrameBatcher.for_metric(REGISTRY, "app_launches@1", send=sink)
    assert batcher.params.fingerprint == REGISTRY.metric("app_launches").version(1).fingerprint
    assert FrameBatcher.for_metric(REGISTRY, "app_launches", send=sink).params.fingerprint == \
        REGISTRY.metric("app_launches").version(2).fingerprint
    with pytest.raises(UnknownMetricError, match="no metric 'flights'"):
        FrameBatcher.for_metric(REGISTRY, "flights", send=sink)


def test_memoization_is_per_metric_and_version(tmp_path):
    """A repeat of the same value name in the same period is free for that metric version only:
    'home' of app_launches@1 and of app_launches@2 are different reports, each charged once."""
    fake, ledger = FakeProducer(), PrivacyLedger(tmp_path / "ledger.db", budget=100.0)

    async def go():
        async with DeviceReporter(REGISTRY, bootstrap_servers="fake:9092", topic="t", device_key=b"d",
                                  ledger=ledger, memoize=True, producer_factory=fake) as reporter:
            first = await reporter.report("app_launches", "home")
            again = await reporter.report("app_launches", "home")
            old = await reporter.report("app_launches@1", "home")
            other = await reporter.report("carrier", "UA")
        return first, again, old, other

    first, again, old, other = asyncio.run(go())
    assert again.memoized and again.message == first.message and again.epsilon_charged == 0.0
    assert not old.memoized and peek_header(old.message)[1] == REGISTRY.metric("app_launches").version(1).fingerprint
    assert not other.memoized
    eps = {v.version: v.params.epsilon for v in REGISTRY.metric("app_launches").versions}
    assert ledger.spent("app_launches") == pytest.approx(eps[2] + eps[1])
    assert ledger.spent("carrier") == pytest.approx(REGISTRY.metric("carrier").latest.params.epsilon)
