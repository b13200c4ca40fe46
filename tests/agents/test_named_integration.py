"""One worker serving a registry's metrics on the embedded broker (issue 12): names end to end.

A test registry holds a categorical metric with two direct-RR versions and an integer metric
with OCMS. Frames of every version are interleaved on one topic; each version's answer must
equal the offline decode of exactly its own messages, by name, in the API and in Prometheus.
Negative controls: reports of a metric the registry does not hold (identical numbers to a served
version, another binding) and of unbound parameters go to the dead-letter topic and are counted
nowhere.
"""

from __future__ import annotations

import json
import random
import time
import urllib.request

import numpy as np
import pytest

from cms_core import OCMSParams
from fleet.offline import sketch_from_messages
from infra.broker import EmbeddedBroker
from registry import load_registry

from tests.registry.helpers import screen_metric
from tests.support.topics import consume
from tests.support.waiting import poll_until

from .harness import Scrape, WorkerProcess, registry_worker, report_messages, send

pytestmark = pytest.mark.integration  # a broker and workers

REGISTRY = "metrics:\n" + screen_metric("[home, search, feed, settings]", epsilons=(2, 1), added_in_2="[wallet]", fields="""\
    unit: launches
    watch: [feed]
    top_k: 2
    min_reports: 100
""") + """\
  - name: screen_copy
    description: The same numbers as screen version 1 under another name (must never mix with it)
    owner: mobile@example.com
    categories: [home, search, feed, settings]
    mechanism: direct
    epsilon: 2
  - name: build
    description: Build number
    owner: release@example.com
    integers: 1000
    tracked: {range: [0, 50]}
    epsilon: 3
    mechanism: ocms
    bucket: 5m
    retention: 2h
    watch: ["7"]
    top_k: 3
"""

COUNTS = {("screen", 1): 6000, ("screen", 2): 4000, ("screen_copy", 1): 3000, ("build", 1): 5000}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    with registry_worker(tmp_path_factory.mktemp("named"), REGISTRY, "it-named") as setup:
        yield setup


def values_for(metric: str, version: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    d = {("screen", 1): 4, ("screen", 2): 5, ("screen_copy", 1): 4, ("build", 1): 60}[(metric, version)]
    weights = 1.0 / np.arange(1, d + 1)
    return rng.choice(d, n, p=weights / weights.sum())


@pytest.fixture(scope="module")
def fed(setup):
    registry, broker, worker = setup
    now_ms = int(time.time() * 1000)
    sent = {}
    messages = []
    for seed, ((metric, version), n) in enumerate(COUNTS.items()):
        params = registry.metric(metric).version(version).params
        own = report_messages(params, values_for(metric, version, n, seed), 500, seed=100 + seed,
                              timestamps_ms=[now_ms - 30_000] * (n // 500))
        sent[(metric, version)] = own
        messages += own
    # Negative controls: the same numbers as screen@1 bound to another name, and unbound.
    screen1 = registry.metric("screen").version(1).params
    stranger = OCMSParams.build(2.0, 4, mechanism="direct", binding="other@1")
    unbound = OCMSParams.build(2.0, 4, mechanism="direct")
    assert len({screen1.fingerprint, stranger.fingerprint, unbound.fingerprint}) == 3
    strays = (report_messages(stranger, values_for("screen", 1, 1000, 7), 500, seed=8)
              + report_messages(unbound, values_for("screen", 1, 1000, 9), 500, seed=10))
    messages += strays
    random.Random(11).shuffle(messages)
    send(broker.bootstrap_servers, worker.topic, messages)

    def caught_up():
        docs = {key: worker.get(f"/metrics/{key[0]}/estimates", version=str(key[1]))[1] for key in COUNTS}
        return docs if all(docs[key]["n"] >= n for key, n in COUNTS.items()) else None

    docs = poll_until(caught_up, 90, "every version counted")
    return registry, worker, sent, strays, docs


def test_each_version_equals_its_own_offline_decode_by_name(fed):
    registry, worker, sent, _, docs = fed
    for (metric, version), doc in docs.items():
        v = registry.metric(metric).version(version)
        sketch, rejected = sketch_from_messages(v.params, v.tracked_values(), [m.value for m in sent[(metric, version)]])
        assert not rejected
        assert (doc["metric"], doc["version"]) == (metric, version)
        assert doc["n"] == sketch.n == COUNTS[(metric, version)]
        assert [r["value"] for r in doc["estimates"]] == v.tracked_names()
        assert [r["match_count"] for r in doc["estimates"]] == sketch.counts.tolist()
        for got, want in zip(doc["estimates"], sketch.estimate().as_records()):
            assert got["frequency"] == want["frequency"] and got["ci_low"] == want["ci_low"]
    # The name-less endpoints answer for the first metric's newest version.
    assert worker.get("/estimates")[1]["n"] == COUNTS[("screen", 2)]


def test_values_topk_trend_and_errors_by_name(fed):
    _, worker, _, _, docs = fed
    status, one = worker.get("/metrics/screen/estimates/feed", version="1")
    assert status == 200 and one["estimate"] == docs[("screen", 1)]["estimates"][2]
    status, one = worker.get("/metrics/build/estimates/7")
    assert status == 200 and one["estimate"]["value"] == "7"
    status, top = worker.get("/metrics/screen/topk", k="2")
    assert status == 200 and [r["value"] for r in top["top"]] == ["home", "search"] and top["version"] == 2
    status, trend = worker.get("/metrics/screen/trend", value="wallet", **{"from": "-10m"})
    assert status == 200 and trend["value"] == "wallet" and sum(p["n"] for p in trend["points"]) == 4000
    status, err = worker.get("/metrics/flights/estimates")
    assert status == 404 and err["parameter"] == "metric" and "'flights'" in err["error"]
    status, err = worker.get("/metrics/screen/estimates/ATL")
    assert status == 404 and err["parameter"] == "value" and "'ATL' is not a category of metric 'screen'" in err["error"]
    status, err = worker.get("/metrics/build/estimates/abc")
    assert status == 400 and "'abc'" in err["error"]
    status, err = worker.get("/metrics/build/estimates/55")
    assert status == 404 and "not a tracked value of metric 'build'" in err["error"]
    status, err = worker.get("/metrics/screen/estimates", version="9")
    assert status == 404 and err["parameter"] == "version"
    status, combined = worker.get("/metrics/screen/estimates", version="combined")
    assert status == 200 and combined["combined"] and combined["n"] == 10_000
    assert [v["n"] for v in combined["versions"]] == [6000, 4000]
    assert [r["value"] for r in combined["estimates"]] == ["home", "search", "feed", "settings", "wallet"]


def test_negative_control_strays_are_dead_letters_counted_nowhere(fed):
    _, worker, _, strays, docs = fed
    dead = consume(worker.bootstrap, worker.topic + "-dlq", len(strays), timeout=30)
    assert len(dead) == len(strays)
    for key, n in COUNTS.items():  # still exactly their own reports
        assert worker.get(f"/metrics/{key[0]}/estimates", version=str(key[1]))[1]["n"] == n


def test_listing_and_prometheus_speak_names(fed):
    registry, worker, _, _, docs = fed
    request = urllib.request.Request(worker.base_url + "/metrics", headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        listing = json.loads(response.read())
    assert [m["name"] for m in listing["metrics"]] == ["screen", "screen_copy", "build"]
    screen = listing["metrics"][0]
    assert [(v["version"], v["epsilon"], v["mechanism"], v["reports"]) for v in screen["versions"]] == [
        (1, 2.0, "direct", 6000), (2, 1.0, "direct", 4000)]
    again = worker.get("/metrics", format="json")[1]
    assert again["generated_at"] >= listing["generated_at"]  # the worker's clock when listed (the console's rates)
    assert dict(again, generated_at=None) == dict(listing, generated_at=None)
    scrape = Scrape.parse(worker.text("/metrics"))
    for (metric, version), doc in docs.items():
        names = {"metric": metric, "version": str(version)}
        assert scrape.get("ocms_reports_accepted_total", **names) == COUNTS[(metric, version)]
        assert scrape.get("ocms_params_reports", **names, window="total") == doc["n"]
        by_name = {r["value"]: r for r in doc["estimates"]}
        exported = [dict(k)["value"] for k in scrape.series("ocms_estimate_ratio")
                    if dict(k)["metric"] == metric and dict(k)["version"] == str(version)
                    and dict(k)["window"] == "total"]
        assert exported and all(value in by_name for value in exported)
        for value in exported:
            assert scrape.get("ocms_estimate_ratio", **names, value=value, window="total") == by_name[value]["frequency"]
    assert {dict(k)["value"] for k in scrape.series("ocms_estimate_ratio") if dict(k)["metric"] == "screen"} == {
        "home", "search", "feed"}
    info = {(dict(k)["metric"], dict(k)["version"]): dict(k) for k in scrape.series("ocms_params_info")}
    assert info[("screen", "1")]["mechanism"] == "direct" and info[("build", "1")]["mechanism"] == "ocms"
    assert info[("build", "1")]["fingerprint"] == registry.metric("build").latest.fingerprint.hex()


def test_identical_parameters_under_two_names_never_mix(fed):
    """screen@1 and screen_copy@1 have the same epsilon, mechanism and categories: only the bound
    name tells their reports apart, and each equals its own offline decode (checked above)."""
    registry, worker, sent, _, docs = fed
    a, b = registry.metric("screen").version(1), registry.metric("screen_copy").version(1)
    assert (a.params.epsilon, a.params.hash_range, a.mechanism) == (b.params.epsilon, b.params.hash_range, b.mechanism)
    assert a.fingerprint != b.fingerprint
    assert docs[("screen", 1)]["n"] == 6000 and docs[("screen_copy", 1)]["n"] == 3000
    # Decoding one's messages with the other's parameters refuses every one (by fingerprint).
    _, rejected = sketch_from_messages(b.params, b.tracked_values(), [m.value for m in sent[("screen", 1)]])
    assert sum(rejected.values()) == len(sent[("screen", 1)])


def test_sigkill_mid_stream_every_metric_exact(tmp_path_factory):
    """Three metrics (two versions of one) through the embedded broker, the worker SIGKILLed twice
    while counting: every version still equals its own offline decode exactly."""
    import threading

    folder = tmp_path_factory.mktemp("named-kill")
    path = folder / "registry.yaml"
    path.write_text(REGISTRY, encoding="utf-8")
    registry = load_registry(path)
    with EmbeddedBroker() as broker:
        worker = WorkerProcess(broker.bootstrap_servers, "it-named-kill", "it-named-kill", folder,
                               "--registry", str(path), "--batch-max-seconds", "0.1")
        worker.start()
        sent, messages = {}, []
        for seed, ((metric, version), n) in enumerate(COUNTS.items()):
            params = registry.metric(metric).version(version).params
            sent[(metric, version)] = report_messages(params, values_for(metric, version, n, 50 + seed), 100,
                                                      seed=60 + seed)
            messages += sent[(metric, version)]
        random.Random(3).shuffle(messages)
        total = sum(COUNTS.values())
        failures, progress = [], []

        def counted() -> int:
            try:
                return sum(worker.get(f"/metrics/{m}/estimates", version=str(v))[1]["n"] for m, v in COUNTS)
            except (OSError, KeyError):  # not listening yet, or 503 while its share of the view is rebuilt
                return 0

        def killer():
            try:
                for threshold in (total // 4, total // 2):
                    progress.append(poll_until(counted, 120, f"n >= {threshold}", until=lambda n: n >= threshold))
                    worker.kill()
                    worker.start()
            except BaseException as exc:
                failures.append(exc)

        try:
            worker.wait_healthy()
            thread = threading.Thread(target=killer)
            thread.start()
            send(broker.bootstrap_servers, worker.topic, messages, rate=25)
            thread.join()
            assert not failures, failures
            assert worker.starts == 3 and any(0 < p < total for p in progress), progress
            worker.wait_healthy()
            poll_until(counted, 120, "every report counted after the kills", until=lambda n: n >= total)
            for (metric, version), own in sent.items():
                v = registry.metric(metric).version(version)
                doc = worker.get(f"/metrics/{metric}/estimates", version=str(version))[1]
                sketch, rejected = sketch_from_messages(v.params, v.tracked_values(), [m.value for m in own])
                assert not rejected and doc["n"] == sketch.n == COUNTS[(metric, version)]
                assert [r["match_count"] for r in doc["estimates"]] == sketch.counts.tolist(), (metric, version)
        finally:
            worker.stop()
