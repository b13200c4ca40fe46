"""The producer-side commands of `ocms` (fleet/cli.py): plan, simulate, estimate, broker.

Run through the one entry point (ocms.cli:main) as a user would; errors are one line naming the flag.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ocms.cli import main
from tests.agents.harness import ocms, one_line


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
        (["plan", "-e", "0", "-d", "10"], "--epsilon 0: must be a finite number > 0"),
        (["plan", "-e", "nan", "-d", "10"], "--epsilon nan: must be a finite number"),
        (["plan", "-e", "200", "-d", "10"], "--epsilon 200: "),
        (["plan", "-e", "2"], "--dictionary-size is required"),
        (["plan", "-e", "2", "-d", "0"], "--dictionary-size 0: must be >= 1"),
        (["plan", "-e", "2", "-d", "ten"], "--dictionary-size ten: must be an integer"),
        (["plan", "-e", "2", "-d", "10", "--mode", "l2"], "--mode l2 needs --tracked N"),
        (["plan", "-e", "2", "-d", "10", "--f-star", "2"], "--f-star 2: must be in [0, 1]"),
        (["plan", "-e", "2", "-d", "10", "--target-mse", "-1"], "--target-mse -1: "),
        (["plan", "-e", "2", "-d", "10", "--n", "5", "--confidence", "1.5"], "--confidence 1.5: "),
        (["plan", "-e", "2", "-d", "10", "--strings"], "--strings True: exclusive with --dictionary-size"),
        # --hash-range fixes m: the flags that only choose the optimum m are refused, not dropped
        (["plan", "-e", "2", "-d", "10", "--hash-range", "8", "--f-star", "0.5"], "--f-star 0.5: has no effect with --hash-range"),
        (["plan", "-e", "2", "-d", "10", "--hash-range", "8", "--mechanism", "direct"], "--mechanism direct: contradicts"),
        (["plan", "-e", "2", "-d", "10", "--hash-range", "8", "--mode", "l2", "--tracked", "5"], "--mode l2: has no effect with --hash-range"),
    ],
)
def test_plan_bad_input_exits_2_naming_the_flag(capsys, argv, fragment):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and "=None" not in err


def test_plan_hash_range_alone_is_honoured(capsys):
    code, out = run_cli(capsys, "plan", "-e", "2", "-d", "100", "--hash-range", "8", "--json")
    assert code == 0 and json.loads(out)["params"]["hash_range"] == 8


def test_simulate_then_estimate_offline(capsys, tmp_path):
    cap, truth = tmp_path / "r.cap", tmp_path / "truth.json"
    code = main(["simulate", "--dataset", "zipf:s=1.1,d=200", "--reports", "50000", "--frame-size", "500",
                 "--out", str(cap), "--truth", str(truth), "--seed", "3"])
    printed = capsys.readouterr()
    assert code == 0 and printed.out == ""  # the status line is not data: stderr
    assert "sent 50,000 reports in 100 messages" in printed.err and "reports/s" in printed.err
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
        (["simulate", "--reports", "10"], "--bootstrap-servers: give a Kafka bootstrap address, an --out file or both"),
        (["simulate", "--reports", "0", "--out", "x"], "must be >= 1"),
        (["simulate", "--frame-size", "0", "--out", "x"], "must be >= 1"),
        (["simulate", "--rate", "-5", "--out", "x"], "--rate -5: "),
        (["simulate", "--dataset", "uniform:d=10", "-d", "20", "--out", "x"], "--dictionary-size 20: "),
        (["simulate", "--reports", "10", "--out", "missing/x.cap"], "--out missing/x.cap: directory "),
        (["simulate", "--reports", "10", "--out", "x.cap", "--truth", "missing/t.json"], "--truth missing/t.json: directory "),
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


@pytest.mark.integration
def test_broker_command_starts_creates_topics_and_stops_cleanly():
    import asyncio
    import os
    import re
    import signal

    from infra.kafka import wait_until_ready

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


@pytest.mark.integration
def test_simulate_out_in_a_missing_directory_is_one_line(tmp_path):
    for flag in ("--out", "--truth"):
        target = tmp_path / "missing" / "x"
        argv = ["simulate", "--reports", "10", flag, str(target)] + (["--out", str(tmp_path / "ok.cap")]
                                                                       if flag == "--truth" else [])
        code, _, err = ocms(*argv)
        assert code == 2 and f"{flag} {target}: directory {tmp_path / 'missing'} does not exist" in one_line(err)
        assert not (tmp_path / "ok.cap").exists()  # refused before any work


@pytest.mark.integration
def test_simulate_that_cannot_reach_kafka_says_so_in_one_line():
    code, _, err = ocms("simulate", "--reports", "10", "--bootstrap-servers", "127.0.0.1:9")
    assert code == 1
    assert "cannot reach Kafka at 127.0.0.1:9 (--bootstrap-servers): no broker answered" in one_line(err)


@pytest.mark.integration
def test_simulate_offers_only_flags_that_work(tmp_path):
    code, out, _ = ocms("simulate", "--help")
    assert code == 0 and "--strings" in out and "--epsilon" in out
    code, out, err = ocms("simulate", "--strings", "--dataset", "uniform:d=5", "--reports", "10",
                          "--out", str(tmp_path / "s.cap"))
    assert code == 0 and "sent 10 reports" in err, err
