"""Shared fixtures for the static deployment tests.

System tools (promtool) come from scripts/ensure_system_packages.sh, which
`make test` runs with OCMS_REQUIRE_SYSTEM_TOOLS=1: then a missing tool fails
the test. Without that variable a missing tool skips the test.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.promql import ROOT, load_yaml

REQUIRE_ENV = "OCMS_REQUIRE_SYSTEM_TOOLS"


def tools_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def _missing(what: str) -> None:
    hint = "run scripts/ensure_system_packages.sh (or `make test`)"
    if tools_required():
        pytest.fail(f"{what} is missing and {REQUIRE_ENV}={os.environ[REQUIRE_ENV]}: {hint}")
    pytest.skip(f"{what} is missing: {hint}; set {REQUIRE_ENV}=1 to fail instead of skipping")


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        _missing(f"the `{name}` command")
    return path


def require_module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        _missing(f"the Python module {name} (dev extra)")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def yaml_load():
    require_module("ruamel.yaml")
    return load_yaml


@pytest.fixture(scope="session")
def compose(yaml_load) -> dict:
    return yaml_load(ROOT / "docker-compose.yml")


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_tool("promtool")


def run(cmd: list[str], cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
