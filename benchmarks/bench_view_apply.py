"""What a worker's counts view costs per checkpoint it reads back (issue 30: the view's share of the event loop).

    .venv/bin/python -m benchmarks.bench_view_apply [--metrics 300] [--partitions 4] [--rounds 30]

Builds the changelog records of a registry worker's checkpoints as agents.checkpoint writes them:
the metrics of ``benchmarks.bench_registry_worker.registry_text(M)`` (categories, integers and
strings: D from 8 to 1,000), their table keys from ``Catalog.state_layout(partitions)`` (bundles
of the metric versions of a group, agents.state), one member state per metric version, source
partition and time level (each of the metric's levels at the current bucket, and the cumulative
key), every one of them changed since the previous checkpoint. A CountsView (with the catalog's
tracked sizes, as the worker builds it) first reads one checkpoint untimed; then each round
applies the next checkpoint's records (``CountsView.apply``, as ``ChangelogReader._apply`` does),
so every member state of every record replaces its partition's previous one, then takes a
snapshot of every bucket the checkpoint changed (what the first query or scrape of each pays
after a checkpoint: the view sums a bucket when it is read). Prints the median round as
microseconds per checkpoint, per changelog record and per changed member state, apply alone and
with the reads, and checks the view's sums against the last checkpoint's states (an error, never a figure, if they
differ).

This is a benchmark, not a test: it prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from agents.catalog import Catalog
from agents.state import TOTAL_WIDTH, BucketKey, PartialCounts, decode_bundle, encode_bundle
from agents.view import CountsView
from benchmarks.bench_registry_worker import registry_text
from registry import load_registry

NOW = 1_700_000_000


def checkpoint_states(levels, sizes, partitions: int, rng, checkpoint: int) -> dict[BucketKey, PartialCounts]:
    """Every member state a checkpoint writes: each metric version's current bucket of every level and
    its cumulative key, in every source partition (cumulative counts: they grow checkpoint by checkpoint)."""
    states = {}
    for fp, d in sizes.items():
        keys = [BucketKey(fp, p, width, NOW // width * width) for width, _ in levels[fp] for p in range(partitions)]
        keys += [BucketKey.total(fp, p) for p in range(partitions)]
        for key in keys:
            n = 5_000 * (checkpoint + 1) + int(rng.integers(1_000))
            states[key] = PartialCounts(n, rng.integers(0, n // 4, d), 1_000 * checkpoint + key.partition)
    return states


def records_of(layout, states: dict[BucketKey, PartialCounts]) -> list[tuple[bytes, bytes]]:
    """The changelog records of one checkpoint: one bundle per table key (agents.state)."""
    bundles: dict = {}
    for key, state in states.items():
        bundles.setdefault(layout.key_of(key), {})[key.fingerprint] = state.to_bytes()
    return [(table_key.encode(), encode_bundle(members)) for table_key, members in sorted(bundles.items())]


def check(view: CountsView, states: dict[BucketKey, PartialCounts], sizes) -> None:
    want: dict = {}
    for key, state in states.items():
        n, counts = want.get((key.fingerprint, key.width, key.bucket_start), (0, 0))
        want[(key.fingerprint, key.width, key.bucket_start)] = (n + state.n, counts + state.counts)
    for (fp, width, start), (n, counts) in want.items():
        got_n, got_counts = view.sum(fp, width, start, sizes[fp])
        if got_n != n or not np.array_equal(got_counts, counts):
            raise SystemExit(f"view's sum of {fp} width {width} start {start} differs from the states written")
    if view.rejected or view.keys() != len(states):
        raise SystemExit(f"view rejected {view.rejected} records, holds {view.keys()} of {len(states)} states")
    totals = sum(state.n for key, state in states.items() if key.width == TOTAL_WIDTH)
    if view.reports() != totals:
        raise SystemExit(f"view counts {view.reports()} reports, the cumulative keys hold {totals}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metrics", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30, help="checkpoints applied and timed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ocms-bench-view-apply-") as directory:
        path = Path(directory) / "registry.yaml"
        path.write_text(registry_text(args.metrics))
        catalog = Catalog(load_registry(path), CountsView())
    layout, sizes, levels = catalog.state_layout(args.partitions), catalog.tracked_sizes, catalog.levels_by_fp
    rng = np.random.default_rng(30)
    # A few distinct checkpoints applied in turn: consecutive ones differ in every member state.
    checkpoints = [checkpoint_states(levels, sizes, args.partitions, rng, c) for c in range(4)]
    records = [records_of(layout, states) for states in checkpoints]
    members = [len(states) for states in checkpoints][0]
    per_record = sorted(len(value) for _, value in records[0])
    view = CountsView(dict(sizes))
    for key, value in records[0]:
        view.apply(key, value)
    buckets = sorted({(key.fingerprint, key.width, key.bucket_start) for key in checkpoints[0]})
    timings, read_timings = [], []
    for round_ in range(args.rounds):
        current = 1 + round_ % 3
        started = time.perf_counter()
        for key, value in records[current]:
            view.apply(key, value)
        applied = time.perf_counter()
        for fp, width, start in buckets:  # what the first query (or scrape) of each changed bucket reads
            view.snapshot(fp, width, start, start + (width or 1))
        timings.append(applied - started)
        read_timings.append(time.perf_counter() - applied)
    check(view, checkpoints[current], sizes)
    median, read = statistics.median(timings), statistics.median(read_timings)
    bundle_members = [len(decode_bundle(value)) for _, value in records[0]]
    print(f"{args.metrics} metrics, {args.partitions} partitions, mean D {np.mean(list(sizes.values())):.0f}: "
          f"{len(records[0])} changelog records per checkpoint, {min(bundle_members)}-{max(bundle_members)} "
          f"member states each ({per_record[0]:,}-{per_record[-1]:,} bytes), {members:,} member states changed")
    print(f"apply one checkpoint: median {median * 1e3:.2f} ms of {args.rounds} (min {min(timings) * 1e3:.2f} ms): "
          f"{median / len(records[0]) * 1e6:.1f} us per record, {median / members * 1e6:.2f} us per changed member state")
    print(f"then a snapshot of each of the {len(buckets):,} changed buckets: median {read * 1e3:.2f} ms; apply and read: "
          f"{(median + read) / members * 1e6:.2f} us per changed member state")


if __name__ == "__main__":
    main()
