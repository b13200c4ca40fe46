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
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from cms_core import OCMSParams, wire
from cms_core.errors import InvalidParameterError
from cms_core.hierarchy import simulate_levels
from cms_core.hybrid import simulate_split
from cms_core.privatize import simulate_reports
from cms_core.reports import ReportBatch, identity_coefficients
from cms_core.values import elements_to_array, encode_value, limbs_for, value_to_json

from infra.capture import CaptureWriter
from infra.kafka import KAFKA, BrokerProfile, make_producer

DEFAULT_CHUNK = 50_000
#: Largest dataset whose values are sent as strings (one 128-bit fingerprint per value, precomputed).
MAX_STRING_DICTIONARY = 10_000_000


@dataclass(frozen=True)
class SimulationSettings:
    params: OCMSParams
    dataset: object  # fleet.datasets.Dataset
    reports: int | None = None
    duration_s: float | None = None
    rate: float | None = None
    devices: int = 10_000
    frame_size: int = 1000
    seed: int = 0
    gateways: int = 16
    #: cms_core.hierarchy.HierarchyParams of a numeric metric reported as a tree (issue 40; ``params`` are its finest
    #: level's): each device reports one level drawn uniformly, framed with that level's fingerprint.
    tree: object = None
    #: registry.numeric.MeanSplit of a numeric version with a Hybrid mean (issue 40): each device draws its part
    #: first, as the clients do (cms_core.hybrid.simulate_split); part 0 reports its number with the Hybrid
    #: mechanism, framed with the part's carrier (``name@version/mean``), the others the histogram's (a tree's
    #: level drawn next). The dataset must be ``numbered`` (fleet.metric_datasets.dataset_for).
    mean: object = None

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
        self._device_values  # raises when the parameters cannot carry the dataset's values
        if self.mean is not None and not self.dataset.numbered:
            raise InvalidParameterError("dataset", self.dataset.name, "holds no numbers, and this version's Hybrid "
                                        "mean reports each device's number (fleet.metric_datasets.dataset_for)")

    @cached_property
    def _device_values(self) -> list | None:
        return device_values(self.params, self.dataset)

    @cached_property
    def element_table(self) -> np.ndarray | None:
        """Field element of each dataset code, or None when the code is the element itself."""
        values = self._device_values
        if values is None:
            return None
        return elements_to_array([encode_value(self.params, v) for v in values], limbs_for(self.params))

    def device_value(self, code: int):
        """The dictionary value a device holding dataset value ``code`` reports."""
        values = self._device_values
        return int(code) if values is None else values[int(code)]

    @property
    def chunk(self) -> int:
        size = DEFAULT_CHUNK
        if self.rate is not None:  # keep bursts short at low rates
            size = max(1, min(size, int(self.rate / 10)))
        if self.frame_size > 1:
            size = max(self.frame_size, size - size % self.frame_size)
        return size


def integer_labels(dataset) -> list[int] | None:
    """The integers a dataset's labels spell (a file of integers beyond 2^32), else None."""
    labels = dataset.labels
    if labels is None or not all(label.isascii() and label.isdigit() for label in labels):
        return None
    return [int(label) for label in labels]


def default_dictionary_size(dataset) -> int:
    """The integer dictionary ``ocms simulate`` uses when no -d is given."""
    spelled = integer_labels(dataset)
    return dataset.dictionary_size if spelled is None else max(spelled) + 1


def device_values(params: OCMSParams, dataset) -> list | None:
    """The value devices report for each dataset code, or None when it is the code itself.

    String domain: the code's label (``str(code)`` for unlabelled datasets), so
    estimates and truth speak the dataset's own strings. Integer domain: the
    integer a label spells (files of integers beyond 2^32), else the code, for
    parameters built for exactly the dataset's dictionary.
    """
    if params.value_domain == "string":
        if dataset.dictionary_size > MAX_STRING_DICTIONARY:
            raise InvalidParameterError("strings", True, f"the dataset's {dataset.dictionary_size:,} values are too many "
                                        f"to send as strings (at most {MAX_STRING_DICTIONARY:,})")
        return [dataset.label(code) for code in range(dataset.dictionary_size)]
    spelled = integer_labels(dataset)
    if spelled is not None:
        top = max(spelled)
        if top >= params.dictionary_size:
            raise InvalidParameterError("dictionary_size", params.dictionary_size,
                                        f"the dataset holds the value {top}; the dictionary must exceed it")
        return spelled
    if params.dictionary_size != dataset.dictionary_size:
        raise InvalidParameterError(
            "dictionary_size", params.dictionary_size,
            f"parameters must be built for the dataset's integer dictionary d={dataset.dictionary_size}",
        )
    return None


@dataclass
class SimulationResult:
    reports: int = 0
    messages: int = 0
    seconds: float = 0.0
    counts: np.ndarray | None = None
    #: A version with a Hybrid mean: the devices whose number is known, the sum of their numbers clipped to the
    #: metric's bounds (what the mean estimates), and how many of them sent the mean's part
    numbers: int = 0
    number_sum: float = 0.0
    mean_reports: int = 0

    @property
    def reports_per_second(self) -> float:
        return self.reports / self.seconds if self.seconds > 0 else math.inf

    @property
    def true_mean(self) -> float | None:
        """The devices' clipped mean (a version with a Hybrid mean; None before any or without one)."""
        return self.number_sum / self.numbers if self.numbers else None


def generate(settings: SimulationSettings) -> Iterator[tuple[np.ndarray, np.ndarray, ReportBatch]]:
    """Chunks of (values, device ids, reports); endless in duration mode."""
    rng = np.random.default_rng(settings.seed)
    remaining = settings.reports
    while remaining is None or remaining > 0:
        k = settings.chunk if remaining is None else min(settings.chunk, remaining)
        if settings.mean is not None:
            values, numbers = settings.dataset.sample_numbers(k, rng)
        else:
            values, numbers = settings.dataset.sample(k, rng), None
        values = values.astype(np.uint64)
        devices = rng.integers(0, settings.devices, k)
        table = settings.element_table
        elements = values if table is None else table[values.astype(np.int64)]
        if numbers is not None:
            yield values, devices, _parts(settings, elements, numbers, rng)
        else:
            yield values, devices, _histogram(settings, elements, rng)
        if remaining is not None:
            remaining -= k


def _histogram(settings: SimulationSettings, elements: np.ndarray, rng: np.random.Generator):
    """The histogram's (or a frequency metric's) reports of ``elements``: a tree's level by level."""
    if settings.tree is not None:
        return LevelBatches(*simulate_levels(settings.tree, elements, rng))
    return simulate_reports(settings.params, elements, rng)


def _parts(settings: SimulationSettings, elements: np.ndarray, numbers: np.ndarray,
           rng: np.random.Generator) -> "PartBatches":
    """A version with a Hybrid mean: each device's part drawn first (cms_core.hybrid.simulate_split), the mean's
    reports of the part-0 devices' numbers, the histogram's of the others' buckets."""
    mean, z = simulate_split(settings.mean.hybrid, settings.mean.parts, numbers, rng)
    return PartBatches(mean, ReportBatch(*identity_coefficients(z.size), z.astype(np.uint32)),
                       _histogram(settings, elements[~mean], rng), numbers)


@dataclass(frozen=True)
class LevelBatches:
    """One chunk of a tree metric's reports: each device's level and one batch per level (its devices in order)."""

    levels: np.ndarray
    batches: list

    def __len__(self) -> int:
        return int(self.levels.size)


@dataclass(frozen=True)
class PartBatches:
    """One chunk of a version with a Hybrid mean: which devices drew the mean's part (``mean``), their reports (the
    carrier's records), the other devices' histogram reports (a ReportBatch or a tree's LevelBatches, devices in
    order) and every device's number (the truth of the mean)."""

    mean: np.ndarray
    mean_batch: ReportBatch
    histogram: object
    numbers: np.ndarray

    def __len__(self) -> int:
        return int(self.mean.size)


def messages_for(settings: SimulationSettings, batch, devices: np.ndarray, first_frame: int) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs for one chunk (a tree's: each level's messages with that level's parameters; a Hybrid
    mean's part: its messages with the carrier's parameters, then the histogram's)."""
    if isinstance(batch, PartBatches):
        out = _messages(settings, settings.mean.carrier, batch.mean_batch, devices[batch.mean], first_frame)
        return out + messages_for(settings, batch.histogram, devices[~batch.mean], first_frame + len(out))
    if isinstance(batch, LevelBatches):
        out = []
        for level, (params, level_batch) in enumerate(zip(settings.tree.levels, batch.batches), start=1):
            out += _messages(settings, params, level_batch, devices[batch.levels == level], first_frame + len(out))
        return out
    return _messages(settings, settings.params, batch, devices, first_frame)


def _messages(settings: SimulationSettings, params: OCMSParams, batch: ReportBatch, devices: np.ndarray,
              first_frame: int) -> list[tuple[bytes, bytes]]:
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


#: Uploads a fleet keeps in flight to a collector (each one a message of ``frame_size`` reports):
#: enough to hide the collector's frame latency and Kafka's ack (benchmarks/bench_run_path.py).
UPLOAD_CONCURRENCY = 32


async def run(
    settings: SimulationSettings,
    *,
    bootstrap_servers: str | None = None,
    topic: str | None = None,
    out: str | Path | None = None,
    progress: bool | None = None,
    should_stop: Callable[[], bool] | None = None,
    result: SimulationResult | None = None,
    transport=None,
    upload_concurrency: int = UPLOAD_CONCURRENCY,
    profile: BrokerProfile = KAFKA,
) -> SimulationResult:
    """Generate, then send to Kafka, to a collector and/or write a capture file. Returns counts.

    Pass ``result`` to watch the ground truth grow while it runs (``ocms run`` does). With
    ``transport`` (a started ``producer.reporter.HttpTransport``) every message is uploaded to an
    ``ocms collector`` on its own, ``upload_concurrency`` at a time, and a chunk counts as sent
    once all its uploads got a 202 (in Kafka); device and gateway keys are not sent (the
    collector keys nothing by device). ``profile``: the broker's (infra.kafka).

    With ``settings.rate``, chunks are generated on the rate's schedule and their uploads run side by
    side (at most ``upload_concurrency`` in flight, a chunk's uploads starting while earlier ones wait for
    their 202), so a collector that holds uploads (a shuffled batch fills, Kafka acknowledges) does not
    slow the fleet below its rate; only a collector slower than the rate does, by backpressure once
    twice ``upload_concurrency`` uploads are waiting.
    """
    if bootstrap_servers is None and out is None and transport is None:
        raise InvalidParameterError("bootstrap_servers", None,
                                    "give a Kafka bootstrap address, an --out file or both (or, from Python, a collector transport)")
    if bootstrap_servers is not None and not topic:
        raise InvalidParameterError("topic", topic, "a topic is required to send to Kafka")
    producer = await _fleet_producer(bootstrap_servers, profile) if bootstrap_servers is not None else None
    writer = CaptureWriter(out) if out is not None else None
    if result is None:
        result = SimulationResult()
    result.counts = np.zeros(settings.dataset.dictionary_size, np.int64)
    bar = Progress(settings.reports, progress)
    start = time.monotonic()
    frames = 0
    uploads = _Uploads(transport, upload_concurrency, result, settings, bar) if transport is not None else None
    generated = 0  # reports generated (the rate's schedule), sent or on their way
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
            generated += len(batch)
            if uploads is not None:  # 202 = acknowledged by Kafka, before the chunk counts as sent
                await uploads.send([m for _, m in messages], values, batch)
            else:
                _count(result, settings, values, batch, len(messages))
                bar.update(result.reports)
            if settings.rate is not None:
                ahead = generated / settings.rate - (time.monotonic() - start)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        if uploads is not None:
            await uploads.finish()
    finally:
        if uploads is not None:
            await uploads.cancel()
        result.seconds = time.monotonic() - start
        bar.update(result.reports, force=True)
        bar.close()
        if writer is not None:
            writer.close()
        if producer is not None:
            await producer.stop()
    return result


async def _fleet_producer(bootstrap_servers: str, profile: BrokerProfile):
    """A started producer for a simulated fleet: throughput first (leader-only acks, batches of up to 1 MiB)."""
    producer = make_producer(bootstrap_servers, profile, acks=1, idempotent=False, linger_ms=5,
                             max_batch_size=1 << 20, request_timeout_ms=30_000)
    await producer.start()
    return producer


def _count(result: SimulationResult, settings: SimulationSettings, values: np.ndarray, batch, messages: int) -> None:
    """A chunk was sent: its values (and a Hybrid mean's numbers, clipped as the devices clip them) join the
    ground truth."""
    result.counts += np.bincount(values.astype(np.int64), minlength=settings.dataset.dictionary_size)
    result.reports += len(batch)
    result.messages += messages
    if isinstance(batch, PartBatches):
        hybrid = settings.mean.hybrid
        result.numbers += batch.numbers.size
        result.number_sum += float(np.clip(batch.numbers, hybrid.lower, hybrid.upper).sum())
        result.mean_reports += int(batch.mean.sum())


class _Uploads:
    """Chunks uploaded side by side: at most ``concurrency`` uploads in flight across chunks, a chunk counted
    in the ground truth once every upload of it got its 202; ``send`` waits only while more than twice
    ``concurrency`` uploads are waiting (backpressure), never for a chunk's answers."""

    def __init__(self, transport, concurrency: int, result: SimulationResult, settings: SimulationSettings, bar):
        self.transport = transport
        self.concurrency = concurrency
        self.slots = asyncio.Semaphore(concurrency)
        self.result, self.settings, self.bar = result, settings, bar
        self.tasks: set[asyncio.Task] = set()
        self.waiting = 0  # uploads of chunks not yet answered

    async def send(self, messages: list[bytes], values: np.ndarray, batch) -> None:
        while self.waiting + len(messages) > 2 * self.concurrency and self.tasks:
            await self._first_done()
        self.waiting += len(messages)
        task = asyncio.create_task(self._chunk(messages, values, batch))
        self.tasks.add(task)

    async def _chunk(self, messages: list[bytes], values: np.ndarray, batch) -> None:
        try:
            await self.transport.upload_each(messages, concurrency=self.concurrency, slots=self.slots)
        finally:
            self.waiting -= len(messages)
        _count(self.result, self.settings, values, batch, len(messages))
        self.bar.update(self.result.reports)

    async def _first_done(self) -> None:
        done, _ = await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            self.tasks.discard(task)
            task.result()  # a DeliveryError stops the run (the chunks still in flight are cancelled)

    async def finish(self) -> None:
        """Wait for every chunk's answers (raises the first DeliveryError)."""
        while self.tasks:
            await self._first_done()

    async def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()


def write_truth(path: str | Path, settings: SimulationSettings, result: SimulationResult) -> None:
    """Ground truth JSON (:func:`truth_document`) written to ``path`` ("-": standard output)."""
    text = json.dumps(truth_document(settings, result), indent=1, ensure_ascii=False) + "\n"
    if str(path) == "-":  # standard output (ocms simulate --truth -)
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(path).write_text(text, encoding="utf-8")


def truth_document(settings: SimulationSettings, result: SimulationResult) -> dict:
    """Ground truth: the true count of every value that occurred; a version with a Hybrid mean adds ``mean``: the
    devices' mean of their numbers clipped to ``clipped_to`` (what the Hybrid mean estimates), over ``devices``
    of which ``hybrid_reports`` sent the mean's part.

    ``value`` is the value devices reported, as every value travels in JSON
    (``cms_core.values.value_to_json``: a string; integers as decimal digits),
    so it matches ``ocms estimate``'s records; ``label`` is the dataset's name for it.
    """
    nonzero = np.nonzero(result.counts)[0]
    dataset = settings.dataset
    mean = {} if settings.mean is None or not result.numbers else {"mean": {
        "value": result.true_mean, "clipped_to": [settings.mean.hybrid.lower, settings.mean.hybrid.upper],
        "devices": result.numbers, "hybrid_reports": result.mean_reports}}
    return {
        "dataset": dataset.name,
        "dictionary_size": str(dataset.dictionary_size),
        "value_domain": settings.params.value_domain,
        "fingerprint": settings.params.fingerprint.hex(),
        "seed": settings.seed,
        "reports": result.reports,
        "counts": [{"value": value_to_json(settings.device_value(int(v))), "label": dataset.label(int(v)),
                    "count": int(result.counts[v])} for v in nonzero],
        **mean,
    }
