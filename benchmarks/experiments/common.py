"""Shared helpers of the experiment scripts: seeds, machine description, markdown, plots.

Nothing here is statistics; see ``paper.py`` and ``peers.py``.
"""

from __future__ import annotations

import importlib.util
import math
import os
import platform
import sys
import time
from contextlib import contextmanager

import numpy as np

from benchmarks.bench_decode import best_of  # noqa: F401  (re-exported: one timing helper for all benchmarks)

#: Base of every seed in the experiments (results are reproducible for a fixed value).
BASE_SEED = 20_240_601


def rng_for(*keys: int) -> np.random.Generator:
    """An independent, reproducible generator per experiment cell (order of runs does not matter)."""
    return np.random.default_rng(np.random.SeedSequence([BASE_SEED, *keys]))


def seed_int(*keys: int) -> int:
    """A 32-bit integer seed (for libraries that take ints: random.seed, np.random.seed)."""
    return int(np.random.SeedSequence([BASE_SEED, *keys]).generate_state(1)[0])


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_times() -> tuple[int, int] | None:
    """(steal, total) CPU ticks of the whole machine from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat", encoding="utf-8") as fh:
            fields = [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (fields[7], sum(fields)) if len(fields) == 8 else None


def steal_fraction(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Share of CPU time the hypervisor gave to other guests between two ``cpu_times()``.

    Why: this VM's timings move by 2-4x with the host's load; the share stolen during a run
    says whether a slow figure is the code or the machine."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def machine_info() -> dict:
    """CPU model, usable cores, memory, Python / numpy / kernel backend versions."""
    from cms_core import kernel

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem_gib = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_gib = int(line.split()[1]) / 2**20
    except OSError:
        pass
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            text = fh.read()
        wanted = ("avx2", "avx512f", "pclmulqdq")
        flags = ", ".join(f for f in wanted if f" {f}" in text)
    except OSError:
        pass
    return {
        "cpu": cpu_model(),
        "cores": cores,
        "cpu_flags": flags,
        "memory_gib": round(mem_gib, 1) if mem_gib else None,
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "decode_backend": kernel.BACKEND,
        "decode_threads_default": kernel.default_threads(),
    }


def have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def pyplot():
    """matplotlib.pyplot with the Agg backend, or None when matplotlib is not installed."""
    if not have("matplotlib"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str) -> None:
    # No timestamp / version in the PNG metadata: regenerating gives the same bytes for the same numbers.
    fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"Software": None})


@contextmanager
def timer(store: dict, key: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        store[key] = time.perf_counter() - start


def fmt_sci(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits - 1}e}"


def fmt_num(x: float | None, digits: int = 3) -> str:
    """Compact human number: 1.23 M, 4.5 k, 0.0123."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    ax = abs(x)
    for scale, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if ax >= scale:
            return f"{x / scale:.{digits}g}{suffix}"
    return f"{x:.{digits}g}"


def fmt_time(seconds: float | None) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "—"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.1f} ms"


def md_table(headers: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A GitHub markdown table; ``align`` is one char per column (l, r, c)."""
    align = align or "l" + "r" * (len(headers) - 1)
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(marks[a] for a in align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_markdown(info: dict) -> str:
    rows = [
        ["CPU", f"{info['cpu']} ({info['cores']} usable cores; {info['cpu_flags'] or 'no AVX2/AVX-512 flags seen'})"],
        ["memory", f"{info['memory_gib']} GiB"],
        ["OS", info["os"]],
        ["Python / numpy", f"{info['python']} / {info['numpy']}"],
        ["decode kernel", f"{info['decode_backend']} (default threads {info['decode_threads_default']})"],
    ]
    return md_table(["", ""], rows, "ll")
