"""benchmarks.bench_numeric's paired check (issue 40's "never less accurate than the best of them at any cell"):
on synthetic per-seed errors it holds for a method identical to ours and for one ours beats, and fails for a
method better than ours by many standard errors (the negative control); a tiny run keeps the JSON keys the issue
names and adds the paired verdicts and the goal summary. No processes: fast, fixed seeds."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import bench_numeric as bench

SEEDS = 30


def noisy(rng, mean: float, sd: float = 0.002) -> np.ndarray:
    return np.abs(rng.normal(mean, sd, (SEEDS, len(bench.QUANTILES))))


def test_a_method_identical_to_ours_is_not_more_accurate():
    ours = noisy(np.random.default_rng(1), 0.01)
    result = bench.paired({"ours": ours, "twin": ours.copy(), bench.BUCKETING: ours / 100}, "ours")
    for q in map(str, bench.QUANTILES):
        check = result[q]
        assert check["best_other"] == "twin"  # bucketing is not a method
        assert check["mean_difference"] == 0.0 and check["standard_error"] == 0.0
        assert check["not_less_accurate"] is True


def test_a_peer_better_by_many_standard_errors_fails_the_check_and_is_named():
    rng = np.random.default_rng(2)
    ours = noisy(rng, 0.012)
    errors = {"ours": ours, "close": ours + rng.normal(0.0, 0.001, ours.shape),
              "better": np.maximum(ours - 0.004 + rng.normal(0.0, 0.001, ours.shape), 0.0)}
    result = bench.paired(errors, "ours")
    for q in map(str, bench.QUANTILES):
        check = result[q]
        assert check["best_other"] == "better"
        assert check["mean_difference"] == pytest.approx(0.004, abs=0.001)
        assert check["mean_difference"] > 10 * check["standard_error"]
        assert check["not_less_accurate"] is False
        assert check["against"]["close"]["not_less_accurate"] is True  # a peer level with ours passes


def test_the_standard_error_is_the_paired_differences_sd_over_root_seeds():
    rng = np.random.default_rng(3)
    ours, other = noisy(rng, 0.01), noisy(rng, 0.01)
    check = bench.paired({"ours": ours, "other": other}, "ours")["0.9"]
    d = ours[:, 1] - other[:, 1]
    assert check["mean_difference"] == pytest.approx(d.mean())
    assert check["standard_error"] == pytest.approx(d.std(ddof=1) / math.sqrt(SEEDS))
    assert check["not_less_accurate"] is bool(d.mean() <= 2 * d.std(ddof=1) / math.sqrt(SEEDS))


def test_one_seed_has_no_standard_error():
    with pytest.raises(ValueError, match="at least 2 seeds"):
        bench.paired({"ours": np.zeros((1, 3)), "other": np.zeros((1, 3))}, "ours")


def test_goal_sorts_the_checks_and_reads_the_median_goal():
    def cell(k, epsilon, verdicts):
        paired = {str(q): {"best_other": "peer", "mean_difference": 0.0, "standard_error": 0.001,
                           "not_less_accurate": ok} for q, ok in zip(bench.QUANTILES, verdicts)}
        return {"buckets": k, "epsilon": epsilon, "n": 10**5, "ours": "x", "rank_error": {"x": [0.008, 0, 0]},
                "mean_rank_error": {"x": [0.012, 0, 0]}, "mean_rank_error_se": {"x": [0.001, 0, 0]}, "paired": paired}

    summary = bench.goal([cell(12, 1.0, [True, True, True]), cell(40, 2.0, [True, False, True])])
    assert summary["checks"] == 6 and len(summary["holds"]) == 5
    assert [(f["buckets"], f["epsilon"], f["q"]) for f in summary["fails"]] == [(40, 2.0, 0.9)]
    goal = summary["median_goal"]
    assert goal["median_over_seeds"] == 0.008 and goal["mean_over_seeds"] == 0.012 and goal["holds"] is True
    assert goal["mean_standard_error"] == 0.001


def test_a_tiny_run_keeps_the_issues_keys_and_adds_the_paired_verdicts(capsys):
    # 12 buckets only (the 1,024-bucket planner takes seconds); n = 10^5 as --quick runs it; no peer
    assert bench.main(["--quick", "--buckets", "12", "--seeds", "3", "--no-peer", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(c["buckets"], c["epsilon"], c["n"]) for c in out["cells"]] == [(12, e, 10**5) for e in (1.0, 2.0, 4.0)]
    for c in out["cells"]:
        assert {"buckets", "epsilon", "n", "ours", "rank_error", "mean_rank_error", "mean_rank_error_se",
                "paired"} <= set(c)
        assert c["ours"] in c["rank_error"] and {"direct-rr", "direct-rr+monotone"} <= set(c["rank_error"])
        assert all(len(v) == 3 for v in c["rank_error"].values()) and c["seeds"] == 3
        assert set(c["paired"]) == {"0.5", "0.9", "0.99"}
        for check in c["paired"].values():
            assert check["best_other"] in c["rank_error"] and check["best_other"] not in (c["ours"], "bucketing")
            assert check["standard_error"] >= 0 and isinstance(check["not_less_accurate"], bool)
    assert out["goal"]["checks"] == 9 == len(out["goal"]["holds"]) + len(out["goal"]["fails"])
    assert out["goal"]["median_goal"]["buckets"] == 12 and out["goal"]["median_goal"]["ours"] == out["cells"][0]["ours"]
    for c in out["cells"]:  # every method's Wasserstein distance; the mean's coverage of each histogram method
        assert set(c["wasserstein"]) == set(c["rank_error"]) - {"bucketing"}
        assert all(0 < d < bench.UPPER_MS for d in c["wasserstein"].values())
        assert set(c["wasserstein_mean"]) == set(c["wasserstein"]) and 0 < c["wasserstein_bucketing"] < bench.UPPER_MS
        assert set(c["wasserstein_paired"]) == set(c["wasserstein"]) - {c["ours"]}
        assert all(p["standard_error"] >= 0 for p in c["wasserstein_paired"].values())
        assert c["ours"] in c["mean_coverage"] and all(0 <= v <= 1 for v in c["mean_coverage"].values())
        assert set(c["mean"]["coverage"]) == {"histogram", "hybrid", "hybrid-split"} and c["mean"]["parts"] >= 2
    assert out["goal"]["mean_goal"]["seeds"] == 9


def test_the_mean_goal_pools_every_seed_and_fails_well_below_95_percent():
    def cells(coverage: float, seeds: int = 300) -> list[dict]:
        return [{"ours": "x", "seeds": seeds, "mean_coverage": {"x": coverage}} for _ in range(3)]

    held = bench.mean_goal(cells(0.95))
    assert held["holds"] and held["seeds"] == 900 and held["coverage"] == pytest.approx(0.95)
    assert bench.mean_goal(cells(0.94))["holds"]  # within 2 binomial standard errors (0.73 points at 900 seeds)
    assert not bench.mean_goal(cells(0.90))["holds"]  # the negative control: 7 standard errors short
    assert bench.mean_goal([]) is None


def test_the_wasserstein_distance_of_a_cdf_is_the_histograms():
    from cms_core.numeric import BucketLayout, DirectRRNoise, Histogram, wasserstein, wasserstein_of_cdf

    rng = np.random.default_rng(5)
    layout = BucketLayout.explicit([10, 100, 1000], 0, 5000)
    values = bench.latencies(2000, rng)
    raw = np.bincount(layout.index(values), minlength=4) / 2000
    histogram = Histogram.of(layout, raw, 2000, DirectRRNoise(1.0, 4))
    assert wasserstein_of_cdf(values, layout, histogram.cdf()) == wasserstein(values, histogram)
    assert wasserstein_of_cdf(values, layout, np.array([0.0, 0.0, 0.0, 1.0])) > wasserstein(values, histogram)


@pytest.mark.parametrize("argv, message", [(["--quick", "--seeds", "1"], "--seeds must be >= 2"),
                                           (["--quick", "--n", "1000000"], "--quick is --n 100000"),
                                           (["--n", "5"], "invalid choice"), (["--buckets", "13"], "invalid choice"),
                                           (["--epsilon", "3"], "invalid choice")])
def test_bad_flags_are_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert message in capsys.readouterr().err


def test_n_buckets_and_epsilon_pick_a_subset_and_quick_is_n_10_to_5(capsys):
    assert bench.parse_args([]).sizes == (10**5, 10**6) and bench.parse_args(["--quick"]).sizes == (10**5,)
    args = bench.parse_args(["--n", "1000000", "--buckets", "12", "40", "--epsilon", "2"])
    assert args.sizes == (10**6,) and args.buckets == [12, 40] and args.epsilon == [2.0] and args.seeds == 30
    assert bench.main(["--quick", "--buckets", "12", "--epsilon", "4", "--seeds", "2", "--no-peer", "--json"]) == 0
    assert [(c["buckets"], c["epsilon"]) for c in json.loads(capsys.readouterr().out)["cells"]] == [(12, 4.0)]


def test_the_means_keys_and_their_own_generator_leave_every_other_figure_as_it_was():
    # the Hybrid mean's cells are new keys only: the rank errors of a seed are the same with and without them
    k, epsilon, n = 12, 1.0, 20_000
    layout = bench.layouts()[k]
    params = {"hierarchy-B4+monotone": bench.hierarchy.HierarchyParams.build(k, epsilon, 4)}
    plan = {**bench.mean_plan(k, layout, epsilon, n, params["hierarchy-B4+monotone"]), "ours": "hierarchy-B4+monotone"}
    assert plan["parts"] == 3 and plan["auto"] in ("histogram", "hybrid")
    without, with_means = {}, {}
    plain = bench.seed_errors(k, layout, epsilon, n, 0, params, False, without)
    meant = bench.seed_errors(k, layout, epsilon, n, 0, params, False, with_means, plan)
    assert plain == meant and without["wasserstein"] == with_means["wasserstein"] and "means" not in without
    means = with_means["means"]
    assert set(means) == {"histogram", "hybrid", "hybrid-split", bench.BUCKETING}
    assert all(0 <= m["error"] < bench.UPPER_MS for m in means.values())
    summary = bench.mean_summary(plan, [means, means])
    assert set(summary["coverage"]) == {"histogram", "hybrid", "hybrid-split"}
    assert summary["median_abs_error"]["hybrid"] == means["hybrid"]["error"]


def test_first_seed_runs_other_devices_and_is_recorded(capsys):
    bench.main(["--quick", "--buckets", "12", "--epsilon", "4", "--seeds", "2", "--no-peer", "--json"])
    default = json.loads(capsys.readouterr().out)["cells"][0]
    bench.main(["--quick", "--buckets", "12", "--epsilon", "4", "--seeds", "2", "--first-seed", "2", "--no-peer",
                "--json"])
    later = json.loads(capsys.readouterr().out)["cells"][0]
    assert default["first_seed"] == 0 and later["first_seed"] == 2
    assert later["wasserstein"] != default["wasserstein"]  # seeds 2 and 3: other devices, other figures


def test_a_run_without_the_peer_installed_says_so(capsys, monkeypatch):
    monkeypatch.setattr(bench, "peer_tree", lambda: None)
    bench.main(["--quick", "--buckets", "12", "--epsilon", "4", "--seeds", "2", "--json"])
    captured = capsys.readouterr()
    assert "not installed" in captured.err and "hierarchical" not in json.loads(captured.out)["cells"][0]["rank_error"]


def test_the_wasserstein_summary_pairs_by_seed_and_keeps_the_means_beside_the_medians():
    # a heavy-tailed method: its median is the smaller, its mean the larger; the pairing is seed by seed
    distances = {"ours": [30.0, 31.0, 32.0, 33.0], "peer": [20.0, 21.0, 22.0, 200.0]}
    summary = bench.wasserstein_summary(distances, "ours", [21.0, 21.5, 22.0, 21.2])
    assert summary["wasserstein_mean"] == {"ours": 31.5, "peer": 65.75}
    assert summary["wasserstein_bucketing"] == pytest.approx(21.35)
    d = np.array([10.0, 10.0, 10.0, -167.0])
    assert summary["wasserstein_paired"]["peer"]["mean_difference"] == pytest.approx(d.mean())
    assert summary["wasserstein_paired"]["peer"]["standard_error"] == pytest.approx(d.std(ddof=1) / 2)
    assert set(summary["wasserstein_paired"]) == {"peer"}
    assert bench.wasserstein_summary({"ours": [1.0], "peer": [2.0]}, "ours", [0.5])["wasserstein_paired"] is None


def test_a_negative_first_seed_is_refused_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--quick", "--first-seed", "-5", "--no-peer"])
    assert exit_info.value.code == 2 and "--first-seed -5: must be >= 0" in capsys.readouterr().err
