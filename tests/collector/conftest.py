"""Fixtures every collector test module shares: the test registry (harness.REGISTRY_YAML) and its "dest" metric;
for modules that define TOPIC, a broker and the real worker of "dest" on that topic (a module may define its own)."""

from __future__ import annotations

import pytest

from infra.broker import EmbeddedBroker
from registry import load_registry

from .harness import serving_worker, write_registry


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


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(scope="module")
def worker(broker, registry_path, request, tmp_path_factory):
    """``ocms worker --registry`` on the test registry reading the module's TOPIC, serving its API
    (its name-less /estimates: "dest" version 1)."""
    with serving_worker(registry_path, broker, request.module.TOPIC,
                        tmp_path_factory.mktemp("worker")) as w:
        yield w
