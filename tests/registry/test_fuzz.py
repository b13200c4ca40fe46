"""Mangled registries never crash the loader: every outcome is a registry or a RegistryError."""

from __future__ import annotations

import random

from registry import RegistryError, load_registry

from .test_deploy_registry import REGISTRY

REPLACEMENTS = ["", "-1", "0", "1e400", ".nan", "true", "null", "[]", "{}", "[a, a]", "'x'", "2^64", "2^65",
                "{range: [0, 5]}", "{file: nowhere.jsonl}", "[1, 2, 3]", "1h", "0s", "\"\\u0000\"", "&a x", "*a",
                "{bucket: 1h}", "- 1", "!!binary aGk=", "!!python/object:os.system x", "[[[[]]]]", "999999999999999999999"]


def mangle(lines: list[str], rng: random.Random) -> list[str]:
    lines = list(lines)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        action = rng.random()
        if action < 0.25:
            del lines[i]
        elif action < 0.5:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif ":" in lines[i]:
            key, _, _ = lines[i].partition(":")
            lines[i] = f"{key}: {rng.choice(REPLACEMENTS)}"
        else:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    return lines


def test_mangled_registries_fail_cleanly(tmp_path):
    (tmp_path / "tracked").symlink_to(REGISTRY.parent / "tracked")
    original = REGISTRY.read_text(encoding="utf-8").splitlines()
    rng = random.Random(20261124)
    outcomes = {"valid": 0, "error": 0}
    for round_ in range(120):
        path = tmp_path / "registry.yaml"
        path.write_text("\n".join(mangle(original, rng)) + "\n", encoding="utf-8")
        try:
            load_registry(path)
        except RegistryError as exc:
            assert exc.problems and all(str(p).startswith(str(path)) for p in exc.problems), (round_, str(exc))
            outcomes["error"] += 1
        else:
            outcomes["valid"] += 1
    assert outcomes["error"] > 40 and outcomes["valid"] > 5, outcomes  # the mutations exercise both outcomes
