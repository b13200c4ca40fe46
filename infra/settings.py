"""Settings declared once: a setting's flag, environment variable, default, help and validation.

A :class:`Setting` holds a setting's name, flag (``--web-port``), environment variable
(``OCMS_WEB_PORT``), default, help text and validation. From a tuple of them, :func:`add_flags`
makes argparse options, :func:`resolve` reads the values (an explicit flag wins over the ``OCMS_*``
variable, which wins over the default; a bad value raises
:class:`cms_core.errors.InvalidParameterError` naming what the user wrote) and
:func:`markdown_table` writes the documentation table (the worker's in docs/reference.md, the collector's in
docs/collector.md; tests keep them equal). The worker (agents/settings.py), the collector
(collector/settings.py) and the metric flags (registry/flags.py) declare their rows with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from cms_core.errors import InvalidParameterError

ENV_PREFIX = "OCMS_"
LOG_LEVELS = ("debug", "info", "warning", "error")

Parse = Callable[[object, str], object]


# ---------------------------------------------------------------- validation (raw value, label) -> value

def integer(minimum: int, maximum: int | None = None) -> Parse:
    """Integers, also written 100_000 or 2^64."""

    def parse(raw, label: str) -> int:
        if isinstance(raw, bool):
            raise InvalidParameterError(label, raw, "must be an integer")
        if isinstance(raw, int):
            value = raw
        else:
            text = str(raw).strip().replace("_", "")
            base, caret, exponent = text.partition("^")
            try:
                value = int(base) ** int(exponent) if caret and len(text) <= 40 else int(text)
            except ValueError:
                raise InvalidParameterError(label, raw, "must be an integer") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            raise InvalidParameterError(label, raw, f"must be {bound}")
        return value

    return parse


def number(minimum: float = 0.0, inclusive: bool = False, maximum: float | None = None) -> Parse:
    def parse(raw, label: str) -> float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise InvalidParameterError(label, raw, "must be a number") from None
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            raise InvalidParameterError(label, raw, f"must be a finite number {'>=' if inclusive else '>'} {minimum:g}")
        if maximum is not None and value > maximum:
            raise InvalidParameterError(label, raw, f"must be <= {maximum:g}")
        return value

    return parse


def choice(*options: str) -> Parse:
    def parse(raw, label: str) -> str:
        value = str(raw).strip().lower()
        if value not in options:
            raise InvalidParameterError(label, raw, f"expected one of {', '.join(options)}")
        return value

    return parse


def text(raw, label: str) -> str:
    value = str(raw).strip()
    if not value:
        raise InvalidParameterError(label, raw, "must not be empty")
    return value


def existing_file(raw, label: str) -> str:
    value = text(raw, label)
    if not Path(value).is_file():
        raise InvalidParameterError(label, value, "no such file")
    return value


def topic(raw, label: str) -> str:
    value = str(raw)
    if not value or len(value) > 249 or any(not (c.isalnum() or c in "._-") for c in value):
        raise InvalidParameterError(label, raw, "Kafka topic names use [a-zA-Z0-9._-], 1..249 characters")
    return value


def switch(raw, label: str) -> bool:
    if isinstance(raw, bool):
        return raw
    value = str(raw).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise InvalidParameterError(label, raw, "expected true or false")


def numbers(raw, label: str) -> tuple[float, ...]:
    """Repeated flags (a list) or one comma-separated variable."""
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    return tuple(number()(item, label) for item in items if str(item).strip())


def names(raw, label: str) -> tuple[str, ...]:
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    return tuple(str(item).strip() for item in items if str(item).strip())


def span(raw, label: str) -> tuple[int, int]:
    if isinstance(raw, str):
        start, sep, stop = raw.partition(":")
        if not sep:
            raise InvalidParameterError(label, raw, "expected START:STOP")
        raw = (start, stop)
    start, stop = (integer(0)(part, label) for part in raw)
    if stop <= start:
        raise InvalidParameterError(label, f"{start}:{stop}", "STOP must be larger than START")
    return start, stop


# ---------------------------------------------------------------- declarations

@dataclass(frozen=True)
class Setting:
    """One setting: its flag is --NAME (dashes), its variable OCMS_NAME, its default ``default``."""

    name: str
    help: str
    parse: Parse
    default: object = None
    #: How the default reads in help and the docs table when it is not simply ``default``.
    default_text: str | None = None
    short: str | None = None
    metavar: str | None = None
    #: "value", "switch" (a flag without a value) or "list" (a repeatable flag; the variable is comma-separated).
    kind: str = "value"
    choices: tuple[str, ...] | None = None
    #: The flag when it is not --NAME with dashes.
    option: str | None = None
    #: The environment variable when it is not OCMS_NAME (the collector's own are OCMS_COLLECTOR_NAME).
    variable: str | None = None

    @property
    def flag(self) -> str:
        return self.option or "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return self.variable or ENV_PREFIX + self.name.upper()

    @property
    def default_description(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if self.default is None:
            return "—"
        if isinstance(self.default, bool):
            return "off" if not self.default else "on"
        if isinstance(self.default, tuple):
            return ", ".join(map(str, self.default)) or "—"
        return f"{self.default}"


class Labels(dict):
    """Setting name -> what the user would fix (the flag, the variable, or both for a default);
    ``given`` holds the names the user set explicitly."""

    def __init__(self):
        super().__init__()
        self.given: set[str] = set()

    def label(self, setting: Setting) -> str:
        return self.get(setting.name) or f"{setting.flag} (or {setting.env})"


def resolve(settings: Iterable[Setting], flags: Mapping[str, object], environ: Mapping[str, str] | None = None,
            defaults: Mapping[str, object] | None = None) -> tuple[dict[str, object], Labels]:
    """(values, labels): flag over ``OCMS_*`` variable over default, each parsed and validated.

    ``flags`` maps setting names to what the user gave (None = not given); ``environ`` None means
    the command reads no variables. ``labels`` says, for later errors, what set each value.
    """
    defaults = defaults or {}
    values: dict[str, object] = {}
    labels = Labels()
    for setting in settings:
        name = setting.name
        raw = flags.get(name)
        if raw is not None and raw != [] and raw is not False:
            values[name], labels[name] = setting.parse(raw, setting.flag), setting.flag
            labels.given.add(name)
        elif environ is not None and environ.get(setting.env, "").strip():
            values[name], labels[name] = setting.parse(environ[setting.env], setting.env), setting.env
            labels.given.add(name)
        else:
            values[name] = defaults.get(name, setting.default)
            labels[name] = setting.flag if environ is None else f"{setting.flag} (or {setting.env})"
    return values, labels


def add_flags(parser, settings: Iterable[Setting], *, env: bool = False,
              defaults: Mapping[str, object] | None = None) -> None:
    """argparse options for ``settings``. Values stay raw (None = not given): :func:`resolve` parses
    them, so every message names the flag or variable the same way. ``defaults`` overrides a declared
    default for this command (in the help; :func:`resolve` takes them too); ``env`` mentions the
    variables in the help."""
    defaults = defaults or {}
    for setting in settings:
        name = setting.name
        if name in defaults:
            value = defaults[name]
            shown = "required" if value is None else f"default {value:g}" if isinstance(value, float) else f"default {value}"
        else:
            described = setting.default_description
            shown = described if described.startswith("required") or described == "—" else f"default {described}"
        bracket = ", ".join(x for x in ((setting.env if env else ""), "" if shown == "—" else shown) if x)
        kwargs: dict = {"dest": name, "default": None,
                        "help": setting.help.replace("%", "%%") + (f" [{bracket}]" if bracket else "")}
        if setting.kind == "switch":
            kwargs["action"] = "store_true"
        else:
            kwargs["metavar"] = setting.metavar or name.upper()
            if setting.kind == "list":
                kwargs["action"] = "append"
            if setting.choices:  # shown as argparse shows choices; checked by resolve: one line naming the flag
                kwargs["metavar"] = "{" + ",".join(setting.choices) + "}"
        options = [setting.flag] + ([setting.short] if setting.short else [])
        parser.add_argument(*options, **kwargs)


def markdown_table(settings: Iterable[Setting]) -> str:
    """The documentation table of ``settings``: flag, variable, default, meaning."""
    rows = ["| flag | variable | default | meaning |", "| --- | --- | --- | --- |"]
    for s in settings:
        flag = f"`{s.flag}`" + (f", `{s.short}`" if s.short else "")
        if s.choices:
            flag += " " + "\\|".join(s.choices)
        elif s.kind != "switch":
            flag += " " + (s.metavar or s.name.upper()).replace("|", "\\|")
        rows.append(f"| {flag} | `{s.env}` | {s.default_description} | {s.help.replace('|', '/')} |")
    return "\n".join(rows)


def update_markdown_table(path: str | Path, marker: str, table: str) -> bool:
    """Rewrite the table between ``<!-- MARKER: generated ... -->`` and ``<!-- /MARKER -->`` in ``path``;
    True when it changed."""
    pattern = re.compile(rf"(<!-- {re.escape(marker)}: generated.*?-->\n)(.*?)(\n<!-- /{re.escape(marker)} -->)", re.S)
    path = Path(path)
    old = path.read_text(encoding="utf-8")
    if not pattern.search(old):
        raise SystemExit(f"{path}: no {marker} markers")
    new = pattern.sub(lambda m: m.group(1) + table + m.group(3), old, count=1)
    if new != old:
        path.write_text(new, encoding="utf-8")
    return new != old


def check_fields(cls, names: Iterable[str]) -> None:
    """``cls``, a frozen settings dataclass, has a field for each setting of ``names`` and no other (but
    ``labels``): a setting declared without a field, or a field without its declaration, fails at import."""
    have, declared = {f.name for f in dataclasses.fields(cls)} - {"labels"}, set(names)
    if have != declared:
        raise AssertionError(f"{cls.__name__} fields and its declared settings differ: {sorted(have ^ declared)}")


def table_main(argv: Sequence[str], option: str, path: str, marker: str, table: str) -> None:
    """``python -m MODULE``: print a settings table; ``python -m MODULE OPTION [PATH]``: rewrite it in PATH."""
    if argv[:1] == [option]:
        print("updated" if update_markdown_table(argv[1] if len(argv) > 1 else path, marker, table) else "up to date")
    else:
        print(table)


def generated_table(path: str | Path, marker: str) -> str | None:
    """The table between ``marker``'s markers in ``path`` (what a test compares with :func:`markdown_table`)."""
    pattern = re.compile(rf"<!-- {re.escape(marker)}: generated.*?-->\n(.*?)\n<!-- /{re.escape(marker)} -->", re.S)
    match = pattern.search(Path(path).read_text(encoding="utf-8"))
    return match.group(1) if match else None


# ---------------------------------------------------------------- argparse types (flags outside the Setting rows)
def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not finite")
    return value


def int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            if "^" in text:  # allow 2^64 style
                base, _, exp = text.partition("^")
                try:
                    value = int(base) ** int(exp)
                except ValueError:
                    raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
            else:
                raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        return value

    return parse
