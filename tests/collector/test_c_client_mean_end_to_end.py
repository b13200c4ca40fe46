"""The C client's Hybrid mean end to end (issue 40): ocms-report-c -> the real `ocms collector` -> Kafka, with a
device config from `ocms registry device-config` of the collector's registry (tests/vectors' numeric_mean metrics).
latency_split draws its part per report: the client uploads the mean's part apart from the histogram's (the
collector takes one parameter set per upload), every report reaches the topic, and `ocms estimate` of the topic's
records reads both parts back, the Hybrid mean within its interval of the truth; the real worker's /histogram
answers the same mean from the same reports."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from tests.producer.c_client import CLI, line_of, make
from tests.registry.helpers import write
from tests.support.topics import consume
from tests.support.waiting import poll_until
from tests.support.trees import mean_z
from tests.vectors.make_numeric_mean_vectors import REGISTRY

from .harness import ROOT, CollectorProcess, serving_worker

pytestmark = pytest.mark.integration

TOPIC = "col-c-client-mean"


def _ocms(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "ocms", *args], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_c_client_mean_parts_reach_the_topic_and_read_back(broker, tmp_path):
    make("all")
    registry = write(tmp_path, REGISTRY)
    config = tmp_path / "device-config.json"
    config.write_text(_ocms("registry", "device-config", str(registry)))
    values = np.random.default_rng(41).lognormal(math.log(300), 0.8, 3000)
    (tmp_path / "worker").mkdir()
    with serving_worker(registry, broker, TOPIC, tmp_path / "worker") as worker, \
            CollectorProcess(registry, broker.bootstrap_servers, TOPIC, tmp_path) as collector:
        done = subprocess.run([str(CLI), "--config", str(config), "--metric", "latency_split", "--collector",
                               collector.url, "--max-upload-reports", "500"],
                              input="".join(line_of(repr(float(v))) + "\n" for v in values).encode(),
                              capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()
        # about 1,500 reports a part, in uploads of 500: 3 or 4 uploads each, never one of both parts
        assert "uploaded 3000 reports of latency_split@1" in done.stderr.decode()
        uploads = int(done.stderr.decode().rsplit(" in ", 1)[1].split()[0])
        assert 6 <= uploads <= 8, done.stderr.decode()
        answer = poll_until(lambda: worker.get("/metrics/latency_split/histogram", version=1), 90,
                            "the worker to count 3,000 reports", interval=0.25,
                            until=lambda got: got[0] == 200 and got[1].get("n", 0) >= 3000)[1]
    capture = tmp_path / "topic.capture"
    with open(capture, "wb") as f:
        for record in consume(broker.bootstrap_servers, TOPIC):
            f.write(len(record.value).to_bytes(4, "big") + record.value)
    doc = json.loads(_ocms("estimate", "--registry", str(registry), "--metric", "latency_split", str(capture)))
    mean = doc["histogram"]["mean"]
    assert doc["rejected"] == {} and doc["n"] + mean["reports"] == 3000
    assert abs(mean["reports"] - 1500) < 4.5 * math.sqrt(3000 * 0.25) and mean["mechanism"] == "hybrid"
    assert abs(mean_z(doc["histogram"], float(np.clip(values, 0, 10000).mean()))) < 4.5, mean
    served = answer["histogram"]["mean"]  # the worker's n counts both parts' reports
    assert answer["n"] == 3000 and served["reports"] == mean["reports"] and served["mechanism"] == "hybrid", answer
    assert served["estimate"] == pytest.approx(mean["estimate"], rel=1e-9), (served, mean)
