"""Command output: what the registry commands (and ``ocms discover``) print to stdout."""

from __future__ import annotations

import os
import sys


def write_stdout(text: str) -> None:
    """Write to stdout; a closed pipe (``ocms estimate ... | head``) ends the command quietly
    (exit 0) instead of in a traceback, and nothing more is written to the dead pipe."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush goes nowhere
        raise SystemExit(0) from None
