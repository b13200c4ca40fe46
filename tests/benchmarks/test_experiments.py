"""The evidence scripts (benchmarks/experiments): the paper replication on tiny sizes.

Runs the same code as ``python -m benchmarks.experiments`` with small n and few
rounds (seconds), then checks the written tables and the statistics against
the closed forms with tolerances from the sampling distribution: a mean of R
squared normal errors has relative standard error sqrt(2 / R), so the mean over
D values of (empirical MSE / Var) is within SIGMAS * sqrt(2 / (R * D)) of 1, and
an l2 loss is within SIGMAS standard errors (measured over rounds) of its theory.
Seeds are fixed, so the run is deterministic. Needs only the base, dev and data
dependencies: plots and the peer libraries (the bench extra) are optional.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.experiments import paper, peers
from benchmarks.experiments.common import have

SIGMAS = 5.0
CFG = paper.Config(epsilons=(1.0, 4.0), rounds=30, tracked=20, n_zipf=2_000, n_gaussian=2_000, n_flights=2_000)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("paper")
    payload = paper.run(CFG, str(out), plots=False, log=lambda *args: None)
    return out, payload


def test_tables_and_json_written(run):
    out, payload = run
    text = (out / "paper.md").read_text(encoding="utf-8")
    stored = json.loads((out / "paper.json").read_text(encoding="utf-8"))
    assert set(stored["datasets"]) == set(paper.DATASETS)
    for key, res in stored["datasets"].items():
        assert f"## {res['title']}" in text
        assert set(res["cells"]) == set(paper.METHODS)
        for method, cells in res["cells"].items():
            assert [float(e) for e in cells] == list(CFG.epsilons)
            for eps in CFG.epsilons:
                assert f"| {paper.LABELS[method]} | {eps:g} |" in text
    assert "Paper's claims checked on these numbers" in text
    assert "**agrees**" in text or "**disagrees**" in text


def test_mse_ocms_matches_variance(run):
    """Per tracked value, empirical MSE / closed-form variance averages to 1 within the sampling tolerance."""
    _, payload = run
    tol = SIGMAS * math.sqrt(2.0 / (CFG.rounds * CFG.tracked))
    for key, res in payload["datasets"].items():
        for eps, cell in res["cells"]["mse-ocms"].items():
            ratio = np.mean(np.array(cell["per_value_mse"]) / np.array(cell["per_value_var"]))
            assert abs(ratio - 1.0) < tol, (key, eps, ratio, tol)
            # and the worst-case MSE respects the paper's criterion loosely: at least the theory
            # minus the tolerance, at most the appendix's upper band
            assert cell["mse"] >= cell["mse_theory"] * (1.0 - tol), (key, eps)
            assert cell["mse"] <= cell["mse_band"], (key, eps)


def test_every_method_l2_matches_theory(run):
    _, payload = run
    for key, res in payload["datasets"].items():
        for method, cells in res["cells"].items():
            for eps, cell in cells.items():
                z = (cell["l2"] - cell["l2_theory"]) / cell["l2_se"]
                assert abs(z) < SIGMAS, (key, method, eps, z)
                assert cell["l1"] <= cell["l1_bound"], (key, method, eps)


def test_datasets_follow_the_paper():
    zipf = paper.zipf_dataset(CFG)
    block = paper.RecursiveHadamardResponse(max(CFG.epsilons), zipf.dictionary_size).block
    assert block == 8  # b = ceil(4) = 4 bits -> residues mod 2^3
    assert np.all(zipf.values % block == 0) and np.all(zipf.tracked % np.uint64(block) == 0)
    assert zipf.dictionary_size == 100_000 and zipf.n == CFG.n_zipf
    gauss = paper.gaussian_dataset(CFG)
    assert gauss.f_star == 0.0
    assert paper.make_method("mse-ocms", 2.0, gauss).params.f_star == 0.0
    centre = int(np.median(gauss.values))
    assert abs(int(gauss.tracked.mean()) - centre) < 10 and len(gauss.tracked) == CFG.tracked


def test_upper_band_factor():
    # Paper appendix: 1 + (2/t)(sqrt(t log(20|x|)) + log(20|x|)); t = |x| = 100 gives ~1.703.
    a = math.log(2000)
    assert paper.upper_band_factor(100, 100) == pytest.approx(1 + 0.02 * (math.sqrt(100 * a) + a))
    assert paper.upper_band_factor(100, 100) == pytest.approx(1.7034, abs=1e-3)


def test_claim_checks_can_disagree(run):
    """A result where HE beats MSE-OCMS+RR must be reported as a disagreement."""
    _, payload = run
    res = json.loads(json.dumps(payload["datasets"]["zipf"]))
    for cell in res["cells"]["he"].values():
        cell["mse"] = 0.0
    verdict = paper.claim_lowest(res, "mse", "mse-ocms", ties=False)
    assert verdict.startswith("**disagrees** at every")


def test_plots_and_peers_are_optional(run, tmp_path):
    out, payload = run
    names = paper.plot_dataset(payload["datasets"]["zipf"], CFG, str(tmp_path))
    if have("matplotlib"):
        assert sorted(names) == [f"paper_zipf_{m}.png" for m in ("l1", "l2", "mse")]
        assert all((tmp_path / n).stat().st_size > 10_000 for n in names)
    else:
        assert names == []
    missing = peers.missing_modules()
    if missing:
        result = peers.run(peers.QUICK, str(tmp_path), plots=False, log=lambda *a: None)
        assert result == {"skipped": missing}
        assert "Not run" in (tmp_path / "peers.md").read_text(encoding="utf-8")
    else:
        cfg = peers.Config(n=1_000, d=100, epsilons=(4.0,), flh_k=10, cms_k=16, cms_m=32, sampled_reports=50,
                           chunk=500, repeats=1)
        result = peers.run(cfg, str(tmp_path), plots=False, log=lambda *a: None)
        ours = next(r for r in result["rows"] if r["method"] == "l-OCMS+RR")
        assert ours["raw_mse"] is not None and ours["post_mse"] <= ours["raw_mse"]
        assert (tmp_path / "peers.md").exists()


def test_steal_fraction_is_the_stolen_share_of_the_ticks_between_two_readings():
    from benchmarks.experiments.common import cpu_times, steal_fraction

    assert steal_fraction((10, 100), (40, 200)) == pytest.approx(0.3)
    assert steal_fraction((10, 100), (10, 100)) is None  # no time passed
    assert steal_fraction(None, (40, 200)) is None and steal_fraction((10, 100), None) is None
    reading = cpu_times()
    assert reading is None or 0 <= reading[0] <= reading[1]
