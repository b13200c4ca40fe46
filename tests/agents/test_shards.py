"""agents.shards and the sharded view reader, without Kafka: which shard holds what, and that a view
rebuilt for a new share holds exactly what a view of the whole changelog holds for it."""

import asyncio
from types import SimpleNamespace

import aiohttp
import numpy as np
from aiohttp import web as aiohttp_web

from agents import shards
from agents.app import OCMSWorker  # imported at collection: importing Faust runs `file` (croniter)
from agents.settings import WorkerSettings
from agents.shards import Share
from agents.state import BucketKey, PartialCounts, StateLayout, encode_bundle, group_count, pack_groups
from agents.view import ChangelogReader, CountsView
from infra.process import free_port
from registry.flags import metrics_from_flags

PARTITIONS = 4
LEVELS = ((60, 3600),)


def layout_of(count: int, tracked=lambda i: 10 + i) -> StateLayout:
    fps = [f"{i:016x}" for i in range(count)]
    return StateLayout({fp: LEVELS for fp in fps}, {fp: tracked(i) for i, fp in enumerate(fps)}, PARTITIONS,
                       {fp: f"metric_{i}" for i, fp in enumerate(fps)})


def test_groups_are_packed_heaviest_first_onto_the_lightest_shard():
    assert pack_groups({0: 10, 1: 9, 2: 5, 3: 4, 4: 1}, 8, 2) == [0, 1, 1, 0, 0, 1, 1, 1]
    layout = layout_of(200, tracked=lambda i: (30, 1000, 10_000)[i % 3])
    weights = {}
    for fp in layout.groups:
        weights[layout.shard_of_fingerprint(fp)] = weights.get(layout.shard_of_fingerprint(fp), 0) + \
            (30, 1000, 10_000)[int(fp, 16) % 3]
    assert max(weights.values()) < 0.35 * sum(weights.values())  # about a quarter each, not left to the hash
    again = layout_of(200, tracked=lambda i: (30, 1000, 10_000)[i % 3])
    assert again.shards == layout.shards  # every worker of one registry computes the same shards
    assert len(layout.shards) == group_count(PARTITIONS)


def test_a_key_prefix_names_its_shard_and_garbage_has_none():
    layout = layout_of(20)
    share = Share(layout, sharded=True)
    fp = next(iter(layout.groups))
    key = layout.key_of(BucketKey(fp, 2, 60, 600)).encode()
    assert share.shard_of_key(key) == layout.shard_of_fingerprint(fp)
    assert share.shard_of_key(b"nonsense:1:2") is None and share.shard_of_key(None) is None
    assert share.shard_of_metric(layout.metric_of[fp]) == layout.shard_of_fingerprint(fp)
    everything = Share(layout, sharded=False)
    assert everything.held == everything.ready == set(range(PARTITIONS))


def record(offset: int, key: bytes, value: bytes | None):
    return SimpleNamespace(offset=offset, key=key, value=value)


def changelog(layout: StateLayout, writes: int, seed: int) -> list:
    """Random rewrites and tombstones of every metric's bundles (members partly shuffled), in offset order."""
    rng = np.random.default_rng(seed)
    fps = list(layout.groups)
    out = []
    for offset in range(writes):
        fp = fps[int(rng.integers(len(fps)))]
        table_key = layout.key_of(BucketKey(fp, int(rng.integers(PARTITIONS)), 60, 60 * int(rng.integers(3))))
        if rng.random() < 0.1:
            out.append(record(offset, table_key.encode(), None))
        else:
            members = {}
            for m in fps:
                if layout.groups[m] == table_key.group:
                    n = int(rng.integers(1, 100))
                    shuffled = int(rng.integers(n + 1)) if rng.random() < 0.5 else 0  # some through a shuffle
                    members[m] = PartialCounts(n, rng.integers(0, 5, 10 + int(m, 16)), offset, shuffled,
                                               int(rng.integers(n, 10_000)) if shuffled else 0).to_bytes()
            out.append(record(offset, table_key.encode(), encode_bundle(members)))
    return out


async def _current() -> None:
    """A read barrier that is always satisfied (the router tests' view is current)."""


def held_part(view: CountsView, layout: StateLayout, shards: set[int]) -> dict:
    return {slot: (b.total.n, b.total.counts.tolist(), b.total.shuffled, b.total.shuffle_min)
            for slot, b in view.index.items()
            if layout.shard_of_fingerprint(slot[0]) in shards}


def test_a_share_rebuilt_by_a_replay_equals_the_whole_views_part_and_drops_the_rest():
    layout = layout_of(12)
    records = changelog(layout, 600, seed=5)
    whole, whole_400 = CountsView(), CountsView()
    for r in records:
        whole.apply(r.key, r.value)
    for r in records[:400]:
        whole_400.apply(r.key, r.value)
    share = Share(layout, sharded=True)
    view = CountsView()
    reader = ChangelogReader(view, "unused", "unused", layout.partitions, share)
    share.held = share.ready = {0}
    reader._apply_share(records[:400], -1)  # holding shard 0 while the first 400 records arrive
    share.held, share.rebuilding = {0, 2}, {2}  # then given shard 2: replay from the start below offset 400
    for r in records[:400]:
        reader._apply_share([r], 400)
        # shard 0 never goes back in time while the replay passes its older records
        assert held_part(view, layout, {0}) == held_part(whole_400, layout, {0})
    assert held_part(view, layout, {0, 2}) == held_part(whole_400, layout, {0, 2})
    reader._apply_share(records[400:], 400)
    share.ready |= share.rebuilding
    assert held_part(view, layout, {0, 2}) == held_part(whole, layout, {0, 2})
    assert held_part(view, layout, {1, 3}) == {} and share.dropped_records > 0
    share.held, share.ready = {2}, {2}  # shard 0 moved away: dropped at once
    view.drop_groups(lambda group: layout.shard_of_group(group) == 0)
    assert held_part(view, layout, {0}) == {} and held_part(view, layout, {2}) == held_part(whole, layout, {2})


def test_a_share_is_settled_only_when_it_holds_its_assignment_rebuilt():
    """/healthz says ok (a readiness probe) only once the view answers every assigned shard itself."""
    share = Share(layout_of(4), sharded=True)
    assert not share.settled({0, 1})  # assigned, nothing held yet
    share.held, share.rebuilding = {0, 1}, {0, 1}
    assert not share.settled({0, 1})  # held, still being rebuilt
    share.ready, share.rebuilding = {0, 1}, set()
    assert share.settled({0, 1}) and not share.settled({0, 1, 2})  # a rebalance gave it one more
    assert Share(layout_of(4), sharded=False).settled(set())  # --view all: the whole view, always


def test_a_forwarded_listing_marks_the_metrics_whose_counts_this_view_does_not_hold_complete():
    """Worker A asks worker B (the owner by the assignment it saw) for the listing entries of B's metrics.
    If B does not hold such a metric complete (being rebuilt here, or the assignment moved meanwhile), its
    own entry's report counts are partial or zero: it must say "unavailable", never pass them as an answer."""
    from agents.shards import Router

    layout = layout_of(8)
    share = Share(layout, sharded=True)
    names = sorted(layout.metric_of.values())
    ready_name = next(n for n in names if share.shard_of_metric(n) == 0)
    rebuilding_name = next(n for n in names if share.shard_of_metric(n) == 1)
    elsewhere_name = next(n for n in names if share.shard_of_metric(n) not in (0, 1))
    share.held, share.ready, share.rebuilding = {0, 1}, {0}, {1}
    app = SimpleNamespace(rebalancing=False, conf=SimpleNamespace(canonical_url="http://b:6066"))
    router = Router(app, share, "changelog", _current)
    doc = {"metrics": [{"name": name, "reports": 0} for name in (ready_name, rebuilding_name, elsewhere_name)]}
    answered = asyncio.run(router.listing(doc, forwarded=True))
    entries = {e["name"]: e for e in answered["metrics"]}
    assert "unavailable" not in entries[ready_name]
    assert "unavailable" in entries[rebuilding_name] and "unavailable" in entries[elsewhere_name]


def test_a_bad_request_is_a_400_naming_its_parameter_before_it_is_routed(monkeypatch):
    """A request is checked on the worker it reached, before it is routed: while its metric's share is being
    rebuilt here (503 + Retry-After for a good request) or is held by another worker (forwarded), a bad
    parameter still gets the 400 naming it (an unknown version or value: the 404), not a 503 that has the
    client retry a request that can never succeed, nor a forward."""
    settings = WorkerSettings.build(broker="embedded", app_id="unit-routing", source_topic="unit-source",
                                    view="share", web_host="127.0.0.1", web_port=free_port())
    worker = OCMSWorker(settings, metrics_from_flags(epsilon=2, dictionary_size=1000, tracked_range="0:100"))
    name = worker.catalog.primary.name
    shard = worker.share.shard_of_metric(name)
    bad = [("/estimates?bogus=1", 400, "bogus"), (f"/metrics/{name}/estimates?window=yesterday", 400, "window"),
           ("/topk?k=0", 400, "k"), ("/estimates/7?confidence=2", 400, "confidence"),
           (f"/metrics/{name}/trend?from=-1h", 400, "value"), ("/trend?value=3&step=7", 400, "step"),
           (f"/metrics/{name}/estimates?version=9", 404, "version"), ("/estimates/999", 404, "value"),
           ("/params?x=1", 400, "x"), ("/estimates?caf%C3%A9=1", 400, "caf\u00e9"),
           ("/topk?%E6%9D%B1%E4%BA%AC=1", 400, "\u6771\u4eac"), ("/estimates?%F0%9F%98%80=1", 400, "\U0001f600")]
    good = ["/estimates", f"/metrics/{name}/topk?k=3", "/params"]
    forwarded: list[str] = []

    async def holder(request):  # the other worker, holding the metric's shard
        forwarded.append(request.path_qs)
        return aiohttp_web.json_response({"answered": "elsewhere"})

    async def run():
        other = aiohttp_web.Application()
        other.router.add_get("/{tail:.*}", holder)
        other_runner = aiohttp_web.AppRunner(other)
        await other_runner.setup()
        other_port = free_port()
        await aiohttp_web.TCPSite(other_runner, "127.0.0.1", other_port).start()
        await worker.app.web.start_server()
        base = f"http://127.0.0.1:{settings.web_port}"
        answers = {}
        try:
            async with aiohttp.ClientSession() as client:
                async def get(path):
                    async with client.get(base + path) as response:
                        return response.status, await response.json(), response.headers.get("Retry-After")

                worker.share.held, worker.share.rebuilding = {shard}, {shard}  # being rebuilt here
                answers["rebuilding"] = [await get(path) for path, _, _ in bad] + [await get(p) for p in good]
                worker.share.held, worker.share.rebuilding = set(), set()  # held by the other worker
                monkeypatch.setattr(shards, "owner_url", lambda app, topic, s: f"http://127.0.0.1:{other_port}")
                answers["elsewhere"] = [await get(path) for path, _, _ in bad] + [await get(p) for p in good]
        finally:
            await worker.app.web.stop_server()
            await other_runner.cleanup()
        return answers

    answers = asyncio.run(run())
    for state, got in answers.items():
        for (path, status, parameter), (got_status, doc, _) in zip(bad, got):
            assert (got_status, doc.get("parameter")) == (status, parameter), (state, path, doc)
    for (status, doc, retry_after) in answers["rebuilding"][len(bad):]:
        assert status == 503 and retry_after == shards.RETRY_AFTER_S and "rebuilding" in doc["error"]
    assert [doc for _, doc, _ in answers["elsewhere"][len(bad):]] == [{"answered": "elsewhere"}] * len(good)
    assert forwarded == good  # only the good requests reached the holder


# ------------------------------------------------------------------ the reader driven through sequences
class FakeChangelog:
    """A changelog of PARTITIONS partitions, each its own offsets: what the reader's consumer reads."""

    def __init__(self, layout: StateLayout, seed: int):
        self.layout = layout
        self.logs: dict[int, list] = {p: [] for p in range(PARTITIONS)}
        self.source = iter(changelog(layout, 100_000, seed))

    def write(self, count: int) -> None:
        for r in (next(self.source) for _ in range(count)):
            partition = int(r.key.split(b":")[1])  # the table key's source partition = changelog partition
            log = self.logs[partition]
            log.append(record(len(log), r.key, r.value))

    def whole_at(self, positions: dict[int, int]) -> CountsView:
        """A view of every record below ``positions`` (per partition): what a whole view holds there."""
        view = CountsView()
        for partition, log in self.logs.items():
            for r in log[:positions.get(partition, 0)]:
                view.apply(r.key, r.value)
        return view


class FakeConsumer:
    """The consumer calls ChangelogReader makes, over a FakeChangelog; each fetch returns a few records."""

    def __init__(self, log: FakeChangelog, rng):
        self.log, self.rng = log, rng
        self.positions = {p: 0 for p in range(PARTITIONS)}

    async def getmany(self, timeout_ms, max_records):
        out = {}
        for p, records in self.log.logs.items():
            take = int(self.rng.integers(0, 6))
            got = records[self.positions[p]:self.positions[p] + take]
            if got:
                out[p] = got
                self.positions[p] += len(got)
        return out

    async def position(self, tp):
        return self.positions[tp]

    async def seek_to_beginning(self, *tps):
        for tp in tps:
            self.positions[tp] = 0

    async def end_offsets(self, tps):
        return {tp: len(self.log.logs[tp]) for tp in tps}

    def highwater(self, tp):
        return len(self.log.logs[tp])


def drive(seed: int, rounds: int = 250):
    """A reader with a share followed through a random sequence: records written, assignments given, taken
    and changed again mid-replay, rounds while the group rebalances. After every round, each ready shard must
    hold exactly what a whole view holds below the reader's highest positions (so it never goes back), and a
    shard turns ready only once the reader has passed the changelog's end as it was when the shard was given."""
    rng = np.random.default_rng(seed)
    layout = layout_of(12)
    log = FakeChangelog(layout, seed)
    share = Share(layout, sharded=True)
    state = {"owned": set(), "settled": True}
    reader = ChangelogReader(CountsView(), "unused", "unused", PARTITIONS, share,
                             owned=lambda: state["owned"], settled=lambda: state["settled"])
    consumer = FakeConsumer(log, rng)
    tps = list(range(PARTITIONS))
    log.write(int(rng.integers(20, 200)))
    given_at: dict[int, dict] = {}  # shard -> the changelog's end when it was last given
    became_ready = 0

    async def run():
        nonlocal became_ready
        for _ in range(rounds):
            if rng.random() < 0.3:
                log.write(int(rng.integers(1, 10)))
            if rng.random() < 0.08:
                before = set(state["owned"])
                state["owned"] = {s for s in range(PARTITIONS) if rng.random() < 0.5}
                for s in state["owned"] - before:
                    given_at[s] = {p: len(log.logs[p]) for p in tps}
            state["settled"] = rng.random() < 0.8
            was_ready = set(share.ready)
            await reader.step(consumer, tps, {p: 0 for p in tps})
            whole = log.whole_at(reader._seen) if share.ready else None
            for s in share.ready:
                assert held_part(reader.view, layout, {s}) == held_part(whole, layout, {s}), (seed, s)
            for s in share.ready - was_ready:
                became_ready += 1
                assert all(reader._seen[p] >= given_at[s][p] for p in tps), (seed, s, reader._seen, given_at[s])
            assert held_part(reader.view, layout, set(tps) - share.held) == {}

    asyncio.run(run())
    return became_ready


def test_the_sharded_reader_followed_through_sequences_of_assignments_never_answers_partial_or_older_counts():
    """Issue 35, 1: a shard given while the reader was behind the changelog's end was marked ready at the
    reader's own position (before its records were read), and a second assignment during a replay lowered the
    target, so a ready shard got older records again. 16 seeded sequences of assignments, writes and rebalances."""
    readied = sum(drive(seed) for seed in range(16))
    assert readied > 25  # the sequences do give shards and see them rebuilt


def test_the_read_barrier_waits_for_what_was_written_before_the_query():
    """``current()`` returns only once the view holds every changelog record written before the call, and
    says ViewBehind when it cannot confirm that in time (the answer is then a 503, never a stale 200)."""
    from agents.view import ViewBehind

    rng = np.random.default_rng(3)
    layout = layout_of(4)
    log = FakeChangelog(layout, 3)
    reader = ChangelogReader(CountsView(), "unused", "unused", PARTITIONS)
    consumer = FakeConsumer(log, rng)
    tps = list(range(PARTITIONS))

    async def run():
        reader._consumer, reader._tps = consumer, tps
        await reader.step(consumer, tps, {p: 0 for p in tps})
        log.write(200)
        query = asyncio.ensure_future(reader.current(timeout=30))
        await asyncio.sleep(0.01)  # the barrier read the end offsets: 200 records it has not applied
        ends, steps = {p: len(log.logs[p]) for p in tps}, 0
        while not reader._holds(ends):
            assert not query.done()  # the view has not applied what was written before the query
            await reader.step(consumer, tps, {p: 0 for p in tps})
            steps += 1
        await asyncio.wait_for(query, 1)  # and returns once it has
        assert steps > 5
        log.write(50)  # nobody reads on: the barrier says so instead of answering stale counts
        try:
            await reader.current(timeout=0.2)
        except ViewBehind as exc:
            return str(exc)
        raise AssertionError("a barrier the view cannot reach returned")

    assert "behind" in asyncio.run(run())


def test_a_peer_answer_that_is_not_a_listing_marks_its_metrics_unavailable_and_sends_the_token_on(monkeypatch):
    """Issue 37: a peer's 200 that is a JSON list or string made the listing fail with 500. Its metrics are
    now "unavailable", saying which worker did not answer; the client's Authorization goes to the peer."""
    from agents import shards
    from agents.shards import Router

    layout = layout_of(8)
    share = Share(layout, sharded=True)
    names = sorted(layout.metric_of.values())
    elsewhere = next(n for n in names if share.shard_of_metric(n) != 0)
    share.held, share.ready, share.rebuilding = {0}, {0}, set()
    app = SimpleNamespace(rebalancing=False, conf=SimpleNamespace(canonical_url="http://b:6066"))
    monkeypatch.setattr(shards, "owner_url", lambda *a: "http://c:6066")
    asked = []
    for bad in ([1, 2], "a string", {"metrics": "x"}, {"metrics": [1, None, {"name": 3}]}, None):
        router = Router(app, share, "changelog", _current)

        async def get_json(url, authorization=None, bad=bad):
            asked.append(authorization)
            return bad

        router._get_json = get_json
        doc = asyncio.run(router.listing({"metrics": [{"name": elsewhere, "reports": 0}]}, False, "Bearer t"))
        assert "did not answer" in doc["metrics"][0]["unavailable"], bad
    assert asked == ["Bearer t"] * 5
    assert shards.peer_headers("http://b", "Bearer t")["Authorization"] == "Bearer t"
    assert "Authorization" not in shards.peer_headers("http://b", None)
    assert not shards.answer_fits(200, "application/json", b' ["x"]')
    assert shards.answer_fits(200, "application/json", b'\n{"n": 1}') and shards.answer_fits(503, "text/plain", b"[")
