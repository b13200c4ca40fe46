"""Discovering unknown values (private heavy hitters) by prefix extension, OCMS+RR as the oracle.

Design and its guarantees: docs/discovery.md. In short:

* A discoverable metric has a **domain**: strings (an alphabet of characters, or
  UTF-8 bytes; a maximum length in symbols; symbols per level) or integers
  (``bits`` <= 64; bits per level). It has ``g`` levels; level L describes the
  first ``prefix_length(L)`` symbols (bits) of a value.
* Each report describes the value's prefix at **one** level chosen uniformly at
  random, independently of the value, with that level's own :class:`OCMSParams`
  (binding ``f"{metric}@{version}/level{L}"``, so every level has its own
  fingerprint and reports of different levels never mix). The report is one
  epsilon-LDP OCMS+RR report; the level is public.
* The server decodes level by level: level 1 tests every one-step extension of
  the empty prefix, level L every one-step extension of level L-1's survivors.
  A candidate **survives** when its match count reaches the level's exact
  binomial critical count at the Bonferroni-corrected level alpha / (g K_L)
  (K_L candidates at level L): the family-wise probability that any
  candidate nobody holds (true frequency 0) survives, at any level, is <= alpha.
* A string prefix that ends inside the level (the value is shorter) carries an
  end marker and is a complete value; complete values keep being counted at
  later levels, whose reports are independent of the selection, and their
  final estimate pools those later levels (unbiased; see :func:`discover`).

Pure numerics: reports arrive as decoded :class:`ReportBatch` per level; no I/O.
Every variance and estimator comes from :mod:`cms_core.theory` through
:class:`OCMSSketch` / :class:`OCMSParams`.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass, field as dataclass_field
from functools import cache, cached_property
from typing import Mapping, Sequence

import numpy as np

from . import kernel, theory
from .binomial import binomial_upper_tail, critical_count, match_probability, null_match_probability
from .fields import PrimeField
from .errors import InvalidParameterError, InvalidValueError, ParameterMismatchError
from .params import OCMSParams
from .reports import ReportBatch
from .sketch import OCMSSketch
from .values import TrackedValues, value_record

DOMAIN_KINDS = ("strings", "integers")
#: The string alphabet spelled ``utf8``: the 256 byte values of the UTF-8 encoding.
UTF8 = "utf8"
#: Candidates one survivor may spawn per level (alphabet^symbols + shorter ended ones).
MAX_BRANCHING = 1 << 16
MAX_INTEGER_BITS = 64
MAX_LEVELS = 256
#: Default cap on candidates decoded at one level (the decode is O(reports * candidates)).
DEFAULT_MAX_CANDIDATES = 100_000

_ENDED, _OPEN = b"\x01", b"\x00"


def _positive_int(name: str, value, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidParameterError(name, value, "must be a positive integer")
    if maximum is not None and value > maximum:
        raise InvalidParameterError(name, value, f"must be <= {maximum}")
    return value


@dataclass(frozen=True)
class DiscoveryDomain:
    """What a discoverable metric's values look like, and how they are cut into levels.

    Strings: ``alphabet`` is a string of distinct characters, or ``"utf8"`` (the
    symbols are the value's UTF-8 bytes); ``max_length`` symbols are described,
    ``symbols_per_level`` per level. Integers: values in [0, 2^bits),
    ``bits_per_level`` most significant bits per level.
    """

    kind: str
    alphabet: str | None = None
    max_length: int | None = None
    symbols_per_level: int | None = None
    bits: int | None = None
    bits_per_level: int | None = None

    def __post_init__(self):
        if self.kind not in DOMAIN_KINDS:
            raise InvalidParameterError("kind", self.kind, f"expected one of {DOMAIN_KINDS}")
        if self.kind == "strings":
            if self.bits is not None or self.bits_per_level is not None:
                raise InvalidParameterError("bits", self.bits, "belongs to integer domains; strings take max_length")
            if not isinstance(self.alphabet, str) or not self.alphabet:
                raise InvalidParameterError("alphabet", self.alphabet, "must be 'utf8' or a non-empty string of characters")
            if self.alphabet != UTF8 and len(set(self.alphabet)) != len(self.alphabet):
                repeated = sorted({c for c in self.alphabet if self.alphabet.count(c) > 1})
                raise InvalidParameterError("alphabet", self.alphabet, f"lists {''.join(repeated)!r} more than once")
            _positive_int("max_length", self.max_length, 4096)
            _positive_int("symbols_per_level", self.symbols_per_level, self.max_length)
        else:
            if self.alphabet is not None or self.max_length is not None or self.symbols_per_level is not None:
                raise InvalidParameterError("alphabet", self.alphabet, "belongs to string domains; integers take bits")
            _positive_int("bits", self.bits, MAX_INTEGER_BITS)
            _positive_int("bits_per_level", self.bits_per_level, self.bits)
        if self.levels > MAX_LEVELS:
            raise InvalidParameterError("levels", self.levels, f"more than {MAX_LEVELS} levels")
        if self.branching(1) > MAX_BRANCHING:
            step = "symbols_per_level" if self.kind == "strings" else "bits_per_level"
            raise InvalidParameterError(step, getattr(self, step),
                                        f"gives {self.branching(1):,} candidates per prefix per level "
                                        f"(at most {MAX_BRANCHING:,}); use fewer per level")

    # ------------------------------------------------------------ geometry
    @property
    def alphabet_size(self) -> int:
        return 256 if self.alphabet == UTF8 else len(self.alphabet)

    @property
    def length(self) -> int:
        """Symbols (strings) or bits (integers) of a full value."""
        return self.max_length if self.kind == "strings" else self.bits

    @property
    def step(self) -> int:
        return self.symbols_per_level if self.kind == "strings" else self.bits_per_level

    @property
    def levels(self) -> int:
        return -(-self.length // self.step)

    def check_level(self, level) -> int:
        if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= self.levels:
            raise InvalidValueError(f"level {level!r}: this domain has levels 1..{self.levels}")
        return level

    def prefix_length(self, level: int) -> int:
        """Symbols (bits) that level ``level`` describes."""
        return min(self.check_level(level) * self.step, self.length)

    def growth(self, level: int) -> int:
        return self.prefix_length(level) - (self.prefix_length(level - 1) if level > 1 else 0)

    def branching(self, level: int) -> int:
        """Candidates one open prefix spawns at ``level``: A^k open ones plus the ended ones shorter than k."""
        k = self.growth(level)
        if self.kind == "integers":
            return 1 << k
        a = self.alphabet_size
        return sum(a**j for j in range(k + 1))

    # -------------------------------------------------------------- values
    def symbols(self, value) -> tuple[int, ...]:
        """A string value as symbols (alphabet positions or UTF-8 bytes); validates the value."""
        if self.kind != "strings":
            raise InvalidValueError("symbols() is for string domains")
        if self.alphabet == UTF8:
            if isinstance(value, str):
                try:
                    return tuple(value.encode("utf-8"))
                except UnicodeEncodeError:
                    raise InvalidValueError(f"value {value!r}: not encodable as UTF-8") from None
            if isinstance(value, (bytes, bytearray)):
                return tuple(bytes(value))
            raise InvalidValueError(f"value {value!r}: a string metric takes str values")
        if not isinstance(value, str):
            raise InvalidValueError(f"value {value!r}: a string metric takes str values")
        index = self._alphabet_index
        try:
            return tuple(index[c] for c in value)
        except KeyError as exc:
            raise InvalidValueError(f"value {value!r}: character {exc.args[0]!r} is not in the metric's alphabet") from None

    @cached_property
    def _alphabet_index(self) -> dict:
        return {c: i for i, c in enumerate(self.alphabet)}

    def check_integer(self, value) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) < (1 << self.bits):
            raise InvalidValueError(f"value {value!r}: an integer metric takes integers in [0, 2^{self.bits})")
        return int(value)

    def describe(self) -> dict:
        out = {"kind": self.kind, "levels": self.levels}
        if self.kind == "strings":
            out.update(alphabet=self.alphabet, max_length=self.max_length, symbols_per_level=self.symbols_per_level)
        else:
            out.update(bits=self.bits, bits_per_level=self.bits_per_level)
        return out


# ------------------------------------------------------------------ prefixes

@dataclass(frozen=True)
class Prefix:
    """A candidate prefix: symbols (strings) or the top bits as an integer, and whether the value ended."""

    symbols: tuple[int, ...] | int
    ended: bool = False


def _symbols_bytes(domain: DiscoveryDomain, symbols: tuple[int, ...]) -> bytes:
    if domain.alphabet == UTF8:
        return bytes(symbols)
    return "".join(domain.alphabet[i] for i in symbols).encode("utf-8")


#: String prefixes live in the integer dictionary [0, 2^63) (prime field 2^64 - 59): a prefix is
#: its parent's hash followed by the index of its last step, so the children of one parent are
#: one contiguous range and the kernel's range path decodes them (about 10x the pairs/s of
#: explicit 64-bit values, 20x the 128-bit string fingerprints).
STRING_PREFIX_BITS = 63
_PREFIX_PERSON = b"ocms-prefix-v1"


@cache
def child_bits(domain: DiscoveryDomain) -> int:
    """Bits of a string prefix's element that index its last step (the rest is its parent's hash)."""
    return max(1, (domain.branching(1) - 1).bit_length())


def _parent_hash(domain: DiscoveryDomain, parent: tuple[int, ...]) -> int:
    data = len(parent).to_bytes(4, "big") + b"".join(x.to_bytes(2, "big") for x in parent)
    digest = hashlib.blake2b(data, digest_size=8, person=_PREFIX_PERSON).digest()
    return int.from_bytes(digest, "big") >> (64 - (STRING_PREFIX_BITS - child_bits(domain)))


def _step_index(domain: DiscoveryDomain, tail: tuple[int, ...]) -> int:
    """Position of a last step among a parent's children, in :func:`extensions` order:
    tails of length 0, 1, ... (base A, first symbol most significant)."""
    a = domain.alphabet_size
    index = sum(a**i for i in range(len(tail)))
    rank = 0
    for x in tail:
        rank = rank * a + x
    return index + rank


def prefix_element_value(domain: DiscoveryDomain, prefix: Prefix) -> int:
    """The dictionary value (an integer) a level's parameters encode for ``prefix``.

    Integers: the top bits, in [0, 2^prefix_length). Strings: ``H(parent) * 2^c + i``
    in [0, 2^63), where the parent is the prefix without its last step (the symbols of
    the previous level), H its 63 - c bit hash (the top bits of ``blake2b(length |
    symbols, digest_size=8, person="ocms-prefix-v1")``), and i the step's position among
    the parent's children (:func:`extensions` order; a tail shorter than the level's step
    is a value that ended there). An ended value has the same element at every level, so
    later levels keep counting it. Two distinct parents share a hash with probability
    2^-(63-c): among S candidate parents and R real ones of a level, P(a candidate looks
    held by collision) <= S R / 2^(63-c) (5e-8 for S = 10^3, R = 10^6, c = 9: UTF-8).
    """
    if domain.kind == "integers":
        return int(prefix.symbols)
    parent, tail = _parent_and_tail(domain, prefix.symbols, prefix.ended)
    return (_parent_hash(domain, parent) << child_bits(domain)) + _step_index(domain, tail)


def _parent_and_tail(domain: DiscoveryDomain, symbols: tuple[int, ...], ended: bool):
    """A string prefix split into its parent (the previous level's symbols) and its last step."""
    step = domain.symbols_per_level
    parent_length = ((len(symbols) - (0 if ended else 1)) // step) * step if symbols or ended else 0
    return symbols[:parent_length], symbols[parent_length:]


def prefix_of(domain: DiscoveryDomain, value, level: int) -> Prefix:
    """The prefix a device with ``value`` describes at ``level``."""
    length = domain.prefix_length(level)
    if domain.kind == "integers":
        x = domain.check_integer(value)
        return Prefix(x >> (domain.bits - length), False)
    symbols = domain.symbols(value)
    return Prefix(symbols[:length], len(symbols) < length)


def prefix_value(domain: DiscoveryDomain, value, level: int):
    """What the device privatizes at ``level`` with that level's parameters (device side uses this)."""
    return prefix_element_value(domain, prefix_of(domain, value, level))


def prefix_values(domain: DiscoveryDomain, values: Sequence, level: int) -> list[int]:
    """:func:`prefix_value` of many values at one level, each parent's hash computed once (the simulation path:
    at the first levels most values share their parent)."""
    length = domain.prefix_length(level)
    if domain.kind == "integers":
        shift = domain.bits - length
        return [domain.check_integer(value) >> shift for value in values]
    shift = child_bits(domain)
    parent_hashes: dict[tuple[int, ...], int] = {}
    elements: dict[tuple, int] = {}
    out = []
    for value in values:
        symbols = domain.symbols(value)
        prefix = (symbols[:length], len(symbols) < length)  # as prefix_of
        element = elements.get(prefix)
        if element is None:
            parent, tail = _parent_and_tail(domain, *prefix)
            parent_hash = parent_hashes.get(parent)
            if parent_hash is None:
                parent_hash = parent_hashes[parent] = _parent_hash(domain, parent)
            element = elements[prefix] = (parent_hash << shift) + _step_index(domain, tail)
        out.append(element)
    return out


def prefix_label(domain: DiscoveryDomain, prefix: Prefix):
    """The user-facing value of a prefix: int, str, or bytes (UTF-8 cut inside a character)."""
    if domain.kind == "integers":
        return int(prefix.symbols)
    if domain.alphabet == UTF8:
        raw = bytes(prefix.symbols)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
    return "".join(domain.alphabet[i] for i in prefix.symbols)


def extensions(domain: DiscoveryDomain, parents: Sequence[Prefix], level: int) -> list[Prefix]:
    """Every candidate at ``level`` whose parent is an open survivor of ``level - 1`` (level 1: the empty prefix)."""
    k = domain.growth(level)
    if domain.kind == "integers":
        out = []
        for parent in parents:
            base = int(parent.symbols) << k
            out.extend(Prefix(base + i) for i in range(1 << k))
        return out
    a = range(domain.alphabet_size)
    out = []
    for parent in parents:
        for j in range(k + 1):
            for tail in itertools.product(a, repeat=j):
                out.append(Prefix(parent.symbols + tail, j < k))
    return out


def root_prefix(domain: DiscoveryDomain) -> Prefix:
    return Prefix(0 if domain.kind == "integers" else ())


# ---------------------------------------------------------------- parameters

def level_binding(metric: str, version: int, level: int) -> str:
    """The binding of one level's parameters: ``"name@version/levelL"`` (its own fingerprint)."""
    return f"{metric}@{version}/level{level}"


def level_params(metric: str, version: int, epsilon: float, domain: DiscoveryDomain) -> tuple[OCMSParams, ...]:
    """One OCMSParams per level (index L - 1), each at the metric's full epsilon.

    m minimises Var(f = 0) (HashRange in MSE mode with f* = 0, m ~ e^eps + 1): the
    cut-off is a test of f = 0, so that variance sets what can be detected. Strings:
    the integer dictionary [0, 2^63) of parent-hash + step elements (:func:`prefix_element_value`),
    the same at every level; integers: the dictionary [0, 2^prefix_length). Mechanism OCMS+RR.
    """
    out = []
    for level in range(1, domain.levels + 1):
        binding = level_binding(metric, version, level)
        if domain.kind == "strings":
            params = OCMSParams.build(epsilon, 1 << STRING_PREFIX_BITS, mode="mse", f_star=0.0, binding=binding)
        else:
            params = OCMSParams.build(epsilon, 1 << domain.prefix_length(level), mode="mse", f_star=0.0, binding=binding)
        out.append(params)
    return tuple(out)


# ------------------------------------------------------------------- cut-off

def per_test_alpha(alpha: float, levels: int, candidates: int) -> float:
    """Bonferroni: alpha spread evenly over the levels, then over that level's candidates."""
    if not 0.0 < alpha < 1.0:
        raise InvalidParameterError("alpha", alpha, "must be in (0, 1)")
    return alpha / (levels * max(1, candidates))


def cutoff_frequency(params: OCMSParams, n: int, count: int) -> float:
    """The frequency estimate g = A k / n + B at the critical count k (the cut-off on the estimate scale)."""
    if n <= 0:
        return math.inf
    return float(theory.estimate_frequencies(params.estimator_coefficients, count, n))


def detection_probability(params: OCMSParams, n: int, frequency: float, count: int) -> float:
    """P(a prefix of true frequency f survives a level with n reports and critical count k), exactly."""
    return binomial_upper_tail(n, min(1.0, match_probability(params, frequency)), count)


def detection_threshold(params: OCMSParams, reports_per_level: int, levels: int, candidates_per_level: int,
                        *, alpha: float = 0.05, miss: float = 0.05) -> float:
    """Smallest frequency f found with probability >= 1 - ``miss`` when it must survive ``levels`` levels.

    Each level has ``reports_per_level`` reports and ``candidates_per_level``
    candidates (the Bonferroni divisor); the value's prefixes have frequency
    >= f, so surviving every level with probability >= 1 - miss / levels each
    suffices (union bound). Exact binomial tails, bisection on f.
    """
    return levels_detection_threshold([params] * levels, [reports_per_level] * levels, [candidates_per_level] * levels,
                                      alpha=alpha, miss=miss)


#: A window's detection threshold is the frequency found with probability >= 1 - DETECTION_MISS.
DETECTION_MISS = 0.05


def levels_detection_threshold(params_by_level: Sequence[OCMSParams], reports_per_level: Sequence[int],
                               candidates_per_level: Sequence[int], *, alpha: float = 0.05,
                               miss: float = DETECTION_MISS) -> float:
    """Smallest frequency f found with probability >= 1 - ``miss`` when it must survive every level
    L with ``reports_per_level[L-1]`` reports tested at the critical count of
    ``candidates_per_level[L-1]`` candidates (:func:`detection_threshold` with levels that differ:
    one window's). +inf when a level has no reports, or not even f = 1 passes.
    """
    levels = len(params_by_level)
    if not levels or min(int(n) for n in reports_per_level) <= 0:
        return math.inf
    tests = [(params, int(n), critical_count(int(n), null_match_probability(params), per_test_alpha(alpha, levels, k)))
             for params, n, k in zip(params_by_level, reports_per_level, candidates_per_level)]
    target = 1.0 - miss / levels

    def found(f: float) -> bool:
        return all(detection_probability(params, n, f, k) >= target for params, n, k in tests)

    lo, hi = 0.0, 1.0
    if not found(hi):
        return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        if found(mid):
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-9 * hi:  # far below any frequency a report count can tell apart
            break
    return hi


def window_detection_threshold(domain: DiscoveryDomain, params_by_level: Sequence[OCMSParams],
                               reports_per_level: Sequence[int], candidates: Sequence[int], *,
                               alpha: float = 0.05, miss: float = DETECTION_MISS) -> float:
    """The frequency a value needed to be found in this window with probability >= 1 - ``miss``, whatever
    its length (a value that ends earlier must survive fewer levels, so this is enough for it too):
    every level's own reports, its candidates as decoded (``candidates[L-1]``; a level the pass did
    not reach, or reached with fewer, counts one survivor's children, the fewest a found value brings).
    """
    counts = [max(int(candidates[level - 1]) if level <= len(candidates) else 0, domain.branching(level))
              for level in range(1, domain.levels + 1)]
    return levels_detection_threshold(params_by_level, reports_per_level, counts, alpha=alpha, miss=miss)


# ------------------------------------------------------------------ results

@dataclass
class LevelResult:
    level: int
    reports: int
    candidates: int
    per_test_alpha: float
    cutoff_count: int | None  # None: no candidate left to test at this level
    cutoff_frequency: float
    survivors: list = dataclass_field(default_factory=list)  # (Prefix, frequency, ci_low, ci_high)
    capped: int = 0  # open survivors dropped by max_candidates (largest estimates kept)

    def to_json(self, domain: DiscoveryDomain) -> dict:
        return {
            "level": self.level,
            "prefix_length": domain.prefix_length(self.level),
            "reports": self.reports,
            "candidates": self.candidates,
            "per_test_alpha": self.per_test_alpha,
            "cutoff_count": self.cutoff_count,
            "cutoff_frequency": _finite(self.cutoff_frequency),
            "survivors": [
                {**value_record(prefix_label(domain, p), "prefix"), "ended": p.ended, "frequency": f,
                 "ci_low": lo, "ci_high": hi}
                for p, f, lo, hi in self.survivors
            ],
            "dropped_by_candidate_cap": self.capped,
        }


@dataclass
class DiscoveredValue:
    value: object  # int, str or bytes
    found_at_level: int
    truncated: bool  # a string longer than max_length: only its first max_length symbols are known
    frequency: float
    std: float
    ci_low: float
    ci_high: float
    reports_used: int
    selection_biased: bool  # the estimate reuses the reports that selected it (no later level)

    def to_json(self, total_reports: int) -> dict:
        return {
            **value_record(self.value),  # + bytes_hex, cut_inside_character for bytes that are not whole characters
            "found_at_level": self.found_at_level,
            "truncated": self.truncated,
            "frequency": self.frequency,
            "std": self.std,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "count": self.frequency * total_reports,
            "count_ci_low": self.ci_low * total_reports,
            "count_ci_high": self.ci_high * total_reports,
            "reports_used": self.reports_used,
            "selection_biased": self.selection_biased,
        }


@dataclass
class DiscoveryResult:
    domain: DiscoveryDomain
    alpha: float
    confidence: float
    total_reports: int
    levels: list[LevelResult]
    discovered: list[DiscoveredValue]
    reports_per_level: list[int] = dataclass_field(default_factory=list)  # every level, decoded or not
    #: The frequency a value needed to be found with these reports (:func:`window_detection_threshold`).
    detection_threshold: float = math.inf
    detection_miss: float = DETECTION_MISS

    def to_json(self) -> dict:
        threshold = _finite(self.detection_threshold)
        return {
            "domain": self.domain.describe(),
            "alpha": self.alpha,
            "confidence": self.confidence,
            "reports": self.total_reports,
            "reports_per_level": self.reports_per_level,
            "detection_threshold": threshold,
            "detection_threshold_count": None if threshold is None else threshold * self.total_reports,
            "detection_miss": self.detection_miss,
            "discovered": [d.to_json(self.total_reports) for d in self.discovered],
            "levels": [lv.to_json(self.domain) for lv in self.levels],
        }


def _finite(x: float):
    return float(x) if math.isfinite(x) else None


# ------------------------------------------------------------------ discover

def _runs(elements: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal runs [start, stop) of consecutive integers, in order (candidates of one parent form one)."""
    runs: list[tuple[int, int]] = []
    for e in elements:
        if runs and runs[-1][1] == e:
            runs[-1] = (runs[-1][0], e + 1)
        else:
            runs.append((e, e + 1))
    return runs


#: Runs at least this long are decoded on the kernel's range path; shorter ones as explicit values.
MIN_RANGE_RUN = 8


def _counts(params: OCMSParams, batch: ReportBatch, prefixes: Sequence[Prefix], domain: DiscoveryDomain) -> OCMSSketch:
    """Match counts of ``prefixes``: contiguous runs (a parent's children) on the kernel's range path
    when the field is prime, the rest as explicit values; one sketch over the whole list either way."""
    elements = [prefix_element_value(domain, p) for p in prefixes]
    tracked = TrackedValues.of(params, elements)
    if not isinstance(params.field, PrimeField) or len(batch) == 0:
        return OCMSSketch(params, tracked).update(batch)
    batch.validate(params)
    counts = np.zeros(len(elements), np.int64)
    position, loose = 0, []
    for start, stop in _runs(elements):
        if stop - start >= MIN_RANGE_RUN:
            counts[position:position + stop - start] = kernel.match_counts(params, batch,
                                                                           TrackedValues.range(params, start, stop))
        else:
            loose.extend(range(position, position + stop - start))
        position += stop - start
    if loose:
        some = TrackedValues.of(params, [elements[i] for i in loose])
        counts[loose] = kernel.match_counts(params, batch, some)
    return OCMSSketch(params, tracked, counts, len(batch))


def discover(
    domain: DiscoveryDomain,
    params_by_level: Sequence[OCMSParams],
    batches: Mapping[int, ReportBatch],
    *,
    alpha: float = 0.05,
    confidence: float = 0.95,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
) -> DiscoveryResult:
    """Run prefix extension over one window's reports (``batches[L]``: level L's reports, validated).

    Returns the per-level candidates, cut-offs and survivors, and the discovered
    values with estimates. A complete value (a string that ended, or any survivor
    of the last level) is estimated from the levels *after* the one that found it
    (their reports played no part in selecting it: unbiased, valid CI), pooled
    into one sketch (every string level has the same epsilon, m and field, so the
    same estimator); a value found at the last level has no later level and is
    estimated from the selecting reports (``selection_biased``: biased upward
    near the cut-off).
    """
    if len(params_by_level) != domain.levels:
        raise ParameterMismatchError(f"{len(params_by_level)} level parameter sets for {domain.levels} levels")
    unknown = sorted(set(batches) - set(range(1, domain.levels + 1)))
    if unknown:
        raise InvalidValueError(f"reports for level(s) {unknown}: this domain has levels 1..{domain.levels}")
    _positive_int("max_candidates", max_candidates)
    if not 0.0 < confidence < 1.0:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    g = domain.levels
    total = sum(len(b) for b in batches.values())
    results: list[LevelResult] = []
    open_survivors: list[Prefix] = [root_prefix(domain)]
    completed: list[tuple[Prefix, int, tuple]] = []  # (prefix, level found, (freq, std, lo, hi) at discovery)
    later_counts: dict[Prefix, list[int]] = {}  # pooled (matches, reports) from levels after discovery
    for level in range(1, g + 1):
        params = params_by_level[level - 1]
        batch = batches.get(level) or ReportBatch.empty(params)
        n = len(batch)
        if not open_survivors and not completed:
            break
        candidates = extensions(domain, open_survivors, level)
        test_alpha = per_test_alpha(alpha, g, len(candidates))
        k = critical_count(n, null_match_probability(params), test_alpha) if candidates else None
        result = LevelResult(level, n, len(candidates), test_alpha, k,
                             cutoff_frequency(params, n, k) if k is not None else math.nan)
        carried = [p for p, _, _ in completed]
        tracked = candidates + carried
        if tracked and n:
            sketch = _counts(params, batch, tracked, domain)
            est = sketch.estimate(confidence=confidence)
            counts = sketch.counts
        else:
            counts = np.zeros(len(tracked), np.int64)
            est = None
        for i, p in enumerate(carried):
            pooled = later_counts.setdefault(p, [0, 0])
            pooled[0] += int(counts[len(candidates) + i])
            pooled[1] += n
        kept = [i for i in range(len(candidates)) if n and k is not None and counts[i] >= k]
        kept.sort(key=lambda i: -counts[i])
        next_open = []
        for i in kept:
            p = candidates[i]
            stats = (float(est.frequency[i]), float(est.std[i]), float(est.ci_low[i]), float(est.ci_high[i]))
            frequency, _, low, high = stats
            result.survivors.append((p, frequency, low, high))
            if p.ended or level == g:
                completed.append((p, level, stats))
            else:
                next_open.append(p)
        if level < g and next_open:
            room = max(1, max_candidates // domain.branching(level + 1))
            if len(next_open) > room:
                result.capped = len(next_open) - room
                next_open = next_open[:room]
        open_survivors = next_open
        results.append(result)
    discovered = []
    for p, found, stats in completed:
        params = params_by_level[found - 1]
        matches, reports = later_counts.get(p, [0, 0])
        truncated = domain.kind == "strings" and not p.ended
        if reports:
            tracked = TrackedValues.of(params, [prefix_element_value(domain, p)])
            later = OCMSSketch(params, tracked, np.array([matches]), reports).estimate(confidence=confidence)
            freq, std, lo, hi = (float(later.frequency[0]), float(later.std[0]), float(later.ci_low[0]),
                                 float(later.ci_high[0]))
            biased = False
        else:
            freq, std, lo, hi = stats
            reports = len(batches.get(found) or ())
            biased = True
        discovered.append(DiscoveredValue(prefix_label(domain, p), found, truncated, freq, std, lo, hi, reports, biased))
    discovered.sort(key=lambda d: -d.frequency)
    per_level = [len(batches.get(level) or ()) for level in range(1, g + 1)]
    threshold = window_detection_threshold(domain, params_by_level, per_level, [r.candidates for r in results],
                                           alpha=alpha)
    return DiscoveryResult(domain, alpha, confidence, total, results, discovered, per_level, threshold)


def assign_levels(levels: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Simulation: each report's level, uniform on 1..levels and independent of the value (seeded)."""
    return rng.integers(1, levels + 1, size=n)


def simulate_level_reports(domain: DiscoveryDomain, params_by_level: Sequence[OCMSParams], values: Sequence,
                           rng: np.random.Generator) -> dict[int, ReportBatch]:
    """Simulation path (seeded, never on a device): one report per value, at a uniform random level.

    ``values`` may repeat (a sample of a population); a level computes the prefix elements
    of the distinct values drawn at that level only, so the work is O(reports), not
    O(levels x distinct values) (a long tail of values each drawn once or twice).
    """
    from .privatize import simulate_reports
    from .values import encode_value, elements_to_array, limbs_for

    values = list(values)
    levels = assign_levels(domain.levels, len(values), rng)
    distinct: dict = {}
    codes = np.fromiter((distinct.setdefault(v, len(distinct)) for v in values), dtype=np.int64, count=len(values))
    uniques = list(distinct)
    out = {}
    for level in range(1, domain.levels + 1):
        params = params_by_level[level - 1]
        rows = np.flatnonzero(levels == level)
        if rows.size == 0:
            continue
        drawn, row_codes = np.unique(codes[rows], return_inverse=True)
        elements = prefix_values(domain, [uniques[c] for c in drawn.tolist()], level)
        table = elements_to_array([encode_value(params, e) for e in elements], limbs_for(params))
        out[level] = simulate_reports(params, table[row_codes.reshape(-1)], rng)
    return out


__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "STRING_PREFIX_BITS",
    "child_bits",
    "DiscoveredValue",
    "DiscoveryDomain",
    "DiscoveryResult",
    "LevelResult",
    "Prefix",
    "UTF8",
    "assign_levels",
    "cutoff_frequency",
    "detection_probability",
    "detection_threshold",
    "levels_detection_threshold",
    "window_detection_threshold",
    "discover",
    "extensions",
    "level_binding",
    "level_params",
    "per_test_alpha",
    "prefix_element_value",
    "prefix_label",
    "prefix_of",
    "prefix_value",
    "prefix_values",
    "simulate_level_reports",
]
