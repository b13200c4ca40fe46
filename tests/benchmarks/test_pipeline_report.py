"""benchmarks/experiments/pipeline.py without running a worker: the verdicts and the report.

The measurements themselves need a broker and minutes of benchmarking (``make
results``); here a synthetic payload checks that the issue-4 targets are judged
at the right rows and that every measured figure reaches pipeline.md.
"""

from __future__ import annotations

import pytest

from benchmarks.experiments import pipeline

TRACKED = (100, 1000)


def payload(single_rate: float = 12_000.0, framed_rate: float = 900_000.0, p99_s: float = 1.1) -> dict:
    throughput, latency = [], []
    for tracked in TRACKED:
        for frame, n in pipeline.bench_worker.THROUGHPUT_RUNS:
            rate = single_rate if frame == 1 else framed_rate * (2 if frame == 1000 else 1)
            if tracked != 1000:
                rate = 1.0  # other tracked sizes must not decide the issue-4 verdicts
            throughput.append({"frame": frame, "tracked": tracked, "reports": n, "seconds": n / rate,
                               "produce_seconds": 0.1, "reports_per_s": rate, "rss_mib": 90.0 + frame / 1000})
        for frame, rate, _ in pipeline.bench_worker.LATENCY_RUNS:
            latency.append({"frame": frame, "tracked": tracked, "rate": rate, "reports": rate * 20,
                            "p50_s": p99_s / 2, "p99_s": p99_s if tracked == 1000 else 99.0, "max_s": p99_s + 0.1})
    memory = {"minutes": 10, "rate": 5000.0, "tracked": 1000,
              "series": [{"t_s": 30.0 * i, "rss_mib": 80.0 + (i % 3), "counted": 150_000 * i} for i in range(21)]}
    return {"config": {"tracked_sizes": list(TRACKED)}, "machine": "machine: test", "throughput": throughput,
            "latency": latency, "memory": memory, "goals": pipeline.goals(throughput, latency), "seconds": 1.0}


def verdicts(p: dict) -> list[bool]:
    return [g["met"] for g in p["goals"]]


def test_all_targets_met():
    assert verdicts(payload()) == [True, True, True]


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"single_rate": 9_999.0}, [True, False, True]),
    ({"framed_rate": 199_999.0}, [False, True, True]),
    ({"p99_s": 2.01}, [True, True, False]),
])
def test_each_target_can_fail(kwargs, expected):
    assert verdicts(payload(**kwargs)) == expected


def test_the_report_carries_every_measurement():
    p = payload(single_rate=12_345.0)
    text = pipeline.markdown(p, plots=False)
    for r in p["throughput"]:
        assert f"{r['reports_per_s']:,.0f}" in text
    assert "| 1,000 | 1 | 2,000 | 550 | 1100 | 1200 |" in text
    for s in p["memory"]["series"]:
        assert f"| {s['t_s']:.0f} | {s['rss_mib']:.1f} | {s['counted']:,} |" in text
    assert "81 µs per message" in text  # 1e6 / 12,345
    assert "**met**" in text and "**not met**" not in text
    assert "pipeline_memory.png" not in text
