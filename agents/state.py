"""The worker's aggregation as a pure fold, independent of Faust.

Table layout (one changelog-backed Faust table): key = ``BucketKey`` (parameter
fingerprint, source partition, bucket width, bucket start in epoch seconds),
value = ``PartialCounts`` (n, per-tracked-value match counts, and the highest
source offset folded into *this* key). Width ``TOTAL_WIDTH`` (0) is the
cumulative key of a partition: every accepted report of the partition, since
aggregation began.

Exactness under at-least-once delivery: the offset lives in the same value as
the counts it produced and both are written in one table assignment per key and
micro-batch, so after a crash a replayed event whose offset is <= the stored
offset of its key is skipped, and every other event is counted exactly once.
Within one partition events arrive in offset order and every event of a key up
to a flush is folded by that flush, which is what makes the per-key maximum
sufficient (each key decides for itself, so a crash between the writes of two
keys of one batch is also exact).

Counts are linear: any time range is the exact sum of its buckets, and the sum
over partitions of a bucket is the bucket's count for the whole topic.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from cms_core.errors import InvalidParameterError, SerializationError

NO_OFFSET = -1
TOTAL_WIDTH = 0  # bucket width of the cumulative (all-time) key


@dataclass(frozen=True, order=True)
class BucketKey:
    fingerprint: str  # hex of OCMSParams.fingerprint
    partition: int
    width: int  # bucket width in seconds; TOTAL_WIDTH for the cumulative key
    bucket_start: int  # epoch seconds, a multiple of the width (0 for the cumulative key)

    @classmethod
    def total(cls, fingerprint: str, partition: int) -> "BucketKey":
        return cls(fingerprint, partition, TOTAL_WIDTH, 0)

    @property
    def is_total(self) -> bool:
        return self.width == TOTAL_WIDTH

    def encode(self) -> bytes:
        return f"{self.fingerprint}:{self.partition}:{self.width}:{self.bucket_start}".encode("ascii")

    @classmethod
    def decode(cls, raw: bytes | str) -> "BucketKey":
        try:
            text = raw.decode("ascii") if isinstance(raw, (bytes, bytearray)) else raw
            fingerprint, partition, width, start = text.split(":")
            key = cls(fingerprint, int(partition), int(width), int(start))
        except (ValueError, UnicodeDecodeError):
            raise InvalidParameterError("bucket_key", raw, "expected FINGERPRINT:PARTITION:WIDTH:BUCKET_START") from None
        if key.partition < 0 or key.width < 0 or (key.width and key.bucket_start % key.width):
            raise InvalidParameterError("bucket_key", raw, "partition and width must be >= 0, start a multiple of width")
        return key


_CODEC = struct.Struct("<2sBBqqI")  # magic, version, count width (4/8), n, last_offset, D
_CODEC_MAGIC = b"PC"
_CODEC_VERSION = 1


class PartialCounts:
    """Integer state of one (parameter set, partition, bucket): immutable."""

    __slots__ = ("n", "counts", "last_offset")

    def __init__(self, n: int, counts, last_offset: int = NO_OFFSET):
        array = np.array(counts, dtype=np.int64)  # a private copy, then frozen
        array.flags.writeable = False
        self.n = int(n)
        self.counts = array
        self.last_offset = int(last_offset)

    @classmethod
    def empty(cls, tracked_count: int) -> "PartialCounts":
        return cls(0, np.zeros(tracked_count, np.int64), NO_OFFSET)

    def as_array(self) -> np.ndarray:
        return self.counts

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, PartialCounts)
            and (self.n, self.last_offset) == (other.n, other.last_offset)
            and np.array_equal(self.counts, other.counts)
        )

    __hash__ = None

    def __repr__(self) -> str:
        return f"PartialCounts(n={self.n}, D={self.counts.shape[0]}, last_offset={self.last_offset})"

    def to_bytes(self) -> bytes:
        """Compact table value: 24-byte header + counts (uint32 while n < 2^32)."""
        width = 4 if self.n < 2**32 else 8
        header = _CODEC.pack(_CODEC_MAGIC, _CODEC_VERSION, width, self.n, self.last_offset, self.counts.shape[0])
        return header + self.counts.astype("<u4" if width == 4 else "<i8").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "PartialCounts":
        if len(data) < _CODEC.size:
            raise SerializationError(f"table value of {len(data)} bytes is shorter than its header")
        magic, version, width, n, last_offset, d = _CODEC.unpack_from(data)
        if magic != _CODEC_MAGIC or version != _CODEC_VERSION or width not in (4, 8):
            raise SerializationError("not a PartialCounts v1 table value")
        if len(data) != _CODEC.size + d * width:
            raise SerializationError(f"table value has {len(data)} bytes, expected {_CODEC.size + d * width}")
        counts = np.frombuffer(data, "<u4" if width == 4 else "<i8", count=d, offset=_CODEC.size)
        return cls(n, counts, last_offset)

    def to_json(self) -> dict:
        return {"n": self.n, "counts": self.counts.tolist(), "last_offset": self.last_offset}

    @classmethod
    def from_json(cls, doc: dict) -> "PartialCounts":
        return cls(int(doc["n"]), [int(c) for c in doc["counts"]], int(doc["last_offset"]))


def bucket_start(timestamp_s: float, width_s: int) -> int:
    """Start of the event-time bucket of width ``width_s`` holding ``timestamp_s``."""
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
    if state.counts.shape[0] != counts.shape[0]:
        raise InvalidParameterError("counts", counts.shape[0], f"expected {state.counts.shape[0]} tracked values")
    if last_offset <= state.last_offset:
        raise InvalidParameterError("last_offset", last_offset, f"must exceed the stored offset {state.last_offset}")
    if n < 0 or (counts.size and (counts.min() < 0 or counts.max() > n)):
        raise InvalidParameterError("counts", "...", "match counts must lie in [0, n]")
    return PartialCounts(state.n + int(n), state.counts + counts, int(last_offset))


def total(states: Iterable[PartialCounts], tracked_count: int) -> tuple[int, np.ndarray]:
    """(n, counts) summed over states: partitions of a bucket, or buckets of a range."""
    n = 0
    counts = np.zeros(tracked_count, np.int64)
    for s in states:
        n += s.n
        counts += s.counts
    return n, counts
