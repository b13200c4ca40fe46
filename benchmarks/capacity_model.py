"""The capacity model of docs/capacity.md: from a deployment's shape to Kafka bytes/day, worker CPU,
view memory per worker and query latency. Pure arithmetic; the constants are this machine's,
measured by the benchmarks named beside them (benchmarks/bench_scale_out.py checks the view-memory
part against the workers' own accounting).

    python -m benchmarks.capacity_model      # prints docs/capacity.md's three worked examples
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Decode kernel, pairs (report x tracked value) per second on one core: docs/results/README.md
#: (4.37 G pairs/s, 1 thread, benchmarks/bench_decode.py), rounded down for a loaded core.
DECODE_PAIRS_PER_CORE_S = 4.0e9
#: The worker's cost per report outside the decode (wire decode, validation, batching, acks):
#: bench_worker's single-metric run at D = 1,000 on a quiet core, ~5 M reports/s on 2 cores.
INTAKE_CORE_S_PER_REPORT = 0.2e-6
#: One changelog record (table write, produce, the view's apply on every worker holding it):
#: py-spy of bench_registry_worker before bundles (issue 30: 0.3-0.6 ms), the middle.
RECORD_CORE_S = 0.4e-3
#: Bytes of a report in frames of 1,000 (wire v1): a small prime field, F(2^64-59)-size fields,
#: GF(2^128) strings.
REPORT_BYTES = {"categories": 3.0, "integers": 5.0, "strings": 33.0}
#: Query latency on this machine (bench_scale_out, one-value answers): local p50, and the added
#: hop of a forwarded query (one HTTP request between workers on the same host).
QUERY_LOCAL_S = 0.003
QUERY_HOP_S = 0.004
#: A member state's header (PartialCounts: 24 bytes) and its place in a bundle (fingerprint + length).
STATE_HEADER = 24
MEMBER_HEADER = 12


@dataclass(frozen=True)
class MetricShape:
    """``count`` metric versions alike: D tracked values, a bucket level and an optional rollup."""

    count: int
    tracked: int
    bucket_s: int = 60
    retention_s: int = 86_400
    rollup_s: int | None = 3600
    rollup_retention_s: int = 30 * 86_400
    domain: str = "integers"

    @property
    def buckets(self) -> int:
        """Buckets a metric version keeps per partition: both levels' retained buckets, +1 each for the
        one being filled, and the cumulative key."""
        n = self.retention_s // self.bucket_s + 1
        if self.rollup_s:
            n += self.rollup_retention_s // self.rollup_s + 1
        return n + 1


def view_bytes_of(tracked: int, buckets: int, partitions: int) -> float:
    """One metric version's view bytes: per bucket an int64 sum of D and each writing partition's state."""
    return buckets * (8 * tracked + partitions * (STATE_HEADER + 4 * tracked))


def view_bytes(shapes, partitions: int, workers: int = 1) -> float:
    """Bytes of counts the largest worker's view holds (``CountsView.memory_bytes``): per bucket one
    int64 sum of D plus each writing partition's state (24 + 4 D); with ``--view share`` a worker
    holds about 1/workers of the metrics (its shards: ceil(partitions / workers) of ``partitions``)."""
    full = sum(s.count * view_bytes_of(s.tracked, s.buckets, partitions) for s in shapes)
    return full * share_of_largest(partitions, workers)


def table_bytes(shapes, partitions: int, workers: int = 1) -> float:
    """Bytes the Faust table store of the largest worker holds: its owned partitions' bundles."""
    full = sum(s.count * s.buckets * partitions * (STATE_HEADER + MEMBER_HEADER + 4 * s.tracked) for s in shapes)
    return full * share_of_largest(partitions, workers)


def share_of_largest(partitions: int, workers: int) -> float:
    return math.ceil(partitions / workers) / partitions


def kafka_bytes_per_day(shapes, reports_per_day: float, partitions: int, checkpoint_s: float,
                        frame_reports: int = 100) -> dict:
    """Source bytes (reports in frames) and changelog bytes written per day.

    A checkpoint rewrites whole the states it touched: a version's current bucket of each level and
    its cumulative key, in each partition its frames reached. The owner of a partition checkpoints at
    most every ``checkpoint_s`` (``--batch-max-seconds``, below a batch's size), and only when frames
    arrived, so a version's states in one partition are rewritten min(1 / checkpoint_s, its frames/s in
    that partition) times a second (reports spread evenly over the versions, frames of
    ``frame_reports``). Compaction keeps the latest per key: what stays is about the table stores' bytes."""
    versions = sum(s.count for s in shapes)
    per_report = sum(s.count * REPORT_BYTES[s.domain] for s in shapes) / versions
    frames_per_s = reports_per_day / 86_400 / versions / frame_reports / partitions  # per version and partition
    rewrites_per_s = min(1.0 / checkpoint_s, frames_per_s)
    rewritten = sum(s.count * (3 if s.rollup_s else 2) * (STATE_HEADER + MEMBER_HEADER + 4 * s.tracked) for s in shapes)
    return {"source": reports_per_day * per_report, "changelog": 86_400 * rewrites_per_s * partitions * rewritten}


def worker_cores(shapes, reports_per_day: float, partitions: int, checkpoint_s: float, groups: int = 16,
                 frame_reports: int = 100) -> float:
    """Cores of decode (reports x their metric's D), intake and changelog records for the whole pipeline,
    spread over the workers (reports spread evenly over the metric versions)."""
    versions = sum(s.count for s in shapes)
    mean_tracked = sum(s.count * s.tracked for s in shapes) / versions
    per_s = reports_per_day / 86_400
    decode = per_s * mean_tracked / DECODE_PAIRS_PER_CORE_S
    intake = per_s * INTAKE_CORE_S_PER_REPORT
    # records: one per touched group, level and partition and checkpoint (at most every checkpoint_s)
    checkpoints_per_s = min(1.0 / checkpoint_s, per_s / frame_reports / partitions)
    records = checkpoints_per_s * partitions * 3 * min(groups, versions) * RECORD_CORE_S
    return decode + intake + records


def query_latency_s(forwarded: bool) -> float:
    return QUERY_LOCAL_S + (QUERY_HOP_S if forwarded else 0.0)


#: docs/capacity.md's worked examples: devices, reports per device per day (over all metrics),
#: partitions, workers (--view share), --batch-max-seconds, and the metric versions served.
EXAMPLES = {
    "10k-device pilot": dict(devices=10_000, reports_per_device_day=50, partitions=4, workers=1, checkpoint_s=0.2,
                             shapes=(MetricShape(10, 30, domain="categories"), MetricShape(5, 1000))),
    "10M-device app": dict(devices=10_000_000, reports_per_device_day=100, partitions=16, workers=4, checkpoint_s=2.0,
                           shapes=(MetricShape(100, 50, domain="categories"), MetricShape(80, 2000),
                                   MetricShape(20, 4043, domain="strings"))),
    "1B-device platform": dict(devices=1_000_000_000, reports_per_device_day=200, partitions=64, workers=32,
                               checkpoint_s=10.0,
                               shapes=(MetricShape(1000, 50, domain="categories"), MetricShape(800, 2000),
                                       MetricShape(200, 10_000, domain="strings"))),
}


def example(name: str) -> dict:
    e = EXAMPLES[name]
    shapes, p, w, c = e["shapes"], e["partitions"], e["workers"], e["checkpoint_s"]
    reports = e["devices"] * e["reports_per_device_day"]
    kafka = kafka_bytes_per_day(shapes, reports, p, c)
    return {"metric_versions": sum(s.count for s in shapes), "reports_per_day": reports, "checkpoint_s": c,
            "source_gb_day": kafka["source"] / 1e9, "changelog_gb_day": kafka["changelog"] / 1e9,
            "cores": worker_cores(shapes, reports, p, c), "workers": w, "partitions": p,
            "view_gb_per_worker": view_bytes(shapes, p, w) / 1e9, "view_gb_one_worker": view_bytes(shapes, p, 1) / 1e9,
            "table_gb_per_worker": table_bytes(shapes, p, w) / 1e9,
            "query_ms_local": query_latency_s(False) * 1e3, "query_ms_forwarded": query_latency_s(True) * 1e3}


def size(gigabytes: float) -> str:
    return f"{gigabytes:,.1f} GB" if gigabytes >= 1 else f"{gigabytes * 1000:,.1f} MB"


def main() -> None:
    for name in EXAMPLES:
        r = example(name)
        print(f"{name}: {r['metric_versions']:,} metric versions, {r['reports_per_day']:,.0f} reports/day, "
              f"{r['partitions']} partitions, {r['workers']} workers (--view share), checkpoints every "
              f"{r['checkpoint_s']:g} s")
        print(f"  Kafka: source {size(r['source_gb_day'])}/day, changelog {size(r['changelog_gb_day'])}/day "
              f"written (compacted to the tables)")
        print(f"  worker CPU: {r['cores']:,.3f} cores in all ({r['cores'] / r['workers']:,.3f} per worker)")
        print(f"  view per worker: {size(r['view_gb_per_worker'])} (one worker holding all: "
              f"{size(r['view_gb_one_worker'])}); table store per worker {size(r['table_gb_per_worker'])}")
        print(f"  one-value query: {r['query_ms_local']:.0f} ms local, {r['query_ms_forwarded']:.0f} ms forwarded")


if __name__ == "__main__":
    main()
