"""Child processes that never outlive their parent, and ``ocms worker`` as one.

``ocms run``, the integration tests and the benchmarks start the embedded
broker and workers as child processes. Each child runs in its own session, so
a terminal's Ctrl-C, SIGHUP or SIGTERM reaches only the parent, which stops
its children in order (fleet, worker, broker) and by process group. A parent
that cannot stop them (SIGKILL, a crash) must not leave them running with
their ports: two independent guards end them.

* On Linux the child asks the kernel for a parent-death signal (``producer.broker.spawn``)
  (``prctl(PR_SET_PDEATHSIG)``) between fork and exec; it works for any
  program (the Tansu broker binary too). The kernel sends it when the *thread*
  that started the child exits, so it is only set when the child is started
  from the main thread.
* ``ocms worker --parent-pid PID`` also watches its parent from a thread
  (portable: the parent pid changes when the parent dies) and stops itself
  with SIGTERM, then exits hard if the clean stop hangs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Mapping

from cms_core.errors import OCMSError
from producer.broker import spawn, stop_process_group

ROOT = Path(__file__).resolve().parents[1]
#: How often a child checks that its parent is alive, and how long a clean stop may take after it died.
PARENT_POLL_S = 0.5
PARENT_GONE_GRACE_S = 15.0


def watch_parent(parent_pid: int, poll_s: float = PARENT_POLL_S, grace_s: float = PARENT_GONE_GRACE_S) -> threading.Thread:
    """Stop this process (SIGTERM, then a hard exit after ``grace_s``) once ``parent_pid`` is no longer its parent.

    Also when it already is not (the parent died before the child got here).
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        print(f"parent process {parent_pid} is gone: stopping", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(1)

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


def worker_topics(app_id: str, topic: str, partitions: int = 4) -> dict[str, int]:
    """The topics ``ocms worker --app-id APP_ID --source-topic TOPIC --dead-letter-topic TOPIC-dlq`` needs
    (what :class:`WorkerChild` starts): what a broker whose clients cannot create topics (the mock) must
    hold before the worker starts."""
    return {topic: partitions, topic + "-dlq": partitions, f"{app_id}-ocms-counts-changelog": partitions}


class ChildProcess:
    """A child started with ``producer.broker.spawn`` (own session, dies with this process) that answers
    ``/healthz``: its pid, whether it runs, the wait for its health, and the stop by process group."""

    process: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def poll_health(self, url: str, timeout: float, *, ready: Callable[[dict], bool], exited: Callable[[], Exception],
                    late: Callable[[object], Exception]) -> dict:
        """GET ``url`` every 0.2 s until it answers 200 with a document ``ready`` accepts, and return that
        document; raise ``exited()`` once the child is gone, ``late(the last answer or error)`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if not self.alive():
                raise exited()
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    last = json.loads(response.read())
                if ready(last):
                    return last
            except urllib.error.HTTPError as exc:  # 503 while the child is not ready yet
                last = f"HTTP {exc.code}"
            except OSError as exc:  # not listening yet
                last = exc
            time.sleep(0.2)
        raise late(last)

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is not None:
            stop_process_group(self.process, timeout)


class WorkerChild(ChildProcess):
    """``ocms worker`` reading ``topic`` as a child process: own session, dies with this process, stopped by group.

    This is the one description of a worker child, shared by ``ocms run``, the tests and the
    benchmarks: it reads ``topic`` from ``bootstrap`` (``broker``: ``embedded`` for the Tansu
    broker, ``kafka`` for Apache Kafka) in consumer group ``app_id`` (default: the topic), sends
    dead letters to ``TOPIC-dlq`` and answers HTTP on ``web_port``. ``flags`` describe the metric
    (``--registry PATH``, or the single-metric flags) and any other worker setting. ``log``
    receives stdout and stderr (default: inherited). OCMS_* variables of this process are dropped
    unless ``env`` is given, so a caller's environment cannot change the worker's settings.
    """

    def __init__(self, topic: str, *flags: str, bootstrap: str, web_port: int, app_id: str | None = None,
                 broker: str = "embedded", log_level: str = "warning", log: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None):
        self.topic = topic
        self.web_port = web_port
        self.args = ["--bootstrap-servers", bootstrap, "--broker", broker, "--app-id", app_id or topic,
                     "--source-topic", topic, "--dead-letter-topic", f"{topic}-dlq", "--web-port", str(web_port),
                     "--log-level", log_level, *flags]
        self.log = Path(log) if log is not None else None
        self.env = dict(env) if env is not None else {k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "agents.cli", "worker", "--parent-pid", str(os.getpid()), *self.args]

    def start(self) -> "WorkerChild":
        out = open(self.log, "wb") if self.log is not None else None
        try:
            self.process = spawn(self.command, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
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
