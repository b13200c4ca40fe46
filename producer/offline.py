"""Offline estimation from capture files: audits, batch reprocessing, and the
reference the streaming worker must agree with (same decode, same counts).

Every message is decoded with the shared wire codec; a message that fails
validation is counted under its reason and never touches the sketch.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

from cms_core import OCMSParams, OCMSSketch, TrackedValues, wire
from cms_core.reports import ReportBatch

from .capture import read_capture


def sketch_from_messages(
    params: OCMSParams, tracked: TrackedValues, messages: Iterable[bytes], *, batch_reports: int = 200_000,
) -> tuple[OCMSSketch, Counter]:
    """Decode messages into a sketch; returns (sketch, rejected-by-reason)."""
    registry = {params.fingerprint: params}
    sketch = OCMSSketch(params, tracked)
    rejected: Counter = Counter()
    pending: list[ReportBatch] = []
    size = 0
    for message in messages:
        try:
            _, batch = wire.decode_message(message, registry)
        except wire.WireFormatError as exc:
            rejected[exc.reason] += 1
            continue
        pending.append(batch)
        size += len(batch)
        if size >= batch_reports:
            sketch.update(ReportBatch.concat(pending))
            pending, size = [], 0
    if pending:
        sketch.update(ReportBatch.concat(pending))
    return sketch, rejected


def sketch_from_captures(params: OCMSParams, tracked: TrackedValues, paths: Iterable[str | Path]) -> tuple[OCMSSketch, Counter]:
    def messages():
        for path in paths:
            yield from read_capture(path)

    return sketch_from_messages(params, tracked, messages())
