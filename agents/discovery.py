"""Server side of discovery (docs/discovery.md): ``ocms discover`` and the fleet simulation for it.

    ocms discover --registry deploy/registry.yaml --metric flight_tailnum CAPTURE...
    ocms discover --registry deploy/registry.yaml --metric flight_tailnum \\
        --bootstrap-servers HOST:9092 --from 2026-11-24T00:00:00Z --to 2026-11-24T01:00:00Z

Reports are grouped by fingerprint into the metric version's levels; a message of
any other fingerprint (another metric, an unknown level) or a malformed one is
counted under ``rejected`` by reason and never decoded. The numerics are
:func:`cms_core.discovery.discover`; this module only reads and writes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from typing import Iterable

from cms_core import discovery, wire
from cms_core.errors import OCMSError
from cms_core.reports import ReportBatch
from cms_core.values import value_to_json

#: Exit status when no report of the metric's levels was found (nothing to discover from).
EXIT_NOTHING_COUNTED = 1


def _discoverable(args, registry):
    """The metric version ``--metric NAME [--metric-version N]`` names, which must declare discovery."""
    from registry.flags import version_from_args

    version = version_from_args(args, registry)
    metric = version.metric
    if version.discovery is None:
        raise OCMSError(f"--metric {metric}: version {version.version} declares no 'discovery:' block "
                        f"(only strings/integers metrics with one can be discovered; docs/discovery.md)")
    return version


def group_by_level(spec, messages: Iterable[bytes]) -> tuple[dict[int, ReportBatch], Counter, int]:
    """(level -> reports, rejected reason -> messages, messages read); only the spec's level fingerprints count."""
    known = {p.fingerprint: p for p in spec.params_by_level}
    level_of = {p.fingerprint: level for level, p in enumerate(spec.params_by_level, 1)}
    pending: dict[int, list[ReportBatch]] = {}
    rejected: Counter = Counter()
    read = 0
    for message in messages:
        read += 1
        try:
            params, batch = wire.decode_message(message, known)
        except wire.WireFormatError as exc:
            rejected[exc.reason] += 1
            continue
        pending.setdefault(level_of[params.fingerprint], []).append(batch)
    return {level: ReportBatch.concat(parts) for level, parts in pending.items()}, rejected, read


def discovery_document(version, batches, rejected: Counter, messages: int, *, alpha: float, confidence: float,
                       max_candidates: int, window: dict | None = None) -> dict:
    from registry.discovery import discovery_of

    spec = discovery_of(version)
    started = time.perf_counter()
    result = discovery.discover(spec.domain, spec.params_by_level, batches, alpha=alpha, confidence=confidence,
                                max_candidates=max_candidates)
    seconds = time.perf_counter() - started
    doc = {
        "metric": version.metric,
        "version": version.version,
        "window": window,
        "messages": messages,
        "rejected": dict(sorted(rejected.items())),
        **result.to_json(),
        "decode_seconds": round(seconds, 3),
    }
    return doc


def _capture_messages(paths: list[str], damage: list):
    from producer.capture import CaptureReader

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


#: After the end offsets: fetch rounds (each waiting at most SWEEP_WAIT_MS) for what lies beyond them.
SWEEP_ROUNDS = 50
SWEEP_WAIT_MS = 300


async def read_topic_window(bootstrap: str, topic: str, start: datetime, stop: datetime, *,
                            idle_timeout_s: float = 5.0) -> list[bytes]:
    """Every message of ``topic`` with a timestamp in [start, stop): seek each partition by time, read to stop."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        await consumer.start()  # inside the try: a failed start is stopped too (no unclosed consumer)
        await consumer.topics()  # fetches the cluster metadata
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise OCMSError(f"--topic {topic}: no such topic on {bootstrap}")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        start_ms, stop_ms = int(start.timestamp() * 1000), int(stop.timestamp() * 1000)
        offsets = await consumer.offsets_for_times({tp: start_ms for tp in tps})
        ends = await consumer.end_offsets(tps)
        live = set()
        for tp in tps:
            found = offsets.get(tp)
            if found is None:
                continue  # nothing at or after start in this partition
            consumer.seek(tp, found.offset)
            if found.offset < ends[tp]:
                live.add(tp)
        out: list[bytes] = []
        past_window: set = set()

        def take(tp, records) -> None:
            for record in records:
                if record.timestamp >= stop_ms:
                    past_window.add(tp)  # past the window (timestamps are the producers' append times)
                    return
                if record.timestamp >= start_ms:
                    out.append(record.value)

        while live:
            batch = await consumer.getmany(*live, timeout_ms=int(idle_timeout_s * 1000))
            if not batch:
                break  # no progress within the idle timeout: the end is as far as the broker has
            for tp, records in batch.items():
                take(tp, records)
                if tp in past_window or records[-1].offset >= ends[tp] - 1:
                    live.discard(tp)  # past the window, or reached the end as it was when we started
        # A short sweep past those ends: records appended since (a producer's timestamp inside the
        # window may arrive late), and an end offset a broker under-reports (the embedded Tansu
        # broker does after multi-record producer batches) would otherwise cut the window short.
        sweep = {tp for tp in tps if offsets.get(tp) is not None} - past_window
        for _ in range(SWEEP_ROUNDS):
            if not sweep:
                break
            batch = await consumer.getmany(*sweep, timeout_ms=SWEEP_WAIT_MS)
            if not batch:
                break
            for tp, records in batch.items():
                take(tp, records)
            sweep -= past_window
        return out
    finally:
        await consumer.stop()


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

    version = _discoverable(args, metrics_from_args(args))

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
    from .query import json_answer

    # UTF-8 with every value as text (cms_core.values.value_record); encoded before --out is opened.
    text = json_answer(doc, indent=2)[0].decode("utf-8")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        from registry.output import write_stdout

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


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return value


def add_discover_parser(sub) -> None:
    """``ocms discover``: registered by agents/cli.py."""
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
    p.add_argument("--topic", default="ocms-reports", help="the reports topic (default ocms-reports)")
    p.add_argument("--alpha", type=_probability, default=0.05,
                   help="family-wise probability of any false discovery (default 0.05)")
    p.add_argument("--confidence", type=_probability, default=0.95, help="CI level of the estimates (default 0.95)")
    p.add_argument("--max-candidates", type=_positive, default=discovery.DEFAULT_MAX_CANDIDATES,
                   help="cap on candidates decoded per level (default %(default)s)")
    p.add_argument("--out", help="write the JSON here instead of stdout")
    p.add_argument("--promote", metavar="FILE.jsonl",
                   help="add the discovered (non-truncated) values to this tracked-values file, keeping its values")
    serve = p.add_argument_group("periodic discovery (--serve)")
    serve.add_argument("--serve", action="store_true", help="rediscover every --interval over the last --window of "
                       "the topic and serve /discovered?metric=NAME and /metrics until stopped")
    serve.add_argument("--window", type=_positive, metavar="SECONDS", help="window length (default 3600)")
    serve.add_argument("--interval", type=_positive, metavar="SECONDS", help="seconds between passes (default 300)")
    serve.add_argument("--web-host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--web-port", type=_positive, help="port of /discovered and /metrics (default 6067)")
    serve.add_argument("--export-top", type=_positive, default=DEFAULT_EXPORTED_VALUES,
                       help="discovered values exported per metric as Prometheus labels (default %(default)s)")
    p.set_defaults(func=cmd_discover)


# ------------------------------------------------------- periodic discovery (worker-hostable)

#: Discovered values exported per metric as Prometheus ``value`` labels (bounded cardinality).
DEFAULT_EXPORTED_VALUES = 10
#: Label values longer than this are cut (a discovered string can be long; labels should not be).
MAX_LABEL_LENGTH = 100


def discovery_pass(versions, bootstrap_servers: str, topic: str, start_ts: float, stop_ts: float, *, alpha: float,
                   confidence: float, max_candidates: int) -> tuple[dict[str, dict], dict[str, str]]:
    """One discovery pass: read [start, stop) of ``topic`` and discover every version's values.

    Returns (metric -> document, metric -> error). Synchronous and self-contained (its own event
    loop for the Kafka read), so it runs in a thread or in a child process alike.
    """
    import asyncio

    from registry.discovery import discovery_of

    stop = datetime.fromtimestamp(stop_ts, timezone.utc)
    start = datetime.fromtimestamp(start_ts, timezone.utc)
    messages = asyncio.run(read_topic_window(bootstrap_servers, topic, start, stop))
    window = {"from": start.isoformat(), "to": stop.isoformat(), "topic": topic}
    docs: dict[str, dict] = {}
    errors: dict[str, str] = {}
    for version in versions:
        spec = discovery_of(version)
        batches, rejected, read = group_by_level(spec, messages)
        # Other metrics' reports share the topic: only malformed messages are worth reporting here.
        rejected.pop("unknown_fingerprint", None)
        try:
            doc = discovery_document(version, batches, rejected, read, alpha=alpha, confidence=confidence,
                                     max_candidates=max_candidates, window=window)
        except OCMSError as exc:
            errors[version.metric] = str(exc)
            continue
        doc["computed_at"] = stop.isoformat()
        docs[version.metric] = doc
    return docs, errors


#: The child process of a pass runs this much nicer than the worker (intake and queries first).
DISCOVERY_NICENESS = 10
#: A pass in a child process may take max(this, 2 intervals) seconds (10^7 reports decode in ~250 s).
PASS_TIMEOUT_FLOOR_S = 900.0


def _child_pass(connection, arguments: tuple, keywords: dict) -> None:
    """Entry point of the child process of one pass: the result (or the error) goes back on ``connection``."""
    import os

    try:
        os.nice(DISCOVERY_NICENESS)
    except OSError:
        pass
    try:
        result = ("ok", discovery_pass(*arguments, **keywords))
    except BaseException as exc:  # reported to the parent, which keeps serving the previous result
        result = ("error", f"{type(exc).__name__}: {exc}")
    connection.send(result)
    connection.close()


async def pass_in_child(arguments: tuple, keywords: dict, timeout_seconds: float | None = None):
    """Run :func:`discovery_pass` in a fresh (spawned) child process and await its result.

    Why a process: the pass is seconds of Python (candidate prefixes, hashing, grouping the
    window's messages) that would hold the GIL, so in a thread of the worker it would stall
    intake and /healthz. The child is niced, its memory (the window's reports) is returned to
    the system when it exits, and it is killed if the awaiting task is cancelled (worker stop) or
    when it has not answered within ``timeout_seconds`` (an OCMSError saying so).
    """
    import asyncio
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # forking a running Faust worker copies its threads' locks
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child_pass, args=(sender, arguments, keywords), daemon=True,
                            name="ocms-discovery")
    child.start()
    sender.close()

    def wait():
        if not receiver.poll(timeout_seconds):
            child.kill()
            return ("error", f"the discovery pass took longer than {timeout_seconds:g} s and was stopped; "
                             "shorten the window (--discovery-window-seconds) or lower --max-candidates")
        try:
            return receiver.recv()  # EOFError when the child died without answering
        except EOFError:
            child.join(5)
            code = child.exitcode
            how = f"was ended by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
            return ("error", f"the discovery process {how} before answering")

    try:
        status, payload = await asyncio.get_running_loop().run_in_executor(None, wait)
    finally:
        if child.is_alive():
            child.kill()
        receiver.close()
        await asyncio.get_running_loop().run_in_executor(None, child.join)
    if status != "ok":
        raise OCMSError(payload)
    return payload


class DiscoveryService:
    """The latest discovery result per discoverable metric, refreshed from the source topic.

    Every ``interval_seconds`` (:meth:`run`), each metric version with a ``discovery:`` block
    is discovered over the window [now - window_seconds, now) of ``topic`` (read by time:
    Kafka keeps the log, nothing else is stored), one pass at a time, off the event loop: in a
    thread (``isolation="thread"``, ``ocms discover --serve``, where nothing else shares the
    loop) or in a child process (``"process"``, the worker: see :func:`pass_in_child`).
    :meth:`answer` serves ``/discovered?metric=NAME``; :class:`DiscoveryCollector` exports
    the top discovered values. Hosted by the worker (:class:`WorkerDiscovery`) or run alone.
    """

    def __init__(self, versions, *, bootstrap_servers: str, topic: str, window_seconds: int = 3600,
                 interval_seconds: float = 300.0, alpha: float = 0.05, confidence: float = 0.95,
                 max_candidates: int = discovery.DEFAULT_MAX_CANDIDATES, clock=time.time, isolation: str = "thread"):
        if isolation not in ("thread", "process"):
            raise ValueError(f"isolation {isolation!r}: thread or process")
        self.versions = {v.metric: v for v in versions if v.discovery is not None}
        self.bootstrap_servers, self.topic = bootstrap_servers, topic
        self.window_seconds, self.interval_seconds = int(window_seconds), float(interval_seconds)
        self.alpha, self.confidence, self.max_candidates = alpha, confidence, max_candidates
        self.clock = clock
        self.isolation = isolation
        self.latest: dict[str, dict] = {}
        self.errors: dict[str, str] = {}
        self.runs = 0
        self.last_pass_seconds: float | None = None
        #: A pass in a child process is stopped after this long (the next one starts on schedule).
        self.pass_timeout_seconds = max(PASS_TIMEOUT_FLOOR_S, 2 * self.interval_seconds)

    async def refresh_once(self, now: float | None = None) -> None:
        import asyncio

        now = self.clock() if now is None else now
        arguments = (list(self.versions.values()), self.bootstrap_servers, self.topic, now - self.window_seconds, now)
        keywords = dict(alpha=self.alpha, confidence=self.confidence, max_candidates=self.max_candidates)
        started = time.monotonic()
        if self.isolation == "process":
            docs, errors = await pass_in_child(arguments, keywords, self.pass_timeout_seconds)
        else:
            docs, errors = await asyncio.to_thread(discovery_pass, *arguments, **keywords)
        self.last_pass_seconds = time.monotonic() - started
        for metric, doc in docs.items():
            self.latest[metric] = doc
            self.errors.pop(metric, None)
        self.errors.update(errors)
        self.runs += 1

    async def run(self) -> None:
        """Refresh forever, one pass per interval (a failed pass is logged and retried next interval)."""
        import asyncio
        import logging

        while True:
            try:
                await self.refresh_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep the worker alive; the API says what failed
                logging.getLogger(__name__).warning("discovery pass failed: %s", exc)
                for metric in self.versions:
                    self.errors[metric] = f"discovery pass failed: {exc}"
            await asyncio.sleep(self.interval_seconds)

    def answer(self, metric: str | None) -> tuple[int, dict]:
        """(HTTP status, JSON document) for /discovered?metric=NAME."""
        if not metric:
            return 400, {"error": "query parameter 'metric' is required (a metric with a discovery: block: "
                                  f"{', '.join(sorted(self.versions)) or 'none configured'})", "status": 400}
        if metric not in self.versions:
            return 404, {"error": f"metric {metric!r} is not discoverable here (discoverable: "
                                  f"{', '.join(sorted(self.versions)) or 'none'})", "status": 404}
        if metric not in self.latest:
            default = ("discovery passes are off on this worker (--discovery-interval-seconds 0)"
                       if self.interval_seconds <= 0 else "the first discovery pass has not finished yet")
            why = self.errors.get(metric, default)
            return 503, {"error": why, "status": 503}
        doc = self.latest[metric]
        if metric in self.errors:  # the latest pass failed: the previous result, saying so
            doc = dict(doc, stale=True, error=self.errors[metric])
        return 200, doc


class DiscoveryCollector:
    """Prometheus: the top discovered values per metric (``value`` labels, at most ``top`` per metric)."""

    def __init__(self, service: DiscoveryService, top: int = DEFAULT_EXPORTED_VALUES):
        self.service, self.top = service, top

    def describe(self):
        """The families ``collect()`` yields (for no result yet)."""
        from types import SimpleNamespace

        from .metrics import families_without_samples

        return families_without_samples(DiscoveryCollector(SimpleNamespace(latest={}), self.top).collect())

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        frequency = GaugeMetricFamily("ocms_discovered_frequency", "estimated frequency of a discovered value",
                                      labels=["metric", "value"])
        low = GaugeMetricFamily("ocms_discovered_frequency_ci_low", "lower CI bound of a discovered value's frequency",
                                labels=["metric", "value"])
        high = GaugeMetricFamily("ocms_discovered_frequency_ci_high", "upper CI bound of a discovered value's frequency",
                                 labels=["metric", "value"])
        found = GaugeMetricFamily("ocms_discovered_values", "values discovered in the latest pass", labels=["metric"])
        omitted = GaugeMetricFamily("ocms_discovered_values_omitted", "discovered values not exported (beyond top)",
                                    labels=["metric"])
        reports = GaugeMetricFamily("ocms_discovery_reports", "discovery reports in the latest pass's window",
                                    labels=["metric"])
        threshold = GaugeMetricFamily("ocms_discovery_detection_threshold_ratio",
                                      "the frequency a value needed to be found (95%) in the latest pass's window",
                                      labels=["metric"])
        for metric, doc in sorted(self.service.latest.items()):
            values = doc["discovered"]
            found.add_metric([metric], float(len(values)))
            omitted.add_metric([metric], float(max(0, len(values) - self.top)))
            reports.add_metric([metric], float(doc["reports"]))
            needed = doc.get("detection_threshold")
            threshold.add_metric([metric], float("inf") if needed is None else needed)
            for item in values[: self.top]:
                label = item["value"][:MAX_LABEL_LENGTH]
                frequency.add_metric([metric, label], item["frequency"])
                low.add_metric([metric, label], item["ci_low"])
                high.add_metric([metric, label], item["ci_high"])
        yield from (frequency, low, high, found, omitted, reports, threshold)


def add_discovery_pages(app, service: DiscoveryService) -> None:
    """Route ``/discovered?metric=NAME`` on a Faust app (the worker's web server) and, when the service
    has discoverable metrics, the refresh task."""
    from .web import JSON_TYPE, to_json

    @app.page("/discovered")
    async def discovered(web, request):
        extra = sorted(set(request.query) - {"metric"})
        if extra:
            status, doc = 400, {"error": f"unknown query parameter {extra[0]!r}; /discovered takes 'metric'",
                                "status": 400}
        else:
            status, doc = service.answer(request.query.get("metric"))
        return web.bytes(to_json(doc), content_type=JSON_TYPE, status=status)

    if service.versions and service.interval_seconds > 0:
        @app.task
        async def refresh_discovery():
            await service.run()


class WorkerDiscovery:
    """Discovery hosted by the worker (``ocms worker --registry FILE``): what it accepts and what it serves.

    * ``level_params``: the discovery levels of the live versions of the registry's discoverable
      metrics. The worker's validator accepts their reports (acked, never dead-lettered as
      unknown fingerprints) and counts them in no table: they are read here, from the topic.
    * ``service``: a :class:`DiscoveryService` over the worker's source topic, passes in a child
      process every ``discovery_interval_seconds`` over the last ``discovery_window_seconds``.
    * ``install(app, registry)``: ``/discovered?metric=NAME`` on the worker's web server, the
      refresh task, the :class:`DiscoveryCollector` and a counter of the discovery reports seen.
    """

    def __init__(self, versions, level_params, settings):
        from prometheus_client import Counter

        self.level_params = tuple(level_params)
        self._metric_of = {}
        self.service = DiscoveryService(
            versions, bootstrap_servers=settings.bootstrap_servers, topic=settings.source_topic,
            window_seconds=getattr(settings, "discovery_window_seconds", 3600),
            interval_seconds=getattr(settings, "discovery_interval_seconds", 300.0), isolation="process")
        self.received = Counter("ocms_discovery_reports_received", "discovery-level reports the worker acked "
                                "(read by discovery from the topic, counted by no table)", ["metric"], registry=None)

    @classmethod
    def build(cls, catalog, settings) -> "WorkerDiscovery":
        """From the catalog's registry: the live versions with a ``discovery:`` block (none: nothing to do)."""
        from registry.discovery import discovery_of

        served = {s.version.fingerprint for s in catalog.by_fingerprint.values()}
        versions, levels, metric_of = [], [], {}
        for spec in catalog.registry.metrics:
            for version in spec.live_versions:
                if getattr(version, "discovery", None) is None or version.fingerprint not in served:
                    continue
                params = discovery_of(version).params_by_level
                levels.extend(params)
                metric_of.update({p.fingerprint: version.metric for p in params})
                if version is spec.live_versions[-1]:  # the newest live version is what devices report with
                    versions.append(version)
        self = cls(versions, levels, settings)
        self._metric_of = metric_of
        return self

    def install(self, app, metrics) -> None:
        """Routes on ``app``; the collector behind ``metrics.guard`` (agents.metrics.PipelineMetrics)."""
        add_discovery_pages(app, self.service)
        metrics.guard.add("discovery", DiscoveryCollector(self.service))
        metrics.registry.register(self.received)

    def count(self, messages) -> None:
        """Count the acked discovery messages of a checkpointed micro-batch (``processor.DiscoveryMessage``)."""
        for message in messages:
            self.received.labels(self._metric_of.get(message.fingerprint, "unknown")).inc(message.reports)


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
    from .query import ANSWER_RECORDS_DROPPED, to_json

    registry = CollectorRegistry()
    ExpositionGuard(registry).add("discovery", DiscoveryCollector(service, top))  # one bad series never fails /metrics
    registry.register(ANSWER_RECORDS_DROPPED)

    async def discovered(request):
        extra = sorted(set(request.query) - {"metric"})
        if extra:
            status, doc = 400, {"error": f"unknown query parameter {extra[0]!r}; /discovered takes 'metric'",
                                "status": 400}
        else:
            status, doc = service.answer(request.query.get("metric"))
        return web.Response(body=to_json(doc), status=status, content_type="application/json")

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
