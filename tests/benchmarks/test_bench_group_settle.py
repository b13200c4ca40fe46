"""benchmarks/bench_group_settle: its registry spreads the metrics over every shard, and bad options exit 2
naming them (the benchmark itself runs workers for minutes: docs/evidence.md)."""

import pytest

from agents.catalog import Catalog
from agents.view import CountsView
from benchmarks import bench_group_settle
from registry import load_registry


def test_the_registry_puts_metrics_in_every_shard(tmp_path):
    path = tmp_path / "registry.yaml"
    path.write_text(bench_group_settle.registry_text(8), encoding="utf-8")
    layout = Catalog(load_registry(path), CountsView()).state_layout(bench_group_settle.PARTITIONS)
    shards = {layout.shard_of_metric(f"settle_{i}") for i in range(8)}
    assert shards == set(range(bench_group_settle.PARTITIONS))  # every worker holds a share that is queried


def test_an_unknown_fault_exits_2_naming_it(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_group_settle.main(["--faults", "join,reboot"])
    assert exit_.value.code == 2 and "unknown faults: reboot" in capsys.readouterr().err
