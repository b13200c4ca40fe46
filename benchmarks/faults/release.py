"""An earlier release's code, materialised from git to run beside this one (issue 39's rolling upgrade).

``materialise(commit, directory)`` writes ``git archive COMMIT`` of this clone into ``directory`` and returns
it: a tree whose ``python -m ocms`` (run from it, ``PYTHONPATH`` pointing there, the same virtual environment)
is that release's worker and collector (``ocms.process.WorkerChild(root=...)``,
``ocms.run_collector.CollectorChild(root=...)``). The compiled kernel is not in git: when the release's
``cms_core/_kernel.c`` is this checkout's, the built extension is copied beside it, else the release runs its
numpy fallback. A clone without the commit fails with :class:`ReleaseMissing`, naming how to fetch it.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The release a rolling upgrade starts from, and its commit on main.
PREVIOUS_RELEASE = "0.2.0"
PREVIOUS_COMMIT = "b078575"


class ReleaseMissing(RuntimeError):
    """The commit of an earlier release is not in this clone."""


def materialise(commit: str, directory: Path, release: str | None = None) -> Path:
    """``git archive commit`` extracted into ``directory`` (created), with this checkout's built kernel when the
    sources agree; checks that its ``cms_core.version`` says ``release`` when given."""
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    if found.returncode != 0:
        raise ReleaseMissing(
            f"commit {commit} (release {release or '?'}) is not in this clone ({ROOT}); fetch it with "
            f"`git fetch origin {commit}` (a shallow clone: `git fetch --unshallow origin`), then run again")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True,
                             check=True).stdout
    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(directory, filter="data")
    kernel_c = Path("cms_core") / "_kernel.c"
    if (directory / kernel_c).read_bytes() == (ROOT / kernel_c).read_bytes():
        for built in (ROOT / "cms_core").glob("_kernel*.so"):
            shutil.copy2(built, directory / "cms_core" / built.name)
    if release is not None:
        said = subprocess.run([sys.executable, "-c", "from cms_core.version import __version__; print(__version__)"],
                              cwd=directory, env={"PYTHONPATH": str(directory), "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True)
        if said.stdout.strip() != release:
            raise ReleaseMissing(f"commit {commit} says version {said.stdout.strip() or said.stderr[-300:]!r}, "
                                 f"not {release}")
    return directory
