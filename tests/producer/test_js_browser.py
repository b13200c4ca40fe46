"""The JavaScript client end to end in a real browser: Debian's Chromium (selenium) loads a page that uses
the minified bundle (producer/js/test/browser/page.html, served from another origin than the collector, so
every upload goes through CORS), and reports 10,000 values through the real ``ocms collector`` into a real
worker, with a reload mid-way while the collector is up (uploads in flight, keepalive on page hide) and
another while it is down:

    1. 2,500 reports, reload at once (collector up);   2. 2,500 more
    3. collector stopped; 2,500 reports queue up; reload (the queue is in localStorage); 2,500 more
    4. collector started again on its port: the page's queue drains by itself

Then every report the page made is in Kafka exactly once (the records of the topic equal the page's
messages as a multiset: retried uploads reuse their Idempotency-Key), the worker's integer match counts
equal ``ocms estimate`` on a capture of those reports, and the ledger (localStorage) holds exactly the
budget: the 10,001st report is refused.
"""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from infra.broker import EmbeddedBroker
from infra.process import free_port
from producer.jsclient import BUNDLE, JS_DIR
from tests.agents.test_console import browser_errors, chrome  # noqa: F401  (the Chromium fixture)
from tests.collector.harness import CollectorProcess, records_of, serving_worker
from tests.support.topics import consume
from tests.support.waiting import poll_until

TOPIC = "js-browser"
METRIC = "screen"
REPORTS = 10_000
EPSILON = 2
REGISTRY = f"""\
metrics:
  - name: {METRIC}
    description: the screens of a web app, reported by the browser client
    owner: tests
    categories: [home, search, feed, settings, profile, cart, checkout, help, about, login, signup, map]
    epsilon: {EPSILON}
"""
ROOT = Path(__file__).resolve().parents[2]


class Site(str):
    """The page's origin (a str: its URL) and the directory it serves (``.root``)."""

    def __new__(cls, url: str, root: Path):
        self = super().__new__(cls, url)
        self.root = root
        return self


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def site(js_client, tmp_path_factory):
    """The page and the bundle on their own origin (http://127.0.0.1:PORT)."""
    root = tmp_path_factory.mktemp("site")
    (root / "index.html").write_text((JS_DIR / "test" / "browser" / "page.html").read_text())
    (root / "ocms-client.min.js").write_bytes(BUNDLE.read_bytes())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Site(f"http://127.0.0.1:{server.server_address[1]}", root)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def stack(site, tmp_path_factory):
    directory = tmp_path_factory.mktemp("stack")
    registry = directory / "registry.yaml"
    registry.write_text(REGISTRY)
    with EmbeddedBroker() as broker, serving_worker(registry, broker.bootstrap_servers, TOPIC, directory) as worker:
        collector = CollectorProcess(registry, broker.bootstrap_servers, TOPIC, directory, "--cors-origins", site,
                                     "--retry-after-seconds", "1", port=free_port())
        with collector:
            yield registry, broker, worker, collector


def call(driver, script: str, *args):
    """Run an async page function: ``script`` sees ``args`` and ends by calling done(value)."""
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "(async () => {" + script + "})(...arguments).then((v) => done({ok: v}), (e) => done({error: e.name + ': ' + e.message}));",
        *args)
    assert "error" not in result, result["error"]
    return result["ok"]


def load(driver, url: str) -> None:
    driver.get(url)
    call(driver, "return await window.ready;")


def report(driver, values: list[str]) -> int:
    return call(driver, "return await window.reportAll(arguments[0], arguments[1]);", METRIC, values)


def queued(driver) -> int:
    return call(driver, "return await window.client.uploader.queued();")


@pytest.mark.integration
def test_browser_reports_arrive_once_through_reloads_and_a_collector_outage(chrome, site, stack, tmp_path):  # noqa: F811
    registry, broker, worker, collector = stack
    from registry import load_registry

    version = load_registry(registry).metric(METRIC).latest
    names = list(version.value_names)
    rng = np.random.default_rng(25)
    values = [names[i] for i in np.minimum(rng.zipf(1.5, REPORTS) - 1, len(names) - 1)]
    chrome.set_script_timeout(600)
    page = f"{site}/index.html?collector={collector.url}&budget={REPORTS * EPSILON}"
    load(chrome, page)
    chrome.execute_script("localStorage.clear();")
    load(chrome, page)

    assert report(chrome, values[:2500]) == 2500
    chrome.refresh()  # uploads in flight and queued: keepalive on page hide, the rest after the reload
    call(chrome, "return await window.ready;")
    assert report(chrome, values[2500:5000]) == 5000

    collector.stop()
    assert report(chrome, values[5000:7500]) == 7500
    assert queued(chrome) >= 2500, "with the collector down the reports wait in the queue"
    chrome.refresh()
    call(chrome, "return await window.ready;")  # the device config comes from the page's own copy
    assert queued(chrome) >= 2500, "the queue survived the reload"
    assert report(chrome, values[7500:]) == REPORTS
    refused = call(chrome, "try { await window.client.report(arguments[0], 'home'); return 'reported'; }"
                           " catch (e) { return e.name + ': ' + e.message; }", METRIC)
    assert refused.startswith("PrivacyBudgetError: privacy budget exhausted for metric \"screen\""), refused
    assert call(chrome, "return await window.client.ledger.spent(arguments[0]);", METRIC) == REPORTS * EPSILON

    collector.start()
    collector.wait_healthy()
    poll_until(lambda: queued(chrome) == 0, 180, "the page's queue to drain")

    made = [bytes.fromhex(h) for h in chrome.execute_script("return JSON.parse(localStorage.getItem('test-capture'));")]
    assert len(made) == REPORTS
    in_kafka = Counter(r for record in consume(broker.bootstrap_servers, TOPIC) for r in records_of(record.value, version))
    sent = Counter(r for m in made for r in records_of(m, version))
    assert sum(in_kafka.values()) == REPORTS, f"{sum(in_kafka.values())} records in Kafka for {REPORTS} reports"
    assert in_kafka == sent, "every report the page made is in Kafka exactly once"

    doc = worker.wait_for_n(REPORTS, timeout=120)
    assert doc["n"] == REPORTS
    capture = tmp_path / "page.capture"
    capture.write_bytes(b"".join(len(m).to_bytes(4, "big") + m for m in made))
    done = subprocess.run([sys.executable, "-m", "ocms", "estimate", "--registry", str(registry), "--metric",
                           METRIC, str(capture)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    offline = json.loads(done.stdout)
    assert [r["match_count"] for r in doc["estimates"]] == [r["match_count"] for r in offline["estimates"]]
    assert browser_errors(chrome, allowed=("net::ERR_CONNECTION_REFUSED", "Failed to load resource", "/v1/")) == []


# ------------------------------------------------------------------ what docs/device.md shows
DOCS_TOPIC = "js-docs"


def doc_block(fence: str, after: str) -> str:
    """The first ``fence`` code block of docs/device.md after the text ``after``."""
    text = (ROOT / "docs" / "device.md").read_text()
    return text.split(after, 1)[1].split(f"```{fence}\n", 1)[1].split("```", 1)[0]


def run_doc_command(line: str, cwd: Path, replace: dict[str, str]) -> subprocess.CompletedProcess:
    import shlex

    from producer.jsclient import node_binary

    for old, new in replace.items():
        line = line.replace(old, new)
    words = shlex.split(line)
    stdin = None
    if "<" in words:
        at = words.index("<")
        stdin, words = (cwd / words[at + 1]).read_bytes(), words[:at] + words[at + 2:]
    program = {"ocms": [sys.executable, "-m", "ocms"], "node": [node_binary()]}[words[0]]
    return subprocess.run(program + words[1:], cwd=cwd, input=stdin, capture_output=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.integration
def test_the_quick_start_page_and_the_commands_of_the_docs(chrome, site, stack, tmp_path):  # noqa: F811
    _, broker, _, _ = stack
    from registry import load_registry

    registry = ROOT / "deploy" / "registry.yaml"
    version = load_registry(registry).metric("flight_dest").latest
    with CollectorProcess(registry, broker.bootstrap_servers, DOCS_TOPIC, tmp_path, "--cors-origins", site) as collector:
        page = doc_block("html", "<!-- quick-start:").replace("http://127.0.0.1:8080", collector.url)
        (site.root / "quick-start.html").write_text(f"<!doctype html>\n<meta charset=\"utf-8\">\n<body>\n{page}</body>\n")
        chrome.get(f"{site}/quick-start.html")
        poll_until(lambda: chrome.execute_script("return document.body.dataset.reported;"), 120, "the quick start page's report")
        assert chrome.execute_script("return document.body.dataset.reported;") == version.fingerprint.hex()

        values = ["ATL", "ORD", "LAX", "ATL", "BOS"] * 20
        (tmp_path / "values.jsonl").write_text("".join(json.dumps(v) + "\n" for v in values))
        replace = {"deploy/registry.yaml": str(registry), "producer/js/bin/ocms-report.mjs": str(JS_DIR / "bin" / "ocms-report.mjs"),
                   "http://127.0.0.1:8080": collector.url}
        for line in doc_block("sh", "The command-line example").strip().splitlines():
            done = run_doc_command(line, tmp_path, replace)
            assert done.returncode == 0, f"{line}: {done.stderr.decode()[-2000:]}"
            if line.startswith("ocms estimate"):
                assert json.loads(done.stdout)["n"] == len(values)
        in_kafka = sum(len(records_of(r.value, version)) for r in consume(broker.bootstrap_servers, DOCS_TOPIC))
        assert in_kafka == 1 + len(values), "the quick start's report and the uploaded lines"


# ------------------------------------------------------------------ the core entry point (ocms-client/core)
@pytest.mark.integration
def test_the_core_bundle_reports_categories_in_chromium(chrome, js_client, tmp_path):  # noqa: F811
    """A page that reports categories with dist/ocms-client.core.min.js alone: reports of the config's categories
    (decoded by the full bundle on the same page), the numeric and discoverable metrics of the same config named as
    left out, and the core's exports the full one's less the numeric and report-reading names."""
    root = tmp_path / "core-site"
    root.mkdir()
    (root / "index.html").write_text((JS_DIR / "test" / "browser" / "core.html").read_text())
    for name in ("ocms-client.core.min.js", "ocms-client.min.js"):
        (root / name).write_bytes((JS_DIR / "dist" / name).read_bytes())
    vectors = ROOT / "tests" / "vectors"
    doc = json.loads((vectors / "privatize_v1.json").read_text())["device_config"]
    numeric = json.loads((vectors / "numeric_mean_v1.json").read_text())["device_config"]["metrics"]
    doc = {**doc, "metrics": doc["metrics"] + numeric}
    cat = next(m for m in doc["metrics"] if m["name"] == "cat_small")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        chrome.set_script_timeout(120)
        chrome.get(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        poll_until(lambda: chrome.execute_script("return window.ready === true;"), 30, "the core page")
        values = [cat["categories"][i % len(cat["categories"])] for i in range(1000)]
        out = call(chrome, "return await window.runCore(...arguments);", doc, "cat_small", values,
                   ["latency_split", "words_disc"])
    finally:
        server.shutdown()
        server.server_close()
    assert out["metrics"] == ["cat_small", "cat_direct", "int_prime64", "int_gf64", "words"]
    assert len(out["messages"]) == 1000 and all(m[8:24] == cat["fingerprint"] for m in out["messages"])
    assert set(out["z"]) <= set(range(cat["m"])) and len(set(out["z"])) == cat["m"], "z over [m], every value seen"
    assert out["spent"] == 1000 * cat["epsilon"]
    assert out["refused"][0].startswith('UnknownMetricError: metric "latency_split" is numeric'), out["refused"]
    assert out["refused"][1].startswith('UnknownMetricError: metric "words_disc" is discoverable'), out["refused"]
    left_out = {"NumericLayout", "decodeMessage", "encodeRecords", "frameOf", "peekHeader", "captureRecord", "readCapture"}
    assert sorted(out["exports"]) == sorted(set(out["fullExports"]) - left_out)
    assert browser_errors(chrome, allowed=("favicon.ico",)) == []
