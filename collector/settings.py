"""Every setting of ``ocms collector`` declared once, as ``infra.settings.Setting`` rows like the worker's.

From the one tuple :data:`SETTINGS` come the flags (:func:`infra.settings.add_flags`), the values
(:func:`infra.settings.resolve`: a flag wins over its environment variable, which wins over the
default; a bad value raises :class:`InvalidParameterError` naming the flag or variable the user
gave) and docs/collector.md's configuration table (:func:`docs_table`; a test keeps them equal,
``python -m collector.settings --update-docs`` rewrites it). Shared names keep the worker's
variables (``OCMS_REGISTRY``, ``OCMS_BOOTSTRAP_SERVERS``, ``OCMS_BROKER``, ``OCMS_SOURCE_TOPIC``,
``OCMS_LOG_LEVEL``);
every other one is ``OCMS_COLLECTOR_<NAME>`` (``--port`` is ``OCMS_COLLECTOR_PORT``).
:class:`CollectorSettings` is the frozen, validated result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from cms_core import claims
from cms_core.errors import InvalidParameterError
from infra import kafka_security
from infra.http_edge import check_tls
from infra.kafka import DEFAULT_SOURCE_TOPIC, KAFKA, PROFILES, BrokerProfile, broker_profile
from infra.settings import (LOG_LEVELS, Setting, check_fields, choice, existing_file, integer, markdown_table, number,
                            resolve, switch, table_main, text, topic)

from .exactly_once.log import UPGRADE_FROM

#: The event loop ``ocms collector`` runs on: uvloop (libuv) unless turned off.
EVENT_LOOPS = ("uvloop", "asyncio")
#: Settings whose variable is the worker's (the same value for both processes).
SHARED = ("registry", "bootstrap_servers", "broker", "source_topic", "log_level", "kafka_config_file")


def _origins(raw, label: str) -> tuple[str, ...]:
    from .cors import parse_origins

    return parse_origins(raw, label)


def _idempotency_topic(raw, label: str) -> str | None:
    return None if str(raw).strip().lower() == "off" else topic(raw, label)


#: Fewest bytes of an --idempotency-secret-file (BLAKE2b takes keys of up to 64; longer ones are cut there).
MIN_SECRET_BYTES = 16


def _secret_file(raw, label: str) -> str:
    claims.read_key(str(raw), label, MIN_SECRET_BYTES, "the same file for every collector replica")
    return str(raw)


def _instance_id(raw, label: str) -> str:
    value = str(raw).strip()
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,200}", value):
        raise InvalidParameterError(label, raw, "expected 1-200 characters of [A-Za-z0-9._:-], unique per live collector")
    return value


#: Most reports one shuffled batch may hold (cms_core.shuffle computes the bound up to 10^7).
MAX_SHUFFLE_REPORTS = 10_000_000
#: Longest a shuffled batch may wait for its reports (every upload of it waits for its answer).
MAX_SHUFFLE_SECONDS = 3600.0


def _row(name: str, help_: str, parse, default=None, **options) -> Setting:
    variable = None if name in SHARED else "OCMS_COLLECTOR_" + name.upper()
    return Setting(name, help_, parse, default, variable=variable, **options)


SETTINGS: tuple[Setting, ...] = (
    _row("registry", "metric registry file (docs/registry.md)", existing_file, metavar="FILE", default_text="required"),
    _row("bootstrap_servers", "Kafka bootstrap address", text, metavar="HOST:PORT[,HOST:PORT]",
         default_text="required"),
    _row("source_topic", "topic the frames go to", topic, DEFAULT_SOURCE_TOPIC, metavar="TOPIC"),
    _row("broker", "the broker's profile: what the Kafka clients do differently there (docs/operating.md)",
         broker_profile, KAFKA, default_text="kafka", choices=tuple(PROFILES)),
    _row("kafka_config_file", "JSON of the Kafka clients' SASL and TLS settings (as the worker's; "
         "infra/kafka_security.py): every Kafka client of the collector uses them", kafka_security.config_file,
         metavar="FILE", default_text="off: plaintext"),
    _row("host", "listen address (0.0.0.0 in a container)", text, "127.0.0.1", metavar="HOST"),
    _row("port", "listen port; 0 = a free port, printed", integer(0, 65_535), 8080, metavar="PORT"),
    _row("tls_cert", "PEM certificate chain: serve HTTPS (or terminate TLS in a reverse proxy)", existing_file,
         metavar="FILE", default_text="off"),
    _row("tls_key", "PEM private key of --tls-cert", existing_file, metavar="FILE", default_text="off"),
    _row("tls_client_ca", "PEM certificate authority: with TLS, every client must present a certificate it signed "
         "(mutual TLS; devices then need one)", existing_file, metavar="FILE", default_text="off"),
    _row("max_body_bytes", "largest upload body, checked before it is read; larger: 413", integer(64, 1 << 30),
         1_048_576, metavar="BYTES"),
    _row("max_upload_reports", "most reports per upload (also bounds a frame: an upload never spans two); "
         "more: 413", integer(1, 1 << 20), 1000, metavar="N"),
    _row("max_queued_reports", "reports held in memory waiting for Kafka; beyond: 503", integer(1, 1 << 34),
         1_000_000, metavar="N"),
    _row("frame_max_reports", "most reports per Kafka frame", integer(1, 1 << 20), 10_000, metavar="N"),
    _row("frame_max_latency_ms", "longest a report waits for its frame while the previous frame of its metric "
         "version is held (group commit: otherwise it leaves at once)", number(), 5.0, metavar="MS"),
    _row("kafka_timeout_ms", "Kafka request timeout; an upload waits at most twice this for its frame's "
         "acknowledgement (one request and one re-send), else 503",
         integer(100, 600_000), 5000, metavar="MS"),
    _row("kafka_idempotence", "Kafka's idempotent producer, so a frame re-sent after a lost answer is stored "
         "once (auto: the broker profile's, on for Apache Kafka, none on the embedded Tansu broker; off when the "
         "broker refuses it)",
         choice("auto", "on", "off"), "auto", choices=("auto", "on", "off")),
    _row("retry_after_seconds", "Retry-After of 503 answers (Kafka unavailable, queue full) and the Kafka probe "
         "interval", integer(1, 3600), 2, metavar="SECONDS"),
    _row("body_timeout_seconds", "the whole body must arrive within this; else 408", number(), 10.0,
         metavar="SECONDS"),
    _row("header_timeout_seconds", "a request's header must arrive within this of its first byte; else 408 and the "
         "connection is closed", number(), 10.0, metavar="SECONDS"),
    _row("idle_timeout_seconds", "a connection without a request for this long is closed", number(), 30.0,
         metavar="SECONDS"),
    _row("max_connections", "open connections at most, lowered to fit the open-files limit; beyond it the "
         "longest-idle connection is closed, or the new one answered 503", integer(1, 1 << 20), 10_000, metavar="N"),
    _row("reject_delay_ms", "answer client faults (400/401/403/404/413/415/422) after this delay, doubled per "
         "fault in a row on a connection (at most 5 s), so a reject storm slows itself down; 0 = off",
         number(inclusive=True), 200.0, metavar="MS"),
    _row("tokens_file", "JSON of applications and token SHA-256 hashes: bearer tokens required", existing_file,
         metavar="FILE", default_text="off"),
    _row("rate_limit", "global uploads/s; 0 = off", number(inclusive=True), 0.0, metavar="UPLOADS/S"),
    _row("rate_burst", "global burst", integer(0, 1 << 30), 0, metavar="N", default_text="the rate"),
    _row("app_rate_limit", "uploads/s per application without its own limit; 0 = off", number(inclusive=True), 0.0,
         metavar="UPLOADS/S"),
    _row("app_rate_burst", "per-application burst", integer(0, 1 << 30), 0, metavar="N", default_text="the rate"),
    _row("idempotency_window_seconds", "retries with the same Idempotency-Key within this window are answered "
         "once; 0 = off", integer(0, 7 * 86_400), 900, metavar="SECONDS"),
    _row("idempotency_max_keys", "most remembered keys, ~400 bytes each; with shuffling at least "
         "--shuffle-min-reports (a batch remembers the key of each of its uploads until answered)", integer(0, 1 << 26), 200_000, metavar="N"),
    _row("idempotency_topic", "collector-only topic the replicas share retries through, so a retried upload counts "
         "once across restarts and replicas; off = per process (collector/exactly_once/)", _idempotency_topic,
         metavar="TOPIC", default_text="<source topic>-idempotency"),
    _row("idempotency_secret_file", "file holding a secret (at least 16 bytes, e.g. openssl rand -hex 32) shared by "
         "the replicas: keys the hash of each Idempotency-Key in that topic; without it, the key kept in Kafka "
         "(docs/collector.md, Retries)", _secret_file, metavar="FILE",
         default_text="off: a key generated and kept in <idempotency topic>-key"),
    _row("upgrade_from", "the first of an upgrade's two rolling bounces (CHANGELOG.md, Upgrading): while collectors "
         "of this earlier release share the idempotency topic, write only the records they read (a lease as a "
         "listing of no keys) while reading this release's too; restart each collector again without it once none "
         "of that release is left", choice(*UPGRADE_FROM), metavar="RELEASE", choices=UPGRADE_FROM,
         default_text="off: this release's records"),
    _row("instance_id", "this collector's identity across restarts (its transactional id), unique among live "
         "collectors", _instance_id, metavar="ID", default_text="host:port"),
    _row("access_log_client_addresses", "log client addresses and user agents (off by default: privacy at the edge)",
         switch, False, kind="switch"),
    _row("access_log", "access log lines at info level", switch, True, metavar="true|false", default_text="true"),
    _row("log_level", "log level", choice(*LOG_LEVELS), "info", choices=LOG_LEVELS),
    _row("event_loop", "the event loop to run on: uvloop (libuv, C) or asyncio (Python's own; docs/collector.md, "
         "Why uvloop)", choice(*EVENT_LOOPS), "uvloop", choices=EVENT_LOOPS),
    _row("cors_origins", "origins whose web pages may upload from a browser (CORS), comma-separated "
         "https://host[:port], or *", _origins, (), metavar="ORIGINS", default_text="off"),
    _row("shuffle_min_reports", "shuffle (docs/collector.md, Shuffling): per metric version, hold accepted reports "
         "until this many are held, then produce them in a random order (CSPRNG) with one timestamp, so whoever "
         "reads Kafka sees each report hidden among the batch; every upload waits for its batch; 0 = off",
         integer(0, MAX_SHUFFLE_REPORTS), 0, metavar="N", default_text="0 (off)"),
    _row("shuffle_max_seconds", "shuffle: produce a batch after this many seconds even if it holds fewer reports "
         "(its frames say how many)", number(), 60.0, metavar="SECONDS"),
    _row("shuffle_claim_key_file", "shuffle: file of a key (at least 32 bytes, e.g. openssl rand -hex 32) shared with "
         "the workers: every shuffled frame carries a MAC of its batch claim, and workers state a central epsilon "
         "only for frames whose MAC verifies (docs/privacy.md, Who may claim a shuffle)", claims.key_file,
         metavar="FILE", default_text="off: no worker believes the claims"),
)
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class CollectorSettings:
    """The collector's settings; build them with :meth:`build` (defaults live in :data:`SETTINGS`)."""

    registry: str
    bootstrap_servers: str
    source_topic: str
    broker: BrokerProfile
    kafka_config_file: str | None
    host: str
    port: int
    tls_cert: str | None
    tls_key: str | None
    tls_client_ca: str | None
    max_body_bytes: int
    max_upload_reports: int
    max_queued_reports: int
    frame_max_reports: int
    frame_max_latency_ms: float
    kafka_timeout_ms: int
    kafka_idempotence: str
    retry_after_seconds: int
    body_timeout_seconds: float
    header_timeout_seconds: float
    idle_timeout_seconds: float
    max_connections: int
    reject_delay_ms: float
    tokens_file: str | None
    rate_limit: float
    rate_burst: int
    app_rate_limit: float
    app_rate_burst: int
    idempotency_window_seconds: int
    idempotency_max_keys: int
    idempotency_topic: str | None
    idempotency_secret_file: str | None
    #: The earlier release whose collectors may share the idempotency log (exactly_once.log.write_leases_for).
    upgrade_from: str | None
    instance_id: str | None
    access_log_client_addresses: bool
    access_log: bool
    log_level: str
    event_loop: str
    cors_origins: tuple[str, ...]
    #: Shuffling (collector/shuffle.py, docs/collector.md "Shuffling"): per metric version, hold accepted
    #: reports until this many are held, then permute them and produce them (0 = off) ...
    shuffle_min_reports: int
    #: ... or until this many seconds passed since the first held report (the batch is then what it holds).
    shuffle_max_seconds: float
    #: ... and the key its batch claims are signed with (cms_core.claims; None: unsigned, so not believed).
    shuffle_claim_key_file: str | None
    #: What set each setting (flag, variable, or both names for a default): errors name it.
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def label(self, name: str) -> str:
        return self.labels.get(name) or f"{BY_NAME[name].flag} (or {BY_NAME[name].env})"

    @classmethod
    def build(cls, env: Mapping[str, str] | None = None, **overrides) -> "CollectorSettings":
        """Settings from explicit ``overrides`` (flag values; None = not given) over the variables in ``env``
        over the declared defaults."""
        unknown = set(overrides) - set(BY_NAME)
        if unknown:
            raise TypeError(f"unknown collector settings: {sorted(unknown)}")
        values, labels = resolve(SETTINGS, overrides, env or {})
        for name in ("registry", "bootstrap_servers"):
            if values[name] is None:
                raise InvalidParameterError(labels[name], None,
                                            f"required: give {BY_NAME[name].flag} or {BY_NAME[name].env}")
        if "idempotency_topic" not in labels.given:
            values["idempotency_topic"] = values["source_topic"] + "-idempotency"
        check_tls(values, labels)
        settings = cls(labels=labels, **values)
        if settings.max_upload_reports > settings.frame_max_reports:
            raise InvalidParameterError(labels["max_upload_reports"], settings.max_upload_reports,
                                        f"must be <= the frame bound {settings.frame_max_reports} (an upload never "
                                        "spans two frames)")
        if settings.max_queued_reports < settings.max_upload_reports:
            raise InvalidParameterError(labels["max_queued_reports"], settings.max_queued_reports,
                                        f"must be >= the upload bound {settings.max_upload_reports}")
        _check_shuffle(settings, labels)
        return settings


def _check_shuffle(settings: CollectorSettings, labels) -> None:
    """--shuffle-min-reports and --shuffle-max-seconds, against each other and the queue bound."""
    n = settings.shuffle_min_reports
    if n == 1:
        raise InvalidParameterError(labels["shuffle_min_reports"], n,
                                    "a batch of one report hides nothing: give 0 (off) or at least 2 (e.g. 10000)")
    if "shuffle_max_seconds" in labels.given and not n:
        raise InvalidParameterError(labels["shuffle_max_seconds"], settings.shuffle_max_seconds,
                                    "applies to shuffling: give --shuffle-min-reports N too")
    if settings.shuffle_claim_key_file and not n:
        raise InvalidParameterError(labels["shuffle_claim_key_file"], settings.shuffle_claim_key_file,
                                    "applies to shuffling: give --shuffle-min-reports N too")
    if settings.shuffle_max_seconds > MAX_SHUFFLE_SECONDS:
        raise InvalidParameterError(labels["shuffle_max_seconds"], settings.shuffle_max_seconds,
                                    f"must be at most {MAX_SHUFFLE_SECONDS:g} (every upload of a batch waits for "
                                    "its answer until the batch is produced)")
    if n and n + settings.max_upload_reports > settings.max_queued_reports:
        raise InvalidParameterError(labels["max_queued_reports"], settings.max_queued_reports,
                                    f"must be >= --shuffle-min-reports {n:,} + --max-upload-reports "
                                    f"{settings.max_upload_reports:,} (a batch is held in the queue until produced)")
    keys = settings.idempotency_max_keys
    if n > keys and settings.idempotency_window_seconds and keys:
        # A batch closes at the upload that reaches n (collector/lanes.py, ShuffleLane), so it holds at most n
        # uploads (one report each at least), and its listing names each one's key. Beyond the key bound the
        # listing evicts every listing before it, in flight or not, and then itself (ListingLog.apply; the
        # per-process cache evicts uploads still waiting the same way): their retries would be counted again.
        raise InvalidParameterError(labels["shuffle_min_reports"], n,
                                    f"must be <= {labels['idempotency_max_keys']} {keys:,} while retries are "
                                    "remembered (--idempotency-window-seconds > 0): a shuffled batch of N reports "
                                    "can hold N uploads and remembers each one's Idempotency-Key until it is "
                                    "answered, and beyond the key bound keys still waiting are forgotten, so "
                                    f"their retries would be counted twice; raise --idempotency-max-keys to at "
                                    f"least {n:,} (about 400 bytes a key) or lower --shuffle-min-reports")


check_fields(CollectorSettings, BY_NAME)

#: docs/collector.md's configuration table sits between these markers.
DOCS_MARKER = "collector-settings-table"


def docs_table() -> str:
    return markdown_table(SETTINGS)


if __name__ == "__main__":  # pragma: no cover - python -m collector.settings [--update-docs [docs/collector.md]]
    import sys

    table_main(sys.argv[1:], "--update-docs", "docs/collector.md", DOCS_MARKER, docs_table())
