"""The interface of the baseline frequency oracles (:mod:`cms_core.baselines`), for evaluation only: what
every oracle answers (:class:`FrequencyOracle`), the chunked signed-sum decode the Hadamard-based ones share
(:class:`SignedSumOracle`), their reports (:class:`ArrayReports`) and the checks of values, tracked sets and
rounds.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, fields, replace

import numpy as np

from . import theory
from .errors import InvalidParameterError, InvalidValueError, ParameterMismatchError

#: Per-report x per-tracked-value elements processed at once by ``estimate``.
CHUNK_ELEMENTS = 1 << 22


def check_values(values, dictionary_size: int, what: str = "values") -> np.ndarray:
    """Integer array in [0, d) -> uint64 (n,); InvalidValueError otherwise."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InvalidValueError(f"{what}: expected a 1-D integer array, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.uint64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise InvalidValueError(f"{what}: expected integers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.signedinteger) and int(arr.min()) < 0:
        raise InvalidValueError(f"{what}: value {int(arr.min())} outside the dictionary [0, {dictionary_size})")
    if int(arr.max()) >= dictionary_size:
        raise InvalidValueError(f"{what}: value {int(arr.max())} outside the dictionary [0, {dictionary_size})")
    return arr.astype(np.uint64)


def check_tracked(tracked, dictionary_size: int) -> np.ndarray:
    arr = check_values(tracked, dictionary_size, "tracked")
    if arr.size == 0:
        raise InvalidValueError("the tracked set is empty")
    if np.unique(arr).size != arr.size:
        raise InvalidValueError("the tracked set holds duplicate values")
    return arr


def check_rounds(total: int, rounds) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise InvalidParameterError("rounds", rounds, "must be a positive integer")
    if total % rounds:
        raise InvalidParameterError("rounds", rounds, f"does not divide the {total} reports into equal rounds")
    return total // int(rounds)


def check_source(reports, expected_type, source: tuple) -> None:
    if not isinstance(reports, expected_type):
        raise InvalidParameterError("reports", type(reports).__name__, f"expected {expected_type.__name__}")
    if reports.source != source:
        raise ParameterMismatchError(f"reports were simulated by {reports.source}, not {source}")


class FrequencyOracle(abc.ABC):
    """One LDP frequency oracle, for evaluation only (simulation + decoding).

    Attributes:
        name: registry name (see :data:`ORACLE_NAMES`).
        epsilon: per-report LDP budget; every report is epsilon-LDP.
        dictionary_size: d; values are integers in [0, d).

    ``simulate(values, rng)`` builds one report per value (simulation path,
    seeded; never a device path). ``estimate(reports, tracked)`` returns
    unbiased frequency estimates (fractions of n) of the tracked values.
    ``variance(f, n)`` is the theoretical variance of one estimate whose true
    frequency is f, from the paper's CMS variance with the mechanism's
    equivalent parameters. ``report_bits`` is the payload of one report.
    """

    name: str
    epsilon: float
    dictionary_size: int

    @abc.abstractmethod
    def simulate(self, values: np.ndarray, rng: np.random.Generator):
        """Simulation path: one report per value, seeded numpy Generator."""

    @abc.abstractmethod
    def estimate(self, reports, tracked: np.ndarray) -> np.ndarray:
        """Unbiased frequency estimates (float64, shape (D,)); NaN when n = 0."""

    @abc.abstractmethod
    def variance(self, f, n):
        """Theoretical Var of one estimate with true frequency f (array ok), n reports."""

    @property
    @abc.abstractmethod
    def report_bits(self) -> int:
        """Communication cost of one report, in bits (minimal encoding)."""

    @property
    @abc.abstractmethod
    def equivalent_hash_range(self) -> float:
        """m of the CMS+RR this mechanism is equivalent to (1 / collision probability)."""

    def estimate_rounds(self, reports, tracked: np.ndarray, rounds: int) -> np.ndarray:
        """Estimates of ``rounds`` equal consecutive slices of ``reports``: (rounds, D).

        For experiments: simulate ``np.tile(values, rounds)`` once, then decode
        every round independently. The default decodes slice by slice.
        """
        n = check_rounds(len(reports), rounds)
        return np.stack([self.estimate(reports.slice(r * n, (r + 1) * n), tracked) for r in range(rounds)])

    def worst_case_mse(self, n: float, f_star: float = 1.0) -> float:
        """max over f in [0, f*] of ``variance`` (theory.worst_case_mse_of)."""
        return theory.worst_case_mse_of(self.variance, n, f_star)

    def l2_loss(self, n: float, tracked_count: int) -> float:
        """Worst-case l2 loss over D tracked values (theory.l2_loss_of)."""
        return theory.l2_loss_of(self.variance, n, tracked_count)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, epsilon={self.epsilon!r}, dictionary_size={self.dictionary_size!r})"


class SignedSumOracle(FrequencyOracle):
    """Oracles whose estimate is an affine map of a mean of per-report integers.

    Subclasses give ``_prepare(tracked)``, ``_signed(reports, lo, hi, prep)``
    (an (hi - lo, D) int8 array of per-report contributions in {-1, 0, 1}) and
    ``_finalize(mean)``. Sums are exact (int64), chunked to bound memory.
    """

    _report_type: type

    @property
    @abc.abstractmethod
    def _source(self) -> tuple: ...

    @abc.abstractmethod
    def _prepare(self, tracked: np.ndarray): ...

    @abc.abstractmethod
    def _signed(self, reports, lo: int, hi: int, prepared) -> np.ndarray: ...

    @abc.abstractmethod
    def _finalize(self, mean: np.ndarray) -> np.ndarray: ...

    def _sum(self, reports, lo: int, hi: int, prepared, d: int) -> np.ndarray:
        step = max(1, CHUNK_ELEMENTS // d)
        total = np.zeros(d, np.int64)
        for start in range(lo, hi, step):
            total += self._signed(reports, start, min(hi, start + step), prepared).sum(axis=0, dtype=np.int64)
        return total

    def estimate(self, reports, tracked: np.ndarray) -> np.ndarray:
        check_source(reports, self._report_type, self._source)
        tracked = check_tracked(tracked, self.dictionary_size)
        n = len(reports)
        if n == 0:
            return np.full(tracked.size, np.nan)
        prepared = self._prepare(tracked)
        return self._finalize(self._sum(reports, 0, n, prepared, tracked.size) / n)

    def estimate_rounds(self, reports, tracked: np.ndarray, rounds: int) -> np.ndarray:
        check_source(reports, self._report_type, self._source)
        tracked = check_tracked(tracked, self.dictionary_size)
        n = check_rounds(len(reports), rounds)
        d = tracked.size
        if n == 0:
            return np.full((rounds, d), np.nan)
        prepared = self._prepare(tracked)
        out = np.empty((rounds, d))
        if n * d > CHUNK_ELEMENTS:
            for r in range(rounds):
                out[r] = self._sum(reports, r * n, (r + 1) * n, prepared, d) / n
        else:
            per_chunk = max(1, CHUNK_ELEMENTS // (n * d))
            for r0 in range(0, rounds, per_chunk):
                r1 = min(rounds, r0 + per_chunk)
                signed = self._signed(reports, r0 * n, r1 * n, prepared)
                out[r0:r1] = signed.reshape(r1 - r0, n, d).sum(axis=1, dtype=np.int64) / n
        return self._finalize(out)


@dataclass(frozen=True, eq=False)
class ArrayReports:
    """Reports of a baseline as one array per field (all of the same length) and the ``source`` they
    were drawn with (:func:`check_source`)."""

    source: tuple

    def __len__(self) -> int:
        return int(getattr(self, fields(self)[1].name).shape[0])

    def slice(self, start: int, stop: int):
        """Reports start..stop-1, the same source."""
        return replace(self, **{f.name: getattr(self, f.name)[start:stop] for f in fields(self) if f.name != "source"})

