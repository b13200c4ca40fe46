"""Session-wide checks: no test leaves ``ocms-*`` temp entries behind, and only tests marked
``integration`` start processes (tests.support.process_guard).

Run the suite from the checkout's root as ``python -m pytest`` (the Makefile does): the checkout
comes first on sys.path, so the tests import its packages (the editable install points here too).
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["pytester", "tests.support.process_guard"]

# ------------------------------------------------------------ temp-dir hygiene
#: What the product and the tests name their temporary folders and files: a test run must
#: leave none behind.
LEAK_PREFIX = "ocms-"


def leftovers(directory: Path, before: set[str]) -> list[str]:
    """The ``ocms-*`` entries in ``directory`` that were not there before."""
    try:
        names = {entry.name for entry in os.scandir(directory)}
    except FileNotFoundError:
        return []
    return sorted(name for name in names - before if name.startswith(LEAK_PREFIX))


class TempDirGuard:
    """The session's own temp directory, and which test each new ``ocms-*`` entry first
    appeared after (so a leak names its culprit)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.before = set(os.listdir(directory))
        self.first_seen: dict[str, str] = {}

    def note(self, test_id: str) -> None:
        for name in leftovers(self.directory, self.before):
            self.first_seen.setdefault(name, test_id)

    def report(self) -> str | None:
        names = leftovers(self.directory, self.before)
        if not names:
            return None
        lines = [f"  {name}  (first seen after {self.first_seen.get(name, 'the last test')})" for name in names]
        return (f"the test run left {len(names)} {LEAK_PREFIX}* entr{'y' if len(names) == 1 else 'ies'} in the "
                f"temp directory {self.directory}; make the test (or the product code it runs) remove them:\n"
                + "\n".join(lines))


@pytest.fixture(scope="session", autouse=True)
def temp_dir_guard():
    """Give the session a private temp directory (TMPDIR, inherited by every subprocess:
    workers, brokers, ``ocms run``), fail the run if it ends with ``ocms-*`` entries there
    that were not there before, and remove it.

    A private directory, not the shared /tmp: entries that existed before the session,
    and those made by anything else on the machine meanwhile (another test run), are never
    counted. ``OCMS_TEST_TMPDIR=DIR`` makes the session use DIR instead (kept afterwards)."""
    chosen = os.environ.get("OCMS_TEST_TMPDIR")
    directory = Path(chosen) if chosen else Path(tempfile.mkdtemp(prefix="pytest-ocms-session-"))
    directory.mkdir(parents=True, exist_ok=True)
    saved_env, saved_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(directory), str(directory)
    guard = TempDirGuard(directory)
    try:
        yield guard
    finally:
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        tempfile.tempdir = saved_tempdir
        problem = guard.report()
        if not chosen:
            shutil.rmtree(directory, ignore_errors=True)
    if problem:
        pytest.fail(problem, pytrace=False)


@pytest.fixture(autouse=True)
def _note_temp_entries(request, temp_dir_guard):
    yield
    temp_dir_guard.note(request.node.nodeid)
