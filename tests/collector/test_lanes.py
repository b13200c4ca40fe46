"""collector.lanes: the plain lane's group commit (issue 41), with an outlet that holds what it is given."""

from __future__ import annotations

import asyncio
import struct

from cms_core import wire
from collector.lanes import Lane


def record(version, i: int) -> bytes:
    """One valid report of ``version`` whose record says ``i`` (a0 = i)."""
    return struct.pack(">HH", i, 1) + b"\x00" * version.params.z_bytes


class HoldingOutlet:
    """Keeps every unit it is sent; the test answers them (Kafka's acknowledgement) or releases them (taken into
    an exactly-once commit group)."""

    def __init__(self):
        self.units = []

    def send(self, unit):
        self.units.append(unit)


async def submit(lane, version, indices) -> list:
    futures = [lane.submit(record(version, i), 1) for i in indices]
    await asyncio.sleep(0)  # the drain scheduled by the first submit starts
    await asyncio.gather(*lane.drains)
    return futures


def indices(unit) -> list[int]:
    return [struct.unpack(">H", bytes(unit.records[i * unit.record_size:][:2]))[0] for i in range(unit.reports)]


def test_a_frame_leaves_at_once_then_the_next_holds_everything_that_came_until_the_first_is_answered(dest):
    """No timer for an upload alone (the 5 ms frame timer used to hold every upload, and with a few hundred
    connections the collector idled in that wait: issue 41); under load the next frame holds what came during
    the first one's round trip, and goes the moment the first is acknowledged."""

    async def main():
        outlet = HoldingOutlet()
        lane = Lane(dest, outlet, 1000, 60.0, 60)  # a latency bound far away: only the group commit sends
        first = await submit(lane, dest, [0])
        assert [indices(u) for u in outlet.units] == [[0]], "the first upload's frame left without waiting"
        later = await submit(lane, dest, [1, 2])
        later += await submit(lane, dest, [3])
        assert len(outlet.units) == 1 and lane.batcher.buffered == 3, "held while the first frame is in flight"
        outlet.units[0].answer(None)
        await asyncio.gather(*lane.drains)
        assert [indices(u) for u in outlet.units] == [[0], [1, 2, 3]]
        assert all(f.done() for f in first) and not any(f.done() for f in later)
        outlet.units[1].release()  # taken into a commit group: the lane may send again
        outlet.units[1].release()  # once only
        assert lane.unreleased == 0
        await submit(lane, dest, [4])
        assert [indices(u) for u in outlet.units][-1] == [4]
        outlet.units[1].answer(None)  # answered after its release: no second release
        assert lane.unreleased == 1 and all(f.done() for f in later)
        await lane.close()

    asyncio.run(main())


def test_the_latency_bound_still_sends_a_frame_whose_predecessor_is_never_answered(dest):
    async def main():
        outlet = HoldingOutlet()
        lane = Lane(dest, outlet, 1000, 0.02, 60)
        await submit(lane, dest, [0])
        await submit(lane, dest, [1])
        assert len(outlet.units) == 1
        deadline = asyncio.get_running_loop().time() + 30  # the batcher's 20 ms timer, on a machine however busy
        while len(outlet.units) < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert [indices(u) for u in outlet.units] == [[0], [1]]
        await lane.close()

    asyncio.run(main())


def test_a_full_frame_leaves_without_waiting_for_its_predecessor(dest):
    async def main():
        outlet = HoldingOutlet()
        lane = Lane(dest, outlet, 2, 60.0, 60)  # frames of at most 2 reports
        await submit(lane, dest, [0])
        await submit(lane, dest, [1, 2, 3])
        assert [indices(u) for u in outlet.units] == [[0], [1, 2]] and lane.batcher.buffered == 1
        await lane.close()
        assert [indices(u) for u in outlet.units][-1] == [3]

    asyncio.run(main())


def test_frames_keep_the_wire_header_of_their_metric(dest):
    async def main():
        outlet = HoldingOutlet()
        lane = Lane(dest, outlet, 1000, 60.0, 60)
        await submit(lane, dest, [0])
        await lane.close()
        frame = (await outlet.units[0].cut())[0]
        assert len(wire.decode_message(frame, {dest.fingerprint: dest.params})[1]) == 1

    asyncio.run(main())


def test_a_frame_the_outlet_refused_does_not_hold_back_the_next_one(dest):
    class RefusingOnce(HoldingOutlet):
        refused = False

        def send(self, unit):
            if not self.refused:
                self.refused = True
                raise RuntimeError("outlet closed")
            super().send(unit)

    async def main():
        outlet = RefusingOnce()
        lane = Lane(dest, outlet, 1000, 60.0, 60)
        first = await submit(lane, dest, [0])
        assert first[0].done() and first[0].exception() is not None and lane.unreleased == 0
        await submit(lane, dest, [1])
        assert [indices(u) for u in outlet.units] == [[1]], "sent at once, not after the 60 s bound"
        outlet.units[0].answer(None)
        await lane.close()

    asyncio.run(main())
