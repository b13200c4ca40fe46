"""Reading registry files safely: regular files only, a size bound that holds while reading, and YAML
composed from parser events into plain containers that remember their lines.

Why not ``YAML(typ="rt").load``: ruamel's round-trip loader builds a node per scalar (two marks
each), comments and line tables in pure Python: 10^6 categories took 42 s and 860 MB, 1,000 nested
brackets overflowed Python's stack, and an integer of 4,301 digits raised a bare ``ValueError``.
Here libyaml's parser (``ruamel.yaml[libyaml]``; ruamel's pure parser when it is missing) produces
events, and :func:`compose` builds :class:`YamlMap` / :class:`YamlSeq` iteratively with bounds on
nesting, values and integer digits; every refusal is a :class:`RegistryFileError` with its line.

YAML semantics kept from the round-trip loader: YAML 1.2 resolution (``NO``, ``off`` stay
strings; ruamel's own int/float/bool/null/timestamp conversions), anchors and aliases (shared, not
copied), merge keys (``<<: *base``; explicit keys win, then earlier merges), duplicate keys and an
anchor defined twice are errors. A merged key reports the line where it is written (in the anchored
mapping). Tags other than the core ones (``!!str`` ...) are refused: a registry holds no binary data
or objects.
"""

from __future__ import annotations

import io
import os
import re
import stat
from array import array

from ruamel.yaml import YAML
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (AliasEvent, DocumentEndEvent, DocumentStartEvent, MappingEndEvent, MappingStartEvent,
                                ScalarEvent, SequenceEndEvent, SequenceStartEvent, StreamEndEvent, StreamStartEvent)
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.tag import Tag

from .errors import FileRefusedError, Problem, RegistryFileError

try:  # libyaml's parser, shipped by ruamel.yaml[libyaml] (ruamel.yaml.clibz): ~40x the pure one
    from ruamel.yaml.cyaml import CParser
except ImportError:  # pragma: no cover - the pure parser gives the same events, slower
    CParser = None

#: Lists and mappings inside each other; a registry needs 5 (metrics, a metric, versions, a version, a list).
MAX_NESTING = 32
#: Scalars, lists and mappings in one file: 2 x 10^6 (categories and a tracked list of a metric at their
#: maxima) plus room for everything else. Checked while parsing, so a file of 8 million tiny values
#: is refused after reading a quarter of it.
MAX_YAML_NODES = 2_100_000
#: No registry field takes an integer above 2^64 (20 digits); Python refuses to convert over 4,300.
MAX_INTEGER_DIGITS = 100

_CORE = "tag:yaml.org,2002:"
_STR, _INT, _MERGE_TAG = _CORE + "str", _CORE + "int", _CORE + "merge"
_CONVERTED = {_CORE + t for t in ("int", "float", "bool", "null", "timestamp")}
_COLLECTION_TAGS = {None, "!", _CORE + "map", _CORE + "seq", _CORE + "omap"}


# ----------------------------------------------------------------------------- files

def open_regular_file(path: str | os.PathLike, limit: int) -> io.BufferedReader:
    """``path`` opened for binary reading if it is a regular file; reading past ``limit`` bytes raises.

    Opened without blocking (a FIFO with no writer would wait forever) and checked with fstat on
    the open descriptor (no stat-then-open race); the byte count is checked on every read, so a
    file that grows while it is read is refused too. Raises FileRefusedError (not a regular file,
    too large: also from reads) or OSError.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        kind = _file_kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise FileRefusedError(f"is {kind}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(_BoundedFile(fd, limit), buffer_size=1 << 16)


def read_regular_file(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes (see :func:`open_regular_file`)."""
    with open_regular_file(path, limit) as handle:
        return handle.read()


class _BoundedFile(io.RawIOBase):
    """A file descriptor that refuses to deliver more than ``limit`` bytes in total."""

    def __init__(self, fd: int, limit: int):
        super().__init__()
        self.fd, self.limit, self.delivered = fd, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        room = self.limit + 1 - self.delivered  # one byte more than allowed proves the file is too large
        data = os.read(self.fd, max(1, min(len(buffer), room)))
        self.delivered += len(data)
        if self.delivered > self.limit:
            raise FileRefusedError(f"is larger than {self.limit:,} bytes")
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


def _file_kind(mode: int) -> str | None:
    """None for a regular file, else what it is (for the message)."""
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


# ----------------------------------------------------------------------------- containers

class YamlMap(dict):
    """A YAML mapping: ``line`` (1-based, where it starts) and ``key_lines`` (key -> line of the key)."""

    __slots__ = ("line", "key_lines")

    def __init__(self, line: int):
        super().__init__()
        self.line = line
        self.key_lines: dict = {}


class YamlSeq(list):
    """A YAML sequence: ``line`` (1-based, where it starts) and ``item_lines`` (line of each item)."""

    __slots__ = ("line", "item_lines")

    def __init__(self, line: int):
        super().__init__()
        self.line = line
        self.item_lines = array("l")


class _Scalars(RoundTripConstructor):
    """ruamel's round-trip conversions of resolved scalars (ints keep their 0x/0o/_ spelling), YAML 1.2."""

    def __init__(self):
        super().__init__()
        self._version_resolver = VersionedResolver(version=(1, 2))

    @property
    def resolver(self):
        return self._version_resolver

    def convert(self, tag: str, value: str, style):
        return self.yaml_constructors[tag](self, ScalarNode(Tag(suffix=tag), value, None, None, style=style or None))


_MERGE = object()  # the key '<<'
_PLAIN_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")


class _Composer:
    def __init__(self, path: str):
        self.path = path
        self.implicit, self.implicit_anywhere = _implicit_resolvers()
        self.scalars = _Scalars()
        self.anchors: dict[str, tuple[object, int]] = {}
        self.open_anchors: set[str] = set()
        self.nodes = 0
        self.merged = 0

    def refuse(self, line: int | None, message: str):
        return RegistryFileError(Problem(self.path, line, message))

    def scalar(self, event, line: int):
        tag, value = event.tag, event.value
        if tag is None:
            if not event.implicit[0]:
                return value  # quoted or block scalar: a string
            for tag, pattern in self.implicit.get(value[:1], self.implicit_anywhere):
                if pattern.match(value):
                    break
            else:
                return value  # most plain scalars (names): no resolver starts with their first character
        elif tag == "!":
            return value
        if tag == _STR:
            return value
        if tag == _MERGE_TAG:
            return _MERGE
        if tag in _CONVERTED:
            if tag == _INT and len(value) > MAX_INTEGER_DIGITS:
                raise self.refuse(line, f"an integer of {len(value):,} digits; no registry field takes more than "
                                        "20 (2^64 is the largest dictionary)")
            if tag == _INT and _PLAIN_DECIMAL.fullmatch(value):
                return int(value)  # what ruamel returns for these, ~20x faster than its constructor
            try:
                return self.scalars.convert(tag, value, event.style)
            except (ValueError, YAMLError) as exc:
                raise self.refuse(line, f"not valid YAML: {_short_tag(tag)} {value[:40]!r}: {exc}") from None
        raise self.refuse(line, f"the tag {_short_tag(tag)} is not allowed: a registry holds plain strings, numbers, "
                                "true/false, lists and mappings")

    def compose(self, events):
        """The single document of ``events`` (None for an empty stream)."""
        stack: list[list] = []  # [container, anchor, pending key, key line, merges]
        root, documents = None, 0
        for event in events:
            kind = type(event)
            line = event.start_mark.line + 1
            if kind is ScalarEvent or kind is AliasEvent or kind is MappingStartEvent or kind is SequenceStartEvent:
                self.nodes += 1
                if self.nodes > MAX_YAML_NODES:
                    raise self.refuse(line, f"more than {MAX_YAML_NODES:,} values, lists and mappings; a registry "
                                            "holds at most 1,000,000 categories and 1,000,000 tracked values a metric")
            if kind is ScalarEvent:
                value = self.scalar(event, line)
                if event.anchor is not None:
                    self.define(event.anchor, value, line)
            elif kind is AliasEvent:
                value = self.alias(event.anchor, line)
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                tag = event.tag
                if tag not in _COLLECTION_TAGS:
                    raise self.refuse(line, f"the tag {_short_tag(tag)} is not allowed: a registry holds plain "
                                            "strings, numbers, true/false, lists and mappings")
                if len(stack) >= MAX_NESTING:
                    raise self.refuse(line, f"nested more than {MAX_NESTING} levels deep (lists and mappings inside "
                                            "each other); a registry needs at most 6")
                container = YamlMap(line) if kind is MappingStartEvent else YamlSeq(line)
                if event.anchor is not None:
                    self.open_anchors.add(event.anchor)
                stack.append([container, event.anchor, None, None, []])
                continue
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                container, anchor, _, _, merges = stack.pop()
                if merges:
                    self.merge(container, merges)
                value, line = container, container.line
                if anchor is not None:
                    self.open_anchors.discard(anchor)
                    self.define(anchor, container, line)
            elif kind is DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise self.refuse(line, "a second YAML document starts here; a registry is one document")
                if event.version not in (None, (1, 2)):
                    version = ".".join(map(str, event.version))
                    raise self.refuse(line, f"%YAML {version}: a registry is read as YAML 1.2 (NO and off stay "
                                            "strings); remove the directive")
                continue
            elif kind is StreamStartEvent or kind is DocumentEndEvent or kind is StreamEndEvent:
                continue
            else:  # pragma: no cover - every event kind is listed above
                raise self.refuse(line, f"unexpected YAML event {kind.__name__}")
            if not stack:
                root = value
                continue
            frame = stack[-1]
            container = frame[0]
            if type(container) is YamlSeq:
                container.append("<<" if value is _MERGE else value)
                container.item_lines.append(line)
            elif frame[3] is None:  # a key
                if isinstance(value, (YamlMap, YamlSeq)):
                    raise self.refuse(line, "a mapping key must be a plain value, not a list or a mapping")
                frame[2], frame[3] = value, line
            else:
                key, key_line = frame[2], frame[3]
                frame[2] = frame[3] = None
                if key is _MERGE:
                    if frame[4]:
                        raise self.refuse(key_line, f"not valid YAML: duplicate merge key '<<' (first at line "
                                                    f"{frame[4][0][1]}); merge several with <<: [*a, *b]")
                    frame[4].append((value, key_line))
                elif key in container:
                    raise self.refuse(key_line, f"not valid YAML: duplicate key {key!r} (first at line "
                                                f"{container.key_lines[key]})")
                else:
                    container[key] = "<<" if value is _MERGE else value
                    container.key_lines[key] = key_line
        return root

    def define(self, anchor: str, value, line: int) -> None:
        if anchor in self.anchors:
            first = self.anchors[anchor][1]
            raise self.refuse(line, f"anchor &{anchor} is defined twice (lines {first} and {line}): give each anchor "
                                    "its own name")
        self.anchors[anchor] = (value, line)

    def alias(self, anchor: str, line: int):
        if anchor in self.open_anchors:
            raise self.refuse(line, f"alias *{anchor} is inside the node &{anchor} it names (a recursive structure)")
        if anchor not in self.anchors:
            raise self.refuse(line, f"not valid YAML: alias *{anchor} names no anchor defined before it")
        return self.anchors[anchor][0]

    def merge(self, mapping: YamlMap, merges: list) -> None:
        """``<<: *base`` or ``<<: [*a, *b]``: keys not written in ``mapping`` itself, earlier merges first."""
        for value, line in merges:
            sources = value if isinstance(value, YamlSeq) else [value]
            for source in sources:
                if not isinstance(source, YamlMap):
                    raise self.refuse(line, "a merge key (<<) takes a mapping or a list of mappings")
                self.merged += len(source)
                if self.merged > MAX_YAML_NODES:
                    raise self.refuse(line, f"merge keys (<<) copy more than {MAX_YAML_NODES:,} keys")
                for key, item in source.items():
                    if key not in mapping:
                        mapping[key] = item
                        mapping.key_lines[key] = source.key_lines.get(key, source.line)


def _implicit_resolvers() -> tuple[dict[str, list], list]:
    """YAML 1.2 plain-scalar resolution as ruamel's VersionedResolver does it: first character -> [(tag, regex)],
    and the resolvers tried for any first character (none in YAML 1.2)."""
    table = VersionedResolver(version=(1, 2)).versioned_resolver
    anywhere = [(str(tag), regexp) for tag, regexp in table.get(None, [])]
    return {first: [(str(tag), regexp) for tag, regexp in resolvers] + anywhere
            for first, resolvers in table.items() if first is not None}, anywhere


def _short_tag(tag) -> str:
    tag = str(tag)
    return "!!" + tag[len(_CORE):] if tag.startswith(_CORE) else tag


def _events(text: str):
    if CParser is not None:
        parser = CParser(text)
        try:
            while True:
                event = parser.get_event()
                yield event
                if type(event) is StreamEndEvent:
                    return
        finally:
            parser.dispose()
    else:  # pragma: no cover
        yield from YAML(typ="safe", pure=True).parse(text)


def compose(text: str, path: str):
    """The document of registry ``text`` as YamlMap / YamlSeq / scalars; RegistryFileError with the line."""
    try:
        return _Composer(path).compose(_events(text))
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = " ".join(x for x in (exc.context, exc.problem) if x) or str(exc)
        raise RegistryFileError(Problem(path, line, f"not valid YAML: {reason}")) from None
    except YAMLError as exc:
        position = getattr(exc, "position", None)  # a reader error: a character YAML does not allow
        line = text.count("\n", 0, position) + 1 if isinstance(position, int) else None
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise RegistryFileError(Problem(path, line, f"not valid YAML: {reason}")) from None


__all__ = ["MAX_INTEGER_DIGITS", "MAX_NESTING", "MAX_YAML_NODES", "YamlMap", "YamlSeq", "compose",
           "open_regular_file", "read_regular_file"]
