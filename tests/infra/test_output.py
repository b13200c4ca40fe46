"""infra.output: command output to a pipe that closes early (`ocms estimate ... | head`)."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # runs `ocms` into closed pipes

ROOT = Path(__file__).resolve().parents[2]

WRITER = "from infra.output import write_stdout\nfor i in range(100_000):\n    write_stdout(f'line {i}\\n')\n"


def test_a_reader_that_stops_early_ends_the_command_quietly():
    process = subprocess.Popen([sys.executable, "-c", WRITER], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert process.stdout.readline() == b"line 0\n"
    process.stdout.close()  # what `| head -1` does once it has its line
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err.decode()
    assert err == b""  # no BrokenPipeError traceback, no "Exception ignored" at exit


def test_the_negative_control_print_does_leave_a_traceback():
    """The same loop with plain print: what write_stdout exists to avoid."""
    process = subprocess.Popen([sys.executable, "-c", "for i in range(100_000):\n    print(f'line {i}')\n"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()
    _, err = process.communicate(timeout=30)
    assert process.returncode != 0 and b"BrokenPipeError" in err
