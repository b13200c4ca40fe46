"""``ocms worker`` as a child process: what ``ocms run``, the integration tests and the benchmarks start.

The child runs in its own session and dies with its parent (:mod:`infra.process`: the parent-death
signal of ``spawn``, and ``ocms worker --parent-pid PID``'s own watch of its parent).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from cms_core.errors import OCMSError
from infra.process import ChildProcess, spawn

ROOT = Path(__file__).resolve().parents[1]


def worker_topics(app_id: str, topic: str, partitions: int = 4) -> dict[str, int]:
    """The topics ``ocms worker --app-id APP_ID --source-topic TOPIC --dead-letter-topic TOPIC-dlq`` needs
    (what :class:`WorkerChild` starts): what a broker whose clients cannot create topics (the mock) must
    hold before the worker starts."""
    return {topic: partitions, topic + "-dlq": partitions, f"{app_id}-ocms-counts-changelog": partitions}


class WorkerChild(ChildProcess):
    """``ocms worker`` reading ``topic`` as a child process: own session, dies with this process, stopped by group.

    This is the one description of a worker child, shared by ``ocms run``, the tests and the
    benchmarks: it reads ``topic`` from ``bootstrap`` (``broker``: ``embedded`` for the Tansu
    broker, ``kafka`` for Apache Kafka) in consumer group ``app_id`` (default: the topic), sends
    dead letters to ``TOPIC-dlq`` and answers HTTP on ``web_port``. ``flags`` describe the metric
    (``--registry PATH``, or the single-metric flags) and any other worker setting. ``log``
    receives stdout and stderr (default: inherited). OCMS_* variables of this process are dropped
    unless ``env`` is given, so a caller's environment cannot change the worker's settings. ``root`` is the
    source tree it runs (another release's checkout: tests/upgrade; it runs from there, first on sys.path).
    """

    def __init__(self, topic: str, *flags: str, bootstrap: str, web_port: int, app_id: str | None = None,
                 broker: str = "embedded", log_level: str = "warning", log: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None, root: Path = ROOT):
        self.topic = topic
        self.web_port = web_port
        self.args = ["--bootstrap-servers", bootstrap, "--broker", broker, "--app-id", app_id or topic,
                     "--source-topic", topic, "--dead-letter-topic", f"{topic}-dlq", "--web-port", str(web_port),
                     "--log-level", log_level, *flags]
        self.log = Path(log) if log is not None else None
        self.env = dict(env) if env is not None else {k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}
        self.root = Path(root)
        if self.root != ROOT:
            self.env["PYTHONPATH"] = str(self.root)
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "ocms", "worker", "--parent-pid", str(os.getpid()), *self.args]

    def start(self) -> "WorkerChild":
        out = open(self.log, "wb") if self.log is not None else None
        try:
            self.process = spawn(self.command, cwd=self.root, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT if out is not None else None)
        finally:
            if out is not None:
                out.close()
        return self

    def wait_healthy(self, timeout: float = 90.0) -> dict:
        """Poll /healthz until it answers ok; raises if the worker exits or the deadline passes."""
        return self.poll_health(
            self.base_url + "/healthz", timeout, ready=lambda doc: doc.get("status") == "ok",
            exited=lambda: WorkerExited(self.returncode, self.log),
            late=lambda last: WorkerNotHealthy(f"the worker did not become healthy within {timeout:.0f} s (last: {last})"))

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
        if self.alive():
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout)

class WorkerNotHealthy(OCMSError, RuntimeError):
    """A child worker did not answer /healthz with ok in time."""


class WorkerExited(WorkerNotHealthy):
    """A child worker exited while we waited for it."""

    def __init__(self, status: int | None, log: Path | None):
        where = f"; see {log}" if log is not None else ""
        super().__init__(f"the worker exited with status {status}{where}")
        self.status = status
