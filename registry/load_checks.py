"""What every part of the registry loader uses: located problems, where a YAML node was written, and the
checks of plain values (text, flags, durations, bounded integers, known keys).

A :class:`Checker` collects the problems of one registry file: each names the file, the line, the metric, the
field and the version (like Prometheus' ``promtool check config``), the same problem is listed once, and a
hostile file's millions of problems are counted past :data:`~registry.load_schema.MAX_PROBLEMS`.
"""

from __future__ import annotations

import difflib
import re

from .errors import Problem
from .files import MAX_INTEGER_DIGITS
from .load_schema import MAX_PROBLEMS, MAX_TEXT_LENGTH

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_DURATION = re.compile(r"(?:(\d+)([smhdw]))+")
_DURATION_PART = re.compile(r"(\d+)([smhdw])")


def key_line(mapping, key) -> int | None:
    try:
        return mapping.key_lines[key]
    except (AttributeError, KeyError, TypeError):
        return node_line(mapping)


def item_line(sequence, index: int) -> int | None:
    try:
        return sequence.item_lines[index]
    except (AttributeError, IndexError, TypeError):
        return node_line(sequence)


def node_line(node) -> int | None:
    return getattr(node, "line", None)


def show(value) -> str:
    """A value as the user wrote it, for messages (YAML-ish, short)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = repr(str(value))
    elif isinstance(value, float):
        text = repr(float(value))
    elif isinstance(value, int):
        text = str(int(value))
    elif isinstance(value, dict):
        text = "a mapping"
    elif isinstance(value, list):
        text = "a list"
    elif value is None:
        text = "nothing (null)"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_duration(value) -> int | None:
    """Seconds from an integer or a Prometheus-style duration ("90s", "15m", "1h30m", "7d"); None if invalid."""
    if is_int(value):
        return int(value)
    if isinstance(value, str) and len(value) <= MAX_INTEGER_DIGITS and _DURATION.fullmatch(value.strip()):
        return sum(int(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(value.strip()))
    return None


def parse_domain_size(value) -> int | None:
    """An integer, digits with '_' separators, or a power written ``2^64``; None if invalid."""
    if is_int(value):
        return int(value)
    if isinstance(value, str) and len(value) <= MAX_INTEGER_DIGITS:  # far above 2^64's 20 digits; int() is bounded
        text = value.strip().replace("_", "")
        if text.isascii() and text.isdigit():
            return int(text)
        base, sep, exponent = text.partition("^")
        if sep and base.isascii() and base.isdigit() and exponent.isascii() and exponent.isdigit():
            base, exponent = int(base), int(exponent)
            if base.bit_length() * exponent <= 4 * MAX_INTEGER_DIGITS:  # 9^9999 would be 9,542 digits
                return base**exponent
    return None


class Field:
    """A value with where it was written (so an error found later still names the line)."""

    __slots__ = ("value", "line", "present", "version")

    def __init__(self, value, line, present=True, version=None):
        # version: the version number when the value was written in that version's mapping
        self.value, self.line, self.present, self.version = value, line, present, version


def version_or_metric(entry, vmap, key, version) -> Field:
    """A key from the version's mapping, else the metric's (its default for every version), with its line."""
    if vmap is not None and key in vmap:
        return Field(vmap[key], key_line(vmap, key), True, version)
    if key in entry:
        return Field(entry[key], key_line(entry, key))
    return Field(None, None, False)


class Checker:
    """The problems found in one registry file, and the checks of plain values that report them."""

    def __init__(self, path: str):
        self.path = path
        self.problems: list[Problem] = []  # the first MAX_PROBLEMS distinct ones
        self.problem_count = 0  # distinct problems found, shown or not
        self.seen_problems: set[Problem] = set()
        self.metrics_with_problems: set = set()

    # -------------------------------------------------------------- reporting
    def problem(self, line, message, metric=None, field=None, version=None) -> None:
        problem = Problem(self.path, line, message, metric, field, version)
        if problem in self.seen_problems:
            return  # a metric-level default shared by several versions is reported once, not once per version
        self.problem_count += 1
        self.metrics_with_problems.add(metric)
        if len(self.problems) < MAX_PROBLEMS:
            self.seen_problems.add(problem)
            self.problems.append(problem)

    def shown_problems(self) -> list[Problem]:
        hidden = self.problem_count - len(self.problems)
        if hidden <= 0:
            return self.problems
        return self.problems + [Problem(self.path, None, f"... and {hidden:,} more problems (the first "
                                                          f"{len(self.problems):,} are shown)")]

    # ----------------------------------------------------------- plain values
    def unknown_keys(self, mapping, allowed, metric=None, version=None, prefix="", extensions=False) -> None:
        for key in mapping:
            if extensions and isinstance(key, str) and key.startswith("x-"):
                continue  # a place for YAML anchors shared by metrics, as docker-compose's x- keys
            if key not in allowed:
                # A hint while problems are still listed (difflib per key is slow for a file of 10^6 keys).
                hint = difflib.get_close_matches(str(key)[:100], allowed, n=1) if len(self.problems) < MAX_PROBLEMS else ()
                suffix = f" (did you mean {hint[0]!r}?)" if hint else f"; expected one of: {', '.join(allowed)}"
                self.problem(key_line(mapping, key), f"unknown key{suffix}", metric, prefix + str(key), version)

    def text(self, mapping, key, metric, required, limit=MAX_TEXT_LENGTH, version=None) -> str | None:
        if key not in mapping:
            if required:
                self.problem(node_line(mapping), "missing; a non-empty string is required", metric, key, version)
            return None
        value = mapping[key]
        if not isinstance(value, str) or not value.strip():
            self.problem(key_line(mapping, key), f"must be a non-empty string, got {show(value)}", metric, key, version)
            return None
        if len(value) > limit:
            self.problem(key_line(mapping, key), f"must be at most {limit} characters, got {len(value)}", metric, key, version)
            return None
        return str(value).strip()

    def flag(self, mapping, key, metric, version=None) -> bool | None:
        if key not in mapping:
            return False
        value = mapping[key]
        if not isinstance(value, bool):
            self.problem(key_line(mapping, key), f"must be true or false, got {show(value)}", metric, key, version)
            return None
        return value

    def duration(self, mapping, key, metric, default, minimum, maximum, field=None) -> int | None:
        field = field or key
        if key not in mapping:
            return default
        value, line = mapping[key], key_line(mapping, key)
        seconds = parse_duration(value)
        if seconds is None:
            self.problem(line, f"must be a duration such as 60, 90s, 15m, 1h or 7d, got {show(value)}", metric, field)
            return None
        if seconds < minimum or (maximum is not None and seconds > maximum):
            bound = f"in [{minimum}, {maximum}] seconds" if maximum is not None else f">= {minimum} s"
            self.problem(line, f"must be {bound}, got {seconds} s", metric, field)
            return None
        return seconds

    def integer(self, mapping, key, metric, default, minimum, maximum, version=None) -> int | None:
        if key not in mapping:
            return default
        value, line = mapping[key], key_line(mapping, key)
        if not is_int(value):
            self.problem(line, f"must be an integer, got {show(value)}", metric, key, version)
            return None
        if not minimum <= value <= maximum:
            self.problem(line, f"must be in [{minimum}, {maximum}], got {value}", metric, key, version)
            return None
        return int(value)

