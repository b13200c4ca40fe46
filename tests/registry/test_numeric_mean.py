"""A numeric metric's mean through the Hybrid mechanism (issue 40): numeric.mean_mechanism, the devices' split,
the audited epsilon, the lock and ``ocms plan``."""

from __future__ import annotations

import json
import math

import pytest

from cms_core.planning import choose_mean_mechanism
from registry.numeric import PLANNING_REPORTS, audited_epsilon

from .helpers import line_of, load, run, single_problem, write
from .test_numeric import EXPLICIT, numeric


def latest(tmp_path, text):
    return load(tmp_path, text).metric("latency_ms").latest


def test_the_mean_is_read_from_the_histogram_by_default(tmp_path):
    version = latest(tmp_path, numeric(*EXPLICIT))
    assert version.numeric.mean_mechanism == "histogram" and version.mean is None
    assert "mean" not in version.describe()


@pytest.mark.parametrize("mechanism, parts", [("direct", 2), ("hierarchy", None)])
def test_hybrid_splits_the_devices_one_part_per_histogram_level_plus_the_mean(tmp_path, mechanism, parts):
    version = latest(tmp_path, numeric(*EXPLICIT, "mean_mechanism: hybrid", extra=(f"mechanism: {mechanism}",)))
    levels = version.hierarchy.height if version.hierarchy is not None else 1
    assert version.mean.parts == (parts or levels + 1)
    assert version.mean.hybrid.lower == 0 and version.mean.hybrid.upper == 10_000
    assert version.mean.hybrid.epsilon == version.params.epsilon
    described = version.describe()["mean"]
    assert described["parts"] == version.mean.parts and described["fingerprint"] == version.mean.fingerprint.hex()


def test_a_metric_asking_only_for_the_mean_sends_only_hybrid_reports(tmp_path):
    version = latest(tmp_path, numeric(*EXPLICIT, "answers: [mean]", "mean_mechanism: hybrid"))
    assert version.mean.parts == 1


@pytest.mark.parametrize("epsilon", [0.5, 4])
def test_auto_takes_the_smaller_predicted_variance(tmp_path, epsilon):
    version = latest(tmp_path, numeric(*EXPLICIT, "answers: [mean]", "mean_mechanism: auto",
                                       epsilon=f"epsilon: {epsilon}"))
    from cms_core.hybrid import HybridParams

    hybrid = HybridParams.build(epsilon, 0, 10_000)
    choice = choose_mean_mechanism(version.numeric.layout, hybrid, version.params, version.hierarchy,
                                   PLANNING_REPORTS, 1)
    assert (version.mean is not None) == (choice["hybrid_sd"] < choice["histogram_sd"])


def test_auto_picks_either_way_negative_control(tmp_path):
    """At eps 0.5 the Hybrid mean of 11 skewed buckets wins, at 4 the histogram's does (the test can fail)."""
    picks = {eps: latest(tmp_path, numeric(*EXPLICIT, "answers: [mean]", "mean_mechanism: auto",
                                           epsilon=f"epsilon: {eps}")).mean is not None for eps in (0.5, 4)}
    assert picks == {0.5: True, 4: False}


def test_a_bad_mean_mechanism_is_named_on_its_line(tmp_path):
    text = numeric(*EXPLICIT, "mean_mechanism: laplace")
    problem = single_problem(tmp_path, text)
    assert problem.field == "numeric.mean_mechanism" and problem.line == line_of(text, "mean_mechanism")
    assert "'laplace'" in problem.message and "histogram, hybrid, auto" in problem.message


def test_a_hybrid_mean_needs_the_mean_asked(tmp_path):
    text = numeric(*EXPLICIT, "answers: [histogram]", "mean_mechanism: hybrid")
    problem = single_problem(tmp_path, text)
    assert problem.field == "numeric.mean_mechanism" and "add mean to answers" in problem.message


@pytest.mark.parametrize("mechanism", ["direct", "hierarchy"])
def test_the_audited_epsilon_covers_both_parts(tmp_path, mechanism):
    version = latest(tmp_path, numeric(*EXPLICIT, "mean_mechanism: hybrid", epsilon="epsilon: 2",
                                       extra=(f"mechanism: {mechanism}",)))
    eps = audited_epsilon(version)
    assert eps <= 2 + 1e-12 and eps == pytest.approx(2, abs=1e-6)


def test_the_lock_catches_a_mean_mechanism_switched_in_place(tmp_path):
    from registry.lock import compare, default_lock_path, read_lock, write_lock

    path = write(tmp_path, numeric(*EXPLICIT))
    write_lock(load(tmp_path, numeric(*EXPLICIT)), default_lock_path(path))
    switched = load(tmp_path, numeric(*EXPLICIT, "mean_mechanism: hybrid"))
    result = compare(switched, read_lock(default_lock_path(path)))
    assert [p.metric for p in result.changed] == ["latency_ms"]
    assert "mean_mechanism" in result.changed[0].message


def test_ocms_plan_says_which_mean_and_its_error(tmp_path, capsys):
    path = write(tmp_path, numeric(*EXPLICIT, "mean_mechanism: hybrid", epsilon="epsilon: 0.5",
                                   extra=("mechanism: direct",)))
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--n", "100000")
    assert code == 0
    assert "mean: Hybrid mechanism +-" in out and "1 device in 2 draws a Hybrid report" in out
    assert "the histogram hears 50,000 of them (CDF variances x2)" in out
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--n", "100000", "--json")
    record = json.loads(out)["metrics"][0]["numeric"]
    mean = record["mean"]
    assert mean["mechanism"] == "hybrid" and mean["parts"] == 2 and record["histogram_reports"] == 50_000
    assert mean["hybrid_ci"] == pytest.approx(1.959964 * mean["hybrid_sd"], rel=1e-5)
    assert mean["hybrid_sd"] < mean["histogram_sd"] and mean["more_accurate"] == "hybrid"


def test_ocms_plan_suggests_the_hybrid_mean_where_it_is_more_accurate(tmp_path, capsys):
    path = write(tmp_path, numeric(*EXPLICIT, epsilon="epsilon: 0.5", extra=("mechanism: direct",)))
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--n", "100000")
    assert code == 0 and "mean: from the histogram +-" in out
    assert "the hybrid mean would be more accurate: 'numeric.mean_mechanism: hybrid' or 'auto'" in out
    assert math.isfinite(float(out.split("mean: from the histogram +-")[1].split()[0]))
