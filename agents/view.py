"""The read model: every worker's view of the counts table (all of it, or its share: agents.shards).

Why (scale-out design): a Faust table is partitioned, so a worker holds only
the partitions it owns and would answer for part of the topic. Each worker
therefore also reads the *whole* changelog of the counts table (all
partitions, no consumer group) into this view: latest value per key,
tombstones delete. Writes still come only from the owner of a source
partition; the view is what the API and ``/metrics`` read. With any number of
workers every worker answers for all partitions, and once its view has caught
up with the changelog the answer equals a single worker's (the same integers
from the same keys). It also has no gap while partitions move between workers
in a rebalance. Costs: every worker reads every changelog write (one value per
table key per micro-batch; the changelog is compacted on Kafka). With ``--view share``
a worker keeps only its share's records (agents.shards), so its memory falls as
1/workers. A record is a table key's bundle of member states (agents.state); the view
keeps one entry per member state.

Memory: per bucket, one summed int64 array of the D tracked counts (what queries
read: one state per bucket, not one per partition) plus each writing partition's
latest state as it arrived on the changelog (uint16 or uint32 counts: agents.state.member_layout).
The partition states are what keeps the sum exact: a changelog record *replaces* its
partition's cumulative state (replay after kill -9, a new owner after a rebalance,
a late report into an old bucket all rewrite it), and a tombstone deletes it, so the
sum is that of the partitions' latest states, taken again when the bucket is next
read after a change (BucketSum). About ``buckets x D x (8 + 4 x partitions)`` bytes
per metric version at most (docs/operating.md; 2 bytes a count instead of 4 in a state of fewer than
65,536 reports: codec v4/v5).

Cost of applying a record (issue 30: a 300-metric worker's checkpoint is 128 records
holding 2,400 changed member states, read back by every worker on its event loop): what
changed, checked once. A key held already is not decoded again, a member carried over
byte for byte is skipped, a changed one is checked (read_codec) and stored, and its
bucket summed when read, once per change however many partitions the checkpoint
rewrote (benchmarks/bench_view_apply.py).

The view is updated on the event loop only. A query takes a *snapshot* there
(the states of the buckets it reads: references to immutable PartialCounts,
O(keys in range), plus the sum of each bucket changed since it was last read) and
may then sum and estimate anywhere, e.g. off the event loop, while the view moves
on. Bucket starts are kept sorted per (parameter set, width), so a range costs the
buckets that exist in it, never range/width.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from cms_core.errors import OCMSError

from infra.kafka import KAFKA, BrokerProfile, make_consumer, stop_client

from .state import (_CODEC, _CODEC_SHUFFLED, _HEAD_SIZE, _I8, COUNT_DTYPES, NO_OFFSET, SHUFFLED_VERSIONS, TOTAL_WIDTH, BucketKey,
                    PartialCounts, StateKey, decode_bundle, read_codec, smallest_batch)


log = logging.getLogger(__name__)

#: The changelog reader applies records for at most this long before it lets the event loop run.
APPLY_SLICE_SECONDS = 0.002


class BucketSum:
    """One bucket of one parameter set: the partitions' latest states (changelog bytes) and
    their sum (an immutable PartialCounts, a new one after every change: snapshots keep theirs).

    The sum is taken when it is read, once per change of the bucket (``total``): a checkpoint
    rewrites a bucket's state in every partition it counted, record by record, so summing on
    read adds each partition once per checkpoint instead of moving the sum by new - previous
    per record, and the sum is by construction that of the partitions' latest states."""

    __slots__ = ("partitions", "tracked_count", "summed")

    def __init__(self, tracked_count: int):
        self.partitions: dict[int, bytes] = {}
        self.tracked_count = tracked_count
        #: the sum of ``partitions`` as it was last read; None once a partition's state changed
        self.summed: PartialCounts | None = None

    def __getitem__(self, partition: int) -> PartialCounts:
        return PartialCounts.from_bytes(self.partitions[partition])

    def __len__(self) -> int:
        return len(self.partitions)

    @property
    def total(self) -> PartialCounts:
        """The partitions' states summed: (n, counts, shuffled reports, their smallest and largest batch)."""
        return self.summed or self.sum()

    def sum(self) -> PartialCounts:
        """Sum the partitions' states (each validated by read_codec when it arrived) into a new
        immutable PartialCounts (one fresh int64 array), kept until a partition's state changes."""
        states = list(self.partitions.values())
        n = shuffled = shuffle_min = shuffle_max = 0
        first = None
        uniform = True  # one header size and count width in every state
        for raw in states:
            header = _CODEC.unpack_from(raw)  # magic, version, count width, n, last_offset, D
            n += header[3]
            if header[1] in SHUFFLED_VERSIONS:
                state_shuffled, state_min, state_max = _CODEC_SHUFFLED.unpack_from(raw, _CODEC.size)
                shuffled += state_shuffled
                shuffle_min = smallest_batch(shuffle_min, state_min)  # a minimum: taken over the partitions
                shuffle_max = max(shuffle_max, state_max)
            if first is None:
                first = header
            elif header[1] != first[1] or header[2] != first[2]:
                uniform = False
        if len(states) == 1:
            counts = _stored_counts(states[0]).astype(_I8)
        elif uniform and first is not None:
            # The states side by side are one 2-D array (a row each, header included), summed down
            # its columns in one call into a fresh int64 array.
            width = first[2]
            head = _HEAD_SIZE[first[1]]
            rows = np.frombuffer(b"".join(states), COUNT_DTYPES[width]).reshape(len(states), -1)
            counts = np.add.reduce(rows[:, head // width:], 0, _I8)
        else:
            counts = np.zeros(self.tracked_count, _I8)
            for raw in states:
                np.add(counts, _stored_counts(raw), counts)
        counts.flags.writeable = False
        state = self.summed = PartialCounts.__new__(PartialCounts)
        state.n, state.counts, state.last_offset, state.shuffled, state.shuffle_min, state.shuffle_max = (
            n, counts, NO_OFFSET, shuffled, shuffle_min, shuffle_max)
        return state


def _stored_counts(raw: bytes) -> np.ndarray:
    """The counts of a changelog value already validated by read_codec (a view of its bytes)."""
    _, version, width, _, _, d = _CODEC.unpack_from(raw)
    return np.frombuffer(raw, COUNT_DTYPES[width], d, _HEAD_SIZE[version])


class CountsView:
    """Per (fingerprint, width, bucket start): the summed counts of every partition (BucketSum)."""

    def __init__(self, tracked_sizes: dict[str, int] | None = None):
        self.index: dict[tuple[str, int, int], BucketSum] = {}
        #: (fingerprint, width) -> sorted bucket starts present in ``index``
        self.starts: dict[tuple[str, int], list[int]] = defaultdict(list)
        #: encoded table key (as StateKey.encode spells it) -> (the key, the fingerprints of its latest
        #: bundle: a tombstone deletes their states)
        self.members: dict[bytes, tuple[StateKey, tuple[str, ...]]] = {}
        self.held_bytes = 0  # memory_bytes
        self.total_reports = 0  # reports(): n of every cumulative key's partition states, kept as they change
        self.state_count = 0  # keys(): member states held, kept as they come and go
        self.applied = 0
        self.rejected = 0  # changelog records or member states that are not ours (never counted)
        #: records holding a member state older than the one held (not applied: ``apply``)
        self.stale_records = 0
        #: hears of each stale record's table key (the worker writes the key again if it owns its partition)
        self.on_stale: Callable[[StateKey], None] | None = None
        #: fingerprint -> D; records of other parameter sets or tracked-set sizes are refused
        #: (e.g. a changelog written under another configuration of the same app id).
        self.tracked_sizes = tracked_sizes

    def apply(self, raw_key: bytes | None, raw_value: bytes | None) -> None:
        """One changelog record: a table key's bundle of member states (agents.state), or its tombstone.

        A member state older than the one held (a lower highest source offset) is not applied: it is
        a stale write, e.g. of a worker that stalled past its session while it checkpointed and wrote
        after the partition's new owner (issue 35, 5). A member's state is a function of that offset
        alone (every message of the partition up to it that touches the member, each once: the
        exactness argument of agents.state), so the higher one holds everything the lower one does,
        whoever wrote it, and the view never goes back. For the same reason a record that lacks a
        member held is older than it (a bundle never drops a member: only a tombstone deletes them),
        and the member is kept. ``on_stale(key)`` hears of every stale record (the owner of its
        partition writes the key again, so the log's last record of it is not the stale one).

        Costs what changed: a member carried over byte for byte from the key's previous bundle is
        skipped, and a key held already is not decoded again (its encoding names it)."""
        members = self.members
        held = members.get(raw_key) if type(raw_key) is bytes else None
        try:
            if held is None:
                key = StateKey.decode(raw_key or b"")
                name = key.encode()  # the spelling the key is held under (raw_key unless it is not canonical)
                held = members.get(name)
            else:
                key, name = held[0], raw_key
            bundle = None if raw_value is None else decode_bundle(raw_value)
        except OCMSError as exc:
            self.rejected += 1
            log.warning("ignoring a changelog record that is not a counts value: %s", exc)
            return
        partition, width, start = key.partition, key.width, key.bucket_start
        if bundle is None:
            if held is not None:
                del members[name]
                for fingerprint in held[1]:
                    self._set(fingerprint, partition, width, start, None)
            return
        index, sizes, cumulative = self.index, self.tracked_sizes, width == TOTAL_WIDTH
        stale = False
        for fingerprint, raw in bundle.items():
            bucket = index.get((fingerprint, width, start))
            previous = None if bucket is None else bucket.partitions.get(partition)
            if previous == raw:
                # Carried over byte for byte from the key's previous bundle (a member the batch did
                # not touch): the view holds it already. Cost grows with the members that changed.
                self.applied += 1
                continue
            if previous is not None:
                # A checkpoint's common case inline: a held state replaced by a newer valid one of its size.
                # Anything else (a new state, one to reject) is _set's, which checks it again.
                try:
                    n, counts, last_offset, _, _ = read_codec(raw)
                    d = len(counts)
                except OCMSError:
                    d, last_offset = -1, None  # _set rejects it, saying why
                if last_offset is not None and last_offset < _CODEC.unpack_from(previous)[4]:
                    stale = True
                    continue
                if d == bucket.tracked_count and (sizes is None or sizes.get(fingerprint) == d):
                    bucket.partitions[partition] = raw
                    bucket.summed = None  # summed again when read
                    self.held_bytes += len(raw) - len(previous)
                    if cumulative:
                        self.total_reports += n - _CODEC.unpack_from(previous)[3]
                    self.applied += 1
                    continue
            self._set(fingerprint, partition, width, start, raw)
        fingerprints = tuple(bundle) if held is None else tuple(dict.fromkeys(held[1] + tuple(bundle)))
        members[name] = (key, fingerprints)
        if stale or (held is not None and len(fingerprints) > len(bundle)):
            self.stale_records += 1
            if self.on_stale is not None:
                self.on_stale(key)

    def held_offsets(self, key: StateKey) -> dict[str, int]:
        """Fingerprint hex -> the highest source offset of each member state the view holds for a table key."""
        entry = self.members.get(key.encode())
        out = {}
        for fingerprint in entry[1] if entry is not None else ():
            bucket = self.index.get((fingerprint, key.width, key.bucket_start))
            raw = None if bucket is None else bucket.partitions.get(key.partition)
            if raw is not None:
                out[fingerprint] = _CODEC.unpack_from(raw)[4]
        return out

    def apply_state(self, key: BucketKey, raw_value: bytes | None) -> None:
        """Set (PartialCounts bytes) or delete (None) one member key's state."""
        self._set(key.fingerprint, key.partition, key.width, key.bucket_start, raw_value)

    def _set(self, fingerprint: str, partition: int, width: int, start: int, raw: bytes | None) -> None:
        """apply_state's work, on the member key's fields (apply has them without building a BucketKey)."""
        if raw is not None:
            try:  # the one check and header read of a member state
                n, counts, _, _, _ = read_codec(raw)
            except OCMSError as exc:
                self.rejected += 1
                log.warning("ignoring changelog state of %s that is not a counts value: %s",
                            BucketKey(fingerprint, partition, width, start), exc)
                return
        sizes = self.tracked_sizes
        if sizes is not None and (fingerprint not in sizes or (raw is not None and counts.shape[0] != sizes[fingerprint])):
            self.rejected += 1
            log.warning("ignoring changelog key %s: not a configured parameter set / tracked-set size",
                        BucketKey(fingerprint, partition, width, start))
            return
        slot = (fingerprint, width, start)
        bucket = self.index.get(slot)
        if bucket is None:
            if raw is None:  # a tombstone of a state never held: nothing to delete
                self.applied += 1
                return
            bucket = self.index[slot] = BucketSum(counts.shape[0])
            bisect.insort(self.starts[(fingerprint, width)], start)
            self.held_bytes += 8 * bucket.tracked_count  # the summed int64 array
        elif raw is not None and bucket.tracked_count != counts.shape[0]:
            # Only possible without tracked_sizes (every configured size is checked above).
            self.rejected += 1
            log.warning("ignoring changelog key %s: %d tracked counts, the bucket has %d",
                        BucketKey(fingerprint, partition, width, start), counts.shape[0], bucket.tracked_count)
            return
        partitions = bucket.partitions
        if raw is None:
            previous = partitions.pop(partition, None)
            if previous is not None and not partitions:
                self.held_bytes -= 8 * bucket.tracked_count
                del self.index[slot]
                starts = self.starts[(fingerprint, width)]
                del starts[bisect.bisect_left(starts, start)]
        else:
            previous = partitions.get(partition)
            partitions[partition] = raw
            self.state_count += 1
            self.held_bytes += len(raw)
            if width == TOTAL_WIDTH:
                self.total_reports += n
        if previous is not None or raw is not None:
            bucket.summed = None  # summed again when read
        if previous is not None:
            self.state_count -= 1
            self.held_bytes -= len(previous)
            if width == TOTAL_WIDTH:
                self.total_reports -= _CODEC.unpack_from(previous)[3]
        self.applied += 1

    def sum(self, fingerprint: str, width: int, start: int, tracked_count: int) -> tuple[int, np.ndarray]:
        """(n, counts) of one bucket summed over partitions (a fresh array)."""
        bucket = self.index.get((fingerprint, width, start))
        if bucket is None:
            return 0, np.zeros(tracked_count, np.int64)
        total = bucket.summed or bucket.sum()
        return total.n, total.counts.copy()

    def sum_range(self, fingerprint: str, width: int, start: int, stop: int, tracked_count: int) -> tuple[int, np.ndarray]:
        """(n, counts) of the buckets of ``width`` starting in [start, stop): O(buckets present)."""
        return sum_states(self.snapshot(fingerprint, width, start, stop), tracked_count)

    def _span(self, fingerprint: str, width: int, start: int, stop: int) -> tuple[list[int], int, int]:
        starts = self.starts.get((fingerprint, width), [])
        return starts, bisect.bisect_left(starts, start), bisect.bisect_left(starts, stop)

    def bucket_count(self, fingerprint: str, width: int, start: int, stop: int) -> int:
        """How many buckets of ``width`` starting in [start, stop) hold counts: O(log buckets)."""
        _, lo, hi = self._span(fingerprint, width, start, stop)
        return hi - lo

    def snapshot(self, fingerprint: str, width: int, start: int, stop: int) -> list[tuple[int, tuple[PartialCounts, ...]]]:
        """(bucket start, (its summed state,)) for the buckets starting in [start, stop).

        The states are immutable, so the snapshot stays valid however the view moves on."""
        starts, lo, hi = self._span(fingerprint, width, start, stop)
        index = self.index
        return [(s, ((bucket := index[(fingerprint, width, s)]).summed or bucket.sum(),)) for s in starts[lo:hi]]

    def buckets(self, fingerprint: str, width: int) -> list[int]:
        return list(self.starts.get((fingerprint, width), []))

    def drop_groups(self, dropped: Callable[[str], bool]) -> None:
        """Forget every state of the table keys whose group ``dropped(group)`` says (a shard moved away)."""
        for name in [name for name, (key, _) in self.members.items() if dropped(key.group)]:
            self.apply(name, None)

    def reports(self) -> int:
        """Reports in the cumulative keys held: every report the view counts (kept as states change:
        /healthz reads it at no cost; summed over the metric versions it cost the worker 5% of its
        CPU at 1,000 metrics, polled every 20 ms)."""
        return self.total_reports

    def keys(self) -> int:
        """Member states held (one per metric version, partition and bucket; kept as states come and
        go: a scan of every bucket on each /healthz poll was most of the poll's cost at 300 metrics)."""
        return self.state_count

    def memory_bytes(self) -> int:
        """Bytes of counts held: the summed arrays plus the partition states (payloads only; kept as
        states come and go, so /healthz reads it at no cost). A bucket's summed array is counted from
        its first state on, though it is taken only when the bucket is read after a change: at most
        this much is held."""
        return self.held_bytes


class ViewBehind(OCMSError):
    """The view could not confirm within its bound that it holds every changelog record written before
    a query arrived (the broker did not answer, or the view is far behind): answer 503, not a stale 200."""


#: How long a query waits for the view to hold every changelog record written before it arrived
#: (``ChangelogReader.current``); below the forwarding timeout, so a forwarded query gets the holder's 503.
CURRENT_TIMEOUT_S = 3.0


@dataclass(eq=False)
class ChangelogReader:
    """Feeds a CountsView from every partition of the changelog topic (from the beginning).

    ``partitions``: the changelog's partition count (the worker creates or checks the topic
    with it before it starts), so the reader assigns them without waiting for metadata; its
    consumer is built with the broker ``profile`` (``infra.kafka``).

    With a sharded ``share`` (agents.shards) it keeps the view to the shards of the source
    partitions ``owned()`` returns, re-reading the changelog for shards it is given and dropping
    the ones it loses, whenever the group is ``settled()`` (not rebalancing).

    What an answer may rely on (the fault-schedule checker's rules, issue 35), per changelog partition:

    * ``_seen``: the highest position the reader has reached. Every held shard that is *ready* has
      had every record below it applied, in log order, so it holds each key's latest value below it.
    * A shard the assignment gives it is *rebuilding*: the reader seeks to the beginning and applies
      every record of it again from offset 0; the shards already ready take only the records at or
      above ``_applied_from`` (their ``_seen`` at the seek), so a ready shard never gets an older
      record again (that replaced a newer state with an older one: a 200 smaller than an earlier one).
    * A rebuilding shard turns ready when the reader has passed ``_replay_until``: the changelog's end
      offsets read *when the shard was given* (and never lower than ``_seen``). The previous owner's
      last checkpoint was acknowledged before it gave the partition up (a rebalance waits for it), so
      it is below that end. The reader's own position was the target before: a shard given during
      the initial read or a replay turned ready before its records were read (issue 35, 1).
    * ``current()``: a query's read barrier. It reads the end offsets after the query arrived and
      waits until ``_seen`` passes them, so an answer holds every record acknowledged before the query
      began: a later answer is never smaller than an earlier one, from any worker.
    """

    view: CountsView
    bootstrap_servers: str
    topic: str
    partitions: int
    #: agents.shards.Share, or None for the whole view (not imported: shards answers through agents.answers,
    #: which reads this module)
    share: object | None = None
    owned: Callable[[], set[int] | None] = lambda: None
    settled: Callable[[], bool] = lambda: True
    profile: BrokerProfile = KAFKA
    caught_up: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    lag: int = field(init=False, default=0)
    last_update: float = field(init=False, default=0.0)
    replays: int = field(init=False, default=0)
    #: changelog partition -> the highest position reached (records below it applied to every ready shard)
    _seen: dict = field(init=False, default_factory=dict)
    #: changelog partition -> where the ready shards resume taking records during a replay
    _applied_from: dict = field(init=False, default_factory=dict)
    #: changelog partition -> the position the rebuilding shards are complete at
    _replay_until: dict = field(init=False, default_factory=dict)
    _consumer: object = field(init=False, default=None)
    _tps: list = field(init=False, default_factory=list)
    _ends_wanted: asyncio.Future | None = field(init=False, default=None)
    _ends_task: asyncio.Task | None = field(init=False, default=None)
    _barriers: list = field(init=False, default_factory=list)

    async def run(self) -> None:
        from aiokafka import TopicPartition

        consumer = make_consumer(self.bootstrap_servers, profile=self.profile, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            start_ends = await consumer.end_offsets(tps)
            self._consumer, self._tps = consumer, tps
            while True:
                await self.step(consumer, tps, start_ends)
        finally:
            self._consumer = None
            self._fail_barriers(ViewBehind("the changelog reader stopped"))
            await stop_client(consumer)

    async def step(self, consumer, tps, start_ends: dict) -> None:
        """One round: apply what one fetch returned, then follow the assignment and wake the barriers
        the view now satisfies."""
        batches = await consumer.getmany(timeout_ms=200, max_records=10_000)
        sharded = self.share is not None and self.share.sharded
        for tp, records in batches.items():
            await self._apply(records, self._applied_from.get(tp, 0) if sharded else None)
        if batches:
            self.last_update = time.time()
        positions = {tp: await consumer.position(tp) for tp in tps}
        seen = self._seen
        for tp, position in positions.items():
            if position > seen.get(tp, 0):
                seen[tp] = position
        if not self.caught_up.is_set() and all(positions[tp] >= start_ends[tp] for tp in tps):
            self.caught_up.set()
            log.info("counts view caught up: %d keys", self.view.keys())
        if sharded:
            await self._follow_assignment(consumer, tps, positions)
        self._wake_barriers()
        lag = 0
        for tp in tps:
            highwater = consumer.highwater(tp)
            if highwater is not None:
                lag += max(0, highwater - positions[tp])
        self.lag = lag

    async def _apply(self, records, applied_from: int | None) -> None:
        """Apply ``records`` (with a share, ``applied_from`` not None: ``_apply_share``'s).

        Yields to the event loop every ``APPLY_SLICE_SECONDS``: a checkpoint's records arrive
        together, and applied in one go they held the loop for tens of ms at hundreds of metrics,
        while the checkpoint's own produce requests (one record per partition each, answered in
        turn) waited for it, and its acknowledgements with them."""
        until = time.monotonic() + APPLY_SLICE_SECONDS
        for record in records:
            if applied_from is None:
                self.view.apply(record.key, record.value)
            else:
                self._apply_share((record,), applied_from)
            if time.monotonic() >= until:
                await asyncio.sleep(0)
                until = time.monotonic() + APPLY_SLICE_SECONDS

    def _apply_share(self, records, applied_from: int) -> None:
        """Apply the records of the shards held: every record of a shard being rebuilt, and of a ready
        shard those at or above ``applied_from`` (it holds the ones below); drop the rest by key
        prefix, before decoding."""
        share, view = self.share, self.view
        for record in records:
            shard = share.shard_of_key(record.key)
            if shard is not None and shard not in share.rebuilding and (
                    shard not in share.held or record.offset < applied_from):
                share.dropped_records += 1
                continue
            view.apply(record.key, record.value)

    async def _follow_assignment(self, consumer, tps, positions) -> None:
        share = self.share
        if share.rebuilding and all(positions[tp] >= self._replay_until.get(tp, 0) for tp in tps):
            share.ready |= share.rebuilding
            log.info("counts view holds shards %s (rebuilt from the changelog up to offsets %s)",
                     sorted(share.rebuilding), [self._replay_until.get(tp, 0) for tp in tps])
            share.rebuilding = set()
        owned = self.owned() if self.settled() else None
        if owned is None or owned == share.held:
            return
        gone, new = share.held - owned, owned - share.held
        if new:
            # The end of the changelog now: everything the previous owners wrote (acknowledged before
            # they gave the partitions up) is below it. Read before any state changes: if it fails,
            # the next round tries again.
            try:
                ends = await consumer.end_offsets(tps)
            except Exception as exc:  # noqa: BLE001 - the broker away for a moment: try again next round
                log.warning("counts view: reading the changelog's end offsets failed (%s: %s); the new shards "
                            "%s are taken next round", type(exc).__name__, exc, sorted(new))
                return
        share.held = set(owned)
        share.ready -= gone
        share.rebuilding -= gone
        if gone:
            self.view.drop_groups(lambda group: share.layout.shard_of_group(group) in gone)
            log.info("counts view dropped shards %s (their partitions moved)", sorted(gone))
        if new:
            # Read again from the beginning: every record of the new shards applies; the ready shards
            # take only what they have not had yet (at or above the highest position reached); a
            # replay under way is restarted with the new shards, its target never lowered.
            share.rebuilding |= new
            seen = self._seen
            for tp in tps:
                self._applied_from[tp] = seen.get(tp, 0)
                self._replay_until[tp] = max(self._replay_until.get(tp, 0), ends.get(tp, 0), seen.get(tp, 0))
            self.replays += 1
            await consumer.seek_to_beginning(*tps)

    # ------------------------------------------------------------------ the read barrier
    async def current(self, timeout: float = CURRENT_TIMEOUT_S) -> None:
        """Return once the view holds every changelog record written before this call (for the shards it
        holds ready); raise ViewBehind when that is not known within ``timeout``.

        The end offsets are read by a request started after the call (concurrent callers share one), so
        a record acknowledged before the call is below them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            ends = await asyncio.wait_for(asyncio.shield(self._ends_after_now()), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            raise ViewBehind(f"the broker did not tell the changelog's end within {timeout:g} s") from None
        except ViewBehind:
            raise
        except Exception as exc:  # noqa: BLE001 - any client error is "cannot confirm"
            raise ViewBehind(f"reading the changelog's end failed: {type(exc).__name__}: {exc}") from None
        if self._holds(ends):
            return
        future = loop.create_future()
        self._barriers.append((ends, future))
        try:
            await asyncio.wait_for(asyncio.shield(future), max(0.0, deadline - loop.time()))
        except (TimeoutError, asyncio.TimeoutError):
            behind = sum(max(0, end - self._seen.get(tp, 0)) for tp, end in ends.items())
            raise ViewBehind(f"the view is {behind} changelog records behind after {timeout:g} s") from None

    def _holds(self, ends: dict) -> bool:
        seen = self._seen
        return all(seen.get(tp, 0) >= end for tp, end in ends.items())

    def _ends_after_now(self) -> asyncio.Future:
        """A future of the end offsets, read by a request that starts after this call."""
        if self._consumer is None:
            future = asyncio.get_running_loop().create_future()
            future.set_exception(ViewBehind("the changelog reader has not started"))
            return future
        if self._ends_wanted is None:
            self._ends_wanted = asyncio.get_running_loop().create_future()
            if self._ends_task is None or self._ends_task.done():
                self._ends_task = asyncio.ensure_future(self._read_ends())
        return self._ends_wanted

    async def _read_ends(self) -> None:
        while self._ends_wanted is not None:
            # Everyone waiting now joined before this request starts.
            waiting, self._ends_wanted = self._ends_wanted, None
            try:
                consumer = self._consumer
                if consumer is None:
                    raise ViewBehind("the changelog reader stopped")
                ends = await consumer.end_offsets(self._tps)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiters
                if not waiting.done():
                    waiting.set_exception(exc if isinstance(exc, Exception) else ViewBehind(str(exc)))
                waiting.exception()  # retrieved: a waiter that timed out must not leave it unobserved
                if not isinstance(exc, Exception):
                    raise
            else:
                if not waiting.done():
                    waiting.set_result(ends)

    def _wake_barriers(self) -> None:
        if not self._barriers:
            return
        waiting = []
        for ends, future in self._barriers:
            if future.done():
                continue
            if self._holds(ends):
                future.set_result(None)
            else:
                waiting.append((ends, future))
        self._barriers = waiting

    def _fail_barriers(self, error: Exception) -> None:
        for _, future in self._barriers:
            if not future.done():
                future.set_exception(error)
                future.exception()
        self._barriers = []


def shuffle_of(snapshot) -> tuple[int, int, int]:
    """(reports that came through a shuffle, the smallest and the largest shuffled batch among them: 0 for
    none) over a snapshot: O(states)."""
    shuffled = shuffle_min = shuffle_max = 0
    for _, states in snapshot:
        for state in states:
            shuffled += state.shuffled
            shuffle_min = smallest_batch(shuffle_min, state.shuffle_min)
            shuffle_max = max(shuffle_max, state.shuffle_max)
    return shuffled, shuffle_min, shuffle_max


def sum_states(snapshot, tracked_count: int) -> tuple[int, np.ndarray]:
    """(n, counts) summed over a snapshot (any thread: states are immutable)."""
    n = 0
    counts = np.zeros(tracked_count, np.int64)
    for _, states in snapshot:
        for state in states:
            n += state.n
            counts += state.counts
    return n, counts


def sum_states_at(snapshot, index: int) -> tuple[int, int]:
    """(n, match count of one tracked value) over a snapshot: O(states), not O(states x D)."""
    n = 0
    count = 0
    for _, states in snapshot:
        for state in states:
            n += state.n
            count += int(state.counts[index])
    return n, count
