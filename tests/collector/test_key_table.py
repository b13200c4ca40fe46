"""The idempotency log's holders table (collector/exactly_once/_keytable.c) against its dict reference.

The compiled table must give what ``DictKeyTable`` gives after any sequence of takes, releases and digests
(open addressing with backward-shift deletion is where a slip loses or duplicates a key), hold its holders
alive while it names them and no longer, and refuse key strings that are not whole.
"""

from __future__ import annotations

import array
import gc
import os
import random
import weakref

import pytest

from collector.exactly_once import log as log_module
from collector.exactly_once.log import (KEY_HASH_BYTES, DictKeyTable, ListingLog, encode_listing, encode_outcome)

try:
    from collector.exactly_once._keytable import KeyTable as CompiledKeyTable
except ImportError:  # pragma: no cover - `make test` demands it (test_the_compiled_table_was_built)
    CompiledKeyTable = None

needs_compiled = pytest.mark.skipif(CompiledKeyTable is None and os.environ.get("OCMS_REQUIRE_KERNEL") != "1",
                                    reason="the compiled holders table is not built (make install builds it)")


class Holder:
    """A listing stand-in: compared by identity, as the table compares holders."""

    def __init__(self, name: int):
        self.name = name


def keys_of(numbers) -> bytes:
    return b"".join(n.to_bytes(KEY_HASH_BYTES, "big") for n in numbers)


def clustered_key(rng: random.Random, space: int) -> int:
    # keys alike in one half (4 values of the first 8 bytes, small numbers in the last 8): what a weak slot hash
    # would cluster, and keys that differ in one half only (the whole key is compared); a small space makes takes
    # find keys held already
    return (rng.randrange(4) << 64) | rng.randrange(space)


@pytest.mark.skipif(os.environ.get("OCMS_REQUIRE_KERNEL") != "1", reason="only `make test` demands the compiled table")
def test_the_compiled_table_was_built():
    # a silent build failure would leave every collector on the dict (slower under load; issue 41)
    assert log_module.KEY_TABLE_BACKEND == "compiled"


@needs_compiled
@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_table_agrees_with_the_dict_after_any_sequence(seed):
    rng = random.Random(seed)
    compiled, reference = CompiledKeyTable(), DictKeyTable()
    holders = [Holder(i) for i in range(40)]
    space = [300, 3_000, 30_000, 300_000][seed]  # from most keys held already to the table growing past 100,000
    for step in range(4_000):
        holder = rng.choice(holders)
        action = rng.random()
        keys = keys_of(clustered_key(rng, space) for _ in range(rng.choice([0, 1, 2, 16, 128])))
        if action < 0.5:
            assert compiled.take(keys, holder) == reference.take(keys, holder), step
        elif action < 0.8:
            assert compiled.release(keys, holder) == reference.release(keys, holder), step
        else:
            digests = array.array("q", [rng.choice([-1, rng.randrange(-2**63, 2**63), rng.randrange(-9, 9)])
                                        for _ in range(len(keys) // KEY_HASH_BYTES)]).tobytes()
            assert compiled.set_digests(keys, holder, digests) == reference.set_digests(keys, holder, digests), step
        assert len(compiled) == len(reference), step
    for key in reference:  # every held key, its holder and digest
        assert compiled.get(key) is reference[key]
        assert compiled.digest(key) == reference.digest(key)
    for number in range(0, min(space, 3_000)):  # and nothing else is held
        key = ((number % 4) << 64 | number).to_bytes(KEY_HASH_BYTES, "big")
        assert compiled.get(key) is reference.get(key)
    assert len(reference) > 100 if space > 300 else len(reference) > 0


@needs_compiled
def test_a_key_repeated_in_one_take_takes_once_and_release_leaves_other_holders_keys():
    table, first, second = CompiledKeyTable(), Holder(1), Holder(2)
    assert table.take(keys_of([1, 2]), first) is None, "every key took"
    assert table.take(keys_of([2, 3, 3, 4]), second) == b"\x00\x01\x00\x01"
    assert len(table) == 4 and table.get(keys_of([2])) is first and table.get(keys_of([3])) is second
    assert table.release(keys_of([1, 2, 3]), second) == 1, "only the keys the holder holds"
    assert table.get(keys_of([2])) is first and table.get(keys_of([3])) is None and len(table) == 3
    assert table.get(b"short") is None and table.get(keys_of([9]), "none") == "none"


@needs_compiled
def test_a_digest_lives_with_its_key_and_is_forgotten_with_it():
    table, holder = CompiledKeyTable(), Holder(1)
    key, digests = keys_of([7, 8]), array.array("q", [12, -1]).tobytes()
    assert table.set_digests(key, holder, digests) == 0 and table.digest(key[:16]) is None, "no key held"
    table.take(key, holder)
    assert table.digest(key[:16]) is None, "held, no digest kept yet"
    assert table.set_digests(key, Holder(2), digests) == 0, "only the holder keeps digests"
    assert table.set_digests(key, holder, digests) == 1, "-1 is no digest"
    assert table.digest(key[:16]) == 12 and table.digest(key[16:]) is None
    table.release(key, holder)
    table.take(key, Holder(3))
    assert table.digest(key[:16]) is None, "a key held afresh has no digest of the earlier holder's upload"


@needs_compiled
def test_the_table_holds_its_holders_while_it_names_them_and_no_longer():
    table = CompiledKeyTable()
    holder = Holder(1)
    gone = weakref.ref(holder)
    table.take(keys_of(range(1_000)), holder)  # grows past its first size with the holder named 1,000 times
    del holder
    gc.collect()
    assert gone() is not None
    assert table.release(keys_of(range(1_000)), gone()) == 1_000
    gc.collect()
    assert gone() is None and len(table) == 0
    other = Holder(2)
    gone = weakref.ref(other)
    table.take(keys_of([1, 2]), other)
    del other, table  # the table's own end releases what it held
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("table_type", [DictKeyTable, pytest.param(CompiledKeyTable, marks=needs_compiled)])
def test_key_strings_that_are_not_whole_are_refused_naming_the_size(table_type):
    table = table_type()
    with pytest.raises(ValueError, match="33 bytes is not a multiple of 16"):
        table.take(b"k" * 33, Holder(1))
    with pytest.raises(ValueError, match="not a multiple of 16"):
        table.release(b"k" * 15, Holder(1))
    with pytest.raises(TypeError):
        table.take(None, Holder(1))
    assert len(table) == 0
    holder = Holder(1)
    table.take(b"k" * 16, holder)
    with pytest.raises(ValueError, match="12 digests of 8 bytes for 1 keys"):
        table.set_digests(b"k" * 16, holder, b"d" * 12)
    assert table.digest(b"k" * 16) is None


def random_log(rng: random.Random) -> list[bytes]:
    """Listings of overlapping keys from two owners, outcomes of some, times that move the window."""
    records, nonces, time_s = [], [], 1_000
    for index in range(600):
        if nonces and rng.random() < 0.35:
            records.append(encode_outcome(rng.choice(nonces), stored=rng.random() < 0.7))
            continue
        time_s += rng.choice([0, 0, 1, 5])
        nonce = index.to_bytes(16, "big")
        nonces.append(nonce)
        keys = [rng.randrange(400).to_bytes(16, "big") for _ in range(rng.choice([1, 3, 8, 32]))]
        records.append(encode_listing(nonce, rng.choice(["ocms-collector-a", "ocms-collector-b"]), b"incarnat", 0, 0,
                                      time_s, keys))
    return records


@needs_compiled
@pytest.mark.parametrize("seed", range(3))
def test_the_log_computes_the_same_with_either_table(seed, monkeypatch):
    # what every collector computes from the log must not depend on the table its build has
    records = random_log(random.Random(seed))
    results = []
    for table in (CompiledKeyTable, DictKeyTable):
        monkeypatch.setattr(log_module, "KeyTable", table)
        log = ListingLog(window_s=60, max_keys=500, clock=lambda: 0.0)
        applied = [log.apply(offset, value) for offset, value in enumerate(records)]
        holders = {n.to_bytes(16, "big"): getattr(log.holder(n.to_bytes(16, "big")), "nonce", None)
                   for n in range(400)}
        results.append(([(a.nonce, a.status, a.held, sorted(a.valid), len(a.keys)) if a is not None else None
                         for a in applied], holders, log.held, len(log), list(log.frames)))
        assert isinstance(log.holders, table)
    assert results[0] == results[1]
    listings = [a for a in results[0][0] if a is not None]
    assert results[0][3] > 0, "keys are held at the end"
    assert any(held < listed for _, _, held, _, listed in listings), "some listing found some of its keys held"
    assert any(status == "failed" for _, status, _, _, _ in listings), "some listing failed (its keys released)"


def test_a_collector_without_the_compiled_table_says_so_at_start(monkeypatch, caplog):
    from types import SimpleNamespace

    from collector import cli

    monkeypatch.setattr(log_module, "KEY_TABLE_BACKEND", "dict")
    with caplog.at_level("WARNING", logger="ocms.collector"):
        assert cli.warn_if_slow_key_table(SimpleNamespace(idempotency_topic="t-idempotency")) is True
    assert "_keytable.c" in caplog.text and "make install" in caplog.text
    assert cli.warn_if_slow_key_table(SimpleNamespace(idempotency_topic=None)) is False, "per process: no table"
    monkeypatch.setattr(log_module, "KEY_TABLE_BACKEND", "compiled")
    assert cli.warn_if_slow_key_table(SimpleNamespace(idempotency_topic="t-idempotency")) is False
