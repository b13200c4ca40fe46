"""Worker settings: one frozen, validated object built once from env + CLI.

Precedence: explicit CLI values override ``OCMS_*`` environment variables,
which override defaults. Every bad value raises
:class:`cms_core.errors.InvalidParameterError` naming the setting (as the
environment variable or flag a user would fix).

The embedded broker needs short group sessions (it holds joins for about half
the session timeout); real Kafka keeps Kafka's usual timeouts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from cms_core import OCMSParams, TrackedValues
from cms_core.errors import InvalidParameterError, InvalidValueError

ENV_PREFIX = "OCMS_"
TABLE_NAME = "ocms-counts"
LOG_LEVELS = ("debug", "info", "warning", "error")
#: Tracking the whole dictionary is allowed up to this size (counts are O(D) per key).
MAX_DEFAULT_TRACKED = 100_000


def _int(name: str, raw, minimum: int, maximum: int | None = None) -> int:
    try:
        value = int(str(raw).replace("_", ""))
    except ValueError:
        raise InvalidParameterError(name, raw, "must be an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise InvalidParameterError(name, raw, f"must be {bound}")
    return value


def _float(name: str, raw, minimum_exclusive: float = 0.0) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InvalidParameterError(name, raw, "must be a number") from None
    if not math.isfinite(value) or value <= minimum_exclusive:
        raise InvalidParameterError(name, raw, f"must be a finite number > {minimum_exclusive:g}")
    return value


def _topic(name: str, raw) -> str:
    text = str(raw)
    if not text or len(text) > 249 or any(not (c.isalnum() or c in "._-") for c in text):
        raise InvalidParameterError(name, raw, "Kafka topic names use [a-zA-Z0-9._-], 1..249 characters")
    return text


@dataclass(frozen=True)
class WorkerSettings:
    params: OCMSParams
    bootstrap_servers: str
    embedded_broker: bool = False
    app_id: str = "ocms-worker"
    source_topic: str = "ocms-reports"
    dead_letter_topic: str = "ocms-reports-dlq"
    partitions: int = 4
    tracked_range: tuple[int, int] | None = None
    tracked_file: str | None = None
    bucket_seconds: int = 60
    retention_seconds: int = 86_400
    batch_max_reports: int = 200_000
    batch_max_seconds: float = 0.2
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    store: str = "memory://"
    watch: tuple[str, ...] = ()
    top_k: int = 20
    rollup_seconds: int | None = None
    rollup_retention_seconds: int = 30 * 86_400
    future_tolerance_seconds: int = 300
    extra_params: tuple[OCMSParams, ...] = ()
    log_level: str = "info"
    truth_file: str | None = None  # ground truth of a simulated fleet, for the console (ocms run)

    @property
    def params_sets(self) -> tuple[OCMSParams, ...]:
        """Every parameter set the worker accepts; the first is the primary (API default)."""
        return (self.params,) + self.extra_params

    @property
    def changelog_topic(self) -> str:
        return f"{self.app_id}-{TABLE_NAME}-changelog"

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
        """Settings from ``OCMS_*`` variables in ``env`` and explicit overrides (None = unset)."""
        env = env or {}
        raw: dict = {}
        for name in (
            "bootstrap_servers", "app_id", "source_topic", "dead_letter_topic", "partitions", "tracked_range",
            "tracked_file", "bucket_seconds", "retention_seconds", "batch_max_reports", "batch_max_seconds",
            "web_host", "web_port", "store", "watch", "top_k", "rollup_seconds", "rollup_retention_seconds",
            "future_tolerance_seconds", "log_level", "truth_file",
        ):
            value = overrides.get(name)
            if value is None:
                value = env.get(ENV_PREFIX + name.upper())
            if value is not None:
                raw[name] = value
        embedded = bool(overrides.get("embedded_broker"))
        out: dict = {"params": params, "embedded_broker": embedded}
        extra = tuple(overrides.get("extra_params") or ())
        fingerprints = [p.fingerprint for p in (params,) + extra]
        if len(set(fingerprints)) != len(fingerprints):
            raise InvalidParameterError("--extra-epsilon", [p.epsilon for p in extra], "repeats a parameter set already accepted")
        out["extra_params"] = extra
        if "bootstrap_servers" not in raw and not embedded:
            raise InvalidParameterError("OCMS_BOOTSTRAP_SERVERS", None, "give a Kafka bootstrap address or use the embedded broker")
        out["bootstrap_servers"] = str(raw.get("bootstrap_servers", ""))
        for name in ("app_id", "source_topic", "dead_letter_topic"):
            if name in raw:
                out[name] = _topic(ENV_PREFIX + name.upper(), raw[name])
        ints = {"partitions": (1, 10_000), "bucket_seconds": (1, 86_400), "retention_seconds": (1, None),
                "batch_max_reports": (1, 10_000_000), "web_port": (1, 65_535), "top_k": (0, 10_000),
                "rollup_seconds": (1, 366 * 86_400), "rollup_retention_seconds": (1, None),
                "future_tolerance_seconds": (0, 86_400)}
        for name, (lo, hi) in ints.items():
            if name in raw:
                out[name] = _int(ENV_PREFIX + name.upper(), raw[name], lo, hi)
        if "batch_max_seconds" in raw:
            out["batch_max_seconds"] = _float("OCMS_BATCH_MAX_SECONDS", raw["batch_max_seconds"])
        if "log_level" in raw:
            level = str(raw["log_level"]).lower()
            if level not in LOG_LEVELS:
                raise InvalidParameterError("OCMS_LOG_LEVEL", raw["log_level"], f"expected one of {LOG_LEVELS}")
            out["log_level"] = level
        if "web_host" in raw:
            out["web_host"] = str(raw["web_host"])
        if "store" in raw:
            store = str(raw["store"])
            if not (store == "memory://" or store.startswith("rocksdb://")):
                raise InvalidParameterError("OCMS_STORE", store, "expected memory:// or rocksdb://PATH")
            out["store"] = store
        if "tracked_range" in raw:
            value = raw["tracked_range"]
            if isinstance(value, str):
                start, sep, stop = value.partition(":")
                if not sep:
                    raise InvalidParameterError("OCMS_TRACKED_RANGE", value, "expected START:STOP")
                value = (_int("OCMS_TRACKED_RANGE", start, 0), _int("OCMS_TRACKED_RANGE", stop, 1))
            out["tracked_range"] = tuple(value)
        if "tracked_file" in raw:
            out["tracked_file"] = str(raw["tracked_file"])
        if "truth_file" in raw:
            out["truth_file"] = str(raw["truth_file"])
        if "watch" in raw:
            value = raw["watch"]
            items = value.split(",") if isinstance(value, str) else list(value)
            out["watch"] = tuple(v.strip() for v in items if str(v).strip())
        settings = cls(**out)
        if settings.tracked_range is not None and settings.tracked_file is not None:
            raise InvalidParameterError("OCMS_TRACKED_FILE", settings.tracked_file, "exclusive with OCMS_TRACKED_RANGE")
        if settings.retention_seconds < settings.bucket_seconds:
            raise InvalidParameterError("OCMS_RETENTION_SECONDS", settings.retention_seconds, "must be >= the bucket width")
        if settings.rollup_seconds is not None:
            if settings.rollup_seconds <= settings.bucket_seconds or settings.rollup_seconds % settings.bucket_seconds:
                raise InvalidParameterError("OCMS_ROLLUP_SECONDS", settings.rollup_seconds,
                                            f"must be a multiple of the bucket width {settings.bucket_seconds} and larger")
            if settings.rollup_retention_seconds < settings.rollup_seconds:
                raise InvalidParameterError("OCMS_ROLLUP_RETENTION_SECONDS", settings.rollup_retention_seconds,
                                            "must be >= the rollup width")
        if settings.tracked_file is not None and not Path(settings.tracked_file).is_file():
            raise InvalidParameterError("OCMS_TRACKED_FILE", settings.tracked_file, "no such file")
        if settings.source_topic == settings.dead_letter_topic:
            raise InvalidParameterError("OCMS_DEAD_LETTER_TOPIC", settings.dead_letter_topic, "must differ from the source topic")
        return settings


def tracked_values(settings: WorkerSettings, params: OCMSParams) -> TrackedValues:
    """The configured tracked set for one parameter set (same labels for every set)."""
    if settings.tracked_range is not None:
        start, stop = settings.tracked_range
        try:
            return TrackedValues.range(params, start, stop)
        except InvalidValueError as exc:
            raise InvalidParameterError("OCMS_TRACKED_RANGE", f"{start}:{stop}", str(exc)) from None
    if settings.tracked_file is not None:
        return tracked_from_file(settings.tracked_file, params, "OCMS_TRACKED_FILE")
    if params.value_domain != "integer" or params.dictionary_size > MAX_DEFAULT_TRACKED:
        raise InvalidParameterError("OCMS_TRACKED_RANGE", None,
                                    f"give a tracked range or file (the dictionary is larger than {MAX_DEFAULT_TRACKED:,})")
    return TrackedValues.range(params, 0, params.dictionary_size)


def tracked_from_file(path: str, params: OCMSParams, name: str) -> TrackedValues:
    """The tracked set a values file lists (format: producer.values_file, docs/tracked-values.md)."""
    from producer.values_file import ValuesFileError, tracked_from_file as read_tracked

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
            raise InvalidParameterError("OCMS_WATCH", value, "is not a tracked value")
        out.append(position[value])
    return tuple(out)
