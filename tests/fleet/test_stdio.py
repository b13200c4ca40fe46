"""`ocms simulate ... --out - | ocms estimate ... -`: captures through a real pipe (issue 24, section 5).

The status line of simulate goes to stderr (stdout may be the capture), ``-`` is standard output for
``--out``/``--truth`` and standard input for estimate's and discover's captures, and a damaged tail read
from a pipe reports the bytes it really ignores (a pipe's size is 0, which used to be reported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from infra.capture import CaptureDamage, CaptureReader
from tests.agents.harness import ROOT, ocms

pytestmark = pytest.mark.integration  # starts `ocms` processes joined by pipes

ESTIMATE = ["estimate", "-e", "2", "-d", "1000", "--tracked-range", "0:5"]
SIMULATE = ["simulate", "--dataset", "zipf:s=1.1,d=1000", "--reports", "3000", "--frame-size", "500", "--seed", "4",
            "--no-progress"]


def command(*argv: str) -> list[str]:
    return [sys.executable, "-m", "ocms", *argv]


def environment() -> dict:
    """The user's environment without OCMS_* variables; the checkout importable from any directory."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}, "PYTHONPATH": str(ROOT)}


def pipeline(producer: list[str], consumer: list[str], cwd, timeout: float = 120) -> tuple[int, int, bytes, str, str]:
    """``producer | consumer`` through an OS pipe, in ``cwd``: (producer status, consumer status, consumer
    stdout, producer stderr, consumer stderr)."""
    first = subprocess.Popen(command(*producer), cwd=cwd, env=environment(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    second = subprocess.Popen(command(*consumer), cwd=cwd, env=environment(), stdin=first.stdout,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first.stdout.close()  # the consumer holds the read end alone: it sees EOF when the producer exits
    out, err2 = second.communicate(timeout=timeout)
    err1 = first.stderr.read()
    first.stderr.close()
    first.wait(timeout=timeout)
    return first.returncode, second.returncode, out, err1.decode(), err2.decode()


def estimate_of_file(tmp_path) -> dict:
    capture = tmp_path / "file.cap"
    code, _, err = ocms(*SIMULATE, "--out", str(capture))
    assert code == 0, err
    code, out, err = ocms(*ESTIMATE, str(capture))
    assert code == 0 and all(line.startswith("ocms estimate: note: ") for line in err.splitlines()), err
    return json.loads(out)


@pytest.mark.parametrize("out, read", [("-", "-"), ("/dev/stdout", "/dev/stdin")])
def test_simulate_pipes_into_estimate_without_a_warning(tmp_path, out, read):
    status1, status2, stdout, err1, err2 = pipeline([*SIMULATE, "--out", out], [*ESTIMATE, read], tmp_path)
    assert (status1, status2) == (0, 0), (err1, err2)
    # no damaged tail (the status line is no longer written into the capture): only the noise note, if any
    assert all(line.startswith("ocms estimate: note: ") for line in err2.splitlines()), err2
    assert "sent 3,000 reports in 6 messages to" in err1
    doc = json.loads(stdout)
    assert doc["n"] == 3000 and doc["damaged"] == [] and doc["rejected"] == {}
    assert doc["estimates"] == estimate_of_file(tmp_path)["estimates"]  # the same reports as through a file
    assert not (tmp_path / "-").exists()  # `-` is standard output, not a file named '-'


def test_a_damaged_tail_on_a_pipe_counts_the_bytes_it_ignores():
    """A torn message behind one complete message, written to estimate's standard input: the warning names
    the real tail (a pipe has no size: it used to say 'the last 0 bytes are ignored')."""
    good = bytes.fromhex("4f430101eee2f6ee10f1ea5400000001") + b"\x00\x01\x02\x03\x01"  # not decodable: fine here
    message = len(good).to_bytes(4, "big") + good
    torn = (1000).to_bytes(4, "big") + b"x" * 37  # says 1,000 bytes, holds 37
    done = subprocess.run(command(*ESTIMATE, "-"), cwd=ROOT, env=environment(), input=message + torn,
                          capture_output=True, timeout=60)
    err = done.stderr.decode()
    assert f"standard input: damaged tail at byte offset {len(message)} (after 1 complete messages): truncated " \
           f"message: 37 of 1,000 bytes; the last {len(torn)} bytes are ignored" in err
    doc = json.loads(done.stdout)
    assert doc["damaged"][0]["ignored_bytes"] == len(torn) and doc["damaged"][0]["ignored_bytes_exact"]


def test_reader_counts_a_pipes_tail_and_bounds_an_endless_one(monkeypatch):
    """In process: a pipe is read to its end to count the ignored bytes, up to MAX_COUNTED_TAIL_BYTES."""
    import infra.capture as capture

    read_end, write_end = os.pipe()
    os.write(write_end, (10**9).to_bytes(4, "big") + b"y" * 5000)  # an impossible length, then 5,000 bytes
    os.close(write_end)
    with os.fdopen(read_end, "rb") as stream:
        monkeypatch.setattr(sys, "stdin", type("In", (), {"buffer": stream})())
        reader = CaptureReader("-")
        assert list(reader) == []
    assert reader.damage == CaptureDamage("standard input", 0, 0, reader.damage.reason, 5004, True)
    read_end, write_end = os.pipe()
    os.write(write_end, (10**9).to_bytes(4, "big") + b"z" * 5000)
    os.close(write_end)
    monkeypatch.setattr(capture, "MAX_COUNTED_TAIL_BYTES", 1000)
    with os.fdopen(read_end, "rb") as stream:
        monkeypatch.setattr(sys, "stdin", type("In", (), {"buffer": stream})())
        reader = CaptureReader("-")
        list(reader)
    assert not reader.damage.ignored_bytes_exact and reader.damage.ignored_bytes > 1000
    assert "the rest of the stream (more than" in reader.damage.describe()


def test_truth_to_standard_output_and_both_refused(tmp_path):
    code, out, err = ocms(*SIMULATE, "--out", str(tmp_path / "c.cap"), "--truth", "-")
    assert code == 0 and json.loads(out)["reports"] == 3000 and "sent 3,000 reports" in err
    code, out, err = ocms(*SIMULATE, "--out", "-", "--truth", "-")
    assert code == 2 and "only one of them can be standard output" in err and out == ""


def test_discovery_reports_pipe_into_discover(tmp_path):
    """The discovery fleet through a pipe: `ocms simulate --discovery --out -` into `ocms discover ... -`."""
    registry = str(ROOT / "deploy" / "registry.yaml")
    fleet = tmp_path / "tails.txt"
    fleet.write_text("N725MQ\n" * 9 + "N722MQ\n", encoding="utf-8")
    status1, status2, stdout, err1, err2 = pipeline(
        ["simulate", "--registry", registry, "--metric", "flight_tailnum", "--discovery", "--dataset",
         f"file:{fleet}", "--reports", "20000", "--seed", "2", "--out", "-"],
        ["discover", "--registry", registry, "--metric", "flight_tailnum", "-"], tmp_path)
    assert (status1, status2) == (0, 0), (err1, err2)
    assert "flight_tailnum@1 discovery (7 levels): sent 20,000 reports" in err1
    assert err2.startswith("ocms discover: found 2 values; a value needed") and len(err2.splitlines()) == 1, err2
    doc = json.loads(stdout)
    assert doc["reports"] == 20_000 and "N725MQ" in {d["value"] for d in doc["discovered"]}
    assert not (tmp_path / "-").exists()
