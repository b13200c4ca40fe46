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


def test_simulate_then_estimate_offline(capsys, tmp_path):
    cap, truth = tmp_path / "r.cap", tmp_path / "truth.json"
    code, out = run_cli(capsys, "simulate", "--dataset", "zipf:s=1.1,d=200", "--reports", "50000",
                        "--frame-size", "500", "--out", str(cap), "--truth", str(truth), "--seed", "3")
    assert code == 0 and "sent 50,000 reports in 100 messages" in out and "reports/s" in out
    code, out = run_cli(capsys, "estimate", str(cap), "-e", "2", "-d", "200", "--tracked-range", "0:10")
    doc = json.loads(out)
    counts = {c["value"]: c["count"] for c in json.loads(truth.read_text())["counts"]}
    assert doc["n"] == 50_000 and doc["rejected"] == {}
    inside = sum(r["count_ci_low"] <= counts.get(r["value"], 0) <= r["count_ci_high"] for r in doc["estimates"])
    assert inside >= 8  # 95% intervals over 10 values
    # estimating with other parameters rejects every message by fingerprint
    code, out = run_cli(capsys, "estimate", str(cap), "-e", "3", "-d", "200", "--tracked-range", "0:10")
    assert json.loads(out)["rejected"] == {"unknown_fingerprint": 100}


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["simulate", "--dataset", "zipf:s=abc"], "zipf:s"),
        (["simulate", "--reports", "10"], "bootstrap_servers"),
        (["simulate", "--reports", "0", "--out", "x"], "must be >= 1"),
        (["simulate", "--frame-size", "0", "--out", "x"], "must be >= 1"),
        (["simulate", "--rate", "-5", "--out", "x"], "rate"),
        (["simulate", "--dataset", "uniform:d=10", "-d", "20", "--out", "x"], "dictionary_size"),
        (["estimate", "/no/such.cap", "-e", "2", "-d", "10"], "cannot read capture file"),
        (["estimate", "x.cap", "-e", "2", "-d", "10", "--tracked-range", "5"], "START:STOP"),
        (["estimate", "x.cap", "-e", "2", "-d", "10", "--tracked-range", "5:50"], "range [5, 50)"),
        (["broker", "--topic", "nopartitions"], "NAME:PARTITIONS"),
    ],
)
def test_simulate_estimate_bad_input(capsys, tmp_path, monkeypatch, argv, fragment):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert fragment in capsys.readouterr().err


def test_broker_command_starts_creates_topics_and_stops_cleanly():
    import asyncio
    import os
    import re
    import signal

    from producer.broker import wait_until_ready

    script = Path(sys.executable).parent / "ocms"
    proc = subprocess.Popen([str(script), "broker", "--topic", "cli-topic:2"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"on (127\.0\.0\.1:\d+), pid (\d+)", line)
        assert match, line
        bootstrap, broker_pid = match.group(1), int(match.group(2))
        asyncio.run(wait_until_ready(bootstrap, timeout=5))
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
    with pytest.raises(ProcessLookupError):
        os.kill(broker_pid, 0)  # no orphan broker
