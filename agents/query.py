"""Answers from the counts view: estimates, top-K, trends, parameters.

Every answer is computed in two steps. ``prepare`` runs on the event loop: it
checks every parameter (unknown, duplicated, malformed, absurd or outside what
exists: a 400 naming the parameter), takes a snapshot of the buckets the
answer reads (``CountsView.snapshot``: references to immutable states) and
states the answer's *work* before any of it is done; an answer over
``MAX_WORK`` is refused. ``Answer.gather`` then sums the snapshot's counts
(any thread) into a picklable :class:`Job`, and ``Estimator.finish`` turns
that into the answer (any thread or process): the web layer runs cheap answers
inline and heavy ones off the event loop (agents.web).

Answers cost what they return: one value's estimate or trend reads that
value's count from each state (O(points + states)), never all D counts, unless
a post-processing method that needs every value (norm_sub, simplex) is asked
for. Estimates are computed by ``cms_core.OCMSSketch`` from summed integer
counts, so a range is the exact sum of its buckets and gets an unbiased
estimate with its own interval.

Values travel as ``cms_core.values.value_to_json`` writes them (always a JSON
string; integers as decimal digits) and are read back with ``value_from_json``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping

import numpy as np
from prometheus_client import Counter as PrometheusCounter

from cms_core import OCMSParams, OCMSSketch, TrackedValues, postprocess
from cms_core.errors import InvalidValueError, OCMSError
from cms_core.records import noise_fields
from cms_core.sketch import INTERVALS, EstimateOptions, Estimates
from cms_core.values import value_to_json

from .state import TOTAL_WIDTH, bucket_start
from .view import CountsView, shuffle_of, sum_states, sum_states_at

MAX_TREND_POINTS = 10_000
_RELATIVE = re.compile(r"^(?:now)?-(\d+(?:\.\d+)?)([smhd])$")
_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}

#: Parameters each endpoint takes; anything else is a 400 naming it.
_ESTIMATE_PARAMETERS = ("params", "window", "from", "to", "confidence", "interval", "postprocess")
PARAMETERS: dict[str, tuple[str, ...]] = {
    "estimates": _ESTIMATE_PARAMETERS,
    "estimate_value": _ESTIMATE_PARAMETERS,
    "topk": _ESTIMATE_PARAMETERS + ("k",),
    "trend": ("params", "value", "from", "to", "step", "confidence", "interval", "postprocess"),
    "params": (),
    "healthz": (),
    "metrics": (),
}

#: Post-processing methods that act on each value alone (the others need all D estimates).
ELEMENTWISE = ("none", "clip")

# Work model, in rough nanoseconds of one CPU (measured on the 2-CPU Xeon VM of
# docs/results at D = 100,000), stated before an answer starts.
SUM_COST = 1  # one count added (numpy)
ESTIMATE_COST = 250  # one value estimated with post-processing (numpy passes; a sort for norm_sub/simplex)
STATE_COST = 300  # one state read for one value (Python)
POINT_COST = 100_000  # one single-value estimate (a one-value sketch)
RECORD_COST = 20_000  # one record answered (dict, float reprs, JSON text)
NOISE_COST = 100_000  # one noise floor (a binomial tail: 0.03-0.1 ms at n <= 10^6, cms_core.binomial.critical_count)
CENTRAL_COST = 25_000_000  # one central epsilon not computed before (cms_core.shuffle: 5-25 ms; then cached)
#: Answers up to this much work run inline on the event loop (~ a millisecond).
INLINE_WORK = 1_000_000
#: Answers over this much work (~ seconds of CPU) are refused before they start.
MAX_WORK = 4_000_000_000

#: Record fields that can be infinite (a bound the theorem cannot give): JSON null.
_BOUND_FIELDS = ("ci_low", "ci_high", "count_ci_low", "count_ci_high", "processed_ci_low", "processed_ci_high",
                 "processed_count_ci_low", "processed_count_ci_high")


def show(raw: str, limit: int = 40) -> str:
    """A parameter value as an error message quotes it: repr, at most ~``limit`` characters."""
    text = repr(raw)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 12]}...' ({len(raw):,} characters)"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(OCMSError):
    """A bad HTTP parameter (status 400) or an unknown value (404)."""

    def __init__(self, parameter: str, message: str, status: int = 400):
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter
        self.message = message
        self.status = status

    def as_json(self) -> dict:
        return {"error": self.message, "parameter": self.parameter, "status": self.status}


def check_query(endpoint: str, pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The query as a dict; an unknown or repeated parameter is a 400 naming it."""
    allowed = PARAMETERS[endpoint]
    query: dict[str, str] = {}
    for name, raw in pairs:
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1)
            hint = f"did you mean {close[0]!r}?" if close else (
                f"this endpoint takes {', '.join(allowed)}" if allowed else "this endpoint takes no parameters")
            raise ApiError(show(name)[1:-1] if len(name) <= 38 else show(name), f"unknown parameter; {hint}")
        if name in query:
            raise ApiError(name, "given more than once; give it once")
        query[name] = raw
    return query


def parse_time(name: str, raw: str, now: float) -> float:
    """Epoch seconds, ISO 8601 (naive = UTC), ``now`` or a relative ``-15m``/``now-2h``."""
    text = raw.strip()
    if text == "now":
        return now
    match = _RELATIVE.match(text)
    if match:
        value = now - float(match.group(1)) * _UNITS[match.group(2)]
    else:
        try:
            value = float(text)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=timezone.utc)
                value = parsed.timestamp()
            except (ValueError, OverflowError):
                raise ApiError(name, f"{show(raw)} is not epoch seconds, ISO 8601, 'now' or a relative time "
                                     "like -15m") from None
    if not math.isfinite(value) or value < 0:
        raise ApiError(name, f"{show(raw)} must be a finite, non-negative epoch time")
    return value


def parse_duration(name: str, raw: str) -> int:
    match = _DURATION.match(raw.strip())
    if not match or len(match.group(1)) > 18 or int(match.group(1)) <= 0:
        raise ApiError(name, f"{show(raw)} is not a positive duration (seconds, or with a unit: 90s, 5m, 1h, 1d)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_int(name: str, raw: str, lo: int, hi: int) -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?\d{1,18}", text):
        raise ApiError(name, f"{show(raw)} is not an integer in [{lo}, {hi}]")
    value = int(text)
    if not lo <= value <= hi:
        raise ApiError(name, f"{value} must be in [{lo}, {hi}]")
    return value


def parse_options(query: Mapping[str, str]) -> EstimateOptions:
    """The ``confidence``, ``interval`` and ``postprocess`` of a query; a bad one is a 400 naming it."""
    confidence = EstimateOptions.confidence
    if "confidence" in query:
        raw = query["confidence"]
        try:
            confidence = float(raw)
        except ValueError:
            raise ApiError("confidence", f"{show(raw)} is not a number") from None
        if not 0.0 < confidence < 1.0:  # NaN fails too
            raise ApiError("confidence", f"{show(raw)} must be a number in (0, 1)")
    interval = query.get("interval", EstimateOptions.interval)
    if interval not in INTERVALS:
        raise ApiError("interval", f"{show(interval)} is not one of {', '.join(INTERVALS)}")
    method = query.get("postprocess", EstimateOptions.postprocess)
    if method not in postprocess.METHODS:
        raise ApiError("postprocess", f"{show(method)} is not one of {', '.join(postprocess.METHODS)}")
    return EstimateOptions(confidence, interval, method)


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

    def bounds(self) -> tuple[int, int]:
        """[start, stop) of the bucket starts this window reads (the cumulative key starts at 0)."""
        return (0, 1) if self.kind == "total" else (self.start, self.stop)


@dataclass(frozen=True)
class Answer:
    """A checked request: its work (see the work model above) and ``gather``, which reads
    only the snapshot taken by ``prepare`` (any thread) and returns a :class:`Job`: the
    summed counts an :class:`Estimator` turns into the answer (any thread or process)."""

    work: int
    gather: Callable[[], "Job"]


#: A request whose parameters are checked (against the metric version and the clock, no counts read):
#: called where the counts are, it reads the view's snapshot and states the work (raising the ApiError of a
#: request over ``MAX_WORK``, which depends on the states read).
Read = Callable[[], Answer]


def doc_read(make_doc: Callable[[], dict]) -> Read:
    """The read of an answer that is one document made from the view (/params: its report counts)."""
    def read() -> Answer:
        doc = make_doc()
        return Answer(0, lambda: Job("doc", doc=doc))

    return read


@dataclass(frozen=True)
class Job:
    """Everything an answer needs after the counts are summed (picklable, no view).

    kind: "all" (every value), "top" (``k`` largest), "select" (``index`` from the estimates
    of all values: post-processing that needs them), "one" (``index`` alone: a one-value
    sketch), "trend" (``points`` of (from, to, n, count) of ``index``), "doc" (``doc`` is done).
    """

    kind: str
    fp: str = ""
    header: dict | None = None
    options: EstimateOptions = EstimateOptions()
    n: int = 0
    counts: np.ndarray | None = None
    index: int = 0
    k: int = 0
    points: tuple = ()
    doc: dict | None = None
    #: Applied to the finished answer (picklable): agents.catalog names values and withholds windows.
    rename: Callable[[dict], dict] | None = None
    #: The window's central epsilon fields (:func:`central_privacy`); a trend's points carry their own.
    central: dict | None = None


class Estimator:
    """Estimates and JSON records from summed counts, for the configured parameter sets."""

    def __init__(self, sets: Mapping[str, tuple[OCMSParams, TrackedValues]]):
        self.sets = dict(sets)
        self._one: dict[tuple[str, int], TrackedValues] = {}

    def estimate(self, fp: str, n: int, counts, options: EstimateOptions) -> Estimates:
        params, tracked = self.sets[fp]
        return OCMSSketch(params, tracked, counts, n).estimate(
            confidence=options.confidence, interval=options.interval, postprocess_method=options.postprocess)

    def estimate_one(self, fp: str, index: int, n: int, count: int, options: EstimateOptions) -> Estimates:
        """The estimate of one value from its count alone (elementwise post-processing only): O(1).
        Its noise test is the tracked set's (D values), as in the answers over all of them."""
        params, tracked = self.sets[fp]
        one = self._one.get((fp, index))
        if one is None:
            one = self._one[(fp, index)] = TrackedValues.of(params, [tracked.label(index)])
        return OCMSSketch(params, one, [count], n).estimate(
            confidence=options.confidence, interval=options.interval, postprocess_method=options.postprocess,
            noise_values=len(tracked))

    def finish(self, job: Job) -> dict:
        doc = self._finish(job)
        return doc if job.rename is None else job.rename(doc)

    def _finish(self, job: Job) -> dict:
        if job.kind == "doc":
            return job.doc
        doc = dict(job.header)
        if job.central is not None:
            doc.update(job.central)
        if job.kind == "trend":
            return self._trend(job, doc)
        doc["n"] = job.n
        if job.kind == "one":
            count = int(job.counts[0])
            est = self.estimate_one(job.fp, job.index, job.n, count, job.options)
            doc.update(noise_fields(est))
            doc["estimate"] = records(est, [count])[0]
            return doc
        est = self.estimate(job.fp, job.n, job.counts, job.options)
        doc.update(noise_fields(est))  # every value above or under the noise of all D tracked values
        if job.kind == "all":
            doc["estimates"] = records(est, job.counts)
        elif job.kind == "select":
            doc["estimate"] = records(select(est, [job.index]), job.counts[[job.index]])[0]
        else:  # top
            doc["k"] = job.k
            top = top_indices(est, job.k) if job.n else []
            doc["top"] = records(select(est, top), job.counts[top]) if top else []
        return doc

    def _trend(self, job: Job, doc: dict) -> dict:
        label = value_to_json(self.sets[job.fp][1].label(job.index))
        points = []
        for lo, hi, n, count, central in job.points:
            if n == 0:
                record = {"value": label, "match_count": 0}
            else:
                est = self.estimate_one(job.fp, job.index, n, count, job.options)
                record = records(est, [count])[0]
                record["noise_floor"] = noise_fields(est)["noise_floor"]  # each point has its own n
            record.update({"from": lo, "to": hi, "n": n}, **central)
            points.append(record)
        doc["n"] = sum(p["n"] for p in points)
        doc["points"] = points
        return doc


#: Records left out of JSON answers because they could not be written, by (field, reason); the answer
#: process's counts come back with each answer (``finish_json``). Exported by every /metrics that serves answers.
ANSWER_RECORDS_DROPPED = PrometheusCounter(
    "ocms_answer_records_dropped", "records left out of a JSON answer because they could not be written "
    "(text that is not valid Unicode, a number that is not finite), by the answer's field and the reason",
    ["field", "reason"], registry=None)


def _dump(doc, indent: int | None = None) -> bytes:
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(doc, allow_nan=False, ensure_ascii=False, indent=indent, separators=separators).encode("utf-8")


def _unwritable(record) -> str | None:
    """Why ``record`` cannot be written as JSON (a reason name), or None."""
    try:
        _dump(record)
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for it (checked before ValueError, its base)
        return "text_not_unicode"
    except ValueError:
        return "number_not_finite"
    except TypeError:
        return "not_json_type"
    return None


def _without_bad_records(node, field: str | None, dropped: dict) -> object:
    """``node`` without the records (dicts in a list, at any depth) that cannot be written; each left out
    is counted under (the list's field, reason). A record keeps its good nested records."""
    if isinstance(node, dict):
        return {key: _without_bad_records(value, key, dropped) for key, value in node.items()}
    if isinstance(node, list):
        kept = []
        for item in node:
            if isinstance(item, dict):
                item = _without_bad_records(item, field, dropped)
                reason = _unwritable(item)
                if reason is not None:
                    dropped[(field, reason)] = dropped.get((field, reason), 0) + 1
                    continue
            kept.append(item)
        return kept
    return node


def json_answer(doc: dict, indent: int | None = None) -> tuple[bytes, dict]:
    """(UTF-8 JSON text of ``doc``, {(field, reason): records left out}).

    One record that cannot be written (text with a lone surrogate, a NaN) never fails the whole
    answer: it is left out, and the answer says so in ``dropped_records`` ({field: {reason: n}}).
    """
    try:
        return _dump(doc, indent), {}
    except (ValueError, TypeError):
        pass
    dropped: dict = {}
    pruned = _without_bad_records(doc, None, dropped)
    summary: dict = {}
    for (field, reason), n in sorted(dropped.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        summary.setdefault(str(field), {})[reason] = n
    pruned["dropped_records"] = summary
    return _dump(pruned, indent), dropped


def count_dropped(dropped: dict) -> None:
    for (field, reason), n in dropped.items():
        ANSWER_RECORDS_DROPPED.labels(str(field), reason).inc(n)


def to_json(doc: dict) -> bytes:
    """JSON text of an answer: UTF-8, no NaN/Infinity (records carry null for an unbounded end); a record
    that cannot be written is left out and counted (:func:`json_answer`, ocms_answer_records_dropped_total)."""
    body, dropped = json_answer(doc)
    count_dropped(dropped)
    return body


_PROCESS_ESTIMATOR: Estimator | None = None


def start_answer_process(sets: Mapping[str, tuple[OCMSParams, TrackedValues]], niceness: int) -> None:
    """Initializer of the answer process: its Estimator, and a lower CPU priority than intake."""
    global _PROCESS_ESTIMATOR
    _PROCESS_ESTIMATOR = Estimator(sets)
    try:
        os.nice(niceness)
    except OSError:
        pass


def finish_json(job: Job) -> tuple[bytes, dict]:
    """In the answer process: the answer's JSON text and the records it left out (counted by the worker)."""
    return json_answer(_PROCESS_ESTIMATOR.finish(job))


def select(est: Estimates, indices) -> Estimates:
    """The estimates of ``indices`` only (so records are built for what is returned)."""
    idx = np.asarray(indices, dtype=np.int64)
    return dataclasses.replace(
        est, values=[est.values[i] for i in idx], frequency=est.frequency[idx], processed=est.processed[idx],
        variance=est.variance[idx], std=est.std[idx], ci_low=est.ci_low[idx], ci_high=est.ci_high[idx],
        processed_ci_low=est.processed_ci_low[idx], processed_ci_high=est.processed_ci_high[idx],
        above_noise=est.above_noise[idx],
    )


def records(est: Estimates, counts) -> list[dict]:
    """JSON records of every value of ``est`` with their match counts: the value as
    ``value_to_json`` writes it, an unbounded interval end as null (JSON has no infinity)."""
    counts = [int(c) for c in counts]
    if est.n == 0:
        return [{"value": value_to_json(v), "match_count": c} for v, c in zip(est.values, counts)]
    out = est.as_records()
    unbounded = not (np.isfinite(est.ci_low).all() and np.isfinite(est.ci_high).all())
    for record, count in zip(out, counts):
        record["value"] = value_to_json(record["value"])
        record["match_count"] = count
        if unbounded:
            for field in _BOUND_FIELDS:
                if not math.isfinite(record[field]):
                    record[field] = None
    return out


@dataclass(frozen=True)
class Naming:
    """What turns a version's answer into a named one: metric, version, value names, min_reports.

    Picklable (it travels with the answer's job to the answer process, agents.web), applied to the
    finished answer by ``Estimator.finish``."""

    metric: str
    version: int
    mechanism: str
    min_reports: int
    names: tuple[str, ...] | None  # category names by id; None: values are their own names

    def name_of(self, label: str) -> str:
        """The name of a value as ``value_to_json`` wrote it (a category id's digits -> its name)."""
        return label if self.names is None else self.names[int(label)]

    def withheld(self, n: int) -> bool:
        return n < self.min_reports

    def __call__(self, doc: dict) -> dict:
        """An answer with the metric, version and value names, and withheld windows emptied."""
        out = {"metric": self.metric, "version": self.version, "mechanism": self.mechanism,
               "min_reports": self.min_reports}
        out.update(doc)
        withheld = self.withheld(doc.get("n", 0))
        out["withheld"] = withheld
        if "estimates" in doc:
            out["estimates"] = [] if withheld else [self._record(r) for r in doc["estimates"]]
        if "estimate" in doc:
            out["estimate"] = None if withheld else self._record(doc["estimate"])
        if "top" in doc:
            out["top"] = [] if withheld else [self._record(r) for r in doc["top"]]
        if "points" in doc:
            out["value"] = self.name_of(doc["value"])
            out["withheld"] = False  # a trend withholds point by point
            out["points"] = [self._point(p) for p in doc["points"]]
        return out

    def _record(self, record: dict) -> dict:
        return dict(record, value=self.name_of(record["value"]))

    def _point(self, point: dict) -> dict:
        point = self._record(point)
        if self.withheld(point["n"]):
            for name in WITHHELD_FIELDS:
                point.pop(name, None)
            point["withheld"] = True
        else:
            point["withheld"] = False
        return point


#: Record fields that exist only with an estimate: a withheld window answers without them.
WITHHELD_FIELDS = (
    "match_count", "frequency", "processed", "count", "processed_count", "std",
    "ci_low", "ci_high", "count_ci_low", "count_ci_high", "processed_ci_low", "processed_ci_high",
    "processed_count_ci_low", "processed_count_ci_high", "above_noise",
)


class EstimateService:
    """The answers of one metric version (``registry.MetricVersion``: one fingerprint), computed from a
    CountsView on demand; values are read and written by name (``ATL``, a string, an integer's digits),
    and a window holding fewer than the version's ``min_reports`` reports is withheld.

    ``future_tolerance_seconds`` (a worker-wide setting) bounds how far ahead of now a range may reach."""

    def __init__(self, version, view: CountsView, clock: Callable[[], float] = time.time,
                 future_tolerance_seconds: int = 300):
        self.version = version
        self.view = view
        self.clock = clock
        self.future_tolerance_seconds = future_tolerance_seconds
        self.fingerprint = version.fingerprint.hex()
        self.tracked = version.tracked_values()
        self.labels = self.tracked.all_labels()
        self.d = len(self.labels)
        # value (as value_from_json reads it) -> index; a range computes it instead.
        self.position = None if self.tracked.is_range else {label: i for i, label in enumerate(self.labels)}
        self.watch = version.watch_indices()
        self.naming = Naming(version.metric, version.version, version.mechanism, version.min_reports,
                             version.value_names)
        self.estimator = Estimator({self.fingerprint: (version.params, self.tracked)})

    # -------------------------------------------------------------- pieces
    def resolve_params(self, query: Mapping[str, str]) -> str:
        fp = query.get("params", self.fingerprint)
        if fp != self.fingerprint:
            raise ApiError("params", f"{show(fp)} is not an accepted parameter fingerprint (see /params)")
        return fp

    def counts(self, window: Window) -> tuple[int, np.ndarray]:
        start, stop = window.bounds()
        return self.view.sum_range(self.fingerprint, window.width, start, stop, self.d)

    def name_of(self, label: str) -> str:
        """The name of a value as ``value_to_json`` wrote it (a category id's digits -> its name)."""
        return self.naming.name_of(label)

    def withheld(self, n: int) -> bool:
        return self.naming.withheld(n)

    def central(self, window: Window, n: int) -> dict:
        """The central epsilon fields of a window of ``n`` reports (:func:`central_privacy`): O(states)."""
        start, stop = window.bounds()
        snapshot = self.view.snapshot(self.fingerprint, window.width, start, stop)
        return central_privacy(self.version.params, n, *shuffle_of(snapshot))

    def latest_bucket(self, now: float | None = None) -> Window:
        """The latest *complete* base bucket at ``now``."""
        width = self.version.bucket_seconds
        start = bucket_start(self.clock() if now is None else now, width) - width
        return Window("latest_bucket", width, start, start + width)

    def oldest(self, now: float) -> float:
        """The oldest time the longest-kept bucket level still holds."""
        return now - max(retention for _, retention in self.version.levels)

    def time_range(self, query: Mapping[str, str], now: float, default_span: float | None = None) -> tuple[float, float]:
        """[from, to) of the query, checked against what can exist: nothing after now plus
        the accepted clock skew, nothing before every level's retention. Errors name the
        parameter the user gave (or the one to add)."""
        horizon = now + self.future_tolerance_seconds
        skew = f"now + {self.future_tolerance_seconds} s of accepted clock skew"
        start = stop = None
        if "from" in query:
            start = parse_time("from", query["from"], now)
            if start > horizon:
                raise ApiError("from", f"{show(query['from'])} is in the future (the latest time is {skew})")
        if "to" in query:
            stop = parse_time("to", query["to"], now)
            if stop > horizon:
                raise ApiError("to", f"{show(query['to'])} is in the future (the latest time is {skew})")
        if stop is None:
            stop = now
        if start is None:
            if default_span is None:
                raise ApiError("from", "is required with to / window=range")
            start = max(stop - default_span, self.oldest(now))
        if stop <= start:
            if "to" in query:
                raise ApiError("to", f"{show(query['to'])} must be after from ({show(query.get('from', ''))})")
            raise ApiError("from", f"{show(query['from'])} must be before to (now)")
        return start, stop

    def range_window(self, start: float, stop: float, now: float, step: int | None = None) -> Window:
        """Buckets covering [start, stop): the finest level whose retention reaches ``start``
        (and whose width divides ``step``); bounds are widened to bucket edges."""
        if stop <= start:
            raise ApiError("to", f"must be after from ({iso(stop)} <= {iso(start)})")
        # A level reaches ``start`` when its first bucket is not expired (processor.expired's negation),
        # so an answer never depends on whether a retention delete has run yet.
        levels = self.version.levels
        widths = [w for w, _ in levels]
        if step is not None:
            longest = max(retention for _, retention in levels)
            if step > longest:
                raise ApiError("step", f"{step:,} s is longer than the longest retention ({longest:,} s)")
            if all(step % w for w in widths):
                raise ApiError("step", f"{step} s is not a multiple of a bucket width {widths}")
        reaching = [w for w, retention in levels if bucket_start(start, w) + w > now - retention]
        if not reaching:
            raise ApiError("from", f"{iso(start)} is older than the retention of every bucket level "
                                   f"(the oldest kept is about {iso(self.oldest(now))})")
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
            raise ApiError("window", f"{show(kind)} is not one of total, latest_bucket, range")
        if "from" in query or "to" in query or kind == "range":
            if kind in ("total", "latest_bucket"):
                raise ApiError("window", f"{kind} takes no from/to")
            start, stop = self.time_range(query, now)
            return self.range_window(start, stop, now)
        if kind == "latest_bucket":
            return self.latest_bucket(now)
        return Window("total")

    def estimate(self, n: int, counts: np.ndarray, options: EstimateOptions) -> Estimates:
        return self.estimator.estimate(self.fingerprint, n, counts, options)

    def value_index(self, raw: str, parameter: str = "value") -> int:
        """Index in the tracked set of a value given by name (a category, an integer's digits, a string)."""
        v = self.version
        try:
            value = v.value_from_name(raw)
        except (InvalidValueError, ValueError):  # ValueError: digits beyond Python's int conversion limit
            if v.domain == "categories":
                raise ApiError(parameter, f"{show(raw)} is not a category of metric {v.metric!r} version "
                                          f"{v.version}", status=404) from None
            if raw.isascii() and raw.isdigit():
                raise ApiError(parameter, f"{show(raw)} is outside the dictionary of metric {v.metric!r} "
                                          f"[0, {v.params.dictionary_size})", status=404) from None
            raise ApiError(parameter, f"{show(raw)} is not a value of metric {v.metric!r} "
                                      f"(its values are {v.domain})") from None
        if self.position is None:
            index = value - self.tracked.range_start
            if 0 <= index < self.d:
                return index
        elif value in self.position:
            return self.position[value]
        raise ApiError(parameter, f"{show(raw)} is not a tracked value of metric {v.metric!r} version {v.version}",
                       status=404)

    def _header(self, fp: str, window: Window, n: int, options: EstimateOptions) -> dict:
        return {
            "params": fp, "window": window.as_json(), "n": n, "confidence": options.confidence,
            "interval": options.interval, "postprocess": options.postprocess,
        }

    def _snapshot(self, fp: str, window: Window):
        start, stop = window.bounds()
        snapshot = self.view.snapshot(fp, window.width, start, stop)
        return snapshot, sum(len(states) for _, states in snapshot)

    @staticmethod
    def _bounded(work: int, parameter: str, what: str) -> int:
        if work > MAX_WORK:
            raise ApiError(parameter, f"{what} is about {work / 1e9:.1f} s of work, over the "
                                      f"{MAX_WORK / 1e9:.0f} s a request may take")
        return work

    # ------------------------------------------------------------- answers
    def prepare(self, endpoint: str, query: Mapping[str, str], value: str | None = None) -> Answer:
        """Check a request completely and state its work; nothing is computed yet. The answer names the
        metric, the version and its values (:class:`Naming`)."""
        return self.check(endpoint, query, value)()

    def check(self, endpoint: str, query: Mapping[str, str], value: str | None = None) -> Read:
        """Check a request's parameters, reading no counts: a bad one raises its ApiError here, on any worker,
        before the request is routed to the view holding the counts (agents.web). Returns the rest of
        :meth:`prepare` (:data:`Read`)."""
        query = check_query(endpoint, query.items())
        if endpoint == "params":
            return doc_read(self.params_doc)
        read = self._check(endpoint, query, value)
        naming = self.naming

        def prepared() -> Answer:
            answer = read()
            return Answer(answer.work, lambda: dataclasses.replace(answer.gather(), rename=naming))

        return prepared

    def _check(self, endpoint: str, query: Mapping[str, str], value: str | None) -> Read:
        fp = self.resolve_params(query)
        options = parse_options(query)
        if endpoint == "trend":
            return self._check_trend(fp, options, query)
        index = k = 0
        if endpoint == "estimate_value":
            index = self.value_index(value if value is not None else "")
        elif endpoint == "topk":
            k = parse_int("k", query.get("k", "10"), 1, self.d)
        window = self.window_from_query(query)
        return lambda: self._read(endpoint, fp, options, window, index, k)

    def _read(self, endpoint: str, fp: str, options: EstimateOptions, window: Window, index: int, k: int) -> Answer:
        d = self.d
        snapshot, states = self._snapshot(fp, window)
        what = "this range" if window.kind == "range" else "this window"
        parameter = "from" if window.kind == "range" else "window"
        header = self._header(fp, window, 0, options)
        params = self.version.params
        central_work = central_cost(snapshot, params.epsilon)
        if endpoint == "estimate_value" and options.postprocess in ELEMENTWISE:
            def gather_one() -> Job:
                n, count = sum_states_at(snapshot, index)
                return Job("one", fp, header, options, n, np.array([count], np.int64), index=index,
                           central=central_privacy(params, n, *shuffle_of(snapshot)))

            return Answer(self._bounded(states * STATE_COST + POINT_COST + NOISE_COST + central_work, parameter, what),
                          gather_one)
        full = states * d * SUM_COST + d * ESTIMATE_COST + NOISE_COST + central_work
        kind, returned = {"estimates": ("all", d), "estimate_value": ("select", 1), "topk": ("top", 0)}[endpoint]
        if kind == "top":
            returned = k

        def gather() -> Job:
            n, counts = sum_states(snapshot, d)
            return Job(kind, fp, header, options, n, counts, index=index if kind == "select" else 0,
                       k=k if kind == "top" else 0, central=central_privacy(params, n, *shuffle_of(snapshot)))

        return Answer(self._bounded(full + returned * RECORD_COST, parameter, what), gather)

    def _check_trend(self, fp: str, options: EstimateOptions, query: Mapping[str, str]) -> Read:
        if "value" not in query:
            raise ApiError("value", "is required")
        index = self.value_index(query["value"])
        now = self.clock()
        step = parse_duration("step", query["step"]) if "step" in query else None
        start, stop = self.time_range(query, now, default_span=3600)
        window = self.range_window(start, stop, now, step)
        step = step or window.width
        points_count = -(-(window.stop - window.start) // step)
        if points_count > MAX_TREND_POINTS:
            raise ApiError("step", f"{points_count:,} points exceed the limit of {MAX_TREND_POINTS:,}; "
                                   "use a larger step or a shorter range")
        return lambda: self._read_trend(fp, options, index, window, step, points_count)

    def _read_trend(self, fp: str, options: EstimateOptions, index: int, window: Window, step: int,
                    points_count: int) -> Answer:
        snapshot, states = self._snapshot(fp, window)
        d = self.d
        elementwise = options.postprocess in ELEMENTWISE
        params = self.version.params
        if elementwise:
            work = states * STATE_COST + points_count * (POINT_COST + NOISE_COST + RECORD_COST)
        else:  # every point estimates all D values to post-process them
            work = states * d * SUM_COST + points_count * (d * ESTIMATE_COST + NOISE_COST + RECORD_COST)
        work += central_cost(snapshot, params.epsilon)  # a point's smallest batch is one of the states'
        self._bounded(work, "step", f"{points_count:,} points" + (
            "" if elementwise else f" of postprocess={options.postprocess} over {d:,} values"))
        header = self._header(fp, window, 0, options)
        header.update({"value": value_to_json(self.labels[index]), "step": step})

        def spans():
            """(from, to, that span's buckets) per point, walking the sorted snapshot once."""
            position = 0
            for lo in range(window.start, window.stop, step):
                hi = min(lo + step, window.stop)
                first = position
                while position < len(snapshot) and snapshot[position][0] < hi:
                    position += 1
                yield lo, hi, snapshot[first:position]

        def point_central(buckets, n: int) -> dict:
            central = central_privacy(params, n, *shuffle_of(buckets))
            return {name: central[name] for name in POINT_CENTRAL_FIELDS}

        def gather() -> Job:
            central = central_privacy(params, sum(state.n for _, states in snapshot for state in states),
                                      *shuffle_of(snapshot))
            if elementwise:  # one count per state: O(points + states)
                points = []
                for lo, hi, buckets in spans():
                    n, count = sum_states_at(buckets, index)
                    points.append((lo, hi, n, count, point_central(buckets, n)))
                return Job("trend", fp, header, options, index=index, points=tuple(points), central=central)
            # Post-processing needs every value's estimate at every point: computed here, numpy only.
            doc = dict(header, points=[], **central)
            for lo, hi, buckets in spans():
                n, counts = sum_states(buckets, d)
                if n == 0:
                    record = {"value": header["value"], "match_count": 0}
                else:
                    est = select(self.estimate(n, counts, options), [index])
                    record = records(est, counts[[index]])[0]
                    record["noise_floor"] = noise_fields(est)["noise_floor"]
                record.update({"from": lo, "to": hi, "n": n}, **point_central(buckets, n))
                doc["points"].append(record)
            doc["n"] = sum(p["n"] for p in doc["points"])
            return Job("doc", doc=doc)

        return Answer(work, gather)

    def answer(self, endpoint: str, query: Mapping[str, str], value: str | None = None) -> dict:
        """The answer computed here and now (tests, tools; the web layer splits the steps)."""
        return self.estimator.finish(self.prepare(endpoint, query, value).gather())

    def reports(self) -> int:
        """Reports counted by this version (all time): O(partitions), no counts summed."""
        return sum(state.n for _, states in self.view.snapshot(self.fingerprint, TOTAL_WIDTH, 0, 1)
                   for state in states)

    def params_doc(self) -> dict:
        """/params: the version's parameter set, levels, watch list and top-K."""
        v = self.version
        return {
            "metric": v.metric, "version": v.version,
            "parameter_sets": [{"fingerprint": self.fingerprint, "primary": True, "reports": self.reports(),
                                "tracked_values": self.d, "metric": v.metric, "version": v.version,
                                **v.params.describe()}],
            "bucket_seconds": v.bucket_seconds, "retention_seconds": v.retention_seconds,
            "levels": [{"bucket_seconds": w, "retention_seconds": r} for w, r in v.levels],
            "watch": list(v.watch), "min_reports": v.min_reports, "top_k": v.top_k,
        }

    def newest_bucket(self) -> int | None:
        """Start of the newest base bucket holding counts (freshness), None before the first report."""
        starts = self.view.buckets(self.fingerprint, self.version.bucket_seconds)
        return starts[-1] if starts else None

    def oldest_bucket(self) -> int | None:
        """Start of the oldest retained base bucket holding counts (the console's trend range fits
        the data from there), None before the first report."""
        starts = self.view.buckets(self.fingerprint, self.version.bucket_seconds)
        return starts[0] if starts else None

    def window_reports(self) -> dict:
        """Reports, the withheld state and the central epsilon (:func:`central_privacy`) of the windows the
        API answers by name (``total``, ``latest_bucket``), as Prometheus exports them: O(partitions), no
        counts summed."""
        out = {}
        for window in (Window("total"), self.latest_bucket()):
            start, stop = window.bounds()
            snapshot = self.view.snapshot(self.fingerprint, window.width, start, stop)
            n = sum(state.n for _, states in snapshot for state in states)
            out[window.kind] = dict(window.as_json(), reports=n, withheld=self.withheld(n),
                                    **central_privacy(self.version.params, n, *shuffle_of(snapshot)))
        return out

    def describe(self) -> dict:
        """This version in the /metrics listing."""
        v, p = self.version, self.version.params
        return {
            "windows": self.window_reports(), "parameters": p.describe(),
            "levels": [{"bucket_seconds": w, "retention_seconds": r} for w, r in v.levels],
            "version": v.version, "fingerprint": self.fingerprint, "mechanism": v.mechanism,
            "epsilon": p.epsilon, "mode": p.mode, "hash_range": p.hash_range,
            "domain": v.domain, "domain_size": value_to_json(p.dictionary_size),
            "tracked_values": self.d, "reports": self.reports(),
            "bucket_seconds": v.bucket_seconds, "retention_seconds": v.retention_seconds,
            "rollup_seconds": v.rollup_seconds, "min_reports": v.min_reports,
            "latest_bucket_start": self.newest_bucket(), "oldest_bucket_start": self.oldest_bucket(),
            "watch": list(v.watch), "top_k": v.top_k, "note": v.note,
            # Its values can be discovered (docs/discovery.md): the worker answers /discovered?metric=NAME.
            "discoverable": getattr(v, "discovery", None) is not None,
        }


#: The central epsilon fields a trend point carries (the answer's header carries all of them, for the whole range).
POINT_CENTRAL_FIELDS = ("central_epsilon", "central_delta", "shuffle_batch_min", "shuffled_reports")
#: (smallest batch, epsilon0, delta) -> cms_core.planning.shuffled_privacy of it (a few ms each to compute).
_CENTRAL_CACHE: dict[tuple[int, float, float], dict] = {}
_CENTRAL_CACHE_MAX = 4096


def _central_key(shuffle_min: int, shuffle_max: int, epsilon0: float) -> tuple[int, float, float]:
    """(smallest batch, epsilon0, the delta of the largest batch: below 1/N for every batch of the window)."""
    from cms_core.planning import shuffle_delta

    return shuffle_min, epsilon0, shuffle_delta(max(shuffle_min, shuffle_max))


def _shuffled_privacy(key: tuple[int, float, float]) -> dict:
    from cms_core.planning import shuffled_privacy

    found = _CENTRAL_CACHE.get(key)
    if found is None:
        if len(_CENTRAL_CACHE) >= _CENTRAL_CACHE_MAX:
            _CENTRAL_CACHE.clear()
        batch, epsilon0, delta = key
        found = _CENTRAL_CACHE[key] = shuffled_privacy(epsilon0, batch, delta)
    return found


def central_cost(snapshot, epsilon0: float) -> int:
    """Work of the central epsilons an answer over ``snapshot`` may compute: at most one per (smallest batch,
    delta) among its states and the whole (CENTRAL_COST each; cached ones are free)."""
    from .view import shuffle_of

    keys = {_central_key(state.shuffle_min, state.shuffle_max, epsilon0)
            for _, states in snapshot for state in states if state.shuffle_min}
    _, low, high = shuffle_of(snapshot)
    if low:
        keys.add(_central_key(low, high, epsilon0))
    return CENTRAL_COST * sum(key not in _CENTRAL_CACHE for key in keys)


#: Why a window states no central epsilon (``central_reason``; null when it states one).
CENTRAL_REASONS = ("no_reports", "no_claim_key", "not_shuffled", "partly_shuffled")


def central_privacy(params: OCMSParams, n: int, shuffled: int, shuffle_min: int, shuffle_max: int = 0) -> dict:
    """The central (epsilon, delta) of a window of ``n`` reports, ``shuffled`` of which came through a
    shuffling collector in batches of ``shuffle_min`` to ``shuffle_max`` reports (agents.state), each batch's
    claim verified (agents.trust).

    Why delta of the largest batch: delta must stay below 1/N for every batch (cms_core.planning.shuffle_delta:
    a delta of 1/N allows publishing one report of N in the clear), and eps_c at that smaller delta of the
    smallest batch bounds every batch's at it.

    Why the smallest batch: each report of the window was shuffled in one batch of some n_b >= shuffle_min
    reports, and its batch is (eps_c(n_b), delta)-DP towards whoever sees only the shuffled frames
    (cms_core.shuffle, FMT21); eps_c falls as n grows, so eps_c(shuffle_min) bounds every batch. Batches are
    disjoint, so a device with one report in the window is protected at that figure whatever the other
    batches hold; a device with reports in k batches composes (k * eps_c, k * delta). A window holding
    reports that were not shuffled gets null: the figure would not hold for them (only the local epsilon
    does). The figure holds against readers of Kafka and the worker, not against the collector."""
    from .trust import unverified_note, verifying

    epsilon0 = params.epsilon

    out = {"central_epsilon": None, "central_delta": None, "central_bound": None,
           "shuffle_batch_min": shuffle_min or None, "shuffled_reports": shuffled, "central_reason": None}
    if n == 0:
        out["central_reason"] = "no_reports"
        out["central_note"] = "no reports in this window"
    elif shuffled == 0:
        out["central_reason"] = "not_shuffled" if verifying() else "no_claim_key"
        out["central_note"] = (f"no report of this window came in a frame with a verified shuffle claim: each report "
                               f"is {epsilon0:g}-DP (the local epsilon), against everyone" + unverified_note())
    elif shuffled < n:
        out["central_reason"] = "partly_shuffled"
        out["central_note"] = (f"{n - shuffled:,} of the {n:,} reports of this window were not shuffled (or their "
                               f"shuffle claim did not verify): only the local epsilon {epsilon0:g} holds for them, so "
                               f"no central epsilon is claimed")
    else:
        central = _shuffled_privacy(_central_key(shuffle_min, shuffle_max, float(epsilon0)))
        out.update(central_epsilon=central["central_epsilon"], central_delta=central["delta"],
                   central_bound=central["bound"])
        out["central_note"] = (
            f"every report of this window was shuffled in a batch of at least {shuffle_min:,} reports: to whoever "
            f"reads Kafka or the worker (not the collector), each report is ({central['central_epsilon']:.3g}, "
            f"{central['delta']:g})-DP, not only {epsilon0:g}-DP; a device with reports in k batches: k times that")
    return out


def top_indices(est: Estimates, k: int) -> list[int]:
    """Indices of the k largest (post-processed) estimates, largest first; ties by index.

    O(D + k log k): a partition finds the k-th largest value, then only the chosen are sorted."""
    values = np.asarray(est.processed, dtype=np.float64)
    values = np.where(np.isnan(values), -np.inf, values)
    d = values.shape[0]
    k = max(0, min(k, d))
    if k == 0:
        return []
    if k < d:
        kth = np.partition(values, d - k)[d - k]
        above = np.flatnonzero(values > kth)
        ties = np.flatnonzero(values == kth)[: k - above.size]
        chosen = np.concatenate([above, ties])
    else:
        chosen = np.arange(d)
    order = np.lexsort((chosen, -values[chosen]))
    return [int(i) for i in chosen[order]]
