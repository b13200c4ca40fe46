"""benchmarks/bench_checkpoint_plan.py: bad options exit 2 naming the flag, and a small run prints a line per
metric count (the speeds are not checked)."""

from __future__ import annotations

import pytest

from benchmarks import bench_checkpoint_plan


@pytest.mark.parametrize("argv, names", [
    (["--metrics", "0"], ["--metrics", ">= 1"]),
    (["--metrics", "20,x"], ["--metrics", "'20,x'"]),
    (["--rounds", "0"], ["--rounds must be >= 1"]),
    (["--metrics", "300", "--reports", "20000"], ["--reports must be >= 300,000", "20,000"]),
    (["--kinds", "floats"], ["--kinds", "categories"]),
])
def test_a_bad_option_exits_2_naming_what_to_fix(argv, names, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_checkpoint_plan.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert all(name in err for name in names), err


def test_a_small_run_prints_each_metric_count(capsys):
    bench_checkpoint_plan.main(["--metrics", "3,6", "--reports", "12000", "--rounds", "1"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("one checkpoint's plan") and len(out) == 3
    assert "3 metrics: " in out[1] and "6 metrics: " in out[2] and all("table keys" in line for line in out[1:])
