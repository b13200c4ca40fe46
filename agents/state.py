"""The worker's aggregation as a pure fold, independent of Faust.

Table layout (one changelog-backed Faust table): key = ``BucketKey`` (parameter
fingerprint, source partition, bucket start in epoch seconds), value =
``PartialCounts`` (n, per-tracked-value match counts, and the highest source
offset folded into *this* key).

Exactness under at-least-once delivery: the offset lives in the same value as
the counts it produced and both are written in one table assignment per key and
micro-batch, so after a crash a replayed event whose offset is <= the stored
offset of its key is skipped, and every other event is counted exactly once.
Within one partition events arrive in offset order, which is what makes the
per-key maximum sufficient.

Counts are linear: any time range is the exact sum of its buckets, and the sum
over partitions of a bucket is the bucket's count for the whole topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from cms_core.errors import InvalidParameterError

NO_OFFSET = -1


@dataclass(frozen=True, order=True)
class BucketKey:
    fingerprint: str  # hex of OCMSParams.fingerprint
    partition: int
    bucket_start: int  # epoch seconds, a multiple of the bucket width

    def encode(self) -> str:
        return f"{self.fingerprint}:{self.partition}:{self.bucket_start}"

    @classmethod
    def decode(cls, text: str) -> "BucketKey":
        try:
            fingerprint, partition, start = text.split(":")
            return cls(fingerprint, int(partition), int(start))
        except ValueError:
            raise InvalidParameterError("bucket_key", text, "expected FINGERPRINT:PARTITION:BUCKET_START") from None


@dataclass(frozen=True)
class PartialCounts:
    """Integer state of one (parameter set, partition, bucket)."""

    n: int
    counts: tuple[int, ...]
    last_offset: int = NO_OFFSET

    @classmethod
    def empty(cls, tracked_count: int) -> "PartialCounts":
        return cls(0, (0,) * tracked_count, NO_OFFSET)

    def as_array(self) -> np.ndarray:
        return np.asarray(self.counts, dtype=np.int64)

    def to_json(self) -> dict:
        return {"n": self.n, "counts": list(self.counts), "last_offset": self.last_offset}

    @classmethod
    def from_json(cls, doc: dict) -> "PartialCounts":
        return cls(int(doc["n"]), tuple(int(c) for c in doc["counts"]), int(doc["last_offset"]))


def bucket_start(timestamp_s: float, width_s: int) -> int:
    """Start of the event-time bucket holding ``timestamp_s``."""
    return int(timestamp_s // width_s) * width_s


def already_counted(state: PartialCounts | None, offset: int) -> bool:
    """True for a replayed event (its offset is covered by the stored state)."""
    return state is not None and offset <= state.last_offset


def fold(state: PartialCounts | None, counts: np.ndarray, n: int, last_offset: int) -> PartialCounts:
    """New state after adding a micro-batch's match counts for one key.

    ``last_offset`` is the highest source offset among the batch's events for
    this key; it must move forward (a smaller one means the caller replayed
    events it should have skipped).
    """
    counts = np.asarray(counts, dtype=np.int64)
    if state is None:
        state = PartialCounts.empty(counts.shape[0])
    if len(state.counts) != counts.shape[0]:
        raise InvalidParameterError("counts", counts.shape[0], f"expected {len(state.counts)} tracked values")
    if last_offset <= state.last_offset:
        raise InvalidParameterError("last_offset", last_offset, f"must exceed the stored offset {state.last_offset}")
    if n < 0 or (counts.size and (counts.min() < 0 or counts.max() > n)):
        raise InvalidParameterError("counts", "...", "match counts must lie in [0, n]")
    return PartialCounts(state.n + int(n), tuple((state.as_array() + counts).tolist()), int(last_offset))


def total(states: Iterable[PartialCounts], tracked_count: int) -> tuple[int, np.ndarray]:
    """(n, counts) summed over states: partitions of a bucket, or buckets of a range."""
    n = 0
    counts = np.zeros(tracked_count, np.int64)
    for s in states:
        n += s.n
        counts += s.as_array()
    return n, counts
