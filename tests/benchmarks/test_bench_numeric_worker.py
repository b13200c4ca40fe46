"""benchmarks.bench_numeric_worker: its registry is the one it describes and its frames are what the worker reads."""

from __future__ import annotations

import pytest

from benchmarks import bench_numeric_worker as bench
from cms_core import wire
from registry import parse_registry as registry_from_text


def test_the_registry_holds_a_frequency_metric_and_two_numeric_ones_at_epsilon_2():
    registry = registry_from_text(bench.registry_text())
    domains = {name: registry.metric(name).live_versions[-1] for name in bench.METRICS}
    assert domains["frequency"].numeric is None and domains["frequency"].params.dictionary_size == 105
    assert domains["numeric_21"].numeric.buckets == 21 and domains["numeric_40"].numeric.buckets == 40
    assert {v.params.epsilon for v in domains.values()} == {2.0}


def test_frames_decode_with_the_metrics_parameters_and_hold_every_report():
    version = registry_from_text(bench.registry_text()).metric("frequency").live_versions[-1]
    frames, counts = bench.payloads_of(version, 2_500, seed=1)
    assert len(frames) == 3 and counts == [1_000, 1_000, 500]
    batches = [wire.decode_message(frame, {version.fingerprint: version.params})[1] for frame in frames]
    assert [len(b) for b in batches] == counts


def test_a_trees_devices_report_every_level_framed_with_its_parameters():
    """Issue 40: ``mechanism: auto`` picks a hierarchical histogram for both numeric metrics at epsilon 2; their
    frames spread the reports over the levels, each decoded with its level's parameters (none with the finest
    level's alone, which measured only that level before)."""
    version = registry_from_text(bench.registry_text()).metric("numeric_40").live_versions[-1]
    assert version.hierarchy is not None
    frames, counts = bench.payloads_of(version, 6_000, seed=1)
    by_fingerprint = {level.fingerprint: level.params for level in version.tree_levels()}
    seen = {}
    for frame, count in zip(frames, counts):
        params, batch = wire.decode_message(frame, by_fingerprint)
        assert len(batch) == count
        seen[params.binding] = seen.get(params.binding, 0) + count
    assert sum(seen.values()) == 6_000 and set(seen) == {level.binding for level in version.tree_levels()}
    assert min(seen.values()) > 6_000 / len(seen) * 0.8  # uniform levels: ~3,000 each at 2 levels


@pytest.mark.parametrize("argv, message", [(["--reports", "10"], "--reports must be >= 1,000"),
                                           (["--rounds", "0"], "--rounds must be >= 1")])
def test_bad_flags_are_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert message in capsys.readouterr().err


def test_a_hybrid_means_devices_send_its_part_beside_the_trees_levels():
    """The configuration with a Hybrid mean (issue 40): 1 device in ``parts`` sends the mean's part, framed with its
    carrier and counted as the metric's; the others a level each (``parts`` = the tree's levels + 1)."""
    version = registry_from_text(bench.registry_text()).metric("numeric_21_mean").live_versions[-1]
    assert version.mean is not None and version.hierarchy is not None
    parts = version.mean.parts
    assert parts == version.hierarchy.height + 1
    frames, counts = bench.payloads_of(version, 12_000, seed=2)
    by_fingerprint = {p.fingerprint: p.params for p in (*version.tree_levels(), *version.mean_parts())}
    seen = {}
    for frame, count in zip(frames, counts):
        params, batch = wire.decode_message(frame, by_fingerprint)
        assert len(batch) == count
        seen[params.binding] = seen.get(params.binding, 0) + count
    assert sum(seen.values()) == 12_000 and "numeric_21_mean@1/mean" in seen and len(seen) == parts
    for binding, n in seen.items():  # uniform parts, then uniform levels: binomial(12,000, 1 / parts) each
        assert abs(n - 12_000 / parts) <= 4.5 * (12_000 * (1 / parts) * (1 - 1 / parts)) ** 0.5, binding
