"""The JavaScript client (producer/js), issue 25: privatize + encode reports/s per mechanism and field kind in
Node (one core) and in Chromium, the browser bundle's size, and the black-box epsilon audit at 10^6 reports.

    .venv/bin/python -m benchmarks.bench_js_client [--seconds 2] [--audit-trials 1000000] [--no-browser]

* throughput: the public API (`privatize(config, metric, value)`: validate, encode the value -- a BLAKE2b
  fingerprint for strings --, draw from crypto.getRandomValues, hash, randomized response, write the wire-v1
  message), a rotating list of values per case, after a warm-up; Node pinned to one CPU with taskset when it
  exists; Chromium headless (Debian's) running the minified bundle. Goals: >= 200,000 reports/s for fields
  below 2^53 and >= 20,000/s for GF(2^128) strings, in Node, one core;
* bundle: dist/ocms-client.min.js (everything) and dist/ocms-client.nohash.min.js (@noble/hashes left out),
  and the core entry point's (`ocms-client/core`: no numeric or discoverable metrics, no report-reading tools;
  for pages that report categories) dist/ocms-client.core.min.js and dist/ocms-client.core.nohash.min.js,
  bytes minified and minified + gzip -9. Goal: <= 15 kB min+gzip without the BLAKE2b dependency, for the core
  bundle (the full one is reported beside it);
* audit: cms_core.audit's black-box procedure on the JS client (producer.jsclient.audit_js_client), 10^6
  reports per input at alpha 0.01, both mechanisms, and the leaky client (threshold of 1.25 eps) caught.

Prints the machine's load average first: the figures move with it.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from producer.jsclient import (BUNDLE, BUNDLE_WITHOUT_HASH, JS_DIR, audit_js_client, ensure_built, leaky_threshold_for, node_binary,
                               write_device_config)

SCREENS = ["home", "search", "feed", "settings", "profile", "cart", "checkout", "help", "about", "login", "signup", "map"]
REGISTRY = f"""\
metrics:
  - name: cat_ocms
    description: 12 categories, OCMS+RR (small prime field)
    owner: bench
    categories: {json.dumps(SCREENS)}
    epsilon: 2
  - name: cat_direct
    description: 12 categories, direct randomized response
    owner: bench
    categories: {json.dumps(SCREENS)}
    mechanism: direct
    epsilon: 2
  - name: int_small
    description: integers below 10^5, OCMS+RR (small prime field)
    owner: bench
    integers: 100000
    epsilon: 2
  - name: int_prime64
    description: integers below 2^40 (F(2^64 - 59))
    owner: bench
    integers: 2^40
    tracked: {{range: [0, 10]}}
    epsilon: 1
  - name: int_gf64
    description: 64-bit integers (GF(2^64))
    owner: bench
    integers: 2^64
    tracked: {{range: [0, 10]}}
    epsilon: 3
  - name: strings
    description: strings (GF(2^128), BLAKE2b-128 fingerprints)
    owner: bench
    strings: true
    tracked: [word0]
    epsilon: 2
  - name: strings_disc
    description: discoverable strings over UTF-8 bytes (a random level's prefix, F(2^64 - 59))
    owner: bench
    strings: true
    tracked: [word0]
    epsilon: 3
    discovery: {{alphabet: utf8, max_length: 8}}
"""

WORDS = [f"word{i}" for i in range(1000)]
#: (metric, label, values, goal reports/s or None)
CASES = [
    ("cat_ocms", "OCMS+RR, categories, F(p) p < 2^32", SCREENS, 200_000),
    ("int_small", "OCMS+RR, integers < 10^5, F(p) p < 2^32", [str(i * 37 % 100_000) for i in range(1000)], 200_000),
    ("cat_direct", "direct RR, categories", SCREENS, 200_000),
    ("int_prime64", "OCMS+RR, integers < 2^40, F(2^64 - 59)", [str(i * 1_000_003) for i in range(1000)], None),
    ("int_gf64", "OCMS+RR, 64-bit integers, GF(2^64)", [str(2**64 - 1 - i * 7919) for i in range(1000)], None),
    ("strings", "OCMS+RR, strings, GF(2^128)", WORDS, 20_000),
    ("strings_disc", "discovery, UTF-8 strings, F(2^64 - 59)", WORDS, None),
]
AUDIT = [("cat_ocms", False), ("cat_direct", False), ("cat_ocms", True), ("cat_direct", True)]


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def node_figures(config: Path, cases: Path, seconds: float) -> list[dict]:
    command = [node_binary(), "bench/run_node.mjs", str(config), str(cases), str(seconds)]
    if shutil.which("taskset"):
        command = ["taskset", "-c", "0", *command]
    done = subprocess.run(command, cwd=JS_DIR, capture_output=True, text=True, check=True, timeout=1200)
    return json.loads(done.stdout)


def chromium_figures(config_doc: dict, cases: list[dict], seconds: float) -> list[dict]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="ocms-bench-js-") as tmp:
        root = Path(tmp)
        for name, source in (("index.html", JS_DIR / "bench" / "page.html"), ("ocms-client.min.js", BUNDLE),
                             ("privatize_bench.mjs", JS_DIR / "bench" / "privatize_bench.mjs")):
            shutil.copyfile(source, root / name)
        handler = functools.partial(_Quiet, directory=str(root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium")
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        try:
            driver.set_script_timeout(1200)
            driver.get(f"http://127.0.0.1:{server.server_address[1]}/index.html")
            deadline = time.monotonic() + 30
            while not driver.execute_script("return window.benchReady === true;"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the benchmark page did not load")
                time.sleep(0.1)
            return driver.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "try { done(window.runBench(arguments[0], arguments[1], arguments[2])); } catch (e) { done({error: String(e)}); }",
                config_doc, cases, seconds)
        finally:
            driver.quit()
            server.shutdown()
            server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


CORE_BUNDLE = JS_DIR / "dist" / "ocms-client.core.min.js"
CORE_BUNDLE_WITHOUT_HASH = JS_DIR / "dist" / "ocms-client.core.nohash.min.js"
BUNDLE_GOAL = 15_000


def bundle_sizes() -> list[tuple[str, int, int]]:
    """(label, bytes minified, bytes minified + gzip -9): the full bundle with and without @noble/hashes, then the
    core entry point's (ocms-client/core) with and without it."""
    out = []
    for label, path in (("with @noble/hashes (BLAKE2b)", BUNDLE), ("without the BLAKE2b dependency", BUNDLE_WITHOUT_HASH),
                        ("core, with @noble/hashes", CORE_BUNDLE), ("core, without the BLAKE2b dependency", CORE_BUNDLE_WITHOUT_HASH)):
        data = path.read_bytes()
        out.append((label, len(data), len(gzip.compress(data, compresslevel=9))))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="measured seconds per case (after a warm-up)")
    ap.add_argument("--audit-trials", type=int, default=1_000_000, help="reports per input of the audit (0: skip)")
    ap.add_argument("--no-browser", action="store_true", help="skip Chromium")
    args = ap.parse_args()
    ensure_built()
    print(f"bench_js_client: {load_average()}; node {subprocess.run([node_binary(), '--version'], capture_output=True, text=True).stdout.strip()}"
          f"{' pinned to CPU 0 (taskset)' if shutil.which('taskset') else ''}")
    failures = 0
    with tempfile.TemporaryDirectory(prefix="ocms-bench-js-") as tmp:
        tmp = Path(tmp)
        _, reg, config = write_device_config(tmp, REGISTRY)
        config_doc = json.loads(config.read_text(encoding="utf-8"))
        cases = [{"metric": m, "label": label, "values": values} for m, label, values, _ in CASES]
        (tmp / "cases.json").write_text(json.dumps(cases))
        goals = {m: goal for m, _, _, goal in CASES}
        results = {"node": node_figures(config, tmp / "cases.json", args.seconds)}
        if not args.no_browser:
            results["chromium"] = chromium_figures(config_doc, cases, args.seconds)
        print()
        print("privatize + encode (public API, CSPRNG), reports/s")
        header = f"{'case':48} {'Node':>12}" + ("" if args.no_browser else f" {'Chromium':>12}") + f" {'goal (Node)':>12}"
        print(header)
        for i, (metric, label, _, goal) in enumerate(CASES):
            line = f"{label:48} {results['node'][i]['per_s']:>12,.0f}"
            if not args.no_browser:
                line += f" {results['chromium'][i]['per_s']:>12,.0f}"
            verdict = ""
            if goal is not None:
                met = results["node"][i]["per_s"] >= goal
                failures += not met
                verdict = f" {'>=':>3} {goal:>8,}  {'met' if met else 'MISSED'}"
            print(line + verdict)
        print()
        print("browser bundle (dist/, esbuild --minify, ES module; core: the ocms-client/core entry point)")
        sizes = bundle_sizes()
        for label, minified, gz in sizes:
            print(f"  {label:36} {minified:>8,} bytes minified  {gz:>7,} bytes min+gzip -9")
        core_without = sizes[3][2]
        met = core_without <= BUNDLE_GOAL
        failures += not met
        print(f"  goal: <= {BUNDLE_GOAL:,} bytes min+gzip without the BLAKE2b dependency: {'met' if met else 'MISSED'} "
              "(the core bundle, for categories-only pages)")
        print(f"  the full entry point without it: {sizes[1][2]:,} bytes "
              f"({'within' if sizes[1][2] <= BUNDLE_GOAL else 'above'} the goal; numeric and discoverable metrics)")
        if args.audit_trials:
            print()
            print(f"black-box audit of the JS client: {args.audit_trials:,} reports per input, Clopper-Pearson alpha 0.01, "
                  "x1 = 0, x2 = 1")
            print(f"{'metric':40} {'claimed':>7} {'eps_lb':>8} {'% claim':>8}  verdict")
            for metric, leaky in AUDIT:
                version = reg.metric(metric).latest
                start = time.perf_counter()
                threshold = leaky_threshold_for(version.params) if leaky else None
                result = audit_js_client(config, version, 0, 1, args.audit_trials, 0.01, threshold)
                if leaky:
                    ok, verdict = result.leaks, "leak caught" if result.leaks else "LEAK MISSED"
                else:
                    ok = not result.leaks and result.fraction_of_claim >= 0.9
                    verdict = "ok" if ok else ("LEAK" if result.leaks else "below 90% of the claim")
                failures += not ok
                label = ("LEAKY (1.25 eps) " if leaky else "") + f"{metric} ({version.params.mechanism})"
                print(f"{label:40} {result.claimed_epsilon:>7g} {result.epsilon_lower_bound:>8.4f} "
                      f"{100 * result.fraction_of_claim:>7.1f}%  {verdict}  ({time.perf_counter() - start:.1f} s)")
    print()
    print(f"bench_js_client: {load_average()} at the end; {'all goals met' if not failures else f'{failures} goal(s) missed'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
