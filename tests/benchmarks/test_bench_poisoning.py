"""benchmarks/bench_poisoning.py runs the attack end to end (broker, worker, collector with two tokens) and
its formula check holds: a small run (3,000 honest reports per case, seeded) exits 0 with every case inside
its interval, and leaves no temporary directory behind."""

from __future__ import annotations

import pytest

from benchmarks import bench_poisoning


@pytest.mark.integration
def test_the_attack_through_the_collector_matches_the_formula(capsys):
    assert bench_poisoning.main(["--reports", "3000"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("ocms ", "direct "))]
    assert len(rows) == len(bench_poisoning.CASES)
    assert all(row.split()[-2] == "yes" for row in rows), out
    assert "uploaded" in out and "(two tokens)" in out
