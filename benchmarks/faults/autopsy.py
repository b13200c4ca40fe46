"""Where a failed schedule's counts went: the source topic against the changelog, per partition and metric.

Read after the run settled (before the broker stops), from the controller. For each source partition and
metric version (fingerprint):

* ``sent``: reports in the partition's frames, and the offset of its last frame;
* the cumulative member state (width 0) of the changelog, twice: the *latest* record of its table key (what a
  compacted log keeps, and Faust's plain recovery took) and the *newest* state (the highest offset: what the
  views and recovery now take);
* ``folded``: reports of the frames up to the newest state's offset (what it should hold).

A state whose n differs from ``folded`` is an inexact fold (a message counted twice or skipped below its
offset); a state whose offset is below the last frame's has not counted the tail (or skipped it for good,
when the committed offset is past it). Printed as a table; ``python -m benchmarks.faults.autopsy BOOTSTRAP``
reads a broker that is still running.
"""

from __future__ import annotations

import asyncio
import sys
from collections import defaultdict

from cms_core import wire


async def _read_all(bootstrap: str, topic: str, profile) -> dict[int, list]:
    from aiokafka import TopicPartition

    from infra.kafka import make_consumer

    consumer = make_consumer(bootstrap, profile=profile, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = sorted(consumer.partitions_for_topic(topic) or ())
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: dict[int, list] = {p: [] for p in partitions}
        async def behind() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in tps])

        empty = 0
        while await behind() or empty < 2:
            got = await consumer.getmany(timeout_ms=500, max_records=50_000)
            # Tansu's end offsets can be too low, never too high: read on until two fetches find nothing
            empty = 0 if got else empty + 1
            for tp, records in got.items():
                out[tp.partition].extend(records)
        return out
    finally:
        await consumer.stop()


def examine(bootstrap: str, profile, source: str = "ocms-reports",
            changelog: str = "ocms-worker-ocms-counts-changelog") -> list[str]:
    from agents.state import StateKey, decode_bundle, read_codec

    sources = asyncio.run(_read_all(bootstrap, source, profile))
    records = asyncio.run(_read_all(bootstrap, changelog, profile))
    frames: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)  # (partition, fp) -> (offset, reports)
    for partition, messages in sources.items():
        for m in messages:
            try:
                _, fingerprint, count = wire.peek_header(m.value)
            except Exception:  # noqa: BLE001 - not a frame: the worker's dead letters
                continue
            frames[(partition, fingerprint.hex())].append((m.offset, count))
    latest: dict[tuple[int, str], tuple[int, int]] = {}
    newest: dict[tuple[int, str], tuple[int, int]] = {}
    history: dict[tuple[int, str], list[tuple[int, int, int, int]]] = defaultdict(list)  # changelog offset, ts, n, at
    for _, log in records.items():
        for r in log:
            try:
                key = StateKey.decode(r.key)
            except Exception:  # noqa: BLE001
                continue
            if key.width != 0:
                continue
            if r.value is None:
                continue
            for fp, raw in decode_bundle(r.value).items():
                n, _, last, _, _ = read_codec(raw)
                slot = (key.partition, fp)
                history[slot].append((r.offset, r.timestamp, n, last))
                latest[slot] = (n, last)
                if slot not in newest or last >= newest[slot][1]:
                    newest[slot] = (n, last)
    lines = [f"{'partition':>9} {'fingerprint':>16} {'sent':>8} {'last frame':>10} {'newest n':>9} {'at':>6} "
             f"{'folded':>8} {'latest n':>9} {'at':>6}  verdict"]
    for slot in sorted(set(frames) | set(newest)):
        partition, fp = slot
        sent = sum(c for _, c in frames.get(slot, ()))
        last_frame = max((o for o, _ in frames.get(slot, ())), default=-1)
        n, at = newest.get(slot, (0, -1))
        folded = sum(c for o, c in frames.get(slot, ()) if o <= at)
        ln, lat = latest.get(slot, (0, -1))
        verdict = []
        if n != folded:
            verdict.append(f"inexact fold ({n - folded:+d})")
        if at < last_frame:
            verdict.append(f"tail not counted ({sent - folded} reports after offset {at})")
        if (ln, lat) != (n, at):
            verdict.append("latest record is not the newest")
        lines.append(f"{partition:>9} {fp:>16} {sent:>8} {last_frame:>10} {n:>9} {at:>6} {folded:>8} {ln:>9} {lat:>6}  "
                     + ("; ".join(verdict) or "ok"))
    for slot in sorted(history):
        sent = frames.get(slot, ())
        previous = None
        for offset, timestamp, n, at in history[slot]:
            folded = sum(c for o, c in sent if o <= at)
            if n != folded:
                lines.append(f"partition {slot[0]} {slot[1]}: first inexact record at changelog offset {offset} "
                             f"(written {timestamp / 1000:.3f}): n {n} at source offset {at}, folded {folded}; the "
                             f"record before it: {previous}")
                break
            previous = (offset, timestamp / 1000, n, at)
    return lines


if __name__ == "__main__":  # pragma: no cover - a debugging aid
    from infra.kafka import EMBEDDED

    print("\n".join(examine(sys.argv[1], EMBEDDED)))
