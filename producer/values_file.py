"""Values files: lists of dictionary values that survive any string exactly.

Used by every ``--tracked-file`` / ``OCMS_TRACKED_FILE`` reader (``ocms
estimate``, ``ocms worker``) and by the ``file:PATH`` dataset. The format is
chosen by the file name (docs/tracked-values.md):

``*.jsonl`` / ``*.ndjson`` -- JSON lines (what :func:`write_values_file` writes)
    One JSON value per line, exactly as ``cms_core.values.value_to_json``
    writes it: a JSON string for every value, integers as their decimal digits
    (``"18446744073709551615"``; a JSON integer is accepted too, read exactly).
    Any string can be written: ``" a"``, ``""``, ``"line\\nbreak"``.
    Lines holding only whitespace are skipped (no JSON value is blank).

``*.json`` -- one JSON array of such values.

anything else -- plain lines, only where unambiguous
    Each line is one value, exactly as written (the ``\\n`` or ``\\r\\n`` ending
    is not part of it). Lines that a reader could take two ways are refused
    with their line number and a pointer to JSON lines: an empty line, leading
    or trailing whitespace, control characters or Unicode line separators, and
    a first character ``"`` (JSON written into a plain file).

Values are never normalized: NFC "é" and NFD "é" are two values. A value
listed twice is an error naming the value and both lines. This module does
file I/O; cms_core (pure) encodes and validates the values.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from cms_core import OCMSParams, TrackedValues
from cms_core.errors import InvalidValueError, OCMSError
from cms_core.values import encode_value, value_from_json, value_to_json
from registry.errors import FileRefusedError
from registry.files import read_regular_file
from registry.loader import MAX_TRACKED_FILE_BYTES

JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
JSON_ARRAY_SUFFIXES = (".json",)


class ValuesFileError(OCMSError, ValueError):
    """A values file cannot be read, or a line of it is not a value (message names file and line)."""


@dataclass(frozen=True)
class RawValues:
    """Values as read (JSON values or plain-line strings) with their 1-based line numbers."""

    path: str
    format: str  # "jsonl" | "json" | "lines"
    items: tuple  # str (or int from JSON numbers)
    lines: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.items)


def file_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in JSON_LINES_SUFFIXES:
        return "jsonl"
    if suffix in JSON_ARRAY_SUFFIXES:
        return "json"
    return "lines"


def _read_text(path: Path) -> str:
    try:
        data = read_regular_file(path, MAX_TRACKED_FILE_BYTES)  # a FIFO or /dev/zero is refused, not read
    except FileRefusedError as exc:
        raise ValuesFileError(f"{path}: {exc} (a values file is a regular file of at most "
                              f"{MAX_TRACKED_FILE_BYTES:,} bytes)") from None
    except OSError as exc:
        raise ValuesFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")  # a leading BOM is not part of the first value
    except UnicodeDecodeError as exc:
        raise ValuesFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _plain_line_problem(line: str) -> str | None:
    if not line:
        return "is empty (the empty string needs JSON lines: write \"\" in a .jsonl file)"
    if line != line.strip():
        return f"{line!r} has leading or trailing whitespace (write it in a .jsonl file to keep it, e.g. {json.dumps(line)})"
    if line.startswith('"'):
        return f"{line!r} starts with a quote: if it is JSON, name the file *.jsonl; as a plain value it is ambiguous"
    for ch in line:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            return f"{line!r} holds the control or line-separator character U+{ord(ch):04X} (write it in a .jsonl file)"
    return None


def read_raw_values(path: str | Path) -> RawValues:
    """The values of a values file, unencoded (any domain); raises ValuesFileError naming the line."""
    path = Path(path)
    fmt = file_format(path)
    text = _read_text(path)
    items, lines = [], []
    if fmt == "json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValuesFileError(f"{path} line {exc.lineno}: not JSON ({exc.msg})") from None
        if not isinstance(doc, list):
            raise ValuesFileError(f"{path}: a .json values file holds one JSON array of values")
        for item in doc:
            if isinstance(item, bool) or not isinstance(item, (str, int)):
                raise ValuesFileError(f"{path}: {json.dumps(item)} is not a value (JSON strings; integers as decimal digits)")
        return RawValues(str(path), fmt, tuple(doc), tuple(0 for _ in doc))
    pieces = text.split("\n")
    if pieces and pieces[-1] == "":
        pieces.pop()  # the final line ending
    for number, line in enumerate(pieces, start=1):
        if line.endswith("\r"):
            line = line[:-1]
        if fmt == "jsonl":
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValuesFileError(f"{path} line {number}: not a JSON value ({exc.msg}): {line!r}") from None
            if isinstance(item, bool) or not isinstance(item, (str, int)):
                raise ValuesFileError(
                    f"{path} line {number}: {line.strip()} is not a value (a JSON string; integers as decimal digits)")
        else:
            problem = _plain_line_problem(line)
            if problem:
                raise ValuesFileError(f"{path} line {number}: {problem}")
            item = line
        items.append(item)
        lines.append(number)
    return RawValues(str(path), fmt, tuple(items), tuple(lines))


def _where(raw: RawValues, index: int) -> str:
    line = raw.lines[index]
    return f"line {line}" if line else f"item {index + 1}"


def decode_values(params: OCMSParams, raw: RawValues) -> list:
    """The dictionary values of ``raw`` for ``params``' domain; a bad or repeated value names its line."""
    values, seen = [], {}
    for i, item in enumerate(raw.items):
        try:
            value = value_from_json(params, item)
            element = encode_value(params, value)
        except InvalidValueError as exc:
            raise ValuesFileError(f"{raw.path} {_where(raw, i)}: {exc}") from None
        if element in seen:
            first = seen[element]
            same = raw.items[first] == item
            raise ValuesFileError(
                f"{raw.path} {_where(raw, i)}: duplicate value {json.dumps(value_to_json(value), ensure_ascii=False)} "
                f"(already on {_where(raw, first)}" + ("" if same else f" as {json.dumps(raw.items[first], ensure_ascii=False)}") + ")")
        seen[element] = i
        values.append(value)
    if not values:
        raise ValuesFileError(f"{raw.path}: holds no values")
    return values


def read_values_file(path: str | Path, params: OCMSParams) -> list:
    """The values of a values file, decoded and validated for ``params``."""
    return decode_values(params, read_raw_values(path))


def tracked_from_file(path: str | Path, params: OCMSParams) -> TrackedValues:
    """The tracked set a values file lists, in file order."""
    return TrackedValues.of(params, read_values_file(path, params))


def count_values(path: str | Path) -> int:
    """How many values a values file lists (D for ``--mode l2`` before parameters exist)."""
    return len(read_raw_values(path))


def format_values(values: Iterable) -> str:
    """JSON-lines text of ``values`` (each through ``value_to_json``; non-ASCII kept as UTF-8)."""
    return "".join(json.dumps(value_to_json(v), ensure_ascii=False) + "\n" for v in values)


def write_values_file(path: str | Path, values: Sequence) -> None:
    """Write ``values`` as JSON lines (any suffix; name it *.jsonl so readers pick the format)."""
    path = Path(path)
    if file_format(path) == "lines":
        raise ValuesFileError(f"{path}: values files are written as JSON lines; name the file *.jsonl")
    if file_format(path) == "json":
        text = json.dumps([value_to_json(v) for v in values], ensure_ascii=False, indent=0) + "\n"
    else:
        text = format_values(values)
    path.write_text(text, encoding="utf-8")


#: Every command (``ocms estimate``, ``ocms worker``, ``ocms run``) tracks the whole integer dictionary by
#: default up to this size; larger ones need a tracked range or file (counts are O(D) per key and bucket).
MAX_WHOLE_DICTIONARY = 100_000


def tracked_count_for_l2(args) -> int | None:
    """D (``tracked_count``) for ``--mode l2``: ``--tracked`` when given, else the tracked set's size.

    The tracked set is what ``--tracked-range START:STOP`` or ``--tracked-file``
    names, or the whole integer dictionary where a command tracks it by
    default. An explicit ``--tracked`` wins (devices may have been configured
    for a larger D than the values an estimate looks at).
    """
    tracked = getattr(args, "tracked", None)
    if tracked is not None or getattr(args, "mode", None) != "l2":
        return tracked
    if getattr(args, "tracked_range", None):
        start, sep, stop = str(args.tracked_range).partition(":")
        try:
            if not sep:
                raise ValueError
            return int(stop) - int(start)
        except ValueError:
            raise OCMSError(f"--tracked-range {args.tracked_range!r}: expected START:STOP integers") from None
    if getattr(args, "tracked_file", None):
        try:
            return count_values(args.tracked_file)
        except ValuesFileError as exc:
            raise OCMSError(f"--tracked-file: {exc}") from None
    d = getattr(args, "dictionary_size", None)
    if hasattr(args, "tracked_range") and not getattr(args, "strings", False) and d is not None \
            and d <= MAX_WHOLE_DICTIONARY:
        return d  # the whole dictionary is the tracked set
    hint = ", or a tracked set to count (--tracked-range / --tracked-file)" if hasattr(args, "tracked_range") else ""
    raise OCMSError(f"--mode l2 needs --tracked N (tracked_count D, the number of tracked values){hint}")
