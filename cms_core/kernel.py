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


def _compiled_counts(params: OCMSParams, batch: ReportBatch, tracked: TrackedValues, out: np.ndarray) -> None:
    if tracked.is_range and isinstance(params.field, PrimeField):
        _compiled.counts_range(batch.a0, batch.a1, batch.z, params.field.order, params.hash_range, tracked.range_start, out)
    else:
        kind, order = _field_code(params)
        _compiled.counts_values(batch.a0, batch.a1, batch.z, kind, order, params.hash_range, tracked.elements, out)


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
