"""The idempotency log's records, and what every collector computes from them (:class:`ListingLog`).

Records (partition 0 of ``--idempotency-topic``; the formats are stored, so they never change here):

* **listing** (``F``): a frame's random nonce (also its ``ocms-frame`` Kafka header), the partition it
  goes to and an offset below it, the producing collector (transactional id and producer incarnation),
  a time, and the keyed hashes of its uploads' keys. Written *before* the frame.
* **batch listing** (``B``): the same for a shuffled batch (a key maps to its batch, never to a frame),
  and where its redo copy starts; its frames' ``ocms-frame`` header is the nonce, the frame's index and
  the batch's frame count (:func:`batch_frame_id`). A plain frame is a batch of one: index 0 of 1.
* **lease** (``L``, after release 0.2.0): its collector's time, incarnation and name: it holds nothing; it
  says its collector was alive at its time. Release 0.2.0 wrote (and this code reads) a lease as a listing
  without keys (``F``); it skips ``L`` as unknown, so a collector started with ``--upgrade-from 0.2`` writes
  leases as ``F`` while a 0.2.0 collector shares the log (:func:`write_leases_for`).
* **outcome**: the listed frame or batch was stored (``S``) or never will be (``X``).

**Time.** A listing's time is its collector's wall clock (whole seconds) when it wrote the listing, never
the frame's event time: a 1-day bucket starts a day before its last upload, and a listing timed by it
was forgotten as soon as a listing of a 1-minute metric came, so its retries were stored again. The
log's clock (:attr:`ListingLog.clock_s`) is the greatest listing time applied so far, and listings
older than the window on that clock are forgotten: a function of the records in log order, so every
collector, and one reading the log afresh after a restart, forgets the same listings at the same
record. A writer never dates a listing before the log's clock as it has read it
(:meth:`ListingLog.listing_time`): a collector whose clock is behind does not write listings that are
forgotten at once. A collector whose clock is ahead by d shortens everyone's window by d (the tail
warns when a listing is dated well ahead of the reader's clock).
"""

from __future__ import annotations

import array
import collections
import hashlib
import logging
import os
import struct
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: The Kafka header of a frame holding its nonce (16 random bytes; a shuffled batch's: :func:`batch_frame_id`).
FRAME_HEADER = "ocms-frame"
NONCE_BYTES = 16
KEY_HASH_BYTES = 16
#: listing: kind, nonce, partition, lower offset, time (s), incarnation, owner length; then owner, keys.
_LISTING = struct.Struct(">c16sIQQ8sH")
#: batch listing: the same, then the redo topic's lower offset; then owner, keys.
_BATCH_LISTING = struct.Struct(">c16sIQQ8sHQ")
_OUTCOME = struct.Struct(">c16s")
LISTING, BATCH_LISTING, STORED, FAILED = b"F", b"B", b"S", b"X"
#: lease: kind, time (s), incarnation, owner length; then owner (28 bytes fewer than a listing of no keys: no
#: nonce, partition or offset, which mean nothing for a lease).
_LEASE = struct.Struct(">cQ8sH")
LEASE = b"L"
#: The releases whose collectors may share the log with this one (``ocms collector --upgrade-from``).
UPGRADE_FROM = ("0.2",)
_lease_kind = LEASE  # set once per process by write_leases_for
#: The ``ocms-frame`` header of a shuffled batch's frame: the batch nonce, the frame's index, the frame count.
_BATCH_FRAME = struct.Struct(">16sII")


def _whole(key_hashes: bytes) -> None:
    if len(key_hashes) % KEY_HASH_BYTES:
        raise ValueError(f"key hashes are not whole: {len(key_hashes)} bytes is not a multiple of {KEY_HASH_BYTES}")


class DictKeyTable(dict):
    """The holders table as a dict (key hash -> listing): what :class:`KeyTable` computes, in Python. It is the
    table when the compiled one (``collector/exactly_once/_keytable.c``, whose header says what it saves) is not
    built, and the reference the tests compare it with. Beside each held key it keeps this process's body digest
    of the upload listed under it, if any (never in the log; a reused key's 422): forgotten with the key."""

    def __init__(self):
        super().__init__()
        self.digests: dict[bytes, int] = {}

    def set_digests(self, key_hashes: bytes, holder, digests: bytes) -> int:
        """Keep a body digest (``digests``: native int64s, one a key, -1 for none) with each key ``holder`` holds,
        while it holds it; how many were kept."""
        _whole(key_hashes)
        count = len(key_hashes) // KEY_HASH_BYTES
        if len(digests) != 8 * count:
            raise ValueError(f"{len(digests)} digests of 8 bytes for {count} keys: give one a key")
        kept = 0
        for start, digest in zip(range(0, len(key_hashes), KEY_HASH_BYTES), array.array("q", digests)):
            key = key_hashes[start:start + KEY_HASH_BYTES]
            if digest != -1 and self.get(key) is holder:
                self.digests[key] = digest
                kept += 1
        return kept

    def digest(self, key: bytes) -> int | None:
        """The body digest kept with a held key, or None."""
        return self.digests.get(key)

    def take(self, key_hashes: bytes, holder) -> bytes | None:
        """Each key not held yet becomes held by ``holder``: None when every key took, else a byte per key, 1
        where it took (a key repeated in ``key_hashes`` takes once)."""
        _whole(key_hashes)
        taken = None
        for index, start in enumerate(range(0, len(key_hashes), KEY_HASH_BYTES)):
            key = key_hashes[start:start + KEY_HASH_BYTES]
            took = key not in self
            if took:
                self[key] = holder
            if taken is not None:
                taken.append(took)
            elif not took:
                taken = bytearray(b"\x01" * index + b"\x00")
        return None if taken is None else bytes(taken)

    def release(self, key_hashes: bytes, holder) -> int:
        """Each key held by ``holder`` (the same object) is held no more; how many were."""
        _whole(key_hashes)
        released = 0
        for start in range(0, len(key_hashes), KEY_HASH_BYTES):
            key = key_hashes[start:start + KEY_HASH_BYTES]
            if self.get(key) is holder:
                del self[key]
                self.digests.pop(key, None)
                released += 1
        return released


try:  # pragma: no cover - depends on the build
    from ._keytable import KeyTable
except ImportError:  # pragma: no cover - not compiled: the dict, same results (slower under load)
    KeyTable = DictKeyTable
#: Which holders table this process uses: "compiled" or "dict".
KEY_TABLE_BACKEND = "dict" if KeyTable is DictKeyTable else "compiled"

#: BLAKE2b states keyed with a secret and fed an application's prefix, per (secret, application) seen (a
#: deployment has one secret and a few applications; a copy is cheaper than keying and feeding the prefix afresh).
_KEYED_STATES: dict[tuple[bytes, str], object] = {}
_KEYED_STATES_MAX = 1024


def key_hash(secret: bytes, application: str, key: str) -> bytes:
    """The keyed hash of an upload's Idempotency-Key that the log holds (never the key itself): BLAKE2b keyed with
    the deployment's secret over ``application NUL key``."""
    state = _KEYED_STATES.get((secret, application))
    if state is None:
        state = hashlib.blake2b(key=secret, digest_size=KEY_HASH_BYTES, person=b"ocms-idem-v1")
        state.update(f"{application}\x00".encode())
        if len(_KEYED_STATES) >= _KEYED_STATES_MAX:  # a bound, not a cache policy: applications are few
            _KEYED_STATES.clear()
        _KEYED_STATES[(secret, application)] = state
    digest = state.copy()
    digest.update(key.encode())
    return digest.digest()


def encode_listing(nonce: bytes, owner: str, incarnation: bytes, partition: int, lower: int, time_s: int,
                   keys: list[bytes]) -> bytes:
    name = owner.encode()
    return _LISTING.pack(LISTING, nonce, partition, lower, time_s, incarnation, len(name)) + name + b"".join(keys)


def encode_batch_listing(nonce: bytes, owner: str, incarnation: bytes, partition: int, lower: int, redo_lower: int,
                         time_s: int, keys: list[bytes]) -> bytes:
    """The listing of a shuffled batch: every key of its uploads, and where its redo copy starts."""
    name = owner.encode()
    return _BATCH_LISTING.pack(BATCH_LISTING, nonce, partition, lower, time_s, incarnation, len(name),
                               redo_lower) + name + b"".join(keys)


def write_leases_for(upgrade_from: str | None) -> None:
    """Write leases as every collector of release ``upgrade_from`` reads them (a listing of no keys, ``F``), or as
    ``L`` records when None: the first and the second rolling bounce of an upgrade (CHANGELOG.md, Upgrading)."""
    global _lease_kind
    if upgrade_from is not None and upgrade_from not in UPGRADE_FROM:
        raise ValueError(f"--upgrade-from {upgrade_from!r}: expected one of {', '.join(UPGRADE_FROM)}")
    _lease_kind = LEASE if upgrade_from is None else LISTING


def leases_written_for() -> str | None:
    """The release whose collectors this process writes leases for (None: this code's ``L`` records)."""
    return None if _lease_kind == LEASE else UPGRADE_FROM[0]


def encode_lease(owner: str, incarnation: bytes, lower: int, time_s: int) -> bytes:
    """A lease renewal: an ``L`` record, or with ``--upgrade-from 0.2`` a listing of no keys (its nonce is in no
    frame; ``lower`` is an offset at or below the end of partition 0, so a collector of before leases, which takes
    it for a listing to settle, reads little of the partition for it)."""
    if _lease_kind == LISTING:
        return encode_listing(os.urandom(NONCE_BYTES), owner, incarnation, 0, lower, time_s, [])
    return encode_lease_record(owner, incarnation, time_s)


def encode_lease_record(owner: str, incarnation: bytes, time_s: int) -> bytes:
    """An ``L`` lease record (what ``encode_lease`` writes without ``--upgrade-from``)."""
    name = owner.encode()
    return _LEASE.pack(LEASE, time_s, incarnation, len(name)) + name


def decode_lease(value: bytes) -> tuple[str, bytes, int]:
    """(owner, incarnation, time) of an ``L`` record."""
    _, time_s, incarnation, size = _LEASE.unpack_from(value)
    if len(value) != _LEASE.size + size:
        raise ValueError(f"lease of {len(value)} bytes names an owner of {size}")
    return value[_LEASE.size:].decode(), incarnation, time_s


def batch_frame_id(nonce: bytes, index: int, count: int) -> bytes:
    """The ``ocms-frame`` header value of frame ``index`` of a shuffled batch of ``count`` frames."""
    return _BATCH_FRAME.pack(nonce, index, count)


def parse_batch_frame_id(value) -> tuple[bytes, int, int] | None:
    """(nonce, index, count) of a shuffled batch's frame header, None for any other value."""
    if not isinstance(value, (bytes, bytearray)) or len(value) != _BATCH_FRAME.size:
        return None
    nonce, index, count = _BATCH_FRAME.unpack(value)
    return (nonce, index, count) if index < count else None


def parse_frame_id(value) -> tuple[bytes, int, int] | None:
    """(nonce, index, count) of any frame's ``ocms-frame`` header: a plain frame's nonce is frame 0 of 1."""
    if isinstance(value, (bytes, bytearray)) and len(value) == NONCE_BYTES:
        return bytes(value), 0, 1
    return parse_batch_frame_id(value)


def encode_outcome(nonce: bytes, stored: bool) -> bytes:
    return _OUTCOME.pack(STORED if stored else FAILED, nonce)


@dataclass(eq=False)
class Listing:
    nonce: bytes
    owner: str
    incarnation: bytes
    partition: int
    lower: int
    time: int  # its collector's wall clock (s) when it was written
    key_hashes: bytes  # its keys' hashes, KEY_HASH_BYTES each, in its record's order (one string: no object a key)
    offset: int
    seen_at: float  # this process's monotonic clock when it was applied
    #: which keys it took (ListingLog.apply): None for every key, else a byte per key, 1 where it took
    taken: bytes | None = None
    held: int = 0  # how many keys it took
    status: str = "pending"  # pending | stored | failed
    batch: bool = False  # a shuffled batch's listing (its frames carry batch_frame_id headers)
    redo_lower: int = 0  # an offset of the redo topic at or below the batch's redo copy

    @property
    def keys(self) -> tuple[bytes, ...]:
        """Its keys' hashes, one bytes object each."""
        blob = self.key_hashes
        return tuple(blob[i:i + KEY_HASH_BYTES] for i in range(0, len(blob), KEY_HASH_BYTES))

    @property
    def valid(self) -> set[bytes]:
        """The keys it took when the log applied it (held by no earlier listing then)."""
        if self.taken is None:
            return set(self.keys)
        return {key for key, took in zip(self.keys, self.taken) if took}


def decode_listing(value: bytes, offset: int, seen_at: float) -> Listing:
    batch = value[:1] == BATCH_LISTING
    redo_lower = 0
    if batch:
        _, nonce, partition, lower, time_s, incarnation, size, redo_lower = _BATCH_LISTING.unpack_from(value)
        head = _BATCH_LISTING.size
    else:
        _, nonce, partition, lower, time_s, incarnation, size = _LISTING.unpack_from(value)
        head = _LISTING.size
    start = head + size
    key_hashes = value[start:]
    if len(key_hashes) % KEY_HASH_BYTES:
        raise ValueError("key hashes are not whole")
    return Listing(nonce, value[head:start].decode(), incarnation, partition, lower, time_s, key_hashes, offset,
                   seen_at, batch=batch, redo_lower=redo_lower)


@dataclass
class _Owner:
    """A collector with pending listings: them, and how long it has been silent as the observer measures it."""

    pending: dict = field(default_factory=dict)  # nonce -> Listing, in log order
    silent_since: int | None = None  # the observer's time at its first listing after this owner's latest


class ListingLog:
    """What every collector computes from the log, in its order (so every collector agrees).

    A listing takes each of its keys that no earlier listing holds (pending or stored; a failed
    listing releases its keys). Listings older than ``window_s`` on the log's clock and the oldest
    beyond ``max_keys`` held keys are forgotten, also in log order (the module docstring says why
    the clock is the collectors' and not event time).

    **Silence** (:meth:`silent_for`, for the collector named ``observer``): how long, on the
    observer's own clock, the log shows an owner of pending listings saying nothing: the time
    between the observer's first listing after that owner's latest listing (or lease) and the
    observer's latest listing. Only the observer's clock is compared with itself, and only the log's
    order says "after", so neither clock skew nor how late the observer reads the log can make a
    collector that writes look silent. It decides nothing about keys (so replicas still agree on
    those); :mod:`collector.exactly_once.shared` uses it to never fence a live collector.
    """

    def __init__(self, window_s: float, max_keys: int, clock=time.monotonic, observer: str | None = None):
        self.window_s = window_s
        self.max_keys = max_keys
        self.clock = clock
        self.observer = observer
        self.frames: collections.OrderedDict[bytes, Listing] = collections.OrderedDict()
        self.holders = KeyTable()  # key hash -> the listing holding it (.get, .take, .release, len)
        self.held = 0
        self.bad_records = 0
        self.clock_s = 0  # the greatest listing time applied
        self.owners: dict[str, _Owner] = {}  # the owners of pending listings
        self.observer_time = 0  # the time of the observer's latest listing
        self._heard_since: set[str] = set()  # owners that wrote since the observer's latest listing

    def __len__(self) -> int:
        return len(self.holders)

    def holder(self, key: bytes) -> Listing | None:
        return self.holders.get(key)

    def listing_time(self, wall_s: float) -> int:
        """The time a collector whose wall clock says ``wall_s`` gives its next listing: never before the log's
        clock."""
        return max(int(wall_s), self.clock_s)

    def pending_of(self, owner: str) -> list[Listing]:
        """The pending listings of ``owner``, in log order."""
        state = self.owners.get(owner)
        return list(state.pending.values()) if state is not None else []

    def silent_for(self, owner: str) -> float:
        """Seconds of the observer's clock the log shows ``owner`` (of pending listings) silent; 0 while it writes."""
        state = self.owners.get(owner)
        if state is None or state.silent_since is None:
            return 0.0
        return float(self.observer_time - state.silent_since)

    def apply(self, offset: int, value: bytes) -> Listing | None:
        """Apply one record; the listing it adds or settles, if any (a lease adds none)."""
        try:
            kind = value[:1]
            if kind in (LISTING, BATCH_LISTING):
                listing = decode_listing(value, offset, self.clock())
            elif kind in (STORED, FAILED):
                _, nonce = _OUTCOME.unpack(value)
                return self._outcome(nonce, kind == STORED)
            elif kind == LEASE:
                owner, _, time_s = decode_lease(value)
                self._advance(time_s)
                self._heard(owner, time_s)
                return None
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            self.bad_records += 1
            log.warning("idempotency log offset %d: not a collector record (%s); skipped", offset, exc)
            return None
        if listing.nonce in self.frames:
            return None  # a duplicate append (a producer retry): the first one counts
        self._advance(listing.time)
        key_hashes = listing.key_hashes
        if key_hashes:
            # Each key no earlier listing holds: pending or stored (a failed listing released its keys, _outcome).
            listing.taken = taken = self.holders.take(key_hashes, listing)
            listing.held = len(key_hashes) // KEY_HASH_BYTES if taken is None else taken.count(1)
            self.frames[listing.nonce] = listing
            self.owners.setdefault(listing.owner, _Owner()).pending[listing.nonce] = listing
            self.held += listing.held
        self._heard(listing.owner, listing.time)
        while self.held > self.max_keys and self.frames:
            self._drop(next(iter(self.frames)))
        return listing if key_hashes else None

    def _advance(self, time_s: int) -> None:
        """The log's clock after a listing or lease of ``time_s``: the greatest so far; what it leaves behind expires."""
        if time_s > self.clock_s:
            self.clock_s = time_s
            self._expire()

    def _heard(self, owner: str, time_s: int) -> None:
        """``owner`` wrote a listing or a lease at ``time_s`` (its clock)."""
        if self.observer is None:
            return
        if owner == self.observer:
            self.observer_time = time_s
            for other in self._heard_since:
                state = self.owners.get(other)
                if state is not None and state.silent_since is None:
                    state.silent_since = time_s
            self._heard_since.clear()
            return
        state = self.owners.get(owner)
        if state is not None:
            state.silent_since = None
            self._heard_since.add(owner)

    def _outcome(self, nonce: bytes, stored: bool) -> Listing | None:
        listing = self.frames.get(nonce)
        if listing is None or listing.status != "pending":
            return None  # forgotten, or settled already (every settler finds the same)
        listing.status = "stored" if stored else "failed"
        self._settled(listing)
        if not stored:
            self.holders.release(listing.key_hashes, listing)
        return listing

    def _settled(self, listing: Listing) -> None:
        """The listing is no longer pending (settled or forgotten): its owner no longer waits for it."""
        state = self.owners.get(listing.owner)
        if state is not None and state.pending.pop(listing.nonce, None) is not None and not state.pending:
            del self.owners[listing.owner]

    def _expire(self) -> None:
        oldest = self.clock_s - self.window_s
        while self.frames:
            nonce, first = next(iter(self.frames.items()))
            if first.time >= oldest:
                break
            self._drop(nonce)

    def _drop(self, nonce: bytes) -> None:
        listing = self.frames.pop(nonce)
        self.held -= listing.held
        if listing.status == "pending":
            self._settled(listing)
        self.holders.release(listing.key_hashes, listing)
