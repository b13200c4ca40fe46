"""`ocms run` as a user runs it on a registry file of their own, for the tests of tests/ocms."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.agents.harness import ROOT


def run_own_registry(folder: Path, name: str, text: str, *flags: str) -> str:
    """Write the registry ``text`` to ``folder / name`` and run ``ocms run --registry NAME FLAGS`` in ``folder``
    (the path relative, as the README's first metric does); returns its stdout, the run having succeeded."""
    (folder / name).write_text(text, encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "ocms", "run", "--registry", name, *flags], cwd=folder,
                            capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout
