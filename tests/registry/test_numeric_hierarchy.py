"""A numeric metric reported as a hierarchical histogram (issue 40): ``mechanism: hierarchy`` (or auto's pick), its
levels as parameter versions of the metric (binding ``name@version/level<l>``, a fingerprint each), what the lock,
the device config and the privacy audit say of it, and the errors naming what to fix."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cms_core.hierarchy import exact_privacy_loss
from cms_core.planning import choose_numeric_mechanism
from registry import RegistryValidationError
from registry.device import device_config
from registry.lock import compare, lock_entries
from registry.numeric import PLANNING_REPORTS, audited_epsilon

from .helpers import line_of, load, single_problem
from .test_numeric import EXPLICIT, numeric


def tree(tmp_path, *extra, lines=EXPLICIT, epsilon="epsilon: 2"):
    return load(tmp_path, numeric(*lines, epsilon=epsilon, extra=("mechanism: hierarchy", *extra))) \
        .metric("latency_ms").latest


def test_each_level_is_a_parameter_version_with_its_own_binding_and_fingerprint(tmp_path):
    registry = load(tmp_path, numeric(*EXPLICIT, epsilon="epsilon: 2", extra=("mechanism: hierarchy",)))
    version = registry.metric("latency_ms").latest
    levels = version.tree_levels()
    assert version.mechanism == "hierarchy" and len(levels) == version.hierarchy.height >= 2
    assert [lv.binding for lv in levels] == [f"latency_ms@1/level{i}" for i in range(1, len(levels) + 1)]
    assert [lv.params.binding for lv in levels] == [lv.binding for lv in levels]
    assert len({lv.fingerprint for lv in levels}) == len(levels)
    assert version.fingerprint == levels[-1].fingerprint  # the version's parameters are its finest level's
    assert [lv.params.dictionary_size for lv in levels] == list(version.hierarchy.sizes)
    for lv in levels:  # a report of any level is one of the metric's
        assert registry.by_fingerprint(lv.fingerprint) is lv
        assert (lv.metric, lv.version, lv.numeric, lv.tracked.kind) == ("latency_ms", 1, None, "all")
    assert [v.binding for v in registry.versions()] == ["latency_ms@1"]  # the lock's and the listing's
    described = version.describe()["hierarchy"]
    assert [row["fingerprint"] for row in described["levels"]] == [lv.fingerprint.hex() for lv in levels]


def test_hierarchy_takes_the_planners_best_tree_or_the_branching_given(tmp_path):
    best = choose_numeric_mechanism(11, 2.0, PLANNING_REPORTS)["best_hierarchy"]
    assert tree(tmp_path).hierarchy.name == best
    assert tree(tmp_path, lines=EXPLICIT + ("branching: 3",)).hierarchy.branching == 3


def test_the_lock_sees_a_tree_regrouped_with_level_fingerprints_unchanged(tmp_path):
    """16 buckets at branching 4 and 5: two levels of 4 and 16 nodes both, so equal fingerprints, but level 1 groups
    the buckets differently: the definition digest holds the branching."""
    lines = ("lower: 0", "upper: 16", "buckets: [" + ", ".join(str(b) for b in range(1, 16)) + "]")
    four = tree(tmp_path, lines=lines + ("branching: 4",))
    five_registry = load(tmp_path, numeric(*lines, "branching: 5", epsilon="epsilon: 2",
                                           extra=("mechanism: hierarchy",)))
    five = five_registry.metric("latency_ms").latest
    assert [lv.fingerprint for lv in four.tree_levels()] == [lv.fingerprint for lv in five.tree_levels()]
    locked = {"latency_ms@1": dict(lock_entries(five_registry)["latency_ms@1"],
                                   definition_sha256=four.definition_digest)}
    result = compare(five_registry, locked)
    assert [p.metric for p in result.changed] == ["latency_ms"]
    assert compare(five_registry, lock_entries(five_registry)).changed == []  # negative control


def test_the_device_config_lists_every_level(tmp_path):
    registry = load(tmp_path, numeric(*EXPLICIT, epsilon="epsilon: 2", extra=("mechanism: hierarchy",)))
    version = registry.metric("latency_ms").latest
    (entry,) = device_config(registry)["metrics"]
    assert entry["mechanism"] == "hierarchy" and entry["fingerprint"] == version.fingerprint.hex()
    config = entry["hierarchy"]
    assert (config["buckets"], config["branching"]) == (11, version.hierarchy.branching)
    for row, lv in zip(config["levels"], version.tree_levels()):
        assert row["fingerprint"] == lv.fingerprint.hex() and row["m"] == lv.params.hash_range
        assert row["span"] == version.hierarchy.span(lv.tree_level)
        assert int(row["dictionary_size"]) == lv.params.dictionary_size
    assert config["levels"][-1]["span"] == 1


def test_the_audited_epsilon_of_a_tree_is_its_epsilon(tmp_path):
    """Exact: every output of every level against every pair of buckets (cms_core.hierarchy.exact_privacy_loss)."""
    for epsilon in (0.5, 2):
        version = tree(tmp_path, epsilon=f"epsilon: {epsilon}")
        assert audited_epsilon(version) <= epsilon + 1e-12
        assert audited_epsilon(version) == pytest.approx(epsilon, abs=1e-6)  # the budget is used, not wasted
    version = load(tmp_path, numeric(*EXPLICIT, extra=("mechanism: direct",))).metric("latency_ms").latest
    assert audited_epsilon(version) == pytest.approx(1.0, abs=1e-6)  # a flat oracle is audited the same way
    # negative control: the audit measures, it does not echo the budget: a leaky level is caught
    leaky = tree(tmp_path).hierarchy
    leaky_level = leaky.levels[0].__class__.build(4.0, leaky.sizes[0], mode="l2", tracked_count=leaky.sizes[0],
                                                  mechanism="direct")
    import dataclasses

    leaky = dataclasses.replace(leaky, levels=(leaky_level, *leaky.levels[1:]))
    assert math.log(exact_privacy_loss(leaky)) == pytest.approx(4.0, abs=1e-6)


TREE_CASES = {
    "branching below 2": (EXPLICIT + ("branching: 1",), ("mechanism: hierarchy",), "branching: 1",
                          "numeric.branching", "integer in [2, 16]"),
    "branching not below buckets": (("lower: 0", "upper: 10", "buckets: [2, 5]", "branching: 3"),
                                    ("mechanism: hierarchy",), "branching: 3", "numeric.branching",
                                    "below the 3 buckets"),
    "branching without hierarchy": (EXPLICIT + ("branching: 4",), ("mechanism: direct",), "mechanism: direct",
                                    "mechanism", "give 'mechanism: hierarchy'"),
    "hierarchy with hash_range": (EXPLICIT, ("mechanism: hierarchy", "hash_range: 8"), "hash_range: 8",
                                  "hash_range", "a tree's levels choose their own"),
    "hierarchy over 2 buckets": (("lower: 0", "upper: 10", "buckets: [5]"), ("mechanism: hierarchy",),
                                 "mechanism: hierarchy", "mechanism", "at least 3 buckets"),
}


@pytest.mark.parametrize("case", sorted(TREE_CASES))
def test_every_tree_error_names_the_field_and_line(tmp_path, case):
    lines, extra, needle, field, fragment = TREE_CASES[case]
    text = numeric(*lines, extra=extra)
    problem = single_problem(tmp_path, text, RegistryValidationError)
    assert (problem.metric, problem.field) == ("latency_ms", field), str(problem)
    assert problem.line == line_of(text, needle), str(problem)
    assert fragment in problem.message, str(problem)


def test_hierarchy_is_for_numeric_metrics_only(tmp_path):
    text = "\n".join(["metrics:", "  - name: screen", "    description: d", "    owner: o",
                      "    categories: [home, search, cart]", "    epsilon: 1", "    mechanism: hierarchy"]) + "\n"
    problem = single_problem(tmp_path, text, RegistryValidationError)
    assert problem.field == "mechanism" and "numeric metrics only" in problem.message
    assert problem.line == line_of(text, "mechanism: hierarchy")


def test_bucket_nodes_are_the_levels_values(tmp_path):
    """Level l's value of bucket i is its node i // B^(h - l): every bucket of a node maps to it."""
    t = tree(tmp_path).hierarchy
    for level in range(1, t.height + 1):
        nodes = t.node(np.arange(t.buckets), level)
        assert nodes.max() == t.sizes[level - 1] - 1 and np.all(np.diff(nodes) >= 0)


def test_ocms_plan_shows_a_tree_and_how_to_report_a_more_accurate_one(tmp_path, capsys):
    from .helpers import run, write

    path = write(tmp_path, numeric(*EXPLICIT, epsilon="epsilon: 2", extra=("mechanism: hierarchy",)))
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--n", "100000")
    best = choose_numeric_mechanism(11, 2.0, PLANNING_REPORTS)["best_hierarchy"]
    assert code == 0 and f"reported with {best}: the CDF at the median" in out
    assert [line.split()[3] for line in out.splitlines() if line.startswith("latency_ms  ")] == ["hierarchy"]
    assert "flat oracles only" not in out
    # a flat version where a tree is more accurate: the plan says how to report it (negative control of the above)
    path = write(tmp_path, numeric(*EXPLICIT, epsilon="epsilon: 1", extra=("mechanism: direct",)))
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--n", "100000")
    assert code == 0 and "reported with direct-rr" in out
    assert "would be more accurate at this resolution: 'mechanism: auto'" in out and "in a new version" in out
