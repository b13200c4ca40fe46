"""A numeric metric's window (issue 40): its bucket estimates as a histogram, CDFs, quantiles and the mean."""

from __future__ import annotations

from cms_core import OCMSParams
from cms_core import numeric as numeric_core
from cms_core.sketch import Estimates

from .encode import records


def numeric_answer(spec, params: OCMSParams, est: Estimates, counts, quantiles) -> dict | None:
    """A numeric metric's window (issue 40) from its bucket estimates (the frequency answer of the bucket
    indices, so the noise floor and each bucket's interval are the frequencies'): the histogram, the raw and the
    monotone CDF, the quantiles and the mean with their intervals (:func:`cms_core.numeric.summary`); None
    without reports. Each bucket's record also holds its frequency estimate, as /estimates gives it."""
    doc = numeric_core.window_summary(spec.layout, params, est.frequency, est.n, est.confidence, quantiles)
    if doc is None:
        return None
    for bucket, record in zip(doc["buckets"], records(est, counts)):
        bucket.update(record, bucket=int(record.pop("value")))
    doc["layout"] = spec.describe()
    return doc
