"""Decode dispatch: match counts per tracked value, on the fastest backend here.

Backends (all bit-exact with each other and with :func:`reference_match_counts`):

* ``"compiled"`` -- the C extension ``cms_core._kernel`` (see its header for
  the algorithms); multi-threaded over report slices, GIL released;
* ``"numpy"`` -- vectorized numpy, used automatically when the extension is
  not built (``BACKEND`` tells which is active);
* :func:`reference_match_counts` -- the slow pure-Python big-integer loop of
  the paper's Algorithm 1, for tests.

Direct randomized response (``params.mechanism == "direct"``) is dispatched
here too: its match count of x is the number of reports with z = x, one
histogram of z, O(n + D) (:func:`direct_match_counts`).

Runtime (OCMS+RR): O(n * D) pair checks; the compiled range path reaches several hundred
million pairs per second per core (benchmarks/bench_decode.py).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from . import _numpy_backend
from .errors import BackendUnavailableError, InvalidParameterError
from .fields import PrimeField
from .params import OCMSParams
from .reports import ReportBatch
from .values import TrackedValues, array_to_elements

try:  # pragma: no cover - depends on the build
    from . import _kernel as _compiled
except ImportError:  # pragma: no cover
    _compiled = None

BACKEND = "compiled" if _compiled is not None else "numpy"
BACKENDS = ("compiled", "numpy")

#: Below this many pairs a second thread costs more than it saves.
_PAIRS_PER_THREAD = 4_000_000

_FIELD_PRIME, _FIELD_BINARY = 0, 1


def default_threads() -> int:
    """Worker threads for decoding: OCMS_DECODE_THREADS or the usable CPU count."""
    env = os.environ.get("OCMS_DECODE_THREADS")
    if env:
        try:
            threads = int(env)
        except ValueError:
            raise InvalidParameterError("OCMS_DECODE_THREADS", env, "must be a positive integer") from None
        if threads < 1:
            raise InvalidParameterError("OCMS_DECODE_THREADS", env, "must be a positive integer")
        return threads
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _field_code(params: OCMSParams) -> tuple[int, int]:
    if isinstance(params.field, PrimeField):
        return _FIELD_PRIME, params.field.order
    return _FIELD_BINARY, params.field.degree


def _resolve_backend(backend: str | None) -> str:
    backend = backend or BACKEND
    if backend not in BACKENDS:
        raise InvalidParameterError("backend", backend, f"expected one of {BACKENDS}")
    if backend == "compiled" and _compiled is None:
        raise BackendUnavailableError("the compiled kernel cms_core._kernel is not built here")
    return backend


def _compiled_job(params: OCMSParams, batch: ReportBatch, tracked: TrackedValues, out: np.ndarray) -> tuple:
    """The compiled kernel's arguments for ``out += counts`` (counts_range's or counts_values')."""
    if tracked.is_range and isinstance(params.field, PrimeField):
        return batch.a0, batch.a1, batch.z, params.field.order, params.hash_range, tracked.range_start, out
    kind, order = _field_code(params)
    return batch.a0, batch.a1, batch.z, kind, order, params.hash_range, tracked.elements, out


def _compiled_counts(params: OCMSParams, batch: ReportBatch, tracked: TrackedValues, out: np.ndarray) -> None:
    _compiled.counts_many([_compiled_job(params, batch, tracked, out)])


def match_counts(
    params: OCMSParams,
    batch: ReportBatch,
    tracked: TrackedValues,
    *,
    backend: str | None = None,
    threads: int | None = None,
) -> np.ndarray:
    """int64 array: for each tracked value x, #reports with h(x) == z.

    The batch must already be validated against ``params`` (sketch.update does).
    """
    backend = _resolve_backend(backend)
    d = len(tracked)
    n = len(batch)
    out = np.zeros(d, np.int64)
    if n == 0:
        return out
    if params.is_direct:
        return direct_match_counts(params, batch.z, tracked)
    if backend == "numpy":
        return _numpy_backend.match_counts(params.field, params.hash_range, batch.a0, batch.a1, batch.z, tracked.elements)
    threads = threads or default_threads()
    threads = max(1, min(threads, n, (n * d) // _PAIRS_PER_THREAD or 1))
    if threads == 1:
        _compiled_counts(params, batch, tracked, out)
        return out
    bounds = np.linspace(0, n, threads + 1).astype(int)
    partials = [np.zeros(d, np.int64) for _ in range(threads)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [
            pool.submit(_compiled_counts, params, batch.slice(bounds[i], bounds[i + 1]), tracked, partials[i])
            for i in range(threads)
        ]
        for f in futures:
            f.result()
    return np.sum(partials, axis=0)


def match_counts_many(
    jobs: Sequence[tuple[OCMSParams, ReportBatch, TrackedValues]],
    *,
    backend: str | None = None,
    threads: int | None = None,
) -> list[np.ndarray]:
    """``match_counts`` of every (params, batch, tracked) job, the same integers, decoded together.

    Why: a worker serving many metrics decodes many small batches per micro-batch (one per metric
    version, partition and bucket). One call each took the GIL back after every batch, and under a
    busy event loop each re-take waited up to the interpreter's switch interval (5 ms); the compiled
    jobs here run in one kernel call per thread (``counts_many``: one GIL release), on up to
    ``threads`` threads with about equal pairs each (a job larger than a thread's share is cut into
    report slices with private count arrays, summed after). Direct RR jobs are a histogram each.
    """
    backend = _resolve_backend(backend)
    results: list[np.ndarray | None] = [None] * len(jobs)
    units = []  # (pairs, kernel arguments): every compiled call, each into its own count array
    slices: list[tuple[int, list[np.ndarray]]] = []  # (job index, partial count arrays) to sum after
    pending = []
    for index, (params, batch, tracked) in enumerate(jobs):
        if len(batch) and not params.is_direct and backend == "compiled":
            pending.append(index)
        else:
            results[index] = match_counts(params, batch, tracked, backend=backend, threads=1)
    total = sum(len(jobs[i][1]) * len(jobs[i][2]) for i in pending)
    threads = max(1, min(threads or default_threads(), total // _PAIRS_PER_THREAD or 1))
    share = -(-total // threads) if total else 1
    for index in pending:
        params, batch, tracked = jobs[index]
        n, d = len(batch), len(tracked)
        parts = max(1, min(n, -(-(n * d) // share)))
        if parts == 1:
            out = results[index] = np.zeros(d, np.int64)
            units.append((n * d, _compiled_job(params, batch, tracked, out)))
            continue
        bounds = np.linspace(0, n, parts + 1).astype(int)
        partials = [np.zeros(d, np.int64) for _ in range(parts)]
        slices.append((index, partials))
        for i, out in enumerate(partials):
            part = batch.slice(bounds[i], bounds[i + 1])
            units.append((len(part) * d, _compiled_job(params, part, tracked, out)))
    bins: list[list[tuple]] = [[] for _ in range(threads)]
    loads = [0] * threads
    for pairs, args in sorted(units, key=lambda unit: unit[0], reverse=True):  # largest first onto the lightest
        lightest = loads.index(min(loads))
        bins[lightest].append(args)
        loads[lightest] += pairs
    bins = [b for b in bins if b]
    if len(bins) <= 1:
        for b in bins:
            _compiled.counts_many(b)
    else:
        with ThreadPoolExecutor(max_workers=len(bins) - 1, thread_name_prefix="ocms-decode-part") as pool:
            others = [pool.submit(_compiled.counts_many, b) for b in bins[1:]]
            _compiled.counts_many(bins[0])
            for future in others:
                future.result()
    for index, partials in slices:
        results[index] = np.sum(partials, axis=0)
    return results


#: Up to this hash range the direct decode counts z into a dense histogram (<= 128 MiB).
_DENSE_HISTOGRAM_LIMIT = 1 << 24


def direct_match_counts(params: OCMSParams, z: np.ndarray, tracked: TrackedValues) -> np.ndarray:
    """Direct RR decode: for each tracked x, #reports with z == x. O(n + D) (dense) or
    O((n + D) log n) (sorted z, for d above 2^24)."""
    elements = tracked.elements.astype(np.int64)
    if params.hash_range <= _DENSE_HISTOGRAM_LIMIT:
        histogram = np.bincount(z, minlength=params.hash_range)
        return histogram[elements].astype(np.int64)
    ordered = np.sort(z)
    return (np.searchsorted(ordered, elements, side="right") - np.searchsorted(ordered, elements, side="left")).astype(np.int64)


def hash_residues(params: OCMSParams, a0: np.ndarray, a1: np.ndarray, elements: np.ndarray, *, backend: str | None = None) -> np.ndarray:
    """Per-report h_i(x_i) = ((a0_i + a1_i x_i) in the field) mod m, uint64."""
    backend = _resolve_backend(backend)
    if backend == "numpy":
        return _numpy_backend.hash_to_range(params.field, params.hash_range, a0, a1, elements)
    kind, order = _field_code(params)
    out = np.empty(a0.shape[0], np.uint64)
    _compiled.hash_residues(
        np.ascontiguousarray(a0), np.ascontiguousarray(a1), np.ascontiguousarray(elements, dtype=np.uint64),
        kind, order, params.hash_range, out,
    )
    return out


def reference_match_counts(params: OCMSParams, batch: ReportBatch, tracked: TrackedValues) -> np.ndarray:
    """Pure-Python big-integer reference (paper Algorithm 1 ``Hash`` per pair). Slow.

    Direct RR: the definition of k-RR's support, #reports with z == x, per pair.
    """
    field, m = params.field, params.hash_range
    reports = batch.to_reports()
    xs = array_to_elements(tracked.elements)
    if params.is_direct:
        return np.array([sum(1 for report in reports if report.z == x) for x in xs], dtype=np.int64)
    return np.array(
        [sum(1 for a0, a1, z in reports if field.hash_value(a0, a1, x) % m == z) for x in xs], dtype=np.int64
    )
