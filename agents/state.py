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

Shuffled reports (frames of a shuffling collector, header ``ocms-shuffle-n``; docs/collector.md)
are accounted beside the counts: ``shuffled`` (reports that came through a shuffle: a sum, exact
under replay like n) and ``shuffle_min`` (the smallest shuffled batch any of them came in; 0 for
none: a minimum, idempotent, so exact under replay too). A range's are the sum and the minimum
over its states; its central epsilon is that of its smallest batch (agents.query).
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
#: Version 2 (written only when some report came through a shuffle): the v1 header, then shuffled, shuffle_min.
_CODEC_SHUFFLED = struct.Struct("<qq")
_CODEC_VERSION_SHUFFLED = 2


def smallest_batch(a: int, b: int) -> int:
    """The smaller of two shuffled batch sizes, 0 meaning none."""
    return min(a, b) if a and b else a or b


class PartialCounts:
    """Integer state of one (parameter set, partition, bucket): immutable."""

    __slots__ = ("n", "counts", "last_offset", "shuffled", "shuffle_min")

    def __init__(self, n: int, counts, last_offset: int = NO_OFFSET, shuffled: int = 0, shuffle_min: int = 0):
        array = np.array(counts, dtype=np.int64)  # a private copy, then frozen
        array.flags.writeable = False
        self.n = int(n)
        self.counts = array
        self.last_offset = int(last_offset)
        self.shuffled = int(shuffled)  # reports that came through a shuffling collector
        self.shuffle_min = int(shuffle_min)  # the smallest shuffled batch among them (0: none)

    @classmethod
    def empty(cls, tracked_count: int) -> "PartialCounts":
        return cls(0, np.zeros(tracked_count, np.int64), NO_OFFSET)

    def as_array(self) -> np.ndarray:
        return self.counts

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, PartialCounts)
            and (self.n, self.last_offset, self.shuffled, self.shuffle_min)
            == (other.n, other.last_offset, other.shuffled, other.shuffle_min)
            and np.array_equal(self.counts, other.counts)
        )

    __hash__ = None

    def __repr__(self) -> str:
        shuffled = f", shuffled={self.shuffled} (min batch {self.shuffle_min})" if self.shuffled else ""
        return f"PartialCounts(n={self.n}, D={self.counts.shape[0]}, last_offset={self.last_offset}{shuffled})"

    def to_bytes(self) -> bytes:
        """Compact table value: 24-byte header (+ 16 bytes of shuffle accounting when some report was
        shuffled: version 2) + counts (uint32 while n < 2^32)."""
        width = 4 if self.n < 2**32 else 8
        version = _CODEC_VERSION_SHUFFLED if self.shuffled else _CODEC_VERSION
        header = _CODEC.pack(_CODEC_MAGIC, version, width, self.n, self.last_offset, self.counts.shape[0])
        if self.shuffled:
            header += _CODEC_SHUFFLED.pack(self.shuffled, self.shuffle_min)
        return header + self.counts.astype("<u4" if width == 4 else "<i8").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "PartialCounts":
        n, counts, last_offset, shuffled, shuffle_min = read_codec(data)
        return cls(n, counts, last_offset, shuffled, shuffle_min)

    def to_json(self) -> dict:
        return {"n": self.n, "counts": self.counts.tolist(), "last_offset": self.last_offset,
                "shuffled": self.shuffled, "shuffle_min": self.shuffle_min}

    @classmethod
    def from_json(cls, doc: dict) -> "PartialCounts":
        return cls(int(doc["n"]), [int(c) for c in doc["counts"]], int(doc["last_offset"]),
                   int(doc.get("shuffled", 0)), int(doc.get("shuffle_min", 0)))


def read_codec(data: bytes) -> tuple[int, np.ndarray, int, int, int]:
    """(n, counts as a read-only view of ``data``, last_offset, shuffled, shuffle_min) of a table value, checked."""
    if len(data) < _CODEC.size:
        raise SerializationError(f"table value of {len(data)} bytes is shorter than its header")
    magic, version, width, n, last_offset, d = _CODEC.unpack_from(data)
    if magic != _CODEC_MAGIC or version not in (_CODEC_VERSION, _CODEC_VERSION_SHUFFLED) or width not in (4, 8):
        raise SerializationError("not a PartialCounts v1/v2 table value")
    head, shuffled, shuffle_min = _CODEC.size, 0, 0
    if version == _CODEC_VERSION_SHUFFLED:
        if len(data) < head + _CODEC_SHUFFLED.size:
            raise SerializationError(f"table value of {len(data)} bytes is shorter than its v2 header")
        shuffled, shuffle_min = _CODEC_SHUFFLED.unpack_from(data, head)
        head += _CODEC_SHUFFLED.size
        if not 0 < shuffled <= n or shuffle_min < 1:
            raise SerializationError(f"table value says {shuffled} of {n} reports shuffled in batches of at least "
                                     f"{shuffle_min}")
    if len(data) != head + d * width:
        raise SerializationError(f"table value has {len(data)} bytes, expected {head + d * width}")
    counts = np.frombuffer(data, "<u4" if width == 4 else "<i8", count=d, offset=head)
    return n, counts, last_offset, shuffled, shuffle_min


def bucket_start(timestamp_s: float, width_s: int) -> int:
    """Start of the event-time bucket of width ``width_s`` holding ``timestamp_s``."""
    return int(timestamp_s // width_s) * width_s


def already_counted(state: PartialCounts | None, offset: int) -> bool:
    """True for a replayed event (its offset is covered by the stored state)."""
    return state is not None and offset <= state.last_offset


def fold(state: PartialCounts | None, counts: np.ndarray, n: int, last_offset: int, shuffled: int = 0,
         shuffle_min: int = 0) -> PartialCounts:
    """New state after adding a micro-batch's match counts for one key.

    ``last_offset`` is the highest source offset among the batch's events for
    this key; it must move forward (a smaller one means the caller replayed
    events it should have skipped). ``shuffled`` of the ``n`` reports came through
    a shuffle, in batches of at least ``shuffle_min`` reports.
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
    if not 0 <= shuffled <= n or (shuffled and shuffle_min < 1):
        raise InvalidParameterError("shuffled", shuffled, f"must lie in [0, n={n}], with a batch size >= 1")
    return PartialCounts(state.n + int(n), state.counts + counts, int(last_offset), state.shuffled + int(shuffled),
                         smallest_batch(state.shuffle_min, int(shuffle_min) if shuffled else 0))


def total(states: Iterable[PartialCounts], tracked_count: int) -> tuple[int, np.ndarray]:
    """(n, counts) summed over states: partitions of a bucket, or buckets of a range."""
    n = 0
    counts = np.zeros(tracked_count, np.int64)
    for s in states:
        n += s.n
        counts += s.counts
    return n, counts
