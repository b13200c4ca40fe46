"""Producer-side throughput on this machine (not a test; prints, never asserts).

  1. simulation path: privatized reports/s (seeded numpy + compiled hash), no I/O;
  2. delivered to the embedded broker in frames (simulator -> Tansu, acks=1, all
     futures awaited): reports/s;
  3. device path (CSPRNG, one report at a time, Python): reports/s on one core;
  4. single-report messages delivered to the embedded broker: reports/s.

    .venv/bin/python -m benchmarks.bench_producer [--reports 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

from cms_core import OCMSParams, privatize
from cms_core.privatize import simulate_reports
from fleet import simulator
from fleet.datasets import parse_dataset
from infra.broker import EmbeddedBroker


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=1_000_000)
    ap.add_argument("--dataset", default="zipf:s=1.1,d=10000")
    args = ap.parse_args()
    dataset = parse_dataset(args.dataset)
    params = OCMSParams.build(2.0, dataset.dictionary_size)
    print(f"dataset {dataset.name}, eps=2, m={params.hash_range}, field {params.field}, {params.report_bytes} B/report")

    rng = np.random.default_rng(0)
    values = dataset.sample(args.reports, rng).astype(np.uint64)
    t = time.perf_counter()
    simulate_reports(params, values, rng)
    dt = time.perf_counter() - t
    print(f"1. simulation path privatize:        {args.reports / dt:12,.0f} reports/s  ({args.reports:,} in {dt:.2f} s)")

    with EmbeddedBroker() as broker:
        broker.create_topics({"bench-frames": 4, "bench-single": 4})
        settings = simulator.SimulationSettings(params=params, dataset=dataset, reports=args.reports, frame_size=1000, seed=1)
        res = asyncio.run(simulator.run(settings, bootstrap_servers=broker.bootstrap_servers, topic="bench-frames", progress=False))
        print(f"2. delivered in frames of 1000:      {res.reports_per_second:12,.0f} reports/s  ({res.reports:,} in {res.seconds:.2f} s, incl. generation)")

        k = 50_000
        t = time.perf_counter()
        for v in values[:k].tolist():
            privatize(params, v)
        dt = time.perf_counter() - t
        print(f"3. device path (CSPRNG), one core:   {k / dt:12,.0f} reports/s  ({dt * 1e6 / k:.1f} us/report)")

        n_single = min(args.reports, 100_000)
        settings = simulator.SimulationSettings(params=params, dataset=dataset, reports=n_single, frame_size=1, seed=2)
        res = asyncio.run(simulator.run(settings, bootstrap_servers=broker.bootstrap_servers, topic="bench-single", progress=False))
        print(f"4. delivered as single reports:      {res.reports_per_second:12,.0f} reports/s  ({res.reports:,} in {res.seconds:.2f} s)")


if __name__ == "__main__":
    main()
