"""The values a metric tracks and watches: 'tracked' ('all', a list, {range: [START, STOP]} or {file: PATH}),
set for each version (a category list grows, so each version tracks the listed names it has), and 'watch',
the tracked values a dashboard shows first.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from .files import YamlMap, YamlSeq
from .load_checks import Checker, Field, is_int, item_line, key_line, parse_domain_size, show
from .load_schema import MAX_TRACKED, MAX_WATCH
from .model import MetricVersion, TrackedSpec
from .values_file import MAX_WHOLE_DICTIONARY, ValuesFileError, read_raw_values


def raw_field(source: str) -> str:
    """The field a tracked value came from: inline list or file."""
    return "tracked" if source == "list" else "tracked.file"


class TrackedReader:
    """Reads each metric's tracked set, once per metric, and its watch list; files relative to ``base_dir``."""

    def __init__(self, check: Checker, base_dir: Path):
        self.check = check
        self.base_dir = base_dir
        self.tracked_sources: dict[str, tuple | None] = {}  # metric -> parsed 'tracked' (None: reported)
        self.missing_tracked: dict[str, list] = {}  # metric -> tracked names not in its newest version
        self.tracked_specs: dict[str, tuple] = {}  # metric -> (names object, spec): versions with the same names share it
        self.category_index: dict[str, dict] = {}  # metric -> name -> id (ids never change: names are appended)

    def spec(self, raw: Field, kind, names, d, metric, version) -> TrackedSpec | None:
        """The version's tracked set. The setting is parsed once per metric; a problem is reported once."""
        if metric not in self.tracked_sources:
            self.tracked_sources[metric] = self.tracked_source(raw, kind, metric)
        source = self.tracked_sources[metric]
        if source is None:
            return None
        form, data = source
        spec = None
        if form == "all":
            if kind == "strings":
                self.check.problem(raw.line, "a 'strings' metric needs its tracked values: a list, or {file: PATH} "
                                   "(JSON lines, one JSON string per line)", metric, "tracked")
            elif d > MAX_WHOLE_DICTIONARY:
                self.check.problem(raw.line, f"the dictionary has {d:,} values, more than {MAX_WHOLE_DICTIONARY:,} to track "
                                   "whole: give a range {range: [START, STOP]}, a list, or {file: PATH}", metric, "tracked")
            else:
                spec = TrackedSpec("all")
        elif form == "range":
            start, stop, line = data
            if stop > d:
                self.check.problem(line, f"range [{start}, {stop}) must lie inside the dictionary [0, {d})", metric,
                                   "tracked.range")
            else:
                spec = TrackedSpec("range", start=start, stop=stop)
        else:
            items, where = data
            shared = self.tracked_specs.get(metric)
            if shared is not None and shared[0] is names:
                return shared[1]  # the same names (or none) as the previous version: the same tracked set
            if kind == "categories":
                # Each version tracks the listed names it has; a name of no version is reported by apply_watch.
                index = self.category_index.setdefault(metric, {})
                for i in range(len(index), len(names)):  # names are only appended: ids never change
                    index[names[i]] = i
                count, values, missing = len(names), [], []
                for name, name_line in items:
                    position = index.get(name, count)
                    if position < count:
                        values.append(position)
                    else:
                        missing.append((name, name_line))
                self.missing_tracked[metric] = missing
                if values:
                    spec = TrackedSpec("list", values=tuple(values), source=where)
                else:
                    self.check.problem(raw.line, "none of the tracked names is a category of this version", metric,
                                       "tracked", version)
                    return None
            elif kind == "integers" and any(v >= d for v, _ in items):
                for value, line in items:
                    if value >= d:
                        self.check.problem(line, f"{value} is outside the dictionary [0, {d})", metric, raw_field(where))
            else:
                spec = TrackedSpec("list", values=tuple(v for v, _ in items), source=where)
            if spec is not None:
                self.tracked_specs[metric] = (names, spec)
        if spec is None:
            self.tracked_sources[metric] = None  # reported; later versions stay quiet
        return spec

    def tracked_source(self, raw: Field, kind, metric):
        """("all", None) | ("range", (start, stop, line)) | ("list", ([(value, line)], source))."""
        if not raw.present or raw.value == "all":
            return ("all", None)
        value, line = raw.value, raw.line
        if isinstance(value, YamlSeq):
            return self.tracked_items([(v, item_line(value, i)) for i, v in enumerate(value)], kind, metric,
                                      "tracked", "list")
        if isinstance(value, YamlMap) and len(value) == 1 and ("range" in value or "file" in value):
            if "range" in value:
                rng, rline = value["range"], key_line(value, "range")
                if kind != "integers":
                    self.check.problem(rline, f"a range tracks integers; this metric has {kind!r} (list the values instead)",
                                       metric, "tracked.range")
                    return None
                if (not isinstance(rng, YamlSeq) or len(rng) != 2
                        or any(parse_domain_size(b) is None for b in rng)):
                    self.check.problem(rline, f"must be [START, STOP] (integers, STOP excluded), got {show(rng)}",
                                       metric, "tracked.range")
                    return None
                start, stop = (parse_domain_size(b) for b in rng)
                if not 0 <= start < stop:
                    self.check.problem(rline, f"must satisfy 0 <= START < STOP, got [{start}, {stop}]", metric, "tracked.range")
                    return None
                if stop - start > MAX_TRACKED:
                    self.check.problem(rline, f"tracks {stop - start:,} values; at most {MAX_TRACKED:,}", metric, "tracked.range")
                    return None
                return ("range", (start, stop, rline))
            return self.tracked_file(value["file"], key_line(value, "file"), kind, metric)
        self.check.problem(line, "must be 'all', a list of values, {range: [START, STOP]} or {file: PATH}, "
                                 f"got {show(value)}", metric, "tracked")
        return None

    def tracked_file(self, name, line, kind, metric):
        """The values of a tracked file (registry.values_file: the one format), each bad line a problem."""
        if not isinstance(name, str) or not name.strip():
            self.check.problem(line, f"must be a file path (a values file: docs/tracked-values.md), got {show(name)}",
                               metric, "tracked.file")
            return None
        path = Path(name) if os.path.isabs(name) else self.base_dir / name
        try:
            raw = read_raw_values(path, max_values=MAX_TRACKED)
        except ValuesFileError as exc:
            for where, reason in exc.problems:
                self.check.problem(line, f"{name}{' ' + where if where else ''}: {reason}", metric, "tracked.file")
            if exc.more:
                self.check.problem(line, f"{name}: {exc.more} more bad lines", metric, "tracked.file")
            if exc.good:  # the other lines' values: their mistakes are named in the same run
                self.tracked_items(self.file_items(exc.good), kind, metric, "tracked.file", name, line, name)
            return None
        return self.tracked_items(self.file_items(raw), kind, metric, "tracked.file", name, line, name)

    @staticmethod
    def file_items(raw) -> list[tuple]:
        return [(item, raw.where(i)) for i, item in enumerate(raw.items)]

    def tracked_items(self, items, kind, metric, field, source, file_line=None, file_name=None):
        """Validate tracked values (duplicates, types); lines are YAML lines, or lines of ``file_name``."""
        if not items:
            self.check.problem(file_line, "holds no values", metric, field)
            return None
        if len(items) > MAX_TRACKED:
            self.check.problem(file_line or items[0][1], f"{len(items):,} tracked values; at most {MAX_TRACKED:,}", metric, field)
            return None

        def prefix(loc) -> str:
            # YAML items report their own line; file items report the 'file:' key's line plus "FILE line N".
            return f"{file_name} {loc}: " if file_name is not None else ""

        out, seen, ok = [], set(), True
        for value, loc in items:
            line = file_line if file_name is not None else loc
            if kind == "integers":
                number = parse_domain_size(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
                if number is None or (isinstance(value, str) and not value.strip().isdigit()):
                    self.check.problem(line, f"{prefix(loc)}an integer value (decimal digits) expected, got {show(value)}",
                                       metric, field)
                    ok = False
                    continue
                value = number
            elif not isinstance(value, str) or not value:
                self.check.problem(line, f"{prefix(loc)}a non-empty string expected (quote numbers), got {show(value)}",
                                   metric, field)
                ok = False
                continue
            else:
                value = str(value)
                if len(value) > 4096:
                    self.check.problem(line, f"{prefix(loc)}a tracked string is at most 4096 characters, got {len(value)}",
                                       metric, field)
                    ok = False
                    continue
            if value in seen:
                self.check.problem(line, f"{prefix(loc)}{show(value)} is listed twice", metric, field)
                ok = False
                continue
            seen.add(value)
            out.append((value, line))
        return ("list", (out, source)) if ok else None

    # ----------------------------------------------------------------- watch
    def apply_watch(self, entry, versions: list[MetricVersion], metric) -> list[MetricVersion] | None:
        """Check tracked names unknown to every version and the watch list; set each version's watch."""
        # Categories are only appended, so a name missing from the newest version is in no version.
        for name, line in self.missing_tracked.get(metric, []):
            self.check.problem(line, f"{show(name)} is not a category of any version", metric, "tracked")
        sets: dict[tuple[int, int], set] = {}  # versions sharing their tracked spec and names share one set
        tracked_by_version = {}
        for v in versions:
            key = (id(v.tracked), id(v.value_names))
            if key not in sets:
                sets[key] = set(v.tracked_names())
            tracked_by_version[v.version] = sets[key]
        watch: list[tuple[str, int]] = []
        if "watch" in entry:
            value, line = entry["watch"], key_line(entry, "watch")
            if not isinstance(value, YamlSeq):
                self.check.problem(line, f"must be a list of value names, got {show(value)}", metric, "watch")
            elif len(value) > MAX_WATCH:
                self.check.problem(line, f"{len(value):,} values; at most {MAX_WATCH:,}", metric, "watch")
            else:
                seen = set()
                every = set().union(*sets.values())
                for i, item in enumerate(value):
                    iline = item_line(value, i)
                    name = str(item) if is_int(item) and versions[0].domain == "integers" else item
                    if not isinstance(name, str):
                        self.check.problem(iline, f"a value name (string) expected, got {show(item)}", metric, "watch")
                    elif name in seen:
                        self.check.problem(iline, f"{show(name)} is listed twice", metric, "watch")
                    elif name not in every:
                        self.check.problem(iline, f"{show(name)} is not a tracked value of any version", metric, "watch")
                    else:
                        seen.add(name)
                        watch.append((name, iline))
        if metric in self.check.metrics_with_problems:
            return None
        out = []
        shared: dict[int, dict] = {}
        for v in versions:
            version = dataclasses.replace(v, watch=tuple(n for n, _ in watch if n in tracked_by_version[v.version]))
            if version.value_names is not None:  # digests and name indexes computed once per names list
                version._cache["names_cache"] = shared.setdefault(id(version.value_names), {})
            out.append(version)
        return out
