"""Non-ASCII discovered values through every output (issue 24, section 1).

A UTF-8 discoverable metric (``max_length: 16``) whose fleet types café, naïve, 東京, 🎉 and two
values that ``max_length`` cuts inside a character: ``ab東京タワー東京`` and ``ab東京タワア東京``
keep 16 bytes, ending in the first two bytes of ー (e3 83) and of ア (e3 82). Both are shown as
``ab東京タワ\\ufffd`` (U+FFFD marks the cut) with their exact bytes in ``bytes_hex``
(cms_core.values.value_record), so they are two records in JSON and one Prometheus label: the
second series is left out and counted, the rest of /metrics is written.

Paths: ``ocms discover --out FILE`` and stdout (C.UTF-8 and a strict ASCII locale), ``ocms discover
--serve`` (/discovered, /metrics), the worker (/discovered, /metrics, its log).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from fleet.discovery import simulate_discovery_messages
from infra.capture import CaptureWriter
from ocms.cli import main
from registry import load_registry
from registry.discovery import discovery_of
from tests.support.waiting import poll_until

REGISTRY = """\
metrics:
  - name: words
    description: Words typed, any script
    owner: keyboard-team
    strings: true
    tracked: [café, 東京, "🎉"]
    epsilon: 4
    discovery: {alphabet: utf8, max_length: 16}
"""
TOWER, TOWER_2 = "ab東京タワー東京", "ab東京タワア東京"
FLEET = {"café": 16_000, "naïve": 16_000, "東京": 16_000, "🎉": 16_000, TOWER: 16_000, TOWER_2: 16_000}
REPORTS = sum(FLEET.values())
CUT = "ab東京タワ\ufffd"  # both towers' 16 bytes as text: U+FFFD where the character is cut
WHOLE = {"café", "naïve", "東京", "🎉"}
TOPIC = "it-words"


def fleet_values(seed: int = 24) -> list[str]:
    values = [v for v, n in FLEET.items() for _ in range(n)]
    np.random.default_rng(seed).shuffle(values)
    return values


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    registry = root / "registry.yaml"
    registry.write_text(REGISTRY, encoding="utf-8")
    spec = discovery_of(load_registry(registry).metric("words").latest)
    frames = list(simulate_discovery_messages(spec.domain, spec.params_by_level, fleet_values(),
                                              np.random.default_rng(7)))
    capture = root / "words.cap"
    with CaptureWriter(capture) as writer:
        writer.write_all(frames)
    return root, registry, capture, frames


def check_document(doc: dict) -> None:
    """The discovered values as text, the cut ones with their exact bytes, every prefix valid text."""
    by_bytes = {}
    for record in doc["discovered"]:
        raw = bytes.fromhex(record["bytes_hex"]) if "bytes_hex" in record else record["value"].encode("utf-8")
        by_bytes[raw] = record
    expected = {v.encode("utf-8") for v in WHOLE} | {TOWER.encode()[:16], TOWER_2.encode()[:16]}
    assert set(by_bytes) == expected, sorted(by_bytes)
    for value in WHOLE:
        assert by_bytes[value.encode()] == {**by_bytes[value.encode()], "value": value, "truncated": False}
        assert "bytes_hex" not in by_bytes[value.encode()]
    for cut in (TOWER.encode()[:16], TOWER_2.encode()[:16]):
        record = by_bytes[cut]
        assert (record["value"], record["truncated"], record["cut_inside_character"], record["found_at_level"]) == (
            CUT, True, True, 16)
    cafe_level4 = {s["prefix"]: s for s in doc["levels"][3]["survivors"]}["caf\ufffd"]
    assert cafe_level4["bytes_hex"] == "636166c3" and cafe_level4["cut_inside_character"]  # caf\xc3


def without_timing(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "decode_seconds"}


# ---------------------------------------------------------------- ocms discover

def test_discover_out_file_is_utf8_with_each_cut_value_and_its_bytes(workspace, capsys):
    root, registry, capture, _ = workspace
    out = root / "found.json"
    assert main(["discover", "--registry", str(registry), "--metric", "words", str(capture), "--out", str(out)]) == 0
    doc = json.loads(out.read_bytes().decode("utf-8", errors="strict"))  # raised UnicodeEncodeError before
    check_document(doc)
    assert doc["reports"] == REPORTS and "dropped_records" not in doc


def test_promote_skips_values_that_are_not_whole_text(workspace, capsys):
    from registry.values_file import read_raw_values

    root, registry, capture, _ = workspace
    tracked = root / "promoted.jsonl"
    assert main(["discover", "--registry", str(registry), "--metric", "words", "--promote", str(tracked),
                 str(capture), "--out", str(root / "promoted.json")]) == 0
    assert set(read_raw_values(tracked).items) == WHOLE  # the cut towers are truncated and not text


@pytest.mark.integration
@pytest.mark.parametrize("locale", [{"LC_ALL": "C.UTF-8"}, {"LC_ALL": "C", "PYTHONIOENCODING": "ascii:strict"}],
                         ids=["C.UTF-8", "strict-ascii"])
def test_discover_stdout_is_the_same_utf8_under_every_locale(workspace, locale):
    root, registry, capture, _ = workspace
    out = root / f"reference-{len(locale)}.json"
    assert main(["discover", "--registry", str(registry), "--metric", "words", str(capture), "--out", str(out)]) == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OCMS_", "LC_", "LANG", "PYTHONIOENCODING"))}
    done = subprocess.run([sys.executable, "-m", "ocms", "discover", "--registry", str(registry),
                           "--metric", "words", str(capture)], capture_output=True, timeout=120,
                          env={**env, **locale}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    doc = json.loads(done.stdout.decode("utf-8", errors="strict"))  # invalid UTF-8 / a crash before
    assert without_timing(doc) == without_timing(json.loads(out.read_text(encoding="utf-8")))
    assert "café" in done.stdout.decode("utf-8") and b"\\u" not in done.stdout  # UTF-8 itself, not escapes


def test_discovery_collector_leaves_out_only_the_bad_series(workspace):
    """A result holding a lone surrogate (what value_to_json made of caf\\xc3 before) costs its own series only."""
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from agents.discovery import DiscoveryCollector
    from agents.metrics import ExpositionGuard

    good = {"value": "café", "frequency": 0.5, "ci_low": 0.4, "ci_high": 0.6}
    service = SimpleNamespace(latest={"words": {"reports": 10, "discovered": [
        good, dict(good, value="caf\udcc3", frequency=0.25)]}})
    collector = DiscoveryCollector(service)
    assert {f.name for f in collector.describe()} == {f.name for f in collector.collect()}
    registry = CollectorRegistry()
    ExpositionGuard(registry).add("discovery", collector)
    text = generate_latest(registry).decode("utf-8", errors="strict")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [s.labels["value"] for s in families["ocms_discovered_frequency"].samples] == ["café"]
    assert families["ocms_discovered_values"].samples[0].value == 2.0
    dropped = {s.labels["reason"]: s.value for s in families["ocms_exposition_series_dropped"].samples}
    assert dropped["label_not_unicode"] == 3.0  # frequency and both CI bounds


# ---------------------------------------------------------------- HTTP: the worker and --serve

def fetch(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for_pass(base: str, alive, timeout: float = 120.0) -> dict:
    """/discovered?metric=words once a pass saw every report (condition with a deadline)."""
    def discovered() -> tuple[int, bytes]:
        assert alive(), "the server exited"
        return fetch(base + "/discovered?metric=words")

    _, body = poll_until(discovered, timeout, f"a discovery pass over all {REPORTS} reports",
                         until=lambda got: got[0] == 200 and json.loads(got[1])["reports"] == REPORTS, interval=0.2)
    return json.loads(body.decode("utf-8", errors="strict"))


def check_exposition(base: str) -> dict:
    """/metrics answers 200 with valid UTF-8 that prometheus_client parses: every discovered value's
    series once, the towers' shared label once (the other series counted as left out)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, body = fetch(base + "/metrics")
    assert status == 200, body[:500]  # 500 on every scrape before the fix
    families = {f.name: f for f in text_string_to_metric_families(body.decode("utf-8", errors="strict"))}
    labels = [s.labels["value"] for s in families["ocms_discovered_frequency"].samples]
    assert sorted(labels) == sorted(WHOLE | {CUT}), labels
    dropped = {(s.labels["collector"], s.labels["reason"]): s.value
               for s in families["ocms_exposition_series_dropped"].samples}
    # the second tower: its frequency and both CI bounds share the first one's labels
    assert dropped[("discovery", "duplicate_series")] >= 3 and dropped[("discovery", "label_not_unicode")] == 0
    return families


@pytest.fixture(scope="module")
def broker(workspace):
    import asyncio

    from infra.broker import EmbeddedBroker
    from infra.kafka import EMBEDDED, make_producer

    _, _, _, frames = workspace

    async def produce(bootstrap):
        producer = make_producer(bootstrap, EMBEDDED)
        await producer.start()
        try:
            for frame in frames:
                await producer.send_and_wait(TOPIC, frame)
        finally:
            await producer.stop()

    with EmbeddedBroker() as running:
        running.create_topics({TOPIC: 4})
        asyncio.run(produce(running.bootstrap_servers))
        yield running


@pytest.mark.integration
def test_worker_serves_cut_values_and_metrics_stay_up(workspace, broker, tmp_path):
    from tests.agents.harness import WorkerProcess

    _, registry, _, _ = workspace
    worker = WorkerProcess(broker.bootstrap_servers, "it-text", TOPIC, tmp_path, "--registry", str(registry),
                           "--discovery-interval-seconds", "1")
    worker.start()
    try:
        worker.wait_healthy()
        doc = wait_for_pass(worker.base_url, worker.alive)
        families = check_exposition(worker.base_url)
        check_document(doc)
        # the worker's own series are all there (a 500 took every one of them away)
        assert {"ocms_params_info", "ocms_params_reports", "ocms_reports_rejected"} <= set(families)
        status, body = fetch(worker.base_url + "/metrics/words/estimates")
        assert status == 200 and {r["value"] for r in json.loads(body.decode("utf-8"))["estimates"]} == {
            "café", "東京", "🎉"}
        assert worker.get("/healthz")[0] == 200
    finally:
        worker.stop()
    logs = b"".join(path.read_bytes() for path in tmp_path.glob("it-text-*.log")).decode("utf-8", errors="strict")
    assert logs.count("(duplicate_series)") == 1, logs  # said once in the log, counted on every scrape


@pytest.mark.integration
def test_discover_serve_answers_cut_values_and_metrics_stay_up(workspace, broker):
    from infra.process import free_port

    _, registry, _, _ = workspace
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "ocms", "discover", "--serve", "--registry", str(registry),
         "--bootstrap-servers", broker.bootstrap_servers, "--topic", TOPIC, "--interval", "2",
         "--web-port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        doc = wait_for_pass(base, lambda: process.poll() is None)  # 500 for café before the fix
        check_document(doc)
        check_exposition(base)
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err.decode("utf-8", "replace")
    assert "Traceback" not in err.decode("utf-8", errors="strict")
