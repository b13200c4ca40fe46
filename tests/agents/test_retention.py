"""agents.retention's index and the table keys' expiry (no broker; the worker-level test is in test_app)."""

from agents.retention import RetentionIndex
from agents.state import BucketKey, StateKey, StateLayout

NOW = 1_699_999_800  # a multiple of 600 (and of 60)
FP1, FP2 = "069888932a931dd6", "a408ba41f2a27a6f"
LEVELS = ((60, 86_400), (600, 864_000))
LAYOUT = StateLayout({FP1: LEVELS, FP2: LEVELS}, {FP1: 50, FP2: 50})


def key(fp: str, partition: int, width: int, start: int) -> StateKey:
    return LAYOUT.key_of(BucketKey(fp, partition, width, start))


def test_a_table_key_expires_when_its_bucket_is_wholly_older_than_its_level_retention():
    base_edge = NOW - 86_400 - 60  # bucket ends exactly at now - retention
    assert key(FP1, 0, 60, base_edge).expires_at == NOW
    assert key(FP1, 0, 60, base_edge + 60).expires_at > NOW
    roll_edge = NOW - 864_000 - 600
    assert key(FP1, 0, 600, roll_edge).expires_at == NOW
    # the base bucket's age does not expire the rollup of the same start
    assert key(FP1, 0, 600, base_edge - 540).expires_at > NOW
    assert key(FP1, 0, 0, 0).expires_at == float("inf")  # the cumulative key never expires


def test_retention_index_returns_each_expired_key_once_in_expiry_order():
    index = RetentionIndex()
    old, older = key(FP1, 0, 60, NOW - 86_400 - 60), key(FP1, 1, 60, NOW - 86_400 - 120)
    fresh = key(FP1, 0, 60, NOW)
    rollup = key(FP2, 2, 600, NOW - 864_000 - 1200)
    for k in (fresh, old, LAYOUT.key_of(BucketKey.total(FP1, 0)), older, rollup, old):
        index.add(k)
    assert len(index) == 4  # the cumulative key is never indexed, a repeated write once
    assert index.due(NOW - 601) == []
    assert index.due(NOW - 600) == [rollup]  # its end is exactly now - the rollup retention
    assert index.due(NOW - 61) == []
    assert index.due(NOW) == [older, old]
    assert index.due(NOW) == []
    assert index.due(NOW + 86_400 + 60) == [fresh]
    assert len(index) == 0


def test_retention_index_reset_replaces_what_it_held():
    """The worker rebuilds the index from the table's keys (after a restart or a rebalance):
    keys it never wrote itself are due like its own, keys gone from the table are forgotten."""
    index = RetentionIndex()
    written_before = key(FP1, 3, 60, NOW - 86_400 - 60)
    index.add(key(FP1, 0, 60, NOW - 86_400 - 60))
    short = StateKey("g1", 3, 3600, 60, NOW - 7200)  # a key states its own retention
    index.reset([written_before, LAYOUT.key_of(BucketKey.total(FP1, 3)), short])
    assert len(index) == 2
    assert index.due(NOW) == [short, written_before]
