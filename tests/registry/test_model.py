"""The registry interface others code against: metrics, versions, fingerprints, names."""

from __future__ import annotations

import pytest

from cms_core import OCMSParams, OCMSSketch, ReportBatch, simulate_reports
from cms_core.errors import InvalidValueError
from registry import MetricVersion, UnknownMetricError

from .helpers import load

TEXT = """\
metrics:
  - name: app_launches
    description: Screen the app opens on
    owner: mobile-team
    unit: launches
    categories: [home, search, settings]
    epsilon: 2
    watch: [home, wallet]
    top_k: 3
    min_reports: 50
    bucket: 5m
    retention: 7d
    rollup: {bucket: 1h}
    versions:
      - version: 1
      - version: 2
        epsilon: 1
        add_categories: [wallet]
      - version: 3
        epsilon: 1
        retired: true
        note: never shipped
  - name: twin_a
    description: same numbers as twin_b
    owner: t
    integers: 100
    epsilon: 2
  - name: twin_b
    description: same numbers as twin_a
    owner: t
    integers: 100
    epsilon: 2
  - name: build_id
    description: 64-bit ids
    owner: t
    integers: 2^64
    tracked: ["18446744073709551615", 7]
    watch: ["18446744073709551615"]
    epsilon: 3
  - name: crash
    description: crash signatures
    owner: t
    strings: true
    tracked: [a, "b c", "NO"]
    mode: l2
    epsilon: 4
"""


@pytest.fixture
def reg(tmp_path):
    return load(tmp_path, TEXT)


def test_metrics_and_versions(reg):
    assert [m.name for m in reg.metrics] == ["app_launches", "twin_a", "twin_b", "build_id", "crash"]
    app = reg.metric("app_launches")
    assert (app.description, app.owner, app.unit, app.domain) == ("Screen the app opens on", "mobile-team", "launches",
                                                                  "categories")
    assert [v.version for v in app.versions] == [1, 2, 3]
    assert [v.version for v in app.live_versions] == [1, 2]
    assert app.latest.version == 2 and app.version(3).retired and app.version(3).note == "never shipped"
    v1, v2 = app.version(1), app.version(2)
    assert isinstance(v1, MetricVersion) and v1.metric == "app_launches"
    assert v1.value_names == ("home", "search", "settings")
    assert v2.value_names == ("home", "search", "settings", "wallet")  # appended: existing ids never move
    assert (v1.params.epsilon, v2.params.epsilon) == (2.0, 1.0)
    assert (v1.bucket_seconds, v1.retention_seconds, v1.rollup_seconds, v1.rollup_retention_seconds) == (
        300, 7 * 86400, 3600, 30 * 86400)
    assert (v1.min_reports, v1.top_k) == (50, 3)
    assert v1.watch == ("home",) and v2.watch == ("home", "wallet")  # wallet exists from version 2 on
    assert v2.watch_indices() == (0, 3)
    with pytest.raises(UnknownMetricError, match="no version 9"):
        app.version(9)


def test_params_are_bound_to_name_and_version(reg):
    for v in reg.versions():
        assert v.params.binding == f"{v.metric}@{v.version}"
        assert v.fingerprint == v.params.fingerprint
    fingerprints = [v.fingerprint for v in reg.versions()]
    assert len(set(fingerprints)) == len(fingerprints)
    a, b = reg.metric("twin_a").latest, reg.metric("twin_b").latest
    # Identical numbers, different metrics: the fingerprints differ, so reports never mix.
    assert (a.params.epsilon, a.params.hash_range, a.params.field) == (b.params.epsilon, b.params.hash_range, b.params.field)
    assert a.fingerprint != b.fingerprint
    # And each equals what cms_core builds for the same binding (one derivation).
    assert a.fingerprint == OCMSParams.build(2, 100, binding="twin_a@1").fingerprint
    # Two versions differing only by the version number still differ.
    app = reg.metric("app_launches")
    assert app.version(2).params.epsilon == app.version(3).params.epsilon
    assert app.version(2).fingerprint != app.version(3).fingerprint


def test_by_fingerprint(reg):
    for v in reg.versions():
        assert reg.by_fingerprint(v.fingerprint) is v
        assert reg.by_fingerprint(bytearray(v.fingerprint)) is v
    assert reg.by_fingerprint(OCMSParams.build(2, 100).fingerprint) is None  # unbound (wire v1) parameters


def test_unknown_metric(reg):
    with pytest.raises(UnknownMetricError, match="no metric 'nope'.*app_launches, twin_a"):
        reg.metric("nope")
    with pytest.raises(LookupError):
        reg.metric("nope")


def test_values_by_name(reg):
    v2 = reg.metric("app_launches").version(2)
    assert v2.value_from_name("wallet") == 3 and v2.value_name(3) == "wallet"
    with pytest.raises(InvalidValueError, match="'ATL' is not a category"):
        v2.value_from_name("ATL")
    with pytest.raises(InvalidValueError):
        v2.value_name(4)
    build = reg.metric("build_id").latest
    assert build.value_from_name("18446744073709551615") == 2**64 - 1
    assert build.value_name(2**64 - 1) == "18446744073709551615"
    with pytest.raises(InvalidValueError):
        build.value_from_name("-1")
    crash = reg.metric("crash").latest
    assert crash.value_from_name("b c") == "b c" and crash.value_name("b c") == "b c"


def test_tracked_values(reg):
    app = reg.metric("app_launches")
    t1 = app.version(1).tracked_values()
    assert t1.is_range and len(t1) == 3 and t1.params_fingerprint == app.version(1).fingerprint
    assert len(app.version(2).tracked_values()) == 4
    assert app.version(1).tracked_values() is t1  # built once
    build = reg.metric("build_id").latest
    assert build.tracked_values().all_labels() == [2**64 - 1, 7]
    assert build.tracked_names() == ["18446744073709551615", "7"] and build.watch_indices() == (0,)
    crash = reg.metric("crash").latest
    assert crash.tracked_values().all_labels() == ["a", "b c", "NO"] and crash.tracked_count == 3
    # mode l2 sizes m for the tracked count unless given
    assert crash.params.tracked_count == 3 and crash.params.mode == "l2"


def test_a_sketch_decodes_a_metric_version(reg):
    """End to end through cms_core: reports made with a version's params decode against its tracked set."""
    import numpy as np

    v = reg.metric("app_launches").version(2)
    rng = np.random.default_rng(7)
    values = rng.choice(4, size=20_000, p=[0.5, 0.2, 0.2, 0.1])
    batch = simulate_reports(v.params, values, rng)
    assert isinstance(batch, ReportBatch)
    sketch = OCMSSketch(v.params, v.tracked_values())
    sketch.update(batch)
    est = sketch.estimate()
    # within 5 standard deviations of the variance formula
    for index, truth in enumerate([0.5, 0.2, 0.2, 0.1]):
        std = float(np.sqrt(v.params.variance(truth, len(values))))
        assert abs(est.frequency[index] - truth) < 5 * std


def test_describe_is_json_ready(reg):
    import json

    for v in reg.versions():
        doc = v.describe()
        json.dumps(doc)
        assert doc["fingerprint"] == v.fingerprint.hex() and doc["metric"] == v.metric
        assert isinstance(doc["domain_size"], str)
    assert reg.metric("build_id").latest.describe()["domain_size"] == str(2**64)


def test_single_metric_registry_from_flags():
    """The old single-metric flags describe a one-metric registry; unbound params keep their v1 fingerprint."""
    from cms_core import TrackedValues
    from cms_core.errors import ParameterMismatchError
    from registry import single_metric_registry

    primary, rotated = OCMSParams.build(2, 1000), OCMSParams.build(1, 1000)
    tracked = [TrackedValues.range(primary, 0, 1000), TrackedValues.of(rotated, [5, 7, 999])]
    reg = single_metric_registry([primary, rotated], tracked, name="flags", watch=("7",), top_k=3)
    spec = reg.metric("flags")
    assert [v.version for v in spec.versions] == [1, 2] and spec.domain == "integers"
    v1, v2 = spec.versions
    assert v1.fingerprint == OCMSParams.build(2, 1000).fingerprint  # unbound: wire v1 fingerprint kept
    assert reg.by_fingerprint(rotated.fingerprint) is v2
    assert v1.tracked_values() is tracked[0] and v2.tracked_values() is tracked[1]
    assert v2.tracked_names() == ["5", "7", "999"] and v2.watch_indices() == (1,) and v1.watch_indices() == (7,)
    with pytest.raises(InvalidValueError, match="'1000' is not a tracked value"):
        single_metric_registry([primary], tracked[:1], watch=("1000",))
    with pytest.raises(ParameterMismatchError):
        single_metric_registry([primary], tracked[1:])
