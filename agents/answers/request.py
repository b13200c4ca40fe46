"""A worker's answer requests, parsed and checked before anything is read: the parameters each endpoint
takes, times, durations, integers and the estimate options, each bad one a 400 (:class:`ApiError`) naming it.

Nothing here knows the counts or a metric version: :mod:`agents.answers.service` checks what depends on
them (a value, a window's retention).
"""

from __future__ import annotations

import difflib
import math
import re
from datetime import datetime, timezone
from typing import Iterable, Mapping

from cms_core import postprocess
from cms_core.errors import OCMSError
from cms_core.sketch import INTERVALS, EstimateOptions

_RELATIVE = re.compile(r"^(?:now)?-(\d+(?:\.\d+)?)([smhd])$")
_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}

#: Parameters each endpoint takes; anything else is a 400 naming it.
_ESTIMATE_PARAMETERS = ("params", "window", "from", "to", "confidence", "interval", "postprocess")
PARAMETERS: dict[str, tuple[str, ...]] = {
    "estimates": _ESTIMATE_PARAMETERS,
    "estimate_value": _ESTIMATE_PARAMETERS,
    "topk": _ESTIMATE_PARAMETERS + ("k",),
    "histogram": _ESTIMATE_PARAMETERS + ("q",),  # a numeric metric's (issue 40): q=0.95,0.999 adds quantiles
    "trend": ("params", "value", "from", "to", "step", "confidence", "interval", "postprocess"),
    "params": (),
    "healthz": (),
    "metrics": (),
}


def show(raw: str, limit: int = 40) -> str:
    """A parameter value as an error message quotes it: repr, at most ~``limit`` characters."""
    text = repr(raw)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 12]}...' ({len(raw):,} characters)"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(OCMSError):
    """A bad HTTP parameter (status 400) or an unknown value (404)."""

    def __init__(self, parameter: str, message: str, status: int = 400):
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter
        self.message = message
        self.status = status

    def as_json(self) -> dict:
        return {"error": self.message, "parameter": self.parameter, "status": self.status}


def check_query(endpoint: str, pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The query as a dict; an unknown or repeated parameter is a 400 naming it."""
    allowed = PARAMETERS[endpoint]
    query: dict[str, str] = {}
    for name, raw in pairs:
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1)
            hint = f"did you mean {close[0]!r}?" if close else (
                f"this endpoint takes {', '.join(allowed)}" if allowed else "this endpoint takes no parameters")
            raise ApiError(show(name)[1:-1] if len(name) <= 38 else show(name), f"unknown parameter; {hint}")
        if name in query:
            raise ApiError(name, "given more than once; give it once")
        query[name] = raw
    return query


def parse_time(name: str, raw: str, now: float) -> float:
    """Epoch seconds, ISO 8601 (naive = UTC), ``now`` or a relative ``-15m``/``now-2h``."""
    text = raw.strip()
    if text == "now":
        return now
    match = _RELATIVE.match(text)
    if match:
        value = now - float(match.group(1)) * _UNITS[match.group(2)]
    else:
        try:
            value = float(text)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=timezone.utc)
                value = parsed.timestamp()
            except (ValueError, OverflowError):
                raise ApiError(name, f"{show(raw)} is not epoch seconds, ISO 8601, 'now' or a relative time "
                                     "like -15m") from None
    if not math.isfinite(value) or value < 0:
        raise ApiError(name, f"{show(raw)} must be a finite, non-negative epoch time")
    return value


def parse_duration(name: str, raw: str) -> int:
    match = _DURATION.match(raw.strip())
    if not match or len(match.group(1)) > 18 or int(match.group(1)) <= 0:
        raise ApiError(name, f"{show(raw)} is not a positive duration (seconds, or with a unit: 90s, 5m, 1h, 1d)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_int(name: str, raw: str, lo: int, hi: int) -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?\d{1,18}", text):
        raise ApiError(name, f"{show(raw)} is not an integer in [{lo}, {hi}]")
    value = int(text)
    if not lo <= value <= hi:
        raise ApiError(name, f"{value} must be in [{lo}, {hi}]")
    return value


#: Quantiles one numeric answer may add (``q``).
MAX_QUANTILES = 32


def parse_quantiles(raw: str | None) -> tuple[float, ...]:
    """``q``: comma-separated quantiles in (0, 1) (``0.5,0.95,0.999``); a bad one is a 400 naming ``q``."""
    if raw is None:
        return ()
    parts = [part.strip() for part in raw.split(",")]
    if len(parts) > MAX_QUANTILES:
        raise ApiError("q", f"{len(parts)} quantiles; at most {MAX_QUANTILES}")
    out = []
    for part in parts:
        try:
            q = float(part)
        except ValueError:
            raise ApiError("q", f"{show(part)} is not a number (give quantiles in (0, 1), comma-separated: "
                                "q=0.5,0.95)") from None
        if not 0.0 < q < 1.0:  # NaN fails too
            raise ApiError("q", f"{show(part)} must be a number in (0, 1)")
        out.append(q)
    return tuple(out)


def parse_options(query: Mapping[str, str]) -> EstimateOptions:
    """The ``confidence``, ``interval`` and ``postprocess`` of a query; a bad one is a 400 naming it."""
    confidence = EstimateOptions.confidence
    if "confidence" in query:
        raw = query["confidence"]
        try:
            confidence = float(raw)
        except ValueError:
            raise ApiError("confidence", f"{show(raw)} is not a number") from None
        if not 0.0 < confidence < 1.0:  # NaN fails too
            raise ApiError("confidence", f"{show(raw)} must be a number in (0, 1)")
    interval = query.get("interval", EstimateOptions.interval)
    if interval not in INTERVALS:
        raise ApiError("interval", f"{show(interval)} is not one of {', '.join(INTERVALS)}")
    method = query.get("postprocess", EstimateOptions.postprocess)
    if method not in postprocess.METHODS:
        raise ApiError("postprocess", f"{show(method)} is not one of {', '.join(postprocess.METHODS)}")
    return EstimateOptions(confidence, interval, method)
