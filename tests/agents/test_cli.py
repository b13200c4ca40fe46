import json
import subprocess
import sys
from pathlib import Path

import pytest

from agents.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_plan_json(capsys):
    code, out = run_cli(capsys, "plan", "-e", "2", "-d", "100000", "--n", "1000000", "--target-ci", "0.001", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["params"]["hash_range"] == 4 and data["params"]["field"] == "F(100003)"
    assert data["params"]["report_bytes"] == 7
    assert data["prediction"]["ci_half_width"] == pytest.approx(0.001926, rel=1e-3)
    assert data["reports_needed"] == 3708605


def test_plan_text_strings_l2(capsys):
    code, out = run_cli(capsys, "plan", "-e", "2", "--strings", "--mode", "l2", "--tracked", "1000", "--n", "100000")
    assert code == 0 and "GF(2^128)" in out and "l2 over D=1000" in out


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["plan", "-e", "0", "-d", "10"], "epsilon=0.0"),
        (["plan", "-e", "nan", "-d", "10"], "not finite"),
        (["plan", "-e", "2"], "--dictionary-size is required"),
        (["plan", "-e", "2", "-d", "0"], "must be >= 1"),
        (["plan", "-e", "2", "-d", "ten"], "not an integer"),
        (["plan", "-e", "2", "-d", "10", "--mode", "l2"], "tracked_count"),
        (["plan", "-e", "2", "-d", "10", "--f-star", "2"], "f_star=2.0"),
        (["plan", "-e", "2", "-d", "10", "--target-mse", "-1"], "target_mse=-1.0"),
        (["plan", "-e", "2", "-d", "10", "--n", "5", "--confidence", "1.5"], "confidence"),
        (["plan", "-e", "2", "-d", "10", "--strings"], "exclusive"),
    ],
)
def test_plan_bad_input_exits_2_naming_the_flag(capsys, argv, fragment):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert fragment in capsys.readouterr().err


def test_console_script_entry_point():
    script = Path(sys.executable).parent / "ocms"  # installed by pyproject [project.scripts]
    out = subprocess.run([str(script), "plan", "-e", "1", "-d", "2^64", "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["params"]["field"] == "GF(2^64)"
