"""Message validation and micro-batch planning: the worker's logic without Faust.

``MessageValidator`` turns one Kafka message into a decoded batch or a
``RejectedMessage`` with a bounded reason code (the wire-format reasons plus
``empty``, ``expired`` and ``future_timestamp``). ``plan_batch`` turns the
accepted messages of a micro-batch into table writes: per key (parameter set,
partition, bucket level, bucket) the events it has not counted yet are decoded
with the cms_core kernel and folded into the stored state together with their
highest offset (see :mod:`agents.state` for why that is exact after crashes).

Both are pure given a table reader, so the Faust agent stays thin and the
exactness argument is tested without a broker.
"""

from __future__ import annotations

import time
from collections import abc, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from cms_core import OCMSParams, TrackedValues, kernel, wire
from cms_core.errors import InvalidParameterError
from cms_core.reports import ReportBatch

from .state import (NO_OFFSET, BucketKey, OpenBundle, PartialCounts, StateKey, StateLayout, bucket_start, fold,
                    smallest_batch)

#: Every reason label ``ocms_reports_rejected_total`` can carry (a bounded set).
REJECT_REASONS = tuple(wire.REASONS) + ("empty", "expired", "future_timestamp")


class RejectedMessage(Exception):
    """A message the worker will not count; ``reason`` is a REJECT_REASONS code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class AcceptedMessage:
    partition: int
    offset: int
    timestamp: float  # event time, epoch seconds (the Kafka message timestamp)
    fingerprint: str  # parameter set, hex
    batch: ReportBatch
    #: The shuffled batch its reports were permuted among (its ``ocms-shuffle-n`` header), 0: not shuffled.
    shuffle_n: int = 0


@dataclass(frozen=True)
class DiscoveryMessage:
    """A well-formed report of a discovery level (docs/discovery.md): acked with its micro-batch,
    counted by no table and no dead letter; discovery reads it from the source topic's window."""

    partition: int
    offset: int
    fingerprint: bytes
    reports: int


class MessageValidator:
    """Decode and check one message against the accepted parameter sets and time window.

    ``discovery_sets`` are the discovery levels of the registry's discoverable metrics: a message
    of one of them is decoded (a malformed one is still rejected with its reason) and reported by
    :meth:`is_discovery`; it is not checked against the event-time window, which guards the tables.
    """

    def __init__(self, params_sets: Sequence[OCMSParams], retention_seconds: int | None, future_tolerance_seconds: int,
                 retention_by_fp: Mapping[bytes, int] | None = None, discovery_sets: Sequence[OCMSParams] = ()):
        """``retention_seconds``: of the parameter sets without their own in ``retention_by_fp`` (None: the worker
        gives every set its own, from its metric version)."""
        counted = {p.fingerprint: p for p in params_sets}
        self.discovery = {p.fingerprint: p for p in discovery_sets if p.fingerprint not in counted}
        self.registry = {**self.discovery, **counted}
        self.retention_seconds = retention_seconds
        self.future_tolerance_seconds = future_tolerance_seconds
        #: fingerprint -> retention of that metric version (a registry states one per version)
        self.retention_by_fp = dict(retention_by_fp or {})

    def check(self, value: bytes | None, timestamp: float, now: float) -> tuple[OCMSParams, ReportBatch]:
        if not value:
            raise RejectedMessage("empty", "message has no value")
        try:
            params, batch = wire.decode_message(value, self.registry)
        except wire.WireFormatError as exc:
            raise RejectedMessage(exc.reason, str(exc)) from None
        if params.fingerprint in self.discovery:
            return params, batch
        retention = self.retention_by_fp.get(params.fingerprint, self.retention_seconds)
        if timestamp < now - retention:
            raise RejectedMessage("expired", f"event time {timestamp:.3f} is older than the {retention} s retention")
        if timestamp > now + self.future_tolerance_seconds:
            raise RejectedMessage(
                "future_timestamp",
                f"event time {timestamp:.3f} is more than {self.future_tolerance_seconds} s ahead of the worker clock",
            )
        return params, batch

    def is_discovery(self, params: OCMSParams) -> bool:
        """True for a discovery level's parameters: never counted by the streaming tables."""
        return params.fingerprint in self.discovery


@dataclass
class Batch:
    """One micro-batch, taken for its checkpoint."""

    messages: list  # every source message, accepted or rejected, in arrival order
    accepted: list[AcceptedMessage]
    dead: list[tuple[object, RejectedMessage]]  # (source message, why) for the dead-letter topic
    discovery: list[DiscoveryMessage] = field(default_factory=list)  # acked, counted nowhere here

    def last_offsets(self) -> dict[int, int]:
        """Highest offset of the batch per source partition."""
        out: dict[int, int] = {}
        for message in self.messages:
            out[message.partition] = max(message.offset, out.get(message.partition, message.offset))
        return out


class PendingBatch:
    """The micro-batch being gathered: pure bookkeeping, no Faust and no consumer.

    Messages are source messages as the consumer delivers them (``partition``, ``offset``).
    Where a message must leave the batch unacked and uncounted, ``add`` and
    ``keep_partitions`` return it; the caller tells the consumer (it will be delivered
    again, or its partition's new owner counts it) and counts it in the metrics.
    """

    def __init__(self, max_reports: int):
        self.max_reports = max_reports
        self.messages: list = []
        self.accepted: list[AcceptedMessage] = []
        self.dead: list[tuple[object, RejectedMessage]] = []
        self.discovery: list[DiscoveryMessage] = []
        self.reports = 0
        self.started = 0.0  # monotonic time of the batch's first message
        self._newest: dict[int, int] = {}  # partition -> highest offset pending

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def full(self) -> bool:
        return self.reports >= self.max_reports

    def age(self, now: float) -> float:
        """Seconds since the first pending message (0 when nothing is pending)."""
        return now - self.started if self.messages else 0.0

    def add(self, message, outcome: AcceptedMessage | RejectedMessage | DiscoveryMessage, now: float) -> list:
        """Add one message with its validation outcome; returns the pending messages it
        supersedes. A message at or below the partition's newest pending offset means the
        consumer went back (a seek to the committed offset) and delivers them again: the
        pending copies from that offset on are dropped and counted once, from this delivery.
        Without this a batch holding both copies counts them twice (each is above the
        stored offset)."""
        superseded = []
        newest = self._newest.get(message.partition)
        if newest is not None and message.offset <= newest:
            superseded = self._drop(lambda m: m.partition == message.partition and m.offset >= message.offset)
        self._newest[message.partition] = message.offset
        if isinstance(outcome, RejectedMessage):
            self.dead.append((message, outcome))
        elif isinstance(outcome, DiscoveryMessage):
            self.discovery.append(outcome)
        else:
            self.accepted.append(outcome)
            self.reports += len(outcome.batch)
        if not self.messages:
            self.started = now
        self.messages.append(message)
        return superseded

    def keep_partitions(self, owned: set[int]) -> list:
        """Drop and return the pending messages of partitions not in ``owned`` (a rebalance
        took them without Faust's wait for unacked messages): their new owner counts them
        from the committed offset, which they are not below because they were never acked;
        writing them here would race the owner's writes."""
        dropped = self._drop(lambda m: m.partition not in owned)
        for partition in {m.partition for m in dropped}:
            self._newest.pop(partition, None)
        return dropped

    def take(self) -> Batch:
        """Hand the pending batch over (for its checkpoint) and start an empty one."""
        batch = Batch(self.messages, self.accepted, self.dead, self.discovery)
        self.messages, self.accepted, self.dead, self.discovery, self.reports = [], [], [], [], 0
        self._newest = {}
        return batch

    def _drop(self, stale) -> list:
        dropped = [m for m in self.messages if stale(m)]
        if dropped:
            self.messages = [m for m in self.messages if not stale(m)]
            self.accepted = [a for a in self.accepted if not stale(a)]
            self.dead = [(m, rejection) for m, rejection in self.dead if not stale(m)]
            self.discovery = [d for d in self.discovery if not stale(d)]
            self.reports = sum(len(a.batch) for a in self.accepted)
        return dropped


@dataclass
class BatchPlan:
    """Table writes of one micro-batch and what they mean for the metrics."""

    writes: list[tuple[BucketKey, PartialCounts]] = field(default_factory=list)  # plan_batch's only
    counted: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # fingerprint -> new reports
    replayed: int = 0  # reports skipped because their cumulative key already holds them
    reasserted: list[BucketKey] = field(default_factory=list)  # unchanged keys written again (see plan_additions)
    reports: int = 0  # reports in the micro-batch
    decode_seconds: float = 0.0


def keys_for(fingerprint: str, partition: int, timestamp: float, levels: Sequence[tuple[int, int]]) -> list[BucketKey]:
    """The keys one event adds to: a bucket per time level, then the cumulative key."""
    keys = [BucketKey(fingerprint, partition, width, bucket_start(timestamp, width)) for width, _ in levels]
    keys.append(BucketKey.total(fingerprint, partition))
    return keys


def levels_of(levels, fingerprint: str) -> Sequence[tuple[int, int]]:
    """The time levels of one fingerprint: ``levels`` is one worker-wide sequence, or a mapping
    fingerprint -> levels (a registry gives each metric version its own); () for an unknown one."""
    if isinstance(levels, abc.Mapping):  # collections.abc: typing.Mapping's check is several times slower
        return levels.get(fingerprint, ())
    return levels


def plan_additions(
    messages: Sequence[AcceptedMessage],
    last_offset: Callable[[BucketKey], int],
    params_by_fp: Mapping[str, OCMSParams],
    tracked_by_fp: Mapping[str, TrackedValues],
    levels: Sequence[tuple[int, int]] | Mapping[str, Sequence[tuple[int, int]]],
) -> tuple[BatchPlan, dict[BucketKey, list]]:
    """What a micro-batch adds to each member key, exact under replay: ``(plan, added)``, ``added``
    mapping a key to ``[n, counts, highest offset, shuffled reports, smallest shuffled batch, largest]``
    (``plan`` without writes: ``plan_batch`` and ``encoded_plan`` fold ``added`` each their way).

    ``last_offset(key)`` is the highest source offset a key's stored state holds (NO_OFFSET for
    none), asked once per key. Events sharing a base bucket share all their keys. Within such a
    group, each key counts only events above its stored offset; the distinct stored offsets cut
    the group into at most (levels + 1) segments, each decoded once, and a key sums the segments
    above its offset. Without a replay (the normal case) that is one kernel call per (partition,
    parameter set, bucket).
    """
    plan = BatchPlan()
    groups = _base_bucket_groups(messages, levels, plan)
    offsets: dict[BucketKey, int] = {}
    started = time.perf_counter()
    planned = []  # (thresholds, first offset, cuts, segments) per group; segments decoded below
    jobs = []  # (params, batch, tracked, segment): every kernel call of the batch, made together
    for (fingerprint, partition, _), group in groups.items():
        group.sort(key=lambda m: m.offset)
        params, tracked = params_by_fp[fingerprint], tracked_by_fp[fingerprint]
        thresholds = {}
        for key in keys_for(fingerprint, partition, group[0].timestamp, levels_of(levels, fingerprint)):
            threshold = offsets.get(key)
            if threshold is None:
                threshold = offsets[key] = last_offset(key)
            thresholds[key] = threshold
        cuts = sorted(set(thresholds.values()))
        segments = _segments(group, cuts, params, tracked, jobs)
        planned.append((thresholds, group[0].offset, cuts, segments))
    decode_segments(jobs)
    added: dict[BucketKey, list] = {}
    replayed_keys = _add_segments(planned, added)
    plan.decode_seconds = time.perf_counter() - started
    for key, slot in added.items():
        if key.is_total:
            plan.counted[key.fingerprint] += slot[0]
    # A key that skipped replayed events and got nothing new is written again unchanged: with a
    # local store (RocksDB) its value may have reached the store but not the changelog before a
    # crash, and the changelog (which every worker's view reads) must converge to it.
    plan.reasserted = sorted(replayed_keys - added.keys())
    plan.replayed = plan.reports - sum(plan.counted.values())
    return plan, added


def _base_bucket_groups(messages: Sequence[AcceptedMessage], levels, plan: BatchPlan) -> dict[tuple, list]:
    """The micro-batch's events by (fingerprint, partition, base bucket): events of a group share all their
    keys. Counts the batch's reports into ``plan``."""
    groups: dict[tuple[str, int, int], list[AcceptedMessage]] = defaultdict(list)
    for message in messages:
        base = levels_of(levels, message.fingerprint)[0][0]
        groups[(message.fingerprint, message.partition, bucket_start(message.timestamp, base))].append(message)
        plan.reports += len(message.batch)
    return groups


def _segments(group: list[AcceptedMessage], cuts: list[int], params: OCMSParams, tracked: TrackedValues,
              jobs: list) -> list:
    """A group (sorted by offset) cut at its keys' stored offsets: segment i holds the events with
    cuts[i] < offset <= cuts[i + 1] (None when empty); each segment's decode is queued on ``jobs``."""
    if cuts[-1] < group[0].offset:  # no replay (the normal case): the whole group is the last segment
        batch = ReportBatch.concat([m.batch for m in group])
        segment = new_segment(group, batch, group[-1].offset)
        jobs.append((params, batch, tracked, segment))
        return [None] * (len(cuts) - 1) + [segment]
    segments = []
    group_offsets = np.fromiter((m.offset for m in group), np.int64, len(group))
    for i, low in enumerate(cuts):
        high = cuts[i + 1] if i + 1 < len(cuts) else None
        lo = int(np.searchsorted(group_offsets, low, side="right"))
        hi = len(group) if high is None else int(np.searchsorted(group_offsets, high, side="right"))
        if lo >= hi:
            segments.append(None)
            continue
        batch = ReportBatch.concat([m.batch for m in group[lo:hi]])
        segment = new_segment(group[lo:hi], batch, int(group_offsets[hi - 1]))
        jobs.append((params, batch, tracked, segment))
        segments.append(segment)
    return segments


def _add_segments(planned: list, added: dict[BucketKey, list]) -> set[BucketKey]:
    """Sum into ``added`` each key's decoded segments above its stored offset; the keys that skip a
    replayed event."""
    replayed_keys: set[BucketKey] = set()
    for thresholds, first, cuts, segments in planned:
        for key, threshold in thresholds.items():
            if first <= threshold:  # this key skips at least one (replayed) event
                replayed_keys.add(key)
            for segment in segments[cuts.index(threshold):]:
                if segment is None:
                    continue
                n, counts, last, shuffled, shuffle_min, shuffle_max = segment
                slot = added.get(key)
                if slot is None:  # counts shared with the group's other keys: never added to in place
                    added[key] = [n, counts, last, shuffled, shuffle_min, shuffle_max]
                else:  # (4-byte counts: a key's sum over one batch is at most the batch's reports, < 2^32)
                    slot[0] += n
                    slot[1] = slot[1] + counts
                    slot[2] = max(slot[2], last)
                    slot[3] += shuffled
                    slot[4] = smallest_batch(slot[4], shuffle_min)
                    slot[5] = max(slot[5], shuffle_max)
    return replayed_keys


def plan_batch(
    messages: Sequence[AcceptedMessage],
    read: Callable[[BucketKey], PartialCounts | None],
    params_by_fp: Mapping[str, OCMSParams],
    tracked_by_fp: Mapping[str, TrackedValues],
    levels: Sequence[tuple[int, int]] | Mapping[str, Sequence[tuple[int, int]]],
) -> BatchPlan:
    """Fold a micro-batch into new per-key states (exact under replay; ``plan_additions`` has the
    argument): ``plan.writes`` holds each added-to key's ``fold``ed state, then each re-asserted
    key's stored state. ``read(key)`` is called once per key. The reference fold: the worker folds
    the same additions into its stored bytes (``encoded_plan``), and the tests hold the two equal."""
    states: dict[BucketKey, PartialCounts | None] = {}

    def last_offset(key: BucketKey) -> int:
        state = states[key] = read(key)
        return NO_OFFSET if state is None else state.last_offset

    plan, added = plan_additions(messages, last_offset, params_by_fp, tracked_by_fp, levels)
    for key, (n, counts, last, shuffled, shuffle_min, shuffle_max) in added.items():
        plan.writes.append((key, fold(states[key], counts, n, last, shuffled, shuffle_min, shuffle_max)))
    plan.writes.extend((key, states[key]) for key in plan.reasserted)
    return plan


def new_segment(messages: Sequence[AcceptedMessage], batch: ReportBatch, last: int) -> list:
    """``[n, counts (decode_segments fills them), last offset, shuffled reports, smallest shuffled
    batch, largest]`` of consecutive events of one group, ``batch`` their reports."""
    shuffled = [m.shuffle_n for m in messages if m.shuffle_n]
    return [len(batch), None, last, sum(len(m.batch) for m in messages if m.shuffle_n), min(shuffled, default=0),
            max(shuffled, default=0)]


def decode_segments(jobs: list) -> None:
    """Fill each job's segment ``[n, counts, last, ...]`` with its kernel counts.

    A registry worker's micro-batch holds many small groups (one per metric version,
    partition and bucket): they are decoded together (``kernel.match_counts_many``: one
    kernel call per decode thread, the threads' shares balanced), each count the same
    integer whichever thread computes it.
    """
    counts = kernel.match_counts_many([(params, batch, tracked) for params, batch, tracked, _ in jobs])
    for (_, _, _, segment), job_counts in zip(jobs, counts):
        # Checked once here, not at every key the counts are folded into (agents.state.OpenBundle adds
        # them in place into 2- or 4-byte counts: a count outside [0, n] must never get there). One reduction:
        # read as unsigned, a negative count is above any n.
        job_counts = np.ascontiguousarray(job_counts, np.int64)  # (no copy: every backend returns int64)
        if job_counts.size and int(job_counts.view(np.uint64).max()) > segment[0]:
            raise InvalidParameterError("counts", "...", f"kernel match counts must lie in [0, n={segment[0]}]")
        # As 4-byte counts (n < 2^32 here: a batch's reports), what a stored member adds them into.
        segment[1] = job_counts.astype(np.uint32)


def batch_keys(
    messages: Sequence[AcceptedMessage],
    levels: Sequence[tuple[int, int]] | Mapping[str, Sequence[tuple[int, int]]],
) -> list[BucketKey]:
    """Every member key ``plan_batch`` reads for ``messages`` (each once)."""
    keys: dict[BucketKey, None] = {}
    groups: set[tuple[str, int, int]] = set()  # events of one base bucket share all their keys
    for message in messages:
        fingerprint_levels = levels_of(levels, message.fingerprint)
        group = (message.fingerprint, message.partition, bucket_start(message.timestamp, fingerprint_levels[0][0]))
        if group not in groups:
            groups.add(group)
            keys.update(dict.fromkeys(keys_for(message.fingerprint, message.partition, message.timestamp,
                                               fingerprint_levels)))
    return list(keys)


def table_keys(messages: Sequence[AcceptedMessage], layout: StateLayout,
               levels: Mapping[str, Sequence[tuple[int, int]]]) -> list[StateKey]:
    """Every table key a checkpoint of ``messages`` reads and writes (each once), so the caller
    can read their values up front and plan away from the table."""
    return list(dict.fromkeys(layout.key_of(key) for key in batch_keys(messages, levels)))


def encoded_plan(
    messages: Sequence[AcceptedMessage],
    stored: Mapping[StateKey, bytes | None],
    layout: StateLayout,
    params_by_fp: Mapping[str, OCMSParams],
    tracked_by_fp: Mapping[str, TrackedValues],
    levels: Mapping[str, Sequence[tuple[int, int]]],
) -> tuple[BatchPlan, list[tuple[StateKey, bytes]]]:
    """``plan_additions`` over the table values read up front (``table_keys``), folded into them:
    the new value of each touched table key, the whole O(reports x D) part of a checkpoint
    (decode, fold, encode). A table value is a bundle (agents.state); each added-to member's
    counts are added in place (``OpenBundle``: the bytes of ``plan_batch``'s fold), and the
    members the batch does not touch are carried over byte for byte. The plan has no ``writes``
    (no PartialCounts are built): ``plan_batch`` is the reference the tests compare these bytes with.

    Pure: it touches no table and no event loop, and its inputs are immutable (accepted
    batches, table values as bytes), so the worker runs it on its decode thread while the loop
    keeps serving (the compiled kernel releases the GIL).
    """
    bundles = {key: OpenBundle(raw) for key, raw in stored.items()}
    key_of = layout.key_of

    def last_offset(key: BucketKey) -> int:
        return bundles[key_of(key)].last_offset(key.fingerprint)

    plan, added = plan_additions(messages, last_offset, params_by_fp, tracked_by_fp, levels)
    touched: dict[StateKey, None] = {}
    for key, (n, counts, last, shuffled, shuffle_min, shuffle_max) in added.items():
        table_key = key_of(key)
        bundles[table_key].fold(key.fingerprint, counts, n, last, shuffled, shuffle_min, shuffle_max)
        touched[table_key] = None
    for key in plan.reasserted:  # written again unchanged (plan_additions says why)
        touched[key_of(key)] = None
    return plan, [(key, bundles[key].encode()) for key in touched]
