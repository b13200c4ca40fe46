"""The estimate service: answers from the counts view (estimates, top-K, trends, parameters), no HTTP.

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

The Prometheus export (agents.metrics) reads a window through the same path as /estimates and
/topk (:meth:`EstimateService.window_estimate`: the same snapshot, sums, estimate, top-K rule and noise
floor); the privacy rules are :mod:`agents.answers.privacy`'s and the encoding :mod:`agents.answers.encode`'s.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from cms_core import OCMSParams, OCMSSketch, TrackedValues
from cms_core.errors import InvalidValueError
from cms_core.records import noise_fields
from cms_core.sketch import EstimateOptions, Estimates
from cms_core.values import value_to_json

from .. import longitudinal
from ..state import TOTAL_WIDTH, bucket_start
from ..view import CountsView, shuffle_of, sum_states, sum_states_at
from .encode import Naming, json_answer, records
from .privacy import POINT_CENTRAL_FIELDS, central_cost, central_privacy
from . import windows
from .histogram import MeanPart, TreeLevels, numeric_answer
from .request import ApiError, check_query, parse_duration, parse_int, parse_options, parse_quantiles, show
from .windows import Window

MAX_TREND_POINTS = 10_000

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
# (CENTRAL_COST, one central epsilon not computed before: agents.answers.privacy, where central_cost counts it)
#: Answers up to this much work run inline on the event loop (~ a millisecond).
INLINE_WORK = 1_000_000
#: Answers over this much work (~ seconds of CPU) are refused before they start.
MAX_WORK = 4_000_000_000


@dataclass(frozen=True)
class WindowEstimate:
    """One window's estimates of every tracked value (:meth:`EstimateService.window_estimate`) and what it may
    claim: ``withheld`` (fewer than ``min_reports`` reports: nothing to export, no top-K) and ``central`` (the
    central epsilon fields, :func:`agents.answers.privacy.central_privacy`)."""

    window: Window
    n: int
    estimates: Estimates
    top: tuple[int, ...]  # the top-K's indices, largest first
    withheld: bool
    central: dict
    #: A numeric metric's histogram, CDFs, quantiles and mean (:func:`numeric_answer`); None otherwise or withheld.
    histogram: dict | None = None

    @property
    def noise_floor(self) -> float:
        """The frequency an estimate must exceed to stand above the noise of every tracked value."""
        return self.estimates.noise_floor


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
    #: kind "histogram" (a numeric metric, issue 40): its registry.numeric.NumericSpec and the quantiles asked.
    numeric: object = None
    quantiles: tuple = ()
    #: A tree version's (issue 40): its cms_core.hierarchy.HierarchyParams and each level's summed (n, counts).
    tree: object = None
    levels: tuple = ()
    #: A version's Hybrid mean (issue 40): (its cms_core.hybrid.HybridParams, the part's summed (n, counts)).
    mean_part: tuple | None = None


class Estimator:
    """Estimates and JSON records from summed counts, for the configured parameter sets."""

    def __init__(self, sets: Mapping[str, tuple[OCMSParams, TrackedValues]]):
        self.sets = dict(sets)
        self._one: dict[tuple[str, int], TrackedValues] = {}

    def estimate(self, fp: str, n: int, counts, options: EstimateOptions, memo: dict | None = None) -> Estimates:
        """``memo``: the header's ``longitudinal`` (agents.longitudinal.widen), None for one-shot metrics."""
        params, tracked = self.sets[fp]
        return longitudinal.widen(OCMSSketch(params, tracked, counts, n).estimate(
            confidence=options.confidence, interval=options.interval, postprocess_method=options.postprocess),
            params, memo)

    def estimate_one(self, fp: str, index: int, n: int, count: int, options: EstimateOptions,
                     memo: dict | None = None) -> Estimates:
        """The estimate of one value from its count alone (elementwise post-processing only): O(1).
        Its noise test is the tracked set's (D values), as in the answers over all of them."""
        params, tracked = self.sets[fp]
        one = self._one.get((fp, index))
        if one is None:
            one = self._one[(fp, index)] = TrackedValues.of(params, [tracked.label(index)])
        return longitudinal.widen(OCMSSketch(params, one, [count], n).estimate(
            confidence=options.confidence, interval=options.interval, postprocess_method=options.postprocess,
            noise_values=len(tracked)), params, memo)

    def finish(self, job: Job) -> dict:
        doc = longitudinal.withhold_central(self._finish(job))
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
            est = self.estimate_one(job.fp, job.index, job.n, count, job.options, doc.get("longitudinal"))
            doc.update(noise_fields(est))
            doc["estimate"] = records(est, [count])[0]
            return doc
        est, top = self.window(job)
        doc.update(noise_fields(est))  # every value above or under the noise of all D tracked values
        if job.kind == "histogram":
            doc["histogram"] = numeric_answer(job.numeric, self.sets[job.fp][0], est, job.counts, job.quantiles,
                                              job.tree, job.levels, job.mean_part)
            if job.tree is not None:  # a tree's answer is about every level's reports
                doc["n"] = sum(n for n, _ in job.levels)
            doc["n"] += job.mean_part[1][0] if job.mean_part else 0  # and its Hybrid mean's
        elif job.kind == "all":
            doc["estimates"] = records(est, job.counts)
        elif job.kind == "select":
            doc["estimate"] = records(select(est, [job.index]), job.counts[[job.index]])[0]
        else:  # top
            doc["k"] = job.k
            doc["top"] = records(select(est, top), job.counts[top]) if top else []
        return doc

    def window(self, job: Job) -> tuple[Estimates, list[int]]:
        """A window job's estimates of every tracked value and, for a top-K job, the indices of the K largest
        (largest first; none for an empty window): the one rule of /estimates, /topk and the Prometheus export."""
        est = self.estimate(job.fp, job.n, job.counts, job.options, job.header.get("longitudinal"))
        return est, top_indices(est, job.k) if job.kind == "top" and job.n else []

    def _trend(self, job: Job, doc: dict) -> dict:
        label = value_to_json(self.sets[job.fp][1].label(job.index))
        points = []
        for lo, hi, n, count, central in job.points:
            if n == 0:
                record = {"value": label, "match_count": 0}
            else:
                est = self.estimate_one(job.fp, job.index, n, count, job.options,
                                        longitudinal.for_span(doc.get("longitudinal"), lo, hi))
                record = records(est, [count])[0]
                record["noise_floor"] = noise_fields(est)["noise_floor"]  # each point has its own n
            record.update({"from": lo, "to": hi, "n": n}, **central)
            points.append(record)
        doc["n"] = sum(p["n"] for p in points)
        doc["points"] = points
        return doc


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
        self.numeric = getattr(version, "numeric", None)  # registry.numeric.NumericSpec (issue 40), or None
        self.tree = TreeLevels.of(version, view)  # a tree version's levels (issue 40), or None
        self.mean_part = MeanPart.of(version, view)  # a version's Hybrid mean (issue 40), or None

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

    def _central(self, n: int, snapshot) -> dict:
        """A window's central epsilon fields (:func:`central_privacy`), none for a longitudinal OCMS+RR metric
        (agents.longitudinal.withhold_central: its fixed hash is a pseudonym)."""
        fields = central_privacy(self.version.params, n, *shuffle_of(snapshot))
        version = longitudinal.version_fields(self.version)
        if not version:
            return fields
        held = longitudinal.withhold_central(dict(fields, **version))
        return {key: held[key] for key in held if key not in version}

    def latest_bucket(self, now: float | None = None) -> Window:
        """The latest *complete* base bucket at ``now``."""
        width = self.version.bucket_seconds
        start = bucket_start(self.clock() if now is None else now, width) - width
        return Window("latest_bucket", width, start, start + width)

    def oldest(self, now: float) -> float:
        """The oldest time the longest-kept bucket level still holds."""
        return windows.oldest(self.version.levels, now)

    def time_range(self, query: Mapping[str, str], now: float, default_span: float | None = None) -> tuple[float, float]:
        """[from, to) of the query (:func:`agents.answers.windows.time_range`)."""
        return windows.time_range(query, now, self.version.levels, self.future_tolerance_seconds, default_span)

    def range_window(self, start: float, stop: float, now: float, step: int | None = None) -> Window:
        """Buckets covering [start, stop) (:func:`agents.answers.windows.range_window`)."""
        return windows.range_window(self.version.levels, start, stop, now, step)

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

    def estimate(self, n: int, counts: np.ndarray, options: EstimateOptions, window: Window | None = None) -> Estimates:
        """``window``: the counts' window, for a longitudinal metric's correlated reports (agents.longitudinal)."""
        memo = longitudinal.header_fields(self, window).get("longitudinal") if window is not None else None
        return self.estimator.estimate(self.fingerprint, n, counts, options, memo)

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
            **longitudinal.header_fields(self, window),  # issue 38: both budgets; correlated reports widen
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
        quantiles = self._quantiles(query) if endpoint == "histogram" else ()
        window = self.window_from_query(query)
        return lambda: self._read(endpoint, fp, options, window, index, k, quantiles)

    def _quantiles(self, query: Mapping[str, str]) -> tuple[float, ...]:
        """The quantiles a histogram answer holds: the metric's and the request's ``q``."""
        if self.numeric is None:
            v = self.version
            raise ApiError("metric", f"{v.metric!r} version {v.version} is not numeric (its values are {v.domain}): "
                                     "ask /estimates", status=404)
        return tuple(sorted(set(self.numeric.quantiles) | set(parse_quantiles(query.get("q")))))

    def _read(self, endpoint: str, fp: str, options: EstimateOptions, window: Window, index: int, k: int,
              quantiles: tuple = ()) -> Answer:
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
        if endpoint == "histogram":  # the CDF's k variances of O(k) each, a record per bucket and quantile
            work = full + d * d * SUM_COST + (2 * d + len(quantiles)) * RECORD_COST
            levels = None if self.tree is None else self.tree.snapshots(window)
            work += 0 if self.tree is None else self.tree.work
            part = None if self.mean_part is None else self.mean_part.snapshot(window)
            return Answer(self._bounded(work, parameter, what), lambda: dataclasses.replace(
                self._window_job(snapshot, "histogram", fp, header, options), numeric=self.numeric,
                quantiles=quantiles, **({} if levels is None else self.tree.job_fields(levels)),
                **({} if part is None else self.mean_part.job_fields(part))))
        kind, returned = {"estimates": ("all", d), "estimate_value": ("select", 1), "topk": ("top", 0)}[endpoint]
        if kind == "top":
            returned = k

        return Answer(self._bounded(full + returned * RECORD_COST, parameter, what),
                      lambda: self._window_job(snapshot, kind, fp, header, options, index, k))

    def _window_job(self, snapshot, kind: str, fp: str, header: dict, options: EstimateOptions, index: int = 0,
                    k: int = 0) -> Job:
        """The summed counts of a window's snapshot and the central epsilon of its reports (any thread)."""
        n, counts = sum_states(snapshot, self.d)
        return Job(kind, fp, header, options, n, counts, index=index if kind == "select" else 0,
                   k=k if kind == "top" else 0, central=self._central(n, snapshot))

    def window_estimate(self, window: Window, options: EstimateOptions = EstimateOptions(),
                        top_k: int = 0) -> WindowEstimate:
        """A window read as /estimates and /topk read it (one snapshot: its sums, the estimate of every value, the
        top ``top_k`` and the central epsilon), in one step and without the work limit, with what the privacy
        rules let it claim: what the Prometheus export asks (agents.metrics)."""
        snapshot, _ = self._snapshot(self.fingerprint, window)
        header = self._header(self.fingerprint, window, 0, options)
        job = self._window_job(snapshot, "top", self.fingerprint, header, options, k=top_k)
        est, top = self.estimator.window(job)
        tree = {} if self.tree is None else self.tree.job_fields(self.tree.snapshots(window))
        mean = {} if self.mean_part is None else self.mean_part.job_fields(self.mean_part.snapshot(window))
        held = self.withheld((sum(n for n, _ in tree["levels"]) if tree else job.n)
                             + (mean["mean_part"][1][0] if mean else 0))
        histogram = None if held or self.numeric is None else numeric_answer(
            self.numeric, self.version.params, est, job.counts, self.numeric.quantiles, **tree, **mean)
        return WindowEstimate(window, job.n, est, () if held else tuple(top), held, job.central, histogram)

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
                    est = select(self.estimator.estimate(fp, n, counts, options, longitudinal.for_span(
                        header.get("longitudinal"), lo, hi)), [index])
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
        """Reports counted by this version (all time; a tree's: every level's; and a Hybrid mean's part's):
        O(partitions), no counts summed."""
        fingerprints = (self.fingerprint,) if self.tree is None else self.tree.fingerprints
        fingerprints += () if self.mean_part is None else (self.mean_part.fingerprint,)
        return sum(state.n for fp in fingerprints for _, states in self.view.snapshot(fp, TOTAL_WIDTH, 0, 1)
                   for state in states)

    def params_doc(self) -> dict:
        """/params: the version's parameter set, levels, watch list and top-K."""
        v = self.version
        return {
            "metric": v.metric, "version": v.version,
            "parameter_sets": [{"fingerprint": self.fingerprint, "primary": True, "reports": self.reports(),
                                "tracked_values": self.d, "metric": v.metric, "version": v.version,
                                **v.params.describe(), **longitudinal.version_fields(v)}],
            "bucket_seconds": v.bucket_seconds, "retention_seconds": v.retention_seconds,
            "levels": [{"bucket_seconds": w, "retention_seconds": r} for w, r in v.levels],
            "watch": list(v.watch), "min_reports": v.min_reports, "top_k": v.top_k,
            **self._numeric_fields(),
        }

    def _numeric_fields(self) -> dict:
        """A numeric metric's layout (issue 40: its buckets' bounds, clipping, quantiles), a tree's levels (their
        fingerprints and parameters) and a Hybrid mean's part, for /params and the listing; nothing for a frequency
        metric."""
        if self.numeric is None:
            return {}
        return {"numeric": self.numeric.describe(),
                **({} if self.tree is None else {"hierarchy": self.version.describe_tree()}),
                **({} if self.mean_part is None else {"mean": self.version.mean.describe()})}  # its fingerprint

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
            "reporting": "longitudinal" if getattr(v, "longitudinal", None) is not None else "one_shot",
            **longitudinal.version_fields(v), **self._numeric_fields(),
        }


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
