"""The worker's pure fold: exact under replay, linear over buckets and partitions."""

import struct

import numpy as np
import pytest

from agents.state import (NO_OFFSET, members_written_for, BucketKey, OpenBundle, PartialCounts, already_counted, bucket_start, decode_bundle,
                          encode_bundle, fold, total)
from cms_core import InvalidParameterError, OCMSParams, TrackedValues, kernel
from cms_core.errors import SerializationError
from cms_core.privatize import simulate_reports


def test_bucket_key_round_trip_and_errors():
    key = BucketKey("eee2f6ee10f1ea54", 3, 60, 1_700_000_040)
    assert BucketKey.decode(key.encode()) == key
    assert BucketKey.decode(BucketKey.total("ab", 0).encode()).is_total
    for bad in ("nonsense", b"\xff", "ab:0:60:61", "ab:-1:60:60", "ab:x:60:60"):
        with pytest.raises(InvalidParameterError):
            BucketKey.decode(bad)


def test_bucket_start():
    assert bucket_start(119.9, 60) == 60 and bucket_start(120, 60) == 120 and bucket_start(0, 60) == 0


def test_replay_after_crash_counts_each_report_once():
    """Simulate: process offsets in micro-batches, crash after a table write but
    before the consumer commit, restart from the committed offset: the fold with
    offset skipping equals one pass over all reports."""
    params = OCMSParams.build(2.0, 100)
    tracked = TrackedValues.range(params, 0, 100)
    rng = np.random.default_rng(4)
    batch = simulate_reports(params, rng.integers(0, 100, 1000).astype(np.uint64), rng)
    expected = kernel.match_counts(params, batch, tracked)

    state = None
    committed = 0
    offset = 0
    crashes = {300, 650}
    while offset < 1000:
        stop = min(offset + 100, 1000)
        events = [o for o in range(offset, stop) if not already_counted(state, o)]
        if events:
            part = batch.slice(events[0], events[-1] + 1)
            state = fold(state, kernel.match_counts(params, part, tracked), len(part), events[-1])
        if stop in crashes:
            crashes.discard(stop)
            offset = committed  # the commit did not happen: replay from the last commit
            continue
        committed = offset = stop
    assert state.n == 1000
    np.testing.assert_array_equal(state.as_array(), expected)


def test_fold_rejects_going_backwards_and_bad_counts():
    s = fold(None, np.array([1, 0]), 2, 10)
    with pytest.raises(InvalidParameterError, match="last_offset"):
        fold(s, np.array([0, 0]), 1, 10)
    with pytest.raises(InvalidParameterError, match="tracked"):
        fold(s, np.array([0, 0, 0]), 1, 11)
    with pytest.raises(InvalidParameterError, match="counts"):
        fold(s, np.array([3, 0]), 2, 11)


def test_linear_sum_over_partitions_and_json():
    a = fold(None, np.array([1, 2]), 5, 3)
    b = fold(None, np.array([0, 4]), 6, 9)
    n, counts = total([a, b], 2)
    assert n == 11 and counts.tolist() == [1, 6]
    assert PartialCounts.from_json(a.to_json()) == a
    assert PartialCounts.from_bytes(a.to_bytes()) == a
    big = PartialCounts(2**33, [2**32 + 5, 0], 7)  # counts beyond uint32 switch to 8-byte width
    assert PartialCounts.from_bytes(big.to_bytes()) == big


def test_shuffle_accounting_folds_a_sum_a_minimum_and_a_maximum_and_keeps_the_v1_codec_without_it():
    a = fold(None, np.array([1, 2]), 5, 3, shuffled=5, shuffle_min=900)
    b = fold(a, np.array([0, 1]), 4, 7, shuffled=3, shuffle_min=200)
    c = fold(b, np.array([1, 0]), 2, 9)  # not shuffled
    assert (c.n, c.shuffled, c.shuffle_min, c.shuffle_max) == (11, 8, 200, 900)
    d = fold(c, np.array([0, 0]), 1, 10, shuffled=1, shuffle_min=5000)
    assert (d.shuffle_min, d.shuffle_max) == (200, 5000)
    for state in (a, b, c):
        assert PartialCounts.from_bytes(state.to_bytes()) == state == PartialCounts.from_json(state.to_json())
    plain = fold(None, np.array([1, 2]), 5, 3)
    assert plain.to_bytes()[2] == 4 and len(plain.to_bytes()) == 24 + 2 * 2, "unshuffled states keep the v4 codec"
    assert c.to_bytes()[2] == 5 and len(c.to_bytes()) == 24 + 24 + 2 * 2
    with members_written_for("0.2"):  # what release 0.2.0 reads: v1 and v3, 4-byte counts
        assert plain.to_bytes()[2] == 1 and len(plain.to_bytes()) == 24 + 2 * 4, "unshuffled states keep the v1 codec"
        assert c.to_bytes()[2] == 3 and len(c.to_bytes()) == 24 + 24 + 2 * 4
    with pytest.raises(InvalidParameterError):
        fold(None, np.array([1, 2]), 5, 3, shuffled=6, shuffle_min=10)  # more shuffled than reports
    with pytest.raises(InvalidParameterError):
        fold(None, np.array([1, 2]), 5, 3, shuffled=2, shuffle_min=0)


def test_a_value_written_before_claims_were_signed_holds_no_shuffled_report():
    """Codec version 2 (issue 37: its ocms-shuffle-n claims were never verified) is read, its counts kept, its
    shuffle accounting not believed; a fold rewrites it without (v1) or with only verified claims (v3)."""
    from agents.state import OpenBundle, encode_bundle

    counts = np.array([1, 2], np.uint32)
    legacy = struct.pack("<2sBBqqI", b"PC", 2, 4, 5, 3, 2) + struct.pack("<qq", 5, 1_000_000) + counts.tobytes()
    state = PartialCounts.from_bytes(legacy)
    assert (state.n, state.counts.tolist(), state.shuffled, state.shuffle_min) == (5, [1, 2], 0, 0)
    bundle = OpenBundle(encode_bundle({FPS[0]: legacy, FPS[1]: legacy}))
    bundle.fold(FPS[0], np.array([0, 1]), 2, 4)
    bundle.fold(FPS[1], np.array([1, 1]), 2, 4, shuffled=2, shuffle_min=50, shuffle_max=70)
    from agents.state import decode_bundle
    members = {fp: PartialCounts.from_bytes(raw) for fp, raw in decode_bundle(bundle.encode()).items()}
    assert members[FPS[0]] == PartialCounts(7, [1, 3], 4) and members[FPS[0]].to_bytes()[2] == 4
    assert members[FPS[1]] == PartialCounts(7, [2, 3], 4, 2, 50, 70) and members[FPS[1]].to_bytes()[2] == 5
    with members_written_for("0.2"):
        assert members[FPS[0]].to_bytes()[2] == 1 and members[FPS[1]].to_bytes()[2] == 3


def test_partial_counts_codec_refuses_garbage():
    from cms_core.errors import SerializationError

    good = fold(None, np.array([1, 2]), 5, 3).to_bytes()
    shuffled = fold(None, np.array([1, 2]), 5, 3, shuffled=5, shuffle_min=9).to_bytes()
    lying = shuffled[:24] + struct.pack("<qqq", 6, 9, 9) + shuffled[48:]  # 6 of 5 reports shuffled
    for bad in (b"", b"xx" + good[2:], good[:-1], good + b"\0", shuffled[:30], lying):
        with pytest.raises(SerializationError):
            PartialCounts.from_bytes(bad)


def test_partial_counts_are_immutable():
    a = fold(None, np.array([1, 2]), 5, 3)
    with pytest.raises(ValueError):
        a.counts[0] = 9


# ----------------------------------------------------------------- OpenBundle: folds in the stored bytes
FPS = ("00000000000000aa", "00000000000000bb", "00000000000000cc")


def reference_bundle(states: dict) -> bytes:
    return encode_bundle({fp: s.to_bytes() for fp, s in states.items()})


@pytest.mark.parametrize("seed", range(6))
def test_open_bundle_folds_give_the_bytes_of_the_reference_fold(seed):
    """Random folds (new members, shuffled reports switching a member to codec v2, n crossing 2^32 to
    8-byte counts) give exactly encode_bundle of the folded PartialCounts, batch after batch."""
    rng = np.random.default_rng(seed)
    d = {FPS[0]: 5, FPS[1]: 3, FPS[2]: 7}
    states: dict = {}
    raw = None
    offset = 0
    for _ in range(20):
        bundle = OpenBundle(raw)
        for fp in rng.permutation(FPS)[: rng.integers(1, 4)]:
            assert bundle.last_offset(fp) == (states[fp].last_offset if fp in states else NO_OFFSET)
            n = int(rng.choice([0, 1, 7, 1000, 2**31, 2**31]))
            counts = rng.integers(0, n + 1, d[fp])
            shuffled = int(rng.integers(0, n + 1)) if rng.random() < 0.3 else 0
            shuffle_min = int(rng.integers(1, 50)) if shuffled else 0
            offset += int(rng.integers(1, 5))
            bundle.fold(fp, counts, n, offset, shuffled, shuffle_min)
            states[fp] = fold(states.get(fp), counts, n, offset, shuffled, shuffle_min)
        raw = bundle.encode()
        assert raw == reference_bundle(states)
    assert any(s.n >= 2**32 for s in states.values()) and any(s.shuffled for s in states.values())


def test_open_bundle_carries_untouched_members_and_refuses_what_fold_refuses():
    states = {FPS[0]: fold(None, np.array([1, 2]), 3, 10), FPS[1]: fold(None, np.array([4]), 4, 11)}
    raw = reference_bundle(states)
    assert OpenBundle(raw).encode() == raw  # nothing folded: the stored bytes
    bundle = OpenBundle(raw)
    with pytest.raises(InvalidParameterError, match="last_offset"):  # a replay the caller should have skipped
        bundle.fold(FPS[0], np.array([1, 1]), 1, 10)
    with pytest.raises(InvalidParameterError, match="tracked values"):
        bundle.fold(FPS[0], np.array([1, 1, 1]), 1, 12)
    assert bundle.encode() == raw  # a refused fold changes nothing
    bundle.fold(FPS[1], np.array([1]), 2, 12)
    assert decode_bundle(bundle.encode())[FPS[0]] == decode_bundle(raw)[FPS[0]]


def test_open_bundle_refuses_a_damaged_value():
    raw = reference_bundle({FPS[0]: fold(None, np.array([1, 2]), 3, 10)})
    with pytest.raises(SerializationError):
        OpenBundle(raw[:-1])
    with pytest.raises(SerializationError):
        OpenBundle(b"XX" + raw[2:])
    damaged = bytearray(raw)
    damaged[raw.index(b"PC")] = ord("Q")  # the member's codec magic
    with pytest.raises(SerializationError, match="PartialCounts"):
        OpenBundle(bytes(damaged)).last_offset(FPS[0])


def test_the_newest_bundle_keeps_each_member_s_newer_state_whoever_wrote_it():
    """Recovery's merge (issue 35, 5): member by member, the state with the higher offset (a member's state is a
    function of it), a member missing from one side kept from the other; ``written`` itself when it is newest."""
    from agents.state import encode_bundle, member_offsets, newest_bundle

    a, b = "00000000000000aa", "00000000000000bb"
    owner = encode_bundle({a: PartialCounts(10, [4, 6], 120).to_bytes(), b: PartialCounts(3, [1, 2], 118).to_bytes()})
    zombie = encode_bundle({a: PartialCounts(7, [3, 4], 90).to_bytes()})
    assert newest_bundle(owner, zombie) == owner  # the stale write after the owner's changes nothing
    newer = encode_bundle({a: PartialCounts(12, [5, 7], 130).to_bytes(), b: PartialCounts(4, [2, 2], 125).to_bytes()})
    assert newest_bundle(owner, newer) is newer  # the common case: the later record, as is
    mixed = newest_bundle(owner, encode_bundle({a: PartialCounts(12, [5, 7], 130).to_bytes()}))
    assert member_offsets(mixed) == {a: 130, b: 118}
    assert newest_bundle(owner, b"garbage") == b"garbage" and newest_bundle(b"garbage", owner) == owner


@pytest.mark.parametrize("upgrade_from, widths", [(None, (2, 4, 4, 8)), ("0.2", (4, 4, 4, 8))])
def test_a_member_widens_its_counts_as_n_crosses_2_16_and_2_32_and_stays_exact(upgrade_from, widths):
    """Codec v4 holds 2-byte counts while n < 2^16, then 4, then 8 (v1 with --upgrade-from 0.2: 4, then 8); the
    in-place fold of OpenBundle re-encodes a member whose width changes, with the reference fold's bytes."""
    steps = (65_535, 1, 2**32 - 65_537, 1)  # n after each: 2^16 - 1, 2^16, 2^32 - 1, 2^32
    seen = []
    with members_written_for(upgrade_from):
        bundle, reference = OpenBundle(None), None
        for offset, n in enumerate(steps, 1):
            counts = np.array([n, n // 2, 0])
            bundle.fold(FPS[0], counts, n, offset)
            reference = fold(reference, counts, n, offset)
            raw = decode_bundle(bundle.encode())[FPS[0]]
            assert raw == reference.to_bytes() and PartialCounts.from_bytes(raw) == reference
            seen.append(raw[3])
            bundle = OpenBundle(bundle.encode())
    assert tuple(seen) == widths
    assert reference.n == 2**32 and reference.counts.tolist() == [2**32, sum(n // 2 for n in steps), 0]
