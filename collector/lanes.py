"""From accepted uploads to units: what the outlet sends and answers together.

One :class:`Lane` per metric version (parameter fingerprint) batches uploads into frames with
:class:`infra.framing.FrameBatcher`; each frame it builds becomes a :class:`Unit` of one frame
and goes to the outlet (``outlet.send(unit)``) without waiting, so many units can be in flight. A
:class:`ShuffleLane` holds uploads until its batch is full or old enough; the batch is a
:class:`Unit` too, whose reports are permuted and cut into frames when it is sent. A plain frame is
a one-frame batch: the outlet and the exactly-once commit treat both alike, and an upload's future
resolves when every frame of its unit is acknowledged (``acks=all``) and fails when one fails.

Invariants that make "202 means in Kafka" hold:

* an upload never spans two units: before adding an upload that would not fit in the frame
  being filled, the lane flushes it (uploads are at most ``max_upload_reports <=
  frame_max_reports`` reports); a shuffled batch closes at the upload that reaches its size;
* records reach frames in the order they were added (one lock per lane around "maybe flush,
  add"), so an upload covering records [start, end) of the lane's stream is in the first frame
  whose range reaches ``end``;
* an upload's answer waits for its own unit's acknowledgement; a failed unit answers 503 to
  every upload in it (the collector never re-sends a frame itself: the client retries with the
  same idempotency key).

Privacy: frames carry no key (the producer spreads them over partitions), and their timestamp
is the start of the metric's event-time bucket the collector received them in (a shuffled
batch's: the bucket it closed in), never a device clock.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field

from cms_core import claims, wire
from cms_core.reports import ReportBatch
from infra.framing import FrameBatcher
from infra.kafka import KafkaUnavailableError

from .shuffle import THREAD_MIN_REPORTS, shuffle_and_cut

#: Most reports validated by one decode call in a lane's batch validation.
DRAIN_MAX_REPORTS = 65_536


@dataclass
class Member:
    """One upload: reports [start, end) of its lane's stream (of its unit's records from ``Unit.first``),
    the future of its answer and the keyed hash of its Idempotency-Key (exactly-once retries)."""

    end: int
    future: asyncio.Future
    start: int
    key: bytes | None = None


@dataclass(eq=False)
class Unit:
    """Uploads of one metric version sent and answered together: a plain lane's frame, a shuffled batch,
    or a repair (frames of a batch a kill cut short, sent again exactly as first written).

    ``records`` are the members' reports back to back; ``frame`` is a plain unit's frame as the lane built
    it (sent as it is while every member stays); ``preset`` holds a repair's (frame, headers, timestamp_ms)
    each, and its one member is the wait of whoever completes the batch. ``queued`` reports' queue places
    are held until the unit is answered. ``nonce`` .. ``listing`` are set while it is sent with exactly-once
    retries (:mod:`collector.exactly_once.commit`)."""

    version: object  # registry MetricVersion; None for a repair
    records: bytes | memoryview
    members: list[Member]
    timestamp_ms: int  # the start of the event-time bucket: one time for all its frames
    record_size: int
    queued: int
    max_records: int = wire.MAX_FRAME_RECORDS  # reports per frame at most
    shuffled: bool = False
    first: int = 0  # the members' position of records[0]
    frame: bytes | None = None
    preset: list | None = None
    partition: int = 0
    nonce: bytes = b""
    lower: int = 0
    listing: object = None
    claim_key: bytes = b""  # a shuffled batch's claim key (cms_core.claims; b"": its frames carry no MAC)
    frames: int = field(default=0, init=False)  # frames of it acknowledged
    batch_id: bytes = field(default=b"", init=False)
    answered: bool = field(default=False, init=False)
    on_release: object = field(default=None, init=False)  # its lane's group commit (release): called once

    @classmethod
    def of_frame(cls, version, frame: bytes, members: list[Member], first: int, timestamp_ms: int,
                 record_size: int) -> Unit:
        """A plain lane's frame: a one-frame unit (its records are a view of the frame, never copied)."""
        records = memoryview(frame)[wire.HEADER_SIZE:]
        return cls(version, records, members, timestamp_ms, record_size, len(records) // record_size,
                   first=first, frame=frame)

    @classmethod
    def repair(cls, records: list, partition: int, done: asyncio.Future) -> Unit:
        """Frames of a batch cut short, as first written ((frame, headers, timestamp_ms) each), to ``partition``."""
        return cls(None, b"", [Member(0, done, 0)], records[0][2], 1, 0, preset=records, partition=partition)

    @property
    def reports(self) -> int:
        return len(self.records) // self.record_size

    @property
    def keys(self) -> list[bytes]:
        return [m.key for m in self.members if m.key is not None]

    def keep(self, kept: list[Member]) -> None:
        """Only the ``kept`` members' reports stay (the others' keys are held by an earlier attempt)."""
        size, parts, position = self.record_size, [], 0
        for member in kept:
            parts.append(self.records[(member.start - self.first) * size:(member.end - self.first) * size])
            count = member.end - member.start
            member.start, member.end = position, position + count
            position += count
        self.records = b"".join(parts)
        self.members = kept
        self.first = 0
        self.frame = None

    def shuffled_frames(self) -> list[bytes]:
        """The reports permuted with the CSPRNG and cut into frames (:func:`collector.shuffle.shuffle_and_cut`)."""
        return shuffle_and_cut(self.records, self.record_size, self.version.fingerprint, self.max_records)

    async def cut(self) -> list[bytes]:
        """The frames to send: a plain unit's one frame, a shuffled one's (on a thread for large batches)."""
        if not self.shuffled:
            if self.frame is not None:
                return [self.frame]
            if not self.records:
                return []
            header = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, self.version.fingerprint, self.reports)
            return [header + self.records]
        if self.reports > THREAD_MIN_REPORTS:
            return await asyncio.to_thread(self.shuffled_frames)
        return self.shuffled_frames()

    def headers(self, frame: bytes) -> list[tuple[str, bytes]]:
        """The headers ``frame`` carries: a shuffled batch's claim (its size; with a claim key its id and the
        frame's MAC: cms_core.claims), none for a plain frame."""
        if not self.shuffled:
            return []
        if self.claim_key and not self.batch_id:
            self.batch_id = claims.new_batch_id()
        return claims.claim_headers(self.claim_key, self.reports, self.batch_id, frame)

    def answer(self, error: BaseException | None) -> None:
        """Resolve the members' futures: acknowledged (None), or failed with KafkaUnavailableError."""
        self.answered = True
        failure = None if error is None else error if isinstance(error, KafkaUnavailableError) \
            else KafkaUnavailableError(f"{type(error).__name__}: {error}")
        for member in self.members:
            if not member.future.done():
                if failure is None:
                    member.future.set_result(None)
                else:
                    member.future.set_exception(failure)
        self.release()

    def release(self) -> None:
        """Its lane may send the next frame: this one was answered, or the exactly-once commit listed and sent
        the group holding it (the next frame goes to a later group, listed after this one)."""
        callback, self.on_release = self.on_release, None
        if callback is not None:
            callback()


@dataclass
class Lane:
    """Frames of one metric version."""

    version: object  # registry MetricVersion
    outlet: object  # collector.outlet.KafkaOutlet: send(unit)
    max_records: int
    max_latency_s: float
    bucket_seconds: int
    batcher: FrameBatcher = field(init=False)
    added: int = 0  # records added to this lane (positions)
    dispatched: int = 0  # records handed to Kafka in frames
    bucket_ms: int | None = None  # event-time bucket of the frame being filled

    def __post_init__(self):
        self.lock = asyncio.Lock()
        self.unreleased = 0  # units of this lane sent and not released yet (group commit)
        self.committing = False  # a group commit after an acknowledgement is scheduled
        self.pending: collections.deque = collections.deque()  # (records, n, future, key) awaiting validation
        self.drain_scheduled = False
        self.drains: set[asyncio.Task] = set()
        self.clock = time.time
        self.members: collections.deque[Member] = collections.deque()
        self.record_size = wire.record_size(self.version.params)
        self.batcher = FrameBatcher(self.version.params, send=self._dispatch, max_records=self.max_records,
                                    max_latency_s=self.max_latency_s)
        self.max_records = self.batcher.max_records  # capped by the frame byte limit

    async def add(self, batch: ReportBatch, now: float, key: bytes | None = None) -> asyncio.Future:
        """Buffer one decoded upload; the returned future resolves when its frame is acknowledged."""
        future = asyncio.get_running_loop().create_future()
        async with self.lock:
            await self._add_locked(batch, [(len(batch), future, key)], now)
            await self._commit_if_idle()
        return future

    def submit(self, records: bytes, n: int, key: bytes | None = None) -> asyncio.Future:
        """Buffer one upload given as raw records (its framing already checked); validated in a batch.

        Uploads submitted in the same event-loop turn are decoded and validated together with one
        :func:`cms_core.wire.decode_message` call (the per-call cost dominates single-report uploads);
        if that fails, each is decoded alone, so a bad upload gets its own reason and the others go on.
        The future raises UploadRejected for a bad upload, KafkaUnavailableError when its frame fails.
        """
        future = asyncio.get_running_loop().create_future()
        self.pending.append((records, n, future, key))
        if not self.drain_scheduled:
            self.drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._start_drain)
        return future

    def _start_drain(self) -> None:
        task = asyncio.ensure_future(self._drain())
        self.drains.add(task)
        task.add_done_callback(self.drains.discard)

    async def _drain(self) -> None:
        from .uploads import UploadRejected

        async with self.lock:
            items, total = [], 0
            while self.pending and (not items or total + self.pending[0][1] <= DRAIN_MAX_REPORTS):
                item = self.pending.popleft()
                items.append(item)
                total += item[1]
            if self.pending:
                asyncio.get_running_loop().call_soon(self._start_drain)  # the rest in the next turn
            else:
                self.drain_scheduled = False
            params, fingerprint = self.version.params, self.version.fingerprint
            registry = {fingerprint: params}
            try:
                try:
                    message = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, fingerprint, total)
                    _, batch = wire.decode_message(message + b"".join(item[0] for item in items), registry)
                    good = items
                except wire.WireFormatError:
                    good, parts = [], []
                    for item in items:
                        records, n, future, _ = item
                        message = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, fingerprint, n)
                        try:
                            parts.append(wire.decode_message(message + records, registry)[1])
                        except wire.WireFormatError as exc:
                            future.set_exception(UploadRejected(400, exc.reason, str(exc)))
                            continue
                        good.append(item)
                    batch = (parts[0] if len(parts) == 1 else ReportBatch.concat(parts)) if parts else None
                if good:
                    raw = b"".join(item[0] for item in good) if self.keeps_records else None
                    await self._add_locked(batch, [(n, future, key) for _, n, future, key in good], self.clock(), raw)
                    await self._commit_if_idle()
            except BaseException as exc:
                for _, _, future, _ in items:
                    if not future.done():
                        future.set_exception(exc if isinstance(exc, Exception) else KafkaUnavailableError("cancelled"))
                if not isinstance(exc, Exception):
                    raise

    #: Whether ``_add_locked`` wants the uploads' validated raw records too (a shuffling lane keeps them).
    keeps_records = False
    #: Group commit (issue 41): a frame leaves as soon as the lane's previous one is released (acknowledged;
    #: with exactly-once retries, listed and sent in a commit group), holding every upload validated meanwhile;
    #: ``max_latency_s`` only bounds the wait while one is not. Alone, an upload waits for no timer; under
    #: load the frames grow with the round trip. (A frame at every loop turn instead cost 10-15 us more per
    #: upload in small frames.)
    group_commit = True

    async def _commit_if_idle(self) -> None:
        """Under the lock: send the frame being filled now when no earlier frame of this lane is held."""
        if self.group_commit and not self.unreleased and self.batcher.buffered:
            await self.batcher.flush()

    def _released(self) -> None:
        """A unit of this lane was released: when it was the last one held, send what came meanwhile."""
        self.unreleased -= 1
        if not self.unreleased and self.batcher.buffered and not self.committing:
            self.committing = True
            task = asyncio.ensure_future(self._commit_waiting())
            self.drains.add(task)
            task.add_done_callback(self.drains.discard)

    async def _commit_waiting(self) -> None:
        try:
            async with self.lock:
                await self._commit_if_idle()
        finally:
            self.committing = False

    async def _add_locked(self, batch: ReportBatch, uploads: list[tuple[int, asyncio.Future, bytes | None]],
                          now: float, raw: bytes | None = None) -> None:
        """Add consecutive uploads (their reports in order in ``batch``), never splitting one over two frames."""
        bucket_ms = int(now // self.bucket_seconds) * self.bucket_seconds * 1000
        if self.batcher.buffered and bucket_ms != self.bucket_ms:
            await self.batcher.flush()  # the frame being filled belongs to an older bucket
        start, i = 0, 0
        while i < len(uploads):
            if uploads[i][0] > self.max_records - self.batcher.buffered:
                await self.batcher.flush()  # the frame being filled is complete for this upload
            if not self.batcher.buffered:
                self.bucket_ms = bucket_ms
            room = self.max_records - self.batcher.buffered
            j, size, position = i, 0, self.added
            members = []
            while j < len(uploads) and size + uploads[j][0] <= room:
                n, future, key = uploads[j]
                members.append(Member(position + n, future, position, key))
                position += n
                size += n
                j += 1
            if not members:
                raise AssertionError(f"an upload of {uploads[i][0]} reports exceeds the frame bound {self.max_records}")
            self.members.extend(members)
            self.added = position
            try:
                await self.batcher.add(batch if start == 0 and size == len(batch) else batch.slice(start, start + size))
            except BaseException:
                # Refused before buffering (the batcher is closed): forget these uploads' positions.
                for member in reversed(members):
                    if self.members and self.members[-1] is member:
                        self.members.pop()
                self.added -= size
                raise
            start, i = start + size, j

    async def _dispatch(self, frame: bytes) -> None:
        """FrameBatcher's send: hand the frame to the outlet as a one-frame unit, without waiting."""
        records = (len(frame) - wire.HEADER_SIZE) // self.record_size
        start, end = self.dispatched, self.dispatched + records
        self.dispatched = end
        mine = []
        while self.members and self.members[0].end <= end:
            member = self.members.popleft()
            assert member.start >= start, "an upload spans two frames"
            mine.append(member)
        unit = Unit.of_frame(self.version, frame, mine, start, self.bucket_ms, self.record_size)
        if self.group_commit:
            self.unreleased += 1
            unit.on_release = self._released
        try:
            self.outlet.send(unit)
        except BaseException:
            if unit.on_release is not None:  # never sent: nothing will release it
                unit.on_release = None
                self.unreleased -= 1
            raise

    async def close(self) -> None:
        while self.drains:
            await asyncio.gather(*list(self.drains), return_exceptions=True)
        await self.batcher.close()


@dataclass
class ShuffleLane(Lane):
    """A lane that holds uploads until ``min_reports`` reports are held or ``max_seconds`` passed since
    the first, then hands them to the outlet as one shuffled :class:`Unit` (shuffled, cut, produced)."""

    min_reports: int = 1
    max_seconds: float = 60.0
    group_commit = False  # it holds uploads for its batch (close_batch), never in the frame batcher
    claim_key: bytes = b""  # --shuffle-claim-key-file's key: every frame's claim signed (cms_core.claims)
    keeps_records = True

    def __post_init__(self):
        super().__post_init__()
        self._parts: list[bytes] = []
        self._members: list[Member] = []
        self.held = 0  # reports held for the next batch
        self._timer: asyncio.TimerHandle | None = None

    async def _add_locked(self, batch: ReportBatch, uploads: list[tuple[int, asyncio.Future, bytes | None]],
                          now: float, raw: bytes | None = None) -> None:
        if raw is None:
            raw = wire.encode_batch(self.version.params, batch)[wire.HEADER_SIZE:]
        # The batch closes at the upload that reaches min_reports, even inside a group validated together, so
        # a batch holds fewer than min_reports + --max-upload-reports reports and at most min_reports uploads:
        # the keys one listing names (settings._check_shuffle holds --idempotency-max-keys to that bound).
        start = end = 0  # the bytes of raw not handed to a batch yet
        for n, future, key in uploads:
            self._members.append(Member(self.held + n, future, self.held, key))
            self.held += n
            end += n * self.record_size
            if self.held >= self.min_reports:
                self._parts.append(raw[start:end] if start or end < len(raw) else raw)
                start = end
                self.close_batch()
        if end > start:
            self._parts.append(raw[start:end] if start else raw)
        if self.held and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.max_seconds, self.close_batch)

    def close_batch(self) -> None:
        """Hand what is held to the outlet as one unit (timestamped with the bucket it closes in)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.held:
            return
        bucket_ms = int(self.clock() // self.bucket_seconds) * self.bucket_seconds * 1000
        unit = Unit(self.version, b"".join(self._parts), self._members, bucket_ms, self.record_size, self.held,
                    self.max_records, shuffled=True, claim_key=self.claim_key)
        self._parts, self._members, self.held = [], [], 0
        self.outlet.send(unit)

    async def close(self) -> None:
        while self.drains:
            await asyncio.gather(*list(self.drains), return_exceptions=True)
        self.close_batch()  # what it holds, fewer than min_reports: its header says how many
        await self.batcher.close()
