"""Answers from the counts view: estimates, top-K, trends, parameters.

Everything here is synchronous and reads the view once per answer (the event
loop never interleaves a view update with a query). Estimates are computed by
``cms_core.OCMSSketch`` from summed integer counts, so a range is the exact
sum of its buckets and gets an unbiased estimate with its own interval.

HTTP parameters are parsed here; a bad one raises :class:`ApiError` naming it
(the web layer turns that into a 400 or 404 JSON answer).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Mapping

import numpy as np

from cms_core import OCMSParams, OCMSSketch, TrackedValues, postprocess
from cms_core.errors import OCMSError
from cms_core.sketch import INTERVALS, Estimates

from .settings import WorkerSettings, tracked_values, watch_indices
from .state import TOTAL_WIDTH, bucket_start
from .view import CountsView

MAX_TREND_POINTS = 10_000
_RELATIVE = re.compile(r"^(?:now)?-(\d+(?:\.\d+)?)([smhd])$")
_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}


class ApiError(OCMSError):
    """A bad HTTP parameter (status 400) or an unknown value (404)."""

    def __init__(self, parameter: str, message: str, status: int = 400):
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter
        self.message = message
        self.status = status

    def as_json(self) -> dict:
        return {"error": self.message, "parameter": self.parameter, "status": self.status}


def parse_time(name: str, raw: str, now: float) -> float:
    """Epoch seconds, ISO 8601 (naive = UTC), ``now`` or a relative ``-15m``/``now-2h``."""
    text = raw.strip()
    if text == "now":
        return now
    match = _RELATIVE.match(text)
    if match:
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ApiError(name, f"{raw!r} is not epoch seconds, ISO 8601, 'now' or a relative time like -15m") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        return parsed.timestamp()
    if not math.isfinite(value) or value < 0:
        raise ApiError(name, f"{raw!r} must be a finite, non-negative epoch time")
    return value


def parse_duration(name: str, raw: str) -> int:
    match = _DURATION.match(raw.strip())
    if not match or int(match.group(1)) <= 0:
        raise ApiError(name, f"{raw!r} is not a positive duration (seconds, or with a unit: 90s, 5m, 1h, 1d)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_int(name: str, raw: str, lo: int, hi: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(name, f"{raw!r} is not an integer") from None
    if not lo <= value <= hi:
        raise ApiError(name, f"{value} must be in [{lo}, {hi}]")
    return value


@dataclass(frozen=True)
class EstimateOptions:
    confidence: float = 0.95
    interval: str = "normal"
    postprocess: str = "none"

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> "EstimateOptions":
        confidence = 0.95
        if "confidence" in query:
            try:
                confidence = float(query["confidence"])
            except ValueError:
                raise ApiError("confidence", f"{query['confidence']!r} is not a number") from None
            if not 0.0 < confidence < 1.0:
                raise ApiError("confidence", f"{confidence} must be in (0, 1)")
        interval = query.get("interval", "normal")
        if interval not in INTERVALS:
            raise ApiError("interval", f"{interval!r} is not one of {', '.join(INTERVALS)}")
        method = query.get("postprocess", "none")
        if method not in postprocess.METHODS:
            raise ApiError("postprocess", f"{method!r} is not one of {', '.join(postprocess.METHODS)}")
        return cls(confidence, interval, method)


@dataclass(frozen=True)
class Window:
    """Which counts an answer sums: the cumulative keys, or buckets in [start, stop)."""

    kind: str  # "total" | "latest_bucket" | "range"
    width: int = TOTAL_WIDTH
    start: int = 0
    stop: int = 0

    def as_json(self) -> dict:
        if self.kind == "total":
            return {"kind": "total"}
        return {"kind": self.kind, "from": self.start, "to": self.stop, "bucket_seconds": self.width}


class EstimateService:
    """The worker's answers, computed from a CountsView on demand."""

    def __init__(self, settings: WorkerSettings, view: CountsView, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.view = view
        self.clock = clock
        self.params: dict[str, OCMSParams] = {p.fingerprint.hex(): p for p in settings.params_sets}
        self.tracked: dict[str, TrackedValues] = {fp: tracked_values(settings, p) for fp, p in self.params.items()}
        self.primary = settings.params.fingerprint.hex()
        self.labels = self.tracked[self.primary].all_labels()
        self.position = {str(label): i for i, label in enumerate(self.labels)}
        self.watch = watch_indices(settings, self.tracked[self.primary])

    # -------------------------------------------------------------- pieces
    def resolve_params(self, query: Mapping[str, str]) -> str:
        fp = query.get("params", self.primary)
        if fp not in self.params:
            raise ApiError("params", f"{fp!r} is not an accepted parameter fingerprint (see /params)")
        return fp

    def counts(self, fp: str, window: Window) -> tuple[int, np.ndarray]:
        d = len(self.tracked[fp])
        if window.kind == "total":
            return self.view.sum(fp, TOTAL_WIDTH, 0, d)
        return self.view.sum_range(fp, window.width, window.start, window.stop, d)

    def latest_bucket(self, now: float | None = None) -> Window:
        """The latest *complete* base bucket at ``now``."""
        width = self.settings.bucket_seconds
        start = bucket_start(self.clock() if now is None else now, width) - width
        return Window("latest_bucket", width, start, start + width)

    def range_window(self, start: float, stop: float, now: float, step: int | None = None) -> Window:
        """Buckets covering [start, stop): the finest level whose retention reaches ``start``
        (and whose width divides ``step``); bounds are widened to bucket edges."""
        if stop <= start:
            raise ApiError("to", f"must be after from ({stop:.3f} <= {start:.3f})")
        # A level reaches ``start`` when its first bucket is not expired (processor.expired's negation),
        # so an answer never depends on whether a retention delete has run yet.
        widths = [w for w, _ in self.settings.levels()]
        if step is not None and all(step % w for w in widths):
            raise ApiError("step", f"{step} s is not a multiple of a bucket width {widths}")
        reaching = [w for w, retention in self.settings.levels() if bucket_start(start, w) + w > now - retention]
        if not reaching:
            raise ApiError("from", "is older than the retention of every bucket level")
        for width in reaching:
            if step is None or step % width == 0:
                lo = bucket_start(start, width)
                hi = -(-int(math.ceil(stop)) // width) * width
                return Window("range", width, lo, hi)
        raise ApiError("step", f"{step} s is not a multiple of the bucket width of a level reaching from {reaching}")

    def window_from_query(self, query: Mapping[str, str]) -> Window:
        now = self.clock()
        kind = query.get("window")
        if kind not in (None, "total", "latest_bucket", "range"):
            raise ApiError("window", f"{kind!r} is not one of total, latest_bucket, range")
        if "from" in query or "to" in query or kind == "range":
            if kind in ("total", "latest_bucket"):
                raise ApiError("window", f"{kind} takes no from/to")
            if "from" not in query:
                raise ApiError("from", "is required with to / window=range")
            start = parse_time("from", query["from"], now)
            stop = parse_time("to", query["to"], now) if "to" in query else now
            return self.range_window(start, stop, now)
        if kind == "latest_bucket":
            return self.latest_bucket(now)
        return Window("total")

    def estimate(self, fp: str, n: int, counts: np.ndarray, options: EstimateOptions) -> Estimates:
        sketch = OCMSSketch(self.params[fp], self.tracked[fp], counts, n)
        return sketch.estimate(confidence=options.confidence, interval=options.interval,
                               postprocess_method=options.postprocess)

    def value_index(self, raw: str) -> int:
        key = raw
        if self.params[self.primary].value_domain == "integer":
            try:
                key = str(int(raw))  # "007" and " 7" name the value 7
            except ValueError:
                raise ApiError("value", f"{raw!r} is not an integer (the value domain is integers)") from None
        if key not in self.position:
            raise ApiError("value", f"{raw!r} is not a tracked value", status=404)
        return self.position[key]

    @staticmethod
    def _records(est: Estimates, counts: np.ndarray, indices) -> list[dict]:
        if est.n == 0:
            return [{"value": est.values[i], "match_count": 0} for i in indices]
        records = est.as_records()
        out = []
        for i in indices:
            record = records[i]
            record["match_count"] = int(counts[i])
            out.append(record)
        return out

    def _header(self, fp: str, window: Window, n: int, options: EstimateOptions) -> dict:
        return {
            "params": fp, "window": window.as_json(), "n": n, "confidence": options.confidence,
            "interval": options.interval, "postprocess": options.postprocess,
        }

    # ------------------------------------------------------------- answers
    def _answer(self, fp: str, options: EstimateOptions, query: Mapping[str, str]):
        """(document header, estimates, counts) for the window the query names."""
        window = self.window_from_query(query)
        n, counts = self.counts(fp, window)
        return self._header(fp, window, n, options), self.estimate(fp, n, counts, options), counts

    def estimates(self, query: Mapping[str, str]) -> dict:
        fp = self.resolve_params(query)
        options = EstimateOptions.parse(query)
        doc, est, counts = self._answer(fp, options, query)
        doc["estimates"] = self._records(est, counts, range(len(self.labels)))
        return doc

    def estimate_value(self, value: str, query: Mapping[str, str]) -> dict:
        fp = self.resolve_params(query)
        options = EstimateOptions.parse(query)
        index = self.value_index(value)
        doc, est, counts = self._answer(fp, options, query)
        doc["estimate"] = self._records(est, counts, [index])[0]
        return doc

    def topk(self, query: Mapping[str, str]) -> dict:
        fp = self.resolve_params(query)
        options = EstimateOptions.parse(query)
        k = parse_int("k", query.get("k", "10"), 1, len(self.labels))
        doc, est, counts = self._answer(fp, options, query)
        doc["k"] = k
        doc["top"] = self._records(est, counts, top_indices(est, k)) if doc["n"] else []
        return doc

    def trend(self, query: Mapping[str, str]) -> dict:
        fp = self.resolve_params(query)
        options = EstimateOptions.parse(query)
        if "value" not in query:
            raise ApiError("value", "is required")
        index = self.value_index(query["value"])
        now = self.clock()
        stop = parse_time("to", query["to"], now) if "to" in query else now
        start = parse_time("from", query["from"], now) if "from" in query else stop - 3600
        step = parse_duration("step", query["step"]) if "step" in query else None
        window = self.range_window(start, stop, now, step)
        step = step or window.width
        points_count = -(-(window.stop - window.start) // step)
        if points_count > MAX_TREND_POINTS:
            raise ApiError("step", f"{points_count} points exceed the limit of {MAX_TREND_POINTS}; use a larger step")
        points = []
        for lo in range(window.start, window.stop, step):
            hi = min(lo + step, window.stop)
            n, counts = self.view.sum_range(fp, window.width, lo, hi, len(self.tracked[fp]))
            record = self._records(self.estimate(fp, n, counts, options), counts, [index])[0]
            record.update({"from": lo, "to": hi, "n": n})
            points.append(record)
        doc = self._header(fp, window, sum(p["n"] for p in points), options)
        doc.update({"value": self.labels[index], "step": step, "points": points})
        return doc

    def params_doc(self) -> dict:
        sets = []
        for fp, params in self.params.items():
            n, _ = self.counts(fp, Window("total"))
            sets.append({
                "fingerprint": fp, "primary": fp == self.primary, "reports": n,
                "tracked_values": len(self.tracked[fp]), **params.describe(),
            })
        return {
            "parameter_sets": sets,
            "bucket_seconds": self.settings.bucket_seconds,
            "retention_seconds": self.settings.retention_seconds,
            "levels": [{"bucket_seconds": w, "retention_seconds": r} for w, r in self.settings.levels()],
            "watch": list(self.settings.watch),
            "top_k": self.settings.top_k,
        }


def top_indices(est: Estimates, k: int) -> list[int]:
    """Indices of the k largest (post-processed) estimates, largest first; ties by index."""
    values = est.processed
    order = np.lexsort((np.arange(values.shape[0]), -values))
    return [int(i) for i in order[:k]]
