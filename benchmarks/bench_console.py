"""The live console's page weight and load time, in Debian's headless Chromium.

Starts ``ocms run`` (embedded broker, worker, simulated fleet) unless ``--url``
names a running worker, waits ``--warmup`` seconds so the charts have data,
then loads the console ``--loads`` times in a fresh tab each and prints:

* bytes: the page and every file it loads (decoded size; the API answers apart);
* DOMContentLoaded and load event, from the browser's navigation timing;
* time to the first chart: navigation start until the top-K chart and its table
  hold the API's values (what a user waits for);
* browser console errors (must be 0).

    python -m benchmarks.bench_console [--url http://127.0.0.1:6066] [--screenshot docs/console.png]

Not a timed test: it prints what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from infra.process import free_port, stop_process_group

CHART_READY = """
var done = arguments[arguments.length - 1];
(function check() {
  var rows = document.querySelectorAll('#topk-data tbody tr').length;
  if (rows > 0 && document.querySelector('#topk-chart svg.bars')) done(performance.now());
  else setTimeout(check, 10);
})();
"""


DISCOVERED_READY = """
var done = arguments[arguments.length - 1];
(function check() {
  if (document.querySelectorAll('#discovered-data tbody tr').length > 0) done(true);
  else setTimeout(check, 100);
})();
"""


def whole_page(driver, path: str, until: str = "footer") -> None:
    """Screenshot from the top of the page down to the bottom of ``until`` (the window grown to hold it)."""
    height = driver.execute_script(
        "return Math.ceil(document.querySelector(arguments[0]).getBoundingClientRect().bottom + scrollY + 16)", until)
    viewport = driver.execute_script("return window.innerHeight")
    size = driver.get_window_size()
    # no empty tail: the window is the viewport plus its frame
    driver.set_window_size(size["width"], height + size["height"] - viewport)
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(path)


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=2) as response:
            return json.loads(response.read()).get("status") == "ok"
    except OSError:
        return False


def start_run(port: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "ocms", "run", "--web-port", str(port), "--every", "1"]
    return subprocess.Popen(command, cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def chrome(width: int, height: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running worker (default: start `ocms run` here)")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds of fleet data before measuring")
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--screenshot", help="save a screenshot of the last load here (PNG)")
    parser.add_argument("--range", default="auto", help="trend range chosen before the screenshot (seconds, or "
                        "auto: the page's default, fitting the data)")
    parser.add_argument("--discovery-screenshot", help="also save a screenshot of the discovered values of typed_words "
                        "(the page at ?metric=typed_words) here (PNG)")
    args = parser.parse_args()

    run = None
    url = args.url
    log = Path("/tmp") / f"bench_console_run_{os.getpid()}.log"
    try:
        if url is None:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            run = start_run(port, log)
            deadline = time.monotonic() + 120
            while not healthy(url):
                if run.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"ocms run did not become healthy; see {log}")
                time.sleep(0.3)
        time.sleep(args.warmup)  # a benchmark, not a test: the fleet sends for this long

        driver = chrome(1400, 1800)
        driver.set_script_timeout(120)
        try:
            dcl, load, chart, sizes, errors = [], [], [], None, []
            for _ in range(args.loads):
                driver.get("about:blank")
                driver.get_log("browser")
                driver.get(url + "/")
                chart.append(driver.execute_async_script(CHART_READY))
                timing = driver.execute_script(
                    "var n = performance.getEntriesByType('navigation')[0];"
                    "return [n.domContentLoadedEventEnd, n.loadEventEnd, n.decodedBodySize];")
                dcl.append(timing[0])
                load.append(timing[1])
                resources = driver.execute_script(
                    "return performance.getEntriesByType('resource').map(function (r) {"
                    "  return [new URL(r.name).pathname, r.decodedBodySize]; });")
                # The page's own files; /console/truth is an API answer like /topk, not page weight.
                files = {path: size for path, size in resources
                         if path.startswith("/console/") and path != "/console/truth"}
                sizes = {"/": timing[2], **files}
                errors += [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            if args.screenshot:
                from selenium.webdriver.support.ui import Select

                Select(driver.find_element("id", "range")).select_by_value(args.range)
                # a picture, not a measurement: polls draw the new range and measure reports/s over several listings
                time.sleep(15)
                whole_page(driver, args.screenshot)
            if args.discovery_screenshot:
                driver.get(url + "/?metric=typed_words")
                driver.execute_async_script(DISCOVERED_READY)
                whole_page(driver, args.discovery_screenshot, until="#discovered-card")
        finally:
            driver.quit()
    finally:
        if run is not None:
            stop_process_group(run, 30)  # SIGTERM stops `ocms run` as Ctrl-C does

    total = sum(sizes.values())
    print(f"console page weight: {total:,} bytes in {len(sizes)} files (uncompressed)")
    for path, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"  {size:>8,}  {path}")
    print(f"loads: {args.loads} against {url}")
    for name, values in (("DOMContentLoaded", dcl), ("load event", load), ("first chart with data", chart)):
        print(f"  {name:<22} median {statistics.median(values):7.1f} ms   max {max(values):7.1f} ms")
    print(f"browser console errors: {len(errors)}" + ("".join("\n  " + e for e in errors)))
    for path in (args.screenshot, args.discovery_screenshot):
        if path:
            print(f"screenshot: {path}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
