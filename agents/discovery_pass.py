"""One discovery pass (docs/discovery.md): reports in, a discovery document out.

    batches, rejected, read = group_by_level(spec, messages)       # capture files, or a topic window
    doc = discovery_document(version, batches, rejected, read, alpha=0.05, confidence=0.95, max_candidates=1000)
    docs, errors = discovery_pass(versions, bootstrap, topic, start_ts, stop_ts, ...)   # a window of the topic
    docs, errors = await pass_in_child((versions, bootstrap, topic, start_ts, stop_ts), keywords, timeout)

Reports are grouped by fingerprint into the metric version's levels; a message of
any other fingerprint (another metric, an unknown level) or a malformed one is
counted under ``rejected`` by reason and never decoded. The numerics are
:func:`cms_core.discovery.discover`; this module only reads. ``ocms discover``
(agents/discover_cli.py) and the periodic service (agents/discovery.py) both use it.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timezone
from typing import Iterable

from cms_core import discovery, wire
from cms_core.errors import OCMSError
from cms_core.reports import ReportBatch


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


#: After the end offsets: fetch rounds (each waiting at most SWEEP_WAIT_MS) for what lies beyond them.
SWEEP_ROUNDS = 50
SWEEP_WAIT_MS = 300


async def read_topic_window(bootstrap: str, topic: str, start: datetime, stop: datetime, *,
                            idle_timeout_s: float = 5.0) -> list[bytes]:
    """Every message of ``topic`` with a timestamp in [start, stop): seek each partition by time, read to stop."""
    from aiokafka import TopicPartition

    from infra.kafka import make_consumer

    consumer = make_consumer(bootstrap)
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
