"""Prometheus metrics: pipeline instruments plus a scrape-time estimates collector.

Estimates are computed in ``collect()`` from the counts view (prometheus_client
custom-collector style), never stored as gauges that could go stale. Label
values come from a bounded set: metric names and version numbers (configured:
agents.catalog), the configured watch list plus the current top-K per metric
version, the window (``total`` = cumulative, ``latest_bucket`` = the latest
complete bucket), and the fixed reject reasons; ``ocms_estimate_values_omitted``
says how many tracked values were left out. A value label is the value's name:
a category name, a string exactly (the exposition escapes what it must), an
integer's decimal digits. Fingerprints appear only on ``ocms_params_info``.
``ocms_estimate_above_noise`` (1/0 per exported value) and ``ocms_estimate_noise_floor_ratio``
(per metric version and window) carry the noise test of every answer (cms_core.theory, "Above the
noise"), at the exported estimates' 95%.

Every worker exports the same global estimates (its view reads the whole
changelog); pipeline counters are per worker. Recording rules in
deploy/prometheus de-duplicate the former and sum the latter.
"""

from __future__ import annotations

import logging
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from cms_core.sketch import EstimateOptions
from cms_core.values import value_to_json
from cms_core.version import build_info_labels

from .processor import REJECT_REASONS
from .answers.encode import ANSWER_RECORDS_DROPPED
from .answers.service import Window, select
from .numeric_export import NumericFamilies

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
        self.accepted = Counter("ocms_reports_accepted", "reports counted into the table, per metric version",
                                ["metric", "version"], registry=r)
        self.rejected = Counter("ocms_reports_rejected", "rejected messages (sent to the dead-letter topic), by reason",
                                ["reason"], registry=r)
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        self.replayed = Counter("ocms_reports_replayed", "reports skipped because they were already counted (replay)",
                                registry=r)
        self.redelivered = Counter("ocms_messages_redelivered",
                                   "pending messages delivered again after a consumer seek (counted once)", registry=r)
        self.stale_rewrites = Counter(
            "ocms_stale_rewrites", "table keys this worker wrote again because an older record of theirs was the "
            "changelog's latest (a worker that stalled past its session wrote after the new owner)", registry=r)
        self.source_late_batches = Counter(
            "ocms_source_late_batches", "times the broker delivered a source message before earlier offsets were "
            "visible, and the worker fetched again from the first of them", registry=r)
        self.source_offsets_skipped = Counter(
            "ocms_source_offsets_skipped", "source offsets never delivered within the wait for late records, taken "
            "as a gap (any reports there are lost)", registry=r)
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
        self.shuffle_header_invalid = Counter(
            "ocms_shuffle_header_invalid", "frames whose ocms-shuffle-n header is not a batch size of at least their "
            "reports: counted, as not shuffled", registry=r)
        self.shuffle_claims_rejected = Counter(
            "ocms_shuffle_claims_rejected", "frames with an ocms-shuffle-n claim this worker did not believe, by why "
            "(cms_core.claims: no_key, missing_mac, bad_mac, invalid_size): their reports count as not shuffled",
            ["reason"], registry=r)
        r.register(ANSWER_RECORDS_DROPPED)
        Gauge("ocms_build_info", "1, labelled with this worker's release and wire format (cms_core/version.py)",
              ["version", "wire_format"], registry=r).labels(**build_info_labels()).set(1)
        #: Scrape-time collectors (estimates, discovery) are added here, never registered bare.
        self.guard = ExpositionGuard(r)


#: Why the guard leaves a series out (the ``reason`` label of ocms_exposition_series_dropped_total).
DROP_REASONS = ("collect_failed", "label_not_unicode", "duplicate_series", "value_not_number")


class ExpositionGuard:
    """Scrape-time collectors behind one guard: one bad series or collector never fails /metrics.

    prometheus_client writes the whole exposition or raises (an HTTP 500: every series of the
    worker gone, estimates, lag and counters alike) when one label is not valid Unicode text
    or one collector raises. The guard collects each collector it holds on its own and checks
    each series before the writer sees it; what it leaves out is counted in
    ``ocms_exposition_series_dropped_total{collector,reason}`` (exported after the guarded
    collectors, so a scrape counts its own drops) and logged once per collector and reason:

    * ``collect_failed``: the collector raised; its series are left out (counted once per scrape);
    * ``label_not_unicode``: a label value that is not text with UTF-8 bytes (a lone surrogate);
    * ``duplicate_series``: the name and labels of a series already written (two values whose
      labels are equal, e.g. long values cut to the same label);
    * ``value_not_number``: a sample value that is not a number.
    """

    def __init__(self, registry: CollectorRegistry | None = None):
        self.collectors: dict[str, object] = {}
        self.dropped: dict[tuple[str, str], int] = {}
        self._registry = registry
        self._logged: set = set()

    def add(self, name: str, collector) -> None:
        """Guard ``collector`` under ``name`` (the ``collector`` label); (re-)registers the guard so the
        registry knows every family name (``describe``) and collects the guard after what it holds."""
        self.collectors[name] = collector
        for reason in DROP_REASONS:
            self.dropped.setdefault((name, reason), 0)
        if self._registry is not None:
            if len(self.collectors) > 1:
                self._registry.unregister(self)
            self._registry.register(self)

    def describe(self):
        families = []
        for collector in self.collectors.values():
            try:
                families.extend(collector.describe())
            except Exception:  # a describe() that fails only costs the registry's name check
                pass
        return families + [CounterMetricFamily("ocms_exposition_series_dropped", _DROPPED_HELP,
                                               labels=["collector", "reason"])]

    def collect(self):
        written: dict = {}
        for name, collector in self.collectors.items():
            try:
                families = list(collector.collect())
            except Exception as exc:
                self._drop(name, "collect_failed", 1, f"{type(exc).__name__}: {exc}")
                continue
            for family in families:
                kept = []
                for sample in family.samples:
                    reason = _series_problem(sample, written)
                    if reason is None:
                        kept.append(sample)
                    else:
                        self._drop(name, reason, 1, f"a series of {family.name}")
                family.samples = kept
                yield family
        dropped = CounterMetricFamily("ocms_exposition_series_dropped", _DROPPED_HELP, labels=["collector", "reason"])
        for (name, reason), n in sorted(self.dropped.items()):
            dropped.add_metric([name, reason], float(n))
        yield dropped

    def _drop(self, name: str, reason: str, n: int, what: str) -> None:
        self.dropped[(name, reason)] = self.dropped.get((name, reason), 0) + n
        if (name, reason) not in self._logged:  # the counter keeps counting; the log says it once
            self._logged.add((name, reason))
            logging.getLogger(__name__).warning(
                "/metrics: left out %s of the %s collector (%s); counted in ocms_exposition_series_dropped_total"
                "{collector=\"%s\",reason=\"%s\"}", what, name, reason, name, reason)


_DROPPED_HELP = ("series left out of the exposition so that the rest is written, by collector and reason "
                 "(collect_failed, label_not_unicode, duplicate_series, value_not_number)")


def _is_text(label) -> bool:
    """A str with UTF-8 bytes (no lone surrogate)."""
    if not isinstance(label, str):
        return False
    if label.isascii():
        return True
    try:
        label.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _series_problem(sample, written: dict) -> str | None:
    """Why ``sample`` must be left out of the exposition, or None. ``written``: label set -> names of
    the series written with it (a label set's text is checked once: a scrape repeats it across fields)."""
    labels = tuple(sample.labels.items())  # in the family's label order (prometheus_client builds them so)
    names = written.get(labels)
    if names is None:
        if not all(_is_text(name) and _is_text(value) for name, value in labels):
            return "label_not_unicode"
        names = written[labels] = set()
    value = sample.value
    if type(value) is not float:
        try:
            float(value)
        except (TypeError, ValueError):
            return "value_not_number"
    if sample.name in names:
        return "duplicate_series"
    names.add(sample.name)
    return None


def families_without_samples(families) -> list:
    """The families a collector yields, emptied: its ``describe()`` (names and types for the registry)."""
    out = []
    for family in families:
        family.samples = []
        out.append(family)
    return out


#: At most this many values are exported per scrape over every metric version (each value is a series
#: per estimate field and window); the rest are counted by ocms_estimate_values_capped.
MAX_EXPORTED_VALUES = 2_000


class EstimatesCollector:
    """Scrape-time estimates for the watch list + top-K of every served metric version.

    Labels carry names: ``metric`` (the registry name), ``version`` and ``value`` (a category
    name, a string, an integer's decimal digits); the fingerprint and mechanism appear only on
    ``ocms_params_info``. A window with fewer reports than the version's ``min_reports`` is
    withheld: its estimates are not exported and ``ocms_estimate_withheld`` is 1.
    """

    def __init__(self, catalog, clock: Callable[[], float] | None = None, max_values: int = MAX_EXPORTED_VALUES,
                 serves: Callable[[str], bool] = lambda fingerprint: True):
        self.catalog = catalog
        self.clock = clock
        self.max_values = max_values
        #: fingerprint -> exported by this worker (``--view share``: the versions its view holds; agents.shards)
        self.serves = serves
        self._previous: dict[str, tuple] = {}  # fingerprint -> ((bucket start, n, options), upper bounds)

    def describe(self):
        """The families ``collect()`` yields (for no metric version: nothing is computed)."""
        nothing = EstimatesCollector(_NoVersions(), self.clock, self.max_values)
        return families_without_samples(nothing.collect())

    def collect(self):
        out = _EstimateFamilies(self.max_values)
        options = EstimateOptions()
        budget, over = self.max_values, 0
        for service in self.catalog.by_fingerprint.values():
            if getattr(service.version, "tree_level", None) is not None or getattr(service.version, "report_part", None):
                continue  # a tree's coarser level or a Hybrid mean's part (issue 40): through its version's histogram
            if self.serves(service.fingerprint):
                budget, over = self._export_version(service, out, options, budget, over)
        out.capped.add_metric([], float(over))
        yield from out

    def _export_version(self, service, out: "_EstimateFamilies", options: EstimateOptions, budget: int,
                        over: int) -> tuple[int, int]:
        """One metric version's series: its windows read as the API reads them
        (``EstimateService.window_estimate``), the watch list then its top-K exported while the scrape's
        budget lasts. Returns (budget left, values over the budget so far)."""
        now = (self.clock or service.clock)()
        fp, params, v = service.fingerprint, service.version.params, service.version
        names = [v.metric, str(v.version)]
        d = params.describe()
        out.info.add_metric(names + [fp, v.mechanism, f"{params.epsilon:g}", str(params.hash_range), d["field"],
                                     params.mode], 1.0)
        latest = service.latest_bucket(now)
        out.latest_start.add_metric(names, float(latest.start))
        total = service.window_estimate(Window("total"), options, top_k=v.top_k)  # no top-K when withheld
        chosen = list(service.watch)
        chosen += [i for i in total.top if i not in chosen]
        if total.n and not total.withheld:  # the global cap: watch first, then top-K
            over += max(0, len(chosen) - budget)
            chosen = chosen[:budget]
            budget -= len(chosen)
        newest = service.window_estimate(latest, options)
        exported = self._export_window(service, out, names, "total", total, chosen)
        self._export_window(service, out, names, "latest_bucket", newest, chosen)
        out.omitted.add_metric(names, float(len(service.labels) - exported))
        if newest.n and not newest.withheld:
            self._previous_upper(service, latest, chosen, options, names, out.previous_upper)
        return budget, over

    @staticmethod
    def _export_window(service, out: "_EstimateFamilies", names: list[str], window: str, read,
                       chosen: list[int]) -> int:
        """A window's series (``read``: its WindowEstimate): reports, central epsilon, withheld and, unless
        withheld or empty, the noise floor and the ``chosen`` values' estimates. Returns the values exported."""
        labels = names + [window]
        out.reports.add_metric(labels, float(read.n))
        if read.central["central_epsilon"] is not None:
            out.central_epsilon.add_metric(labels, read.central["central_epsilon"])
            out.central_delta.add_metric(labels, read.central["central_delta"])
        out.withheld.add_metric(labels, 1.0 if read.withheld else 0.0)
        if read.histogram is not None and not read.withheld:  # a numeric metric (issue 40): CDF, quantiles, mean
            out.numeric.add(labels, read.histogram)  # (a version asking only for a Hybrid mean has no bucket reports)
        if not read.n or read.withheld:
            return 0
        out.floor.add_metric(labels, read.noise_floor)  # +Inf: a bound that says nothing
        for record in select(read.estimates, chosen).as_records():  # O(exported), not O(D)
            value_labels = names + [service.name_of(value_to_json(record["value"])), window]
            for suffix, field, _ in ESTIMATE_FIELDS:
                out.estimates[suffix].add_metric(value_labels, record[field])
            out.above.add_metric(value_labels, 1.0 if record["above_noise"] else 0.0)
        return len(chosen)

    def _previous_upper(self, service, latest, chosen, options, names, family) -> None:
        """The upper bound of each exported value in the bucket before ``latest`` (none when that bucket is
        empty or withheld): one vectorized estimate of the bucket, as for the other windows, read at the
        exported values (one-value estimates cost ~0.1 ms each: +70% of a 2,000-value scrape), and kept
        while the bucket's n stays the same (the estimate's noise test costs O(sqrt(n)), and a bucket
        before the latest seldom changes)."""
        width = latest.width
        previous = Window("previous_bucket", width, latest.start - width, latest.start)
        n, counts = service.counts(previous)
        if not n or service.withheld(n):
            return
        key = (previous.start, n, options)
        cached = self._previous.get(service.fingerprint)
        if cached is None or cached[0] != key:
            cached = self._previous[service.fingerprint] = (
                key, service.estimate(n, counts, options).ci_high)
        upper = cached[1]
        for index in chosen:
            family.add_metric(names + [service.name_of(value_to_json(service.labels[index]))], float(upper[index]))


class _EstimateFamilies:
    """The families one scrape of :class:`EstimatesCollector` fills, yielded in this order."""

    def __init__(self, max_values: int):
        self.estimates = {
            suffix: GaugeMetricFamily(f"ocms_estimate_{suffix}", text, labels=["metric", "version", "value", "window"])
            for suffix, _, text in ESTIMATE_FIELDS
        }
        self.omitted = GaugeMetricFamily("ocms_estimate_values_omitted",
                                         "tracked values not exported (outside watch + top-K)", labels=["metric", "version"])
        self.withheld = GaugeMetricFamily("ocms_estimate_withheld",
                                          "1 when the window holds fewer reports than min_reports (nothing exported)",
                                          labels=["metric", "version", "window"])
        self.reports = GaugeMetricFamily("ocms_params_reports", "reports counted per metric version and window",
                                         labels=["metric", "version", "window"])
        self.info = GaugeMetricFamily("ocms_params_info", "served metric versions and their privacy parameters",
                                      labels=["metric", "version", "fingerprint", "mechanism", "epsilon", "hash_range",
                                              "field", "mode"])
        self.latest_start = GaugeMetricFamily("ocms_latest_bucket_start_timestamp_seconds",
                                              "start of the latest complete bucket", labels=["metric", "version"])
        # The noise test (cms_core.theory, "Above the noise"): a series per exported value (no label that
        # flips, so an estimate's series never splits), and the floor per metric version and window.
        self.above = GaugeMetricFamily("ocms_estimate_above_noise", "1 when the value's estimate stands above the "
                                       "noise floor of all its version's tracked values (Bonferroni at 95%), else 0",
                                       labels=["metric", "version", "value", "window"])
        self.floor = GaugeMetricFamily("ocms_estimate_noise_floor_ratio", "the frequency an estimate must exceed to "
                                       "stand above zero among all tracked values of the version (Bonferroni at 95%)",
                                       labels=["metric", "version", "window"])
        self.previous_upper = GaugeMetricFamily(
            "ocms_estimate_previous_ci_upper_ratio", "upper confidence bound of the frequency in the bucket before "
            "the latest complete one, for the values exported in the latest bucket (the OCMSValueSurge alert's baseline)",
            labels=["metric", "version", "value"])
        # The central (epsilon, delta) of windows whose every report came through a shuffling collector
        # (agents.answers.privacy.central_privacy); absent for other windows (their reports are only epsilon0-LDP).
        self.central_epsilon = GaugeMetricFamily(
            "ocms_central_epsilon", "central epsilon of the window's reports towards readers of Kafka and the worker "
            "(not the collector): every report was shuffled in a batch of at least the smallest batch's size "
            "(FMT21 bound); absent when some report was not shuffled", labels=["metric", "version", "window"])
        self.central_delta = GaugeMetricFamily("ocms_central_delta", "the delta of ocms_central_epsilon",
                                               labels=["metric", "version", "window"])
        self.numeric = NumericFamilies()
        self.capped = GaugeMetricFamily("ocms_estimate_values_capped",
                                        f"values of watch + top-K not exported because the scrape holds {max_values} "
                                        "already (a global cap over every metric version)")

    def __iter__(self):
        yield from (self.info, self.reports, self.latest_start, self.omitted, self.withheld, self.capped)
        yield from self.estimates.values()
        yield from (self.above, self.floor, self.previous_upper, self.central_epsilon, self.central_delta)
        yield from self.numeric


class _NoVersions:
    """A catalog serving nothing (``EstimatesCollector.describe``)."""

    by_fingerprint: dict = {}
