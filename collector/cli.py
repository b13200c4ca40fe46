"""``ocms collector``: flags (each also an environment variable) -> CollectorSettings -> the server.

agents/cli.py registers the subcommand with :func:`add_collector_parser`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from cms_core.errors import InvalidParameterError, OCMSError

from .settings import CollectorSettings, env_name, flag_name

#: (flag, setting, help); every flag falls back to its environment variable (env_name).
FLAGS = (
    ("--registry", "registry", "metric registry file"),
    ("--bootstrap-servers", "bootstrap_servers", "Kafka bootstrap address HOST:PORT[,HOST:PORT]"),
    ("--source-topic", "source_topic", "topic the frames go to [default ocms-reports]"),
    ("--broker", "broker", "kafka|embedded|mock: the broker's profile (what the Kafka client does differently "
     "there; README, operating notes) [default kafka]"),
    ("--host", "host", "listen address [default 127.0.0.1; 0.0.0.0 in a container]"),
    ("--port", "port", "listen port [default 8080; 0 = a free port, printed]"),
    ("--tls-cert", "tls_cert", "PEM certificate chain: serve HTTPS (or terminate TLS in a reverse proxy)"),
    ("--tls-key", "tls_key", "PEM private key of --tls-cert"),
    ("--max-body-bytes", "max_body_bytes", "largest upload body [default 1048576]; larger: 413"),
    ("--max-upload-reports", "max_upload_reports", "most reports per upload [default 1000]; more: 413"),
    ("--max-queued-reports", "max_queued_reports", "reports held waiting for Kafka [default 1000000]; beyond: 503"),
    ("--frame-max-reports", "frame_max_reports", "most reports per Kafka frame [default 10000]"),
    ("--frame-max-latency-ms", "frame_max_latency_ms", "longest a report waits for its frame [default 5]"),
    ("--kafka-timeout-ms", "kafka_timeout_ms", "Kafka request timeout; an upload waits at most twice this for its "
     "frame's acknowledgement, else 503 [default 5000]"),
    ("--kafka-idempotence", "kafka_idempotence", "auto|on|off: Kafka's idempotent producer (auto: on when the "
     "broker supports it) [default auto]"),
    ("--retry-after-seconds", "retry_after_seconds", "Retry-After of 503 answers [default 2]"),
    ("--body-timeout-seconds", "body_timeout_seconds", "the whole body must arrive within this [default 10]; else 408"),
    ("--header-timeout-seconds", "header_timeout_seconds", "a request's header must arrive within this of its first "
     "byte [default 10]; else 408 and the connection is closed"),
    ("--idle-timeout-seconds", "idle_timeout_seconds", "a connection without a request for this long is closed "
     "[default 30]"),
    ("--max-connections", "max_connections", "open connections at most, lowered to fit the open-files limit; beyond "
     "it the longest-idle connection is closed, or the new one answered 503 [default 10000]"),
    ("--reject-delay-ms", "reject_delay_ms", "answer client faults (400/401/403/404/413/415/422) after this delay, "
     "doubled per fault in a row on a connection (at most 5 s), so a reject storm slows itself down "
     "[default 200; 0 = off]"),
    ("--tokens-file", "tokens_file", "JSON of applications and token SHA-256 hashes: bearer tokens required"),
    ("--rate-limit", "rate_limit", "global uploads/s [default 0 = off]"),
    ("--rate-burst", "rate_burst", "global burst [default = the rate]"),
    ("--app-rate-limit", "app_rate_limit", "uploads/s per application without its own limit [default 0 = off]"),
    ("--app-rate-burst", "app_rate_burst", "per-application burst [default = the rate]"),
    ("--idempotency-window-seconds", "idempotency_window_seconds", "retries with the same Idempotency-Key within "
     "this window are answered once [default 900; 0 = off]"),
    ("--idempotency-max-keys", "idempotency_max_keys", "most remembered keys, ~400 bytes each [default 200000]"),
    ("--idempotency-topic", "idempotency_topic", "collector-only topic the replicas share retries through, so a "
     "retried upload counts once across restarts and replicas [default <source topic>-idempotency; off = per "
     "process]"),
    ("--idempotency-secret-file", "idempotency_secret_file", "file holding a secret shared by the replicas: keys "
     "the hash of each Idempotency-Key in that topic"),
    ("--instance-id", "instance_id", "this collector's identity across restarts (unique among live collectors) "
     "[default host:port]"),
    ("--access-log-client-addresses", "access_log_client_addresses", "log client addresses and user agents "
     "(off by default: privacy at the edge)"),
    ("--access-log", "access_log", "true|false: access log lines at info level [default true]"),
    ("--log-level", "log_level", "debug|info|warning|error [default info]"),
    ("--cors-origins", "cors_origins", "origins whose web pages may upload from a browser (CORS), comma-separated "
     "https://host[:port], or * [default off]"),
    ("--event-loop", "event_loop", "uvloop|asyncio: the event loop to run on (asyncio = Python's own) [default uvloop]"),
    ("--shuffle-min-reports", "shuffle_min_reports", "shuffle: per metric version, hold accepted reports until this "
     "many are held, then produce them in a random order (CSPRNG) with one timestamp, so whoever reads Kafka sees "
     "each report hidden among the batch; every upload waits for its batch [default 0 = off]"),
    ("--shuffle-max-seconds", "shuffle_max_seconds", "shuffle: produce a batch after this many seconds even if it "
     "holds fewer reports (its frames say how many) [default 60]"),
)


def add_collector_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("collector", help="the device-facing HTTP collector: validates uploads, produces frames to Kafka",
                       description="HTTP ingestion into Kafka. Every flag also reads its environment variable "
                                   "(shown in brackets); flags win.")
    for flag, name, text in FLAGS:
        if name == "access_log_client_addresses":
            p.add_argument(flag, dest=name, action="store_const", const="true", help=f"{text} [{env_name(name)}]")
        else:
            p.add_argument(flag, dest=name, help=f"{text} [{env_name(name)}]")
    p.set_defaults(func=cmd_collector)
    return p


def settings_from_args(args, environ=None) -> CollectorSettings:
    environ = os.environ if environ is None else environ
    return CollectorSettings.build(environ, **{name: getattr(args, name, None) for _, name, _ in FLAGS})


def load_metric_registry(path: str):
    from registry import load_registry

    return load_registry(path)


def cmd_collector(args) -> int:
    settings = settings_from_args(args)
    registry = load_metric_registry(settings.registry)  # errors name metric, field and line
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
        return runner.run(_serve(settings, registry))


def loop_factory(name: str):
    """The event loop factory of ``--event-loop`` (None: asyncio's default loop)."""
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # a declared dependency; missing only in a broken install
        raise InvalidParameterError(f"{flag_name('event_loop')} (or {env_name('event_loop')})", name, "uvloop is not installed (pip install uvloop, "
                                    "or use asyncio)") from None
    return uvloop.new_event_loop


def running_loop_name() -> str:
    """'uvloop' or 'asyncio': what the running loop is (not what was asked for)."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.split(".")[0] == "uvloop" else "asyncio"


async def _serve(settings, registry) -> int:
    from .app import CollectorServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with CollectorServer(settings, registry) as server:
        names = ", ".join(m.name for m in registry.metrics)
        print(f"ocms collector: {server.url}/v1/reports -> {settings.bootstrap_servers}/{settings.source_topic} "
              f"(metrics: {names}; event loop: {running_loop_name()})", flush=True)
        await stop.wait()
    return 0


def collector_command(registry: str, bootstrap_servers: str, port: int, *extra: str) -> list[str]:
    """argv of a collector child process (``ocms run``, tests): ``subprocess.Popen(collector_command(...))``."""
    return [sys.executable, "-m", "agents.cli", "collector", "--registry", str(registry), "--bootstrap-servers",
            bootstrap_servers, "--port", str(port), *extra]


def main(argv: list[str] | None = None) -> int:  # python -m collector
    parser = argparse.ArgumentParser(prog="ocms")
    add_collector_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["collector", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except OCMSError as exc:
        parser.exit(2, f"ocms collector: error: {exc}\n")
