"""What a worker-hosted discovery pass costs the worker's event loop (issue 15): thread vs child process.

The worker's event loop runs intake, the changelog view and /healthz; a discovery pass is seconds
of Python (prefix hashing, grouping the window's messages) plus kernel decoding. This runs one
pass of :class:`agents.discovery.DiscoveryService` over a topic window on the embedded broker,
once with ``isolation="thread"`` (asyncio.to_thread) and once with ``isolation="process"`` (a
spawned, niced child: what the worker uses), while a probe task on the same loop asks for a 10 ms
sleep over and over. The probe's overshoot is how long any loop callback (a /healthz answer, a
fetch hand-over) would have waited.

    .venv/bin/python -m benchmarks.bench_discovery_worker [--reports 300000] [--vocabulary 5000] [--frame-size 100]

Not a test: times depend on the machine. Results are printed, not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

REGISTRY = """\
metrics:
  - name: typed_words
    description: Words typed (wordfreq)
    owner: bench
    strings: true
    tracked: [the]
    epsilon: 4
    discovery: {alphabet: "abcdefghijklmnopqrstuvwxyz'", max_length: 8}
"""
TOPIC = "bench-discovery"


async def _produce(bootstrap: str, frames: list[bytes]) -> None:
    from infra.kafka import EMBEDDED, make_producer

    producer = make_producer(bootstrap, EMBEDDED)
    await producer.start()
    try:
        for start in range(0, len(frames), 64):
            sent = [await producer.send(TOPIC, f) for f in frames[start:start + 64]]
            for s in sent:
                await s
    finally:
        await producer.stop()


async def _probe_during(service, now: float, tick: float = 0.01) -> dict:
    lags: list[float] = []
    done = asyncio.Event()

    async def probe():
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(tick)
            lags.append(time.perf_counter() - started - tick)

    task = asyncio.ensure_future(probe())
    started = time.perf_counter()
    await service.refresh_once(now=now)
    seconds = time.perf_counter() - started
    done.set()
    await task
    lags_ms = np.array(lags) * 1000
    return {"pass s": seconds, "probes": len(lags), "p50 ms": float(np.percentile(lags_ms, 50)),
            "p99 ms": float(np.percentile(lags_ms, 99)), "max ms": float(lags_ms.max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=300_000)
    ap.add_argument("--vocabulary", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--frame-size", type=int, default=100, help="reports per Kafka message (default 100)")
    args = ap.parse_args()

    from agents.discovery import DiscoveryService
    from fleet.datasets import load_wordfreq
    from fleet.discovery import simulate_discovery_messages
    from infra.broker import EmbeddedBroker
    from registry import load_registry
    from registry.discovery import discovery_of

    folder = Path(tempfile.mkdtemp(prefix="bench-discovery-worker-"))
    (folder / "registry.yaml").write_text(REGISTRY, encoding="utf-8")
    version = load_registry(folder / "registry.yaml").metric("typed_words").latest
    spec = discovery_of(version)
    rng = np.random.default_rng(args.seed)
    words, probs = load_wordfreq("en", args.vocabulary)
    allowed = set("abcdefghijklmnopqrstuvwxyz'")
    keep = [i for i, w in enumerate(words) if set(w) <= allowed]
    words = [words[i] for i in keep]
    probs = np.asarray(probs)[keep]
    values = [words[i] for i in rng.choice(len(words), size=args.reports, p=probs / probs.sum())]
    frames = list(simulate_discovery_messages(spec.domain, spec.params_by_level, values, rng, frame_size=args.frame_size))
    print(f"{args.reports:,} discovery reports of {len(set(values)):,} distinct words, {spec.domain.levels} levels, "
          f"{len(frames):,} frames")
    with EmbeddedBroker() as broker:
        broker.create_topics({TOPIC: 4})
        asyncio.run(_produce(broker.bootstrap_servers, frames))
        now = time.time() + 1
        print(f"{'isolation':<10} {'pass s':>7} {'found':>6} {'probes':>7} {'loop lag p50 ms':>16} "
              f"{'p99 ms':>8} {'max ms':>8}")
        for isolation in ("thread", "process"):
            service = DiscoveryService([version], bootstrap_servers=broker.bootstrap_servers, topic=TOPIC,
                                       window_seconds=3600, isolation=isolation)
            row = asyncio.run(_probe_during(service, now))
            doc = service.latest["typed_words"]
            assert doc["reports"] == args.reports, doc["reports"]
            print(f"{isolation:<10} {row['pass s']:>7.2f} {len(doc['discovered']):>6} {row['probes']:>7} "
                  f"{row['p50 ms']:>16.2f} {row['p99 ms']:>8.1f} {row['max ms']:>8.1f}")


if __name__ == "__main__":
    main()
