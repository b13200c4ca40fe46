"""The numeric metric kind (issue 40): parsing, validation naming the field and line, mechanism auto, ocms plan."""

from __future__ import annotations

import json

import pytest

from cms_core.planning import FLAT_NUMERIC_MECHANISMS, choose_numeric_mechanism
from registry.numeric import PLANNING_REPORTS
from registry import RegistryValidationError
from registry.device import device_config

from .helpers import line_of, load, run, single_problem, write


def numeric(*lines: str, epsilon: str = "epsilon: 1", extra: tuple[str, ...] = ()) -> str:
    body = ["metrics:", "  - name: latency_ms", "    description: Time to first byte", "    owner: web-team",
            "    unit: ms", "    numeric:"]
    body += ["      " + line for line in lines]
    body += ["    " + epsilon] + ["    " + line for line in extra]
    return "\n".join(body) + "\n"


EXPLICIT = ("lower: 0", "upper: 10000", "buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]")


def test_explicit_buckets_make_an_integer_metric_over_the_bucket_indices(tmp_path):
    version = load(tmp_path, numeric(*EXPLICIT)).metric("latency_ms").latest
    spec = version.numeric
    assert spec.buckets == 11 and spec.scheme == "explicit"
    assert version.params.dictionary_size == 11 and version.tracked_count == 11
    assert spec.quantiles == (0.5, 0.9, 0.99) and spec.answers == ("histogram", "quantiles", "mean")
    assert (spec.bucket(-3), spec.bucket(5), spec.bucket(5.01), spec.bucket(1e12)) == (0, 0, 1, 10)  # clipped
    described = version.describe()["numeric"]
    assert described["bounds"][0] == 5
    assert "first bucket" in described["clipping"]


def test_exponential_buckets_follow_opentelemetry_base_2(tmp_path):
    spec = load(tmp_path, numeric("lower: 1", "upper: 1024", "exponential: {scale: 0}")).metric("latency_ms").latest.numeric
    assert spec.layout.bounds == tuple(float(2 ** i) for i in range(1, 10))
    assert spec.scheme == "exponential" and spec.scale == 0


def test_mechanism_auto_picks_the_mechanism_with_the_smaller_cdf_variance(tmp_path):
    """Flat oracles and hierarchical histograms alike, at the registry's planning n (PLANNING_REPORTS)."""
    picks = set()
    for epsilon in (0.5, 4):
        version = load(tmp_path, numeric(*EXPLICIT, epsilon=f"epsilon: {epsilon}")).metric("latency_ms").latest
        choice = choose_numeric_mechanism(11, epsilon, PLANNING_REPORTS)
        best = min(choice["candidates"], key=lambda name: choice["candidates"][name]["mean_cdf_variance"])
        if best in FLAT_NUMERIC_MECHANISMS:
            assert version.mechanism == FLAT_NUMERIC_MECHANISMS[best] and version.hierarchy is None
        else:
            assert version.mechanism == "hierarchy" and version.hierarchy.name == best
            assert version.hierarchy.branching == choice["candidates"][best]["branching"]
        picks.add(version.mechanism)
    # and a negative control: a tree at epsilon 0.5, direct RR over the 11 buckets at 4 (the test can fail)
    assert picks == {"hierarchy", "direct"}


def test_the_pick_does_not_depend_on_the_planning_n():
    """Every candidate's CDF variance scales as 1/n: the ranking at 10^4 and 10^7 is the one at PLANNING_REPORTS."""
    for k, epsilon in ((11, 0.5), (11, 4), (40, 1), (200, 2)):
        picks = {choose_numeric_mechanism(k, epsilon, n)["chosen"] for n in (10_000, PLANNING_REPORTS, 10_000_000)}
        assert len(picks) == 1, (k, epsilon, picks)


def test_a_pinned_mechanism_is_kept(tmp_path):
    version = load(tmp_path, numeric(*EXPLICIT, extra=("mechanism: direct",))).metric("latency_ms").latest
    assert version.mechanism == "direct"


NUMERIC_CASES = {
    "lower missing": (("upper: 10", "buckets: [5]"), "numeric:", "numeric.lower", "missing"),
    "upper not a number": (("lower: 0", "upper: ten", "buckets: [5]"), "upper: ten", "numeric.upper",
                           "must be a finite number"),
    "bounds not increasing": (("lower: 0", "upper: 10", "buckets: [5, 3]"), "buckets: [5, 3]", "numeric.buckets",
                              "must increase strictly"),
    "bound outside": (("lower: 0", "upper: 10", "buckets: [5, 20]"), "buckets: [5, 20]", "numeric.buckets",
                      "strictly between"),
    "both schemes": (("lower: 1", "upper: 10", "buckets: [5]", "exponential: {scale: 0}"), "numeric:",
                     "numeric.buckets", "give the buckets once"),
    "exponential lower 0": (("lower: 0", "upper: 10", "exponential: {scale: 0}"), "lower: 0", "numeric.lower",
                            "must be above 0"),
    "scale too fine": (("lower: 1", "upper: 1000000", "exponential: {scale: 12}"), "exponential:",
                       "numeric.exponential.scale", "at most 4096"),
    "quantile 1": (("lower: 0", "upper: 10", "buckets: [5]", "quantiles: [0.5, 1]"), "quantiles:",
                   "numeric.quantiles", "numbers in (0, 1)"),
    "answers": (("lower: 0", "upper: 10", "buckets: [5]", "answers: [median]"), "answers:", "numeric.answers",
                "histogram, quantiles, mean"),
    "unknown key": (("lower: 0", "upper: 10", "buckets: [5]", "clip: true"), "clip: true", "numeric.clip",
                    "unknown key"),
}


@pytest.mark.parametrize("case", sorted(NUMERIC_CASES))
def test_every_numeric_error_names_the_field_and_line(tmp_path, case):
    lines, needle, field, fragment = NUMERIC_CASES[case]
    text = numeric(*lines)
    problem = single_problem(tmp_path, text, RegistryValidationError)
    assert (problem.metric, problem.field) == ("latency_ms", field), str(problem)
    assert problem.line == line_of(text, needle), str(problem)
    assert fragment in problem.message, str(problem)


def test_a_numeric_metric_refuses_tracked_and_a_second_domain(tmp_path):
    problem = single_problem(tmp_path, numeric(*EXPLICIT, extra=("tracked: all",)), RegistryValidationError)
    assert problem.field == "tracked" and "every bucket" in problem.message
    text = numeric(*EXPLICIT, extra=("versions:", "  - version: 1", "    lifetime_epsilon: 2"))
    problem = single_problem(tmp_path, text, RegistryValidationError)
    assert (problem.field, problem.version, problem.line) == ("lifetime_epsilon", 1, line_of(text, "lifetime_epsilon"))
    assert "one-shot" in problem.message
    problem = single_problem(tmp_path, numeric(*EXPLICIT, extra=("integers: 10",)), RegistryValidationError)
    assert problem.field == "numeric" and "one value domain" in problem.message


def test_the_device_config_carries_the_layout(tmp_path):
    config = device_config(load(tmp_path, numeric(*EXPLICIT)))
    (entry,) = config["metrics"]
    assert entry["numeric"] == {"lower": 0.0, "upper": 10000.0,
                                "bounds": [5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0]}
    assert entry["domain"] == "integers" and entry["dictionary_size"] == "11"


def test_ocms_plan_shows_the_choice_and_its_predicted_error(tmp_path, capsys):
    path = write(tmp_path, numeric("lower: 1", "upper: 1048576", "exponential: {scale: 1}"))
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--n", "100000")
    assert code == 0
    assert "latency_ms version 1: numeric: 40 buckets, reported with" in out
    assert "in rank" in out and "hierarchy-B" in out
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--n", "100000", "--json")
    record = json.loads(out)["metrics"][0]["numeric"]
    own = record["candidates"][record["mechanism"]]
    assert record["predicted_median_rank_error_ci"] == pytest.approx(1.959964 * own["median_cdf_sd"], rel=1e-5)


def test_the_lock_catches_bounds_edited_in_place(tmp_path):
    """Moving a bound keeps k (and the fingerprint) but changes what each bucket index means."""
    from registry.lock import compare, default_lock_path, read_lock, write_lock

    path = write(tmp_path, numeric(*EXPLICIT))
    write_lock(load(tmp_path, numeric(*EXPLICIT)), default_lock_path(path))
    path.write_text(numeric(*EXPLICIT).replace("[5, 10,", "[5, 12,"))
    registry = load(tmp_path, numeric(*EXPLICIT).replace("[5, 10,", "[5, 12,"))
    result = compare(registry, read_lock(default_lock_path(path)))
    assert [p.metric for p in result.changed] == ["latency_ms"]
    assert "bucket bounds changed" in result.changed[0].message
    assert compare(load(tmp_path, numeric(*EXPLICIT)), read_lock(default_lock_path(path))).changed == []


def test_ocms_plan_of_a_very_fine_layout_weighs_the_flat_oracles_only(tmp_path, capsys):
    """4,096 buckets would take minutes of k x k solves per tree; the plan says it left them out."""
    path = write(tmp_path, numeric("lower: 1", "upper: 1000000", "exponential: {scale: 7}"))
    version = load(tmp_path, numeric("lower: 1", "upper: 1000000", "exponential: {scale: 7}")).metric("latency_ms").latest
    assert version.numeric.buckets > 1024
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--n", "100000")
    assert code == 0 and "hierarchical histograms not weighed above 1,024 buckets" in out
