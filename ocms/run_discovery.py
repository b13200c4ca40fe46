"""``ocms run``'s discovery fleet: devices of a discoverable metric send discovery reports.

The default run (deploy/registry.yaml's ``flight_dest``) also simulates the keyboard metric
``typed_words``, declared with a ``discovery:`` block (docs/discovery.md): its devices send
one discovery report each (a prefix of their word at a level drawn uniformly, privatized with
that level's parameters), uploaded through the collector like every other report (or produced
to Kafka with ``--direct-kafka``). The worker runs a discovery pass every
``PASS_INTERVAL_S`` over the last ``PASS_WINDOW_S`` of its source topic (the production
defaults, 300 s over an hour, would show nothing for minutes) and serves what it found at
``/discovered?metric=typed_words``; the console draws it.

Why these words: at half the default ``--rate`` (1,000 reports/s), ε 4 and 5 levels, the
detection threshold (``cms_core.discovery.detection_threshold``) is about 1.7 % after a minute
(60,000 reports) and 1.2 % after two; "the" (6 %), "to", "and", "of", "a", "in" (2-3 %) are above
it, so a few values are found within a minute or two, and more as the window fills.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import numpy as np

from cms_core.errors import InvalidValueError, OCMSError

#: (metric of deploy/registry.yaml, dataset of its devices' values, share of --rate).
DISCOVERY_DEMO = ("typed_words", "wordfreq:lang=en,n=5000", 0.5)
#: The worker's discovery passes during ``ocms run``: every 15 s over the last 10 minutes.
PASS_INTERVAL_S = 15
PASS_WINDOW_S = 600
#: Chunks the fleet draws per second (each is split over the levels, one frame per level).
CHUNKS_PER_SECOND = 4


@dataclass
class DiscoveryFleetResult:
    """What the discovery fleet sent: reports, messages and each dataset value's count."""

    reports: int = 0
    messages: int = 0
    refused: int = 0  # drawn values the metric's alphabet cannot describe (a device refuses them)
    seconds: float = 0.0
    counts: np.ndarray | None = None


@dataclass
class DiscoveryFleet:
    """The devices of one discoverable metric: its newest version, their dataset, the rate."""

    version: object  # registry.MetricVersion with a discovery block
    dataset: object  # fleet.datasets.Dataset of labels
    rate: float
    spec: object = field(init=False, repr=False)  # registry.discovery.DiscoverySpec
    describable: np.ndarray = field(init=False, repr=False)  # per dataset code: can a device report it?

    def __post_init__(self):
        from registry.discovery import discovery_of

        self.spec = discovery_of(self.version)
        ok = np.zeros(self.dataset.dictionary_size, bool)
        for code in range(self.dataset.dictionary_size):
            try:
                self.spec.domain.symbols(self.dataset.label(code))
            except InvalidValueError:
                continue
            ok[code] = True
        if not ok.any():
            raise OCMSError(f"metric {self.name}: no value of {self.dataset.name} fits its discovery alphabet")
        self.describable = ok

    @property
    def name(self) -> str:
        return self.version.metric

    @staticmethod
    def worker_flags() -> list[str]:
        """The worker's discovery passes, often enough to show results within a minute or two."""
        return ["--discovery-interval-seconds", str(PASS_INTERVAL_S), "--discovery-window-seconds", str(PASS_WINDOW_S)]

    def truth_document(self, result: DiscoveryFleetResult) -> dict:
        """The true count of every value sent (for the console's discovered-values panel)."""
        counts = result.counts if result.counts is not None else np.zeros(0, np.int64)
        return {
            "metric": self.name, "discovery": True, "dataset": self.dataset.name, "fingerprint": "",
            "reports": result.reports,
            "counts": [{"value": self.dataset.label(int(v)), "count": int(counts[v])} for v in np.nonzero(counts)[0]],
        }

    async def run(self, result: DiscoveryFleetResult, *, seed: int, should_stop, duration_s: float | None = None,
                  frame_size: int = 100, transport=None, upload_concurrency: int = 8,
                  bootstrap_servers: str | None = None, topic: str | None = None) -> DiscoveryFleetResult:
        """Send discovery reports at ``rate`` until ``should_stop()`` (or ``duration_s``): through the
        collector (``transport``, a started HttpTransport of this metric) or to Kafka (``bootstrap_servers``)."""
        from fleet.discovery import simulate_discovery_messages

        rng = np.random.default_rng(seed)
        result.counts = np.zeros(self.dataset.dictionary_size, np.int64)
        producer = None
        if transport is None:
            from infra.kafka import make_producer

            producer = make_producer(bootstrap_servers, acks=1, idempotent=False, linger_ms=5)
            await producer.start()
        chunk = max(1, int(self.rate / CHUNKS_PER_SECOND))
        labels = self.dataset.labels
        start = time.monotonic()
        drawn = 0
        try:
            while not should_stop():
                if duration_s is not None and time.monotonic() - start >= duration_s:
                    break
                codes = self.dataset.sample(chunk, rng)
                drawn += len(codes)
                codes = codes[self.describable[codes]]
                values = [labels[c] for c in codes.tolist()]
                frames = list(simulate_discovery_messages(self.spec.domain, self.spec.params_by_level, values, rng,
                                                          frame_size=frame_size))
                if transport is not None:  # 202: in Kafka, before the chunk counts as sent
                    await transport.upload_each(frames, concurrency=upload_concurrency)
                else:
                    sent = [await producer.send(topic, frame, key=b"gw-%d" % (i % 16)) for i, frame in enumerate(frames)]
                    await asyncio.gather(*sent)
                result.counts += np.bincount(codes, minlength=self.dataset.dictionary_size)
                result.reports += len(values)
                result.refused = drawn - result.reports
                result.messages += len(frames)
                ahead = drawn / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        finally:
            result.seconds = time.monotonic() - start
            if producer is not None:
                await producer.stop()
        return result


def discovery_fleet(named, args) -> DiscoveryFleet | None:
    """The default run's discovery fleet (the shipped registry's flight_dest run), or None: another
    metric or registry, or the demo metric missing from the registry or its data not installed."""
    if not named.default_run:
        return None
    if getattr(args, "no_companions", False):
        return None
    from fleet.datasets import parse_dataset
    from registry import load_registry

    name, spec, share = DISCOVERY_DEMO
    registry = load_registry(named.registry_path)
    if name not in {m.name for m in registry.metrics}:
        return None
    version = registry.metric(name).latest
    if version.discovery is None:
        return None
    try:
        dataset = parse_dataset(spec)
    except OCMSError:  # wordfreq is in the `data` extra, like the flights of the main fleet: without it, none
        return None
    return DiscoveryFleet(version, dataset, args.rate * share)


def discovery_line(fleet: DiscoveryFleet, result: DiscoveryFleetResult, status: int, doc: dict,
                   show: int = 5) -> str:
    """One line for ``ocms run``'s periodic output: what was sent and what the worker's last pass found."""
    head = f"{fleet.name:<15} eps={fleet.version.params.epsilon:g}  discovery reports sent {result.reports:,}"
    if status != 200:
        return f"{head}  discovery: {doc.get('error', f'HTTP {status}')}"
    found = doc.get("discovered", [])
    names = ", ".join(f"{d['value']} {d['frequency']:.1%}" for d in found[:show])
    more = f", +{len(found) - show} more" if len(found) > show else ""
    return (f"{head}  last pass over {doc.get('reports', 0):,} reports found {len(found)}"
            + (f": {names}{more}" if found else " (none above the detection threshold yet)"))
