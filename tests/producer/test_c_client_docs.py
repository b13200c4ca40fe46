"""docs/device.md, "The C client": the quick start runs as written and the C example compiles and reports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cms_core import wire
from registry import load_registry

from .c_client import ROOT, make

pytestmark = pytest.mark.integration

DOC = (ROOT / "docs" / "device.md").read_text(encoding="utf-8")


def _block(marker: str, language: str) -> str:
    """The first ``language`` block after the HTML comment holding ``marker``."""
    start = DOC.index(marker)
    match = re.compile(rf"```{language}\n(.*?)```", re.S).search(DOC, start)
    return match.group(1)


@pytest.fixture
def workdir(tmp_path):
    """A directory that looks like the repository root (producer/ and deploy/ linked), `ocms` on PATH."""
    for name in ("producer", "deploy"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return tmp_path, env


def test_quick_start_runs_as_written(workdir):
    directory, env = workdir
    outputs = []
    for command in _block("covered-by=tests/producer/test_c_client_docs.py::test_quick_start_runs_as_written", "sh").strip().splitlines():
        done = subprocess.run(["bash", "-c", command], cwd=directory, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, (command, done.stderr[-3000:])
        outputs.append((done.stdout, done.stderr))
    assert outputs[3] == ("", "ocms-report-c: wrote 3 reports of carrier@1 to carrier.capture\n")
    estimate = json.loads(outputs[4][0])
    assert estimate["metric"] == "carrier" and estimate["n"] == 3 and estimate["rejected"] == {}


def test_the_c_example_compiles_and_sends_a_valid_report(workdir):
    directory, env = workdir
    make("all")
    source = _block("<!-- c-example:", "c")
    (directory / "app.c").write_text(source)
    build = re.search(r"Build with `([^`]*)`", DOC).group(1)
    done = subprocess.run(["bash", "-c", build + " -Wall -Wextra -Werror"], cwd=directory, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    message = subprocess.run([str(directory / "a.out")], capture_output=True, check=True).stdout
    carrier = load_registry(ROOT / "deploy" / "registry.yaml").metric("carrier").latest
    params, batch = wire.decode_message(message, {carrier.params.fingerprint: carrier.params})
    assert len(batch) == 1 and wire.peek_header(message)[0] == wire.KIND_REPORT
    # the numbers in the example are the device config's
    config = next(m for m in json.loads(subprocess.run([sys.executable, "-m", "ocms", "registry", "device-config",
                                                         str(ROOT / "deploy" / "registry.yaml")], capture_output=True,
                                                        text=True, check=True, cwd=ROOT).stdout)["metrics"]
                  if m["name"] == "carrier")
    assert f".keep_threshold = {config['keep_threshold']}u" in source
    assert f".max_value = {len(config['categories']) - 1} " in source
    index = int(re.search(r'ocms_report_integer\(&metric, (\d+) /\* "(\w+)"', source).group(1))
    assert config["categories"][index] == re.search(r'/\* "(\w+)"', source).group(1)
    # the same program against the shared object
    done = subprocess.run(["bash", "-c", "cc -std=c99 -Iproducer/c/include app.c -Lproducer/c -locms_client -o shared"],
                          cwd=directory, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    message = subprocess.run([str(directory / "shared")], capture_output=True, check=True,
                             env=dict(os.environ, LD_LIBRARY_PATH=str(ROOT / "producer" / "c"))).stdout
    assert len(wire.decode_message(message, {carrier.params.fingerprint: carrier.params})[1]) == 1
