"""`ocms plan --shuffled N --delta D` and the poisoning exposure, in both bodies of `ocms plan` (the flags'
parameter set and `--registry`), and the note of mechanism auto in `ocms registry check` (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cms_core import OCMSParams, planning
from cms_core.shuffle import central_epsilon

from .helpers import run, write

ROOT = Path(__file__).resolve().parents[2]

#: Metric 'small' (d = 9, eps 1, f* 0.1): auto picks direct RR, 2.06x as exposed as OCMS+RR; 'pinned' is the
#: same with the mechanism written down (no note: nobody picked for the owner); 'wide' picks OCMS+RR.
TEXT = """\
metrics:
  - name: small
    description: nine values at epsilon 1
    owner: tests
    integers: 9
    epsilon: 1
    f_star: 0.1
  - name: pinned
    description: the same, pinned
    owner: tests
    integers: 9
    epsilon: 1
    f_star: 0.1
    mechanism: direct
  - name: wide
    description: a thousand values
    owner: tests
    integers: 1000
    epsilon: 2
"""

NOTE = "mechanism auto picks direct RR for its lower worst-case MSE, but it is 2.06x as exposed to poisoning as OCMS+RR"


def test_plan_json_has_central_epsilon_and_poisoning(capsys):
    code, out, _ = run(capsys, "plan", "-e", "2", "-d", "1024", "--n", "100000", "--shuffled", "100000", "--json")
    assert code == 0
    doc = json.loads(out)
    shuffled = doc["shuffled"]
    assert shuffled["central_epsilon"] == central_epsilon(100_000, 2.0, 1e-6) == pytest.approx(0.0450, abs=1e-4)
    assert shuffled["delta"] == 1e-6 and shuffled["reports"] == 100_000 and shuffled["bound"].startswith("FMT21")
    poisoning = doc["poisoning"]
    params = OCMSParams.build(2.0, 1024)
    assert poisoning["fake_fraction_for_1pct"] == pytest.approx(0.01 / params.poisoning_gain)
    assert poisoning["gain_per_1pct_fake"] == pytest.approx(params.poisoning_gain / 100)
    # D = the dictionary (tracked whole by default at d <= 100,000), n = --n.
    assert poisoning["noise_floor"] == planning.noise_floor(params, 100_000, 0.95, 1024)
    assert poisoning["fake_fraction_for_noise_floor"] == pytest.approx(poisoning["noise_floor"] / params.poisoning_gain)
    assert poisoning["mechanisms"]["direct"]["fake_fraction_for_1pct"] == pytest.approx(6.2066e-5, rel=1e-4)
    # --delta is honoured; without --shuffled there is no central epsilon, the poisoning figures stay.
    code, out, _ = run(capsys, "plan", "-e", "2", "-d", "1024", "--shuffled", "100000", "--delta", "1e-8", "--json")
    assert json.loads(out)["shuffled"]["central_epsilon"] == central_epsilon(100_000, 2.0, 1e-8)
    code, out, _ = run(capsys, "plan", "-e", "2", "-d", "1024", "--json")
    doc = json.loads(out)
    # no --n: the plan's default n (100,000, as with --registry: one body, issue 26)
    assert "shuffled" not in doc and doc["poisoning"]["noise_floor"] == planning.noise_floor(params, 100_000, 0.95, 1024)


def test_plan_text_states_both(capsys):
    code, out, _ = run(capsys, "plan", "-e", "4", "-d", "16", "--n", "100000", "--shuffled", "100000")
    assert code == 0
    assert "shuffled batches of 100,000 reports: central epsilon 0.1699 at delta 1e-06" in out
    assert "not against the collector" in out
    lines = out.splitlines()
    ocms_line = next(line for line in lines if line.startswith("  OCMS+RR    each 1% of fakes adds"))
    direct_line = next(line for line in lines if line.startswith("  direct RR  each 1% of fakes adds"))
    assert "to its noise floor" in ocms_line and "of fakes lift it to 1%" in direct_line


@pytest.mark.parametrize("argv, fragment", [
    (["--shuffled", "0"], "argument --shuffled: 0 must be >= 1"),
    (["--shuffled", "1e5"], "argument --shuffled: '1e5' is not an integer"),
    (["--shuffled", "1000", "--delta", "0"], "--delta 0: must be a number in (0, 1)"),
    (["--shuffled", "1000", "--delta", "nan"], "argument --delta: 'nan' is not finite"),
    (["--shuffled", "1000", "--delta", "0.001"], "--delta 0.001: must be below 1/N = 0.001 for batches of N = 1,000"),
    (["--delta", "1e-6"], "--delta 1e-06: applies to shuffled batches: give their size with --shuffled N"),
])
def test_bad_shuffle_flags_exit_2_naming_the_value(capsys, tmp_path, argv, fragment):
    code, _, err = run(capsys, "plan", "-e", "2", "-d", "100", *argv)
    assert code == 2 and fragment in err and "Traceback" not in err, err
    # The same check in the --registry body, before the registry is read.
    code, _, err = run(capsys, "plan", "--registry", str(tmp_path / "absent.yaml"), *argv)
    assert code == 2 and fragment in err, err


def test_plan_registry_has_the_figures_per_version(tmp_path, capsys):
    path = write(tmp_path, TEXT)
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--shuffled", "200000", "--delta", "1e-7", "--json")
    assert code == 0
    records = {r["metric"]: r for r in json.loads(out)["metrics"]}
    for name, epsilon in (("small", 1.0), ("wide", 2.0)):
        assert records[name]["shuffled"]["central_epsilon"] == central_epsilon(200_000, epsilon, 1e-7)
    wide = records["wide"]["poisoning"]
    assert wide["mechanism"] == "ocms" and wide["note"] is None and wide["n"] == 100_000
    assert wide["noise_floor"] == planning.noise_floor(OCMSParams.build(2.0, 1000), 100_000, 0.95, 1000)
    assert records["small"]["poisoning"]["note"].startswith(NOTE)
    assert records["pinned"]["poisoning"]["note"] is None  # the owner chose direct RR
    assert records["small"]["params"]["mechanism"] == records["pinned"]["params"]["mechanism"] == "direct"

    code, out, _ = run(capsys, "plan", "--registry", str(path), "--shuffled", "200000")
    lines = out.splitlines()
    assert lines[1].split()[-7:] == ["fakes", "for", "1%", "for", "floor", "central", "eps"]
    wide_row = next(line for line in lines if line.startswith("wide "))
    ocms = OCMSParams.build(2.0, 1000)
    assert wide_row.split()[-1] == f"{central_epsilon(200_000, 2.0, 1e-6):.4g}"
    assert wide_row.split()[-3] == f"{0.01 / ocms.poisoning_gain * 100:.3g}%"
    notes = [line for line in lines if line.startswith("note: ")]
    assert notes == [f"note: small version 1: {records['small']['poisoning']['note']}"]


def test_registry_check_says_what_auto_picked(tmp_path, capsys):
    path = write(tmp_path, TEXT)
    code, out, _ = run(capsys, "registry", "check", str(path))
    assert code == 0
    lines = out.splitlines()
    assert "valid: 3 metrics" in lines[0]
    assert len(lines) == 2 and lines[1].startswith(f"note: small version 1: {NOTE}")
    code, _, _ = run(capsys, "registry", "lock", str(path))
    code, out, _ = run(capsys, "registry", "check", str(path))
    assert code == 0 and "locked versions unchanged" in out and out.count("note: ") == 1


def test_shipped_registry_has_no_note(capsys):
    """deploy/registry.yaml: no auto pick more than twice as exposed (its check output stays one line)."""
    code, out, _ = run(capsys, "registry", "check", str(ROOT / "deploy" / "registry.yaml"))
    assert code == 0 and "note:" not in out
