"""``ocms collector``: flags (each also an environment variable) -> CollectorSettings -> the server.

ocms/cli.py registers the subcommand with :func:`add_collector_parser`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys

from cms_core.errors import InvalidParameterError, OCMSError
from infra.settings import add_flags

from .settings import BY_NAME, SETTINGS, CollectorSettings


def add_collector_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("collector", help="the device-facing HTTP collector: validates uploads, produces frames to Kafka",
                       description="HTTP ingestion into Kafka. Every flag also reads its environment variable "
                                   "(shown in brackets); flags win.")
    add_flags(p, SETTINGS, env=True)  # collector/settings.py: one row per setting
    p.set_defaults(func=cmd_collector)
    return p


def settings_from_args(args, environ=None) -> CollectorSettings:
    environ = os.environ if environ is None else environ
    return CollectorSettings.build(environ, **{s.name: getattr(args, s.name, None) for s in SETTINGS})


def cmd_collector(args) -> int:
    from registry import load_registry

    settings = settings_from_args(args)
    registry = load_registry(settings.registry)  # errors name metric, field and line
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tune_garbage_collector()
    with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
        return runner.run(_serve(settings, registry))


#: Allocations of container objects (net) between two young collections: CPython's default is 700.
YOUNG_COLLECTION_THRESHOLD = 20_000


def tune_garbage_collector() -> None:
    """Fewer, larger collections for a server with hundreds of requests in flight.

    With CPython's default (a young collection every 700 net allocations) the objects of requests in
    flight outlive young collections and are promoted, so full collections come often and walk the whole
    heap: under 256 connections of keyed uploads collections took 16-18% of the collector's CPU, full
    ones paused it for up to 70 ms (py-spy --native; gc.callbacks). At 20,000 most of a request's objects
    are freed by reference counting before a collection sees them: collections took 2% and the collector's
    CPU per keyed upload fell from 74 to 64 us (p99 127 -> 41 ms; benchmarks/bench_exactly_once.py). What
    was built before serving (modules, the registry, settings) lives as long as the process: frozen, full
    collections no longer walk it. Reference cycles are still collected, only in larger steps.
    """
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, middle, old)


def loop_factory(name: str):
    """The event loop factory of ``--event-loop`` (None: asyncio's default loop)."""
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # a declared dependency; missing only in a broken install
        setting = BY_NAME["event_loop"]
        raise InvalidParameterError(f"{setting.flag} (or {setting.env})", name, "uvloop is not installed (pip install "
                                    "uvloop, or use asyncio)") from None
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
        warn_if_slow_key_table(settings)
        await stop.wait()
    return 0


def warn_if_slow_key_table(settings) -> bool:
    """With the shared idempotency log, say so when its holders table is the Python dict (the extension
    collector/exactly_once/_keytable.c was not built): the same answers, more CPU per keyed upload."""
    from .exactly_once.log import KEY_TABLE_BACKEND

    if settings.idempotency_topic is None or KEY_TABLE_BACKEND == "compiled":
        return False
    logging.getLogger("ocms.collector").warning(
        "the idempotency log's holders table is not compiled (collector/exactly_once/_keytable.c): keyed uploads "
        "cost more CPU (about 8 us each at 200,000 keys held; docs/collector.md). Build it: pip install -e . with "
        "a C compiler (make install)")
    return True


def main(argv: list[str] | None = None) -> int:  # python -m collector
    parser = argparse.ArgumentParser(prog="ocms")
    add_collector_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["collector", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except OCMSError as exc:
        parser.exit(2, f"ocms collector: error: {exc}\n")
