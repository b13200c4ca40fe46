"""FrameBatcher: size and latency bounds, order, errors; KafkaFrameSink against the embedded broker."""

import asyncio
import time

import numpy as np
import pytest

from cms_core.errors import InvalidParameterError, InvalidReportError
from cms_core.params import OCMSParams
from cms_core.privatize import privatize, simulate_reports
from cms_core.reports import Report, ReportBatch
from cms_core.wire import HEADER_SIZE, WireFormatError, decode_message, encode_report, record_size
from infra.framing import FrameBatcher, FrameSendError, KafkaFrameSink
from tests.support.topics import read_topic

PARAMS = OCMSParams.build(epsilon=2.0, dictionary_size=1000)
REGISTRY = {PARAMS.fingerprint: PARAMS}


def reports(n, seed=0):
    rng = np.random.default_rng(seed)
    return simulate_reports(PARAMS, rng.integers(0, 1000, n).astype(np.uint64), rng).to_reports()


class Sink:
    def __init__(self, fail=0):
        self.frames = []
        self.times = []
        self.fail = fail
        self.attempts = 0

    async def __call__(self, frame):
        self.attempts += 1
        if self.fail:
            self.fail -= 1
            raise ConnectionError("sink down")
        self.frames.append(frame)
        self.times.append(time.monotonic())

    def decoded(self):
        return [decode_message(f, REGISTRY)[1] for f in self.frames]

    def all_reports(self):
        return [r for b in self.decoded() for r in b.to_reports()]


def test_frames_respect_max_records_and_keep_order():
    sent = reports(2500)
    sink = Sink()

    async def go():
        async with FrameBatcher(PARAMS, send=sink, max_records=1000, max_latency_s=30) as batcher:
            for r in sent:
                await batcher.add(r)
            assert [len(b) for b in sink.decoded()] == [1000, 1000]  # sent as soon as full
            assert batcher.buffered == 500
        assert batcher.frames_sent == 3 and batcher.records_sent == 2500

    asyncio.run(go())
    assert [len(b) for b in sink.decoded()] == [1000, 1000, 500]  # the close flushed the rest
    assert sink.all_reports() == sent


def test_large_batches_are_split_across_frames_in_order():
    sent = reports(950, seed=1)
    sink = Sink()

    async def go():
        async with FrameBatcher(PARAMS, send=sink, max_records=300, max_latency_s=30) as batcher:
            await batcher.add(ReportBatch.from_reports(PARAMS, sent[:100]))
            await batcher.add(ReportBatch.from_reports(PARAMS, sent[100:800]))  # 800 -> 2 frames + 200
            assert [len(b) for b in sink.decoded()] == [300, 300]
            await batcher.add(sent[800:900])  # a list of Reports: fills the third frame
            assert len(sink.frames) == 3
            for r in sent[900:]:
                await batcher.add(encode_report(PARAMS, r))  # single-report wire messages
            assert await batcher.flush() == 1

    asyncio.run(go())
    assert [len(b) for b in sink.decoded()] == [300, 300, 300, 50]
    assert sink.all_reports() == sent


def test_frame_bytes_cap_records_per_frame():
    size = record_size(PARAMS)
    batcher = FrameBatcher(PARAMS, send=Sink(), max_records=1000, max_frame_bytes=HEADER_SIZE + 10 * size + 1)
    assert batcher.max_records == 10


async def until(condition, what: str, timeout: float = 10.0) -> None:
    """Let the batcher's timer run until ``condition()`` holds; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        await asyncio.sleep(0.005)


def test_latency_bound_flushes_without_a_call():
    sink = Sink()
    latency = 0.1

    async def go():
        async with FrameBatcher(PARAMS, send=sink, max_records=1000, max_latency_s=latency) as batcher:
            added = time.monotonic()
            for r in reports(3):
                await batcher.add(r)
            assert sink.frames == []  # adding below max_records sends nothing
            await until(lambda: len(sink.frames) == 1, "the latency bound sent the first burst")
            assert [len(b) for b in sink.decoded()] == [3]
            assert sink.times[0] - added >= latency * 0.95  # not before it was due
            # A second burst gets its own deadline, measured from its first report.
            second = time.monotonic()
            await batcher.add(reports(2, seed=3)[0])
            await until(lambda: len(sink.frames) == 2, "the latency bound sent the second burst")
            assert [len(b) for b in sink.decoded()] == [3, 1]
            assert sink.times[1] - second >= latency * 0.95
            assert batcher.buffered == 0

    asyncio.run(go())


def test_send_failure_carries_the_frame():
    sent = reports(4)
    sink = Sink(fail=1)

    async def go():
        batcher = FrameBatcher(PARAMS, send=sink, max_records=2, max_latency_s=30)
        await batcher.add(sent[0])
        with pytest.raises(FrameSendError) as info:
            await batcher.add(sent[1])
        assert info.value.records == 2
        assert decode_message(info.value.frame, REGISTRY)[1].to_reports() == sent[:2]
        await batcher.add(sent[2])
        await batcher.add(sent[3])
        await batcher.close()

    asyncio.run(go())
    assert sink.all_reports() == sent[2:]


def test_timer_send_failure_surfaces_on_next_call():
    sent = reports(3)
    sink = Sink(fail=1)

    async def go():
        async with FrameBatcher(PARAMS, send=sink, max_records=100, max_latency_s=0.02) as batcher:
            await batcher.add(sent[0])
            await until(lambda: sink.attempts == 1, "the timer tried to send the frame")
            with pytest.raises(FrameSendError) as info:
                await batcher.add(sent[1])  # accepted, then the timer's error is raised
            assert decode_message(info.value.frame, REGISTRY)[1].to_reports() == sent[:1]
            await batcher.add(sent[2])

    asyncio.run(go())
    assert sink.all_reports() == sent[1:]


def test_invalid_input_is_rejected_before_buffering():
    sink = Sink()

    async def go():
        async with FrameBatcher(PARAMS, send=sink) as batcher:
            with pytest.raises(InvalidReportError):
                await batcher.add(Report(0, 0, PARAMS.hash_range))  # z out of range
            with pytest.raises(InvalidReportError):
                await batcher.add(Report(PARAMS.field.order, 0, 0))
            with pytest.raises(InvalidReportError):
                await batcher.add([Report(2**70, 0, 0)])
            with pytest.raises(WireFormatError):
                await batcher.add(b"not a wire message")
            with pytest.raises(InvalidReportError):
                await batcher.add(42)
            assert batcher.buffered == 0

    asyncio.run(go())
    assert sink.frames == []


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"max_records": 0}, "max_records"),
        ({"max_latency_s": 0}, "max_latency_s"),
        ({"max_latency_s": float("inf")}, "max_latency_s"),
        ({"max_frame_bytes": HEADER_SIZE}, "max_frame_bytes"),
        ({"send": None}, "send"),
    ],
)
def test_constructor_validation(kwargs, name):
    kwargs = {"send": Sink(), **kwargs}
    with pytest.raises(InvalidParameterError) as info:
        FrameBatcher(PARAMS, **kwargs)
    assert info.value.name == name


@pytest.mark.integration
def test_frames_through_kafka_sink_to_the_embedded_broker():
    from infra.broker import EmbeddedBroker
    from infra.kafka import EMBEDDED

    sent = [privatize(PARAMS, v % 1000) for v in range(250)]  # device path reports

    async def go(servers):
        async with KafkaFrameSink(servers, "gw-frames", key=b"gateway-1", profile=EMBEDDED) as sink:
            async with FrameBatcher(PARAMS, send=sink, max_records=100, max_latency_s=0.05) as batcher:
                for r in sent:
                    await batcher.add(r)
        return await read_topic(servers, "gw-frames", 3)

    with EmbeddedBroker() as broker:
        broker.create_topics({"gw-frames": 1})
        got = asyncio.run(go(broker.bootstrap_servers))
    assert [m.key for m in got] == [b"gateway-1"] * 3
    batches = [decode_message(m.value, REGISTRY)[1] for m in got]
    assert [len(b) for b in batches] == [100, 100, 50]
    assert [r for b in batches for r in b.to_reports()] == sent
