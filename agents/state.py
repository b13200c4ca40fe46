"""The worker's aggregation as a pure fold, independent of Faust, and how its state is stored.

A *member key* (``BucketKey``: parameter fingerprint, source partition, bucket width, bucket
start in epoch seconds) names one metric version's counts in one partition and bucket; its
state is a ``PartialCounts`` (n, per-tracked-value match counts, and the highest source offset
folded into *this* member key). Width ``TOTAL_WIDTH`` (0) is the cumulative key of a
partition: every accepted report of the partition, since aggregation began.

Table layout (one changelog-backed Faust table): key = ``StateKey`` (a *group* of metric
versions, source partition, bucket width, that level's retention, bucket start), value = a
*bundle*: the PartialCounts of every member key of the group in that partition and bucket,
each with its own offset. A metric version's group is fixed by its fingerprint (and D): one of
``STATE_GROUPS`` groups by hash, or a group of its own when its counts are large
(``SOLO_TRACKED``). Why bundles: a checkpoint writes one changelog record per touched table
key, and each record costs a produce request on the embedded broker (one-record batches), a
table write and a view update whatever its size; with one key per metric version that cost
grew with the number of metrics (issue 30). Bundles bound it by the number of groups.

Exactness under at-least-once delivery: the offset lives in the same value as the counts it
produced and both are written in one table assignment per table key and micro-batch, so
after a crash a replayed event whose offset is <= the stored offset of its member key is
skipped, and every other event is counted exactly once. Within one partition events arrive
in offset order and every event of a key up to a flush is folded by that flush, which is what
makes the per-key maximum sufficient (each member key decides for itself, so a crash between
the writes of two table keys of one batch is also exact). A bundle is rewritten whole, with
the members the batch did not touch carried over byte for byte.

Counts are linear: any time range is the exact sum of its buckets, and the sum
over partitions of a bucket is the bucket's count for the whole topic.

Shuffled reports (frames of a shuffling collector, header ``ocms-shuffle-n``; docs/collector.md)
are accounted beside the counts: ``shuffled`` (reports that came through a shuffle: a sum, exact
under replay like n), ``shuffle_min`` and ``shuffle_max`` (the smallest and the largest shuffled batch
any of them came in; 0 for none: a minimum and a maximum, idempotent, so exact under replay too). A
range's are the sum, the minimum and the maximum over its states; its central epsilon is that of its
smallest batch at a delta below 1/N of its largest (agents.answers.privacy). Only claims the worker verified
count (agents.trust): values written before claims were signed (codec version 2) are read as holding
no shuffled report.
"""

from __future__ import annotations

import hashlib
import struct
from contextlib import contextmanager
from typing import Iterable, Mapping, NamedTuple

import numpy as np

from cms_core.errors import InvalidParameterError, SerializationError

NO_OFFSET = -1
TOTAL_WIDTH = 0  # bucket width of the cumulative (all-time) key


class BucketKey(NamedTuple):
    """A member key. A named tuple, not a dataclass: a checkpoint builds and hashes thousands of them
    (hundreds of metrics x partitions x levels), and a tuple's hash and equality run in C."""

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


#: Metric versions share table keys in about this many groups (by a hash of the metric's name,
#: so every version of a metric is in one group). Part of the stored layout: a changelog written
#: with another value needs a new app id.
STATE_GROUPS = 16
#: A metric version with at least this many tracked values has table keys of its own (in its
#: metric's group), so no bundle grows past a Kafka record's size (1 MB by default).
SOLO_TRACKED = 4096
FINGERPRINT_BYTES = 8  # OCMSParams.fingerprint: 16 hex digits


def group_count(partitions: int) -> int:
    """Groups of a changelog of ``partitions`` partitions: the least multiple of it >= STATE_GROUPS,
    so every shard (agents.shards: group number mod partitions) gets as many groups."""
    return partitions * -(-STATE_GROUPS // partitions)


def group_number(metric: str, partitions: int) -> int:
    """The group of every version of a metric (a hash of its name)."""
    digest = hashlib.blake2b(metric.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % group_count(partitions)


def group_of(metric: str, fingerprint: str, tracked_count: int, partitions: int) -> str:
    """The group token of a metric version: ``g<N>`` (shared), or ``g<N>-<fingerprint>`` (large D)."""
    number = group_number(metric, partitions)
    return f"g{number}" if tracked_count < SOLO_TRACKED else f"g{number}-{fingerprint}"


def group_number_of(group: str) -> int:
    return int(group[1:].partition("-")[0])


def pack_groups(weights: Mapping[int, float], groups: int, partitions: int) -> list[int]:
    """The shard of each group number: the heaviest group first onto the lightest shard (ties: the lower
    number), so shards hold about equal counts whatever the hash gave each group. Deterministic: every
    worker serving the same registry computes the same shards."""
    load = [0.0] * partitions
    shards = [0] * groups
    for group in sorted(range(groups), key=lambda g: (-weights.get(g, 0.0), g)):
        shard = min(range(partitions), key=lambda s: (load[s], s))
        shards[group] = shard
        load[shard] += weights.get(group, 0.0)
    return shards


def _valid_group(group: str) -> bool:
    number, dash, fingerprint = group[1:].partition("-")
    return group.startswith("g") and number.isdigit() and (not dash or (
        len(fingerprint) == 2 * FINGERPRINT_BYTES and all(c in "0123456789abcdef" for c in fingerprint)))


class StateKey(NamedTuple):
    """A table key: one group of metric versions in one source partition and bucket (a named tuple,
    like BucketKey)."""

    group: str  # "g<N>" or "g<N>-<fingerprint>" (group_of)
    partition: int
    width: int  # bucket width in seconds; TOTAL_WIDTH for the cumulative key
    retention: int  # the level's retention in seconds (0 for the cumulative key): keys expire whole
    bucket_start: int

    @property
    def is_total(self) -> bool:
        return self.width == TOTAL_WIDTH

    @property
    def expires_at(self) -> float:
        """When the bucket is wholly older than its level's retention (cumulative keys never expire)."""
        return float("inf") if self.is_total else float(self.bucket_start + self.width + self.retention)

    def member(self, fingerprint: str) -> BucketKey:
        return BucketKey(fingerprint, self.partition, self.width, self.bucket_start)

    def encode(self) -> bytes:
        return f"{self.group}:{self.partition}:{self.width}:{self.retention}:{self.bucket_start}".encode("ascii")

    @staticmethod
    def group_prefix(raw: bytes) -> str:
        """The group token of an encoded key, without decoding the rest (the view drops others' records early)."""
        return raw.split(b":", 1)[0].decode("ascii", "replace")

    @classmethod
    def decode(cls, raw: bytes | str) -> "StateKey":
        try:
            text = raw.decode("ascii") if isinstance(raw, (bytes, bytearray)) else raw
            group, partition, width, retention, start = text.split(":")
            key = cls(group, int(partition), int(width), int(retention), int(start))
        except (ValueError, UnicodeDecodeError):
            raise InvalidParameterError("state_key", raw, "expected GROUP:PARTITION:WIDTH:RETENTION:BUCKET_START") from None
        if not _valid_group(group) or key.partition < 0 or key.width < 0 or key.retention < 0 or (
                key.width and key.bucket_start % key.width):
            raise InvalidParameterError("state_key", raw, "group g<N>[-FINGERPRINT]; partition, width and retention "
                                                          ">= 0; start a multiple of width")
        return key


class StateLayout:
    """Where a member key's state is stored, and which shard serves it.

    ``levels`` fingerprint -> ((width, retention), ...), ``tracked_sizes`` fingerprint -> D of every
    metric version served, ``partitions`` of the changelog, ``metric_of`` fingerprint -> metric name
    (default: the fingerprint itself). A group's shard (agents.shards: the source partition whose
    owner's view holds it) packs the groups by the counts they hold (D x buckets kept)."""

    def __init__(self, levels: Mapping[str, Iterable[tuple[int, int]]], tracked_sizes: Mapping[str, int],
                 partitions: int = 4, metric_of: Mapping[str, str] | None = None):
        self.partitions = partitions
        self.retention = {fp: dict(lv) for fp, lv in levels.items()}
        metric_of = metric_of or {}
        self.metric_of = {fp: metric_of.get(fp, fp) for fp in tracked_sizes}
        self.groups = {fp: group_of(self.metric_of[fp], fp, d, partitions) for fp, d in tracked_sizes.items()}
        weights: dict[int, float] = {}
        for fp, d in tracked_sizes.items():
            buckets = 1 + sum(retention // width + 1 for width, retention in self.retention[fp].items())
            number = group_number_of(self.groups[fp])
            weights[number] = weights.get(number, 0.0) + d * buckets
        self.shards = pack_groups(weights, group_count(partitions), partitions)

    def key_of(self, key: BucketKey) -> StateKey:
        retention = 0 if key.is_total else self.retention[key.fingerprint][key.width]
        return StateKey(self.groups[key.fingerprint], key.partition, key.width, retention, key.bucket_start)

    def shard_of_group(self, group: str) -> int:
        """The shard of a group token (a number beyond this layout's groups: by the number, mod partitions)."""
        number = group_number_of(group)
        return self.shards[number] if number < len(self.shards) else number % self.partitions

    def shard_of_metric(self, metric: str) -> int:
        return self.shards[group_number(metric, self.partitions)]

    def shard_of_fingerprint(self, fingerprint: str) -> int:
        return self.shard_of_group(self.groups[fingerprint])


_BUNDLE = struct.Struct("<2sBI")  # magic, version, members
_BUNDLE_MAGIC = b"SB"
_BUNDLE_VERSION = 1
_MEMBER = struct.Struct(f"<{FINGERPRINT_BYTES}sI")  # fingerprint, length of its PartialCounts bytes


def encode_bundle(members: Mapping[str, bytes]) -> bytes:
    """A table value: fingerprint hex -> that member's PartialCounts bytes (in fingerprint order)."""
    parts = [_BUNDLE.pack(_BUNDLE_MAGIC, _BUNDLE_VERSION, len(members))]
    for fingerprint in sorted(members):
        raw = members[fingerprint]
        parts += [_MEMBER.pack(bytes.fromhex(fingerprint), len(raw)), raw]
    return b"".join(parts)


def decode_bundle(data: bytes) -> dict[str, bytes]:
    """Fingerprint hex -> member PartialCounts bytes (unchecked: PartialCounts.from_bytes checks each)."""
    view = memoryview(data)
    return {fp: bytes(view[start:start + length]) for fp, (start, length) in _bundle_places(data).items()}


def _bundle_places(data) -> dict[str, tuple[int, int]]:
    """Fingerprint hex -> (start, length) of each member's PartialCounts bytes in a table value, checked."""
    if len(data) < _BUNDLE.size:
        raise SerializationError(f"table value of {len(data)} bytes is shorter than its header")
    magic, version, count = _BUNDLE.unpack_from(data)
    if magic != _BUNDLE_MAGIC or version != _BUNDLE_VERSION:
        raise SerializationError("not a counts bundle v1 table value")
    places, offset = {}, _BUNDLE.size
    for _ in range(count):
        if offset + _MEMBER.size > len(data):
            raise SerializationError("counts bundle ends inside a member header")
        fingerprint, length = _MEMBER.unpack_from(data, offset)
        offset += _MEMBER.size
        if offset + length > len(data):
            raise SerializationError("counts bundle ends inside a member's counts")
        places[fingerprint.hex()] = (offset, length)
        offset += length
    if offset != len(data):
        raise SerializationError(f"counts bundle has {len(data) - offset} bytes after its last member")
    return places


def member_offsets(data: bytes) -> dict[str, int]:
    """Fingerprint hex -> the highest source offset of each member of a table value (checked)."""
    return {fp: _codec_header(data, start, length)[3] for fp, (start, length) in _bundle_places(data).items()}


def newest_bundle(held: bytes, written: bytes) -> bytes:
    """The table value that holds, member by member, the newer of two values of one table key: ``written``
    itself when every member of ``held`` is in it and none is older (the common case: returned as is), else
    a bundle of the newest state of each member.

    Why it is exact: a member's state is a function of its highest source offset (every message of the
    partition up to it that touches the member, each counted once), so the one with the higher offset holds
    everything the other does, whichever worker wrote it: a worker that stalled past its session and wrote
    after the partition's new owner (issue 35, 5) wrote the older one. A bundle never drops a member (only a
    tombstone deletes a key), so a member missing from one of the two is older there. Values that are not
    bundles are not merged: ``written`` is returned, to be refused where it is read."""
    try:
        old, new = _bundle_places(held), _bundle_places(written)
        old_offsets = {fp: _codec_header(held, *place)[3] for fp, place in old.items()}
        new_offsets = {fp: _codec_header(written, *place)[3] for fp, place in new.items()}
    except SerializationError:
        return written
    keep_old = [fp for fp, offset in old_offsets.items() if fp not in new_offsets or offset > new_offsets[fp]]
    if not keep_old:
        return written
    members = {fp: bytes(written[start:start + length]) for fp, (start, length) in new.items()}
    members.update({fp: bytes(held[old[fp][0]:old[fp][0] + old[fp][1]]) for fp in keep_old})
    return encode_bundle(members)


_U4, _I8 = np.dtype("<u4"), np.dtype("<i8")  # stored count widths
_CODEC = struct.Struct("<2sBBqqI")  # magic, version, count width (4/8), n, last_offset, D
_CODEC_MAGIC = b"PC"
_CODEC_VERSION = 1
#: Version 3 (written only when some report came through a shuffle whose claim verified): the v1 header, then
#: shuffled, shuffle_min, shuffle_max.
_CODEC_SHUFFLED = struct.Struct("<qqq")
_CODEC_VERSION_SHUFFLED = 3
#: Version 2 (before shuffle claims were signed: issue 37): the v1 header, then shuffled, shuffle_min (16 bytes),
#: read, never written; its claims were not verified, so its reports count as not shuffled.
_CODEC_VERSION_UNSIGNED = 2
_UNSIGNED_SIZE = 16
#: Versions 4 and 5 (after release 0.2.0): the layouts of versions 1 and 3 with counts as narrow as n allows,
#: 2 bytes while n < 2^16 (most minute and hour buckets: their changelog records are about half as large), else
#: 4 while n < 2^32, else 8. A 0.2.0 worker refuses them, so a worker writes them only without --upgrade-from.
_CODEC_VERSION_NARROW = 4
_CODEC_VERSION_NARROW_SHUFFLED = 5
#: Header bytes per codec version.
_HEAD_SIZE = {_CODEC_VERSION: _CODEC.size, _CODEC_VERSION_UNSIGNED: _CODEC.size + _UNSIGNED_SIZE,
              _CODEC_VERSION_SHUFFLED: _CODEC.size + _CODEC_SHUFFLED.size,
              _CODEC_VERSION_NARROW: _CODEC.size, _CODEC_VERSION_NARROW_SHUFFLED: _CODEC.size + _CODEC_SHUFFLED.size}
#: The versions whose header carries shuffled, shuffle_min, shuffle_max (checked, read).
SHUFFLED_VERSIONS = frozenset((_CODEC_VERSION_SHUFFLED, _CODEC_VERSION_NARROW_SHUFFLED))
#: The count widths each version may hold, and their dtypes.
_WIDTHS = {_CODEC_VERSION: (4, 8), _CODEC_VERSION_UNSIGNED: (4, 8), _CODEC_VERSION_SHUFFLED: (4, 8),
           _CODEC_VERSION_NARROW: (2, 4, 8), _CODEC_VERSION_NARROW_SHUFFLED: (2, 4, 8)}
COUNT_DTYPES = {2: np.dtype("<u2"), 4: _U4, 8: _I8}

#: The releases a worker of this code can share a consumer group with (``ocms worker --upgrade-from``): it then
#: writes only member versions that release reads (1 and 3), while reading every version above.
UPGRADE_FROM = ("0.2",)
_narrow = True  # write versions 4 and 5 (no --upgrade-from); set once per process by write_members_for


def write_members_for(upgrade_from: str | None) -> None:
    """Write the member versions every worker of release ``upgrade_from`` reads (1 and 3), or this code's own
    (4 and 5) when None: the first and the second rolling bounce of an upgrade (CHANGELOG.md, Upgrading)."""
    global _narrow
    if upgrade_from is not None and upgrade_from not in UPGRADE_FROM:
        raise InvalidParameterError("upgrade_from", upgrade_from, f"expected one of {', '.join(UPGRADE_FROM)}")
    _narrow = upgrade_from is None


def writes_for() -> str | None:
    """The release whose workers this process writes for (None: this code's own member versions)."""
    return None if _narrow else UPGRADE_FROM[0]


@contextmanager
def members_written_for(upgrade_from: str | None):
    """``write_members_for`` inside the block, then what was written before (tests, golden samples)."""
    before = writes_for()
    write_members_for(upgrade_from)
    try:
        yield
    finally:
        write_members_for(before)


def member_layout(n: int, shuffled: int) -> tuple[int, int]:
    """(codec version, count width) of a member of ``n`` reports, ``shuffled`` of them through a shuffle."""
    if _narrow:
        return (_CODEC_VERSION_NARROW_SHUFFLED if shuffled else _CODEC_VERSION_NARROW,
                2 if n < 2**16 else 4 if n < 2**32 else 8)
    return (_CODEC_VERSION_SHUFFLED if shuffled else _CODEC_VERSION), (4 if n < 2**32 else 8)


def smallest_batch(a: int, b: int) -> int:
    """The smaller of two shuffled batch sizes, 0 meaning none."""
    return min(a, b) if a and b else a or b


class PartialCounts:
    """Integer state of one (parameter set, partition, bucket): immutable."""

    __slots__ = ("n", "counts", "last_offset", "shuffled", "shuffle_min", "shuffle_max")

    def __init__(self, n: int, counts, last_offset: int = NO_OFFSET, shuffled: int = 0, shuffle_min: int = 0,
                 shuffle_max: int | None = None):
        array = np.array(counts, dtype=np.int64)  # a private copy, then frozen
        array.flags.writeable = False
        self.n = int(n)
        self.counts = array
        self.last_offset = int(last_offset)
        self.shuffled = int(shuffled)  # reports that came through a shuffling collector
        self.shuffle_min = int(shuffle_min)  # the smallest shuffled batch among them (0: none)
        self.shuffle_max = int(shuffle_min if shuffle_max is None else shuffle_max)  # ... the largest

    @classmethod
    def empty(cls, tracked_count: int) -> "PartialCounts":
        return cls(0, np.zeros(tracked_count, np.int64), NO_OFFSET)

    def as_array(self) -> np.ndarray:
        return self.counts

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, PartialCounts)
            and (self.n, self.last_offset, self.shuffled, self.shuffle_min, self.shuffle_max)
            == (other.n, other.last_offset, other.shuffled, other.shuffle_min, other.shuffle_max)
            and np.array_equal(self.counts, other.counts)
        )

    __hash__ = None

    def __repr__(self) -> str:
        shuffled = f", shuffled={self.shuffled} (batches {self.shuffle_min}..{self.shuffle_max})" if self.shuffled else ""
        return f"PartialCounts(n={self.n}, D={self.counts.shape[0]}, last_offset={self.last_offset}{shuffled})"

    def to_bytes(self) -> bytes:
        """Compact table value: 24-byte header (+ 24 bytes of shuffle accounting when some report was
        shuffled: version 3 or 5) + counts (``member_layout``: uint16 while n < 2^16 in versions 4 and 5,
        uint32 while n < 2^32)."""
        version, width = member_layout(self.n, self.shuffled)
        header = _CODEC.pack(_CODEC_MAGIC, version, width, self.n, self.last_offset, self.counts.shape[0])
        if self.shuffled:
            header += _CODEC_SHUFFLED.pack(self.shuffled, self.shuffle_min, self.shuffle_max)
        return header + self.counts.astype(COUNT_DTYPES[width]).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, *, copy: bool = True) -> "PartialCounts":
        """The state a table value holds; ``copy=False`` leaves the counts a read-only view of ``data`` (as
        stored: uint16 while n < 2^16 in codec v4/v5, uint32 while n < 2^32), for a reader that only adds them up
        (agents.view)."""
        _, width, n, last_offset, d, shuffled, shuffle_min, shuffle_max, head = _codec_header(data, 0, len(data))
        counts = np.frombuffer(data, COUNT_DTYPES[width], d, head)
        if copy:
            return cls(n, counts, last_offset, shuffled, shuffle_min, shuffle_max)
        state = cls.__new__(cls)
        state.n, state.counts, state.last_offset = int(n), counts, int(last_offset)
        state.shuffled, state.shuffle_min, state.shuffle_max = int(shuffled), int(shuffle_min), int(shuffle_max)
        return state

    def to_json(self) -> dict:
        return {"n": self.n, "counts": self.counts.tolist(), "last_offset": self.last_offset,
                "shuffled": self.shuffled, "shuffle_min": self.shuffle_min, "shuffle_max": self.shuffle_max}

    @classmethod
    def from_json(cls, doc: dict) -> "PartialCounts":
        return cls(int(doc["n"]), [int(c) for c in doc["counts"]], int(doc["last_offset"]),
                   int(doc.get("shuffled", 0)), int(doc.get("shuffle_min", 0)),
                   int(doc.get("shuffle_max", doc.get("shuffle_min", 0))))


def read_codec(data: bytes) -> tuple[int, np.ndarray, int, int, int]:
    """(n, counts as a read-only view of ``data``, last_offset, shuffled, shuffle_min) of a table value, checked."""
    _, width, n, last_offset, d, shuffled, shuffle_min, _, head = _codec_header(data, 0, len(data))
    counts = np.frombuffer(data, COUNT_DTYPES[width], d, head)  # positional: twice as fast as keywords
    return n, counts, last_offset, shuffled, shuffle_min


def _codec_header(data, start: int, length: int) -> tuple[int, int, int, int, int, int, int, int, int]:
    """(version, count width, n, last_offset, D, shuffled, shuffle_min, shuffle_max, where the counts start) of
    the PartialCounts bytes ``data[start:start + length]``, checked (their length included). A version 2 value
    (claims not verified) holds no shuffled report."""
    if length < _CODEC.size:
        raise SerializationError(f"table value of {length} bytes is shorter than its header")
    magic, version, width, n, last_offset, d = _CODEC.unpack_from(data, start)
    if magic != _CODEC_MAGIC or version not in _HEAD_SIZE:
        raise SerializationError("not a PartialCounts v1/v2/v3/v4/v5 table value")
    if width not in _WIDTHS[version]:
        raise SerializationError(f"PartialCounts v{version} table value with {width}-byte counts")
    head, shuffled, shuffle_min, shuffle_max = _HEAD_SIZE[version], 0, 0, 0
    if length < head:
        raise SerializationError(f"table value of {length} bytes is shorter than its v{version} header")
    if version in SHUFFLED_VERSIONS:
        shuffled, shuffle_min, shuffle_max = _CODEC_SHUFFLED.unpack_from(data, start + _CODEC.size)
        if not 0 < shuffled <= n or not 1 <= shuffle_min <= shuffle_max:
            raise SerializationError(f"table value says {shuffled} of {n} reports shuffled in batches of "
                                     f"{shuffle_min} to {shuffle_max}")
    if length != head + d * width:
        raise SerializationError(f"table value has {length} bytes, expected {head + d * width}")
    return version, width, n, last_offset, d, shuffled, shuffle_min, shuffle_max, start + head


def bucket_start(timestamp_s: float, width_s: int) -> int:
    """Start of the event-time bucket of width ``width_s`` holding ``timestamp_s``."""
    return int(timestamp_s // width_s) * width_s


def already_counted(state: PartialCounts | None, offset: int) -> bool:
    """True for a replayed event (its offset is covered by the stored state)."""
    return state is not None and offset <= state.last_offset


def fold(state: PartialCounts | None, counts: np.ndarray, n: int, last_offset: int, shuffled: int = 0,
         shuffle_min: int = 0, shuffle_max: int | None = None) -> PartialCounts:
    """New state after adding a micro-batch's match counts for one key.

    ``last_offset`` is the highest source offset among the batch's events for
    this key; it must move forward (a smaller one means the caller replayed
    events it should have skipped). ``shuffled`` of the ``n`` reports came through
    a shuffle, in batches of ``shuffle_min`` to ``shuffle_max`` reports.
    """
    shuffle_max = shuffle_min if shuffle_max is None else shuffle_max
    counts = np.asarray(counts, dtype=np.int64)
    if state is None:
        state = PartialCounts.empty(counts.shape[0])
    if state.counts.shape[0] != counts.shape[0]:
        raise InvalidParameterError("counts", counts.shape[0], f"expected {state.counts.shape[0]} tracked values")
    if last_offset <= state.last_offset:
        raise InvalidParameterError("last_offset", last_offset, f"must exceed the stored offset {state.last_offset}")
    if n < 0 or (counts.size and (counts.min() < 0 or counts.max() > n)):
        raise InvalidParameterError("counts", "...", "match counts must lie in [0, n]")
    if not 0 <= shuffled <= n or (shuffled and not 1 <= shuffle_min <= shuffle_max):
        raise InvalidParameterError("shuffled", shuffled, f"must lie in [0, n={n}], with batch sizes 1 <= min <= max")
    return PartialCounts(state.n + int(n), state.counts + counts, int(last_offset), state.shuffled + int(shuffled),
                         smallest_batch(state.shuffle_min, int(shuffle_min) if shuffled else 0),
                         max(state.shuffle_max, int(shuffle_max) if shuffled else 0))


def total(states: Iterable[PartialCounts], tracked_count: int) -> tuple[int, np.ndarray]:
    """(n, counts) summed over states: partitions of a bucket, or buckets of a range."""
    n = 0
    counts = np.zeros(tracked_count, np.int64)
    for s in states:
        n += s.n
        counts += s.counts
    return n, counts


class OpenBundle:
    """A table value opened for one checkpoint's folds (agents.processor.encoded_plan): a member's
    header is read when asked for, and its counts are added in place in a copy of the stored bytes.

    Why: with hundreds of metrics a checkpoint folds thousands of member states, and decoding each
    into a PartialCounts, folding it and encoding it again was most of the checkpoint's Python (so
    GIL-holding) time. The bytes are those of ``encode_bundle`` over the ``fold``ed members:
    a member whose size changes (a new one, the first shuffled reports: codec v3, or n reaching 2^32:
    8-byte counts) is folded and encoded by ``fold`` itself; tests/agents/test_processor.py checks
    every written bundle against the reference fold (``plan_batch``).
    """

    __slots__ = ("_buffer", "_members", "_replaced")

    def __init__(self, raw: bytes | None):
        self._buffer = bytearray(raw or b"")
        self._members: dict[str, tuple[int, int]] = {}  # fingerprint hex -> (start, length) in _buffer
        self._replaced: dict[str, bytes] = {}  # fingerprint hex -> new member bytes (a new or resized member)
        if raw is not None:
            self._members = _bundle_places(raw)

    def _header(self, fingerprint: str) -> tuple[int, ...] | None:
        """(start, then ``_codec_header``'s fields: version, width, n, last_offset, D, shuffled, shuffle_min, shuffle_max,
        where the counts start) of a stored member, checked; None when the bundle has no such member."""
        place = self._members.get(fingerprint)
        return None if place is None else (place[0], *_codec_header(self._buffer, *place))

    def state(self, fingerprint: str) -> PartialCounts | None:
        """A member's state (a copy), None when absent."""
        raw = self._replaced.get(fingerprint)
        if raw is None:
            place = self._members.get(fingerprint)
            if place is None:
                return None
            raw = bytes(self._buffer[place[0]:place[0] + place[1]])
        return PartialCounts.from_bytes(raw)

    def last_offset(self, fingerprint: str) -> int:
        """The highest source offset a member holds (NO_OFFSET when absent): what a replay skips."""
        if fingerprint in self._replaced:
            return read_codec(self._replaced[fingerprint])[2]
        header = self._header(fingerprint)
        return NO_OFFSET if header is None else header[4]

    def fold(self, fingerprint: str, counts: np.ndarray, n: int, last_offset: int, shuffled: int = 0,
             shuffle_min: int = 0, shuffle_max: int | None = None) -> None:
        """``fold`` one batch's counts into a member (same checks, same bytes). ``counts`` must lie
        in [0, n]: the caller's check (agents.processor.decode_segments checks each kernel result once,
        not once per key it is added to)."""
        shuffle_max = shuffle_min if shuffle_max is None else shuffle_max
        header = None if fingerprint in self._replaced else self._header(fingerprint)
        if header is not None:
            start, version, width, stored_n, stored_offset, d, stored_shuffled, stored_min, stored_max, counts_at = header
            new_n, new_shuffled = stored_n + int(n), stored_shuffled + int(shuffled)
            same_size = (version, width) == member_layout(new_n, new_shuffled)
            if same_size and d == counts.shape[0] and last_offset > stored_offset and n >= 0 and (
                    0 <= shuffled <= n and (1 <= shuffle_min <= shuffle_max or not shuffled)):
                _CODEC.pack_into(self._buffer, start, _CODEC_MAGIC, version, width, new_n, int(last_offset), d)
                if new_shuffled:
                    _CODEC_SHUFFLED.pack_into(self._buffer, start + _CODEC.size, new_shuffled,
                                              smallest_batch(stored_min, int(shuffle_min) if shuffled else 0),
                                              max(stored_max, int(shuffle_max) if shuffled else 0))
                stored = np.frombuffer(self._buffer, COUNT_DTYPES[width], d, counts_at)  # positional: 2x faster
                np.add(stored, counts, out=stored, casting="unsafe")  # fits: each count <= new_n, < 2^(8 width)
                return
        # A new member, or one whose size changes (or a bad argument: fold raises, naming it).
        self._replaced[fingerprint] = fold(self.state(fingerprint), counts, n, last_offset, shuffled,
                                           shuffle_min, shuffle_max).to_bytes()

    def encode(self) -> bytes:
        """The table value: the stored bytes as folded in place, or re-encoded when a member was added or resized."""
        if not self._replaced:
            return bytes(self._buffer)
        members = {fp: bytes(self._buffer[start:start + length]) for fp, (start, length) in self._members.items()}
        members.update(self._replaced)
        return encode_bundle(members)
