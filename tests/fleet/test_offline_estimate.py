"""ocms simulate -> ocms estimate end to end (issue 18): awkward values come back exactly, and a
wrong question (other parameters, damaged captures, l2 without D) gets a loud answer."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cms_core import OCMSParams
from cms_core.records import ESTIMATE_FIELDS
from infra.capture import CaptureReader
from ocms.cli import main
from registry.values_file import write_values_file

#: value -> relative weight in the simulated fleet
STRING_FLEET = {" a": 40, "a": 2, "a ": 1, "": 10, "line\nbreak": 8, "caf\u00e9": 12, "cafe\u0301": 4,
                "\U0001f600": 20, "7": 3}
INTEGER_FLEET = {0: 10, 7: 5, 2**53 + 1: 30, 2**63: 15, 2**64 - 1: 40}
RECORD_KEYS = ["value", "match_count", *ESTIMATE_FIELDS, "above_noise"]


def ocms(capsys, *argv):
    """Run the CLI in-process: (exit status, stdout, stderr)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def fleet_file(tmp_path, fleet) -> Path:
    path = tmp_path / "fleet.jsonl"
    write_values_file(path, [v for v, w in fleet.items() for _ in range(w)])
    return path


def strict_json(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def big_json_numbers(doc) -> list:
    """Every JSON integer a JavaScript client could not hold exactly."""
    if isinstance(doc, dict):
        return [x for v in doc.values() for x in big_json_numbers(v)]
    if isinstance(doc, list):
        return [x for v in doc for x in big_json_numbers(v)]
    return [doc] if isinstance(doc, int) and not isinstance(doc, bool) and abs(doc) > 2**53 else []


def check_against_truth(doc, truth, fleet):
    """Exact values, exact n, every record's 4-sigma interval holds the true count."""
    assert doc["n"] == truth["reports"] and doc["rejected"] == {} and doc["damaged"] == []
    true_counts = {c["value"]: c["count"] for c in truth["counts"]}
    assert [r["value"] for r in doc["estimates"]] == [str(v) if isinstance(v, int) else v for v in fleet]
    assert set(true_counts) == {r["value"] for r in doc["estimates"]}  # every value came back exactly
    for record in doc["estimates"]:
        assert list(record) == RECORD_KEYS
        assert isinstance(record["match_count"], int)
        err = abs(record["count"] - true_counts[record["value"]])
        assert err <= 4 * record["std"] * doc["n"], (record, true_counts[record["value"]])


def test_string_values_round_trip_simulate_to_estimate(capsys, tmp_path):
    cap, truth_path, tracked = tmp_path / "s.cap", tmp_path / "truth.json", tmp_path / "tracked.jsonl"
    code, out, err = ocms(capsys, "simulate", "--dataset", f"file:{fleet_file(tmp_path, STRING_FLEET)}", "--strings",
                          "-e", "4", "--reports", "40000", "--out", cap, "--truth", truth_path, "--seed", "5")
    assert code == 0, err
    truth = json.loads(truth_path.read_text(encoding="utf-8"))
    assert truth["value_domain"] == "string"
    write_values_file(tracked, list(STRING_FLEET))  # file order is the answer's order
    code, out, err = ocms(capsys, "estimate", cap, "-e", "4", "--strings", "--tracked-file", tracked)
    assert code == 0 and err == ""
    doc = strict_json(out)
    check_against_truth(doc, truth, STRING_FLEET)
    by_value = {r["value"]: r for r in doc["estimates"]}
    # " a" is the fleet's commonest value, "a" a rare one: never confused (the old reader stripped " a" to "a")
    assert by_value[" a"]["frequency"] > 0.15 > by_value["a"]["frequency"]


def test_integer_values_beyond_2_53_round_trip_as_strings(capsys, tmp_path):
    cap, truth_path, tracked = tmp_path / "i.cap", tmp_path / "truth.json", tmp_path / "tracked.jsonl"
    code, out, err = ocms(capsys, "simulate", "--dataset", f"file:{fleet_file(tmp_path, INTEGER_FLEET)}",
                          "-e", "4", "--reports", "30000", "--out", cap, "--truth", truth_path, "--seed", "6")
    assert code == 0, err
    truth_text = truth_path.read_text()
    assert '"value": "18446744073709551615"' in truth_text and not big_json_numbers(json.loads(truth_text))
    write_values_file(tracked, list(INTEGER_FLEET))
    code, out, err = ocms(capsys, "estimate", cap, "-e", "4", "-d", "2^64", "--tracked-file", tracked)
    assert code == 0 and err == ""
    assert '"value": "18446744073709551615"' in out and '"value": "9007199254740993"' in out
    doc = strict_json(out)
    assert not big_json_numbers(doc)  # jq 1.6 / JavaScript read every number here exactly
    check_against_truth(doc, json.loads(truth_text), INTEGER_FLEET)
    # the value_from_json rule reads every value back to the integer that was sent
    from cms_core.values import value_from_json

    params = OCMSParams.build(4.0, 2**64)
    assert [value_from_json(params, r["value"]) for r in doc["estimates"]] == list(INTEGER_FLEET)


def test_plan_json_holds_no_integer_a_javascript_client_would_round(capsys):
    code, out, _ = ocms(capsys, "plan", "-e", "1", "-d", "2^64", "--n", "1000000", "--json")
    assert code == 0 and not big_json_numbers(json.loads(out))
    assert json.loads(out)["params"]["dictionary_size"] == "18446744073709551616"


def test_chernoff_infinite_half_width_is_null_not_infinity(capsys, tmp_path):
    cap = tmp_path / "c.cap"
    ocms(capsys, "simulate", "--dataset", "uniform:d=10", "--reports", "5", "--frame-size", "1", "--out", cap)
    code, out, _ = ocms(capsys, "estimate", cap, "-e", "2", "-d", "10", "--interval", "chernoff")
    assert code == 0
    doc = strict_json(out)  # no Infinity/NaN tokens: the bound says nothing at n = 5
    assert doc["n"] == 5 and all(r["ci_high"] is None and r["frequency"] is not None for r in doc["estimates"])


@pytest.fixture
def capture(capsys, tmp_path):
    """A 20-message capture of 2,000 reports made with epsilon 2, d = 50."""
    cap = tmp_path / "r.cap"
    code, _, err = ocms(capsys, "simulate", "--dataset", "uniform:d=50", "--reports", "2000", "--frame-size", "100",
                        "--out", cap, "--seed", "1")
    assert code == 0, err
    return cap


def test_other_epsilon_is_a_loud_failure_naming_fingerprint_and_matching_flag(capsys, capture):
    code, out, err = ocms(capsys, "estimate", capture, "-e", "3", "-d", "50")
    sent = OCMSParams.build(2.0, 50).fingerprint.hex()
    asked = OCMSParams.build(3.0, 50).fingerprint.hex()
    assert code == 1
    assert "20 of 20 messages rejected (unknown_fingerprint 20); 0 reports counted" in err
    assert f"other parameter fingerprints than the flags' {asked}" in err
    assert f"fingerprint {sent}: 20 messages, 2,000 reports; matches --epsilon 2 (other flags as given)" in err
    assert "error: nothing counted" in err
    doc = json.loads(out)  # the document is still written, for inspection
    assert doc["n"] == 0 and doc["rejected_fingerprints"] == {sent: 20}
    assert all(r["frequency"] is None and r["match_count"] == 0 for r in doc["estimates"])


@pytest.mark.parametrize("sent, asked, hint", [
    ([], ["--hash-range", "9"], "matches --mode mse without --hash-range"),
    (["--hash-range", "7"], [], "matches --hash-range 7"),
    ([], ["-d", "60"], "no nearby flags match (check --dictionary-size"),
])
def test_other_parameters_name_what_would_match(capsys, tmp_path, sent, asked, hint):
    cap = tmp_path / "h.cap"
    code, _, err = ocms(capsys, "simulate", "--dataset", "uniform:d=50", "--reports", "300", "--frame-size", "100",
                        "--out", cap, *sent)
    assert code == 0, err
    code, _, err = ocms(capsys, "estimate", cap, "-e", "2", *(asked if "-d" in asked else ["-d", "50", *asked]))
    assert code == 1 and hint in err, err


def test_some_rejects_warn_but_answer(capsys, capture, tmp_path):
    other = tmp_path / "other.cap"
    ocms(capsys, "simulate", "--dataset", "uniform:d=50", "-e", "1", "--reports", "300", "--frame-size", "100",
         "--out", other)
    code, out, err = ocms(capsys, "estimate", capture, other, "-e", "2", "-d", "50")
    assert code == 0 and json.loads(out)["n"] == 2000
    assert "3 of 23 messages rejected (unknown_fingerprint 3); 2,000 reports counted" in err
    assert "matches --epsilon 1" in err


@pytest.mark.parametrize("cut, counted, reason", [
    (30, 1900, "truncated message"),  # inside the last message's body
    (-2, 2000, "truncated length prefix (2 of 4 bytes)"),  # a torn prefix after the last message
])
def test_damaged_tail_counts_every_complete_message(capsys, capture, tmp_path, cut, counted, reason):
    data = capture.read_bytes()
    torn = tmp_path / "torn.cap"
    if cut > 0:
        torn.write_bytes(data[:-cut])
    else:
        torn.write_bytes(data + b"\x00\x00")
    complete = len(data) - (len(data) // 20) if cut > 0 else len(data)  # 20 equal-size frames
    code, out, err = ocms(capsys, "estimate", torn, "-e", "2", "-d", "50")
    assert code == 0 and json.loads(out)["n"] == counted
    assert f"warning: {torn}: damaged tail at byte offset {complete} (after {counted // 100} complete messages): {reason}" in err
    assert json.loads(out)["damaged"][0]["offset"] == complete
    code, _, err = ocms(capsys, "estimate", torn, "-e", "2", "-d", "50", "--strict")
    assert code == 1 and "--strict: 1 capture file(s) damaged" in err


def test_not_a_capture_counts_nothing_and_fails(capsys, tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("these are not wire messages\n")
    code, out, err = ocms(capsys, "estimate", junk, "-e", "2", "-d", "50")
    assert code == 1
    assert "damaged tail at byte offset 0 (after 0 complete messages): length prefix" in err
    assert "nothing counted: the captures hold no complete message" in err


def test_strict_reader_raises_and_lenient_reader_keeps_the_damage(capture, tmp_path):
    torn = tmp_path / "torn.cap"
    torn.write_bytes(capture.read_bytes()[:-1])
    reader = CaptureReader(torn)
    assert len(list(reader)) == 19 and reader.damage.message_index == 19
    with pytest.raises(Exception, match="damaged tail"):
        list(CaptureReader(torn, strict=True))


def test_l2_derives_tracked_count_from_the_tracked_set(capsys, tmp_path):
    cap = tmp_path / "l2.cap"
    # devices configured for l2 over D = 20 tracked values
    code, _, err = ocms(capsys, "simulate", "--dataset", "uniform:d=50", "--mode", "l2", "--tracked", "20",
                        "--reports", "500", "--frame-size", "100", "--out", cap)
    assert code == 0, err
    for tracked in (["--tracked-range", "10:30"], ["--tracked-file", "VALUES"]):
        values = tmp_path / "twenty.txt"
        values.write_text("".join(f"{i}\n" for i in range(20)))
        argv = [str(values) if a == "VALUES" else a for a in tracked]
        code, out, err = ocms(capsys, "estimate", cap, "-e", "2", "-d", "50", "--mode", "l2", *argv)
        assert code == 0, err
        doc = json.loads(out)
        assert doc["n"] == 500 and doc["params"]["tracked_count"] == 20


@pytest.mark.parametrize("argv, fragment", [
    (["plan", "-e", "2", "-d", "10", "--mode", "l2"], "--mode l2 needs --tracked N"),
    (["estimate", "x.cap", "-e", "2", "--strings", "--mode", "l2"],
     "--mode l2 needs --tracked N (tracked_count D, the number of tracked values), or a tracked set"),
    (["estimate", "x.cap", "-e", "2", "-d", "10", "--mode", "l2", "--tracked-range", "1-5"], "--tracked-range 1-5: expected START:STOP"),
    (["estimate", "x.cap", "-e", "2", "--strings", "--mode", "l2", "--tracked-file", "missing.jsonl"],
     "--tracked-file missing.jsonl: cannot read"),
])
def test_l2_without_tracked_count_names_the_flag(capsys, tmp_path, monkeypatch, argv, fragment):
    monkeypatch.chdir(tmp_path)
    code, _, err = ocms(capsys, *argv)
    assert code == 2 and fragment in err, err


@pytest.mark.integration
def test_installed_entry_point_exit_status_and_stderr(capture):
    script = Path(sys.executable).parent / "ocms"
    run = subprocess.run([str(script), "estimate", str(capture), "-e", "2.5", "-d", "50"],
                         capture_output=True, text=True, env={**os.environ})
    assert run.returncode == 1 and "matches --epsilon 2 " in run.stderr
    doc = json.loads(run.stdout)
    assert doc["n"] == 0 and doc["messages"] == 20 and doc["rejected"] == {"unknown_fingerprint": 20}


def test_worker_l2_derives_tracked_count_for_every_parameter_set(tmp_path):
    from agents.cli import worker_settings_from_args
    from ocms.cli import build_parser

    values = tmp_path / "t.jsonl"
    write_values_file(values, [" a", "", "line\nbreak"])
    args = build_parser().parse_args(["worker", "-e", "2", "--strings", "--mode", "l2", "--tracked-file", str(values),
                                      "--extra-epsilon", "1", "--bootstrap-servers", "k:9092"])
    _, metrics = worker_settings_from_args(args, environ={})
    versions = metrics.metrics[0].versions
    assert [v.params.tracked_count for v in versions] == [3, 3]
    assert versions[-1].params.fingerprint == OCMSParams.build(2.0, mode="l2", tracked_count=3,
                                                               value_domain="string").fingerprint


def test_simulate_strings_sends_labels_of_an_unlabelled_dataset(capsys, tmp_path):
    cap, tracked = tmp_path / "u.cap", tmp_path / "t.txt"
    code, _, err = ocms(capsys, "simulate", "--dataset", "uniform:d=20", "--strings", "--reports", "2000",
                        "--out", cap)
    assert code == 0, err
    tracked.write_text("".join(f"{i}\n" for i in range(20)))  # plain lines: unambiguous here
    code, out, err = ocms(capsys, "estimate", cap, "-e", "2", "--strings", "--tracked-file", tracked)
    doc = json.loads(out)
    assert code == 0 and doc["n"] == 2000 and doc["params"]["value_domain"] == "string"
    assert sum(r["match_count"] for r in doc["estimates"]) > 2000 * 0.7 / 4  # kept reports land on their value


@pytest.mark.parametrize("argv, fragment", [
    (["--dataset", "uniform:d=20000000", "--strings"], "too many to send as strings"),
    (["--dataset", "uniform:d=20", "-d", "30"], "dataset's integer dictionary d=20"),
    (["--dataset", "file:BIG", "-d", "2^63"], "holds the value 18446744073709551615"),
])
def test_simulate_refuses_parameters_that_cannot_carry_the_dataset(capsys, tmp_path, argv, fragment):
    big = tmp_path / "big.jsonl"
    write_values_file(big, [2**64 - 1])
    code, _, err = ocms(capsys, "simulate", *[f"file:{big}" if a == "file:BIG" else a for a in argv],
                        "--reports", "10", "--out", tmp_path / "x.cap")
    assert code == 2 and fragment in err, err
