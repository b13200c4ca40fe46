"""The tests' own support: poll_until (tests/support/waiting.py), the check that only integration
tests start processes (tests/support/process_guard.py), and benchmarks that run as modules."""

from __future__ import annotations

import importlib
import itertools
from pathlib import Path

import pytest

from tests.support.waiting import poll_until

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")


# ------------------------------------------------------------------------------- poll_until

def test_poll_until_returns_the_first_true_value():
    values = iter([0, None, "", 7, 8])
    assert poll_until(lambda: next(values), 5, "a value", interval=0) == 7


def test_poll_until_fails_naming_what_it_waited_for_and_the_last_value_it_saw():
    counter = itertools.count()
    with pytest.raises(AssertionError) as info:
        poll_until(lambda: next(counter), 0.05, "the count to reach 10**9", until=lambda n: n >= 10**9, interval=0.01)
    message = str(info.value)
    assert message.startswith("timed out after 0.05 s waiting for the count to reach 10**9; last observed: ")
    assert int(message.rsplit(": ", 1)[1]) >= 1  # the last count read, not a bare False


def test_poll_until_treats_a_refused_connection_as_not_yet_and_shows_it():
    def refused():
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(AssertionError, match=r"waiting for the server; last observed: ConnectionRefusedError\(111"):
        poll_until(refused, 0.05, "the server", interval=0.01)


def test_poll_until_ends_at_once_on_an_assertion_of_the_condition():
    calls = []

    def dead():
        calls.append(1)
        raise AssertionError("worker exited with 1")

    with pytest.raises(AssertionError, match="worker exited with 1"):
        poll_until(dead, 30, "the worker")
    assert len(calls) == 1


def test_poll_until_evaluates_the_condition_once_more_after_the_deadline():
    """On a busy machine the sleep may overrun the deadline: the last look still counts."""
    looks = []

    def slow_true():
        looks.append(1)
        return len(looks) >= 2

    assert poll_until(slow_true, 0.05, "the second look", interval=0.2) is True  # the sleep overruns the deadline


def test_a_long_last_value_is_shortened_in_the_message():
    with pytest.raises(AssertionError) as info:
        poll_until(lambda: "x" * 100_000, 0, "nothing", until=lambda _: False)
    assert len(str(info.value)) < 2_000 and "characters) ..." in str(info.value)


# ----------------------------------------------------------------------- benchmarks as modules

@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_benchmark_imports_as_a_module_without_editing_sys_path(name):
    """`python -m benchmarks.NAME` from the checkout's root: the package imports as it is."""
    source = (ROOT / "benchmarks" / f"{name}.py").read_text()
    assert "sys.path" not in source, f"benchmarks/{name}.py edits sys.path; run it as python -m benchmarks.{name}"
    module = importlib.import_module(f"benchmarks.{name}")
    assert callable(getattr(module, "main", None)), f"benchmarks/{name}.py has no main()"


# ---------------------------------------------------------------------------- process guard

GUARDED = '''
import subprocess
import sys

import pytest


def test_unmarked_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_unmarked_swallows_the_refusal():
    try:
        subprocess.run(["true"])
    except Exception:
        pass


def test_unmarked_spawns_a_multiprocessing_child():
    import multiprocessing

    process = multiprocessing.get_context("spawn").Process(target=print)
    process.start()
    process.join()


@pytest.mark.integration
def test_marked_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_unmarked_in_process_work():
    assert sum(range(10)) == 45
'''


@pytest.mark.integration
def test_tests_that_start_processes_without_the_integration_mark_fail(pytester, monkeypatch):
    pytester.makeini("[pytest]\nmarkers =\n    integration: starts processes or a broker\n")
    pytester.makepyfile(test_guarded=GUARDED)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess("-p", "tests.support.process_guard", "-rfE")
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines([
        "*test_unmarked_starts_a_process*starts a process*-c pass*not marked @pytest.mark.integration*",
        "*test_unmarked_swallows_the_refusal*without @pytest.mark.integration: true*",
    ])
    assert "test_unmarked_spawns_a_multiprocessing_child" in result.stdout.str()
