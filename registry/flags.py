"""How a user states a metric on a command line: the metric flags.

:data:`METRIC_SETTINGS` is the one list of flags that describe a metric (``--epsilon``,
``--dictionary-size``, ``--tracked-range``, ``--bucket-seconds`` ...), declared as
:class:`infra.settings.Setting` rows. They are a way to write a one-metric registry:
:func:`metrics_from_args` compiles them once, where the command line is read, into a
:class:`registry.Registry` of one metric (``single_metric_registry``), or loads ``--registry FILE``;
a metric flag given beside ``--registry`` is an error naming it, for every command. Each command
declares the metric flags it takes (``plan`` the parameters, ``estimate`` also the tracked set,
``worker`` all).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Mapping, Sequence

from cms_core import OCMSParams, TrackedValues
from cms_core.errors import InvalidParameterError, InvalidValueError, OCMSError
from infra.settings import (Labels, Setting, add_flags, choice, integer, names, number, numbers, resolve, span, switch,
                            text)

from .values_file import MAX_WHOLE_DICTIONARY

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

    values = dict(values)
    _check_exposure(values, labels)
    raw_file = _tracked_file(values, labels)
    whole = counts and not values.get("strings") and values.get("dictionary_size") is not None \
        and values["dictionary_size"] <= MAX_WHOLE_DICTIONARY
    if values.get("mode") == "l2" and values.get("tracked") is None:  # D: the tracked set's size unless given
        values["tracked"] = _tracked_count(values, labels, raw_file, whole, counts)
    params = build_params(values, labels)
    sets = _parameter_sets(values, labels, params)
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
        tracked = [_tracked_set(p, values, labels, raw_file, whole, counts) for p in sets]
        return single_metric_registry(sets, tracked, name=FLAGS_METRIC,
                                      description="the metric of the single-metric flags", path=FLAGS_PATH,
                                      watch=tuple(values.get("watch") or ()), longitudinal=longitudinal, **exposure)
    except InvalidValueError as exc:
        raise InvalidParameterError(labels["watch"], ",".join(values["watch"]), str(exc)) from None


def _tracked_file(values: Mapping[str, object], labels: Labels):
    """The values of ``--tracked-file`` as read (decoded per parameter set later), or None."""
    from .values_file import ValuesFileError, read_raw_values

    if values.get("tracked_file") is None:
        return None
    if values.get("tracked_range") is not None:
        raise InvalidParameterError(labels["tracked_file"], values["tracked_file"],
                                    f"exclusive with {labels['tracked_range']}")
    try:
        return read_raw_values(values["tracked_file"])
    except ValuesFileError as exc:
        raise InvalidParameterError(labels["tracked_file"], values["tracked_file"], exc.detail) from None


def _tracked_count(values: Mapping[str, object], labels: Labels, raw_file, whole: bool, counts: bool) -> int:
    """Mode l2's D when ``--tracked`` is not given: the size of the tracked set the other flags give."""
    if values.get("tracked_range") is not None:
        return values["tracked_range"][1] - values["tracked_range"][0]
    if raw_file is not None:
        return len(raw_file)
    if whole:
        return values["dictionary_size"]
    hint = ", or a tracked set to count (--tracked-range / --tracked-file)" if counts else ""
    raise OCMSError(f"{labels['mode']} l2 needs --tracked N (tracked_count D, the number of tracked "
                    f"values){hint}")


def _parameter_sets(values: Mapping[str, object], labels: Labels, params: OCMSParams) -> list[OCMSParams]:
    """Each ``--extra-epsilon``'s parameter set, oldest first, then the primary ``params``."""
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
    return sets


def _tracked_set(p: OCMSParams, values: Mapping[str, object], labels: Labels, raw_file, whole: bool,
                 counts: bool) -> TrackedValues | None:
    """The tracked values of parameter set ``p``: the range, the file, the whole dictionary, or none."""
    from .values_file import ValuesFileError, decode_values

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
