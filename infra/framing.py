"""Frames: pack reports (from many devices) into wire-format frames, and send them to Kafka.

A frame (:func:`cms_core.wire.encode_frame`) amortises the 16-byte header and,
far more, the per-message broker and consumer overhead. The batcher buffers
reports and sends a frame when

* ``max_records`` reports are buffered (also capped so a frame stays under
  ``max_frame_bytes``, Kafka's default message limit being 1 MiB), or
* ``max_latency_s`` has passed since the first report of the current frame was
  buffered (a background timer), or
* :meth:`FrameBatcher.flush` is called, or the ``async with`` block ends.

Reports keep their arrival order across frames. ``add`` awaits the send of any
frame it fills (back-pressure). A failed send raises :class:`FrameSendError`
carrying the encoded frame, so the caller can retry it; a failure in the
timer's send is raised by the next ``add``/``flush``/``close``. Nothing is
dropped silently.

    async with KafkaFrameSink(servers, "ocms-reports") as sink:
        async with FrameBatcher(params, send=sink, max_records=1000, max_latency_s=0.05) as batcher:
            await batcher.add(report)            # Report, ReportBatch, [Report...] or a wire message

Named metrics: ``FrameBatcher.for_metric(registry, "flight_dest", send=sink)`` batches one
registry metric (its newest live version, or "name@N"); a tree version's (issue 40) is a
:class:`PartsFrameBatcher`, a batcher per level routed by each message's fingerprint (or "name@N/level<l>",
one level), as is a version with a Hybrid mean's part ("name@N/mean"). The collector's lanes, the fleet
simulator and a device-side gateway (``producer.gateway.RegistryGateway``, a :class:`FrameBatchers` of its
versions) batch with it. A batcher sees no
values, only privatized reports; it must not attach device identifiers to frames (the frame key is
None or a gateway id). See docs/device.md.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Iterable, Self

from cms_core.errors import InvalidParameterError, InvalidReportError, OCMSError
from cms_core.params import OCMSParams
from cms_core.reports import Report, ReportBatch
from cms_core.wire import (HEADER_SIZE, MAX_FRAME_RECORDS, UnknownFingerprintError, decode_message, encode_frame,
                           peek_header, record_size)

from .kafka import KAFKA, BrokerProfile, aiokafka_producer
from .kafka import producer_config as kafka_producer_config

#: Kafka's default max.message.bytes is 1 MiB (1048588 with overhead); stay below it.
DEFAULT_MAX_FRAME_BYTES = 1_000_000


class FrameSendError(OCMSError, RuntimeError):
    """Sending a frame failed; ``frame`` holds the encoded frame and ``records`` its report count."""

    def __init__(self, message: str, *, frame: bytes, records: int):
        super().__init__(message)
        self.frame = frame
        self.records = records


class FrameBatcher:
    """Buffer reports and send them as frames bounded in size and latency.

    Args:
        params: the parameters every report must fit (validated on ``add``).
        send: ``async send(frame_bytes)``, e.g. a :class:`KafkaFrameSink`.
        max_records: most reports per frame.
        max_latency_s: longest a buffered report waits before its frame is sent.
        max_frame_bytes: most bytes per frame (caps ``max_records`` further).
        clock: monotonic seconds (tests may inject one).
    """

    #: The registry metric this batcher serves ("name" / "name@N"; set by ``for_metric``).
    metric: str | None = None

    def __init__(
        self,
        params: OCMSParams,
        *,
        send: Callable[[bytes], Awaitable[Any]],
        max_records: int = 1000,
        max_latency_s: float = 0.05,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not isinstance(params, OCMSParams):
            raise InvalidParameterError("params", type(params).__name__, "must be an OCMSParams")
        if not callable(send):
            raise InvalidParameterError("send", send, "must be an async callable taking the frame bytes")
        if isinstance(max_records, bool) or not isinstance(max_records, int) or not 1 <= max_records <= MAX_FRAME_RECORDS:
            raise InvalidParameterError("max_records", max_records, f"must be an integer in [1, {MAX_FRAME_RECORDS}]")
        if (isinstance(max_latency_s, bool) or not isinstance(max_latency_s, (int, float))
                or not 0 < max_latency_s < float("inf")):
            raise InvalidParameterError("max_latency_s", max_latency_s, "must be a finite number > 0")
        size = record_size(params)
        if isinstance(max_frame_bytes, bool) or not isinstance(max_frame_bytes, int) or max_frame_bytes < HEADER_SIZE + size:
            raise InvalidParameterError("max_frame_bytes", max_frame_bytes,
                                        f"must be an integer >= {HEADER_SIZE + size} (one record)")
        self.params = params
        self.send = send
        self.max_records = min(max_records, (max_frame_bytes - HEADER_SIZE) // size)
        self.max_latency_s = float(max_latency_s)
        self.max_frame_bytes = max_frame_bytes
        self.clock = clock
        self._registry = {params.fingerprint: params}
        self._chunks: list[ReportBatch] = []
        self._count = 0
        self._first_at: float | None = None
        self._lock = asyncio.Lock()
        self._pending = asyncio.Event()
        self._timer: asyncio.Task | None = None
        self._error: BaseException | None = None
        self._no_error = asyncio.Event()
        self._no_error.set()
        self._last_add_at: float | None = None
        self._closed = False
        self.frames_sent = 0
        self.records_sent = 0

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> "FrameBatcher":
        if self._timer is None:
            self._timer = asyncio.create_task(self._timer_loop(), name="ocms-frame-batcher-timer")
        return self

    async def close(self) -> None:
        """Send what is buffered, stop the timer, raise a pending send error."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.flush()
        finally:
            timer, self._timer = self._timer, None
            if timer is not None:
                timer.cancel()
                await asyncio.gather(timer, return_exceptions=True)

    async def __aenter__(self) -> "FrameBatcher":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def buffered(self) -> int:
        return self._count

    @classmethod
    def for_metric(cls, registry, metric: str, **kwargs) -> "FrameBatcher | PartsFrameBatcher":
        """A batcher of one registry metric: "name" (its newest live version), "name@N", or one part of a version
        given by its binding: a tree version's level, "name@N/level<l>", or a Hybrid mean's part, "name@N/mean"
        (a batcher of that part's parameters).

        A version reported in parts (issue 40: a numeric metric as a hierarchical histogram, or with a Hybrid mean)
        named "name" or "name@N" gets a :class:`PartsFrameBatcher`: its reports come a part each, every part with
        its own parameters and fingerprint, and one batcher of the version's own would refuse the other parts'
        messages and frame their bare Reports as buckets. UnknownMetricError names an unknown metric or version
        (and a retired one); InvalidParameterError a part the version does not have."""
        name, slash, part = metric.partition("/")
        version = registry.live_version(name)
        if slash:
            version = version_part(version, part, metric)
        elif version.hierarchy is not None or version.mean_parts():
            return PartsFrameBatcher(version, metric, **kwargs)
        batcher = cls(version.params, **kwargs)
        batcher.metric = metric
        return batcher

    # ---------------------------------------------------------------- adding
    def _as_batch(self, item) -> ReportBatch:
        if isinstance(item, ReportBatch):
            return item.validate(self.params)
        if isinstance(item, Report):
            item = [item]
        if isinstance(item, (bytes, bytearray, memoryview)):
            return decode_message(bytes(item), self._registry)[1]  # WireFormatError if invalid
        if isinstance(item, Iterable) and not isinstance(item, str):
            reports = list(item)
            if not all(isinstance(r, Report) for r in reports):
                raise InvalidReportError("expected Report objects")
            try:
                batch = ReportBatch.from_reports(self.params, reports)
            except (OverflowError, TypeError, ValueError) as exc:
                if isinstance(exc, OCMSError):
                    raise
                raise InvalidReportError(f"report fields do not fit the field {self.params.field}: {exc}") from exc
            return batch.validate(self.params)
        raise InvalidReportError(f"cannot batch a {type(item).__name__}: expected a Report, ReportBatch or wire message")

    def _raise_pending_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            self._no_error.set()
            raise error

    async def add(self, item) -> None:
        """Buffer a Report, a ReportBatch, a list of Reports or a wire message; send full frames.

        Invalid input raises (InvalidReportError, WireFormatError) before anything is
        buffered; otherwise the item is accepted, and a FrameSendError (this call's
        send, or an earlier timer send) means the frame in ``error.frame`` was not sent.
        """
        if self._closed:
            raise OCMSError("the frame batcher is closed")
        batch = self._as_batch(item)
        if len(batch):
            if self._timer is None:
                await self.start()
            async with self._lock:
                now = self._last_add_at = self.clock()
                if self._count == 0:
                    self._first_at = now
                    self._pending.set()
                self._chunks.append(batch)
                self._count += len(batch)
                if self._count >= self.max_records:
                    await self._send_buffered(full_only=True)
        self._raise_pending_error()

    async def flush(self) -> int:
        """Send everything buffered now; returns the number of frames sent."""
        async with self._lock:
            frames = await self._send_buffered(full_only=False)
        self._raise_pending_error()
        return frames

    # --------------------------------------------------------------- sending
    async def _send_buffered(self, *, full_only: bool) -> int:
        """Send frames from the buffer (lock held). Leftovers (full_only) stay buffered."""
        if self._count == 0:
            return 0
        everything = self._chunks[0] if len(self._chunks) == 1 else ReportBatch.concat(self._chunks)
        total, start, frames = len(everything), 0, 0
        self._chunks, self._count = [everything], total
        try:
            while total - start >= self.max_records or (not full_only and start < total):
                stop = min(start + self.max_records, total)
                frame = encode_frame(self.params, everything.slice(start, stop))
                try:
                    await self.send(frame)
                except Exception as exc:
                    start = stop  # the frame travels with the error; never sent twice from here
                    raise FrameSendError(
                        f"sending a frame of {len(frame)} bytes failed: {type(exc).__name__}: {exc}",
                        frame=frame, records=frame_len(frame, self.params),
                    ) from exc
                frames += 1
                self.frames_sent += 1
                self.records_sent += stop - start
                start = stop
        finally:
            rest = everything.slice(start, total) if start else everything
            self._chunks = [rest] if len(rest) else []
            if start and len(rest):
                # Leftovers of a size flush all came with the add that filled the frame.
                self._first_at = self._last_add_at if self._last_add_at is not None else self.clock()
            self._count = len(rest)
            if self._count == 0:
                self._first_at = None
                self._pending.clear()
        return frames

    async def _timer_loop(self) -> None:
        while True:
            await self._no_error.wait()  # one undelivered frame error at a time
            await self._pending.wait()
            first = self._first_at
            if first is None:
                self._pending.clear()
                continue
            delay = first + self.max_latency_s - self.clock()
            if delay > 0:
                await asyncio.sleep(delay)
            async with self._lock:
                if self._first_at is not None and self.clock() >= self._first_at + self.max_latency_s:
                    try:
                        await self._send_buffered(full_only=False)
                    except Exception as exc:
                        self._error = exc
                        self._no_error.clear()


class FrameBatchers:
    """A :class:`FrameBatcher` per parameter set, each wire message buffered in its fingerprint's: a frame carries
    one fingerprint, so parameter sets never mix. A registry's served versions (producer.gateway.RegistryGateway)
    and a version's parts (:class:`PartsFrameBatcher`: a tree's levels, a Hybrid mean's) are batched so. Same limits for all
    (``**batcher_kwargs``), every frame to the one ``send``."""

    def __init__(self, params_sets: Iterable[OCMSParams], *, send: Callable[[bytes], Awaitable[Any]],
                 **batcher_kwargs):
        self.batchers = {p.fingerprint: FrameBatcher(p, send=send, **batcher_kwargs) for p in params_sets}

    def batcher_for(self, message) -> tuple[bytes, FrameBatcher | None]:
        """(the fingerprint of a wire message, its batcher or None when no set here has it). Raises
        InvalidReportError for what is not bytes and WireFormatError for a damaged header."""
        if not isinstance(message, (bytes, bytearray, memoryview)):
            raise InvalidReportError(f"expected a wire message (bytes), not a {type(message).__name__}")
        _, fingerprint, _ = peek_header(bytes(message))
        return fingerprint, self.batchers.get(fingerprint)

    async def start(self) -> Self:
        for batcher in self.batchers.values():
            await batcher.start()
        return self

    async def flush(self) -> int:
        """Send every set's buffered reports; returns the frames sent."""
        return sum([await b.flush() for b in self.batchers.values()])

    async def close(self) -> None:
        errors = []
        for batcher in self.batchers.values():
            try:
                await batcher.close()
            except Exception as exc:  # close every batcher; raise the first failure after
                errors.append(exc)
        if errors:
            raise errors[0]

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def frames_sent(self) -> int:
        return sum(b.frames_sent for b in self.batchers.values())

    @property
    def records_sent(self) -> int:
        return sum(b.records_sent for b in self.batchers.values())

    @property
    def buffered(self) -> int:
        return sum(b.buffered for b in self.batchers.values())


class PartsFrameBatcher(FrameBatchers):
    """What :meth:`FrameBatcher.for_metric` gives for a version reported in parts (issue 40): a tree version's
    levels, and a Hybrid mean's part, each a parameter version of the metric (its binding ``name@N/level<l>`` or
    ``name@N/mean``). Each device message is framed with its part's parameters and fingerprint, as the collector
    and the worker count them. ``params`` are the version's own (a tree's: its finest level's).

    It takes wire messages only: a bare Report or ReportBatch carries no part, and framing it with a wrong one
    would count it as other nodes or values, so it is refused, pointing to ``for_metric(registry, "name@N/<part>")``."""

    def __init__(self, version, metric: str, **kwargs):
        self.version, self.metric, self.levels = version, metric, version.tree_levels()
        self.parts = (self.levels or (version,)) + version.mean_parts()
        self.params = version.params
        super().__init__([part.params for part in self.parts], **kwargs)

    async def add(self, message) -> int | str | None:
        """Buffer one wire message (a report or a frame) of any part; returns its part: a tree's level (1 the
        coarsest), ``"mean"`` for the Hybrid mean's, None for a flat version's own reports."""
        if not isinstance(message, (bytes, bytearray, memoryview)):
            kind, one = ("a hierarchical histogram", "level<l>") if self.levels else \
                ("reported in parts (a Hybrid mean's and its own)", "mean")
            names = ", ".join(part.binding for part in self.parts)
            raise InvalidReportError(
                f"{self.version.binding} is {kind}: a {type(message).__name__} carries no level; "
                f"add each report's wire message (it carries its part's fingerprint), or batch one part with "
                f"FrameBatcher.for_metric(registry, '{self.version.binding}/{one}') (its parts: {names})")
        fingerprint, batcher = self.batcher_for(message)
        if batcher is None:
            word = "level" if len(self.parts) == len(self.levels) else "part"  # a tree's parts are its levels
            parts = ", ".join(f"{part.binding} {part.fingerprint.hex()}" for part in self.parts)
            raise UnknownFingerprintError(f"parameter fingerprint {fingerprint.hex()} is of no {word} of "
                                          f"{self.version.binding} (its {word}s: {parts})")
        await batcher.add(message)
        part = next(part for part in self.parts if part.fingerprint == fingerprint)
        return part.tree_level if part.tree_level is not None else part.report_part


def version_part(version, part: str, metric: str):
    """The part ``part`` of ``version``: a tree's level ("level<l>", :func:`tree_level`) or its Hybrid mean's
    ("mean"); ``metric`` is the name asked for (InvalidParameterError names it)."""
    if part == "mean":
        parts = version.mean_parts()
        if not parts:
            raise InvalidParameterError("metric", metric, f"{version.binding} has no Hybrid mean part "
                                        "(numeric.mean_mechanism: hybrid gives one)")
        return parts[0]
    return tree_level(version, part, metric)


def tree_level(version, level: str, metric: str):
    """The level ``level`` ("level<l>") of the tree ``version`` as a parameter version of its own; ``metric`` is
    the name asked for (InvalidParameterError names it, and the version's levels)."""
    levels = version.tree_levels()
    if not levels:
        raise InvalidParameterError("metric", metric, f"{version.binding} is not a hierarchical histogram: "
                                    "only a tree version has levels (name@N/level<l>)")
    for candidate in levels:
        if f"level{candidate.tree_level}" == level:
            return candidate
    raise InvalidParameterError("metric", metric, f"{version.binding} has the levels "
                                f"{', '.join(f'level{c.tree_level}' for c in levels)}")


def frame_len(frame: bytes, params: OCMSParams) -> int:
    return (len(frame) - HEADER_SIZE) // record_size(params)


class StartStopContext:
    """``async with`` for a class whose ``async start()`` returns it started and ``async stop()`` stops it."""

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()


class KafkaFrameSink(StartStopContext):
    """Send frames to a Kafka topic with aiokafka (``acks="all"``); usable as a batcher's ``send``.

    ``key`` is None (frames spread over partitions) or a gateway id; never a
    device key. ``profile``: the broker's (:mod:`infra.kafka`).
    ``producer_factory(**config)`` can replace AIOKafkaProducer.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        key: bytes | None = None,
        profile: BrokerProfile = KAFKA,
        producer_factory: Callable[..., Any] | None = None,
        producer_config: dict | None = None,
    ):
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers:
            raise InvalidParameterError("bootstrap_servers", bootstrap_servers, "must be a non-empty string")
        if not isinstance(topic, str) or not topic:
            raise InvalidParameterError("topic", topic, "must be a non-empty string")
        if key is not None and not isinstance(key, (bytes, bytearray)):
            raise InvalidParameterError("key", type(key).__name__, "must be bytes or None")
        self.topic = topic
        self.key = bytes(key) if key is not None else None
        self._config = kafka_producer_config(bootstrap_servers, profile, linger_ms=0, **(producer_config or {}))
        self._factory = producer_factory or aiokafka_producer
        self._producer = None

    async def start(self) -> "KafkaFrameSink":
        if self._producer is None:
            producer = self._factory(**self._config)
            await producer.start()
            self._producer = producer
        return self

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def __call__(self, frame: bytes):
        if self._producer is None:
            raise OCMSError("the frame sink is not started; use 'async with KafkaFrameSink(...)'")
        return await self._producer.send_and_wait(self.topic, frame, key=self.key)


__all__ = ["DEFAULT_MAX_FRAME_BYTES", "FrameBatcher", "FrameBatchers", "FrameSendError", "KafkaFrameSink",
           "StartStopContext", "PartsFrameBatcher"]
