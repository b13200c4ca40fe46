"""A metric's value domain and its versions, as the registry file gives them: 'categories' (a list of names),
'integers' (the dictionary size) or 'strings: true'; the 'versions' list (numbered, increasing); and each
version's category names, the metric's list plus every 'add_categories' up to that version (names are only
appended, so a value's id never changes).
"""

from __future__ import annotations

from . import numeric
from .files import YamlMap, YamlSeq
from .load_checks import Checker, is_int, item_line, key_line, parse_domain_size, show
from .load_schema import (DOMAIN_KEYS, MAX_CATEGORIES, MAX_INTEGER_DOMAIN, MAX_VALUE_LENGTH, MAX_VERSION_NUMBER,
                          MAX_VERSIONED_NAMES, MAX_VERSIONS, VERSION_KEYS)


class VersionsReader:
    """Reads the domain, the versions and their category names of each metric of one file."""

    def __init__(self, check: Checker):
        self.check = check
        self.versioned_names = 0  # category names held by every version's own list (shared lists count once)

    # -------------------------------------------------------------- domain
    def domain(self, entry, metric, line):
        given = [k for k in DOMAIN_KEYS if k in entry]
        if not given:
            self.check.problem(line, "missing a value domain: give one of 'categories' (a list of names), "
                                     "'integers' (the dictionary size) or 'strings: true'", metric, "categories")
            return None
        if len(given) > 1:
            self.check.problem(key_line(entry, given[1]), f"a metric has one value domain; it already has {given[0]!r}",
                               metric, given[1])
            return None
        kind = given[0]
        value, vline = entry[kind], key_line(entry, kind)
        if kind == numeric.KEY:  # issue 40: an integer metric over the bucket indices (registry/numeric.py)
            return numeric.parse(self.check, entry, metric, vline)
        if kind == "categories":
            names = self.names(entry, "categories", metric, None, set())
            if names is None:
                return None
            if len(names) < 2:
                self.check.problem(vline, f"needs at least 2 categories (one category always has frequency 1), "
                                          f"got {len(names)}", metric, kind)
                return None
            return kind, names, None
        if kind == "integers":
            size = parse_domain_size(value)
            if size is None:
                self.check.problem(vline, f"must be the dictionary size d (an integer such as 1000 or 2^64), got {show(value)}",
                                   metric, kind)
                return None
            if not 2 <= size <= MAX_INTEGER_DOMAIN:
                self.check.problem(vline, f"must be in [2, 2^64], got {size}", metric, kind)
                return None
            return kind, None, size
        if value is not True:
            self.check.problem(vline, f"must be true (an open domain of strings; tracked values go under 'tracked'), "
                                      f"got {show(value)}", metric, kind)
            return None
        return kind, None, None

    def names(self, mapping, key, metric, version, known: set, limit=MAX_CATEGORIES) -> list[str] | None:
        """A list of category names: strings, printable, unique (also against ``known``)."""
        value, line = mapping[key], key_line(mapping, key)
        if not isinstance(value, YamlSeq):
            self.check.problem(line, f"must be a list of names, got {show(value)}", metric, key, version)
            return None
        if len(value) > limit:
            self.check.problem(line, f"{len(value):,} names; at most {limit:,}", metric, key, version)
            return None
        out: list[str] = []
        seen: set = set()
        ok = True
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.check.problem(item_line(value, i), f"each name must be a string (quote numbers, e.g. '14' or '1.10'), "
                                   f"got {show(item)}", metric, key, version)
                ok = False
            elif not item or len(item) > MAX_VALUE_LENGTH or not item.isprintable():
                self.check.problem(item_line(value, i), f"a name must be 1 to {MAX_VALUE_LENGTH} printable characters, "
                                   f"got {show(item)}", metric, key, version)
                ok = False
            elif item in seen or item in known:
                self.check.problem(item_line(value, i), f"{show(item)} is listed twice", metric, key, version)
                ok = False
            else:
                seen.add(item)
                out.append(str(item))
        return out if ok else None

    # ------------------------------------------------------------- versions
    def version_entries(self, entry, metric, line):
        """[(number, mapping or None, line)], validated for numbering and keys."""
        if "versions" not in entry:
            return [(1, None, line)]
        value, vline = entry["versions"], key_line(entry, "versions")
        if not isinstance(value, YamlSeq) or not value:
            self.check.problem(vline, f"must be a non-empty list of versions, got {show(value)}", metric, "versions")
            return None
        if len(value) > MAX_VERSIONS:
            self.check.problem(vline, f"{len(value):,} versions; at most {MAX_VERSIONS:,}", metric, "versions")
            return None
        out = []
        previous = 0
        ok = True
        for i, item in enumerate(value):
            iline = item_line(value, i)
            if not isinstance(item, YamlMap):
                self.check.problem(iline, f"each version must be a mapping with a 'version' number, got {show(item)}",
                                   metric, "versions")
                ok = False
                continue
            number = item.get("version")
            if "version" not in item:
                self.check.problem(iline, "missing; each version needs its number (1, 2, ...)", metric, "version")
                ok = False
                continue
            if not is_int(number) or not 1 <= number <= MAX_VERSION_NUMBER:
                self.check.problem(key_line(item, "version"), f"must be an integer in [1, {MAX_VERSION_NUMBER:,}], "
                                   f"got {show(number)}", metric, "version")
                ok = False
                continue
            if number <= previous:
                self.check.problem(key_line(item, "version"), f"versions must be listed in increasing order without repeats; "
                                                              f"{number} follows {previous}", metric, "version")
                ok = False
                continue
            previous = int(number)
            self.check.unknown_keys(item, VERSION_KEYS, metric, int(number))
            out.append((int(number), item, iline))
        return out if ok else None

    def category_versions(self, kind, base_names, versions_raw, metric) -> list[tuple]:
        """Each version's category names: one tuple, shared by the versions that add none."""
        names = tuple(base_names or ())
        known = set(names) if any(vmap is not None and "add_categories" in vmap for _, vmap, _ in versions_raw) else ()
        self.versioned_names += len(names)
        out = []
        for number, vmap, _ in versions_raw:
            if vmap is not None and "add_categories" in vmap:
                if kind != "categories":
                    self.check.problem(key_line(vmap, "add_categories"), f"only a 'categories' metric can add categories; "
                                       f"this one has {kind!r}", metric, "add_categories", number)
                else:
                    added = self.names(vmap, "add_categories", metric, number, known,
                                       limit=MAX_CATEGORIES - len(names))
                    if added is not None:
                        if not added:
                            self.check.problem(key_line(vmap, "add_categories"), "is empty; omit it or list new names",
                                               metric, "add_categories", number)
                        elif self.versioned_names + len(names) + len(added) > MAX_VERSIONED_NAMES:
                            # Every version that adds names keeps a list of its own (workers, describe, lock digests).
                            self.check.problem(key_line(vmap, "add_categories"), f"the category lists of the versions that "
                                               f"add categories would hold more than {MAX_VERSIONED_NAMES:,} names in all; "
                                               "add more names per version, or define a new metric", metric,
                                               "add_categories", number)
                        else:
                            names = names + tuple(added)
                            known.update(added)
                            self.versioned_names += len(names)
            out.append(names)
        return out

