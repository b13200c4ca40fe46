"""Decode throughput: report x tracked-value pairs per second, per path.

Compares, on the same simulated reports:
  * the compiled kernel, 1 thread and all threads (range path and arbitrary-value paths),
  * the numpy-only fallback,
  * a per-report pure-Python loop shaped like the paper's reference Server
    (Algorithm 1: hash + decode + sum per pair, Python big integers),
  * direct randomized response (m = d): one histogram of z, O(n + D), reported
    in reports/s and in the equivalent pairs/s over the whole dictionary.

    .venv/bin/python -m benchmarks.bench_decode [--reports 200000] [--quick]

Not a test: numbers depend on the machine. Results are printed, not asserted.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time

import numpy as np

from cms_core import OCMSParams, TrackedValues, kernel, theory
from cms_core.privatize import simulate_reports


def best_of(fn, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def python_server_loop(params: OCMSParams, reports, xs) -> list[float]:
    """Algorithm 1 Server for each x: per report Hash, Decode, accumulate (Python ints)."""
    match = theory.decode_match_value(params.epsilon, params.hash_range)
    mismatch = theory.decode_mismatch_value(params.epsilon)
    field, m = params.field, params.hash_range
    out = []
    for x in xs:
        total = 0.0
        for a0, a1, z in reports:
            total += match if field.hash_value(a0, a1, x) % m == z else mismatch
        out.append(total)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=200_000)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    args = ap.parse_args()
    n = 20_000 if args.quick else args.reports
    threads_all = kernel.default_threads()
    rng = np.random.default_rng(1)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; backend={kernel.BACKEND}")
    print(f"reports n={n}; pairs/s = n * D / best-of-3 wall time")
    print(f"{'path':52} {'D':>7} {'1 thread':>14} {f'{threads_all} threads':>14}")
    cases = [
        ("integer range [0,d), small prime field (d=100k)", OCMSParams.build(2.0, 100_000), "range", 10_000),
        ("integer range [0,d), F(2^64-59) (d=2^40)", OCMSParams.build(2.0, 2**40), "range", 10_000),
        ("arbitrary 64-bit values, F(2^64-59)", OCMSParams.build(2.0, 2**40), "values", 2_000),
        ("arbitrary values, small prime field", OCMSParams.build(2.0, 100_000), "values", 2_000),
        ("arbitrary 64-bit values, GF(2^64) (d=2^64)", OCMSParams.build(2.0, 2**64), "values", 2_000),
        ("strings (128-bit fingerprints), GF(2^128)", OCMSParams.build(2.0, value_domain="string"), "strings", 500),
    ]
    for label, params, kind, d in cases:
        if args.quick:
            d = max(50, d // 10)
        values = rng.integers(0, min(params.dictionary_size, 2**63), size=n, dtype=np.uint64)
        if params.field.bits > 64:
            values = np.stack([values, values], axis=1)
        batch = simulate_reports(params, values, rng)
        if kind == "range":
            tracked = TrackedValues.range(params, 0, d)
        elif kind == "strings":
            tracked = TrackedValues.of(params, [f"value-{i}" for i in range(d)])
        else:
            top = min(params.dictionary_size, 2**64)
            tracked = TrackedValues.of(params, sorted({int(v) % top for v in rng.integers(0, 2**63, d)}))
        row = [label, len(tracked)]
        for threads in (1, threads_all):
            if kernel.BACKEND != "compiled":
                row.append(float("nan"))
                continue
            dt = best_of(lambda: kernel.match_counts(params, batch, tracked, threads=threads), 3)
            row.append(n * len(tracked) / dt)
        print(f"{row[0]:52} {row[1]:7d} {row[2] / 1e6:10.1f} M/s {row[3] / 1e6:10.1f} M/s")
    # numpy fallback and the paper-style Python loop on the first case
    params = cases[0][1]
    batch = simulate_reports(params, rng.integers(0, 100_000, n).astype(np.uint64), rng)
    tracked = TrackedValues.range(params, 0, 200)
    dt = best_of(lambda: kernel.match_counts(params, batch, tracked, backend="numpy"), 2)
    print(f"{'numpy fallback, integer range, small prime field':52} {len(tracked):7d} {n * len(tracked) / dt / 1e6:10.1f} M/s")
    small = batch.slice(0, 2000).to_reports()
    xs = list(range(20))
    dt = best_of(lambda: python_server_loop(params, small, xs), 1)
    py_rate = len(small) * len(xs) / dt
    print(f"{'per-report Python loop (paper reference shape)':52} {len(xs):7d} {py_rate / 1e6:10.2f} M/s  ({1e9 / py_rate:.0f} ns/pair)")
    print("direct randomized response (m = d): histogram of z, tracked = whole dictionary")
    for d in (16, 1000, 100_000):
        params = OCMSParams.build(2.0, d, mechanism="direct")
        batch = simulate_reports(params, rng.integers(0, d, n).astype(np.uint64), rng)
        tracked = TrackedValues.range(params, 0, d)
        dt = best_of(lambda: kernel.match_counts(params, batch, tracked), 3)
        print(f"{f'direct RR, d={d}':52} {d:7d} {n / dt / 1e6:10.1f} M reports/s ({n * d / dt / 1e6:.0f} M pairs/s equivalent)")


if __name__ == "__main__":
    main()
