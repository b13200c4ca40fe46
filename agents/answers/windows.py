"""Which buckets an answer reads: the window kinds (total, latest bucket, a range) and the checks of a query's
time range against what can exist (nothing after now plus the accepted clock skew, nothing before every
level's retention). Errors name the parameter the user gave, or the one to add."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from ..state import TOTAL_WIDTH, bucket_start
from .request import ApiError, iso, parse_time, show


@dataclass(frozen=True)
class Window:
    """Which counts an answer sums: the cumulative keys, or buckets in [start, stop)."""

    kind: str  # "total" | "latest_bucket" | "range"
    width: int = TOTAL_WIDTH
    start: int = 0
    stop: int = 0

    def as_json(self) -> dict:
        if self.kind == "total":
            return {"kind": "total"}
        return {"kind": self.kind, "from": self.start, "to": self.stop, "bucket_seconds": self.width}

    def bounds(self) -> tuple[int, int]:
        """[start, stop) of the bucket starts this window reads (the cumulative key starts at 0)."""
        return (0, 1) if self.kind == "total" else (self.start, self.stop)


def oldest(levels, now: float) -> float:
    """The oldest time the longest-kept bucket level (``levels``: (width, retention) each) still holds."""
    return now - max(retention for _, retention in levels)


def time_range(query: Mapping[str, str], now: float, levels, future_tolerance_seconds: float,
               default_span: float | None = None) -> tuple[float, float]:
    """[from, to) of the query, checked against what can exist: nothing after now plus
    the accepted clock skew, nothing before every level's retention. Errors name the
    parameter the user gave (or the one to add)."""
    horizon = now + future_tolerance_seconds
    skew = f"now + {future_tolerance_seconds} s of accepted clock skew"
    start = stop = None
    if "from" in query:
        start = parse_time("from", query["from"], now)
        if start > horizon:
            raise ApiError("from", f"{show(query['from'])} is in the future (the latest time is {skew})")
    if "to" in query:
        stop = parse_time("to", query["to"], now)
        if stop > horizon:
            raise ApiError("to", f"{show(query['to'])} is in the future (the latest time is {skew})")
    if stop is None:
        stop = now
    if start is None:
        if default_span is None:
            raise ApiError("from", "is required with to / window=range")
        start = max(stop - default_span, oldest(levels, now))
    if stop <= start:
        if "to" in query:
            raise ApiError("to", f"{show(query['to'])} must be after from ({show(query.get('from', ''))})")
        raise ApiError("from", f"{show(query['from'])} must be before to (now)")
    return start, stop


def range_window(levels, start: float, stop: float, now: float, step: int | None = None) -> Window:
    """Buckets covering [start, stop): the finest level whose retention reaches ``start``
    (and whose width divides ``step``); bounds are widened to bucket edges."""
    if stop <= start:
        raise ApiError("to", f"must be after from ({iso(stop)} <= {iso(start)})")
    # A level reaches ``start`` when its first bucket is not expired (processor.expired's negation),
    # so an answer never depends on whether a retention delete has run yet.
    widths = [w for w, _ in levels]
    if step is not None:
        longest = max(retention for _, retention in levels)
        if step > longest:
            raise ApiError("step", f"{step:,} s is longer than the longest retention ({longest:,} s)")
        if all(step % w for w in widths):
            raise ApiError("step", f"{step} s is not a multiple of a bucket width {widths}")
    reaching = [w for w, retention in levels if bucket_start(start, w) + w > now - retention]
    if not reaching:
        raise ApiError("from", f"{iso(start)} is older than the retention of every bucket level "
                               f"(the oldest kept is about {iso(oldest(levels, now))})")
    for width in reaching:
        if step is None or step % width == 0:
            lo = bucket_start(start, width)
            hi = -(-int(math.ceil(stop)) // width) * width
            return Window("range", width, lo, hi)
    raise ApiError("step", f"{step} s is not a multiple of the bucket width of a level reaching from {reaching}")
