"""Collector settings: one frozen, validated object built once from env + CLI.

Precedence as for the worker: a flag wins over its environment variable, which
wins over the default. Shared names keep the worker's variables
(``OCMS_REGISTRY``, ``OCMS_BOOTSTRAP_SERVERS``, ``OCMS_SOURCE_TOPIC``,
``OCMS_LOG_LEVEL``); everything else is ``OCMS_COLLECTOR_<FLAG>``
(``--port`` is ``OCMS_COLLECTOR_PORT``). Every bad value raises
:class:`InvalidParameterError` naming the variable a user would fix.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Mapping

from agents.settings import switch, topic  # the worker's validators: same rules, same messages
from cms_core.errors import InvalidParameterError
from producer.kafka import PROFILES

LOG_LEVELS = ("debug", "info", "warning", "error")
#: The event loop ``ocms collector`` runs on: uvloop (libuv) unless turned off.
EVENT_LOOPS = ("uvloop", "asyncio")

#: setting name -> environment variable (shared names first, then OCMS_COLLECTOR_*).
SHARED_ENV = {
    "registry": "OCMS_REGISTRY",
    "bootstrap_servers": "OCMS_BOOTSTRAP_SERVERS",
    "broker": "OCMS_BROKER",
    "source_topic": "OCMS_SOURCE_TOPIC",
    "log_level": "OCMS_LOG_LEVEL",
}


def env_name(setting: str) -> str:
    return SHARED_ENV.get(setting, "OCMS_COLLECTOR_" + setting.upper())


def flag_name(setting: str) -> str:
    """``ocms collector``'s flag for a setting (collector.cli.FLAGS: always --name-with-dashes)."""
    return "--" + setting.replace("_", "-")


@dataclass(frozen=True)
class CollectorSettings:
    registry: str
    bootstrap_servers: str
    source_topic: str = "ocms-reports"
    #: The broker profile (producer.kafka.PROFILES): kafka, embedded or mock.
    broker: str = "kafka"
    host: str = "127.0.0.1"
    port: int = 8080
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Uploads larger than this many bytes get 413 (checked before the body is read).
    max_body_bytes: int = 1_048_576
    #: Reports in one upload; also bounds a frame (an upload never spans two frames).
    max_upload_reports: int = 1000
    #: Reports held in memory (buffered + in flight to Kafka); beyond it new uploads get 503.
    max_queued_reports: int = 1_000_000
    frame_max_reports: int = 10_000
    frame_max_latency_ms: float = 5.0
    #: aiokafka's per-request timeout; an upload caught by an outage waits at most twice this long for
    #: its frame's acknowledgement (one request and one re-send), then gets 503.
    kafka_timeout_ms: int = 5000
    #: Kafka's idempotent producer: a frame aiokafka re-sends after a lost answer is stored once.
    #: auto = the broker profile's (on for Apache Kafka; the embedded Tansu broker has none), and off
    #: when the broker refuses it.
    kafka_idempotence: str = "auto"
    #: Retry-After of 503 (Kafka unavailable / queue full) and the Kafka probe interval.
    retry_after_seconds: int = 2
    #: Slow uploads: the whole body must arrive within this many seconds (else 408).
    body_timeout_seconds: float = 10.0
    #: A request's header must arrive within this many seconds of its first byte (else 408, closed).
    header_timeout_seconds: float = 10.0
    #: A connection without a request for this long is closed (after its last answer, or from its start).
    idle_timeout_seconds: float = 30.0
    #: Open connections at most (lowered to fit the open-files limit); beyond it the longest-idle one is
    #: closed to make room, or the new one is answered 503 when all are busy.
    max_connections: int = 10_000
    #: Client faults (400, 401, 403, 404, 413, 415, 422) are answered after this delay (reject storms).
    reject_delay_ms: float = 200.0
    tokens_file: str | None = None
    #: Global rate limit in uploads/s (0 = off) and its burst.
    rate_limit: float = 0.0
    rate_burst: int = 0
    #: Default per-application rate limit (uploads/s, 0 = off) for applications without their own.
    app_rate_limit: float = 0.0
    app_rate_burst: int = 0
    idempotency_window_seconds: int = 900
    #: About 400 bytes per key: 200,000 keys hold ~80 MB.
    idempotency_max_keys: int = 200_000
    #: The collector-only topic every replica shares retries through (exactly once across restarts and
    #: replicas; collector/exactly_once.py): default "<source topic>-idempotency"; "off" = per process only.
    idempotency_topic: str | None = None
    #: A secret shared by the replicas that keys the hash of an Idempotency-Key in that topic.
    idempotency_secret_file: str | None = None
    #: This collector's identity across restarts (its transactional id); default host:port.
    instance_id: str | None = None
    #: Access log lines hold no client address unless an operator turns this on.
    access_log_client_addresses: bool = False
    access_log: bool = True
    log_level: str = "info"
    #: uvloop (default) or asyncio's own loop. Single-report uploads are bound by per-request
    #: event-loop work (socket reads, writes, callbacks); uvloop does that part in C (docs/collector.md).
    event_loop: str = "uvloop"
    #: Origins whose pages may upload from a browser (CORS; collector/cors.py): empty = off, ("*",) = any.
    cors_origins: tuple[str, ...] = ()
    #: Shuffling (collector/shuffle.py, docs/collector.md "Shuffling"): per metric version, hold accepted
    #: reports until this many are held, then permute them and produce them (0 = off).
    shuffle_min_reports: int = 0
    #: ... or until this many seconds passed since the first held report (the batch is then what it holds).
    shuffle_max_seconds: float = 60.0

    @classmethod
    def build(cls, env: Mapping[str, str] | None = None, **overrides) -> "CollectorSettings":
        """Settings from the environment ``env`` and explicit overrides (None = unset)."""
        env = env or {}
        raw: dict = {}
        given: dict[str, str] = {}  # setting -> where its value came from, named as the user gave it
        for f in fields(cls):
            value, source = overrides.get(f.name), flag_name(f.name)
            if value is None:
                value, source = env.get(env_name(f.name)), env_name(f.name)
            if value is not None:
                raw[f.name], given[f.name] = value, source

        def label(name: str) -> str:
            """The flag or variable a bad value came from (both when it came from neither)."""
            return given.get(name) or f"{flag_name(name)} (or {env_name(name)})"
        out: dict = {}
        for name in ("registry", "bootstrap_servers"):
            if not str(raw.get(name, "")).strip():
                raise InvalidParameterError(label(name), raw.get(name), f"required: give {flag_name(name)} or {env_name(name)}")
            out[name] = str(raw[name]).strip()
        if not Path(out["registry"]).is_file():
            raise InvalidParameterError(label("registry"), out["registry"], "no such file")
        ints = {
            "port": (0, 65_535), "max_body_bytes": (64, 1 << 30), "max_upload_reports": (1, 1 << 20),
            "max_queued_reports": (1, 1 << 34), "frame_max_reports": (1, 1 << 20), "kafka_timeout_ms": (100, 600_000),
            "retry_after_seconds": (1, 3600), "rate_burst": (0, 1 << 30), "app_rate_burst": (0, 1 << 30),
            "idempotency_window_seconds": (0, 7 * 86_400), "idempotency_max_keys": (0, 1 << 26),
            "max_connections": (1, 1 << 20), "shuffle_min_reports": (0, MAX_SHUFFLE_REPORTS),
        }
        for name, (lo, hi) in ints.items():
            if name in raw:
                out[name] = _int(label(name), raw[name], lo, hi)
        floats = {"frame_max_latency_ms": False, "body_timeout_seconds": False, "rate_limit": True, "app_rate_limit": True,
                  "reject_delay_ms": True, "header_timeout_seconds": False, "idle_timeout_seconds": False,
                  "shuffle_max_seconds": False}
        for name, zero_ok in floats.items():
            if name in raw:
                out[name] = _float(label(name), raw[name], zero_ok)
        for name in ("access_log_client_addresses", "access_log"):
            if name in raw:
                out[name] = switch(raw[name], label(name))
        if "kafka_idempotence" in raw:
            mode = str(raw["kafka_idempotence"]).lower()
            if mode not in ("auto", "on", "off"):
                raise InvalidParameterError(label("kafka_idempotence"), raw["kafka_idempotence"], "expected auto, on or off")
            out["kafka_idempotence"] = mode
        if "broker" in raw:
            kind = str(raw["broker"]).strip().lower()
            if kind not in PROFILES:
                raise InvalidParameterError(label("broker"), raw["broker"], f"expected one of {', '.join(PROFILES)}")
            out["broker"] = kind
        if "log_level" in raw:
            level = str(raw["log_level"]).lower()
            if level not in LOG_LEVELS:
                raise InvalidParameterError(label("log_level"), raw["log_level"], f"expected one of {LOG_LEVELS}")
            out["log_level"] = level
        if "event_loop" in raw:
            loop = str(raw["event_loop"]).strip().lower()
            if loop not in EVENT_LOOPS:
                raise InvalidParameterError(label("event_loop"), raw["event_loop"], f"expected one of {EVENT_LOOPS}")
            out["event_loop"] = loop
        if "cors_origins" in raw:
            from .cors import parse_origins

            out["cors_origins"] = parse_origins(raw["cors_origins"], label("cors_origins"))
        if "source_topic" in raw:
            out["source_topic"] = topic(raw["source_topic"], label("source_topic"))
        if "idempotency_topic" in raw and str(raw["idempotency_topic"]).strip().lower() != "off":
            out["idempotency_topic"] = topic(raw["idempotency_topic"], label("idempotency_topic"))
        elif "idempotency_topic" not in raw:
            out["idempotency_topic"] = out.get("source_topic", cls.source_topic) + "-idempotency"
        if "instance_id" in raw:
            instance = str(raw["instance_id"]).strip()
            if not re.fullmatch(r"[A-Za-z0-9._:-]{1,200}", instance):
                raise InvalidParameterError(label("instance_id"), raw["instance_id"],
                                            "expected 1-200 characters of [A-Za-z0-9._:-], unique per live collector")
            out["instance_id"] = instance
        if "host" in raw:
            out["host"] = str(raw["host"])
        for name in ("tls_cert", "tls_key", "tokens_file", "idempotency_secret_file"):
            if name in raw and str(raw[name]):
                if not Path(str(raw[name])).is_file():
                    raise InvalidParameterError(label(name), raw[name], "no such file")
                out[name] = str(raw[name])
        settings = cls(**out)
        if (settings.tls_cert is None) != (settings.tls_key is None):
            raise InvalidParameterError(label("tls_key"), settings.tls_key, "--tls-cert and --tls-key go together")
        if settings.max_upload_reports > settings.frame_max_reports:
            raise InvalidParameterError(label("max_upload_reports"), settings.max_upload_reports,
                                        f"must be <= the frame bound {settings.frame_max_reports} (an upload never spans two frames)")
        if settings.max_queued_reports < settings.max_upload_reports:
            raise InvalidParameterError(label("max_queued_reports"), settings.max_queued_reports,
                                        f"must be >= the upload bound {settings.max_upload_reports}")
        _check_shuffle(settings, raw, label)
        return settings


#: Most reports one shuffled batch may hold (cms_core.shuffle computes the bound up to 10^7).
MAX_SHUFFLE_REPORTS = 10_000_000
#: Longest a shuffled batch may wait for its reports (every upload of it waits for its answer).
MAX_SHUFFLE_SECONDS = 3600.0


def _check_shuffle(settings: CollectorSettings, raw: Mapping, label) -> None:
    """--shuffle-min-reports and --shuffle-max-seconds, against each other and the queue bound."""
    n = settings.shuffle_min_reports
    if n == 1:
        raise InvalidParameterError(label("shuffle_min_reports"), raw["shuffle_min_reports"],
                                    "a batch of one report hides nothing: give 0 (off) or at least 2 (e.g. 10000)")
    if "shuffle_max_seconds" in raw and not n:
        raise InvalidParameterError(label("shuffle_max_seconds"), raw["shuffle_max_seconds"],
                                    "applies to shuffling: give --shuffle-min-reports N too")
    if settings.shuffle_max_seconds > MAX_SHUFFLE_SECONDS:
        raise InvalidParameterError(label("shuffle_max_seconds"), raw["shuffle_max_seconds"],
                                    f"must be at most {MAX_SHUFFLE_SECONDS:g} (every upload of a batch waits for "
                                    "its answer until the batch is produced)")
    if n and n + settings.max_upload_reports > settings.max_queued_reports:
        raise InvalidParameterError(label("max_queued_reports"), settings.max_queued_reports,
                                    f"must be >= --shuffle-min-reports {n:,} + --max-upload-reports "
                                    f"{settings.max_upload_reports:,} (a batch is held in the queue until produced)")


def _int(name: str, raw, lo: int, hi: int) -> int:
    try:
        value = int(str(raw).replace("_", ""))
    except ValueError:
        raise InvalidParameterError(name, raw, "must be an integer") from None
    if not lo <= value <= hi:
        raise InvalidParameterError(name, raw, f"must be in [{lo}, {hi}]")
    return value


def _float(name: str, raw, zero_ok: bool) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InvalidParameterError(name, raw, "must be a number") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise InvalidParameterError(name, raw, "must be a finite number " + (">= 0" if zero_ok else "> 0"))
    return value
