"""Small helpers for registry tests: write a registry, load it, find a line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from registry import RegistryError, load_registry


def write(tmp_path: Path, text: str, name: str = "registry.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(tmp_path: Path, text: str):
    return load_registry(write(tmp_path, text))


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """1-based line of the ``occurrence``-th line containing ``needle``."""
    found = 0
    for number, line in enumerate(textwrap.dedent(text).splitlines(), 1):
        if needle in line:
            found += 1
            if found == occurrence:
                return number
    raise AssertionError(f"{needle!r} not in the text")


def problems(tmp_path: Path, text: str, error=RegistryError) -> list[str]:
    with pytest.raises(error) as info:
        load(tmp_path, text)
    return [str(p) for p in info.value.problems]


def single_problem(tmp_path: Path, text: str, error=RegistryError):
    with pytest.raises(error) as info:
        load(tmp_path, text)
    assert len(info.value.problems) == 1, str(info.value)
    return info.value.problems[0]


def run(capsys, *argv):
    """``ocms ARGV`` in this process through the real entry point: (exit status, stdout, stderr)."""
    from agents.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err
