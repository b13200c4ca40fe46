"""The C client end to end (issue 25): ocms-report-c -> the real `ocms collector` -> Kafka -> the real worker.

The device config comes from `ocms registry device-config` of the collector's registry; the
worker's integer match counts must equal `ocms estimate` on a capture of the same reports (the
topic's records, as `kcat -f '%R%s'` would dump them). A second run starts while the collector
is down: the client retries with its idempotency key until the collector is up, and every report
is counted exactly once.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time

import numpy as np
import pytest

from infra.process import free_port
from tests.producer.c_client import CLI, line_of, make
from tests.support.topics import consume

from .harness import ROOT, CollectorProcess

pytestmark = pytest.mark.integration

TOPIC = "col-c-client"


@pytest.fixture(scope="module")
def device_config(registry_path, tmp_path_factory):
    make("all")
    path = tmp_path_factory.mktemp("c-client") / "device-config.json"
    done = subprocess.run([sys.executable, "-m", "ocms", "registry", "device-config", str(registry_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    path.write_text(done.stdout)
    return path


def _values(n: int, seed: int) -> list[str]:
    return [str(int(v)) for v in np.random.default_rng(seed).zipf(1.3, n) % 1000]


def _estimate_of_topic(broker, registry_path, tmp_path) -> dict:
    """`ocms estimate` over a capture of every record of the topic."""
    capture = tmp_path / "topic.capture"
    with open(capture, "wb") as f:
        for record in consume(broker.bootstrap_servers, TOPIC):
            f.write(len(record.value).to_bytes(4, "big") + record.value)
    done = subprocess.run([sys.executable, "-m", "ocms", "estimate", "--registry", str(registry_path),
                           "--metric", "dest", str(capture)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _assert_worker_equals_estimate(worker, broker, registry_path, tmp_path, n: int) -> None:
    doc = worker.wait_for_n(n)
    assert doc["n"] == n
    offline = _estimate_of_topic(broker, registry_path, tmp_path)
    assert offline["n"] == n and offline["rejected"] == {}
    assert {r["value"]: r["match_count"] for r in doc["estimates"]} == {
        r["value"]: r["match_count"] for r in offline["estimates"]}


def test_c_client_uploads_are_counted_exactly(broker, worker, registry_path, device_config, tmp_path):
    with CollectorProcess(registry_path, broker.bootstrap_servers, TOPIC, tmp_path) as collector:
        before = worker.get("/estimates")[1]["n"]
        values = _values(3000, 1)
        done = subprocess.run([str(CLI), "--config", str(device_config), "--metric", "dest", "--collector", collector.url,
                               "--max-upload-reports", "250"], input="".join(line_of(v) + "\n" for v in values).encode(),
                              capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()
        assert f"uploaded 3000 reports of dest@1 to {collector.url}/v1/reports in 12 uploads" in done.stderr.decode()
    _assert_worker_equals_estimate(worker, broker, registry_path, tmp_path, before + 3000)


def test_c_client_waits_for_a_collector_that_is_down_and_is_counted_once(broker, worker, registry_path, device_config,
                                                                         tmp_path):
    before = worker.get("/estimates")[1]["n"]
    port = free_port()
    collector = CollectorProcess(registry_path, broker.bootstrap_servers, TOPIC, tmp_path, port=port)
    values = _values(1000, 2)
    client = subprocess.Popen([str(CLI), "--config", str(device_config), "--metric", "dest", "--collector",
                               collector.url, "--max-upload-reports", "300", "--timeout", "120", "--max-backoff", "0.5",
                               "--verbose"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        client.stdin.write("".join(line_of(v) + "\n" for v in values).encode())
        client.stdin.close()
        # wait until the client has really failed to reach the collector once
        deadline, seen = time.monotonic() + 60, b""
        while b"upload attempt 1 failed" not in seen:
            assert time.monotonic() < deadline, seen
            ready, _, _ = select.select([client.stderr], [], [], 1.0)
            if ready:
                seen += client.stderr.read1(4096)
        with collector:
            assert client.wait(120) == 0, (seen + client.stderr.read()).decode()
            assert b"uploaded 1000 reports" in seen + client.stderr.read()
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        client.stdout.close()
        client.stderr.close()
    _assert_worker_equals_estimate(worker, broker, registry_path, tmp_path, before + 1000)
