"""What one checkpoint's plan costs, by the number of metrics a worker serves (issue 30).

    .venv/bin/python -m benchmarks.bench_checkpoint_plan [--metrics 20,300] [--reports 1600000] [--rounds 6]
                                                         [--kinds categories,integers,strings]

The decode thread's part of a checkpoint (agents.checkpoint step 0: ``agents.processor.encoded_plan``,
decode, fold into the stored bundles, encode), in this process, without a broker: for M metrics of
``benchmarks.bench_registry_worker.registry_text(M)`` (categories, integers and strings, as that
benchmark's worker serves them), a micro-batch of ``--reports`` reports in frames of 1,000 of every
metric interleaved over 4 source partitions (what a worker under load takes: 8 x the default
--batch-max-reports), planned against the table values the previous batch wrote (round 1 starts
from an empty table and is not counted). Prints the median over rounds of wall time and of this
process's CPU time (every thread: the kernel runs on several), the table keys and bytes written.
The batch's reports are the same work at every M, so what grows with M is the cost of serving many
metrics (before the in-place fold, 300 metrics cost 0.37-0.40 s of CPU where 20 cost 0.30).

This is a benchmark, not a test: it prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from agents.catalog import Catalog
from agents.processor import AcceptedMessage, encoded_plan, table_keys
from agents.view import CountsView
from benchmarks.bench_registry_worker import FRAME, KINDS, frames_of, registry_text
from cms_core import wire
from registry import load_registry

PARTITIONS = 4


def batches(path: Path, reports: int, rounds: int) -> tuple[Catalog, list[list[AcceptedMessage]]]:
    """The catalog of the registry at ``path`` and ``rounds`` + 1 micro-batches of its metrics' frames."""
    registry = load_registry(path)
    catalog = Catalog(registry, CountsView())
    versions = [v for m in registry.metrics for v in m.live_versions]
    per_metric = max(FRAME, reports // len(versions) // FRAME * FRAME)
    now = time.time()
    out = []
    offsets = [0] * PARTITIONS
    for round_ in range(rounds + 1):
        messages = []
        streams = [frames_of(v, per_metric, seed=i + 10_000 * round_) for i, v in enumerate(versions)]
        for frame_index in range(len(streams[0])):  # interleaved, one frame of each metric in turn
            for metric_index, (version, frames) in enumerate(zip(versions, streams)):
                params, batch = wire.decode_message(frames[frame_index], {version.params.fingerprint: version.params})
                partition = (frame_index + metric_index) % PARTITIONS  # every metric's frames over every partition
                offsets[partition] += 1
                messages.append(AcceptedMessage(partition, offsets[partition], now, params.fingerprint.hex(), batch))
        out.append(messages)
    return catalog, out


def measure(metrics: int, kinds: tuple[str, ...], reports: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "registry.yaml"
        path.write_text(registry_text(metrics, kinds), encoding="utf-8")
        catalog, micro_batches = batches(path, reports, rounds)
    layout, levels = catalog.state_layout(PARTITIONS), catalog.levels_by_fp
    table: dict = {}
    walls, cpus = [], []
    written = keys = 0
    for round_, messages in enumerate(micro_batches):
        stored = {key: table.get(key) for key in table_keys(messages, layout, levels)}
        wall, cpu = time.perf_counter(), time.process_time()
        _, writes = encoded_plan(messages, stored, layout, catalog.params_by_fp, catalog.tracked_by_fp, levels)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        table.update(writes)
        if round_:  # the first batch starts from an empty table
            walls.append(wall)
            cpus.append(cpu)
        keys, written = len(writes), sum(len(value) for _, value in writes)
    return {"metrics": metrics, "reports": sum(len(m.batch) for m in micro_batches[-1]),
            "wall": statistics.median(walls), "cpu": statistics.median(cpus), "keys": keys, "bytes": written}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (a bad value exits 2 with a message naming the flag)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metrics", default="20,300", help="metric counts to compare, comma-separated (default 20,300)")
    parser.add_argument("--reports", type=int, default=1_600_000, help="reports per micro-batch (default 1,600,000)")
    parser.add_argument("--rounds", type=int, default=6, help="timed micro-batches per metric count (default 6)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="value domains the metrics cycle through (default categories,integers,strings)")
    args = parser.parse_args(argv)
    try:
        args.metrics = [int(m) for m in args.metrics.split(",") if m.strip()]
    except ValueError:
        parser.error(f"--metrics: expected comma-separated counts, got {args.metrics!r}")
    if not args.metrics or min(args.metrics) < 1:
        parser.error("--metrics: every count must be >= 1")
    args.kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not args.kinds or set(args.kinds) - set(KINDS):
        parser.error(f"--kinds: choose from {', '.join(KINDS)}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.reports < FRAME * max(args.metrics):
        parser.error(f"--reports must be >= {FRAME * max(args.metrics):,} (a frame of {FRAME:,} per metric), "
                     f"got {args.reports:,}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"one checkpoint's plan (agents.processor.encoded_plan), {args.reports:,} reports per micro-batch, "
          f"{PARTITIONS} partitions, metrics cycling {', '.join(args.kinds)}; medians of {args.rounds} rounds")
    for metrics in args.metrics:
        r = measure(metrics, args.kinds, args.reports, args.rounds)
        print(f"  {r['metrics']:>5} metrics: {r['reports']:>9,} reports  wall {r['wall']:.3f} s  CPU {r['cpu']:.3f} s  "
              f"({r['cpu'] / r['reports'] * 1e6:.3f} us/report)  {r['keys']} table keys, {r['bytes']:,} bytes written",
              flush=True)


if __name__ == "__main__":
    main()
