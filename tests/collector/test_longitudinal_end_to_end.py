"""Longitudinal reports (issue 38) like any other metric: device -> collector (plain and shuffling) -> Kafka ->
worker -> answers and Prometheus, exact against the offline decode of what was delivered.

Devices report a longitudinal metric of OCMS+RR ("theme") and one of direct RR ("mode") through the real
Python client path (producer.longitudinal.prepare_report, a secret per device; two devices through
DeviceReporter with their own ledger). The worker's match counts equal the offline decode's; its answers
state both budgets; a window of shuffled reports of the hashed metric claims no central epsilon, the
direct one does.
"""

from __future__ import annotations

import asyncio

import secrets

import numpy as np
import pytest

from producer.ledger import PrivacyLedger
from producer.longitudinal import prepare_report
from fleet.offline import sketch_from_messages
from producer.reporter import DeviceReporter, HttpTransport
from registry import load_registry
from tests.agents.harness import Scrape
from tests.support.waiting import poll_until

from .harness import CollectorProcess, serving_worker

pytestmark = pytest.mark.integration  # a broker, a worker and two collectors

TOPIC = "col-longitudinal"
REGISTRY = """\
metrics:
  - name: dest
    description: one-shot metric (the worker's name-less routes)
    owner: tests@example.com
    integers: 1000
    epsilon: 2
  - name: theme
    description: longitudinal, OCMS+RR
    owner: tests@example.com
    categories: [light, dark, contrast, sepia, system, custom, solarized, mono, paper, night, ocean, forest]
    epsilon: 1
    lifetime_epsilon: 2
    mechanism: ocms
    bucket: 1m
  - name: mode
    description: longitudinal, direct RR
    owner: tests@example.com
    categories: [a, b, c]
    epsilon: 1
    lifetime_epsilon: 3
    mechanism: direct
    bucket: 1m
  - name: theme_s
    description: longitudinal, OCMS+RR, reported through the shuffling collector only
    owner: tests@example.com
    categories: [light, dark, contrast, sepia, system, custom, solarized, mono, paper, night, ocean, forest]
    epsilon: 1
    lifetime_epsilon: 2
    mechanism: ocms
  - name: mode_s
    description: longitudinal, direct RR, reported through the shuffling collector only
    owner: tests@example.com
    categories: [a, b, c]
    epsilon: 1
    lifetime_epsilon: 3
    mechanism: direct
"""
DEVICES = 240


@pytest.fixture(scope="module")
def registry_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("registry") / "registry.yaml"
    path.write_text(REGISTRY)
    return path


@pytest.fixture(scope="module")
def claim_key(tmp_path_factory):
    """The key the shuffling collector signs its batch claims with and the worker checks them by (issue 37):
    without it no shuffled report counts as shuffled."""
    path = tmp_path_factory.mktemp("claim") / "claim.key"
    path.write_bytes(secrets.token_hex(32).encode())
    return path


@pytest.fixture(scope="module")
def worker(broker, registry_path, claim_key, tmp_path_factory):
    with serving_worker(registry_path, broker, TOPIC, tmp_path_factory.mktemp("worker"),
                        "--shuffle-claim-key-file", str(claim_key)) as w:
        yield w


@pytest.fixture(scope="module")
def collectors(broker, registry_path, worker, claim_key, tmp_path_factory):
    with CollectorProcess(registry_path, broker, TOPIC, tmp_path_factory.mktemp("plain"), "--reject-delay-ms", "0") as plain, \
            CollectorProcess(registry_path, broker, TOPIC, tmp_path_factory.mktemp("shuffling"),
                             "--shuffle-min-reports", "60", "--shuffle-max-seconds", "20",
                             "--reject-delay-ms", "0", "--shuffle-claim-key-file", str(claim_key)) as shuffling:
        yield plain, shuffling


def fleet_messages(version, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    lp = version.longitudinal
    values = rng.integers(0, len(version.value_names), DEVICES)
    return [prepare_report(lp, int(v), account=version.metric, ledger=None, secret=rng.bytes(32))[0] for v in values]


async def upload(url: str, messages: list[bytes]) -> None:
    transport = HttpTransport(url, max_reports=20)
    await transport.start()
    try:
        # a shuffling collector answers an upload once its batch of 60 closes: enough uploads in flight to close it
        await transport.upload_each(messages, concurrency=64)
    finally:
        await transport.stop()


def named(worker, metric: str, n: int) -> dict:
    return poll_until(lambda: worker.get(f"/metrics/{metric}/estimates"), 90, f"{metric} to count {n}",
                      until=lambda got: got[0] == 200 and got[1]["n"] >= n, interval=0.25)[1]


def test_longitudinal_reports_through_both_collectors_are_counted_exactly(collectors, worker, registry_path, tmp_path):
    plain, shuffling = collectors
    reg = load_registry(registry_path)
    sent = {}
    for name, seed in (("theme", 1), ("mode", 2)):
        version = reg.metric(name).latest
        messages = fleet_messages(version, seed)
        asyncio.run(upload(plain.url, messages[:DEVICES // 2]))
        asyncio.run(upload(shuffling.url, messages[DEVICES // 2:]))  # batches of 60: all closed
        sent[name] = messages

    # two devices through the whole reporter (ledger, secret in it): eps_inf once, nothing for repeats
    async def devices():
        out = []
        for i in range(2):
            ledger = PrivacyLedger(tmp_path / f"ledger{i}.db", budget=100.0)
            async with DeviceReporter(reg, transport=HttpTransport(plain.url), ledger=ledger) as reporter:
                out += [await reporter.report("theme", "dark") for _ in range(5)]
            ledger.close()
        return out

    deliveries = asyncio.run(devices())
    assert [d.epsilon_charged for d in deliveries] == ([2.0] + [0.0] * 4) * 2
    sent["theme"] += [d.message for d in deliveries]

    for name, messages in sent.items():
        version = reg.metric(name).latest
        doc = named(worker, name, len(messages))
        assert doc["n"] == len(messages)
        sketch, rejected = sketch_from_messages(version.params, version.tracked_values(), messages)
        assert not rejected
        assert [r["match_count"] for r in doc["estimates"]] == sketch.counts.tolist()
        info = doc["longitudinal"]
        assert info["epsilon_per_report"] == 1.0 and info["lifetime_epsilon"] == version.longitudinal.lifetime_epsilon
        # half the window was not shuffled: no central epsilon for either (as for one-shot metrics)
        assert doc["central_epsilon"] is None

    scrape = Scrape.parse(worker.text("/metrics"))
    exported = {dict(labels)["metric"] for labels in scrape.series("ocms_estimate_ratio")}
    assert {"theme", "mode"} <= exported


def test_a_shuffled_window_of_a_hashed_longitudinal_metric_claims_no_central_epsilon(collectors, worker,
                                                                                       registry_path):
    """Metrics reported only through the shuffling collector: every report of their windows was shuffled. The
    hashed one claims no central epsilon (its fixed hash is a pseudonym), the direct one the batch's figure."""
    _, shuffling = collectors
    reg = load_registry(registry_path)
    for name, seed in (("theme_s", 3), ("mode_s", 4)):
        messages = fleet_messages(reg.metric(name).latest, seed)[:120]
        asyncio.run(upload(shuffling.url, messages))  # two batches of 60
        doc = named(worker, name, len(messages))
        assert doc["shuffled_reports"] == doc["n"] == len(messages)
        assert doc["longitudinal"]["mechanism"] == ("ocms" if name == "theme_s" else "direct")
        if name == "theme_s":
            assert doc["central_epsilon"] is None and "pseudonym" in doc["central_note"]
        else:
            assert doc["central_epsilon"] is not None and doc["central_epsilon"] < 1.0
