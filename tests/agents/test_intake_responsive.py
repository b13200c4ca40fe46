"""The worker keeps answering /healthz while it decodes a large micro-batch (issue 17).

Decoding is O(reports x D): at D = 100,000 one 1,000,000-report batch is 1e11 hash
comparisons, over ten seconds of kernel time on 2 cores. The worker runs that decode on its own decode
thread (``agents.checkpoint``; the compiled kernel releases the GIL),
so the event loop that serves /healthz, the changelog view and the consumer's
heartbeats stays free.

A regression guard, not a timed benchmark: the bound (5 s) is generous against what
a free loop gives (tens of ms) and far below what the old code took. Checked against
the old code (decode on the event loop, main at 78276d2): this test failed there with
/healthz blocked for 27.2 s (a loaded 2-core machine); with the decode thread it
passed with the slowest of 558 polls at 0.04 s. benchmarks/bench_query_storm.py
measures the figure of the issue.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import numpy as np
import pytest

from cms_core import OCMSParams
from infra.broker import EmbeddedBroker

from tests.support.waiting import poll_until

from .harness import WorkerProcess, report_messages, send

pytestmark = pytest.mark.integration  # a broker and a worker

D = 100_000
REPORTS = 1_000_000
FRAME = 10_000
#: Far above a free event loop's answer time, far below the old blocking decode (12 s and more).
HEALTHZ_BOUND_S = 5.0


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


class HealthPoller(threading.Thread):
    """Polls /healthz back to back and keeps the slowest answer (a timeout counts as its length)."""

    def __init__(self, worker: WorkerProcess):
        super().__init__(daemon=True)
        self.worker = worker
        self.stopping = threading.Event()
        self.slowest = 0.0
        self.polls = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.worker.base_url + "/healthz", timeout=30) as response:
                    response.read()
            except OSError:
                pass  # a timeout or refused connection: its duration is what counts
            self.slowest = max(self.slowest, time.monotonic() - started)
            self.polls += 1
            self.stopping.wait(0.05)


def counted(worker: WorkerProcess, timeout: float) -> int:
    """Wait until the worker has counted every report; /estimates/0 answers n cheaply (one value)."""
    def n() -> int | None:
        worker.running()
        status, doc = worker.get("/estimates/0")
        return doc["n"] if status == 200 else None

    return poll_until(n, timeout, f"the worker to count {REPORTS:,} reports", until=lambda got: (got or 0) >= REPORTS,
                      interval=0.25)


def test_healthz_answers_while_a_large_batch_decodes(broker, tmp_path):
    params = OCMSParams.build(2.0, D)
    values = (np.random.default_rng(1).zipf(1.3, REPORTS) - 1) % D
    messages = report_messages(params, values, FRAME, seed=2)
    worker = WorkerProcess(broker.bootstrap_servers, "responsive", "responsive", tmp_path,
                           "--epsilon", "2", "--dictionary-size", str(D), "--tracked-range", f"0:{D}",
                           "--partitions", "1", "--batch-max-reports", str(REPORTS),
                           # one micro-batch of the whole backlog: flushed when full, not by age
                           "--batch-max-seconds", "60").start()
    poller = HealthPoller(worker)
    try:
        worker.wait_healthy()
        poller.start()
        # The whole backlog at once: the worker decodes it as one micro-batch.
        send(broker.bootstrap_servers, worker.topic, messages)
        assert counted(worker, timeout=300) == REPORTS
    finally:
        poller.stopping.set()
        poller.join(timeout=60)
        worker.stop()
    assert poller.polls >= 3  # it polled while the batch was decoded, not only before or after
    assert poller.slowest < HEALTHZ_BOUND_S, (
        f"/healthz took {poller.slowest:.1f} s while the worker decoded {REPORTS:,} reports at D = {D:,}")
