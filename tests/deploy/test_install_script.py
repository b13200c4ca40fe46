"""scripts/ensure_system_packages.sh, run against stub commands (no apt, no network)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.deploy.conftest import run
from tests.deploy.promql import ROOT

pytestmark = pytest.mark.integration  # runs scripts/ensure_system_packages.sh

SCRIPT = ROOT / "scripts" / "ensure_system_packages.sh"
# Real commands the script needs besides the stubs.
PASSTHROUGH = ("bash", "env", "head", "grep", "cat", "chmod")


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


#: Every tool the script checks for on PATH.
ALL_TOOLS = ("promtool", "prometheus", "kcat", "chromium", "chromedriver", "wrk", "node", "npm")


def _sandbox(tmp_path: Path, tools: tuple[str, ...], uid: int = 0, sudo: bool = True,
             rdkafka: bool = True, headers: bool = True) -> tuple[Path, dict]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for name in PASSTHROUGH:
        os.symlink(shutil.which(name), bin_dir / name)
    _stub(bin_dir, "id", f'[ "$1" = "-u" ] && echo {uid} || echo "uid={uid}"')
    for tool in tools:
        _stub(bin_dir, tool, f'echo "{tool}, version 9.9"')
    # The shared library is found through ldconfig's cache: present while the marker file exists.
    marker = bin_dir / ".librdkafka1"
    if rdkafka:
        marker.touch()
    _stub(bin_dir, "ldconfig", f'echo "libc.so.6 (libc6,x86-64) => /lib/libc.so.6"; '
                               f'[ -e {marker} ] && echo "	librdkafka.so.1 (libc6,x86-64) => /lib/librdkafka.so.1"; true')
    # The C compiler finds a header while its marker exists (libcjson-dev, libcurl4-openssl-dev).
    cjson, curl = bin_dir / ".cjson", bin_dir / ".curl"
    if headers:
        cjson.touch()
        curl.touch()
    _stub(bin_dir, "cc", f'input=$(cat); case "$input" in *cjson/cJSON.h*) [ -e {cjson} ];; '
                         f'*curl/curl.h*) [ -e {curl} ];; *) false;; esac')
    # apt-get install creates the tools it was asked for.
    _stub(bin_dir, "apt-get", f"""echo "apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> {log}
if [ "$1" = install ]; then
  for pkg in "$@"; do
    case "$pkg" in
      prometheus) printf '#!/bin/bash\\necho promtool 2\\n' > {bin_dir}/promtool; printf '#!/bin/bash\\n' > {bin_dir}/prometheus; chmod +x {bin_dir}/promtool {bin_dir}/prometheus;;
      kcat) printf '#!/bin/bash\\necho Version 1.7\\n' > {bin_dir}/kcat; chmod +x {bin_dir}/kcat;;
      chromium) printf '#!/bin/bash\\n' > {bin_dir}/chromium; chmod +x {bin_dir}/chromium;;
      wrk) printf '#!/bin/bash\\n' > {bin_dir}/wrk; chmod +x {bin_dir}/wrk;;
      chromium-driver) printf '#!/bin/bash\\n' > {bin_dir}/chromedriver; chmod +x {bin_dir}/chromedriver;;
      librdkafka1) : > {marker};;
      libcjson-dev) : > {cjson};;
      libcurl4-openssl-dev) : > {curl};;
      nodejs) printf '#!/bin/bash\\n' > {bin_dir}/node; chmod +x {bin_dir}/node;;
      npm) printf '#!/bin/bash\\n' > {bin_dir}/npm; chmod +x {bin_dir}/npm;;
    esac
  done
fi""")
    if sudo:
        _stub(bin_dir, "sudo", f'echo "sudo $*" >> {log}; [ "$1" = "-n" ] && shift; exec "$@"')
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "LANG": "C"}
    return log, env


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_script_syntax():
    assert os.access(SCRIPT, os.X_OK), "make test runs it directly: keep it executable"
    result = run(["bash", "-n", str(SCRIPT)])
    assert result.returncode == 0, result.stderr


def test_nothing_to_do_when_every_tool_is_present(tmp_path):
    log, env = _sandbox(tmp_path, ALL_TOOLS)
    result = run_script(env)
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stdout
    assert _calls(log) == []


def test_installs_only_what_is_missing_as_root(tmp_path):
    log, env = _sandbox(tmp_path, ("promtool", "prometheus", "chromium", "chromedriver", "wrk", "node", "npm"))
    result = run_script(env)
    assert result.returncode == 0, result.stdout + result.stderr
    calls = _calls(log)
    assert calls[0] == "apt-get update -qq DEBIAN_FRONTEND=noninteractive"
    assert calls[1] == "apt-get install -y -qq --no-install-recommends kcat DEBIAN_FRONTEND=noninteractive"
    assert len(calls) == 2, "root needs no sudo"
    # Idempotent: the second run installs nothing.
    assert "nothing to do" in run_script(env).stdout
    assert len(_calls(log)) == 2


def test_promtool_without_prometheus_installs_the_package(tmp_path):
    log, env = _sandbox(tmp_path, ("promtool", "kcat", "chromium", "chromedriver", "wrk", "node", "npm"))
    assert run_script(env).returncode == 0
    assert "install -y -qq --no-install-recommends prometheus " in _calls(log)[1]


def test_a_missing_librdkafka_is_installed_and_checked_afterwards(tmp_path):
    log, env = _sandbox(tmp_path, ALL_TOOLS, rdkafka=False)
    result = run_script(env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "install -y -qq --no-install-recommends librdkafka1 " in _calls(log)[1]
    assert "nothing to do" in run_script(env).stdout


def test_missing_c_headers_and_node_are_installed(tmp_path):
    log, env = _sandbox(tmp_path, ALL_TOOLS[:-2], headers=False)
    result = run_script(env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--no-install-recommends libcjson-dev libcurl4-openssl-dev nodejs npm " in _calls(log)[1]
    assert "nothing to do" in run_script(env).stdout


def test_uses_sudo_when_not_root(tmp_path):
    log, env = _sandbox(tmp_path, (), uid=1000)
    result = run_script(env)
    assert result.returncode == 0, result.stdout + result.stderr
    calls = _calls(log)
    assert calls[0].startswith("sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update")
    assert any("apt-get install -y -qq --no-install-recommends prometheus kcat chromium chromium-driver wrk nodejs npm"
               in c for c in calls)


def test_browser_without_its_driver_installs_both(tmp_path):
    log, env = _sandbox(tmp_path, ("promtool", "prometheus", "kcat", "chromium", "wrk", "node", "npm"))
    assert run_script(env).returncode == 0
    assert "install -y -qq --no-install-recommends chromium chromium-driver " in _calls(log)[1]


def test_fails_clearly_without_root_or_sudo(tmp_path):
    log, env = _sandbox(tmp_path, (), uid=1000, sudo=False)
    result = run_script(env)
    assert result.returncode != 0
    assert "not root and no sudo" in result.stderr
    assert _calls(log) == []


def run_script(env: dict):
    import subprocess

    return subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
