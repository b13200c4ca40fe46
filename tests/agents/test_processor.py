"""agents.processor without Kafka: message validation, micro-batch planning, expiry.

plan_batch is checked against an independent model: for every key, the events
of that key above the key's stored offset, decoded with cms_core.kernel, folded
onto the stored state. Exactness under replay is checked by simulating crashes
where only some of a batch's table writes landed.
"""

import json
import threading
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from agents import processor
from agents.processor import (
    REJECT_REASONS,
    AcceptedMessage,
    MessageValidator,
    PendingBatch,
    RejectedMessage,
    batch_keys,
    encoded_plan,
    table_keys,
    keys_for,
    plan_batch,
)
from agents.state import NO_OFFSET, BucketKey, PartialCounts, StateLayout, decode_bundle, encode_bundle
from cms_core import OCMSParams, ReportBatch, TrackedValues, kernel, reference_match_counts, wire
from cms_core.errors import InvalidParameterError
from cms_core.privatize import simulate_reports

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "wire_v1.json").read_text())

# ---------------------------------------------------------------- validator
SMALL = OCMSParams.build(2.0, 10_000)  # the vectors' "small" set: F(10007), m = 4
OTHER = OCMSParams.build(1.0, 10_000)  # F(10007), m = 3
RETENTION = 86_400
TOLERANCE = 300
NOW = 1_700_000_000.0


def make_validator() -> MessageValidator:
    return MessageValidator([SMALL, OTHER], RETENTION, TOLERANCE)


def frame(params: OCMSParams, seed: int, n: int) -> tuple[bytes, ReportBatch]:
    rng = np.random.default_rng(seed)
    batch = simulate_reports(params, rng.integers(0, 10_000, n).astype(np.uint64), rng)
    return wire.encode_frame(params, batch), batch


def test_vector_params_match_small():
    assert SMALL.fingerprint.hex() == VECTORS["param_sets"]["small"]["fingerprint"] == "eee2f6ee10f1ea54"
    assert (SMALL.hash_range, str(SMALL.field), OTHER.hash_range) == (4, "F(10007)", 3)


def test_reject_reasons_are_the_wire_reasons_plus_three():
    assert REJECT_REASONS == (
        "bad_magic", "bad_version", "bad_kind", "unknown_fingerprint", "truncated", "oversized",
        "count_mismatch", "coefficient_out_of_field", "z_out_of_range", "empty", "expired", "future_timestamp",
    )
    assert len(set(REJECT_REASONS)) == len(REJECT_REASONS)


@pytest.mark.parametrize("vector", VECTORS["malformed"], ids=lambda v: v["title"])
def test_malformed_vectors_rejected_with_their_reason(vector):
    with pytest.raises(RejectedMessage) as info:
        make_validator().check(bytes.fromhex(vector["hex"]), NOW, NOW)
    assert info.value.reason == vector["reason"]
    assert info.value.reason in REJECT_REASONS
    assert str(info.value).startswith(vector["reason"] + ": ")


def _crafted() -> list[tuple[str, bytes]]:
    """Every wire-format reason from bytes built here (a valid SMALL frame of 3, then broken)."""
    good, _ = frame(SMALL, 1, 3)
    assert len(good) == 16 + 3 * 5
    header = bytearray(good[:16])

    def with_header(**changes) -> bytes:
        h = bytearray(header)
        if "magic" in changes:
            h[0:2] = changes["magic"]
        if "version" in changes:
            h[2] = changes["version"]
        if "kind" in changes:
            h[3] = changes["kind"]
        if "fp" in changes:
            h[4:12] = changes["fp"]
        if "count" in changes:
            h[12:16] = changes["count"].to_bytes(4, "big")
        return bytes(h)

    body = good[16:]
    a0_p = (10_007).to_bytes(2, "big") + body[2:]  # first record's a0 = p
    a1_big = body[:2] + (0xFFFF).to_bytes(2, "big") + body[4:]
    z_m = body[:4] + bytes([4]) + body[5:]  # z = m = 4
    return [
        ("bad_magic", with_header(magic=b"CO") + body),
        ("bad_version", with_header(version=0) + body),
        ("bad_kind", with_header(kind=0) + body),
        ("unknown_fingerprint", with_header(fp=OCMSParams.build(3.0, 10_000).fingerprint) + body),
        ("truncated", good[:15]),
        ("truncated", good[:-1]),
        ("oversized", good + b"\x00\x00"),
        ("count_mismatch", with_header(count=2) + body),  # body holds 3 records
        ("count_mismatch", with_header(count=0)),
        ("count_mismatch", with_header(kind=wire.KIND_REPORT) + body),  # single report claiming 3
        ("coefficient_out_of_field", with_header() + a0_p),
        ("coefficient_out_of_field", with_header() + a1_big),
        ("z_out_of_range", with_header() + z_m),
    ]


def test_crafted_bytes_give_every_wire_reason():
    validator = make_validator()
    seen = set()
    for reason, data in _crafted():
        with pytest.raises(RejectedMessage) as info:
            validator.check(data, NOW, NOW)
        assert info.value.reason == reason, (reason, data.hex(), info.value)
        seen.add(reason)
    assert seen == set(wire.REASONS)


def test_empty_message():
    validator = make_validator()
    for value in (None, b""):
        with pytest.raises(RejectedMessage) as info:
            validator.check(value, NOW, NOW)
        assert info.value.reason == "empty"


def test_time_window_reasons_and_boundaries():
    validator = make_validator()
    data, batch = frame(SMALL, 2, 4)
    with pytest.raises(RejectedMessage) as info:
        validator.check(data, NOW - RETENTION - 0.001, NOW)
    assert info.value.reason == "expired"
    with pytest.raises(RejectedMessage) as info:
        validator.check(data, NOW + TOLERANCE + 0.001, NOW)
    assert info.value.reason == "future_timestamp"
    # The boundaries themselves are accepted.
    for ts in (NOW - RETENTION, NOW + TOLERANCE, NOW):
        params, got = validator.check(data, ts, NOW)
        assert params is SMALL and got.to_reports() == batch.to_reports()


def test_wire_fault_wins_over_time_fault():
    with pytest.raises(RejectedMessage) as info:
        make_validator().check(b"XX" + bytes(30), NOW - 10 * RETENTION, NOW)
    assert info.value.reason == "bad_magic"


@pytest.mark.parametrize("params", [SMALL, OTHER], ids=["small", "other"])
def test_accepted_message_returns_its_params(params):
    validator = make_validator()
    data, batch = frame(params, 3, 7)
    got_params, got = validator.check(data, NOW - 5, NOW)
    assert got_params is params
    assert len(got) == 7 and got.to_reports() == batch.to_reports()
    single = wire.encode_report(params, batch.to_reports()[0])
    got_params, got = validator.check(single, NOW, NOW)
    assert got_params is params and got.to_reports() == batch.to_reports()[:1]


def test_other_params_bytes_differ_from_small_registry():
    """A frame of OTHER (m = 3) is refused by a validator that only accepts SMALL."""
    data, _ = frame(OTHER, 4, 2)
    with pytest.raises(RejectedMessage) as info:
        MessageValidator([SMALL], RETENTION, TOLERANCE).check(data, NOW, NOW)
    assert info.value.reason == "unknown_fingerprint"


# ---------------------------------------------------------------- planning
LEVELS = ((60, 86_400), (600, 864_000))
P1 = OCMSParams.build(2.0, 1000)
P2 = OCMSParams.build(1.0, 1000)
PARAMS = {p.fingerprint.hex(): p for p in (P1, P2)}
TRACKED = {fp: TrackedValues.range(p, 0, 50) for fp, p in PARAMS.items()}
FP1, FP2 = P1.fingerprint.hex(), P2.fingerprint.hex()
T0 = 1_699_999_800  # a multiple of 600


def make_events(seed: int, per_partition: int = 30, partitions=(0, 1), first_offset: int = 100) -> list[AcceptedMessage]:
    """Messages of 2 parameter sets interleaved per partition, event times mostly rising
    (with late events) over ~3 rollup buckets; returned interleaved across partitions. About
    two in three came through a shuffling collector (batches of their size to 500 reports)."""
    rng = np.random.default_rng(seed)
    shuffles = np.random.default_rng(seed + 1_000)
    streams = []
    for partition in partitions:
        stream = []
        for i in range(per_partition):
            fp = FP1 if rng.random() < 0.5 else FP2
            params = PARAMS[fp]
            size = int(rng.integers(1, 9))
            values = np.minimum(rng.geometric(0.06, size) - 1, 999).astype(np.uint64)
            ts = float(T0 + i * 1500 / per_partition + rng.uniform(-100, 40))
            shuffle_n = int(shuffles.integers(size, 500)) if shuffles.random() < 0.66 else 0
            stream.append(AcceptedMessage(partition, first_offset + i, ts, fp, simulate_reports(params, values, rng),
                                          shuffle_n))
        streams.append(stream)
    out = []
    for i in range(per_partition):
        for stream in streams:
            out.append(stream[i])
    return out


def model_keys(m: AcceptedMessage) -> list[BucketKey]:
    """The keys of an event, computed here (not with processor.keys_for)."""
    keys = [BucketKey(m.fingerprint, m.partition, w, int(m.timestamp // w) * w) for w, _ in LEVELS]
    return keys + [BucketKey(m.fingerprint, m.partition, 0, 0)]


def model_plan(events, stored: dict) -> dict:
    """key -> expected new state (only keys with at least one event above their stored offset)."""
    members = defaultdict(list)
    for m in events:
        for key in model_keys(m):
            state = stored.get(key)
            if state is None or m.offset > state.last_offset:
                members[key].append(m)
    out = {}
    for key, ms in members.items():
        params, tracked = PARAMS[key.fingerprint], TRACKED[key.fingerprint]
        batch = ReportBatch.concat([m.batch for m in ms])
        counts = kernel.match_counts(params, batch, tracked)
        base = stored.get(key) or PartialCounts.empty(len(tracked))
        shuffled = [m for m in ms if m.shuffle_n]
        smallest = min([m.shuffle_n for m in shuffled] + ([base.shuffle_min] if base.shuffle_min else []), default=0)
        largest = max([m.shuffle_n for m in shuffled] + [base.shuffle_max])
        out[key] = PartialCounts(base.n + len(batch), base.counts + counts, max(m.offset for m in ms),
                                 base.shuffled + sum(len(m.batch) for m in shuffled), smallest, largest)
    return out


def run_plan(events, table: dict):
    """The worker's path (agents.checkpoint, step 0): read the batch's table keys up front (on the
    event loop), then plan, decode and fold into the stored bytes away from the table (on the decode
    thread). ``table`` holds member states; here they are stored as the worker stores them, in
    bundles. Every bundle written must hold exactly the states of the reference fold
    (``plan_batch``), which is returned."""
    layout = StateLayout({fp: LEVELS for fp in PARAMS}, {fp: len(t) for fp, t in TRACKED.items()})
    stored: dict = {}
    for key, state in table.items():
        stored.setdefault(layout.key_of(key), {})[key.fingerprint] = state.to_bytes()
    values = {key: encode_bundle(stored[key]) if key in stored else None for key in table_keys(events, layout, LEVELS)}
    plan, writes = encoded_plan(events, values, layout, PARAMS, TRACKED, LEVELS)
    reference = plan_batch(events, table.get, PARAMS, TRACKED, LEVELS)
    written = {}  # member key -> state, as the bundles written hold them
    for table_key, value in writes:
        assert value == encode_bundle(decode_bundle(value))  # canonical: what encode_bundle writes
        for fp, raw in decode_bundle(value).items():
            written[table_key.member(fp)] = PartialCounts.from_bytes(raw)
    assert [k for k, _ in writes] == list(dict.fromkeys(layout.key_of(k) for k, _ in reference.writes))
    assert {k: written[k] for k, _ in reference.writes} == dict(reference.writes)
    untouched = {k: v for k, v in written.items() if k not in dict(reference.writes)}
    assert all(table[k] == v for k, v in untouched.items())  # members the batch did not touch: carried over
    assert (plan.counted, plan.replayed, plan.reasserted, plan.reports) == (
        reference.counted, reference.replayed, reference.reasserted, reference.reports)
    assert plan.writes == []
    return reference


def test_batch_keys_are_every_key_the_plan_reads():
    events = make_events(71, per_partition=6)
    read = []
    plan_batch(events, lambda key: read.append(key), PARAMS, TRACKED, LEVELS)
    assert set(batch_keys(events, LEVELS)) == set(read)
    assert len(set(read)) == len(read)  # plan_batch reads each key once


def writes_dict(plan) -> dict:
    """The folds of a plan (re-asserted unchanged keys left out; see test_replayed_keys_are_reasserted)."""
    keys = [k for k, _ in plan.writes]
    assert len(keys) == len(set(keys)), "a key is written twice in one batch"
    return {k: v for k, v in plan.writes if k not in plan.reasserted}


def test_replayed_keys_are_reasserted_unchanged():
    """A key that skipped replayed events and got nothing new is written again with its stored
    value (a RocksDB store may hold a value the changelog lost in a crash)."""
    events = make_events(61, per_partition=8)
    table = clean_table(events)
    plan = run_plan(events, table)  # a full replay: every event is at or below its keys' offsets
    assert plan.reasserted and set(plan.reasserted) == set(table)
    assert all(state == table[key] for key, state in plan.writes)
    assert sum(plan.counted.values()) == 0 and plan.replayed == plan.reports


def test_keys_for_levels_then_total():
    keys = keys_for(FP1, 3, 1_700_000_123.5, LEVELS)
    assert keys == [
        BucketKey(FP1, 3, 60, 1_700_000_100),
        BucketKey(FP1, 3, 600, 1_699_999_800),
        BucketKey(FP1, 3, 0, 0),
    ]
    assert keys[-1] == BucketKey.total(FP1, 3) and keys[-1].is_total


def test_plan_counts_equal_kernel_counts_per_key():
    events = make_events(11)
    plan = run_plan(events, {})
    got = writes_dict(plan)
    expected = model_plan(events, {})
    assert set(got) == set(expected)
    for key, state in expected.items():
        assert got[key] == state, key
    widths = {k.width for k in got}
    assert widths == {0, 60, 600}
    assert {k.partition for k in got} == {0, 1} and {k.fingerprint for k in got} == {FP1, FP2}
    assert len({k.bucket_start for k in got if k.width == 600}) >= 3  # several rollup buckets
    # Per parameter set and partition, the totals are kernel counts of exactly its reports.
    for fp in (FP1, FP2):
        for partition in (0, 1):
            mine = [m for m in events if m.fingerprint == fp and m.partition == partition]
            batch = ReportBatch.concat([m.batch for m in mine])
            total = got[BucketKey.total(fp, partition)]
            assert total.n == len(batch)
            np.testing.assert_array_equal(total.counts, kernel.match_counts(PARAMS[fp], batch, TRACKED[fp]))
            assert total.last_offset == max(m.offset for m in mine)
            # linearity: total = sum of rollup buckets = sum of base buckets
            for width in (60, 600):
                parts = [s for k, s in got.items() if (k.fingerprint, k.partition, k.width) == (fp, partition, width)]
                assert sum(s.n for s in parts) == total.n
                assert sum(s.shuffled for s in parts) == total.shuffled  # shuffled reports: in every level
                assert min((s.shuffle_min for s in parts if s.shuffle_min), default=0) == total.shuffle_min
                assert max((s.shuffle_max for s in parts), default=0) == total.shuffle_max
                np.testing.assert_array_equal(np.sum([s.counts for s in parts], axis=0), total.counts)
    assert plan.reports == sum(len(m.batch) for m in events)
    assert dict(plan.counted) == {
        fp: sum(len(m.batch) for m in events if m.fingerprint == fp) for fp in (FP1, FP2)
    }
    assert plan.replayed == 0
    assert plan.decode_seconds >= 0.0


def test_plan_counts_match_the_pure_python_reference():
    """One bucket key checked against the paper's Algorithm 1 loop (independent of the compiled kernel)."""
    events = make_events(12, per_partition=12)
    got = writes_dict(run_plan(events, {}))
    key = max((k for k in got if k.width == 60), key=lambda k: got[k].n)
    mine = [m for m in events if key in model_keys(m)]
    batch = ReportBatch.concat([m.batch for m in mine])
    ref = reference_match_counts(PARAMS[key.fingerprint], batch, TRACKED[key.fingerprint])
    assert got[key].n == len(batch) > 0
    assert got[key].counts.tolist() == ref.tolist()


def test_parameter_sets_and_partitions_are_kept_apart():
    """Same partition, same bucket, two parameter sets: two key families, each only its reports."""
    rng = np.random.default_rng(5)
    ts = T0 + 30.0
    b1 = simulate_reports(P1, rng.integers(0, 50, 40).astype(np.uint64), rng)
    b2 = simulate_reports(P2, rng.integers(0, 50, 25).astype(np.uint64), rng)
    b3 = simulate_reports(P1, rng.integers(0, 50, 10).astype(np.uint64), rng)
    events = [AcceptedMessage(0, 7, ts, FP1, b1), AcceptedMessage(0, 8, ts, FP2, b2),
              AcceptedMessage(1, 7, ts, FP1, b3)]
    got = writes_dict(run_plan(events, {}))
    assert len(got) == 9
    c1 = kernel.match_counts(P1, b1, TRACKED[FP1])
    for width, start in ((60, T0), (600, T0), (0, 0)):
        assert got[BucketKey(FP1, 0, width, start)] == PartialCounts(40, c1, 7)
        assert got[BucketKey(FP2, 0, width, start)] == PartialCounts(25, kernel.match_counts(P2, b2, TRACKED[FP2]), 8)
        assert got[BucketKey(FP1, 1, width, start)] == PartialCounts(10, kernel.match_counts(P1, b3, TRACKED[FP1]), 7)


# ------------------------------------------------------- replay exactness
def clean_table(events) -> dict:
    table: dict = {}
    for key, state in run_plan(events, {}).writes:
        table[key] = state
    return table


def stream_batches(events, size):
    return [events[i : i + size] for i in range(0, len(events), size)]


CRASH_FILTERS = {
    "buckets_landed_total_not": lambda k, i: not k.is_total,
    "total_landed_buckets_not": lambda k, i: k.is_total,
    "only_base_level": lambda k, i: k.width == 60,
    "only_rollup_level": lambda k, i: k.width == 600,
    "every_other_write": lambda k, i: i % 2 == 0,
    "only_partition_0": lambda k, i: k.partition == 0,
    "only_first_params": lambda k, i: k.fingerprint == FP1,
    "nothing_landed": lambda k, i: False,
    "everything_landed": lambda k, i: True,
}


@pytest.mark.parametrize("crash", sorted(CRASH_FILTERS))
@pytest.mark.parametrize("crash_batch", [1, 3])
def test_replay_after_partial_writes_is_exact(crash, crash_batch):
    events = make_events(21, per_partition=24)
    expected = clean_table(events)
    batches = stream_batches(events, 8)  # 6 micro-batches of 8 messages
    table: dict = {}
    for batch in batches[:crash_batch]:
        for key, state in run_plan(batch, table).writes:
            table[key] = state
    before = dict(table)
    crashed = run_plan(batches[crash_batch], table).writes
    landed = [(k, s) for i, (k, s) in enumerate(crashed) if CRASH_FILTERS[crash](k, i)]
    for key, state in landed:
        table[key] = state
    if crash not in ("nothing_landed", "everything_landed"):
        assert 0 < len(landed) < len(crashed)  # really a partial write
    # Restart from the commit before the previous batch (an earlier offset than the crashed
    # batch), with other micro-batch boundaries, then run to the end.
    replay = [m for b in batches[crash_batch - 1 :] for m in b]
    replayed_total = 0
    for batch in stream_batches(replay, 5):
        plan = run_plan(batch, table)
        replayed_total += plan.replayed
        for key, state in plan.writes:
            if key in plan.reasserted:
                assert state == table[key]  # written again unchanged
                continue
            assert key not in before or state.last_offset > table[key].last_offset
            table[key] = state
    assert set(table) == set(expected)
    for key, state in expected.items():
        assert table[key] == state, key  # n, every count and the offset, to the integer
    # What the cumulative keys already held is reported as replayed, nothing else.
    already = batches[crash_batch - 1] + (
        [m for m in batches[crash_batch] if any(k.is_total and k.partition == m.partition
                                                  and k.fingerprint == m.fingerprint for k, _ in landed)]
    )
    assert replayed_total == sum(len(m.batch) for m in already)


def test_replay_with_random_partial_writes_is_exact():
    events = make_events(31, per_partition=20)
    expected = clean_table(events)
    rng = np.random.default_rng(8)
    for _ in range(6):
        table: dict = {}
        position = 0
        while position < len(events):
            size = int(rng.integers(2, 12))
            batch = events[position : position + size]
            writes = run_plan(batch, table).writes
            if rng.random() < 0.4:  # crash: a random subset lands, replay from an earlier offset
                for key, state in writes:
                    if rng.random() < 0.5:
                        table[key] = state
                position = max(0, position - int(rng.integers(0, 10)))
                continue
            for key, state in writes:
                table[key] = state
            position += size
        assert table == expected


# ----------------------------------------------------- replayed, no writes
def test_events_at_or_below_every_stored_offset_are_replayed_without_new_counts():
    events = make_events(41, per_partition=10)
    table = clean_table(events)
    plan = run_plan(events, table)
    assert writes_dict(plan) == {} and all(state == table[key] for key, state in plan.writes)
    assert plan.replayed == plan.reports == sum(len(m.batch) for m in events)
    assert dict(plan.counted) == {}
    # A prefix (offsets strictly below the stored ones) too.
    plan = run_plan(events[:7], table)
    assert writes_dict(plan) == {} and plan.replayed == sum(len(m.batch) for m in events[:7])


def test_total_ahead_of_buckets_counts_buckets_only_and_reports_replayed():
    events = make_events(42, per_partition=10)
    full = clean_table(events)
    table = {k: s for k, s in full.items() if k.is_total}
    plan = run_plan(events, table)
    assert plan.replayed == plan.reports
    assert dict(plan.counted) == {}
    got = writes_dict(plan)
    assert set(got) == {k for k in full if not k.is_total}
    for key, state in got.items():
        assert state == full[key]


# --------------------------------------------------- no backwards folds
def test_plan_never_folds_backwards(monkeypatch):
    """Random stored offsets per key (some ahead, some behind, some absent) and messages
    in shuffled order: every fold moves its key's offset forward and the result is the
    stored state plus exactly the events above the key's offset."""
    calls = []
    real_fold = processor.fold

    def recording_fold(state, counts, n, last_offset, *shuffle):
        calls.append((None if state is None else state.last_offset, last_offset))
        return real_fold(state, counts, n, last_offset, *shuffle)

    monkeypatch.setattr(processor, "fold", recording_fold)
    rng = np.random.default_rng(51)
    events = make_events(52, per_partition=16)
    full = clean_table(events)
    for trial in range(12):
        stored = {}
        for key in full:
            pick = rng.random()
            if pick < 0.3:
                continue  # never written
            offset = int(rng.integers(95, 120))  # below, inside and above the events' offsets
            stored[key] = PartialCounts(0, np.zeros(50, np.int64), offset)
        shuffled = [events[i] for i in rng.permutation(len(events))]
        calls.clear()
        got = writes_dict(run_plan(shuffled, stored))
        assert got == model_plan(events, stored)
        assert calls and all(old is None or new > old for old, new in calls)
        for key, state in got.items():
            assert state.last_offset > (stored[key].last_offset if key in stored else NO_OFFSET)


# ------------------------------------------------------------------ pending batch
def source(partition: int, offset: int):
    return SimpleNamespace(partition=partition, offset=offset)


def accepted_for(message, reports: int = 5) -> AcceptedMessage:
    batch = simulate_reports(P1, np.arange(reports, dtype=np.uint64), np.random.default_rng(message.offset))
    return AcceptedMessage(message.partition, message.offset, NOW, FP1, batch)


def test_pending_batch_fills_ages_and_hands_over():
    batch = PendingBatch(max_reports=10)
    assert not batch and batch.age(5.0) == 0.0
    first, second, junk = source(0, 4), source(1, 9), source(0, 5)
    assert batch.add(first, accepted_for(first), now=100.0) == []
    assert batch.add(junk, RejectedMessage("truncated", "short"), now=100.5) == []
    assert not batch.full and batch.age(101.0) == 1.0
    assert batch.add(second, accepted_for(second), now=102.0) == []
    assert batch.full and batch.reports == 10
    taken = batch.take()
    assert taken.messages == [first, junk, second] and [a.offset for a in taken.accepted] == [4, 9]
    assert [(m, r.reason) for m, r in taken.dead] == [(junk, "truncated")]
    assert taken.last_offsets() == {0: 5, 1: 9}
    assert not batch and batch.reports == 0 and batch.add(source(0, 5), accepted_for(source(0, 5)), 103.0) == []


def test_pending_batch_returns_the_copies_a_redelivery_supersedes():
    """A seek back to offset 2 of partition 0: the pending copies 2..4 are returned (the
    caller untracks them) and the new delivery is counted instead, once."""
    batch = PendingBatch(max_reports=1000)
    first = [source(0, o) for o in range(5)]
    for m in first + [source(1, 0)]:
        batch.add(m, RejectedMessage("empty", "no value") if m.offset == 3 else accepted_for(m), now=0.0)
    assert len(batch.dead) == 1
    again = source(0, 2)
    superseded = batch.add(again, accepted_for(again), now=0.0)
    assert superseded == first[2:]
    assert [(a.partition, a.offset) for a in batch.accepted] == [(0, 0), (0, 1), (1, 0), (0, 2)]
    assert batch.dead == [] and batch.reports == 4 * 5
    assert batch.add(source(0, 3), accepted_for(source(0, 3)), now=0.0) == []  # forward again: kept


def test_pending_batch_drops_partitions_no_longer_owned_and_forgets_their_offsets():
    batch = PendingBatch(max_reports=1000)
    kept, lost = [source(0, o) for o in range(3)], [source(1, o) for o in range(2)]
    for m in kept + lost:
        batch.add(m, accepted_for(m), now=0.0)
    assert batch.keep_partitions({0, 2}) == lost
    assert batch.messages == kept and batch.reports == 15
    assert batch.keep_partitions({0}) == []
    back = source(1, 0)  # given back later: a fresh start, not a redelivery of a dropped copy
    assert batch.add(back, accepted_for(back), now=0.0) == [] and batch.messages[-1] is back


# ------------------------------------------------- groups decoded on threads
def test_groups_decoded_together_on_threads_give_the_same_plan(monkeypatch):
    """A registry worker's batch holds many small groups, decoded together on threads
    (decode_segments: kernel.match_counts_many); the plan, replayed segments included, is the
    plan with every group decoded alone, to the integer."""
    events = make_events(51, per_partition=24)
    table: dict = {}
    for key, state in plan_batch(events[:30], table.get, PARAMS, TRACKED, LEVELS).writes:
        table[key] = state
    batch = events[12:]  # overlaps what the table holds: replayed segments next to new ones
    together = kernel.match_counts_many
    monkeypatch.setattr(kernel, "match_counts_many", lambda jobs, **kw: [
        kernel.match_counts(params, b, tracked, threads=1) for params, b, tracked in jobs])
    one_by_one = plan_batch(batch, table.get, PARAMS, TRACKED, LEVELS)
    assert one_by_one.replayed > 0
    monkeypatch.setattr(kernel, "match_counts_many", together)
    threads = []
    if kernel.BACKEND == "compiled":
        run = kernel._compiled.counts_many

        def recording(jobs):
            threads.append(threading.current_thread().name)
            return run(jobs)

        monkeypatch.setattr(kernel._compiled, "counts_many", recording)
    monkeypatch.setattr(kernel, "_PAIRS_PER_THREAD", 1)  # every batch worth a second thread
    monkeypatch.setenv("OCMS_DECODE_THREADS", "2")
    pooled = plan_batch(batch, table.get, PARAMS, TRACKED, LEVELS)
    if kernel.BACKEND == "compiled":
        assert len(threads) == 2 and any(name.startswith("ocms-decode-part") for name in threads)
    assert pooled.writes == one_by_one.writes
    assert (pooled.counted, pooled.replayed, pooled.reasserted) == (
        one_by_one.counted, one_by_one.replayed, one_by_one.reasserted)


@pytest.mark.parametrize("bad", [-1, 1])
def test_kernel_counts_outside_zero_to_n_stop_the_plan(monkeypatch, bad):
    """A kernel result below 0 or above its segment's reports never reaches the stored 4-byte counts
    (decode_segments checks each once): the batch fails instead, and nothing is written."""
    events = make_events(5)
    real = kernel.match_counts_many

    def broken(jobs, **kwargs):
        counts = real(jobs, **kwargs)
        counts[0][0] = -1 if bad < 0 else len(jobs[0][1]) + 1
        return counts

    monkeypatch.setattr(kernel, "match_counts_many", broken)
    with pytest.raises(InvalidParameterError, match="kernel match counts must lie in"):
        run_plan(events, {})
