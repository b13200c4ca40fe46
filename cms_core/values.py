"""Mapping dictionary values to field elements, and tracked value sets.

Integers: a value x of the dictionary [0, d) is the field element x.

Strings and bytes (value_domain "string"): the value is mapped to the 128-bit
integer ``blake2b(utf8(value), digest_size=16, person="ocms-value-v1")`` read
big-endian, an element of GF(2^128). Collision bound: for N distinct strings,
P(any two share a fingerprint) <= N (N - 1) / 2^129 (about 1.5e-21 for
N = 10^9), so a collision is not a practical concern; if two strings did
collide they would be counted as one value.

Text in every output (JSON, Prometheus labels, logs): valid Unicode, never a lone
surrogate. A value held as bytes that are not UTF-8 text (a discovered UTF-8 prefix
cut inside a multi-byte character: level 4 of ``café`` is ``caf\\xc3``) is written
with U+FFFD where its bytes are not whole characters, and a JSON record of it also
carries the exact bytes (:func:`value_record`, docs/discovery.md "Values that are not
whole characters").
"""

from __future__ import annotations

import codecs
import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Sequence

import numpy as np

from .errors import InvalidValueError
from .params import OCMSParams

_VALUE_PERSON = b"ocms-value-v1"


def utf8_of(text: str) -> bytes:
    """The UTF-8 bytes of ``text``; a lone surrogate (JSON ``"\\udcc3"``) has none: InvalidValueError."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValueError(f"value {text!r}: not valid Unicode text (a lone surrogate at character "
                                f"{exc.start})") from None


def string_fingerprint(value: str | bytes) -> int:
    """The documented 128-bit fingerprint of a string or bytes value (a str must be valid Unicode text)."""
    data = utf8_of(value) if isinstance(value, str) else bytes(value)
    return int.from_bytes(hashlib.blake2b(data, digest_size=16, person=_VALUE_PERSON).digest(), "big")


def encode_value(params: OCMSParams, value) -> int:
    """The field element of a dictionary value, validated against ``params``."""
    if params.value_domain == "string":
        if isinstance(value, (str, bytes, bytearray)):
            return string_fingerprint(value)
        raise InvalidValueError(f"value {value!r}: the string domain takes str or bytes values")
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidValueError(f"value {value!r}: the integer domain takes int values in [0, {params.dictionary_size})")
    value = int(value)
    if not 0 <= value < params.dictionary_size:
        raise InvalidValueError(f"value {value}: outside the dictionary [0, {params.dictionary_size})")
    return value


def value_to_json(value) -> str:
    """A dictionary value as it travels in JSON (CLI, HTTP API, files) and in labels: always valid text.

    Integers are written as their decimal digits in a JSON string: a JSON
    number loses every integer above 2^53 in JavaScript clients and in jq 1.6
    (2^64 - 1 reads back as 18446744073709552000), and one type for every value
    keeps clients simple. Strings are written unchanged (JSON escapes any
    character), bytes as their UTF-8 text with U+FFFD (the Unicode replacement
    character) for each run of bytes that is not a whole character (the
    standard "replace" decoding, the same as a browser's TextDecoder): lossy
    only for bytes that are not UTF-8 text, whose exact bytes
    :func:`value_record` adds.
    """
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidValueError(f"value {value!r}: only int, str or bytes values travel in JSON")
    return str(int(value))


def ends_inside_character(raw: bytes) -> bool:
    """True when ``raw`` ends with the first bytes of a multi-byte UTF-8 character it does not finish."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    decoder.decode(bytes(raw), final=False)
    return bool(decoder.getstate()[0])  # the bytes held back, waiting for the rest of a character


def value_record(value, key: str = "value") -> dict:
    """A value as the fields of a JSON record: ``{key: value_to_json(value)}``, and when the value is
    bytes that are not UTF-8 text (a prefix or a truncated value cut inside a character) also

    * ``bytes_hex``: the value's exact bytes, lowercase hex (``caf\\xc3`` -> ``"636166c3"``);
    * ``cut_inside_character``: true when the bytes end inside a multi-byte character (the text
      shows it as a trailing U+FFFD), false when the bytes are not UTF-8 elsewhere.

    So a record has ``bytes_hex`` exactly when its text is not its value's exact bytes.
    """
    record = {key: value_to_json(value)}
    if isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
        if record[key].encode("utf-8") != raw:
            record["bytes_hex"] = raw.hex()
            record["cut_inside_character"] = ends_inside_character(raw)
    return record


def value_from_json(params: OCMSParams, text) -> int | str:
    """Inverse of :func:`value_to_json` for ``params``' value domain (exact for every value)."""
    if params.value_domain == "string":
        if not isinstance(text, str):
            raise InvalidValueError(f"value {text!r}: the string domain takes JSON strings")
        if not text.isascii():
            utf8_of(text)  # refuses a lone surrogate
        return text
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise InvalidValueError(f"value {text!r}: the integer domain takes decimal digits as a JSON string")
    if isinstance(text, str):
        if not text.isascii() or not text.isdigit():
            shown = text if len(text) <= 40 else text[:20] + "..." + text[-10:]
            raise InvalidValueError(f"value {shown!r}: not a non-negative decimal integer")
        if len(text) > 40:  # no dictionary holds it (d <= 2^64 has 20 digits); int() refuses > 4300 digits
            raise InvalidValueError(f"value {text[:20]}...({len(text)} digits): outside every integer dictionary")
        text = int(text)
    return encode_value(params, text)


def limbs_for(params: OCMSParams) -> int:
    """uint64 words per field element in arrays: 1, or 2 for GF(2^128)."""
    return 2 if params.field.bits > 64 else 1


def elements_to_array(elements: Sequence[int], limbs: int) -> np.ndarray:
    """Field elements (Python ints) to uint64 (n,) or little-endian-limb (n, 2) arrays."""
    if limbs == 1:
        return np.array(elements, dtype=np.uint64).reshape(-1)
    out = np.empty((len(elements), 2), dtype=np.uint64)
    mask = (1 << 64) - 1
    for i, e in enumerate(elements):
        out[i, 0] = e & mask
        out[i, 1] = e >> 64
    return out


def array_to_elements(array: np.ndarray) -> list[int]:
    """Inverse of :func:`elements_to_array`."""
    if array.ndim == 1:
        return [int(v) for v in array]
    return [int(lo) | (int(hi) << 64) for lo, hi in array]


@dataclass(frozen=True, eq=False)
class TrackedValues:
    """The ordered set of values a sketch keeps match counts for.

    Either a consecutive integer range [start, stop) (the fast incremental
    kernel path) or an explicit list of values (ints or strings). ``labels``
    are the user-facing values; ``elements`` their field elements.
    """

    params_fingerprint: bytes
    elements: np.ndarray
    labels: tuple
    range_start: int | None = None

    @classmethod
    def range(cls, params: OCMSParams, start: int, stop: int) -> "TrackedValues":
        if params.value_domain != "integer":
            raise InvalidValueError("an integer range needs the integer value domain")
        if isinstance(start, bool) or isinstance(stop, bool) or not isinstance(start, int) or not isinstance(stop, int):
            raise InvalidValueError(f"range [{start!r}, {stop!r}): bounds must be integers")
        if not 0 <= start < stop <= params.dictionary_size:
            raise InvalidValueError(f"range [{start}, {stop}): must be non-empty inside [0, {params.dictionary_size})")
        if params.field.bits > 64:
            # Binary fields beyond 64 bits keep explicit elements (no incremental path).
            return cls.of(params, range(start, stop))
        elements = np.arange(start, stop, dtype=np.uint64)
        return cls(params.fingerprint, elements, (), start)

    @classmethod
    def of(cls, params: OCMSParams, values: Iterable) -> "TrackedValues":
        labels = tuple(values)
        if not labels:
            raise InvalidValueError("the tracked set is empty")
        elements = [encode_value(params, v) for v in labels]
        if len(set(elements)) != len(elements):
            first: dict[int, int] = {}
            for i, element in enumerate(elements):
                if element in first:
                    raise InvalidValueError(f"the tracked set holds the value {labels[i]!r} twice "
                                            f"(positions {first[element]} and {i})")
                first[element] = i
        return cls(params.fingerprint, elements_to_array(elements, limbs_for(params)), labels, None)

    def __len__(self) -> int:
        return int(self.elements.shape[0])

    @property
    def is_range(self) -> bool:
        return self.range_start is not None

    def label(self, index: int):
        """The user-facing value at ``index`` (ranges compute it, lists store it)."""
        if self.range_start is not None:
            return self.range_start + index
        return self.labels[index]

    def all_labels(self) -> list:
        return [self.label(i) for i in range(len(self))]

    @cached_property
    def fingerprint(self) -> bytes:
        """8 bytes identifying the ordered tracked set (merge refuses a different one)."""
        h = hashlib.blake2b(digest_size=8, person=b"ocms-tracked")
        h.update(self.params_fingerprint)
        h.update(np.ascontiguousarray(self.elements).astype("<u8").tobytes())
        return h.digest()
