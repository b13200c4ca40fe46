"""Values files: THE format of a list of dictionary values in a file, read one way everywhere.

Every reader goes through :func:`read_raw_values`: a registry's ``tracked: {file: PATH}``
(registry.loader), ``--tracked-file`` / ``OCMS_TRACKED_FILE`` (registry.flags), the
``file:PATH`` dataset's JSON forms (fleet.datasets) and ``ocms discover --promote``. The
format is chosen by the file name (docs/tracked-values.md is the one description):

``*.jsonl`` / ``*.ndjson`` -- JSON lines (what :func:`write_values_file` writes)
    One JSON value per line, exactly as ``cms_core.values.value_to_json`` writes it: a JSON
    string for every value, integers as their decimal digits (``"18446744073709551615"``; a
    JSON integer is accepted too, read exactly). Any string can be written: ``" a"``, ``""``,
    ``"line\\nbreak"``. Lines holding only whitespace are skipped (no JSON value is blank).

``*.json`` -- one JSON array of such values.

anything else -- plain lines, only where unambiguous
    Each line is one value, exactly as written (the ``\\n`` or ``\\r\\n`` ending is not part
    of it). Lines that a reader could take two ways are refused with their line number and a
    pointer to JSON lines: an empty line, leading or trailing whitespace, control characters
    or Unicode line separators, and a first character ``"`` (JSON written into a plain file).

A leading UTF-8 byte order mark is not part of the first value. Values are never normalized:
NFC "é" and NFD "é" are two values. Reading is bounded while it happens (a regular file only,
at most :data:`MAX_FILE_BYTES`, :data:`MAX_VALUES` values, twice as many lines of at most
:data:`MAX_LINE_CHARS` characters), so a FIFO, ``/dev/zero`` or a file growing while it
is read is refused, not read forever. Bad lines are collected (the first
:data:`MAX_BAD_LINES`, the rest counted) so that one run names every mistake.

What a value *means* is the reader's: :func:`decode_values` decodes them for an
``OCMSParams`` domain (a value listed twice is an error naming both lines); the registry
checks them against a metric's categories or dictionary. This module does file I/O;
cms_core (pure) encodes and validates the values.
"""

from __future__ import annotations

import io
import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from cms_core import OCMSParams, TrackedValues
from cms_core.errors import InvalidValueError, OCMSError
from cms_core.values import encode_value, value_from_json, value_to_json

from .errors import FileRefusedError
from .files import open_regular_file

JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
JSON_ARRAY_SUFFIXES = (".json",)

#: A values file is a regular file of at most this many bytes.
MAX_FILE_BYTES = 256 * 2**20
#: Values in one file: tracked values are held in every worker's view, one count each per bucket.
MAX_VALUES = 1_000_000
#: A value is at most 4,096 characters; its JSON line, escaped, fits in this many.
MAX_LINE_CHARS = 6 * 4096 + 64
#: Lines read (values, blank and bad lines) per value allowed, before a file is refused.
LINES_PER_VALUE = 2
#: Bad lines named in one error; the rest are counted.
MAX_BAD_LINES = 10
#: Every command (``ocms estimate``, ``ocms worker``, ``ocms run``, a registry metric without ``tracked``)
#: tracks the whole integer dictionary by default up to this size; larger ones need a range or a file
#: (counts are O(D) per key and bucket).
MAX_WHOLE_DICTIONARY = 100_000


class ValuesFileError(OCMSError, ValueError):
    """A values file cannot be read, or lines of it are not values.

    ``problems`` lists (location, reason): a location is ``"line N"``, ``"item N"`` (a .json
    array) or ``""`` (the whole file); ``more`` counts bad lines beyond those listed; ``good``
    holds the values of the other lines when the file was read to its end (a reader may check
    them too, to name every mistake at once). The message names the file and the first problem."""

    def __init__(self, path: str, problems: Sequence[tuple[str, str]], more: int = 0,
                 good: "RawValues | None" = None):
        self.path, self.problems, self.more, self.good = str(path), tuple(problems), more, good
        where, reason = self.problems[0]
        extra = len(self.problems) - 1 + more
        #: The message without the file's name (for a flag that names the file already).
        self.detail = (f"{where}: " if where else "") + reason + (
            f" (and {extra} more bad line{'s' if extra != 1 else ''})" if extra else "")
        super().__init__(f"{self.path}{' ' if where else ': '}{self.detail}")


@dataclass(frozen=True)
class RawValues:
    """Values as read (JSON strings and integers, or plain-line strings) and where each stood."""

    path: str
    format: str  # "jsonl" | "json" | "lines"
    items: tuple  # str (or int from JSON numbers)
    lines: tuple[int, ...]  # 1-based line numbers; for a .json array, 1-based item numbers

    def __len__(self) -> int:
        return len(self.items)

    def where(self, index: int) -> str:
        """``"line N"`` (``"item N"`` in a .json array) of ``items[index]``."""
        return f"{'item' if self.format == 'json' else 'line'} {self.lines[index]}"


def file_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in JSON_LINES_SUFFIXES:
        return "jsonl"
    if suffix in JSON_ARRAY_SUFFIXES:
        return "json"
    return "lines"


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


def _json_value_problem(item, shown: str) -> str | None:
    if isinstance(item, bool) or not isinstance(item, (str, int)):
        return f"{shown[:60]} is not a value (a JSON string; integers as decimal digits)"
    return None


class _Reader:
    """One pass over a values file, bounded, collecting bad lines."""

    def __init__(self, path: Path, max_values: int):
        self.path, self.max_values = path, max_values
        self.items: list = []
        self.lines: list[int] = []
        self.bad: list[tuple[str, str]] = []
        self.bad_count = 0

    def fail(self, where: str, reason: str):
        raise ValuesFileError(self.path, [(where, reason)])

    def refuse(self, where: str, reason: str) -> None:
        self.bad_count += 1
        if len(self.bad) < MAX_BAD_LINES:
            self.bad.append((where, reason))

    def keep(self, item, number: int) -> None:
        if len(self.items) == self.max_values:  # stop reading: the file cannot be valid
            self.fail(f"line {number}", f"more than {self.max_values:,} values")
        self.items.append(item)
        self.lines.append(number)

    def read_lines(self, handle, fmt: str) -> None:
        for number, line in enumerate(iter(lambda: handle.readline(MAX_LINE_CHARS + 1), ""), 1):
            if number > LINES_PER_VALUE * self.max_values:
                self.fail("", f"more than {LINES_PER_VALUE * self.max_values:,} lines (at most "
                              f"{self.max_values:,} values, one a line)")
            if len(line) > MAX_LINE_CHARS:
                self.fail(f"line {number}", f"longer than {MAX_LINE_CHARS:,} characters (a value is at most 4,096)")
            line = line[:-1] if line.endswith("\n") else line
            line = line[:-1] if line.endswith("\r") else line
            if fmt == "lines":
                problem = _plain_line_problem(line)
                if problem:
                    self.refuse(f"line {number}", problem)
                else:
                    self.keep(line, number)
                continue
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as exc:  # JSONDecodeError, or integer digits beyond Python's conversion limit
                self.refuse(f"line {number}", f"not a JSON value ({getattr(exc, 'msg', exc)}): {line[:60]!r}")
                continue
            problem = _json_value_problem(item, line.strip())
            if problem:
                self.refuse(f"line {number}", problem)
            else:
                self.keep(item, number)

    def read_array(self, handle) -> None:
        text = handle.read()
        try:
            doc = json.loads(text)
        except ValueError as exc:
            self.fail(f"line {getattr(exc, 'lineno', 1)}", f"not JSON ({getattr(exc, 'msg', exc)})")
        if not isinstance(doc, list):
            self.fail("", "a .json values file holds one JSON array of values")
        if len(doc) > self.max_values:
            self.fail("", f"{len(doc):,} values; at most {self.max_values:,}")
        for number, item in enumerate(doc, 1):
            problem = _json_value_problem(item, json.dumps(item))
            if problem:
                self.refuse(f"item {number}", problem)
            else:
                self.keep(item, number)


def read_raw_values(path: str | Path, *, max_values: int | None = None) -> RawValues:
    """The values of a values file, unencoded (any domain); raises ValuesFileError naming each bad line.

    ``max_values`` (default :data:`MAX_VALUES`) bounds the values kept (a fleet's dataset file lists one
    value per device report and may hold more; its bytes stay bounded)."""
    path = Path(path)
    fmt = file_format(path)
    reader = _Reader(path, MAX_VALUES if max_values is None else max_values)
    try:
        with io.TextIOWrapper(open_regular_file(path, MAX_FILE_BYTES), encoding="utf-8-sig", newline="\n") as handle:
            reader.read_array(handle) if fmt == "json" else reader.read_lines(handle, fmt)
    except FileRefusedError as exc:  # a FIFO or /dev/zero is refused, not read
        reader.fail("", f"{exc} (a values file is a regular file of at most {MAX_FILE_BYTES:,} bytes)")
    except UnicodeDecodeError as exc:
        reader.fail("", f"not UTF-8 text ({exc.reason})")
    except OSError as exc:
        reader.fail("", f"cannot read: {exc.strerror or exc}")
    values = RawValues(str(path), fmt, tuple(reader.items), tuple(reader.lines))
    if reader.bad:
        raise ValuesFileError(path, reader.bad, reader.bad_count - len(reader.bad), good=values)
    return values


def decode_values(params: OCMSParams, raw: RawValues) -> list:
    """The dictionary values of ``raw`` for ``params``' domain; a bad or repeated value names its line."""
    values, seen = [], {}
    for i, item in enumerate(raw.items):
        try:
            value = value_from_json(params, item)
            element = encode_value(params, value)
        except InvalidValueError as exc:
            raise ValuesFileError(raw.path, [(raw.where(i), str(exc))]) from None
        if element in seen:
            first = seen[element]
            same = raw.items[first] == item
            raise ValuesFileError(raw.path, [(raw.where(i), (
                f"duplicate value {json.dumps(value_to_json(value), ensure_ascii=False)} (already on {raw.where(first)}"
                + ("" if same else f" as {json.dumps(raw.items[first], ensure_ascii=False)}") + ")"))])
        seen[element] = i
        values.append(value)
    if not values:
        raise ValuesFileError(raw.path, [("", "holds no values")])
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
        raise ValuesFileError(path, [("", "values files are written as JSON lines; name the file *.jsonl")])
    if file_format(path) == "json":
        text = json.dumps([value_to_json(v) for v in values], ensure_ascii=False, indent=0) + "\n"
    else:
        text = format_values(values)
    path.write_text(text, encoding="utf-8")
