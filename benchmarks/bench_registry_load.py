"""What hostile and very large registry files cost ``ocms registry check`` (issue 24, section 4).

Each case writes a registry file (and, where the case needs one, a tracked file or a FIFO) in a
temporary directory, runs ``python -m ocms registry check FILE`` in a child process and
prints its exit status, wall time, CPU time and peak memory (the child's ru_maxrss, from wait4),
and the first line it printed. Goals: every hostile file refused with file:line and exit 2 within
10 s; 10^6 categories checked in <= 10 s and <= 500 MB. Workers and collectors load a registry the
same way at start-up (registry.load_registry).

    .venv/bin/python -m benchmarks.bench_registry_load [--only NAME,...] [--timeout 60]

Not a test: times depend on the machine (and on its load: CPU time is printed beside wall time).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HEAD = "metrics:\n  - name: m\n    description: d\n    owner: o\n"
CATEGORIES = 1_000_000


def _names(n: int) -> str:
    return ", ".join(f"c{i}" for i in range(n))


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def case_deep_flow(d: Path) -> Path:
    return _write(d, "deep_flow.yaml", HEAD + "    epsilon: 2\n    categories: " + "[" * 100_000 + "]" * 100_000 + "\n")


def case_deep_block(d: Path) -> Path:
    return _write(d, "deep_block.yaml", HEAD + "    epsilon: 2\n    categories:\n      " + "- " * 100_000 + "x\n")


def case_huge_int_epsilon(d: Path) -> Path:
    return _write(d, "huge_int.yaml", HEAD + "    categories: [a, b]\n    epsilon: " + "9" * 5_000 + "\n")


def case_huge_version(d: Path) -> Path:
    return _write(d, "huge_version.yaml", HEAD + "    categories: [a, b]\n    epsilon: 2\n    versions:\n"
                  "      - version: " + "9" * 5_000 + "\n")


def case_huge_duration(d: Path) -> Path:
    return _write(d, "huge_duration.yaml", HEAD + "    categories: [a, b]\n    epsilon: 2\n    bucket: " + "9" * 5_000
                  + "s\n    retention: " + "9" * 5_000 + "\n")


def case_huge_power(d: Path) -> Path:
    return _write(d, "huge_power.yaml", HEAD + "    integers: '9999^9999'\n    epsilon: 2\n")


def case_tracked_dev_zero(d: Path) -> Path:
    return _write(d, "dev_zero.yaml", HEAD + "    strings: true\n    epsilon: 2\n    tracked: {file: /dev/zero}\n")


def case_fifo_registry(d: Path) -> Path:
    path = d / "fifo.yaml"
    os.mkfifo(path)
    return path


def case_tracked_fifo(d: Path) -> Path:
    os.mkfifo(d / "values.jsonl")
    return _write(d, "tracked_fifo.yaml", HEAD + "    strings: true\n    epsilon: 2\n    tracked: {file: values.jsonl}\n")


def case_tracked_blank_lines(d: Path) -> Path:
    (d / "blank.jsonl").write_bytes(b"\n" * 3_000_000)
    return _write(d, "tracked_blank.yaml", HEAD + "    strings: true\n    epsilon: 2\n    tracked: {file: blank.jsonl}\n")


def case_epsilon_subnormal(d: Path) -> Path:
    return _write(d, "epsilon_tiny.yaml", HEAD + "    categories: [a, b]\n    epsilon: 1e-320\n")


def case_categories_1e6_flow(d: Path) -> Path:
    return _write(d, "categories_flow.yaml", HEAD + "    epsilon: 2\n    tracked: [c0, c1]\n    categories: ["
                  + _names(CATEGORIES) + "]\n")


def case_categories_1e6_block(d: Path) -> Path:
    body = "".join(f"      - c{i}\n" for i in range(CATEGORIES))
    return _write(d, "categories_block.yaml", HEAD + "    epsilon: 2\n    tracked: [c0, c1]\n    categories:\n" + body)


def case_categories_1e6_versions_1000(d: Path) -> Path:
    versions = "".join(f"      - version: {v}\n" for v in range(1, 1001))
    return _write(d, "categories_versions.yaml", HEAD + "    epsilon: 2\n    tracked: [c0, c1]\n    categories: ["
                  + _names(CATEGORIES) + "]\n    versions:\n" + versions)


def case_categories_adding_versions(d: Path) -> Path:
    versions = "".join(f"      - version: {v}\n" + (f"        add_categories: [n{v}]\n" if v > 1 else "")
                       for v in range(1, 1001))
    return _write(d, "categories_adding.yaml", HEAD + "    epsilon: 2\n    tracked: [c0, c1]\n    categories: ["
                  + _names(500_000) + "]\n    versions:\n" + versions)


def case_tracked_file_1e6(d: Path) -> Path:
    (d / "tracked.jsonl").write_text("".join(f'"v{i}"\n' for i in range(1_000_000)), encoding="utf-8")
    return _write(d, "tracked_file.yaml", HEAD + "    strings: true\n    epsilon: 2\n    tracked: {file: tracked.jsonl}\n")


def case_16mb_tiny_values(d: Path) -> Path:
    """Just under the 16 MiB bound: 8 million one-letter values (the refusal must not cost a parse of all)."""
    text = HEAD + "    epsilon: 2\n    categories: ["
    count = (16 * 2**20 - len(text) - 4) // 2
    return _write(d, "tiny_values.yaml", text + "a," * count + "a]\n")


def case_over_16mb(d: Path) -> Path:
    return _write(d, "over_16mb.yaml", HEAD + "    description: " + "x" * (16 * 2**20) + "\n")


def case_unknown_keys(d: Path) -> Path:
    keys = "".join(f"    k{i}: 1\n" for i in range(500_000))
    return _write(d, "unknown_keys.yaml", HEAD + "    categories: [a, b]\n    epsilon: 2\n" + keys)


def case_merge_bomb(d: Path) -> Path:
    base = "x-base: &b {" + ", ".join(f"k{i}: 1" for i in range(100_000)) + "}\n"
    metrics = "".join(f"  - <<: *b\n    name: m{i}\n" for i in range(100))
    return _write(d, "merge_bomb.yaml", base + "metrics:\n" + metrics)


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def run_check(path: Path, timeout: float) -> dict:
    """``registry check`` in a child; wall and CPU seconds and peak RSS from wait4 (this child only)."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "ocms", "registry", "check", str(path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    output: dict = {}
    readers = [threading.Thread(target=lambda s=stream, k=key: output.__setitem__(k, s.read()))
               for key, stream in (("out", child.stdout), ("err", child.stderr))]
    for reader in readers:
        reader.start()
    killer = threading.Timer(timeout, child.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(child.pid, 0)
    finally:
        killer.cancel()
    for reader in readers:
        reader.join()
    child.returncode = os.waitstatus_to_exitcode(status)
    text = (output.get("err", b"") + output.get("out", b"")).decode("utf-8", "replace")
    return {"status": child.returncode, "wall": time.perf_counter() - started, "cpu": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024, "first_line": text.strip().splitlines()[0] if text.strip() else "",
            "traceback": "Traceback" in text}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated case names (default: all)")
    parser.add_argument("--timeout", type=float, default=60.0, help="kill a check after this many seconds")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(CASES)
    print(f"ocms registry check on hostile and large files (load average {os.getloadavg()[0]:.2f}; "
          "goal: exit 2 with file:line within 10 s; 10^6 categories <= 10 s, <= 500 MB)")
    print(f"{'case':<34}{'file MB':>8}{'exit':>5}{'wall s':>8}{'cpu s':>7}{'peak MB':>9}  first line")
    with tempfile.TemporaryDirectory(prefix="ocms-bench-registry-") as directory:
        for name in names:
            case_dir = Path(directory) / name
            case_dir.mkdir()
            path = CASES[name](case_dir)
            size = path.stat().st_size / 2**20 if path.is_file() else 0.0
            result = run_check(path, args.timeout)
            line = result["first_line"].replace(str(case_dir) + "/", "")
            print(f"{name:<34}{size:>8.1f}{result['status']:>5}{result['wall']:>8.2f}{result['cpu']:>7.2f}"
                  f"{result['rss_mb']:>9.0f}  {'TRACEBACK ' if result['traceback'] else ''}{line[:110]}")
            for item in case_dir.iterdir():
                item.unlink()


if __name__ == "__main__":
    main()
