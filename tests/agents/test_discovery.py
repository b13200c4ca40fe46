"""`ocms simulate --discovery` and `ocms discover` (issue 15): JSON with discovered values, bad input refused."""

from __future__ import annotations

import json

import pytest

from cms_core import wire
from cms_core import discovery as D
from infra.capture import CaptureWriter
from ocms.cli import main
from tests.registry.helpers import WORDS_AND_SCREENS
from tests.support.waiting import poll_until

REGISTRY = WORDS_AND_SCREENS


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("discover")
    registry = root / "registry.yaml"
    registry.write_text(REGISTRY, encoding="utf-8")
    capture, truth = root / "words.cap", root / "truth.json"
    assert main(["simulate", "--registry", str(registry), "--metric", "typed_words", "--discovery",
                 "--dataset", "wordfreq:n=300", "--reports", "60000", "--seed", "3",
                 "--out", str(capture), "--truth", str(truth)]) == 0
    return root, registry, capture, truth


def test_discover_finds_the_frequent_words_with_estimates_and_cis(workspace, capsys):
    root, registry, capture, truth = workspace
    capsys.readouterr()
    assert main(["discover", "--registry", str(registry), "--metric", "typed_words", str(capture)]) == 0
    doc = json.loads(capsys.readouterr().out)
    true_counts = {t["value"]: t["count"] for t in json.loads(truth.read_text())["top"]}
    found = {d["value"]: d for d in doc["discovered"]}
    assert {"the", "to", "and", "of"} <= set(found)
    assert set(found) <= set(true_counts)  # nothing nobody typed
    the = found["the"]
    assert the["count_ci_low"] <= true_counts["the"] <= the["count_ci_high"]
    assert doc["reports"] == 60000 and sum(doc["reports_per_level"]) == 60000 and doc["rejected"] == {}
    level1 = doc["levels"][0]
    assert level1["candidates"] == 37 and level1["cutoff_count"] > 0 and level1["survivors"]
    assert all(isinstance(s["prefix"], str) for lv in doc["levels"] for s in lv["survivors"])


def test_reports_of_unknown_levels_and_garbage_are_rejected_not_counted(workspace, capsys):
    root, registry, capture, _ = workspace
    domain = D.DiscoveryDomain("strings", alphabet="abcdefghijklmnopqrstuvwxyz'.01234567", max_length=7,
                               symbols_per_level=1)
    seventh = D.level_params("typed_words", 1, 4.0, domain)[6]  # a level beyond the declared length
    bad = root / "bad.cap"
    with CaptureWriter(bad) as writer:
        import numpy as np

        from cms_core.privatize import simulate_reports
        from cms_core.values import encode_value, elements_to_array

        element = elements_to_array([encode_value(seventh, D.prefix_value(domain, "thethe", 7))], 1)
        batch = simulate_reports(seventh, np.repeat(element, 100), np.random.default_rng(1))
        writer.write(wire.encode_frame(seventh, batch))
        writer.write(b"not a wire message")
    capsys.readouterr()
    assert main(["discover", "--registry", str(registry), "--metric", "typed_words", str(bad)]) == 1
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["rejected"] == {"unknown_fingerprint": 1, "bad_magic": 1} and doc["reports"] == 0
    assert doc["discovered"] == [] and "no report" in out.err


@pytest.mark.parametrize("argv, message", [
    (["--metric", "screens", "x.cap"], "declares no 'discovery:' block"),
    (["--metric", "nope", "x.cap"], "no metric 'nope'"),
    (["--metric", "typed_words"], "give capture files"),
    (["--metric", "typed_words", "--bootstrap-servers", "h:1", "--from", "2026-01-01T00:00:00Z", "--to",
      "2025-01-01T00:00:00Z"], "is not after"),
    (["--metric", "typed_words", "--bootstrap-servers", "h:1", "--from", "yesterday", "--to", "now"], "ISO 8601"),
    (["--metric", "typed_words", "missing.cap"], "cannot read capture file"),
])
def test_bad_discover_input_is_a_clear_error(workspace, capsys, argv, message):
    _, registry, _, _ = workspace
    with pytest.raises(SystemExit) as info:
        main(["discover", "--registry", str(registry), *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_alpha_is_refused_by_the_parser(workspace, capsys):
    _, registry, capture, _ = workspace
    with pytest.raises(SystemExit) as info:
        main(["discover", "--registry", str(registry), "--metric", "typed_words", "--alpha", "2", str(capture)])
    assert info.value.code == 2 and "must be in (0, 1)" in capsys.readouterr().err


def test_simulate_discovery_needs_a_discoverable_metric_and_a_capture(workspace, capsys):
    _, registry, _, _ = workspace
    for argv, message in ((["--metric", "screens", "--discovery", "--out", "x"], "declares no 'discovery:'"),
                          (["--metric", "typed_words", "--discovery"], "give --out FILE"),
                          (["--metric", "typed_words", "--discovery", "--embedded-broker"], "give --out FILE"),
                          (["--metric", "typed_words", "--discovery", "--out", "x", "--embedded-broker"],
                           "drop --embedded-broker")):
        with pytest.raises(SystemExit):
            main(["simulate", "--registry", str(registry), *argv])
        assert message in capsys.readouterr().err



def test_simulate_discovery_from_a_long_tailed_file_finds_the_frequent_values_only(workspace, tmp_path, capsys):
    """A file: dataset whose values are mostly drawn once (issue 24's slow case, small): every report is sent,
    the frequent values are found, nothing outside the file is."""
    _, registry, _, _ = workspace
    tail = [f"{a}{b}{c}{d}" for a in "qrs" for b in "uvwxy" for c in "abcdefghij" for d in "0123456"]
    values = tmp_path / "values.txt"
    values.write_text("\n".join(["the"] * 3000 + ["cat"] * 2000 + tail) + "\n", encoding="utf-8")
    capture, truth = tmp_path / "long.cap", tmp_path / "long.json"
    assert main(["simulate", "--registry", str(registry), "--metric", "typed_words", "--discovery",
                 "--dataset", f"file:{values}", "--reports", "30000", "--seed", "5",
                 "--out", str(capture), "--truth", str(truth)]) == 0
    assert "sent 30,000 reports" in capsys.readouterr().err  # the status line goes to stderr
    assert json.loads(truth.read_text())["distinct_values"] > 900
    assert main(["discover", "--registry", str(registry), "--metric", "typed_words", str(capture)]) == 0
    doc = json.loads(capsys.readouterr().out)
    found = {d["value"] for d in doc["discovered"]}
    assert doc["reports"] == 30000 and {"the", "cat"} <= found and found <= {"the", "cat", *tail}

# ------------------------------------------------ periodic discovery over a topic window (embedded broker)

@pytest.mark.integration
def test_periodic_discovery_reads_the_topic_window_and_exports_bounded_labels(workspace):
    """Frames inside the window are discovered; frames stamped before it are not read; /metrics labels are bounded."""
    import asyncio
    import time

    import numpy as np
    from prometheus_client import CollectorRegistry, generate_latest

    from agents.discovery import DiscoveryCollector, DiscoveryService
    from fleet.discovery import simulate_discovery_messages
    from infra.broker import EmbeddedBroker
    from infra.kafka import EMBEDDED, make_producer
    from registry import load_registry
    from registry.discovery import discovery_of

    _, registry_path, _, _ = workspace
    version = load_registry(registry_path).metric("typed_words").latest
    spec = discovery_of(version)
    rng = np.random.default_rng(8)
    inside = ["zebra"] * 12_000 + ["quiet"] * 6_000 + ["the"] * 2_000
    before = ["jolly"] * 20_000  # old: outside the window, must not be discovered
    now = time.time()

    async def produce(bootstrap):
        producer = make_producer(bootstrap, EMBEDDED)
        await producer.start()
        try:
            for frame in simulate_discovery_messages(spec.domain, spec.params_by_level, before, rng):
                await producer.send_and_wait("words", frame, timestamp_ms=int((now - 7200) * 1000))
            for frame in simulate_discovery_messages(spec.domain, spec.params_by_level, inside, rng):
                await producer.send_and_wait("words", frame, timestamp_ms=int((now - 60) * 1000))
        finally:
            await producer.stop()

    with EmbeddedBroker() as broker:
        broker.create_topics({"words": 2})
        asyncio.run(produce(broker.bootstrap_servers))
        service = DiscoveryService([version], bootstrap_servers=broker.bootstrap_servers, topic="words",
                                   window_seconds=3600)
        assert service.answer("typed_words")[0] == 503  # before the first pass
        asyncio.run(service.refresh_once(now=now))
    status, doc = service.answer("typed_words")
    assert status == 200 and doc["reports"] == len(inside)
    found = {d["value"] for d in doc["discovered"]}
    assert {"zebra", "quiet"} <= found and "jolly" not in found
    assert service.answer("screens")[0] == 404 and service.answer(None)[0] == 400
    registry = CollectorRegistry()
    registry.register(DiscoveryCollector(service, top=1))
    text = generate_latest(registry).decode()
    assert 'ocms_discovered_frequency{metric="typed_words",value="zebra"}' in text
    assert 'value="quiet"' not in text  # beyond the exported top
    assert f'ocms_discovered_values_omitted{{metric="typed_words"}} {float(len(found) - 1)}' in text


def test_the_worker_page_answers_with_the_one_discovered_handler(workspace):
    """/discovered is written once (DiscoveryService.page): the worker's Faust page returns its answers as they are
    (``ocms discover --serve`` is checked over HTTP by test_discover_serve_publishes_the_latest_pass_over_http)."""
    import asyncio
    from types import SimpleNamespace

    from agents.discovery import DiscoveryService, add_discovery_pages
    from registry import load_registry

    _, registry_path, _, _ = workspace
    version = load_registry(registry_path).metric("typed_words").latest
    service = DiscoveryService([version], bootstrap_servers="unused:9092", topic="unused", interval_seconds=60)
    service.latest["typed_words"] = {"metric": "typed_words", "discovered": [], "reports": 7}
    pages = {}
    app = SimpleNamespace(page=lambda path: lambda handler: pages.setdefault(path, handler),
                          task=lambda job: job)
    add_discovery_pages(app, service)
    web = SimpleNamespace(bytes=lambda body, content_type, status: (status, content_type, body))
    cases = {"metric=typed_words": 200, "": 400, "metric=screens": 404, "metric=typed_words&x=1": 400}
    for query, expected in cases.items():
        params = dict(pair.split("=") for pair in query.split("&") if pair)
        status, body = service.page(params)
        doc = json.loads(body)
        assert status == expected and (doc["reports"] == 7 if status == 200 else doc["status"] == status)
        request = SimpleNamespace(query=params)
        assert asyncio.run(pages["/discovered"](web, request)) == (status, "application/json", body)
    assert "'x'" in json.loads(service.page({"metric": "typed_words", "x": "1"})[1])["error"]


def test_promote_adds_discovered_values_to_a_tracked_file(workspace, capsys):
    from registry.values_file import read_raw_values

    root, registry, capture, _ = workspace
    tracked = root / "promoted.jsonl"
    tracked.write_text('"already here"\n"the"\n', encoding="utf-8")
    capsys.readouterr()
    assert main(["discover", "--registry", str(registry), "--metric", "typed_words", "--promote", str(tracked),
                 str(capture)]) == 0
    doc = json.loads(capsys.readouterr().out)
    items = list(read_raw_values(tracked).items)
    assert items[:2] == ["already here", "the"] and "to" in items and items.count("the") == 1
    assert "the" not in doc["promoted"]["added"] and doc["promoted"]["kept"] == 2


@pytest.mark.integration
def test_discover_serve_publishes_the_latest_pass_over_http(workspace, tmp_path):
    """`ocms discover --serve` against the embedded broker: /discovered answers by name, /metrics has bounded labels,
    SIGTERM stops it cleanly."""
    import asyncio
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    import numpy as np

    from fleet.discovery import simulate_discovery_messages
    from infra.broker import EmbeddedBroker
    from infra.kafka import EMBEDDED, make_producer
    from infra.process import free_port
    from registry import load_registry
    from registry.discovery import discovery_of

    _, registry_path, _, _ = workspace
    spec = discovery_of(load_registry(registry_path).metric("typed_words").latest)
    words = ["zebra"] * 10_000 + ["quiet"] * 6_000

    async def produce(bootstrap):
        producer = make_producer(bootstrap, EMBEDDED)
        await producer.start()
        try:
            for frame in simulate_discovery_messages(spec.domain, spec.params_by_level, words,
                                                     np.random.default_rng(2)):
                await producer.send_and_wait("words", frame)
        finally:
            await producer.stop()

    def get(url):
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    with EmbeddedBroker() as broker:
        broker.create_topics({"words": 2})
        asyncio.run(produce(broker.bootstrap_servers))
        # and the CLI's own sending path: a second fleet through `ocms simulate --discovery --bootstrap-servers`
        assert main(["simulate", "--registry", str(registry_path), "--metric", "typed_words", "--discovery",
                     "--dataset", "wordfreq:n=300", "--reports", "4000", "--seed", "5", "--topic", "words", "--partitions", "2",
                     "--bootstrap-servers", broker.bootstrap_servers]) == 0
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "ocms", "discover", "--serve", "--registry", str(registry_path),
             "--bootstrap-servers", broker.bootstrap_servers, "--topic", "words", "--interval", "2",
             "--web-port", str(port), "--export-top", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
        try:
            base = f"http://127.0.0.1:{port}"

            def discovered() -> tuple[int, str]:
                assert process.poll() is None, f"ocms discover --serve exited with {process.returncode}"
                return get(f"{base}/discovered?metric=typed_words")

            status, body = poll_until(discovered, 90, "/discovered to answer 200", until=lambda got: got[0] == 200,
                                      interval=0.2)
            doc = json.loads(body)
            assert {"zebra", "quiet"} <= {d["value"] for d in doc["discovered"]}
            assert doc["reports"] == len(words) + 4000
            assert doc["window"]["topic"] == "words" and doc["computed_at"]
            assert get(f"{base}/discovered?metric=screens")[0] == 404
            assert get(f"{base}/discovered")[0] == 400
            assert get(f"{base}/discovered?metric=typed_words&x=1")[0] == 400
            status, text = get(f"{base}/metrics")
            assert status == 200 and 'ocms_discovered_frequency{metric="typed_words",value="zebra"}' in text
            assert 'value="quiet"' not in text
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                out, err = process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
        assert process.returncode == 0, err
        assert "Traceback" not in err
