"""Real collector (and worker) processes against a broker, for the collector tests.

``CollectorProcess`` is ``python -m ocms collector ...`` in its own session
(SIGKILL takes exactly it). ``serving_worker`` is ``ocms worker --registry`` on the
same registry (tests.agents.harness.WorkerProcess), because the collector only accepts
registry-bound fingerprints. The broker is a bootstrap address of the embedded broker or a
broker object with a profile (tests/brokers.py), passed on as ``--broker``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from cms_core import wire
from cms_core.privatize import simulate_reports
from infra.process import free_port
from ocms.run_collector import collector_command
from tests.agents.harness import WorkerProcess
from tests.brokers import MOCK_SESSION_ARGS, collector_topics, endpoint
from tests.support.waiting import poll_until

ROOT = Path(__file__).resolve().parents[2]
WIRE = "application/vnd.ocms.wire-v1"

#: A small registry: metric "dest" (integers [0, 1000), F(1009): 2-byte coefficients, so a0 >= p is
#: expressible), metric "screen" with a retired version 1 and a live version 2.
REGISTRY_YAML = """\
metrics:
  - name: dest
    description: test metric
    owner: tests@example.com
    integers: 1000
    epsilon: 2
    bucket: 1m
    retention: 24h
  - name: screen
    description: test metric with a retired version
    owner: tests@example.com
    categories: [home, search, feed, settings]
    bucket: 5m
    versions:
      - version: 1
        epsilon: 2
        retired: true
      - version: 2
        epsilon: 1
"""


def write_registry(directory: Path) -> Path:
    path = directory / "registry.yaml"
    path.write_text(REGISTRY_YAML)
    return path


class CollectorProcess:
    def __init__(self, registry: Path, broker, topic: str, log_dir: Path, *args: str, port: int | None = None,
                 open_files: int | None = None):
        self.registry = registry
        self.bootstrap, self.profile = endpoint(broker)
        if not self.profile.clients_create_topics:  # the mock: create what is not there yet
            broker.create_topics({t: n for t, n in collector_topics(topic).items() if t not in broker.topics})
        self.topic = topic
        self.log_dir = log_dir
        self.port = port or free_port()
        self.args = list(args)
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.open_files = open_files  # RLIMIT_NOFILE of the child (soft and hard), None = inherited

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"collector-{self.port}-{self.starts}.log"

    def start(self) -> "CollectorProcess":
        self.starts += 1
        log = open(self.log_path, "wb")
        command = collector_command(self.registry, self.bootstrap, self.port, "--source-topic", self.topic,
                                    "--broker", self.profile.name, *self.args)
        # The caller's OCMS_* settings stay out, except the event loop: OCMS_COLLECTOR_EVENT_LOOP=asyncio
        # runs every collector test on asyncio's loop instead of the default uvloop.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OCMS_") or k == "OCMS_COLLECTOR_EVENT_LOOP"}
        limit = self.open_files

        def limit_open_files() -> None:  # in the child, before exec
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        self.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True, env=env,
                                        preexec_fn=limit_open_files if limit else None)
        log.close()
        return self

    def __enter__(self) -> "CollectorProcess":
        """``with CollectorProcess(...) as c``: started and healthy; stopped on the way out."""
        self.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_healthy(self, timeout: float = 30.0) -> dict:
        def health() -> tuple[int, dict]:
            assert self.alive(), f"collector exited with {self.process.returncode}: {self.log_path.read_text()[-2000:]}"
            return request(self.url + "/healthz", method="GET")[:2]

        return poll_until(health, timeout, "the collector to answer /healthz with 200", until=lambda got: got[0] == 200)[1]

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            os.killpg(self.process.pid, sig)
            self.process.wait(30)

    def stop(self) -> int | None:
        if self.alive():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode if self.process else None

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


def request(url: str, body: bytes | None = None, *, method: str = "POST", headers: dict | None = None,
            content_type: str | None = WIRE, timeout: float = 30) -> tuple[int, dict, dict]:
    """(status, JSON document, headers) of one HTTP request (no exception for 4xx/5xx)."""
    headers = dict(headers or {})
    if body is not None and content_type is not None:
        headers.setdefault("Content-Type", content_type)
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            raw, status, got = response.read(), response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        raw, status, got = exc.read(), exc.code, dict(exc.headers)
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        doc = {"raw": raw.decode(errors="replace")}
    return status, doc, got


def reports(version, n: int, seed: int):
    """A ReportBatch of n privatized reports of values 0..n-1 (mod the dictionary)."""
    values = (np.arange(n, dtype=np.uint64) % np.uint64(min(version.params.dictionary_size, 1000)))
    return simulate_reports(version.params, values, np.random.default_rng(seed))


def single_messages(version, n: int, seed: int) -> list[bytes]:
    return wire.encode_reports(version.params, reports(version, n, seed))


def records_of(message: bytes, version) -> list[bytes]:
    """The raw records of one wire message (to compare what went in with what is in Kafka)."""
    size = wire.record_size(version.params)
    body = message[wire.HEADER_SIZE:]
    return [body[i:i + size] for i in range(0, len(body), size)]


@contextlib.contextmanager
def serving_worker(registry: Path, broker, topic: str, log_dir: Path, *extra: str, token: str | None = None):
    """``ocms worker --registry REGISTRY`` reading ``topic``, serving its API (n = 0 answered); stopped on
    the way out. It counts every version of the registry's metrics; its name-less /estimates answers
    the first metric's ("dest" version 1). On the mock its group session is MOCK_SESSION_SECONDS
    (tests/brokers.py: the fault tests stop and restart it)."""
    session = MOCK_SESSION_ARGS if endpoint(broker)[1].name == "mock" else ()
    worker = WorkerProcess(broker, f"{topic}-worker", topic, log_dir, "--registry", str(registry),
                           "--batch-max-seconds", "0.1", *session, *extra)
    worker.token = token  # a read token, when --api-tokens-file is among extra
    worker.start()
    try:
        worker.wait_for_n(0, timeout=90)
        yield worker
    finally:
        worker.stop()


def collector_metric(collector, name: str) -> float:
    """The value of an unlabelled series of the collector's /metrics (NaN when absent)."""
    text = urllib.request.urlopen(collector.url + "/metrics", timeout=10).read().decode()
    return next((float(line.split()[1]) for line in text.splitlines() if line.startswith(name + " ")), float("nan"))


# ------------------------------------------------------------------ raw HTTP (hostile requests)
def raw_exchange(port: int, data: bytes, timeout: float = 10.0) -> tuple[int | None, dict, bytes]:
    """(status, JSON body or {}, raw answer) of one raw request; status None when no answer came."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            sock.sendall(data)
        except OSError:
            pass  # the server may close before all of a hostile request is written
        answer = read_answer(sock)
    finally:
        sock.close()
    return parse_answer(answer)


def read_answer(sock: socket.socket) -> bytes:
    """One final HTTP answer (a 1xx interim answer is skipped) from a raw socket."""
    answer = _read_one(sock)
    while answer.startswith(b"HTTP/1.1 1") and answer.endswith(b"\r\n\r\n"):
        answer = _read_one(sock)
    return answer


def _read_one(sock: socket.socket) -> bytes:
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body
    except (ConnectionResetError, socket.timeout):
        return data


def parse_answer(answer: bytes) -> tuple[int | None, dict, bytes]:
    """(status, JSON body, raw). A body cut short (the server closed a connection whose request it did not
    read in full: the kernel resets it and may drop the answer's tail) is judged by its Content-Type."""
    if not answer.startswith(b"HTTP/1.") or b"\r\n\r\n" not in answer:
        return None, {}, answer  # no answer, or one cut inside its header
    status = int(answer.split(b" ", 2)[1])
    head, _, body = answer.partition(b"\r\n\r\n")
    fields = {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip()
              for line in head.split(b"\r\n")[1:] if b":" in line}
    length = int(fields.get(b"content-length", b"0") or 0)
    if len(body) < length:
        json_type = fields.get(b"content-type", b"").startswith(b"application/json")
        return status, ({"reason": "(answer cut short)"} if json_type else {"not json": "cut short"}), answer
    body = body[:length]  # a pipelined second answer may follow (a CONNECT's "body" read as a new request)
    try:
        doc = json.loads(body)
    except ValueError:
        doc = {"not json": body[:200].decode("latin-1")}
    return status, doc, answer


def trickle(port: int, head: bytes, body: bytes, every: float, limit: float = 30.0) -> tuple[float, bytes]:
    """Send ``head`` at once, then ``body`` a byte every ``every`` s; (seconds until the first answer byte, all
    that came back until the server closed or ``limit`` passed)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=limit)
    started, answer = time.monotonic(), b""
    try:
        sock.sendall(head)
        for byte in body:
            sock.setblocking(False)
            try:
                answer += sock.recv(65536)
            except BlockingIOError:
                pass
            finally:
                sock.setblocking(True)
            if answer or time.monotonic() - started > limit:
                break
            sock.sendall(bytes([byte]))
            time.sleep(every)
        first = time.monotonic() - started
        sock.settimeout(max(1.0, limit - first))
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        first = time.monotonic() - started
    finally:
        sock.close()
    return first, answer


def closed_after(sock: socket.socket, limit: float = 20.0) -> float:
    """Seconds until the server closes ``sock`` (reading and dropping what it sends)."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, socket.timeout):
        pass
    return time.monotonic() - started
