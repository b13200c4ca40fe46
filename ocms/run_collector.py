"""``ocms run``'s collector: ``ocms collector`` as a child process the simulated fleet uploads through.

The real path of a deployment is device -> collector (HTTP) -> Kafka (frames) -> worker, so that is
what ``ocms run`` runs: the collector reads the same registry as the worker, listens on a free port
and produces to the run's source topic; the fleet posts each of its frames as one upload
(``producer.reporter.HttpTransport.upload_each``) and counts a chunk as sent only once every
upload of it got a 202 (acknowledged by Kafka). ``ocms run --direct-kafka`` keeps the old path
(the fleet produces its frames to Kafka itself) for comparison.

Like the worker, the collector runs in its own session (the terminal's signals reach only
``ocms run``, which stops it in order, by process group) and receives SIGTERM if ``ocms run`` dies
(the parent-death signal of ``infra.process.spawn``).
"""

from __future__ import annotations

import os
import sys
import subprocess
from pathlib import Path

from cms_core.errors import OCMSError
from infra.process import ChildProcess, spawn

from .process import ROOT

#: Largest wire record of any parameter set (two 128-bit coefficients and z) plus slack: the body
#: limit ``ocms run`` gives its collector so that one frame of --frame-size reports fits in one upload.
MAX_RECORD_BYTES = 64
FRAME_HEADER_SLACK = 4096
#: The collector's own default upload limits (docs/collector.md).
DEFAULT_MAX_UPLOAD_REPORTS = 1000
DEFAULT_MAX_BODY_BYTES = 1 << 20


def collector_command(registry: str, bootstrap_servers: str, port: int, *extra: str) -> list[str]:
    """argv of a collector child process (``ocms run``, tests): ``subprocess.Popen(collector_command(...))``."""
    return [sys.executable, "-m", "ocms", "collector", "--registry", str(registry), "--bootstrap-servers",
            bootstrap_servers, "--port", str(port), *extra]


class CollectorNotReady(OCMSError, RuntimeError):
    """The collector child exited or did not answer /healthz with 200 in time."""


def upload_limits(frame_size: int) -> list[str]:
    """Collector flags that let one upload hold one of the fleet's frames (the defaults when they do)."""
    reports = max(DEFAULT_MAX_UPLOAD_REPORTS, frame_size)
    body = max(DEFAULT_MAX_BODY_BYTES, frame_size * MAX_RECORD_BYTES + FRAME_HEADER_SLACK)
    return ["--max-upload-reports", str(reports), "--max-body-bytes", str(body)]


class CollectorChild(ChildProcess):
    """``ocms collector`` for one registry, Kafka and topic, on ``port``, logging to ``log``.

    OCMS_* variables of this process are dropped, so the caller's environment cannot change the
    collector's settings (as for ``ocms.process.WorkerChild``). ``stop`` sends SIGTERM: uploads already
    taken are produced and answered first, then it exits."""

    def __init__(self, registry: str, bootstrap_servers: str, topic: str, port: int, *, log: Path,
                 frame_size: int = 1, extra: tuple[str, ...] = (), root: Path = ROOT):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = Path(log)
        self.command = collector_command(
            registry, bootstrap_servers, port, "--source-topic", topic, "--host", "127.0.0.1",
            "--log-level", "warning", "--access-log", "false", *upload_limits(frame_size), *extra)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}
        self.root = Path(root)  # the source tree it runs (another release's: as ocms.process.WorkerChild's root)
        if self.root != ROOT:
            self.env["PYTHONPATH"] = str(self.root)
        self.process: subprocess.Popen | None = None

    def start(self) -> "CollectorChild":
        with open(self.log, "wb") as out:
            self.process = spawn(self.command, cwd=self.root, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT)
        return self

    def wait_ready(self, timeout: float = 60.0) -> dict:
        """Poll /healthz until it answers 200 (listening, and Kafka acknowledges)."""
        return self.poll_health(
            self.url + "/healthz", timeout, ready=lambda doc: True,
            exited=lambda: CollectorNotReady(f"the collector exited with status {self.returncode}; last lines of "
                                             f"{self.log}:\n{tail(self.log)}"),
            late=lambda last: CollectorNotReady(f"the collector did not become ready within {timeout:.0f} s (last: "
                                                f"{last}); last lines of {self.log}:\n{tail(self.log)}"))

def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
