"""Prometheus series of numeric metrics (issue 40), computed at scrape time from the window a scrape reads.

A numeric metric's window (:meth:`agents.answers.service.EstimateService.window_estimate`, the one read path of
/histogram too) is exported as gauges, never counters or a histogram type: noisy estimates go down, and Prometheus
reads a decreasing counter as a reset.

* ``ocms_numeric_cdf_ratio{metric,version,window,le}``: a gauge histogram, cumulative, from the **monotone**
  CDF (cms_core.numeric.monotone_cdf), so ``histogram_quantile`` never has non-monotone buckets to repair
  (prometheus/prometheus #2610). ``le`` is each bucket's upper bound, the clipping ``upper``, and ``+Inf``
  (every value is clipped to at most ``upper``: both are 1).
* ``ocms_numeric_quantile{...,quantile}`` with ``_ci_lower`` / ``_ci_upper``: the metric's configured quantiles.
* ``ocms_numeric_mean`` with ``_ci_lower`` / ``_ci_upper``: the Hybrid mechanism's where the version has one
  (``numeric.mean_mechanism``), else the histogram's.

Label values come from the configured set only: the layout's bounds and the registry's quantiles, never a
request's. The exporter holds no estimation logic: every number is one of the answer's.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.utils import floatToGoString

LABELS = ["metric", "version", "window"]


class NumericFamilies:
    """The families of one scrape's numeric series, yielded after the estimates'."""

    def __init__(self):
        self.cdf = GaugeMetricFamily(
            "ocms_numeric_cdf_ratio", "numeric metric: estimated fraction of values <= le (the monotone CDF, "
            "cumulative; a gauge histogram: histogram_quantile reads it)", labels=LABELS + ["le"])
        self.quantile = {suffix: GaugeMetricFamily(f"ocms_numeric_quantile{suffix}", text, labels=LABELS + ["quantile"])
                         for suffix, text in (("", "numeric metric: estimated quantile (linear inside a bucket)"),
                                              ("_ci_lower", "lower confidence bound of the quantile"),
                                              ("_ci_upper", "upper confidence bound of the quantile"))}
        self.mean = {suffix: GaugeMetricFamily(f"ocms_numeric_mean{suffix}", text, labels=LABELS)
                     for suffix, text in (("", "numeric metric: estimated mean of the clipped, bucketized values"),
                                          ("_ci_lower", "lower confidence bound of the mean"),
                                          ("_ci_upper", "upper confidence bound of the mean"))}

    def add(self, labels: list[str], histogram: dict) -> None:
        """One window's series from its numeric answer (:func:`agents.answers.service.numeric_answer`)."""
        for row in histogram["cdf"]:
            self.cdf.add_metric(labels + [floatToGoString(row["le"])], row["monotone"])
        if histogram["cdf"]:  # a version asking only for a Hybrid mean has no distribution
            self.cdf.add_metric(labels + ["+Inf"], 1.0)
        for row in histogram["quantiles"]:
            quantile = labels + [floatToGoString(row["q"])]
            for suffix, field in (("", "estimate"), ("_ci_lower", "ci_low"), ("_ci_upper", "ci_high")):
                self.quantile[suffix].add_metric(quantile, row[field])
        for suffix, field in (("", "estimate"), ("_ci_lower", "ci_low"), ("_ci_upper", "ci_high")):
            value = histogram["mean"][field]
            if value is not None:
                self.mean[suffix].add_metric(labels, value)

    def __iter__(self):
        yield self.cdf
        yield from self.quantile.values()
        yield from self.mean.values()
