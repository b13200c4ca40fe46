"""`--mechanism` on the command line: plan prints both mechanisms, simulate -> estimate round-trips direct RR."""

import json

import pytest

from ocms.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_plan_prints_both_mechanisms_and_the_pick(capsys):
    code, out = run_cli(capsys, "plan", "-e", "4", "-d", "16", "--mode", "l2", "--tracked", "16", "--n", "10000")
    assert code == 0
    assert "OCMS+RR" in out and "direct RR" in out and "lower l2 loss: direct RR" in out
    code, out = run_cli(capsys, "plan", "-e", "4", "-d", "16", "--mode", "l2", "--tracked", "16", "--mechanism", "auto",
                        "--json")
    data = json.loads(out)
    assert data["params"]["mechanism"] == "direct" and data["params"]["report_bytes"] == 1
    assert data["mechanisms"]["chosen"] == "direct"
    assert data["mechanisms"]["direct"]["l2_loss"] < data["mechanisms"]["ocms"]["l2_loss"]


def test_plan_rejects_an_unknown_mechanism(capsys):
    with pytest.raises(SystemExit) as info:
        main(["plan", "-e", "2", "-d", "16", "--mechanism", "grr"])
    assert info.value.code == 2 and "--mechanism" in capsys.readouterr().err


def test_plan_direct_for_strings_is_a_clean_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["plan", "-e", "2", "--strings", "--mechanism", "direct"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--mechanism direct: " in err and "integer values" in err and "Traceback" not in err


def test_simulate_then_estimate_direct(capsys, tmp_path):
    capture, truth = tmp_path / "x.cap", tmp_path / "truth.json"
    code = main(["simulate", "--dataset", "zipf:s=1.1,d=16", "-e", "2", "--mechanism", "direct", "--reports", "20000",
                 "--out", str(capture), "--truth", str(truth), "--no-progress"])
    assert code == 0
    capsys.readouterr()
    code, out = run_cli(capsys, "estimate", "-e", "2", "-d", "16", "--mechanism", "direct", str(capture))
    assert code == 0
    doc = json.loads(out)
    assert doc["params"]["mechanism"] == "direct" and doc["n"] == 20000 and not doc["rejected"]
    counts = {int(c["value"]): c["count"] for c in json.loads(truth.read_text())["counts"]}
    for row in doc["estimates"]:
        # 5 standard deviations of the count estimate.
        assert abs(row["count"] - counts.get(int(row["value"]), 0)) < 5 * row["std"] * doc["n"]
    # The OCMS+RR parameters of the same flags do not read the direct capture.
    code, out = run_cli(capsys, "estimate", "-e", "2", "-d", "16", str(capture))
    other = json.loads(out)
    assert other["n"] == 0 and set(other["rejected"]) == {"unknown_fingerprint"}
