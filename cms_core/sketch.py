"""The mergeable OCMS+RR sketch: per-value match counts and n, and its estimates.

State is integers only (n and, per tracked value x, the number M(x) of reports
whose hash of x equals z), so update and merge are exact and associative, and
any two sketches over the same parameters and tracked set add up to the sketch
of all their reports. Estimates are computed from the counts on demand:

    g(x) = A * M(x)/n + B             (Theorem g_x_def with m', errata 1 & 4)
    Var  = estimator_variance(f = clip(g(x), 0, 1), n)   (plug-in)

(errata: docs/paper-errata.md). The same class serves direct randomized
response: its M(x) is the number of reports with z = x (an O(n) histogram,
dispatched in :mod:`cms_core.kernel`) and its (A, B) and variance are the c = 0
case of the same formulas (:mod:`cms_core.theory`).

Verbs follow Apache DataSketches: ``update``, ``merge``, ``estimate`` (with
bounds), ``serialize`` / ``deserialize``. Serialized bytes carry the parameter
and tracked-set fingerprints and a CRC; deserializing refuses a mismatch.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from . import kernel, postprocess, theory
from .binomial import critical_count, null_match_probability
from .errors import FingerprintMismatchError, InvalidParameterError, ParameterMismatchError, SerializationError
from .params import OCMSParams
from .reports import ReportBatch
from .values import TrackedValues

_MAGIC = b"OCMS"
_FORMAT_VERSION = 1
_KIND_SKETCH = 1
_HEADER = struct.Struct("<4sBB8s8sQQB")
_CRC = struct.Struct("<I")

INTERVALS = ("normal", "chernoff")


@dataclass(frozen=True)
class EstimateOptions:
    """How an answer's estimates are made: the interval's confidence and kind, and the post-processing
    (``OCMSSketch.estimate``'s keywords): one definition for the worker's answers and ``ocms estimate``."""

    confidence: float = 0.95
    interval: str = "normal"
    postprocess: str = "none"


@dataclass(frozen=True)
class Estimates:
    """Per tracked value: unbiased frequency, counts, spread and interval.

    ``frequency`` is the raw unbiased g(x); ``processed`` the post-processed
    frequency (``postprocess`` names the method; equal to ``frequency`` for
    "none"). ``ci_low``/``ci_high`` bound the true frequency at ``confidence``
    around the raw estimate; ``processed_ci_low``/``processed_ci_high`` are the
    interval shown beside ``processed`` (:func:`cms_core.postprocess.processed_interval`:
    the raw one cut to [0, 1], widened to hold the processed value); ``count*``
    are the same quantities times n.

    Above the noise (:mod:`cms_core.theory`, "Above the noise"): ``above_noise``
    says per value whether its lower bound, simultaneous over the
    ``noise_values`` tracked values at ``confidence`` (Bonferroni, the exact
    binomial test of f = 0 at level alpha / D), is above 0; that is exactly
    when ``frequency`` exceeds ``noise_floor`` (+inf: nothing can at this n).
    The test is the same whatever ``interval`` asks for.
    ``processed_noise_floor`` is where the floor lands on the processed scale
    (the same shift as the estimates), so processed estimates of values above
    the noise are never below it.
    """

    values: list
    n: int
    frequency: np.ndarray
    processed: np.ndarray
    variance: np.ndarray
    std: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    confidence: float
    interval: str
    postprocess: str
    processed_ci_low: np.ndarray
    processed_ci_high: np.ndarray
    above_noise: np.ndarray
    noise_floor: float
    processed_noise_floor: float
    noise_values: int

    @property
    def count(self) -> np.ndarray:
        return self.frequency * self.n

    @property
    def processed_count(self) -> np.ndarray:
        return self.processed * self.n

    def as_records(self) -> list[dict]:
        """One JSON-friendly dict per value (floats, never numpy scalars)."""
        n = self.n
        return [
            {
                "value": self.values[i],
                "frequency": float(self.frequency[i]),
                "processed": float(self.processed[i]),
                "count": float(self.frequency[i] * n),
                "processed_count": float(self.processed[i] * n),
                "std": float(self.std[i]),
                "ci_low": float(self.ci_low[i]),
                "ci_high": float(self.ci_high[i]),
                "count_ci_low": float(self.ci_low[i] * n),
                "count_ci_high": float(self.ci_high[i] * n),
                "processed_ci_low": float(self.processed_ci_low[i]),
                "processed_ci_high": float(self.processed_ci_high[i]),
                "processed_count_ci_low": float(self.processed_ci_low[i] * n),
                "processed_count_ci_high": float(self.processed_ci_high[i] * n),
                "above_noise": bool(self.above_noise[i]),
            }
            for i in range(len(self.values))
        ]


def _check_confidence(confidence) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    return float(confidence)


def noise_test(params: OCMSParams, n: int, confidence: float, family: int) -> tuple[int, float]:
    """(k, noise floor) of the test "is this value above the noise of ``family`` values" at n reports
    (:mod:`cms_core.theory`, "Above the noise"): the exact one-sided binomial test of f = 0 at level
    alpha / D. A value is above the noise when its match count reaches the critical count k; the floor
    is the estimate at k - 1 (an estimate must exceed it), +inf when not even k = n reaches the level at
    this n (then k > n). What answers state per value, and what ``ocms plan`` predicts
    (:func:`cms_core.planning.noise_floor`). Cost O(sqrt(n)).
    """
    k = critical_count(n, null_match_probability(params), theory.bonferroni_level(confidence, family))
    if k > n:
        return k, math.inf
    return k, float(theory.estimate_frequencies(params.estimator_coefficients, k - 1, n))


class OCMSSketch:
    """Match counts for a fixed tracked set under fixed parameters.

    Runtime: ``update`` is O(n * D) pair checks in the compiled kernel;
    ``merge`` O(D); ``estimate`` O(D) (O(D log D) with Norm-Sub/simplex).
    """

    __slots__ = ("_params", "_tracked", "_counts", "_n")

    def __init__(self, params: OCMSParams, tracked: TrackedValues, counts: np.ndarray | None = None, n: int = 0):
        if tracked.params_fingerprint != params.fingerprint:
            raise ParameterMismatchError("the tracked set was built for other parameters")
        self._params = params
        self._tracked = tracked
        if counts is None:
            counts = np.zeros(len(tracked), np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (len(tracked),):
            raise InvalidParameterError("counts", counts.shape, f"expected shape ({len(tracked)},)")
        if n < 0 or (counts.size and (counts.min() < 0 or counts.max() > n)):
            raise InvalidParameterError("counts", "...", "match counts must lie in [0, n]")
        self._counts = counts.copy()
        self._n = int(n)

    # ------------------------------------------------------------ accessors
    @property
    def params(self) -> OCMSParams:
        return self._params

    @property
    def tracked(self) -> TrackedValues:
        return self._tracked

    @property
    def n(self) -> int:
        return self._n

    @property
    def counts(self) -> np.ndarray:
        """A read-only view of the match counts."""
        view = self._counts.view()
        view.flags.writeable = False
        return view

    def copy(self) -> "OCMSSketch":
        return OCMSSketch(self._params, self._tracked, self._counts, self._n)

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, OCMSSketch)
            and self._params.fingerprint == other._params.fingerprint
            and self._tracked.fingerprint == other._tracked.fingerprint
            and self._n == other._n
            and np.array_equal(self._counts, other._counts)
        )

    __hash__ = None

    # ---------------------------------------------------------------- verbs
    def update(self, batch: ReportBatch, *, backend: str | None = None, threads: int | None = None) -> "OCMSSketch":
        """Add a batch of reports (validated against the parameters first)."""
        batch.validate(self._params)
        self._counts += kernel.match_counts(self._params, batch, self._tracked, backend=backend, threads=threads)
        self._n += len(batch)
        return self

    def merge(self, other: "OCMSSketch") -> "OCMSSketch":
        """Add another sketch's counts; refuses other parameters or tracked sets."""
        if other._params.fingerprint != self._params.fingerprint:
            raise ParameterMismatchError(
                f"cannot merge sketches with parameter fingerprints {self._params.fingerprint.hex()} "
                f"and {other._params.fingerprint.hex()}"
            )
        if other._tracked.fingerprint != self._tracked.fingerprint:
            raise ParameterMismatchError("cannot merge sketches over different tracked sets")
        self._counts += other._counts
        self._n += other._n
        return self

    def estimate(
        self,
        *,
        confidence: float = 0.95,
        interval: str = "normal",
        postprocess_method: str = "none",
        total: float | None = None,
        noise_values: int | None = None,
    ) -> Estimates:
        """Unbiased estimates with standard deviations and confidence intervals.

        interval "normal": g +- z_{conf} * std (CLT; n is large in practice).
        interval "chernoff": g +- alpha * std with alpha from Theorem
        cms_rr_bound; where alpha exceeds the theorem's range for this n the
        half-width is infinite (the bound says nothing there). For direct RR,
        Hoeffding's bound on M/n (:func:`cms_core.theory.hoeffding_half_width`).
        ``total`` is the mass Norm-Sub keeps: 1 when the tracked set is the
        whole dictionary, else clip(sum of estimates, 0, 1) unless given.
        ``noise_values`` is D of the noise test (default: the tracked values): an answer
        about some values of a larger tracked set (a one-value sketch) passes that set's size.
        The noise test costs O(sqrt(n)) (a binomial tail) plus O(D).
        With n = 0 every estimate is NaN, every interval infinite, nothing above the noise.
        """
        confidence = _check_confidence(confidence)
        if interval not in INTERVALS:
            raise InvalidParameterError("interval", interval, f"expected one of {INTERVALS}")
        if postprocess_method not in postprocess.METHODS:
            raise InvalidParameterError("postprocess", postprocess_method, f"expected one of {postprocess.METHODS}")
        params = self._params
        d = len(self._tracked)
        family = d if noise_values is None else int(noise_values)
        if family < d:
            raise InvalidParameterError("noise_values", noise_values, f"must be >= the {d} values estimated")
        if self._n == 0:
            nan = np.full(d, np.nan)
            inf = np.full(d, np.inf)
            return Estimates(
                self._tracked.all_labels(), 0, nan, nan.copy(), inf, inf.copy(), -inf, inf.copy(),
                confidence, interval, postprocess_method, -inf, inf.copy(), np.zeros(d, bool), math.inf, math.inf,
                family,
            )
        frequency = theory.estimate_frequencies(params.estimator_coefficients, self._counts, self._n)
        variance = np.asarray(params.variance(np.clip(frequency, 0.0, 1.0), self._n), dtype=np.float64)
        std = np.sqrt(variance)
        if interval == "normal":
            half = theory.normal_z(confidence) * std
        elif params.is_direct:
            # Theorem cms_rr_bound covers random hashing; direct RR uses Hoeffding's bound.
            half = np.full(d, theory.hoeffding_half_width(params.estimator_coefficients[0], confidence, self._n))
        else:
            alpha = theory.chernoff_alpha(params.epsilon, params.hash_range, confidence)
            covered = alpha <= theory.chernoff_alpha_max(params.epsilon, params.hash_range, self._n)
            half = alpha * std if covered else np.full(d, math.inf)
        if total is None and len(self._tracked) == params.dictionary_size:
            total = 1.0  # the tracked set is the whole dictionary: frequencies sum to 1
        processed, shift = postprocess.apply_with_shift(postprocess_method, frequency, total)
        ci_low, ci_high = frequency - half, frequency + half
        floor, above_noise = self._noise_test(confidence, family)
        processed_floor = float(postprocess.shifted(postprocess_method, shift, floor)) if math.isfinite(floor) else floor
        return Estimates(
            self._tracked.all_labels(), self._n, frequency, processed, variance, std,
            ci_low, ci_high, confidence, interval, postprocess_method,
            *postprocess.processed_interval(postprocess_method, processed, ci_low, ci_high),
            above_noise, floor, processed_floor, family,
        )

    def _noise_test(self, confidence: float, family: int) -> tuple[float, np.ndarray]:
        """(noise floor, above the noise per value) over ``family`` values (:func:`noise_test`)."""
        k, floor = noise_test(self._params, self._n, confidence, family)
        if k > self._n:
            return floor, np.zeros(self._counts.shape, bool)
        return floor, self._counts >= k

    # -------------------------------------------------------- serialization
    def serialize(self) -> bytes:
        """Little-endian bytes: header (magic, version, fingerprints, n, D,
        count width), counts, CRC-32 of everything before it."""
        width = 4 if self._n < 2**32 else 8
        header = _HEADER.pack(
            _MAGIC, _FORMAT_VERSION, _KIND_SKETCH, self._params.fingerprint, self._tracked.fingerprint,
            self._n, len(self._tracked), width,
        )
        body = header + self._counts.astype("<u4" if width == 4 else "<i8").tobytes()
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def deserialize(cls, data: bytes, params: OCMSParams, tracked: TrackedValues) -> "OCMSSketch":
        data = bytes(data)
        if len(data) < _HEADER.size + _CRC.size:
            raise SerializationError(f"sketch bytes truncated: {len(data)} < {_HEADER.size + _CRC.size}")
        magic, version, kind, params_fp, tracked_fp, n, d, width = _HEADER.unpack_from(data)
        if magic != _MAGIC or kind != _KIND_SKETCH:
            raise SerializationError("not an OCMS sketch (bad magic or kind)")
        if version != _FORMAT_VERSION:
            raise SerializationError(f"unsupported sketch format version {version}")
        if width not in (4, 8):
            raise SerializationError(f"bad count width {width}")
        expected = _HEADER.size + d * width + _CRC.size
        if len(data) != expected:
            raise SerializationError(f"sketch bytes have length {len(data)}, expected {expected}")
        (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
        if crc != zlib.crc32(data[: -_CRC.size]):
            raise SerializationError("sketch checksum mismatch (corrupt bytes)")
        if params_fp != params.fingerprint:
            raise FingerprintMismatchError(
                f"sketch was built for parameters {params_fp.hex()}, not {params.fingerprint.hex()}"
            )
        if tracked_fp != tracked.fingerprint or d != len(tracked):
            raise FingerprintMismatchError("sketch was built for another tracked set")
        counts = np.frombuffer(data, dtype="<u4" if width == 4 else "<i8", count=d, offset=_HEADER.size)
        try:
            return cls(params, tracked, counts.astype(np.int64), n)
        except InvalidParameterError as exc:
            raise SerializationError(f"inconsistent sketch state: {exc}") from exc
