"""Harness of the C client's tests: building producer/c with make, its test driver, its CLI.

The driver (producer/c/tests/driver.c, built by ``make -C producer/c test-tools``) answers one JSON
command per line; it is the only program that can inject recorded random bytes into the library.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
C_DIR = ROOT / "producer" / "c"
CLI = C_DIR / "ocms-report-c"
VECTORS = ROOT / "tests" / "vectors"
PRIVATIZE_VECTORS = json.loads((VECTORS / "privatize_v1.json").read_text(encoding="utf-8"))


def make(*targets: str) -> None:
    """``make -C producer/c TARGETS`` (serialised between test processes by a lock file); fails the test with make's output."""
    with open(C_DIR / ".make.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["make", "-C", str(C_DIR), *targets], capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"make -C producer/c {' '.join(targets)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")


def line_of(value: str, ascii_only: bool = False) -> str:
    """A value as one JSON line (what ocms-report-c reads)."""
    return json.dumps(value, ensure_ascii=ascii_only)


class Driver:
    """One running ocms-c-driver; ``ask(op=..., ...)`` sends a command and returns its answer."""

    def __init__(self, path: Path, env: dict | None = None):
        self.path = path
        self.process = subprocess.Popen([str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, encoding="utf-8", env=env)

    def ask(self, **command) -> dict:
        self.process.stdin.write(json.dumps(command, ensure_ascii=False) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            self.process.wait(10)
            raise AssertionError(f"{self.path.name} died on {command!r} (exit {self.process.returncode}):\n"
                                 f"{self.process.stderr.read()[-6000:]}")
        return json.loads(answer)

    def close(self) -> tuple[int, str]:
        """Close stdin and wait: (exit status, stderr)."""
        self.process.stdin.close()
        err = self.process.stderr.read()
        code = self.process.wait(60)
        self.process.stdout.close()
        self.process.stderr.close()
        return code, err


def run_cli(args, lines=None, *, binary: Path = CLI, env=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """ocms-report-c with ``lines`` (one JSON line each) on stdin."""
    data = "".join(line + "\n" for line in lines) if lines is not None else ""
    return subprocess.run([str(binary), *map(str, args)], input=data.encode("utf-8"), capture_output=True,
                          timeout=timeout, env=env)


def vector_fixtures(doc: dict, tag: str):
    """The module fixtures ``config`` (the library, the CLI and the driver built; the device configuration of the
    vector file ``doc`` written to a directory named ``tag``) and ``driver`` (one that loaded it, checked to exit
    cleanly): ``config, driver = vector_fixtures(DOC, "c-numeric")``."""
    import pytest

    @pytest.fixture(scope="module")
    def config(tmp_path_factory):
        make("all", "test-tools")
        path = tmp_path_factory.mktemp(tag) / "device-config.json"
        path.write_text(json.dumps(doc["device_config"], ensure_ascii=False), encoding="utf-8")
        return path

    @pytest.fixture(scope="module")
    def driver(config):
        d = Driver(C_DIR / "build" / "ocms-c-driver")
        assert d.ask(op="load", path=str(config))["metrics"] == len(doc["device_config"]["metrics"])
        yield d
        assert d.close()[0] == 0

    return config, driver


def device_config_file(directory: Path) -> Path:
    """The vectors' device configuration as a file."""
    path = directory / "device-config.json"
    path.write_text(json.dumps(PRIVATIZE_VECTORS["device_config"], ensure_ascii=False), encoding="utf-8")
    return path


def sanitizer_env() -> dict:
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=86"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=87"
    return env
