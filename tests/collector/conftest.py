"""Fixtures every collector test module shares: the test registry (harness.REGISTRY_YAML) and its "dest" metric."""

from __future__ import annotations

import pytest

from registry import load_registry

from .harness import write_registry


@pytest.fixture(scope="module")
def registry_path(tmp_path_factory):
    return write_registry(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="module")
def reg(registry_path):
    return load_registry(registry_path)


@pytest.fixture(scope="module")
def dest(reg):
    """Version 1 of the integer metric "dest"."""
    return reg.metric("dest").version(1)
