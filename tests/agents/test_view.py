"""agents.view.CountsView: the changelog read model (no Kafka)."""

import numpy as np
import pytest

from agents.state import BucketKey, PartialCounts, StateKey, encode_bundle
from agents.view import CountsView

FP = "069888932a931dd6"
FP_OTHER = "a408ba41f2a27a6f"
B = 1_699_999_920  # a multiple of 60


def put(view: CountsView, key: BucketKey, n: int, counts, offset: int = 0, shuffled: int = 0,
        shuffle_min: int = 0) -> None:
    view.apply_state(key, PartialCounts(n, counts, offset, shuffled, shuffle_min).to_bytes())


def test_apply_then_sum_over_partitions():
    view = CountsView()
    put(view, BucketKey(FP, 0, 60, B), 10, [1, 2, 3], 5)
    put(view, BucketKey(FP, 1, 60, B), 7, [0, 7, 1], 9)
    put(view, BucketKey(FP, 3, 60, B), 4, [4, 0, 2], 2)
    n, counts = view.sum(FP, 60, B, 3)
    assert n == 21 and counts.tolist() == [5, 9, 6] and counts.dtype == np.int64
    assert (view.applied, view.rejected, view.keys()) == (3, 0, 3)
    assert view.index[(FP, 60, B)][1] == PartialCounts(7, [0, 7, 1], 9)


def test_overwrite_replaces_never_adds():
    view = CountsView()
    put(view, BucketKey(FP, 0, 60, B), 10, [1, 2], 5)
    put(view, BucketKey(FP, 1, 60, B), 3, [1, 1], 2)
    put(view, BucketKey(FP, 0, 60, B), 15, [4, 2], 8)  # the newer state of the same key
    n, counts = view.sum(FP, 60, B, 2)
    assert n == 18 and counts.tolist() == [5, 3]
    assert view.keys() == 2 and view.applied == 3


def test_tombstone_deletes_one_partition_then_the_slot():
    view = CountsView()
    k0, k1 = BucketKey(FP, 0, 60, B), BucketKey(FP, 1, 60, B)
    put(view, k0, 10, [1, 2], 5)
    put(view, k1, 3, [1, 1], 2)
    view.apply_state(k0, None)
    n, counts = view.sum(FP, 60, B, 2)
    assert n == 3 and counts.tolist() == [1, 1]
    assert view.buckets(FP, 60) == [B] and view.keys() == 1
    view.apply_state(k1, None)
    assert view.sum(FP, 60, B, 2)[0] == 0
    assert view.buckets(FP, 60) == [] and view.keys() == 0 and (FP, 60, B) not in view.index
    # A tombstone for a key never seen is harmless.
    view.apply_state(BucketKey(FP, 2, 60, B + 60), None)
    assert view.keys() == 0 and view.index == {} and view.rejected == 0 and view.applied == 5
    # A key can come back after its tombstone.
    put(view, k0, 2, [0, 2], 11)
    assert view.sum(FP, 60, B, 2)[0] == 2


def test_missing_bucket_sums_to_zero_without_creating_it():
    view = CountsView()
    n, counts = view.sum(FP, 60, B, 4)
    assert n == 0 and counts.tolist() == [0, 0, 0, 0]
    n, counts = view.sum_range(FP, 60, B, B + 600, 4)
    assert n == 0 and counts.tolist() == [0, 0, 0, 0]
    assert len(view.index) == 0


def test_sum_range_is_half_open_and_per_width_and_fingerprint():
    view = CountsView()
    for i in range(5):
        start = B + 60 * i
        put(view, BucketKey(FP, 0, 60, start), 10 + i, [i, 1], i)
        put(view, BucketKey(FP, 1, 60, start), 100, [2 * i, 3], i)
    put(view, BucketKey(FP, 0, 600, B - 120), 1000, [500, 500], 1)  # rollup: other width
    put(view, BucketKey(FP_OTHER, 0, 60, B + 60), 77, [7, 7], 1)  # other parameter set
    put(view, BucketKey.total(FP, 0), 5000, [1, 1], 1)
    # [B + 60, B + 240): buckets 1, 2, 3 of both partitions
    n, counts = view.sum_range(FP, 60, B + 60, B + 240, 2)
    assert n == (11 + 12 + 13) + 300 and counts.tolist() == [(1 + 2 + 3) * 3, 3 + 3 * 3]
    n, counts = view.sum_range(FP, 60, B, B + 300, 2)
    assert n == 60 + 500 and counts.tolist() == [30, 20]
    assert view.sum_range(FP, 60, B + 240, B + 240, 2)[0] == 0  # empty range
    assert view.sum_range(FP, 600, B - 120, B + 480, 2)[0] == 1000
    assert view.sum_range(FP_OTHER, 60, B, B + 300, 2)[0] == 77
    assert view.sum(FP, 0, 0, 2)[0] == 5000
    assert view.buckets(FP, 60) == [B + 60 * i for i in range(5)]
    assert view.buckets(FP, 600) == [B - 120] and view.buckets(FP_OTHER, 60) == [B + 60]
    assert view.keys() == 13


def test_large_counts_survive_the_codec():
    view = CountsView()
    big = 2**33
    put(view, BucketKey(FP, 0, 0, 0), big, [2**32 + 5, 0], 1)
    put(view, BucketKey(FP, 1, 0, 0), big, [2**32, 1], 1)
    n, counts = view.sum(FP, 0, 0, 2)
    assert n == 2**34 and counts.tolist() == [2**33 + 5, 1]


GOOD_STATE = PartialCounts(3, [1, 2], 4).to_bytes()
GOOD_VALUE = encode_bundle({FP: GOOD_STATE})
GOOD_KEY = StateKey("g1", 0, 60, 3600, B).encode()
GARBAGE = [
    (None, GOOD_VALUE),
    (b"", GOOD_VALUE),
    (b"\xff\xfe", GOOD_VALUE),
    (b"nonsense", GOOD_VALUE),
    (f"g1:0:60:{B}".encode(), GOOD_VALUE),  # too few fields
    (f"g1:0:60:3600:{B + 1}".encode(), GOOD_VALUE),  # start not a multiple of the width
    (f"g1:-1:60:3600:{B}".encode(), GOOD_VALUE),  # negative partition
    (f"g1:x:60:3600:{B}".encode(), GOOD_VALUE),
    (f"{FP}:0:60:{B}".encode(), GOOD_VALUE),  # a member key is not a table key
    (f"x1:0:60:3600:{B}".encode(), GOOD_VALUE),  # neither a group nor a fingerprint
    (GOOD_KEY, b""),
    (GOOD_KEY, b"garbage"),
    (GOOD_KEY, b"XX" + GOOD_VALUE[2:]),  # bad magic
    (GOOD_KEY, GOOD_VALUE[:-1]),  # truncated counts
    (GOOD_KEY, GOOD_VALUE + b"\x00"),
    (GOOD_KEY, encode_bundle({FP: b"XX" + GOOD_STATE[2:]})),  # a member that is not a counts value
    (b"nonsense", None),  # a tombstone with a foreign key
]


@pytest.mark.parametrize("key, value", GARBAGE)
def test_garbage_records_are_ignored_and_counted(key, value):
    view = CountsView()
    put(view, BucketKey(FP, 0, 60, B), 10, [1, 2], 5)
    view.apply(key, value)
    assert (view.rejected, view.keys()) == (1, 1)
    n, counts = view.sum(FP, 60, B, 2)
    assert n == 10 and counts.tolist() == [1, 2]


def test_rejected_counts_every_garbage_record():
    view = CountsView()
    for key, value in GARBAGE:
        view.apply(key, value)
    assert view.rejected == len(GARBAGE) and view.applied == 0 and view.keys() == 0


@pytest.mark.timeout(20)
def test_sum_range_costs_the_buckets_present_not_the_range():
    """Issue 19: sum_range walked every bucket start up to ``to`` (1e20 never returned)."""
    view = CountsView()
    for start in (B - 120, B, B + 600):
        put(view, BucketKey(FP, 0, 60, start), 2, [1, 2], 1)
    put(view, BucketKey(FP, 0, 1, B), 5, [5, 0], 1)  # another width: not summed
    n, counts = view.sum_range(FP, 60, 0, 10**20, 2)  # 1.7e18 bucket starts in the range
    assert n == 6 and counts.tolist() == [3, 6]
    assert view.bucket_count(FP, 60, 0, 10**20) == 3 and view.bucket_count(FP, 60, B, B + 600) == 1
    assert [start for start, _ in view.snapshot(FP, 60, B - 120, B + 1)] == [B - 120, B]
    assert view.sum_range(FP, 1, 0, 10**20, 2)[0] == 5


def test_snapshot_survives_later_updates_and_starts_stay_sorted():
    view = CountsView()
    rng = np.random.default_rng(3)
    starts = [int(s) * 60 for s in rng.permutation(200)]
    for s in starts:
        put(view, BucketKey(FP, 0, 60, s), 1, [1], 1)
    snapshot = view.snapshot(FP, 60, 0, 60 * 200)
    assert [s for s, _ in snapshot] == sorted(starts) and view.buckets(FP, 60) == sorted(starts)
    for s in starts[:100]:
        view.apply_state(BucketKey(FP, 0, 60, s), None)  # tombstones
    put(view, BucketKey(FP, 0, 60, 60 * 150), 9, [9], 2)
    assert view.buckets(FP, 60) == sorted(set(starts[100:]) | {60 * 150})
    assert sum(state.n for _, states in snapshot for state in states) == 200  # the snapshot did not move
    assert view.sum_range(FP, 60, 0, 60 * 200, 1)[0] == 100 + (8 if 60 * 150 in starts[100:] else 9)


def test_one_summed_state_per_bucket_whatever_the_partitions():
    view = CountsView()
    for partition in range(8):
        put(view, BucketKey(FP, partition, 60, B), 10 + partition, [partition, 1, 2], partition)
    [(start, states)] = view.snapshot(FP, 60, B, B + 60)
    assert start == B and len(states) == 1  # queries add one array per bucket, not one per partition
    assert states[0].n == sum(10 + p for p in range(8)) and states[0].counts.tolist() == [28, 8, 16]
    assert view.keys() == 8
    # Memory: one int64 sum (3 x 8) + 8 partition states as they arrived (24-byte header + 3 x uint16: codec v4).
    assert view.memory_bytes() == 3 * 8 + 8 * (24 + 3 * 2)


def test_summed_view_equals_the_sum_of_latest_states_under_random_rewrites_and_tombstones():
    """The sum moves by new - previous: after any sequence of writes, rewrites (replays,
    new owners), tombstones and returns, it equals summing each key's latest state. So do the
    shuffled reports, and the smallest shuffled batch is the minimum over the latest states
    (a minimum does not subtract: a rewrite may raise it again)."""
    rng = np.random.default_rng(12)
    view, latest = CountsView(), {}
    for _ in range(3000):
        width = 60 if rng.random() < 0.7 else 0  # cumulative keys too (reports() keeps their n)
        key = BucketKey(FP, int(rng.integers(4)), width, (B + 60 * int(rng.integers(3))) if width else 0)
        if rng.random() < 0.15:
            view.apply_state(key, None)
            latest.pop(key, None)
        else:
            counts = rng.integers(0, 2**31, 5) if rng.random() < 0.5 else rng.integers(0, 50, 5)
            n = int(counts.max()) + int(rng.integers(0, 2**33))  # also beyond uint32: the 8-byte codec
            shuffled = int(rng.integers(1, n + 1)) if rng.random() < 0.7 else 0
            smallest = int(rng.integers(1, 10**6)) if shuffled else 0
            put(view, key, n, counts, int(rng.integers(100)), shuffled, smallest)
            latest[key] = (n, counts, shuffled, smallest)
        start = key.bucket_start
        want = [w for k, w in latest.items() if (k.width, k.bucket_start) == (width, start)]
        n, counts = view.sum(FP, width, start, 5)
        assert n == sum(w[0] for w in want)
        assert counts.tolist() == (np.sum([w[1] for w in want], axis=0) if want else np.zeros(5)).astype(np.int64).tolist()
        snapshot = view.snapshot(FP, width, start, start + (width or 1))
        shuffled = snapshot[0][1][0].shuffled if snapshot else 0
        smallest = snapshot[0][1][0].shuffle_min if snapshot else 0
        assert shuffled == sum(w[2] for w in want)
        assert smallest == min((w[3] for w in want if w[3]), default=0)
    assert view.keys() == len(latest)
    assert view.buckets(FP, 60) == sorted({k.bucket_start for k in latest if k.width})
    assert view.reports() == sum(w[0] for k, w in latest.items() if k.is_total) > 0
    assert view.keys() == sum(len(bucket) for bucket in view.index.values())
    # the bytes kept as states came and went are what the view holds now
    assert view.memory_bytes() == sum(b.total.counts.nbytes + sum(len(r) for r in b.partitions.values())
                                      for b in view.index.values())


def test_a_bundle_applies_only_the_members_that_changed():
    """A checkpoint rewrites a bundle with the members it did not touch carried over byte for
    byte: the view skips those (its cost grows with what changed: their buckets are not summed
    again, the summed state a snapshot took is still the bucket's) and ends where applying
    every member would."""
    key = StateKey("g1", 2, 0, 0, 0)
    first = {FP: PartialCounts(5, [1, 2], 3).to_bytes(), FP_OTHER: PartialCounts(7, [0, 7, 1], 4).to_bytes()}
    second = {**first, FP: PartialCounts(9, [3, 2], 8).to_bytes()}  # FP_OTHER carried over
    view = CountsView({FP: 2, FP_OTHER: 3})
    view.apply(key.encode(), encode_bundle(first))
    summed = {fp: view.snapshot(fp, 0, 0, 1)[0][1][0] for fp in (FP, FP_OTHER)}
    view.apply(key.encode(), encode_bundle(second))
    assert view.snapshot(FP_OTHER, 0, 0, 1)[0][1][0] is summed[FP_OTHER]
    assert view.snapshot(FP, 0, 0, 1)[0][1][0] is not summed[FP]
    assert view.sum(FP, 0, 0, 2) == (9, pytest.approx(np.array([3, 2])))
    assert view.sum(FP_OTHER, 0, 0, 3)[1].tolist() == [0, 7, 1]
    assert view.reports() == 16 and view.applied == 4
    view.apply(key.encode(), None)  # a tombstone deletes every member, unchanged ones too
    assert view.reports() == 0 and view.keys() == 0


def test_a_state_of_another_size_is_refused_without_tracked_sizes():
    view = CountsView()
    put(view, BucketKey(FP, 0, 60, B), 3, [1, 2], 1)
    put(view, BucketKey(FP, 1, 60, B), 3, [1, 2, 3], 1)
    assert view.rejected == 1 and view.sum(FP, 60, B, 2)[1].tolist() == [1, 2]


def test_a_record_is_a_bundle_of_member_states_and_its_tombstone_deletes_them_all():
    """A table key holds every member of its group in one partition and bucket (agents.state):
    the view applies each member's state, a later bundle replaces them (a member missing from it
    is older than the state held, since a bundle never drops a member: it is kept), and a tombstone
    deletes every member the key held."""
    view = CountsView()
    key = StateKey("g3", 2, 60, 3600, B)
    view.apply(key.encode(), encode_bundle({FP: PartialCounts(10, [1, 2], 5).to_bytes(),
                                            FP_OTHER: PartialCounts(4, [4, 0], 7).to_bytes()}))
    put(view, BucketKey(FP, 0, 60, B), 3, [1, 1], 1)  # another partition's state of the same bucket
    assert view.sum(FP, 60, B, 2)[0] == 13 and view.sum(FP_OTHER, 60, B, 2)[0] == 4 and view.keys() == 3
    view.apply(key.encode(), encode_bundle({FP: PartialCounts(12, [2, 2], 9).to_bytes()}))
    assert view.sum(FP, 60, B, 2)[1].tolist() == [3, 3] and view.sum(FP_OTHER, 60, B, 2)[0] == 4
    assert view.stale_records == 1
    view.apply(key.encode(), None)
    assert view.sum(FP, 60, B, 2)[0] == 3 and view.keys() == 1 and view.rejected == 0


def test_a_bundle_carries_each_member_s_shuffle_accounting():
    """Members of one bundle keep their own shuffle accounting (a v2 member beside a v1 one): the
    view sums the shuffled reports and takes the smallest batch per bucket, and a rewrite of the
    bundle with a newer state of the shuffled member replaces its accounting."""
    view = CountsView()
    key = StateKey("g3", 2, 60, 3600, B)
    view.apply(key.encode(), encode_bundle({FP: PartialCounts(10, [1, 2], 5, 10, 4_000).to_bytes(),
                                            FP_OTHER: PartialCounts(4, [4, 0], 7).to_bytes()}))
    put(view, BucketKey(FP, 0, 60, B), 3, [1, 1], 1, 3, 2_500)  # another partition, a smaller batch
    total = view.snapshot(FP, 60, B, B + 60)[0][1][0]
    assert (total.n, total.shuffled, total.shuffle_min) == (13, 13, 2_500)
    other = view.snapshot(FP_OTHER, 60, B, B + 60)[0][1][0]
    assert (other.n, other.shuffled, other.shuffle_min) == (4, 0, 0)
    view.apply(key.encode(), encode_bundle({FP: PartialCounts(11, [1, 3], 6).to_bytes(),
                                            FP_OTHER: PartialCounts(5, [4, 1], 8, 5, 900).to_bytes()}))
    total = view.snapshot(FP, 60, B, B + 60)[0][1][0]
    other = view.snapshot(FP_OTHER, 60, B, B + 60)[0][1][0]
    assert (total.n, total.shuffled, total.shuffle_min) == (14, 3, 2_500)
    assert (other.n, other.shuffled, other.shuffle_min) == (5, 5, 900) and view.rejected == 0


def test_bundles_under_random_rewrites_sum_to_the_newest_member_states():
    """Records as checkpoints write them (bundles: members rewritten with a higher offset, carried over
    byte for byte, or deleted by a tombstone; one member's partition count beyond uint32 or shuffled at
    times), and stale ones among them (a member's state with a lower offset than the one held, or left
    out: a worker that wrote after the partition's new owner): after each, every bucket the record
    touched sums exactly the newest member states of its partitions, and the view's state, report and
    byte counts agree with them."""
    rng = np.random.default_rng(30)
    sizes = {FP: 3, FP_OTHER: 5}
    view, latest = CountsView(dict(sizes)), {}  # (fp, partition, width, start) -> (n, counts, shuffled, min)
    held: dict[StateKey, dict[str, bytes]] = {}
    offsets: dict[tuple, int] = {}  # (fp, key) -> the offset of the newest state held
    keys = [StateKey("g1", p, width, 3600 if width else 0, (B + 60 * s) if width else 0)
            for p in range(4) for width in (60, 0) for s in range(2 if width else 1)]
    stale = 0
    for offset in range(1500):
        key = keys[int(rng.integers(len(keys)))]
        previous = held.pop(key, {})
        if rng.random() < 0.1:
            view.apply(key.encode(), None)
            for fp in previous:
                latest.pop((fp, key.partition, key.width, key.bucket_start), None)
                offsets.pop((fp, key), None)
        else:
            bundle, kept = {}, dict(previous)
            for fp, d in sizes.items():
                draw = rng.random()
                if draw < 0.3 and fp in previous:
                    bundle[fp] = previous[fp]  # carried over
                elif draw < 0.85:
                    n = int(rng.integers(1, 50)) + (2**33 if rng.random() < 0.1 else 0)
                    counts = rng.integers(0, 50, d)
                    shuffled = int(rng.integers(1, n + 1)) if rng.random() < 0.2 else 0
                    smallest = int(rng.integers(1, 10**4)) if shuffled else 0
                    held_offset = offsets.get((fp, key))
                    written = offset if held_offset is None or rng.random() < 0.8 else held_offset - 1  # stale: older
                    bundle[fp] = PartialCounts(n, counts, written, shuffled, smallest).to_bytes()
                    if held_offset is None or written > held_offset:
                        latest[(fp, key.partition, key.width, key.bucket_start)] = (n, counts, shuffled, smallest)
                        offsets[(fp, key)] = written
                        kept[fp] = bundle[fp]
                    else:
                        stale += 1
            view.apply(key.encode(), encode_bundle(bundle))
            held[key] = kept
        for fp, d in sizes.items():
            want = [w for (f, _, width, start), w in latest.items()
                    if (f, width, start) == (fp, key.width, key.bucket_start)]
            n, counts = view.sum(fp, key.width, key.bucket_start, d)
            assert n == sum(w[0] for w in want)
            assert counts.tolist() == [int(sum(w[1][i] for w in want)) for i in range(d)]
            snapshot = view.snapshot(fp, key.width, key.bucket_start, key.bucket_start + (key.width or 1))
            total = snapshot[0][1][0] if snapshot else PartialCounts.empty(d)
            assert total.shuffled == sum(w[2] for w in want)
            assert total.shuffle_min == min((w[3] for w in want if w[3]), default=0)
    assert view.rejected == 0 and view.keys() == len(latest) and stale > 50 and view.stale_records >= stale // 2
    assert view.reports() == sum(w[0] for (_, _, width, _), w in latest.items() if width == 0)
    assert view.memory_bytes() == sum(b.total.counts.nbytes + sum(len(r) for r in b.partitions.values())
                                      for b in view.index.values())


@pytest.mark.parametrize("tracked_sizes", [None, {FP: 2, FP_OTHER: 3}])
def test_a_bundle_member_replacing_a_held_state_with_garbage_or_another_size_changes_nothing(tracked_sizes):
    """The member a checkpoint rewrites is checked like a new one: not a counts value, or of
    another tracked-set size, it is rejected and counted, and the bucket keeps the state it had
    (the other members of the record still apply)."""
    key = StateKey("g1", 2, 60, 3600, B).encode()
    view = CountsView(tracked_sizes)
    view.apply(key, encode_bundle({FP: PartialCounts(5, [1, 2], 3).to_bytes(),
                                   FP_OTHER: PartialCounts(7, [0, 7, 1], 4).to_bytes()}))
    other = PartialCounts(8, [1, 7, 0], 5).to_bytes()
    for bad in (b"XX" + PartialCounts(9, [3, 2], 8).to_bytes()[2:],
                PartialCounts(9, [3, 2], 8).to_bytes()[:-1],
                PartialCounts(9, [3, 2, 1], 8).to_bytes()):
        rejected = view.rejected
        view.apply(key, encode_bundle({FP: bad, FP_OTHER: other}))
        assert view.rejected == rejected + 1
        assert view.sum(FP, 60, B, 2)[0] == 5 and view.sum(FP, 60, B, 2)[1].tolist() == [1, 2]
        assert view.sum(FP_OTHER, 60, B, 3)[1].tolist() == [1, 7, 0]
    assert view.keys() == 2 and view.memory_bytes() == (2 + 3) * 8 + len(other) + 24 + 2 * 2


def test_a_key_spelled_another_way_is_the_same_table_key():
    """A record names its table key by the key's fields, not by how its text spells them: a bundle
    under another spelling of a held key replaces that key's members, and its tombstone deletes them."""
    view = CountsView()
    view.apply(StateKey("g3", 2, 60, 3600, B).encode(), encode_bundle({
        FP: PartialCounts(10, [1, 2], 5).to_bytes(), FP_OTHER: PartialCounts(4, [4, 0], 7).to_bytes()}))
    view.apply(f"g3:02:60:3600:{B}".encode(), encode_bundle({FP: PartialCounts(12, [2, 2], 9).to_bytes(),
                                                            FP_OTHER: PartialCounts(6, [4, 2], 8).to_bytes()}))
    assert view.sum(FP, 60, B, 2)[0] == 12 and view.sum(FP_OTHER, 60, B, 2)[0] == 6 and view.keys() == 2
    view.apply(f"g3:+2:060:3600:{B}".encode(), None)
    assert view.keys() == 0 and view.index == {} and view.rejected == 0


def test_a_stale_write_after_the_new_owner_s_is_not_applied_and_is_reported():
    """Issue 35, 5: a worker that stalls past its session while it checkpoints writes after the partition's new
    owner. Its states are older (a lower highest source offset: the state of a member is a function of it), so
    the view keeps the newer ones, never answers the smaller counts, and tells ``on_stale`` (the owner then
    writes the key again so the log's last record of it is not the stale one)."""
    view, heard = CountsView(), []
    view.on_stale = heard.append
    key = StateKey("g3", 2, 60, 3600, B)
    owner = encode_bundle({FP: PartialCounts(10, [4, 6], 120).to_bytes(), FP_OTHER: PartialCounts(3, [1, 2], 118).to_bytes()})
    zombie = encode_bundle({FP: PartialCounts(7, [3, 4], 90).to_bytes()})  # older, and without the newer member
    view.apply(key.encode(), owner)
    view.apply(key.encode(), zombie)
    assert view.sum(FP, 60, B, 2)[0] == 10 and view.sum(FP_OTHER, 60, B, 2)[0] == 3
    assert heard == [key] and view.stale_records == 1
    ahead = encode_bundle({FP: PartialCounts(12, [5, 7], 130).to_bytes()})  # a newer state is applied
    view.apply(key.encode(), ahead)
    assert view.sum(FP, 60, B, 2)[0] == 12 and view.sum(FP_OTHER, 60, B, 2)[0] == 3 and len(heard) == 2
