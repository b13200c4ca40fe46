"""One project version (issue 39): cms_core/version.py is the source, and everything that states a version agrees.

The package (pyproject.toml reads cms_core.version.__version__), ``ocms --version``, the worker's and the
collector's /healthz and ``ocms_build_info`` gauge, the JS client (package.json, package-lock.json, its exported
``VERSION``) and the C library (ocms_client.h's macros; ``ocms_version()`` and the soname:
tests/producer/test_c_version.py).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from prometheus_client import generate_latest

# At import (collection), as tests/agents/test_rebalance.py does: importing the worker runs `file` once.
from agents.app import OCMSWorker
from ocms.cli import main
from agents.settings import WorkerSettings
from cms_core import wire
from cms_core.version import WIRE_FORMAT, __version__, build_info_labels
from collector.app import CollectorMetrics
from registry.flags import metrics_from_flags

ROOT = Path(__file__).resolve().parents[1]
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
BUILD_INFO_LINE = f'ocms_build_info{{version="{__version__}",wire_format="{wire.VERSION}"}} 1.0'


def c_header_versions() -> dict[str, str]:
    header = (ROOT / "producer" / "c" / "include" / "ocms_client.h").read_text()
    found = dict(re.findall(r"^#define (OCMS_(?:VERSION_\w+|ABI_VERSION)) (\S+)$", header, re.M))
    return {name: value.strip('"') for name, value in found.items()}


def test_the_version_is_semantic_and_the_wire_format_is_the_codecs():
    assert SEMVER.match(__version__), __version__
    assert WIRE_FORMAT == wire.VERSION
    assert build_info_labels() == {"version": __version__, "wire_format": str(wire.VERSION)}


def test_the_package_reads_its_version_from_cms_core():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cms_core.version.__version__"}


def test_the_js_client_states_the_same_version():
    js = ROOT / "producer" / "js"
    package = json.loads((js / "package.json").read_text())
    lock = json.loads((js / "package-lock.json").read_text())
    assert package["version"] == lock["version"] == lock["packages"][""]["version"] == __version__
    constant = re.search(r'^export const VERSION = "([^"]+)";$', (js / "src" / "version.ts").read_text(), re.M)
    assert constant and constant.group(1) == __version__
    # both entry points export it: the full one (index.ts) re-exports the core's (core.ts, "ocms-client/core")
    assert 'export { VERSION } from "./version.js";' in (js / "src" / "core.ts").read_text()
    assert 'export * from "./core.js";' in (js / "src" / "index.ts").read_text()


def test_the_c_header_states_the_same_version():
    found = c_header_versions()
    assert found["OCMS_VERSION_STRING"] == __version__
    assert ".".join(found[f"OCMS_VERSION_{part}"] for part in ("MAJOR", "MINOR", "PATCH")) == __version__
    assert found["OCMS_ABI_VERSION"].isdigit()


def test_ocms_version(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"ocms {__version__}\n"


def test_the_worker_states_its_release_in_healthz_and_metrics():
    settings = WorkerSettings.build(bootstrap_servers="k:9092", broker="embedded", app_id="unit-versions")
    worker = OCMSWorker(settings, metrics_from_flags(epsilon=2, dictionary_size=1000, tracked_range="0:10"))
    assert worker.health()["version"] == __version__
    assert BUILD_INFO_LINE in generate_latest(worker.metrics.registry).decode().splitlines()


def test_the_collector_states_its_release_in_metrics():
    assert BUILD_INFO_LINE in generate_latest(CollectorMetrics().registry).decode().splitlines()
