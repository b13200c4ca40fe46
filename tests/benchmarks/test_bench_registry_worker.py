"""benchmarks/bench_registry_worker.py's options and the pacing and count check it shares with
bench_worker on librdkafka's mock: bad options exit 2 naming the flag; the pacer never lets a
partition's unread backlog pass what the mock keeps; a count that stops short or passes the total
is an error, not a figure. The speeds are not checked."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from benchmarks import bench_registry_worker, bench_worker
from infra.mock_cluster import MockCluster

pytestmark = pytest.mark.timeout(120)


def test_the_broker_defaults_to_embedded_and_takes_mock():
    assert bench_registry_worker.parse_args([]).broker == "embedded"
    args = bench_registry_worker.parse_args(["--broker", "mock", "--metrics", "300", "--reports", "2000000"])
    assert (args.broker, args.metrics, args.reports, args.kinds) == ("mock", 300, 2_000_000,
                                                                     bench_registry_worker.KINDS)


@pytest.mark.parametrize("argv, names", [
    (["--broker", "kafka"], ["--broker", "embedded", "mock"]),
    (["--metrics", "0"], ["--metrics must be >= 1"]),
    (["--rounds", "0"], ["--rounds must be >= 1"]),
    (["--metrics", "300", "--reports", "20000"], ["--reports must be >= 300,000", "20,000"]),
    (["--kinds", "floats"], ["--kinds", "categories"]),
])
def test_a_bad_option_exits_2_naming_what_to_fix(argv, names, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_registry_worker.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert all(name in err for name in names), err
    assert "Traceback" not in err


def test_the_pacer_keeps_every_partitions_backlog_within_its_limits():
    """Whatever the worker has taken, the messages the pacer lets out beyond those wholly taken hold at
    most the limits on every partition (computed here from the partitioner, independently), and the
    next message is always allowed once all before it are taken (no deadlock)."""
    from aiokafka.partitioner import DefaultPartitioner

    rng = np.random.default_rng(3)
    payloads = [bytes(int(size)) for size in rng.integers(100, 5000, 600)]
    reports = [int(r) for r in rng.integers(1, 1000, 600)]
    pacer = bench_worker.Pacer(lambda: 0, payloads, reports, limit_bytes=60_000, limit_messages=40)
    every = [0, 1, 2, 3]
    partition = [DefaultPartitioner()(bench_worker.message_key(i), every, every) for i in range(len(payloads))]
    through = np.cumsum(reports)
    for taken in itertools.chain([0], rng.integers(0, int(through[-1]), 200), [int(through[-1])]):
        sendable = pacer.room(int(taken))
        read = int(np.sum(through <= taken))  # messages wholly taken
        assert sendable >= min(read + 1, len(payloads))
        if sendable > read + 1:  # beyond the one always allowed, within the limits on every partition
            for p in every:
                ahead = [i for i in range(read, sendable) if partition[i] == p]
                assert sum(len(payloads[i]) for i in ahead) <= 60_000
                assert len(ahead) <= 40
    assert pacer.room(0) < len(payloads)  # negative control: the limits do hold the producer back


def test_the_count_check_refuses_a_short_or_a_long_count():
    bench_worker.wait_counted(lambda: 5, 5, "exact")
    with pytest.raises(bench_worker.CountMismatch, match="counted 4 of the 5 reports .* 1 reports were lost"):
        bench_worker.wait_counted(lambda: 4, 5, "short", stall_seconds=0.2)
    with pytest.raises(bench_worker.CountMismatch, match="counted 6 reports, 1 more than the 5 produced"):
        bench_worker.wait_counted(lambda: 6, 5, "long")


@pytest.mark.integration
@pytest.mark.kafka_mock
def test_a_paced_registry_run_on_the_mock_counts_every_report(tmp_path):
    """Three metrics on the mock (topics created first, the worker with --broker mock), the producer
    paced with limits small enough that it must wait for the worker: every report is counted."""
    path = tmp_path / "registry.yaml"
    path.write_text(bench_registry_worker.registry_text(3), encoding="utf-8")
    payloads, total, _ = bench_registry_worker.registry_payloads(path, 60_000)
    with MockCluster(3) as cluster:
        worker = bench_worker.Worker(cluster.bootstrap_servers, "bench-registry", tmp_path,
                                     metric=("--registry", str(path)), cluster=cluster)
        try:
            worker.wait_healthy(120)
            pacer = bench_worker.Pacer(worker.taken, payloads, [bench_registry_worker.FRAME] * len(payloads),
                                       limit_bytes=64_000, limit_messages=8)
            asyncio.run(bench_worker.produce(cluster.bootstrap_servers, worker.topic, payloads, None, [],
                                             cluster.profile, pacer))
            assert pacer.waited > 0
            bench_worker.wait_counted(worker.view_reports, total, "3 metrics")
        finally:
            worker.stop()
