"""Reading a data file's columns for the fleet's datasets (:mod:`fleet.datasets`): numbers checked one by one,
and the garbage collector paused while a million row tuples are built."""

from __future__ import annotations

import contextlib
import gc

import numpy as np

from cms_core.errors import InvalidValueError


@contextlib.contextmanager
def gc_paused():
    """Building ~10^6 row tuples triggers repeated full collections (2-3x slower); pause them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def column_numbers(column: str, texts: list[str]) -> np.ndarray:
    """A numeric column's present values as float64 (read-only); a value that is not a finite number is an
    error naming it (the bundled file is damaged, not the spec)."""
    try:
        values = np.array(texts, dtype=np.float64)
    except ValueError:
        bad = next(t for t in texts if not _is_number(t))
        raise InvalidValueError(f"{column}: {bad!r} is not a number") from None
    if not np.isfinite(values).all():
        bad = texts[int(np.flatnonzero(~np.isfinite(values))[0])]
        raise InvalidValueError(f"{column}: {bad!r} is not a finite number")
    values.flags.writeable = False
    return values


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
