"""``ocms discover`` (docs/discovery.md): a metric's frequent unknown values from its discovery reports.

    ocms discover --registry deploy/registry.yaml --metric flight_tailnum CAPTURE...
    ocms discover --registry deploy/registry.yaml --metric flight_tailnum \\
        --bootstrap-servers HOST:9092 --from 2026-11-24T00:00:00Z --to 2026-11-24T01:00:00Z
    ocms discover --serve --registry deploy/registry.yaml --bootstrap-servers HOST:9092

Capture files or a time window of the reports topic go through one pass
(agents/discovery_pass.py) to a JSON document, optionally promoted into a
tracked-values file. ``--serve`` runs the periodic :class:`agents.discovery.DiscoveryService`
on an aiohttp server of its own, with the worker's ``/discovered`` handler.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from cms_core import discovery
from cms_core.errors import OCMSError
from cms_core.values import value_to_json
from infra.kafka import DEFAULT_SOURCE_TOPIC
from infra.settings import int_at_least

from .discovery import DEFAULT_EXPORTED_VALUES, DiscoveryCollector, DiscoveryService
from .discovery_pass import discovery_document, group_by_level, read_topic_window

#: Exit status when no report of the metric's levels was found (nothing to discover from).
EXIT_NOTHING_COUNTED = 1


def _discoverable(args, registry):
    """The version ``--metric NAME [--metric-version N]`` of ``registry`` names, which must declare discovery."""
    from registry.flags import version_from_args

    version = version_from_args(args, registry)
    if version.discovery is None:
        raise OCMSError(f"--metric {version.metric}: version {version.version} declares no 'discovery:' block "
                        f"(only strings/integers metrics with one can be discovered; docs/discovery.md)")
    return version


def _capture_messages(paths: list[str], damage: list):
    from infra.capture import CaptureReader

    for path in paths:
        reader = CaptureReader(path)
        yield from reader
        if reader.damage is not None:
            damage.append(reader.damage.describe())


def _parse_time(text: str, flag: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OCMSError(f"{flag} {text!r}: expected an ISO 8601 time such as 2026-11-24T03:00:00Z") from None
    if when.tzinfo is None:
        raise OCMSError(f"{flag} {text!r}: give a time zone (e.g. a trailing Z for UTC)")
    return when


def cmd_discover(args) -> int:
    if args.serve:
        return cmd_serve(args)
    for flag, value in (("--window", args.window), ("--interval", args.interval), ("--web-port", args.web_port)):
        if value is not None:
            raise OCMSError(f"{flag} goes with --serve")
    if args.metric is None:
        raise OCMSError("--metric NAME is required (the metric to discover values of)")
    from registry.discovery import discovery_of
    from registry.flags import metrics_from_args

    version = _discoverable(args, metrics_from_args(args))  # the registry, read once

    spec = discovery_of(version)
    window = None
    damage: list[str] = []
    if args.inputs:
        if args.start or args.stop or args.bootstrap_servers:
            raise OCMSError("give capture files or --bootstrap-servers with --from/--to, not both")
        messages = _capture_messages(args.inputs, damage)
    else:
        if not (args.start and args.stop and args.bootstrap_servers):
            raise OCMSError("give capture files, or --bootstrap-servers, --from and --to (a window of the topic)")
        start, stop = _parse_time(args.start, "--from"), _parse_time(args.stop, "--to")
        if stop <= start:
            raise OCMSError(f"--to {args.stop} is not after --from {args.start}")
        import asyncio

        messages = asyncio.run(read_topic_window(args.bootstrap_servers, args.topic, start, stop))
        window = {"from": start.astimezone(timezone.utc).isoformat(), "to": stop.astimezone(timezone.utc).isoformat(),
                  "topic": args.topic}
    batches, rejected, read = group_by_level(spec, messages)
    doc = discovery_document(version, batches, rejected, read, alpha=args.alpha, confidence=args.confidence,
                             max_candidates=args.max_candidates, window=window)
    if damage:
        doc["damaged_captures"] = damage
    if args.promote:
        doc["promoted"] = promote(args.promote, version, doc)
    from .answers.encode import json_answer

    # UTF-8 with every value as text (cms_core.values.value_record); encoded before --out is opened.
    text = json_answer(doc, indent=2)[0].decode("utf-8")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        from infra.output import write_stdout

        write_stdout(text + "\n")  # `ocms discover ... | head` ends quietly
    for line in damage:
        print(f"ocms discover: warning: {line}", file=sys.stderr)
    if batches:
        print(f"ocms discover: {detection_line(doc)}", file=sys.stderr)
    if not batches:
        print(f"ocms discover: error: no report of {version.binding}'s {spec.domain.levels} discovery levels was found "
              f"({read:,} messages read, rejected: {dict(rejected) or 'none'})", file=sys.stderr)
        return EXIT_NOTHING_COUNTED
    return 0


def detection_line(doc: dict) -> str:
    """What a discovery document found, and what a value needed to be found (its window's detection
    threshold, docs/discovery.md): "nothing found" is an answer, not a mystery."""
    found = len(doc["discovered"])
    what = f"found {found:,} value{'s' if found != 1 else ''}"
    threshold = doc.get("detection_threshold")
    if threshold is None:
        empty = [level for level, n in enumerate(doc["reports_per_level"], 1) if not n]
        why = f"level {empty[0]} has no reports" if empty else "not even a value every report holds passes every level"
        return f"{what}; no value could be found in this window ({why})"
    return (f"{what}; a value needed a frequency of at least {threshold:.2%} (about {doc['detection_threshold_count']:,.0f} "
            f"of the {doc['reports']:,} reports) to be found with {1 - doc['detection_miss']:.0%} probability "
            f"in this window")


def promote(path: str, version, doc: dict) -> dict:
    """Add the discovered complete values to a tracked-values file (JSON lines), keeping what it holds.

    The file is what a new registry version lists under ``tracked: {file: PATH}`` so the
    streaming path counts the values exactly. Truncated values (only a prefix is known) and values
    whose bytes are not UTF-8 text (records with ``bytes_hex``) are not promoted. Returns what was added.
    """
    from pathlib import Path

    from registry.values_file import read_raw_values, write_values_file

    target = Path(path)
    existing: list[str] = []
    if target.exists():
        raw = read_raw_values(target)
        existing = [value_to_json(v) for v in raw.items]
    known = set(existing)
    new = [d["value"] for d in doc["discovered"]
           if not d["truncated"] and "bytes_hex" not in d and d["value"] not in known]
    if version.domain == "integers":
        values = [int(v) for v in existing + new]
    else:
        values = existing + new
    write_values_file(target, values)
    return {"file": str(target), "added": new, "kept": len(existing),
            "next_step": f"add a version of {version.metric!r} tracking this file (docs/registry.md, Versions)"}


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} must be in (0, 1)")
    return value


def add_discover_parser(sub) -> None:
    """``ocms discover``: registered by ocms/cli.py."""
    p = sub.add_parser("discover", help="discover a metric's frequent unknown values from its discovery reports (JSON)",
                       description="Prefix-extension discovery (docs/discovery.md) over capture files or a time "
                                   "window of the reports topic. Output: discovered values with estimates and CIs, "
                                   "per-level candidates and cut-offs.")
    p.add_argument("inputs", nargs="*", metavar="CAPTURE", help="capture files (ocms simulate --out, or kcat -f '%%R%%s'); - reads standard input")
    p.add_argument("--registry", required=True, metavar="FILE", help="the registry (the metric needs a discovery: block)")
    p.add_argument("--metric", help="the metric to discover values of (with --serve: default every discoverable one)")
    p.add_argument("--metric-version", type=int, help="this version (default: the newest live one)")
    p.add_argument("--from", dest="start", metavar="TIME", help="window start (ISO 8601 with zone), with --bootstrap-servers")
    p.add_argument("--to", dest="stop", metavar="TIME", help="window end (exclusive)")
    p.add_argument("--bootstrap-servers", help="Kafka to read the window from")
    p.add_argument("--topic", default=DEFAULT_SOURCE_TOPIC, help=f"the reports topic (default {DEFAULT_SOURCE_TOPIC})")
    p.add_argument("--alpha", type=_probability, default=0.05,
                   help="family-wise probability of any false discovery (default 0.05)")
    p.add_argument("--confidence", type=_probability, default=0.95, help="CI level of the estimates (default 0.95)")
    p.add_argument("--max-candidates", type=int_at_least(1), default=discovery.DEFAULT_MAX_CANDIDATES,
                   help="cap on candidates decoded per level (default %(default)s)")
    p.add_argument("--out", help="write the JSON here instead of stdout")
    p.add_argument("--promote", metavar="FILE.jsonl",
                   help="add the discovered (non-truncated) values to this tracked-values file, keeping its values")
    serve = p.add_argument_group("periodic discovery (--serve)")
    serve.add_argument("--serve", action="store_true", help="rediscover every --interval over the last --window of "
                       "the topic and serve /discovered?metric=NAME and /metrics until stopped")
    serve.add_argument("--window", type=int_at_least(1), metavar="SECONDS", help="window length (default 3600)")
    serve.add_argument("--interval", type=int_at_least(1), metavar="SECONDS", help="seconds between passes (default 300)")
    serve.add_argument("--web-host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--web-port", type=int_at_least(1), help="port of /discovered and /metrics (default 6067)")
    serve.add_argument("--export-top", type=int_at_least(1), default=DEFAULT_EXPORTED_VALUES,
                       help="discovered values exported per metric as Prometheus labels (default %(default)s)")
    p.set_defaults(func=cmd_discover)


def cmd_serve(args) -> int:
    """``ocms discover --serve``: a DiscoveryService with its HTTP API and /metrics, until SIGINT/SIGTERM."""
    import asyncio

    from registry.flags import metrics_from_args

    if args.inputs or args.start or args.stop or args.promote or args.out:
        raise OCMSError("--serve reads the topic's moving window: drop capture files, --from/--to, --out, --promote")
    if not args.bootstrap_servers:
        raise OCMSError("--serve needs --bootstrap-servers (the Kafka holding the reports topic)")
    registry = metrics_from_args(args)
    if args.metric is not None:
        versions = [_discoverable(args, registry)]
    else:
        versions = [m.latest for m in registry.metrics if m.latest.discovery is not None]
        if not versions:
            raise OCMSError(f"{args.registry}: no metric declares a 'discovery:' block")
    service = DiscoveryService(versions, bootstrap_servers=args.bootstrap_servers, topic=args.topic,
                               window_seconds=args.window or 3600, interval_seconds=args.interval or 300,
                               alpha=args.alpha, confidence=args.confidence, max_candidates=args.max_candidates)
    try:
        asyncio.run(serve(service, args.web_host, args.web_port or 6067, args.export_top))
    except KeyboardInterrupt:
        pass
    return 0


async def serve(service: DiscoveryService, host: str, port: int, top: int = DEFAULT_EXPORTED_VALUES) -> None:
    """Serve ``/discovered`` and ``/metrics`` (aiohttp) while ``service.run()`` refreshes; SIGTERM stops cleanly."""
    import asyncio
    import signal

    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from .metrics import ExpositionGuard
    from .answers.encode import ANSWER_RECORDS_DROPPED

    registry = CollectorRegistry()
    ExpositionGuard(registry).add("discovery", DiscoveryCollector(service, top))  # one bad series never fails /metrics
    registry.register(ANSWER_RECORDS_DROPPED)

    async def discovered(request):
        status, body = service.page(request.query)  # the worker's /discovered handler (agents.discovery)
        return web.Response(body=body, status=status, content_type="application/json")

    async def metrics(request):
        return web.Response(body=generate_latest(registry), content_type=CONTENT_TYPE_LATEST.split(";")[0],
                            charset="utf-8")

    app = web.Application()
    app.router.add_get("/discovered", discovered)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise OCMSError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    print(f"discovery of {', '.join(sorted(service.versions))}: http://{host}:{port}/discovered?metric=NAME and "
          f"/metrics; a pass every {service.interval_seconds:g} s over the last {service.window_seconds} s", flush=True)
    refresher = asyncio.create_task(service.run())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        refresher.cancel()
        await asyncio.gather(refresher, return_exceptions=True)
        await runner.cleanup()
