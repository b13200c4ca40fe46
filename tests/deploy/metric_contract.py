"""The worker's Prometheus metric contract, as data.

The names and labels the deployment artifacts (recording rules, alerts,
dashboards) may rely on. The worker (agents/) must export exactly these;
a later live test can compare this list with a real /metrics page.

Scopes:
  * ``worker``: each worker exports its own part; sum (or max) over workers.
  * ``global``: every worker exports the same complete view read from the
    table changelog, so with N workers each series appears N times differing
    only in ``instance``; queries must use the de-duplicated ``ocms:`` rules.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    type: str  # counter | gauge | histogram
    labels: frozenset[str]
    scope: str  # worker | global
    help: str

    @property
    def series_names(self) -> tuple[str, ...]:
        """Sample names Prometheus stores for this metric."""
        if self.type == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)

    def series_labels(self, series_name: str) -> frozenset[str]:
        if series_name.endswith("_bucket") and self.type == "histogram":
            return self.labels | {"le"}
        return self.labels


def _m(name: str, type_: str, labels: str, scope: str, help_: str) -> Metric:
    return Metric(name, type_, frozenset(x for x in labels.split(",") if x), scope, help_)


def _gauges(scope: str, labels: str, help_by_name: dict[str, str]) -> tuple[Metric, ...]:
    """A family of gauges sharing scope and labels, one ``name: help`` entry each."""
    return tuple(_m(name, "gauge", labels, scope, help_) for name, help_ in help_by_name.items())


ESTIMATE_LABELS = "metric,version,value,window"

METRICS: tuple[Metric, ...] = (
    # Per-worker pipeline metrics.
    _m("ocms_reports_accepted_total", "counter", "metric,version", "worker", "reports counted"),
    _m("ocms_reports_rejected_total", "counter", "reason", "worker", "rejected messages (one per message)"),
    _m("ocms_reports_replayed_total", "counter", "", "worker", "already-counted reports skipped after a restart"),
    _m("ocms_messages_redelivered_total", "counter", "", "worker", "pending messages delivered again after a seek"),
    _m("ocms_stale_rewrites_total", "counter", "", "worker",
       "table keys written again after an older record of theirs was the changelog's latest"),
    _m("ocms_source_late_batches_total", "counter", "", "worker",
       "source messages delivered before earlier offsets were visible (fetched again)"),
    _m("ocms_source_offsets_skipped_total", "counter", "", "worker",
       "source offsets never delivered within the wait, taken as a gap"),
    _m("ocms_batch_reports", "histogram", "", "worker", "reports per micro-batch"),
    _m("ocms_decode_duration_seconds", "histogram", "", "worker", "decode time per micro-batch"),
    _m("ocms_consumer_lag_messages", "gauge", "partition", "worker", "messages not yet processed"),
    _m("ocms_last_processed_timestamp_seconds", "gauge", "", "worker", "event time of the latest processed message"),
    _m("ocms_assigned_partitions", "gauge", "", "worker", "partitions assigned to this worker"),
    _m("ocms_exposition_series_dropped_total", "counter", "collector,reason", "worker",
       "series left out of /metrics so that the rest is written (agents.metrics.ExpositionGuard)"),
    _m("ocms_answer_records_dropped_total", "counter", "field,reason", "worker",
       "records left out of a JSON answer because they could not be written"),
    # The release (issue 39; cms_core/version.py): 1, labelled with two bounded values. The collector exports it too.
    _m("ocms_build_info", "gauge", "version,wire_format", "worker", "this process's release and wire format"),
    _m("ocms_shuffle_header_invalid_total", "counter", "", "worker",
       "frames whose ocms-shuffle-n header is not a batch size of at least their reports (counted as not shuffled)"),
    _m("ocms_http_connections", "gauge", "", "worker", "open connections of the worker's HTTP server"),
    _m("ocms_http_connections_refused_total", "counter", "", "worker",
       "connections answered 503 at --web-max-connections"),
    _m("ocms_http_connections_closed_total", "counter", "reason", "worker",
       "connections closed by the worker's HTTP server: evicted_idle, header_timeout"),
    _m("ocms_shuffle_claims_rejected_total", "counter", "reason", "worker",
       "frames whose shuffle claim was not believed (no claim key, no MAC, a MAC that does not verify)"),
    # Global estimates (same on every worker).
    *_gauges("global", ESTIMATE_LABELS, {
        "ocms_estimate_ratio": "estimated frequency",
        "ocms_estimate_count": "estimated count",
        "ocms_estimate_stddev_ratio": "standard deviation of the frequency estimate",
        "ocms_estimate_ci_lower_ratio": "CI lower bound, frequency",
        "ocms_estimate_ci_upper_ratio": "CI upper bound, frequency",
        "ocms_estimate_ci_lower_count": "CI lower bound, count",
        "ocms_estimate_ci_upper_count": "CI upper bound, count",
        "ocms_estimate_above_noise": "1: the estimate stands above the noise floor of the version's tracked values",
    }),
    *_gauges("global", "metric,version,window", {
        "ocms_estimate_noise_floor_ratio":
            "the frequency an estimate must exceed to stand above zero among the tracked values",
        "ocms_estimate_withheld": "1: the window holds fewer than min_reports",
        "ocms_params_reports": "reports counted in the window",
    }),
    *_gauges("global", "metric,version", {
        "ocms_estimate_values_omitted": "tracked values not exported",
        "ocms_latest_bucket_start_timestamp_seconds": "start of the latest complete bucket",
    }),
    _m("ocms_estimate_values_capped", "gauge", "", "global", "values left out by the global export cap"),
    _m("ocms_params_info", "gauge", "metric,version,fingerprint,mechanism,epsilon,hash_range,field,mode", "global",
       "served metric versions and their parameters (value 1)"),
    # The surge alert's baseline (issue 28; its margin is ocms_estimate_noise_floor_ratio of the latest bucket).
    _m("ocms_estimate_previous_ci_upper_ratio", "gauge", "metric,version,value", "global",
       "CI upper bound of the frequency in the bucket before the latest complete one"),
    # Shuffling (issue 28; docs/collector.md "Shuffling"): the central (epsilon, delta) of a window whose every
    # report came through a shuffling collector, towards readers of Kafka and the worker; absent otherwise.
    *_gauges("global", "metric,version,window", {
        "ocms_central_epsilon": "central epsilon of the window's reports (smallest shuffled batch, FMT21 bound)",
        "ocms_central_delta": "the delta of ocms_central_epsilon",
    }),
    # Discovery (agents/discovery.py, docs/discovery.md): every worker runs the same periodic pass over
    # the source topic's window, so the results are global; the reports it acks are per worker.
    *_gauges("global", "metric,value", {
        "ocms_discovered_frequency": "estimated frequency of a discovered value",
        "ocms_discovered_frequency_ci_low": "lower CI bound, discovered value",
        "ocms_discovered_frequency_ci_high": "upper CI bound, discovered value",
    }),
    *_gauges("global", "metric", {
        "ocms_discovered_values": "values discovered in the latest pass",
        "ocms_discovered_values_omitted": "discovered values not exported (beyond top)",
        "ocms_discovery_reports": "discovery reports in the latest pass's window",
        "ocms_discovery_detection_threshold_ratio":
            "the frequency a value needed to be found in the latest pass's window",
    }),
    # Numeric metrics (issue 40; agents/numeric_export.py): gauges only, the CDF cumulative with le.
    _m("ocms_numeric_cdf_ratio", "gauge", "metric,version,window,le", "global",
       "estimated fraction of values <= le (the monotone CDF)"),
    *_gauges("global", "metric,version,window,quantile", {
        "ocms_numeric_quantile": "estimated quantile of a numeric metric",
        "ocms_numeric_quantile_ci_lower": "lower confidence bound of the quantile",
        "ocms_numeric_quantile_ci_upper": "upper confidence bound of the quantile",
    }),
    *_gauges("global", "metric,version,window", {
        "ocms_numeric_mean": "estimated mean of the clipped, bucketized values",
        "ocms_numeric_mean_ci_lower": "lower confidence bound of the mean",
        "ocms_numeric_mean_ci_upper": "upper confidence bound of the mean",
    }),
    _m("ocms_discovery_reports_received_total", "counter", "metric", "worker",
       "discovery-level reports acked (read by discovery, counted by no table)"),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}

#: Series Prometheus itself creates: scrape health and alert state.
BUILTIN_SERIES: dict[str, frozenset[str]] = {
    "up": frozenset(),
    "ALERTS": frozenset({"alertname", "alertstate", "severity"}),
}

#: Target labels Prometheus attaches to every scraped series of the worker job.
TARGET_LABELS = frozenset({"job", "instance"})

WINDOWS = ("total", "latest_bucket")


def series_catalog() -> dict[str, tuple[Metric | None, frozenset[str]]]:
    """Every stored series name of the contract -> (metric, label names incl. target labels)."""
    out: dict[str, tuple[Metric | None, frozenset[str]]] = {}
    for metric in METRICS:
        for series in metric.series_names:
            out[series] = (metric, metric.series_labels(series) | TARGET_LABELS)
    for name, labels in BUILTIN_SERIES.items():
        out[name] = (None, labels | TARGET_LABELS)
    return out


def global_series() -> frozenset[str]:
    return frozenset(s for m in METRICS if m.scope == "global" for s in m.series_names)
