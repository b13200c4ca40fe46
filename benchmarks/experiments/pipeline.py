"""C. The pipeline end to end: worker reports/s, produce-to-visible latency, memory.

Runs ``benchmarks/bench_worker.py``'s scenarios (embedded Tansu broker, one
``ocms worker`` process with 4 partitions, eps = 2, d = 10,000) for every frame
size (1, 100, 1000 reports per message) and tracked-set size (100, 1k, 10k),
then the memory run: a simulated fleet sends frames of 100 at a steady rate for
ten minutes while the worker's RSS is sampled. Writes pipeline.md,
pipeline.json and pipeline_memory.png.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks import bench_worker

from .common import cpu_model, md_table, pyplot, save_figure

#: Issue 4's targets for one worker on this machine (1,000 tracked values).
TARGET_FRAMED_REPORTS_PER_S = 200_000
TARGET_SINGLE_REPORTS_PER_S = 10_000
TARGET_P99_S = 2.0


@dataclasses.dataclass(frozen=True)
class Config:
    tracked_sizes: tuple[int, ...] = (100, 1_000, 10_000)
    scale: float = 1.0  # multiplies the reports of bench_worker's throughput and latency runs
    memory_minutes: float = 10.0
    memory_rate: float = 5_000.0
    memory_samples: int = 20


FULL = Config()
QUICK = Config(tracked_sizes=(100, 1_000), scale=0.05, memory_minutes=0.25, memory_rate=2_000.0, memory_samples=3)


def run(cfg: Config, out_dir: str, *, plots: bool = True, log=print) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    from infra.broker import EmbeddedBroker

    started = time.perf_counter()
    throughput, latency = [], []
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        bootstrap, log_dir = broker.bootstrap_servers, Path(tmp)
        for tracked in cfg.tracked_sizes:
            for frame, n in bench_worker.THROUGHPUT_RUNS:
                r = bench_worker.throughput(bootstrap, log_dir, max(frame, int(n * cfg.scale)), frame, tracked)
                log(f"[pipeline] tracked {tracked:>6,}  frames of {frame:>4}: {r['reports_per_s']:,.0f} reports/s "
                    f"(CPU steal {bench_worker.steal_text(r)})")
                throughput.append(r)
            for frame, rate, seconds in bench_worker.LATENCY_RUNS:
                n = max(frame, int(rate * seconds * cfg.scale))
                r = bench_worker.latency(bootstrap, log_dir, n, frame, rate, tracked)
                log(f"[pipeline] tracked {tracked:>6,}  frames of {frame:>4} at {rate:,}/s: "
                    f"p50 {r['p50_s'] * 1000:.0f} ms, p99 {r['p99_s'] * 1000:.0f} ms (CPU steal {bench_worker.steal_text(r)})")
                latency.append(r)
        memory = bench_worker.memory_run(bootstrap, log_dir, cfg.memory_minutes, cfg.memory_rate,
                                         samples=cfg.memory_samples, log=lambda line: log("[pipeline] " + line))
    payload = {
        "config": dataclasses.asdict(cfg),
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs",
        "throughput": throughput,
        "latency": latency,
        "memory": memory,
        "goals": goals(throughput, latency),
        "seconds": time.perf_counter() - started,
    }
    with open(os.path.join(out_dir, "pipeline.json"), "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=1)
    if plots:
        plot_memory(memory, os.path.join(out_dir, "pipeline_memory.png"))
    with open(os.path.join(out_dir, "pipeline.md"), "w", encoding="utf-8") as fh:
        fh.write(markdown(payload, plots))
    return payload


def goals(throughput: list[dict], latency: list[dict]) -> list[dict]:
    """Issue 4's throughput and latency targets, checked at 1,000 tracked values."""
    at_1k = [r for r in throughput if r["tracked"] == 1000]
    framed = [r for r in at_1k if r["frame"] > 1]
    single = [r for r in at_1k if r["frame"] == 1]
    p99 = [r for r in latency if r["tracked"] == 1000]
    out = []
    if framed:
        worst = min(framed, key=lambda r: r["reports_per_s"])
        out.append({"goal": f">= {TARGET_FRAMED_REPORTS_PER_S:,} reports/s with frames",
                    "met": worst["reports_per_s"] >= TARGET_FRAMED_REPORTS_PER_S,
                    "measured": ", ".join(f"frames of {r['frame']}: {r['reports_per_s']:,.0f}" for r in framed)})
    if single:
        out.append({"goal": f">= {TARGET_SINGLE_REPORTS_PER_S:,} reports/s with one report per message",
                    "met": single[0]["reports_per_s"] >= TARGET_SINGLE_REPORTS_PER_S,
                    "measured": f"{single[0]['reports_per_s']:,.0f}"})
    if p99:
        out.append({"goal": f"p99 produce-to-visible <= {TARGET_P99_S:g} s",
                    "met": max(r["p99_s"] for r in p99) <= TARGET_P99_S,
                    "measured": ", ".join(f"frames of {r['frame']}: {r['p99_s']:.2f} s" for r in p99)})
    return out


def goals_table(checked: list[dict], first_header: str = "goal") -> str:
    return md_table([first_header, "verdict", "measured"],
                    [[g["goal"], "**met**" if g["met"] else "**not met**", g["measured"]] for g in checked], "lll")


def plot_memory(memory: dict, path: str) -> None:
    plt = pyplot()
    if plt is None:
        return
    series = memory["series"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot([s["t_s"] / 60 for s in series], [s["rss_mib"] for s in series], marker="o")
    ax.set_xlabel("minutes")
    ax.set_ylabel("worker RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"ocms worker memory: {memory['rate']:,.0f} reports/s in frames of 100, "
                 f"{memory['tracked']:,} tracked")
    ax.grid(alpha=0.3)
    save_figure(fig, path)
    plt.close(fig)


def markdown(payload: dict, plots: bool) -> str:
    by_key = {(r["tracked"], r["frame"]): r for r in payload["throughput"]}
    lat_key = {(r["tracked"], r["frame"]): r for r in payload["latency"]}
    tracked_sizes = payload["config"]["tracked_sizes"]
    frames = [f for f, _ in bench_worker.THROUGHPUT_RUNS]
    tp_rows = [[f"{t:,}", *[f"{by_key[t, f]['reports_per_s']:,.0f}" for f in frames],
                *[f"{by_key[t, f]['rss_mib']:.0f}" for f in frames],
                " / ".join(bench_worker.steal_text(by_key[t, f]) for f in frames)] for t in tracked_sizes]
    lat_rows = []
    for t in tracked_sizes:
        for frame, rate, _ in bench_worker.LATENCY_RUNS:
            r = lat_key[t, frame]
            lat_rows.append([f"{t:,}", str(frame), f"{rate:,}", f"{r['p50_s'] * 1000:.0f}", f"{r['p99_s'] * 1000:.0f}",
                             f"{r['max_s'] * 1000:.0f}", bench_worker.steal_text(r)])
    memory = payload["memory"]
    series = memory["series"]
    single = by_key.get((1000, 1)) or by_key[tracked_sizes[0], 1]
    single_us = 1e6 / single["reports_per_s"]
    after_first = [s["rss_mib"] for s in series[len(series) // 4:]] or [series[-1]["rss_mib"]]
    lines = [
        "# C. The pipeline end to end",
        "",
        f"{payload['machine']}; embedded broker (Tansu, memory storage), producer, and one `ocms worker` "
        "(4 partitions, eps = 2, d = 10,000, the first D dictionary values tracked) all on this machine. "
        "Regenerated by `python -m benchmarks.experiments --only pipeline` (the same scenarios as "
        "`benchmarks/bench_worker.py`). Zipf(1.1) values, privatized offline before the clock starts.",
        "",
        "## Throughput",
        "",
        "Messages are produced as fast as one aiokafka producer can; the clock stops when the worker's API "
        "shows every report counted, so a figure is what one worker sustains end to end with the broker and "
        "the producer competing for the same 2 cores. Reports per message: 1,000 / 100 / 1; reports sent: "
        + " / ".join(f"{by_key[tracked_sizes[0], f]['reports']:,}" for f in frames) + ".",
        "",
        md_table(["tracked D", *[f"reports/s, frames of {f}" for f in frames],
                  *[f"RSS MiB ({f})" for f in frames], "CPU steal"], tp_rows),
        "",
        "## Produce-to-visible latency",
        "",
        "Messages produced at a steady rate; a poller reads the counted total from the API every 20 ms, and a "
        "message's latency is the first poll whose total covers it (so latencies carry up to 20 ms of polling "
        "and include the micro-batch age bound, 0.2 s by default, and the changelog round trip to the view).",
        "",
        md_table(["tracked D", "reports / message", "reports/s", "p50 ms", "p99 ms", "max ms", "CPU steal"], lat_rows),
        "",
        "CPU steal: the share of the machine's CPU time the hypervisor gave to other guests during the run "
        "(/proc/stat); figures taken under heavy steal understate the code.",
        "",
        "## Memory over a long run",
        "",
        f"A simulated fleet (`ocms simulate`) sends {memory['rate']:,.0f} reports/s in frames of 100 for "
        f"{memory['minutes']:g} minutes ({memory['tracked']:,} tracked; 60 s buckets, so the worker holds a new "
        f"bucket key per partition every minute). Worker RSS from /proc:",
        "",
        md_table(["t (s)", "RSS MiB", "reports counted"],
                 [[f"{s['t_s']:.0f}", f"{s['rss_mib']:.1f}", f"{s['counted']:,}"] for s in series]),
        "",
        f"RSS after the first quarter of the run: {min(after_first):.1f} to {max(after_first):.1f} MiB "
        f"(start {series[0]['rss_mib']:.1f} MiB, end {series[-1]['rss_mib']:.1f} MiB).",
        "",
    ]
    if plots:
        lines += ["![worker memory](pipeline_memory.png)", ""]
    lines += [
        "## Targets (one worker, 1,000 tracked)",
        "",
        goals_table(payload["goals"]),
        "",
        "Notes:",
        "",
        f"- Single-report messages are bounded by per-message work (fetch, validation, bookkeeping: "
        f"{single_us:.0f} µs per message end to end at 1,000 tracked, on a machine the broker and the producer "
        "share). The worker takes source messages straight from Faust's consumer (`agents/intake.py`); through "
        "Faust's per-message event and stream path the same benchmark measured 3,860 reports/s (commit 5408917).",
        "- Frames amortize that work over their reports, so frames of 100 and 1,000 are limited by the decode "
        "kernel and the broker. The tracked-set size D changes the decode work (O(n·D) match counting) and the "
        "size of each table value (D int64 counts per key).",
        "- Latency on the embedded broker: Tansu holds a fetch that found no data for its whole max wait, so "
        "the worker sets a 100 ms wait there (the embedded broker profile's `fetch_max_wait_ms`, "
        "`infra.kafka`); with Faust's fixed 1.5 s the same matrix measured p99 1.02-2.26 s (commit 1221684). "
        "The rest is the micro-batch age bound "
        "(0.2 s) and the changelog round trip to every worker's view.",
        "- A 2-core VM shared with the broker and the producer: timings vary by a few tens of percent run to run.",
        "",
        f"Run time of this part: {payload['seconds']:.0f} s.",
        "",
    ]
    return "\n".join(lines)
