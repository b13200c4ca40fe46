"""Command output: how ``ocms`` commands write stdout (UTF-8, a closed pipe ends quietly, text tables)."""

from __future__ import annotations

import io
import os
import sys


def utf8_stdout() -> None:
    """Make stdout UTF-8 whatever the locale: ocms output (JSON above all: RFC 8259 says UTF-8) is the
    same bytes under C.UTF-8, a strict ASCII locale (``PYTHONIOENCODING=ascii:strict``) or a file
    (``--out FILE``). Under the C locales Python's stdout would pass lone surrogates through as raw
    bytes (surrogateescape, invalid UTF-8); a character that is not text is written as a backslash
    escape instead of raising."""
    stream = sys.stdout
    if not isinstance(stream, io.TextIOWrapper):
        return
    if stream.encoding.lower().replace("-", "").replace("_", "") != "utf8" or stream.errors == "surrogateescape":
        stream.reconfigure(encoding="utf-8", errors="backslashreplace")


def status(line: str) -> None:
    """A command's status line goes to stderr: stdout may be the data (``--out -``, ``--truth -``, a pipe)."""
    print(line, file=sys.stderr, flush=True)


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


def text_table(rows: list[list[str]], right: set[int]) -> str:
    """Aligned columns (the first row is the header); column indexes in ``right`` are right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
