"""Only tests marked ``@pytest.mark.integration`` may start a process (a broker, a worker, ``ocms``).

``pytest -m "not integration"`` is the fast loop: it must start no process at all. This plugin
(loaded by tests/conftest.py) makes that a checked fact rather than a habit: while a test runs
(setup, call and teardown, so module-scoped fixtures count for the test that first needs them),
every way Python starts a process goes through a check. A test without the marker that tries gets
a ``ProcessWithoutIntegrationMark`` error at that call, naming the command, and fails even when
the code under test swallows the error.

The hooks cover ``subprocess`` (``Popen``, ``run`` ... through its ``_fork_exec`` or
``os.posix_spawn``), asyncio's subprocesses (built on ``Popen``), ``multiprocessing`` (its
"spawn" and "forkserver" contexts use ``fork_exec``; "fork" uses ``os.fork``) and ``os.fork``.
Outside a test (collection, session start) nothing is checked.
"""

from __future__ import annotations

import os
import subprocess

import _posixsubprocess
import pytest

MARK = "integration"


class ProcessWithoutIntegrationMark(RuntimeError):
    """A test without ``@pytest.mark.integration`` tried to start a process."""


class Guard:
    """Which test is running, whether it may start processes, and what the unmarked ones tried."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self.attempts: dict[str, list[str]] = {}

    def check(self, what: object) -> None:
        item = self.item
        if item is None or item.get_closest_marker(MARK) is not None:
            return
        command = _describe(what)
        self.attempts.setdefault(item.nodeid, []).append(command)
        raise ProcessWithoutIntegrationMark(
            f"{item.nodeid} starts a process ({command}) but is not marked @pytest.mark.{MARK}: mark the test "
            f"(or its module: pytestmark = pytest.mark.{MARK}) so `pytest -m \"not {MARK}\"` stays a fast loop")

    def wrap(self, function, describe=lambda args: args[0] if args else "?"):
        def guarded(*args, **kwargs):
            self.check(describe(args))
            return function(*args, **kwargs)

        guarded.__wrapped__ = function
        return guarded


def _describe(what: object) -> str:
    if isinstance(what, (list, tuple)):
        what = " ".join(os.fsdecode(part) if isinstance(part, (bytes, str)) else str(part) for part in what)
    elif isinstance(what, bytes):
        what = os.fsdecode(what)
    text = str(what)
    return text if len(text) <= 200 else text[:200] + "..."


GUARD = Guard()


def pytest_configure(config) -> None:
    # fork_exec(args, executable_list, ...): subprocess holds its own reference, multiprocessing reads
    # the module's; args is the command line (None when only an executable is given).
    fork_exec = GUARD.wrap(_posixsubprocess.fork_exec,
                           lambda args: args[0] if args and args[0] else args[1] if len(args) > 1 else "?")
    _posixsubprocess.fork_exec = fork_exec
    subprocess._fork_exec = fork_exec
    for name in ("posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            setattr(os, name, GUARD.wrap(getattr(os, name), lambda args: args[1] if len(args) > 1 else args[0]))
    os.fork = GUARD.wrap(os.fork, lambda args: "os.fork()")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    GUARD.item = item
    try:
        yield
    finally:
        GUARD.item = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    attempts = GUARD.attempts.pop(item.nodeid, None)
    if attempts and report.passed:  # the code under test swallowed the error: the test still fails
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} tried to start {len(attempts)} process(es) without "
                           f"@pytest.mark.{MARK}: {attempts[0]}")
