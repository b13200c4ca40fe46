"""One way for a test to wait: poll the condition its assertion needs, never sleep a fixed time.

``poll_until(condition, timeout, what)`` calls ``condition`` until it returns a true value and
returns that value. When ``timeout`` seconds pass first, it fails with an AssertionError naming
``what`` and the last thing it observed (the last value, or the last exception it tolerated), so a
failure on a slow machine says how far things got. With ``until``, ``condition`` reads a value
(a count, a document) and ``until`` decides whether it is the awaited one: the failure then shows
the value itself rather than a bare False.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")

#: What a condition may raise while the thing it watches is still starting: a server that is not
#: listening yet refuses the connection (urllib's errors, HTTPError included, are OSErrors).
NOT_READY_YET: tuple[type[BaseException], ...] = (OSError,)


def poll_until(condition: Callable[[], T], timeout: float, what: str, *,
               until: Callable[[T], object] | None = None, interval: float = 0.1,
               tolerate: tuple[type[BaseException], ...] = NOT_READY_YET) -> T:
    """``condition()``'s first value that is true (or that ``until`` accepts), polled every ``interval`` s.

    An exception of a ``tolerate`` type counts as "not yet"; any other (an assertion that the
    process under test is still alive, say) ends the wait at once.
    """
    deadline = time.monotonic() + timeout
    last: object = "nothing (the condition was never evaluated)"
    while True:
        try:
            value = condition()
        except tolerate as exc:
            last = exc
        else:
            if (until(value) if until is not None else value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; last observed: {_shown(last)}")
        time.sleep(interval)


def _shown(value: object, limit: int = 1500) -> str:
    """``repr(value)``, its middle cut out when longer than ``limit`` (a whole estimates document says too much)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]} ... ({len(text) - limit:,} characters) ... {text[-limit // 2:]}"
