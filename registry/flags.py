"""How a user states a metric on a command line, and settings declared once.

Two things live here, below every command:

* **The setting machinery.** A :class:`Setting` holds a setting's name, flag (``--web-port``),
  environment variable (``OCMS_WEB_PORT``), default, help text and validation. From a tuple of
  them, :func:`add_flags` makes argparse options, :func:`resolve` reads the values (an explicit
  flag wins over the ``OCMS_*`` variable, which wins over the default; a bad value raises
  :class:`cms_core.errors.InvalidParameterError` naming what the user wrote) and
  :func:`markdown_table` writes the documentation table (the worker's in docs/reference.md, the
  collector's in docs/collector.md; tests keep them equal).

* **The metric flags.** :data:`METRIC_SETTINGS` is the one list of flags that describe a
  metric (``--epsilon``, ``--dictionary-size``, ``--tracked-range``, ``--bucket-seconds`` ...).
  They are a way to write a one-metric registry: :func:`metrics_from_args` compiles them once,
  where the command line is read, into a :class:`registry.Registry` of one metric
  (``single_metric_registry``), or loads ``--registry FILE``; a metric flag given beside
  ``--registry`` is an error naming it, for every command. Each command declares the metric
  flags it takes (``plan`` the parameters, ``estimate`` also the tracked set, ``worker`` all).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from cms_core import OCMSParams, TrackedValues
from cms_core.errors import InvalidParameterError, InvalidValueError, OCMSError

from .values_file import MAX_WHOLE_DICTIONARY

ENV_PREFIX = "OCMS_"
LOG_LEVELS = ("debug", "info", "warning", "error")
#: The topic devices' reports arrive on, unless a command is told otherwise.
DEFAULT_SOURCE_TOPIC = "ocms-reports"

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


# ---------------------------------------------------------------- the metric flags: ONE list

#: What the single-metric flags' metric is called (Prometheus label ``metric``, /metrics/NAME/...).
FLAGS_METRIC = "default"
#: The ``Registry.path`` of a registry compiled from the flags.
FLAGS_PATH = "<flags>"

PARAMETER_SETTINGS: tuple[Setting, ...] = (
    Setting("epsilon", "per-report LDP budget ε in (0, 100]; devices and workers use the same", number(), short="-e",
            default_text="required"),
    Setting("mode", "what the hash range m minimises", choice("mse", "l2"), default="mse", choices=("mse", "l2")),
    Setting("f_star", "prior upper bound on any frequency (mode mse)", number(0.0, inclusive=True), default=1.0,
            metavar="F"),
    Setting("dictionary_size", "integer values are in [0, d) (e.g. 100000 or 2^64)", integer(1), short="-d",
            metavar="D", default_text="required for integers"),
    Setting("strings", "values are strings (128-bit fingerprints, GF(2^128)); exclusive with --dictionary-size",
            switch, default=False, kind="switch"),
    Setting("tracked", "number of tracked values D (needed by mode l2)", integer(1), metavar="D"),
    Setting("hash_range", "explicit OCMS+RR m instead of the optimum (exclusive with --mode and --f-star)", integer(2),
            metavar="M", default_text="the optimum"),
    Setting("mechanism", "ocms (OCMS+RR), direct (randomized response over d, m = d) or auto (the lower exact "
            "error)", choice("ocms", "direct", "auto"), default="ocms", choices=("ocms", "direct", "auto")),
    Setting("lifetime_epsilon", "longitudinal mode: the LDP budget of all reports of one memoized value together, "
            "above --epsilon (docs/privacy.md)", number(), metavar="EPSILON", default_text="off (one-shot reports)"),
)
#: The tracked set of a command that counts (estimate, worker): without them the whole dictionary.
TRACKED_SETTINGS: tuple[Setting, ...] = (
    Setting("tracked_range", "tracked values START:STOP (integers)", span, metavar="START:STOP",
            default_text=f"the whole dictionary (d <= {MAX_WHOLE_DICTIONARY:,})"),
    Setting("tracked_file", "tracked values: a values file (*.jsonl one JSON string per line, exact; "
            "docs/tracked-values.md); exclusive with --tracked-range", text, metavar="PATH"),
)
#: What a worker keeps and exports of the metric.
EXPOSURE_SETTINGS: tuple[Setting, ...] = (
    Setting("extra_epsilon", "also accept reports made with this ε (a rotated parameter set; repeatable); "
            "kept separate by fingerprint", numbers, default=(), kind="list", metavar="EPSILON"),
    Setting("bucket_seconds", "event-time bucket width", integer(1, 86_400), default=60, metavar="SECONDS"),
    Setting("retention_seconds", "bucket retention; older reports are rejected (expired)", integer(1),
            default=86_400, default_text="86400 (1 day)", metavar="SECONDS"),
    Setting("rollup_seconds", "optional coarser level for long ranges (a multiple of the bucket width)",
            integer(1, 366 * 86_400), default_text="off", metavar="SECONDS"),
    Setting("rollup_retention_seconds", "retention of the rollup level", integer(1), default=30 * 86_400,
            default_text="2592000 (30 days)", metavar="SECONDS"),
    Setting("watch", "values always exported to /metrics (comma-separated)", names, default=(), metavar="VALUES"),
    Setting("top_k", "also export the current top K values to /metrics", integer(0, 10_000), default=20,
            metavar="K"),
)
#: Every flag that describes the one metric of the single-metric flags: a registry states them instead.
METRIC_SETTINGS: tuple[Setting, ...] = PARAMETER_SETTINGS + TRACKED_SETTINGS + EXPOSURE_SETTINGS
BY_NAME: dict[str, Setting] = {s.name: s for s in METRIC_SETTINGS}
#: ``--registry FILE``: the metrics of a registry instead of the flags.
REGISTRY = Setting("registry", "the metrics of this registry (docs/registry.md) instead of the single-metric flags",
                   text, metavar="FILE")
#: OCMSParams.build's keyword for each parameter setting whose name differs.
PARAMS_KEYWORD = {"tracked": "tracked_count"}


class MetricFlagError(OCMSError, ValueError):
    """Metric flags that cannot go together (a single-metric flag beside --registry, --metric without it)."""


def add_metric_flags(parser, settings: Sequence[Setting], *, registry_help: str, metric_help: str | None = None,
                     metric_version: bool = False, env: bool = False,
                     defaults: Mapping[str, object] | None = None) -> None:
    """A command's metric flags: ``--registry FILE`` (and ``--metric NAME`` [``--metric-version N``] when
    ``metric_help`` is given) or ``settings``, a part of :data:`METRIC_SETTINGS`."""
    registry = Setting(REGISTRY.name, registry_help, REGISTRY.parse, metavar="FILE")
    settings = [dataclasses.replace(s, default_text=s.default_description + " without --registry")
                if s.default_description.startswith("required") else s for s in settings]
    add_flags(parser, [*settings, registry], env=env, defaults=defaults)
    if metric_help is not None:
        parser.add_argument("--metric", help=metric_help)
    if metric_version:
        parser.add_argument("--metric-version", type=int, metavar="N",
                            help="with --registry: this version of the metric (default: the newest live one)")


def metrics_from_args(args, environ: Mapping[str, str] | None = None, *,
                      defaults: Mapping[str, object] | None = None):
    """The metrics a command line states, as a :class:`registry.Registry`.

    ``--registry FILE`` (or ``OCMS_REGISTRY`` where ``environ`` is read): that file, loaded once;
    a metric flag given beside it is an error naming every such flag. Otherwise the command's metric
    flags (those of :data:`METRIC_SETTINGS` its parser declares) compiled once into a one-metric
    registry named :data:`FLAGS_METRIC`; ``defaults`` are the command's own defaults (``ocms
    simulate``: epsilon 2 and the dataset's dictionary). ``--metric`` without a registry is an error.
    """
    flags = vars(args)
    declared = [s for s in METRIC_SETTINGS if s.name in flags]
    found, _ = resolve([REGISTRY], flags, environ)
    path = found["registry"]
    if path is not None:
        _, labels = resolve(declared, flags, environ)
        given = [labels[s.name] for s in declared if s.name in labels.given]
        if given:
            shown = ", ".join(given)
            raise MetricFlagError(f"{shown}: single-metric flag{'s' if len(given) > 1 else ''}; with --registry {path} "
                                  f"every metric states {'these' if len(given) > 1 else 'it'} in the registry file "
                                  f"(docs/registry.md): drop {shown}")
        from .loader import load_registry

        return load_registry(path)
    alone = [flag for flag, name in (("--metric", "metric"), ("--metric-version", "metric_version"))
             if flags.get(name) is not None]
    if alone:
        raise MetricFlagError(f"{'/'.join(alone)} need{'s' if len(alone) == 1 else ''} --registry FILE")
    values, labels = resolve(declared, flags, environ, defaults)
    return compile_flags(values, labels, counts="tracked_range" in flags)


def metrics_from_flags(**flags):
    """The one-metric registry of metric flags given as keywords, as on ``ocms worker``'s command line
    (``metrics_from_flags(epsilon=2, dictionary_size=1000, tracked_range="0:50", watch="3,7")``): for
    tests, benchmarks and tools that state a metric the way a user does."""
    unknown = set(flags) - set(BY_NAME)
    if unknown:
        raise TypeError(f"not metric flags: {sorted(unknown)}")
    return metrics_from_args(argparse.Namespace(registry=None, **{name: flags.get(name) for name in BY_NAME}))


def version_from_args(args, registry):
    """The one metric version a command acts on: ``--metric NAME`` [``--metric-version N``] of a registry
    file (newest live by default), or the flags' one metric."""
    spec = registry.metrics[0] if registry.path == FLAGS_PATH else None
    if spec is None:
        name = getattr(args, "metric", None)
        if name is None:
            raise MetricFlagError(f"--registry {registry.path} needs --metric NAME (which metric; metrics: "
                                  f"{', '.join(m.name for m in registry.metrics)})")
        spec = registry.metric(name)
    number = getattr(args, "metric_version", None)
    return spec.version(number) if number is not None else spec.latest


# ---------------------------------------------------------------- compiling the flags

def build_params(values: Mapping[str, object], labels: Mapping[str, str]) -> OCMSParams:
    """The parameter set from resolved parameter settings; errors name the flag or variable."""
    if values.get("epsilon") is None:
        raise InvalidParameterError(labels.get("epsilon", "--epsilon"), None, "is required")
    strings = bool(values.get("strings"))
    if strings and values.get("dictionary_size") is not None:
        raise InvalidParameterError(labels["strings"], True, f"exclusive with {labels['dictionary_size']} "
                                    "(strings use 128-bit fingerprints)")
    if not strings and values.get("dictionary_size") is None:
        raise InvalidParameterError(labels.get("dictionary_size", "--dictionary-size"), None,
                                    "is required for integer values (or give --strings)")
    if values.get("hash_range") is not None:
        fixed = labels["hash_range"]
        for name in ("f_star", "mode"):  # they only choose the optimal m: silently dropping them would mislead
            if name in labels.given:
                raise InvalidParameterError(labels[name], values[name], f"has no effect with {fixed} "
                                            "(it only chooses the optimal m); give one of them")
        if values.get("mechanism") not in (None, "ocms"):
            raise InvalidParameterError(labels["mechanism"], values["mechanism"],
                                        f"contradicts {fixed}, which fixes OCMS+RR's m; give one of them")
    keywords = {PARAMS_KEYWORD.get(n, n): values.get(n) for n in ("mode", "f_star", "tracked", "hash_range", "mechanism")}
    keywords = {k: v for k, v in keywords.items() if v is not None}
    try:
        return OCMSParams.build(values["epsilon"], None if strings else values["dictionary_size"],
                                value_domain="string" if strings else "integer", **keywords)
    except InvalidParameterError as exc:
        setting = {PARAMS_KEYWORD.get(s.name, s.name): s for s in PARAMETER_SETTINGS}.get(exc.name)
        if setting is None:
            raise
        raise InvalidParameterError(labels.get(setting.name, setting.flag), exc.value, exc.reason) from None


def compile_flags(values: Mapping[str, object], labels: Labels, *, counts: bool):
    """The one-metric registry the resolved metric flags describe.

    Versions: each ``--extra-epsilon`` (a rotated, older parameter set) then the primary
    ``--epsilon``, which is the newest live version: what devices send and what name-less answers
    read. ``counts``: the command counts reports (it takes the tracked-set flags), so the metric
    needs its tracked set, by default the whole integer dictionary; otherwise (plan, simulate) a
    metric without tracked flags states no tracked values.
    """
    from .model import single_metric_registry
    from .values_file import ValuesFileError, decode_values, read_raw_values

    values = dict(values)
    _check_exposure(values, labels)
    raw_file = None
    if values.get("tracked_file") is not None:
        if values.get("tracked_range") is not None:
            raise InvalidParameterError(labels["tracked_file"], values["tracked_file"],
                                        f"exclusive with {labels['tracked_range']}")
        try:
            raw_file = read_raw_values(values["tracked_file"])
        except ValuesFileError as exc:
            raise InvalidParameterError(labels["tracked_file"], values["tracked_file"], exc.detail) from None
    whole = counts and not values.get("strings") and values.get("dictionary_size") is not None \
        and values["dictionary_size"] <= MAX_WHOLE_DICTIONARY
    if values.get("mode") == "l2" and values.get("tracked") is None:  # D: the tracked set's size unless given
        if values.get("tracked_range") is not None:
            values["tracked"] = values["tracked_range"][1] - values["tracked_range"][0]
        elif raw_file is not None:
            values["tracked"] = len(raw_file)
        elif whole:
            values["tracked"] = values["dictionary_size"]
        else:
            hint = ", or a tracked set to count (--tracked-range / --tracked-file)" if counts else ""
            raise OCMSError(f"{labels['mode']} l2 needs --tracked N (tracked_count D, the number of tracked "
                            f"values){hint}")
    params = build_params(values, labels)
    sets = [params]
    for eps in values.get("extra_epsilon") or ():
        try:
            extra = OCMSParams.build(eps, params.dictionary_size if params.value_domain == "integer" else None,
                                     mode=params.mode if params.mode != "fixed" else "mse",
                                     f_star=values["f_star"], tracked_count=params.tracked_count,
                                     value_domain=params.value_domain, mechanism=values["mechanism"])
        except InvalidParameterError as exc:
            raise InvalidParameterError(labels["extra_epsilon"], eps, exc.reason) from None
        if extra.fingerprint in {p.fingerprint for p in sets}:
            raise InvalidParameterError(labels["extra_epsilon"], eps, "repeats a parameter set already accepted")
        sets.insert(len(sets) - 1, extra)

    def tracked_set(p: OCMSParams) -> TrackedValues | None:
        if values.get("tracked_range") is not None:
            start, stop = values["tracked_range"]
            try:
                return TrackedValues.range(p, start, stop)
            except InvalidValueError as exc:
                raise InvalidParameterError(labels["tracked_range"], f"{start}:{stop}", str(exc)) from None
        if raw_file is not None:
            try:
                return TrackedValues.of(p, decode_values(p, raw_file))
            except ValuesFileError as exc:
                raise InvalidParameterError(labels["tracked_file"], values["tracked_file"], exc.detail) from None
        if whole:
            return TrackedValues.range(p, 0, p.dictionary_size)
        if counts:
            raise InvalidParameterError(labels["tracked_range"], None, "give a tracked range or file (the "
                                        f"dictionary is larger than {MAX_WHOLE_DICTIONARY:,}, too large to track whole)")
        return None

    exposure = {name: values[name] for name in ("bucket_seconds", "retention_seconds", "rollup_seconds", "top_k")
                if values.get(name) is not None}
    if values.get("rollup_seconds"):
        exposure["rollup_retention_seconds"] = values["rollup_retention_seconds"]
    longitudinal = None
    if values.get("lifetime_epsilon") is not None:  # issue 38: the primary version's longitudinal mode
        from cms_core.longitudinal import LongitudinalParams

        try:
            longitudinal = LongitudinalParams(values["lifetime_epsilon"], params)
        except InvalidParameterError as exc:
            raise InvalidParameterError(labels["lifetime_epsilon"], values["lifetime_epsilon"], exc.reason) from None
    try:
        return single_metric_registry(sets, [tracked_set(p) for p in sets], name=FLAGS_METRIC,
                                      description="the metric of the single-metric flags", path=FLAGS_PATH,
                                      watch=tuple(values.get("watch") or ()), longitudinal=longitudinal, **exposure)
    except InvalidValueError as exc:
        raise InvalidParameterError(labels["watch"], ",".join(values["watch"]), str(exc)) from None


def _check_exposure(values: Mapping[str, object], labels: Labels) -> None:
    """Rules between the time-level settings; each error names the setting to change, as the user wrote it."""
    bucket, retention = values.get("bucket_seconds"), values.get("retention_seconds")
    if bucket is None:
        return
    if retention < bucket:
        raise InvalidParameterError(labels["retention_seconds"], retention, f"must be >= the bucket width {bucket}")
    rollup = values.get("rollup_seconds")
    if rollup is not None:
        if rollup <= bucket or rollup % bucket:
            raise InvalidParameterError(labels["rollup_seconds"], rollup,
                                        f"must be a multiple of the bucket width {bucket} and larger")
        if values["rollup_retention_seconds"] < rollup:
            raise InvalidParameterError(labels["rollup_retention_seconds"], values["rollup_retention_seconds"],
                                        "must be >= the rollup width")
