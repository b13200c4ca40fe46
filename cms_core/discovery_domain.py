"""What discovery describes (docs/discovery.md): a :class:`DiscoveryDomain` (strings over an alphabet or UTF-8
bytes, or integers of ``bits`` bits; ``g`` levels) and its :class:`Prefix` candidates: the prefix of a value at a
level, its one-step extensions, and the integer element a prefix is reported and decoded as.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Sequence

import numpy as np

from .errors import InvalidParameterError, InvalidValueError

DOMAIN_KINDS = ("strings", "integers")
#: The string alphabet spelled ``utf8``: the 256 byte values of the UTF-8 encoding.
UTF8 = "utf8"
#: Candidates one survivor may spawn per level (alphabet^symbols + shorter ended ones).
MAX_BRANCHING = 1 << 16
MAX_INTEGER_BITS = 64
MAX_LEVELS = 256

_ENDED, _OPEN = b"\x01", b"\x00"


def positive_int(name: str, value, maximum: int | None = None) -> int:
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
            positive_int("max_length", self.max_length, 4096)
            positive_int("symbols_per_level", self.symbols_per_level, self.max_length)
        else:
            if self.alphabet is not None or self.max_length is not None or self.symbols_per_level is not None:
                raise InvalidParameterError("alphabet", self.alphabet, "belongs to string domains; integers take bits")
            positive_int("bits", self.bits, MAX_INTEGER_BITS)
            positive_int("bits_per_level", self.bits_per_level, self.bits)
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
