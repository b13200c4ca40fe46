"""Versions and the lock: a published version edited in place is detected and refused."""

from __future__ import annotations

import json

import pytest

from registry import LockFileError, PublishedVersionChangedError, load_registry
from registry.lock import compare, default_lock_path, lock_entries, read_lock, write_lock

from .helpers import APP_LAUNCHES_V1, line_of, write

V1 = "metrics:\n" + APP_LAUNCHES_V1 + """\
  - name: carrier
    description: Airline
    owner: flights
    categories: [AA, B6, DL]
    epsilon: 1
"""


@pytest.fixture
def locked(tmp_path):
    path = write(tmp_path, V1)
    write_lock(load_registry(path), default_lock_path(path))
    return path


def _check(path):
    reg = load_registry(path)
    return compare(reg, read_lock(default_lock_path(path)))


def test_lock_records_every_version(locked):
    doc = json.loads((locked.parent / "registry.lock").read_text())
    assert doc["format"] == 1 and list(doc["versions"]) == ["app_launches@1", "carrier@1"]
    reg = load_registry(locked)
    assert doc["versions"]["carrier@1"]["fingerprint"] == reg.metric("carrier").latest.fingerprint.hex()
    result = _check(locked)
    assert result.changed == [] and result.new == [] and result.locked == ["app_launches@1", "carrier@1"]


@pytest.mark.parametrize("edit, what", [
    (("epsilon: 2", "epsilon: 3"), "fingerprint"),
    (("categories: [home, search, settings]", "categories: [home, search, settings, wallet]"), "fingerprint"),
    (("categories: [home, search, settings]", "categories: [search, home, settings]"), "category names changed"),
    (("categories: [home, search, settings]", "categories: [home, search, preferences]"), "category names changed"),
    (("        epsilon: 2", "        epsilon: 2\n        hash_range: 8"), "fingerprint"),
])
def test_an_in_place_edit_is_refused(locked, edit, what):
    text = V1.replace(*edit)
    locked.write_text(text)
    result = _check(locked)
    assert [p.metric for p in result.changed] == ["app_launches"]
    problem = result.changed[0]
    assert problem.version == 1 and problem.line == line_of(text, "- version: 1")
    assert what in problem.message
    assert "published version edited in place" in problem.message and "add version 2" in problem.message
    with pytest.raises(PublishedVersionChangedError) as info:
        result.raise_for_changes()
    assert str(info.value).startswith(f"{locked}:{problem.line}: metric 'app_launches': version 1: published version")


def test_a_metric_level_default_edit_is_caught_too(locked):
    locked.write_text(V1.replace("    epsilon: 1\n", "    epsilon: 1.5\n"))
    result = _check(locked)
    assert [(p.metric, p.version) for p in result.changed] == [("carrier", 1)]
    assert "epsilon 1.0 -> 1.5" in result.changed[0].message


def test_adding_a_version_is_the_way(locked):
    text = V1.replace("        epsilon: 2\n", "        epsilon: 2\n      - version: 2\n        epsilon: 1\n"
                                              "        add_categories: [wallet]\n")
    locked.write_text(text)
    result = _check(locked)
    assert result.changed == [] and result.new == ["app_launches@2"]
    reg = load_registry(locked)
    write_lock(reg, default_lock_path(locked))
    assert _check(locked).new == []
    fingerprints = {e["fingerprint"] for e in lock_entries(reg).values()}
    assert len(fingerprints) == 3


def test_removing_a_published_version_is_refused(locked):
    locked.write_text(V1.split("  - name: carrier")[0])
    result = _check(locked)
    assert len(result.changed) == 1
    assert "published version carrier@1 is in the lock but missing" in result.changed[0].message
    assert "retired: true" in result.changed[0].message


def test_a_changed_mechanism_choice_says_how_to_pin_it(locked):
    """If the automatic choice ever resolves differently (say a newer cms_core), the lock catches it."""
    assert load_registry(locked).metric("app_launches").latest.mechanism == "direct"  # d = 3, eps 2
    locked.write_text(V1.replace("        epsilon: 2\n", "        epsilon: 2\n        mechanism: ocms\n"))
    (problem,) = _check(locked).changed
    assert "mechanism direct -> ocms" in problem.message
    assert "pin 'mechanism: direct' on the version to keep it" in problem.message


def test_retiring_keeps_the_fingerprint(locked):
    locked.write_text(V1.replace("        epsilon: 2\n", "        epsilon: 2\n        retired: true\n"))
    result = _check(locked)
    assert result.changed == []


def test_malformed_lock(tmp_path):
    path = tmp_path / "registry.lock"
    path.write_text("{not json")
    with pytest.raises(LockFileError, match="not valid JSON"):
        read_lock(path)
    path.write_text('{"format": 2, "versions": {}}')
    with pytest.raises(LockFileError, match="not a registry lock"):
        read_lock(path)
    path.write_text('{"format": 1, "versions": {"a@1": {"fingerprint": 5}}}')
    with pytest.raises(LockFileError, match="'a@1' is malformed"):
        read_lock(path)
