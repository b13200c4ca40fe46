"""Applying the idempotency log in its order, for one collector: records the tail fetched, and this collector's
own appends from what it sent; and when the tail must fetch (issue 41).

:class:`LogFollower` is the part of :class:`collector.exactly_once.shared.SharedIdempotency` that keeps the
:class:`collector.exactly_once.log.ListingLog` applied up to an offset (``_applied``): a record is applied
only once every offset before it is, whether the tail read it (:class:`collector.exactly_once.tail.LogTail`)
or this collector appended it (its acknowledgement gave the offset, so what the tail would read there is the
bytes sent). Between the tail's polls it says how long the tail may pause (:meth:`LogFollower._pace`) and
where it may skip to (:meth:`LogFollower.applied_offset`): a lone collector never fetches its own records
back, and a record of another collector that an own record waits for is read at once.
"""

from __future__ import annotations

import asyncio
import logging

from .tail import TAIL_GAP_SECONDS, TAIL_IDLE_SECONDS

log = logging.getLogger(__name__)

#: A listing dated this far ahead of the reader's clock is logged: that writer's clock shortens the window.
CLOCK_AHEAD_WARNING_SECONDS = 60


class LogFollower:
    """Applies the log in order (mixed into SharedIdempotency, whose ``__init__`` sets the state used here:
    ``state``, ``ready``, ``local``, ``metrics``, ``clock``, ``wall_clock``, the tail and its waiters)."""

    def _apply_own(self, offsets: list[int], values: list[bytes]) -> None:
        """Apply records this collector appended, in log order, from the bytes it sent: the read-back of step 2
        without a round trip to Kafka.

        Exact because the log is one partition whose offsets only this order gives: Kafka acknowledged each
        record at its offset, so what the tail would read there is these bytes, and a record is applied only
        once every offset before it is applied (by the tail, which reads what other collectors appended, or
        from here). Records whose predecessors are not applied yet wait here (or for the tail, whichever comes
        first): a listing is never applied before another collector's earlier one."""
        if not self.ready:
            return  # the tail is still reading the log from its start
        for offset, value in zip(offsets, values):
            if offset > self._applied:
                self._own[offset] = value
                self._own_max = max(self._own_max, offset)
        self._advance()

    def _advance(self) -> None:
        """Apply this collector's own records that follow the applied log without a gap; release waiters."""
        own = self._own
        while own:
            value = own.pop(self._applied + 1, None)
            if value is None:
                break
            self.apply(self._applied + 1, value)
        if len(own) > 10_000:  # acknowledged records the tail applied first: never needed again
            self._own = {offset: value for offset, value in own.items() if offset > self._applied}
        self._release_waiters()
        self._wake_tail_for_gap()

    def _gap(self) -> bool:
        """A record before an own one, or before an awaited offset, is not applied yet."""
        return bool(self._waiters) or self._own_max > self._applied

    def _wake_tail_for_gap(self) -> None:
        """The tail reads now when a gap is left that no own append in flight may fill (another collector's
        record: only the tail reads it). While own appends are in flight the gap is usually theirs, and the tail
        waits for them (at most TAIL_GAP_SECONDS) rather than fetch the log back."""
        if self._gap() and not self._appending:
            self._tail_wake.set()

    def _release_waiters(self) -> None:
        if self._waiters:
            self._waiters = _released(self._waiters, self._applied)

    async def applied(self, offset: int) -> None:
        """Return once the tail applied the log up to ``offset``."""
        if self._applied >= offset:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, future))
        self._wake_tail_for_gap()
        await future

    # ----------------------------------------------------------------- tail
    def apply(self, offset: int, value: bytes) -> None:
        """Apply one record of the log (the tail, in log order)."""
        listing = self.state.apply(offset, value)
        if listing is not None:
            if listing.status == "pending":
                future = self._awaiting.pop(listing.nonce, None)
                if future is not None and not future.done():
                    future.set_result(listing)
            else:
                self.local.pop(listing.nonce, None)
        self._applied = offset
        ahead = self.state.clock_s - self.wall_clock()
        if ahead > CLOCK_AHEAD_WARNING_SECONDS and self.clock() - self._warned_clock_at > 60:
            self._warned_clock_at = self.clock()
            log.warning("idempotency log %s: a listing is dated %.0f s ahead of this collector's clock: keys are "
                        "forgotten that much before --idempotency-window-seconds; check the collectors' clocks (NTP)",
                        self.topic, ahead)

    def _read(self, offset: int, value: bytes) -> None:
        """A record the tail read: applied, unless this collector applied it from its own append already."""
        if offset > self._applied:
            self._tail_applied = True
            self.apply(offset, value)

    async def _pace(self) -> None:
        """Between two fetches of the tail (:class:`LogTail`, which pauses its partition meanwhile and then skips
        what is applied): wait up to :data:`TAIL_IDLE_SECONDS` while the tail would only read back what this
        collector applied from its own appends already (no other collector writes), so a lone collector does
        not fetch its own records back from the broker 100-200 times a second (on the embedded broker a fetch
        that returns records costs more as the log grows: issue 41).

        The order records are applied in does not change: an own record is still applied only once every
        offset before it is (:meth:`_apply_own`), and the wait ends at once when one waits for an earlier
        offset that no own append in flight may fill (another collector's record: :meth:`_wake_tail_for_gap`;
        at most :data:`TAIL_GAP_SECONDS` while own appends are in flight), when the log is awaited
        (:meth:`applied`), and while a settle runs (it reads the log to its end: :meth:`_read_to_end`).
        What the wait delays is only how soon this collector sees another's records while it appends
        nothing after them (at most TAIL_IDLE_SECONDS more); a fetch that applied any record, and every
        fetch until the log is read once, are followed at once by the next."""
        applied, self._tail_applied = self._tail_applied, False
        gap = self._gap()
        if applied or not self.ready or self._settling or self._fetch_waiters or (gap and not self._appending):
            return
        self._tail_wake.clear()
        try:
            await asyncio.wait_for(self._tail_wake.wait(), TAIL_GAP_SECONDS if gap else TAIL_IDLE_SECONDS)
        except TimeoutError:
            pass

    def applied_offset(self) -> int:
        """The log is applied up to here (the tail need not fetch what is at or before it)."""
        return self._applied

    async def _read_to_end(self) -> None:
        """Return once the tail applied the log up to its end as a fetch that started after this call saw it."""
        if self._tail is not None and not self._tail.done():
            future = asyncio.get_running_loop().create_future()
            self._fetch_waiters.append((self._fetches + 2, future))  # the next fetch may have started before
            self._tail_wake.set()
            await future
        await self.applied(self._highwater - 1)

    def _fetched(self, highwater: int | None, caught_up: bool, answered: bool = True) -> None:
        """After each fetch of the tail (``answered``: a fetch response came since the last call): own records
        that follow, waiters, readiness."""
        if highwater is not None:
            self._highwater = highwater
        if answered:
            self._fetches += 1
        if self._fetch_waiters:
            self._fetch_waiters = _released(self._fetch_waiters, self._fetches)
        if len(self.local) > 2 * len(self.state.frames) + 1000:  # outcomes never written back
            self.local = {n: f for n, f in self.local.items() if n in self.state.frames or not f.done()}
        self._advance()  # own records after what the tail applied; waiters
        if caught_up and not self.ready:
            self.ready = True
            log.info("idempotency log %s read: %d keys held", self.topic, len(self.state))
        self.metrics.idempotency_keys.set(len(self.state))

    def _start_afresh(self) -> None:
        """The broker lost what the tail read: the log's state starts over from its first record."""
        self.state = self._fresh_state()
        self._applied = -1
        self._own.clear()
        self._own_max = -1


def _released(waiters: list[tuple[int, asyncio.Future]], reached: int) -> list[tuple[int, asyncio.Future]]:
    """Resolve the waiters whose mark is at or below ``reached``; the ones still waiting (cancelled ones dropped)."""
    waiting = []
    for mark, future in waiters:
        if future.done():
            continue
        if mark <= reached:
            future.set_result(None)
        else:
            waiting.append((mark, future))
    return waiting
