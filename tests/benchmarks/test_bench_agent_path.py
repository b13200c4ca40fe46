"""benchmarks/bench_agent_path.py measures what it says: on every intake path the worker
counts every report once (frames and single reports), so the figures compare paths that
do the same work. Tiny sizes; the speeds are not checked."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.bench_agent_path import PATHS, PathWorker
from benchmarks.bench_worker import messages, produce
from infra.broker import EmbeddedBroker
from tests.support.waiting import poll_until

pytestmark = pytest.mark.integration  # a broker and workers


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.mark.parametrize("path", PATHS)
def test_every_intake_path_counts_every_report_once(broker, tmp_path, path):
    worker = PathWorker(broker.bootstrap_servers, f"agentpath-test-{path}", tmp_path, path)
    try:
        worker.wait_healthy()
        payloads = messages(3000, 100, seed=1) + messages(200, 1, seed=2)
        asyncio.run(produce(broker.bootstrap_servers, worker.topic, payloads, None, []))
        assert poll_until(worker.counted, 60, f"{path}: 3,200 reports counted", until=lambda n: n >= 3200) == 3200
        accepted = worker.get("/params")["parameter_sets"][0]["reports"]
        assert accepted == 3200
    finally:
        worker.stop()
