"""Memory of a worker's counts view (and the cost of applying one changelog record) for deploy/registry.yaml, every bucket of every live
metric version retained and written by every source partition (the worst case).

    python -m benchmarks.bench_view_memory [--partitions 4] [--registry deploy/registry.yaml]

Prints, per metric version: buckets retained (main + rollup levels + the total key), tracked
values D, the bytes the view holds (CountsView.memory_bytes: one int64 sum per bucket plus
each partition's state as it arrived on the changelog), the formula
buckets x (8 x D + partitions x (24 + 4 x D)), and what one int64 array per partition and
bucket (the view before the summed buckets) held. Measured on a sample of buckets (--sample)
and scaled: the bytes per bucket do not depend on which bucket it is.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from agents.state import BucketKey, PartialCounts, StateKey, encode_bundle
from agents.view import CountsView
from registry import load_registry


def retained_buckets(version) -> int:
    buckets = version.retention_seconds // version.bucket_seconds + 1
    if version.rollup_seconds:
        buckets += version.rollup_retention_seconds // version.rollup_seconds + 1
    return buckets + 1  # the cumulative (total) key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", default="deploy/registry.yaml")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--sample", type=int, default=50, help="buckets measured per version")
    args = parser.parse_args()
    registry = load_registry(args.registry)
    rng = np.random.default_rng(1)
    total = formula_total = before_total = 0
    print(f"{'metric@version':<22} {'buckets':>8} {'D':>6} {'view MiB':>10} {'formula MiB':>12} {'per-partition int64 MiB':>24}")
    for version in registry.live_versions():
        d, buckets, p = version.tracked_count, retained_buckets(version), args.partitions
        view = CountsView()
        fp = version.fingerprint.hex()
        for b in range(args.sample):
            for partition in range(p):
                state = PartialCounts(1000, rng.integers(0, 1000, d), 1)
                view.apply_state(BucketKey(fp, partition, version.bucket_seconds, b * version.bucket_seconds),
                           state.to_bytes())
        measured = view.memory_bytes() / args.sample * buckets
        formula = buckets * (8 * d + p * (24 + 4 * d))
        before = buckets * p * 8 * d
        total, formula_total, before_total = total + measured, formula_total + formula, before_total + before
        mib = 1 << 20
        print(f"{version.binding:<22} {buckets:>8} {d:>6} {measured / mib:>10.2f} {formula / mib:>12.2f} {before / mib:>24.2f}")
    print(f"{'all':<22} {'':>8} {'':>6} {total / (1 << 20):>10.2f} {formula_total / (1 << 20):>12.2f} "
          f"{before_total / (1 << 20):>24.2f}")

    for d in (105, 4043):  # flight_dest's and flight_tailnum's tracked counts
        view = CountsView()
        fp = "069888932a931dd6"
        records = [(StateKey("g0", i % args.partitions, 60, 86_400, 60 * (i // 400)).encode(),
                    encode_bundle({fp: PartialCounts(1000 + i, rng.integers(0, 1000, d), i).to_bytes()}))
                   for i in range(4000)]
        started = time.perf_counter()
        for key, value in records:
            view.apply(key, value)
        elapsed = time.perf_counter() - started
        print(f"apply D={d}: {elapsed / len(records) * 1e6:.1f} us per changelog record of one member "
              f"({len(records) / elapsed:,.0f} records/s; each replaces a partition state 9 times in 10)")

if __name__ == "__main__":
    main()
