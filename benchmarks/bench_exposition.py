"""What the exposition guard costs a scrape (issue 24, section 1).

    .venv/bin/python -m benchmarks.bench_exposition [--values N] [--rounds R]

One worker's /metrics text (``generate_latest``) with the estimates collector exporting N
values (default 2,000: ``MAX_EXPORTED_VALUES``, the most one scrape holds: N x 7 fields x 2
windows = 28,000 estimate series, every value non-ASCII text), timed with the collector
registered bare (as before) and behind ``agents.metrics.ExpositionGuard`` (checks every
label and series), alternating, R rounds; prints the medians and the guard's share.

This is a benchmark, not a test: it prints numbers and never fails on speed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from agents.catalog import Catalog
from agents.metrics import EstimatesCollector, ExpositionGuard
from agents.state import BucketKey, PartialCounts
from agents.view import CountsView
from cms_core import OCMSParams, TrackedValues, kernel
from cms_core.privatize import simulate_reports
from cms_core.values import elements_to_array, encode_value, limbs_for
from registry.flags import metrics_from_flags
from registry.values_file import write_values_file

NOW = 1_700_000_000.0
BUCKET = 1_699_999_920


def build_catalog(values: int, directory: Path) -> Catalog:
    params = OCMSParams.build(2.0, value_domain="string")
    names = [f"café-東京-{i}-🎉" for i in range(values)]
    path = directory / "tracked.jsonl"
    write_values_file(path, names)
    metrics = metrics_from_flags(epsilon=2, strings=True, tracked_file=str(path), top_k=values)
    tracked = TrackedValues.of(params, names)
    rng = np.random.default_rng(1)
    chosen = rng.integers(0, values, 20 * values)
    elements = elements_to_array([encode_value(params, names[i]) for i in chosen], limbs_for(params))
    batch = simulate_reports(params, elements, rng)
    counts = kernel.match_counts(params, batch, tracked)
    view = CountsView()
    fp = params.fingerprint.hex()
    for key in (BucketKey.total(fp, 0), BucketKey(fp, 0, 60, BUCKET)):
        view.apply_state(key, PartialCounts(len(batch), counts, BUCKET).to_bytes())
    return Catalog(metrics, view, lambda: NOW)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ocms-bench-exposition-") as directory:
        catalog = build_catalog(args.values, Path(directory))
    bare, guarded = CollectorRegistry(), CollectorRegistry()
    bare.register(EstimatesCollector(catalog, lambda: NOW))
    ExpositionGuard(guarded).add("estimates", EstimatesCollector(catalog, lambda: NOW))
    text = generate_latest(guarded)
    series = sum(1 for line in generate_latest(bare).splitlines() if line.startswith(b"ocms_estimate_ratio"))
    times: dict[str, list[float]] = {"bare": [], "guarded": []}
    for _ in range(args.rounds):
        for name, registry in (("bare", bare), ("guarded", guarded)):
            started = time.process_time()  # CPU time: what the scrape costs, steadier on a shared machine
            generate_latest(registry)
            times[name].append(time.process_time() - started)
    bare_ms, guarded_ms = (statistics.median(times[k]) * 1000 for k in ("bare", "guarded"))
    print(f"{args.values:,} values ({series:,} ocms_estimate_ratio series, {len(text):,} bytes), "
          f"median CPU time of {args.rounds} scrapes:")
    print(f"  bare collector    {bare_ms:8.1f} ms")
    print(f"  behind the guard  {guarded_ms:8.1f} ms  (+{guarded_ms - bare_ms:.1f} ms, "
          f"{(guarded_ms / bare_ms - 1) * 100:+.0f}%)")


if __name__ == "__main__":
    main()
