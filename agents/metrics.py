"""Prometheus metrics: pipeline instruments plus a scrape-time estimates collector.

Estimates are computed in ``collect()`` from the counts view (prometheus_client
custom-collector style), never stored as gauges that could go stale. Label
values come from a bounded set: parameter fingerprints (configured), the
configured watch list plus the current top-K per parameter set, the window
(``total`` = cumulative, ``latest_bucket`` = the latest complete bucket), and
the fixed reject reasons; ``ocms_estimate_values_omitted`` says how many
tracked values were left out. A value label is the value as
``cms_core.values.value_to_json`` writes it (integers as decimal digits, strings
exactly: the exposition escapes what it must), so it reads back exactly.

Every worker exports the same global estimates (its view reads the whole
changelog); pipeline counters are per worker. Recording rules in
deploy/prometheus de-duplicate the former and sum the latter.
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily

from cms_core.values import value_to_json

from .processor import REJECT_REASONS
from .query import EstimateOptions, EstimateService, Window, select, top_indices

# ``*_created`` series double the scrape size and no dashboard or rule uses them.
disable_created_metrics()

BATCH_BUCKETS = (1, 10, 100, 1_000, 5_000, 10_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)
DECODE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

ESTIMATE_FIELDS = (
    # metric suffix, record field, help
    ("ratio", "frequency", "unbiased frequency estimate (fraction of reports)"),
    ("count", "count", "unbiased estimate of the number of reports holding the value"),
    ("stddev_ratio", "std", "standard deviation of the frequency estimate"),
    ("ci_lower_ratio", "ci_low", "lower confidence bound of the frequency"),
    ("ci_upper_ratio", "ci_high", "upper confidence bound of the frequency"),
    ("ci_lower_count", "count_ci_low", "lower confidence bound of the count"),
    ("ci_upper_count", "count_ci_high", "upper confidence bound of the count"),
)


class PipelineMetrics:
    """Per-worker instruments, in their own registry (one worker per process)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.accepted = Counter("ocms_reports_accepted", "reports counted into the table", ["params"], registry=r)
        self.rejected = Counter("ocms_reports_rejected", "rejected messages (sent to the dead-letter topic), by reason",
                                ["reason"], registry=r)
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        self.replayed = Counter("ocms_reports_replayed", "reports skipped because they were already counted (replay)",
                                registry=r)
        self.redelivered = Counter("ocms_messages_redelivered",
                                   "pending messages delivered again after a consumer seek (counted once)", registry=r)
        self.batch_reports = Histogram("ocms_batch_reports", "reports per micro-batch", buckets=BATCH_BUCKETS, registry=r)
        self.decode_seconds = Histogram("ocms_decode_duration_seconds", "kernel decode time per micro-batch",
                                        buckets=DECODE_BUCKETS, registry=r)
        self.lag = Gauge("ocms_consumer_lag_messages", "high watermark minus next offset to process", ["partition"],
                         registry=r)
        self.last_processed = Gauge("ocms_last_processed_timestamp_seconds",
                                    "event time of the latest message folded into the table", registry=r)
        self.assigned = Gauge("ocms_assigned_partitions", "source partitions this worker owns", registry=r)
        self.view_lag = Gauge("ocms_view_lag_messages", "changelog records not yet read into this worker's view",
                              registry=r)


class EstimatesCollector:
    """Scrape-time estimates for the watch list + top-K of every parameter set."""

    def __init__(self, service: EstimateService, clock: Callable[[], float] | None = None):
        self.service = service
        self.clock = clock or service.clock

    def describe(self):
        return []  # estimates are dynamic; do not let register() call collect()

    def collect(self):
        service = self.service
        now = self.clock()
        families = {
            suffix: GaugeMetricFamily(f"ocms_estimate_{suffix}", text, labels=["params", "value", "window"])
            for suffix, _, text in ESTIMATE_FIELDS
        }
        omitted = GaugeMetricFamily("ocms_estimate_values_omitted", "tracked values not exported (outside watch + top-K)",
                                    labels=["params"])
        reports = GaugeMetricFamily("ocms_params_reports", "reports counted per parameter set and window",
                                    labels=["params", "window"])
        info = GaugeMetricFamily("ocms_params_info", "accepted privacy parameter sets",
                                 labels=["params", "epsilon", "hash_range", "field", "mode"])
        latest_start = GaugeMetricFamily("ocms_latest_bucket_start_timestamp_seconds",
                                         "start of the latest complete bucket", labels=["params"])
        options = EstimateOptions()
        latest = service.latest_bucket(now)
        for fp, params in service.params.items():
            d = params.describe()
            info.add_metric([fp, f"{params.epsilon:g}", str(params.hash_range), d["field"], params.mode], 1.0)
            latest_start.add_metric([fp], float(latest.start))
            total_n, total_counts = service.counts(fp, Window("total"))
            total_est = service.estimate(fp, total_n, total_counts, options)
            chosen = list(service.watch)
            if total_n and service.settings.top_k:
                chosen += [i for i in top_indices(total_est, service.settings.top_k) if i not in chosen]
            exported = len(chosen) if total_n else 0  # nothing is exported before the first report
            omitted.add_metric([fp], float(len(service.labels) - exported))
            latest_n, latest_counts = service.counts(fp, latest)
            latest_est = service.estimate(fp, latest_n, latest_counts, options)
            for window, n, est in (("total", total_n, total_est), ("latest_bucket", latest_n, latest_est)):
                reports.add_metric([fp, window], float(n))
                if not n:
                    continue
                for record in select(est, chosen).as_records():  # O(exported), not O(D)
                    labels = [fp, value_to_json(record["value"]), window]
                    for suffix, field, _ in ESTIMATE_FIELDS:
                        families[suffix].add_metric(labels, record[field])
        yield info
        yield reports
        yield latest_start
        yield omitted
        yield from families.values()
