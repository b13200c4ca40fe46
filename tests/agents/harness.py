"""Real worker processes against a broker, for the integration tests.

A ``WorkerProcess`` is ``ocms worker ...`` started by ``ocms.process.WorkerChild``
(own session, so SIGKILL takes exactly it; it dies with the test run); ``send`` produces wire messages with explicit
keys/timestamps through aiokafka; ``wait_healthy`` and ``wait_for_n`` poll the HTTP API
(tests.support.waiting); tests.support.topics reads a topic back.

The broker is a bootstrap address of the embedded broker, or a broker object (``infra.broker.EmbeddedBroker``,
``infra.mock_cluster.MockCluster``) whose ``profile`` the worker (``--broker``) and the clients here use;
on a broker whose clients cannot create topics (the mock) ``WorkerProcess`` creates the worker's topics first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cms_core import OCMSParams, wire
from cms_core.privatize import simulate_reports
from infra.kafka import make_producer
from infra.process import free_port
from ocms.process import WorkerChild, worker_topics
from tests.brokers import endpoint

from tests.support.waiting import poll_until

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Message:
    value: bytes | None
    key: bytes
    timestamp_ms: int | None = None
    headers: list[tuple[str, bytes]] | None = None  # Kafka headers, e.g. a shuffling collector's ocms-shuffle-n


class WorkerProcess:
    """One ``ocms worker`` of a test (ocms.process.WorkerChild: own session, dies with the test run)."""

    def __init__(self, broker, app_id: str, topic: str, log_dir: Path, *args: str, web_port: int | None = None):
        self.broker = broker
        self.bootstrap, self.profile = endpoint(broker)
        self.app_id = app_id
        self.topic = topic
        self.web_port = web_port or free_port()
        self.args = list(args)
        self.log_dir = log_dir
        self.child: WorkerChild | None = None
        self.starts = 0
        self.token: str | None = None  # a read token (--api-tokens-file) sent with get() and text()

    @property
    def process(self):
        return self.child.process if self.child is not None else None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def log_path(self) -> Path:
        """The log of the worker process started last."""
        return self.child.log

    def start(self) -> "WorkerProcess":
        self.starts += 1
        if self.starts == 1 and not self.profile.clients_create_topics:
            self.broker.create_topics(worker_topics(self.app_id, self.topic))
        self.child = WorkerChild(self.topic, *self.args, bootstrap=self.bootstrap, web_port=self.web_port,
                                 app_id=self.app_id, broker=self.profile.name,
                                 log=self.log_dir / f"{self.app_id}-{self.web_port}-{self.starts}.log")
        self.child.start()
        return self

    def running(self) -> None:
        """Fails the test at once if the worker has exited (a poll would only time out)."""
        assert self.alive(), f"worker exited with {self.process.returncode}; see {self.log_dir}"

    def wait_healthy(self, timeout: float = 60.0) -> dict:
        return self.child.wait_healthy(timeout)

    def alive(self) -> bool:
        return self.child is not None and self.child.alive()

    def get(self, path: str, **params) -> tuple[int, dict]:
        url = self.base_url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(self._request(url), timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def text(self, path: str) -> str:
        with urllib.request.urlopen(self._request(self.base_url + path), timeout=10) as response:
            return response.read().decode()

    def _request(self, url: str) -> urllib.request.Request:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return urllib.request.Request(url, headers=headers)

    def wait_for_n(self, n: int, timeout: float = 90.0, **params) -> dict:
        def estimates() -> tuple[int, dict]:
            self.running()
            return self.get("/estimates", **params)  # OSError while a restarted worker is not listening yet

        return poll_until(estimates, timeout, f"the worker to count n >= {n}",
                          until=lambda got: got[0] == 200 and got[1]["n"] >= n, interval=0.25)[1]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.child is not None:
            self.child.kill(sig)

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()


def report_messages(params: OCMSParams, values: np.ndarray, frame_size: int, seed: int,
                    timestamps_ms: list[int] | None = None) -> list[Message]:
    """Wire messages for ``values``: frames of ``frame_size`` (1 = single reports)."""
    rng = np.random.default_rng(seed)
    batch = simulate_reports(params, values.astype(np.uint64), rng)
    if frame_size == 1:
        values = wire.encode_reports(params, batch)
    else:
        values = [wire.encode_frame(params, batch.slice(s, min(s + frame_size, len(batch))))
                  for s in range(0, len(batch), frame_size)]
    keys = rng.integers(0, 1 << 30, len(values))
    return [Message(v, f"dev-{k}".encode(), None if timestamps_ms is None else timestamps_ms[i])
            for i, (v, k) in enumerate(zip(values, keys))]


async def _send(broker, topic: str, messages: list[Message], rate: float | None) -> None:
    producer = make_producer(*endpoint(broker), linger_ms=5)
    await producer.start()
    try:
        started = time.monotonic()
        futures = []
        for i, m in enumerate(messages):
            futures.append(await producer.send(topic, m.value, key=m.key, timestamp_ms=m.timestamp_ms, headers=m.headers))
            if rate:
                delay = started + (i + 1) / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


@contextlib.contextmanager
def registry_worker(folder: Path, text: str, name: str):
    """An embedded broker and one healthy worker serving the registry ``text`` (written to ``folder``):
    yields (the loaded registry, the broker, the worker); the worker stops on exit."""
    from infra.broker import EmbeddedBroker
    from registry import load_registry

    path = folder / "registry.yaml"
    path.write_text(text, encoding="utf-8")
    registry = load_registry(path)
    with EmbeddedBroker() as broker:
        worker = WorkerProcess(broker.bootstrap_servers, name, name, folder, "--registry", str(path))
        worker.start()
        try:
            worker.wait_healthy()
            yield registry, broker, worker
        finally:
            worker.stop()


def send(broker, topic: str, messages: list[Message], rate: float | None = None) -> None:
    asyncio.run(_send(broker, topic, messages, rate))


@dataclass
class Scrape:
    samples: dict = field(default_factory=dict)  # (name, frozenset(labels)) -> value

    @classmethod
    def parse(cls, text: str) -> "Scrape":
        from prometheus_client.parser import text_string_to_metric_families

        out = cls()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return out

    def get(self, name: str, **labels) -> float:
        return self.samples[(name, frozenset(labels.items()))]

    def series(self, name: str) -> dict:
        return {labels: value for (n, labels), value in self.samples.items() if n == name}


# ---------------------------------------------------------------- the ocms command as a user runs it

def ocms(*argv: str, timeout: float = 60, env: dict | None = None) -> tuple[int, str, str]:
    """`python -m ocms ARGV` as a user runs it, without the caller's OCMS_* variables: (status, stdout, stderr)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}
    done = subprocess.run([sys.executable, "-m", "ocms", *argv], capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})}, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout, done.stderr


def one_line(err: str) -> str:
    """``err`` itself, after checking it is one line and no traceback."""
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err
