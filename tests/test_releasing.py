"""docs/releasing.md states each release's commit and tag; these checks keep it true."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from benchmarks.faults.release import PREVIOUS_COMMIT, PREVIOUS_RELEASE
from cms_core.version import __version__
from tests.golden.formats import UNRELEASED

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| (\d+\.\d+\.\d+) \| ([0-9a-f]{7,40}|\(.*?\)) \| (`v[\d.]+`)? *\|$", re.M)


def releases() -> dict[str, tuple[str, str]]:
    text = (ROOT / "docs" / "releasing.md").read_text(encoding="utf-8")
    return {version: (commit, tag.strip("`")) for version, commit, tag in ROW.findall(text)}


def test_the_table_names_the_commit_a_rolling_upgrade_starts_from():
    table = releases()
    assert table[PREVIOUS_RELEASE][0] == PREVIOUS_COMMIT and table[PREVIOUS_RELEASE][1] == f"v{PREVIOUS_RELEASE}"


def test_every_release_with_golden_files_is_in_the_table_and_this_code_is_its_newest():
    golden = {p.name for p in (ROOT / "tests" / "golden").iterdir() if p.is_dir() and p.name != UNRELEASED
              and not p.name.startswith("__")}
    table = releases()
    assert golden <= set(table), f"releases in tests/golden/ but not in docs/releasing.md: {golden - set(table)}"
    newest = max(table, key=lambda v: tuple(int(x) for x in v.split(".")))
    assert newest == __version__, "cms_core/version.py is the newest release in docs/releasing.md's table"


@pytest.mark.integration  # runs git
def test_a_release_commit_in_the_table_is_in_this_clone_when_git_is():
    """The commit of each released version exists (a shallow clone may lack history: then nothing to check)."""
    for version, (commit, _) in releases().items():
        if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            continue
        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True,
                                 text=True)
        if shallow.returncode != 0 or shallow.stdout.strip() == "true":
            return
        found = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
        assert found.returncode == 0, f"release {version}'s commit {commit} is not in this clone"
