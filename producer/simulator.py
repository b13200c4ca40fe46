"""Fleet simulator: synthetic devices privatize dataset values and send reports.

Uses the *simulation* privatization path (seeded numpy, vectorized): it is a
load generator with known ground truth, not a device. For a given seed and
``--reports`` count the values, device ids and reports are deterministic
(chunk by chunk), so ground truth and captures can be regenerated exactly.

Messages: with ``frame_size == 1`` one single-report message per report, keyed
by the device key (``dev-<id>``), as devices send them; with ``frame_size > 1``
frames of up to ``frame_size`` reports, keyed by a gateway key, as gateways
send them.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from cms_core import OCMSParams, wire
from cms_core.errors import InvalidParameterError
from cms_core.privatize import simulate_reports
from cms_core.reports import ReportBatch

from .capture import CaptureWriter

DEFAULT_CHUNK = 50_000


@dataclass(frozen=True)
class SimulationSettings:
    params: OCMSParams
    dataset: object  # producer.datasets.Dataset
    reports: int | None = None
    duration_s: float | None = None
    rate: float | None = None
    devices: int = 10_000
    frame_size: int = 1000
    seed: int = 0
    gateways: int = 16

    def __post_init__(self):
        if (self.reports is None) == (self.duration_s is None):
            raise InvalidParameterError("reports", self.reports, "give exactly one of reports or duration")
        if self.reports is not None and (not isinstance(self.reports, int) or self.reports < 1):
            raise InvalidParameterError("reports", self.reports, "must be an integer >= 1")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise InvalidParameterError("duration", self.duration_s, "must be a finite number of seconds > 0")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise InvalidParameterError("rate", self.rate, "must be a finite number of reports/s > 0")
        if not isinstance(self.devices, int) or self.devices < 1:
            raise InvalidParameterError("devices", self.devices, "must be an integer >= 1")
        if not isinstance(self.frame_size, int) or not 1 <= self.frame_size <= wire.MAX_FRAME_RECORDS:
            raise InvalidParameterError("frame_size", self.frame_size, f"must be in 1..{wire.MAX_FRAME_RECORDS}")
        if self.params.value_domain != "integer" or self.params.dictionary_size != self.dataset.dictionary_size:
            raise InvalidParameterError(
                "dictionary_size", self.params.dictionary_size,
                f"parameters must be built for the dataset's integer dictionary d={self.dataset.dictionary_size}",
            )

    @property
    def chunk(self) -> int:
        size = DEFAULT_CHUNK
        if self.rate is not None:  # keep bursts short at low rates
            size = max(1, min(size, int(self.rate / 10)))
        if self.frame_size > 1:
            size = max(self.frame_size, size - size % self.frame_size)
        return size


@dataclass
class SimulationResult:
    reports: int = 0
    messages: int = 0
    seconds: float = 0.0
    counts: np.ndarray | None = None

    @property
    def reports_per_second(self) -> float:
        return self.reports / self.seconds if self.seconds > 0 else math.inf


def generate(settings: SimulationSettings) -> Iterator[tuple[np.ndarray, np.ndarray, ReportBatch]]:
    """Chunks of (values, device ids, reports); endless in duration mode."""
    rng = np.random.default_rng(settings.seed)
    remaining = settings.reports
    while remaining is None or remaining > 0:
        k = settings.chunk if remaining is None else min(settings.chunk, remaining)
        values = settings.dataset.sample(k, rng).astype(np.uint64)
        devices = rng.integers(0, settings.devices, k)
        yield values, devices, simulate_reports(settings.params, values, rng)
        if remaining is not None:
            remaining -= k


def messages_for(settings: SimulationSettings, batch: ReportBatch, devices: np.ndarray, first_frame: int) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs for one chunk."""
    params = settings.params
    if settings.frame_size == 1:
        return [(b"dev-%d" % d, m) for d, m in zip(devices.tolist(), wire.encode_reports(params, batch))]
    out = []
    for i, start in enumerate(range(0, len(batch), settings.frame_size)):
        frame = wire.encode_frame(params, batch.slice(start, start + settings.frame_size))
        out.append((b"gw-%d" % ((first_frame + i) % settings.gateways), frame))
    return out


class Progress:
    """A one-line progress display on stderr (only when it is a terminal)."""

    def __init__(self, total: int | None, enabled: bool | None = None):
        self.total = total
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.start = time.monotonic()
        self.last = 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last < 0.5):
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        if self.total:
            width = 30
            filled = int(width * done / self.total)
            bar = "#" * filled + "-" * (width - filled)
            sys.stderr.write(f"\r[{bar}] {done:,}/{self.total:,} reports {rate:,.0f}/s")
        else:
            sys.stderr.write(f"\r{done:,} reports {rate:,.0f}/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


async def run(
    settings: SimulationSettings,
    *,
    bootstrap_servers: str | None = None,
    topic: str | None = None,
    out: str | Path | None = None,
    progress: bool | None = None,
    should_stop: Callable[[], bool] | None = None,
    result: SimulationResult | None = None,
) -> SimulationResult:
    """Generate, then send to Kafka and/or write a capture file. Returns counts.

    Pass ``result`` to watch the ground truth grow while it runs (``ocms run`` does).
    """
    if bootstrap_servers is None and out is None:
        raise InvalidParameterError("bootstrap_servers", None, "give a Kafka bootstrap address, an --out file, or both")
    if bootstrap_servers is not None and not topic:
        raise InvalidParameterError("topic", topic, "a topic is required to send to Kafka")
    producer = None
    if bootstrap_servers is not None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers, acks=1, linger_ms=5, max_batch_size=1 << 20,
            max_request_size=8 << 20, request_timeout_ms=30_000,
        )
        await producer.start()
    writer = CaptureWriter(out) if out is not None else None
    if result is None:
        result = SimulationResult()
    result.counts = np.zeros(settings.dataset.dictionary_size, np.int64)
    bar = Progress(settings.reports, progress)
    start = time.monotonic()
    frames = 0
    try:
        for values, devices, batch in generate(settings):
            if settings.duration_s is not None and time.monotonic() - start >= settings.duration_s:
                break
            if should_stop is not None and should_stop():
                break
            messages = messages_for(settings, batch, devices, frames)
            frames += len(messages)
            if writer is not None:
                writer.write_all(m for _, m in messages)
            if producer is not None:
                futures = [await producer.send(topic, value, key=key) for key, value in messages]
                await asyncio.gather(*futures)  # delivered before the chunk counts as sent
            result.counts += np.bincount(values.astype(np.int64), minlength=settings.dataset.dictionary_size)
            result.reports += len(batch)
            result.messages += len(messages)
            bar.update(result.reports)
            if settings.rate is not None:
                ahead = result.reports / settings.rate - (time.monotonic() - start)
                if ahead > 0:
                    await asyncio.sleep(ahead)
    finally:
        result.seconds = time.monotonic() - start
        bar.update(result.reports, force=True)
        bar.close()
        if writer is not None:
            writer.close()
        if producer is not None:
            await producer.stop()
    return result


def write_truth(path: str | Path, settings: SimulationSettings, result: SimulationResult) -> None:
    """Ground truth JSON: the true count of every value that occurred."""
    nonzero = np.nonzero(result.counts)[0]
    dataset = settings.dataset
    doc = {
        "dataset": dataset.name,
        "dictionary_size": dataset.dictionary_size,
        "fingerprint": settings.params.fingerprint.hex(),
        "seed": settings.seed,
        "reports": result.reports,
        "counts": [{"value": int(v), "label": dataset.label(int(v)), "count": int(result.counts[v])} for v in nonzero],
    }
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
