"""The C client (producer/c, issue 25): reports/s on one core, library size, and the 10^6 privacy audit.

  1. reports/s per field kind (privatize + encode through ocms_report_*, one thread), measured
     in thread CPU time (getrandom()'s kernel time included), so the figure is per core whatever
     else the machine runs. Randomness two ways: getrandom() per draw, and through a caller-owned
     4 KiB read-ahead buffer (the same byte stream, one syscall per 4 KiB); binary fields with
     PCLMUL and with the portable constant-time carry-less multiply. Goals: >= 5 M/s for small
     prime fields, >= 1 M/s for GF(2^128) strings.
  2. text size of libocms_client.a (per object, `size`), of the shared object, and of the library built -Os.
  3. the black-box epsilon audit (cms_core.audit.audit_batches) on 10^6 reports per input written
     by ocms-report-c, OCMS+RR and direct RR, with the leaky negative control (the test driver's
     parameter struct with the keep threshold of 1.25 epsilon) caught.

    .venv/bin/python -m benchmarks.bench_c_client [--seconds 1] [--audit-trials 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from cms_core.audit import audit_batches
from cms_core.privatize import keep_threshold
from infra.capture import read_report_batch
from registry.device import device_config
from registry.loader import parse_registry

C_DIR = Path(__file__).resolve().parents[1] / "producer" / "c"
GOALS = {"small prime": 5e6, "GF(2^128)": 1e6}

AUDIT_REGISTRY = """\
metrics:
  - name: screens
    description: OCMS+RR over categories
    owner: bench
    categories: [home, search, feed, settings, profile, onboarding, deep_link, wallet, maps, help]
    epsilon: 2
  - name: colors
    description: direct randomized response
    owner: bench
    categories: [red, green, blue, cyan, magenta, yellow, black, white]
    mechanism: direct
    epsilon: 2
"""


def throughput(seconds: float) -> None:
    done = subprocess.run([str(C_DIR / "build" / "ocms-c-bench"), str(seconds)], capture_output=True, text=True,
                          check=True)
    print(f"{'field kind':48} {'randomness':26} {'clmul':9} {'reports/s (one core)':>22}  goal")
    for line in done.stdout.splitlines():
        case, randomness, clmul, reports, cpu = line.split("\t")
        rate = int(reports) / float(cpu)
        goal = next((g for key, g in GOALS.items() if case.startswith(key) or key in case), None)
        verdict = ""
        if goal is not None and "buffer" in randomness and clmul != "portable":
            verdict = f">= {goal / 1e6:g} M/s: {'met' if rate >= goal else 'NOT MET'}"
        print(f"{case:48} {randomness:26} {clmul:9} {rate:22,.0f}  {verdict}")


def sizes() -> None:
    for target in ("libocms_client.a", "libocms_client.so"):
        done = subprocess.run(["size", "-t" if target.endswith(".a") else "-A", str(C_DIR / target)],
                              capture_output=True, text=True, check=True)
        if target.endswith(".a"):
            lines = done.stdout.strip().splitlines()
            print(f"size {target} (text data bss per object):")
            for row in lines[1:]:
                text, data, bss, _, _, name = row.split(None, 5)
                print(f"  {name.split(' (ex')[0]:14} text {int(text):7,}  data {int(data):5,}  bss {int(bss):5,}")
        else:
            text = sum(int(row.split()[1]) for row in done.stdout.splitlines()
                       if row.startswith((".text", ".rodata", ".plt")))
            print(f"{target}: .text + .rodata + .plt = {text:,} bytes; file {os.path.getsize(C_DIR / target):,} bytes")


def size_os(directory: Path) -> None:
    """The library's text when built for size (-Os), as firmware would build it."""
    objects = []
    for source in sorted((C_DIR / "src").glob("*.c")):
        obj = directory / (source.stem + ".o")
        subprocess.run(["cc", "-std=c99", "-Os", "-I", str(C_DIR / "include"), "-c", str(source), "-o", str(obj)],
                       check=True)
        objects.append(str(obj))
    done = subprocess.run(["size", "-t", *objects], capture_output=True, text=True, check=True)
    total = done.stdout.strip().splitlines()[-1].split()
    print(f"libocms_client built with -Os: text {int(total[0]):,} bytes, data {int(total[1]):,}, bss {int(total[2]):,}")


def audit(trials: int, directory: Path) -> int:
    registry = parse_registry(AUDIT_REGISTRY)
    config = directory / "device-config.json"
    config.write_text(json.dumps(device_config(registry)))
    failures = 0
    print(f"black-box audit: {trials:,} reports per input from ocms-report-c (OS CSPRNG), Clopper-Pearson alpha 0.01")
    print(f"{'case':52} {'claimed':>7} {'eps_lb':>8} {'% claim':>8}  verdict")
    for metric, x1, x2 in (("screens", 3, 7), ("colors", 1, 5)):
        version = registry.metric(metric).latest
        params, names = version.params, version.value_names
        leaky_t = keep_threshold(type(params).build(params.epsilon * 1.25, params.dictionary_size,
                                                    hash_range=params.hash_range, field=params.field,
                                                    mechanism=params.mechanism))
        for leaky in (False, True):
            start = time.perf_counter()
            batches = []
            for x in (x1, x2):
                capture = directory / f"{metric}-{x}-{leaky}.capture"
                if leaky:  # the library with a test parameter struct: T of 1.25 epsilon, claiming epsilon
                    command = {"op": "sample", "metric": metric, "line": json.dumps(names[x]), "n": trials,
                               "out": str(capture), "keep_threshold": str(leaky_t)}
                    lines = json.dumps({"op": "load", "path": str(config)}) + "\n" + json.dumps(command) + "\n"
                    subprocess.run([str(C_DIR / "build" / "ocms-c-driver")], input=lines, capture_output=True,
                                   text=True, check=True)
                else:
                    subprocess.run([str(C_DIR / "ocms-report-c"), "--config", str(config), "--metric", metric,
                                    "--out", str(capture)], input=(json.dumps(names[x]) + "\n") * trials,
                                   capture_output=True, text=True, check=True)
                batches.append(read_report_batch(capture, params))
                capture.unlink()
            result = audit_batches(params, x1, x2, *batches, alpha=0.01)
            label = f"{'LEAKY (T of 1.25 eps) ' if leaky else ''}{params.mechanism} eps={params.epsilon:g} m={params.hash_range}"
            if leaky:
                verdict = "caught (bound > eps)" if result.leaks else "NOT CAUGHT"
                failures += not result.leaks
            else:
                ok = not result.leaks and result.fraction_of_claim >= 0.9
                verdict = "ok" if ok else ("LEAK" if result.leaks else "MIS-CALIBRATED")
                failures += not ok
            print(f"{label:52} {result.claimed_epsilon:7.3f} {result.epsilon_lower_bound:8.4f} "
                  f"{100 * result.fraction_of_claim:7.1f}%  {verdict}  ({time.perf_counter() - start:.0f} s)")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="CPU seconds per throughput case")
    ap.add_argument("--audit-trials", type=int, default=1_000_000, help="reports per input of the audit (0: skip)")
    args = ap.parse_args()
    subprocess.run(["make", "-s", "-C", str(C_DIR), "all", "test-tools"], check=True)
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores; "
          f"PCLMUL: {'yes' if 'pclmulqdq' in Path('/proc/cpuinfo').read_text() else 'no'}")
    throughput(args.seconds)
    sizes()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="ocms-bench-c-") as tmp:
        size_os(Path(tmp))
        if args.audit_trials:
            failures = audit(args.audit_trials, Path(tmp))
        print("audit: all checks passed" if failures == 0 else f"audit: {failures} check(s) FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
