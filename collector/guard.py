"""Abuse controls and retries: bearer tokens, rate limits, idempotency keys.

Tokens file (JSON; only SHA-256 hashes of tokens, never tokens)::

    {"applications": [
        {"name": "ios-app", "token_sha256": "<64 hex>", "rate_limit": 500, "rate_burst": 1000,
         "metrics": ["app_launch"]}
    ]}

``rate_limit`` (uploads/s) and ``rate_burst`` default to the collector's
``--app-rate-limit``; ``metrics`` (optional) restricts what the token may upload
(anything else answers 403). Hash a token with ``printf %s TOKEN | sha256sum``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cms_core.errors import OCMSError


class TokensFileError(OCMSError, ValueError):
    """The tokens file is unreadable or malformed (the message names the entry and field)."""


@dataclass(frozen=True)
class Application:
    name: str
    token_sha256: bytes
    rate_limit: float | None = None
    rate_burst: int | None = None
    metrics: frozenset[str] | None = None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def load_tokens(path: str | Path) -> dict[bytes, Application]:
    """Applications by token hash; errors name the entry and field to fix."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise TokensFileError(f"{path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TokensFileError(f"{path}: not JSON: {exc}") from None
    apps = doc.get("applications") if isinstance(doc, dict) else None
    if not isinstance(apps, list) or not apps:
        raise TokensFileError(f"{path}: expected {{\"applications\": [...]}} with at least one application")
    out: dict[bytes, Application] = {}
    names = set()
    for i, entry in enumerate(apps):
        where = f"{path}: applications[{i}]"
        if not isinstance(entry, dict):
            raise TokensFileError(f"{where}: expected an object")
        unknown = set(entry) - {"name", "token_sha256", "rate_limit", "rate_burst", "metrics"}
        if unknown:
            raise TokensFileError(f"{where}: unknown field(s) {sorted(unknown)}")
        name = entry.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise TokensFileError(f"{where}.name: expected 1-64 characters of [A-Za-z0-9_.-], got {name!r}")
        if name in names:
            raise TokensFileError(f"{where}.name: {name!r} appears twice")
        names.add(name)
        digest = entry.get("token_sha256")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
            raise TokensFileError(f"{where}.token_sha256: expected 64 hex digits (sha256 of the token), got {digest!r}")
        rate = entry.get("rate_limit")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0):
            raise TokensFileError(f"{where}.rate_limit: expected a number >= 0 (uploads/s; 0 = unlimited), got {rate!r}")
        burst = entry.get("rate_burst")
        if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst < 0):
            raise TokensFileError(f"{where}.rate_burst: expected an integer >= 0, got {burst!r}")
        metrics = entry.get("metrics")
        if metrics is not None and (not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics)):
            raise TokensFileError(f"{where}.metrics: expected a list of metric names, got {metrics!r}")
        key = bytes.fromhex(digest)
        if key in out:
            raise TokensFileError(f"{where}.token_sha256: the same token as application {out[key].name!r}")
        out[key] = Application(name, key, rate, burst, frozenset(metrics) if metrics is not None else None)
    return out


def tokens_file(raw, label: str) -> str:
    """A flag's parser (registry.flags.Setting): the path of a tokens file that loads (:func:`load_tokens`)."""
    from cms_core.errors import InvalidParameterError

    path = str(raw)
    try:
        load_tokens(path)
    except TokensFileError as exc:
        raise InvalidParameterError(label, raw, str(exc)) from None
    return path


class Authenticator:
    """``Authorization: Bearer <token>`` against the token hashes (None = open collector)."""

    def __init__(self, applications: dict[bytes, Application] | None, server: str = "collector"):
        self.applications = applications
        self.server = server  # named in the answers: "this collector needs ..."

    @property
    def enabled(self) -> bool:
        return self.applications is not None

    def identify(self, header: str | None) -> Application | None:
        """The application of the header's token; raises AuthError when tokens are on and it is missing/unknown."""
        if self.applications is None:
            return None
        if not header:
            raise AuthError("missing_token", f"this {self.server} needs 'Authorization: Bearer <token>'")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("missing_token", "expected 'Authorization: Bearer <token>'")
        # aiohttp hands header bytes that are not UTF-8 over as surrogates: hash the bytes as sent
        digest = hashlib.sha256(token.strip().encode("utf-8", "surrogateescape")).digest()
        app = self.applications.get(digest)
        # The dict lookup is by hash; compare again in constant time to keep the check honest.
        if app is None or not hmac.compare_digest(app.token_sha256, digest):
            raise AuthError("unknown_token", f"the bearer token is not known to this {self.server}")
        return app


class AuthError(OCMSError):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; ``take`` answers 0 or the seconds to wait."""

    __slots__ = ("rate", "burst", "tokens", "stamp", "clock")

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate = float(rate)
        self.burst = float(max(burst, 1) if burst else max(rate, 1.0))
        self.tokens = self.burst
        self.clock = clock
        self.stamp = clock()

    def take(self) -> float:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class RateLimiter:
    """A global bucket and one bucket per application (uploads/s)."""

    def __init__(self, global_rate: float, global_burst: int, app_rate: float, app_burst: int,
                 clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.global_bucket = TokenBucket(global_rate, global_burst, clock) if global_rate > 0 else None
        self.app_rate, self.app_burst = app_rate, app_burst
        self.app_buckets: dict[str, TokenBucket | None] = {}

    def check(self, app: Application | None) -> tuple[str, float] | None:
        """None when allowed, else (reason, seconds to wait). The application's bucket is checked first,
        so a client over its own limit does not use up the global budget."""
        if app is not None:
            bucket = self.app_buckets.get(app.name, False)
            if bucket is False:
                rate = app.rate_limit if app.rate_limit is not None else self.app_rate
                burst = app.rate_burst if app.rate_burst is not None else self.app_burst
                bucket = TokenBucket(rate, burst, self.clock) if rate > 0 else None
                self.app_buckets[app.name] = bucket
            if bucket is not None:
                wait = bucket.take()
                if wait:
                    return "rate_limited_application", wait
        if self.global_bucket is not None:
            wait = self.global_bucket.take()
            if wait:
                return "rate_limited", wait
        return None


IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9_-]{16,128}")


class _Entry:
    """One key: while the first attempt waits, ``answer`` is its future; after a 202 only
    ``accepted`` = (reports, metric, version) is kept (a few hundred bytes per key in all)."""

    __slots__ = ("body_hash", "expires", "answer", "accepted")

    def __init__(self, body_hash: bytes, expires: float, answer: asyncio.Future):
        self.body_hash = body_hash
        self.expires = expires
        self.answer: asyncio.Future | None = answer
        self.accepted: tuple | None = None


def accepted_doc(accepted: tuple) -> dict:
    n, metric, version = accepted
    return {"status": 202, "reason": "accepted", "accepted": n, "metric": metric, "version": version}


class IdempotencyCache:
    """Answers of uploads by (application, Idempotency-Key) for ``window`` seconds.

    Only accepted uploads (202) are remembered: a retry gets the same 202 and is not
    produced again. A retry that arrives while the first attempt still waits for Kafka
    waits for the same answer. Any other answer forgets the key, so a retry after a
    503 is tried afresh. At most ``max_keys`` keys (oldest dropped first; about 350 bytes
    each). The cache lives in one collector process: see docs/collector.md for replicas.
    """

    def __init__(self, window: float, max_keys: int, clock: Callable[[], float] = time.monotonic):
        self.window = window
        self.max_keys = max_keys
        self.clock = clock
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self.evicted = 0

    @property
    def enabled(self) -> bool:
        return self.window > 0 and self.max_keys > 0

    def __len__(self) -> int:
        return len(self._entries)

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries:
            key, entry = next(iter(entries.items()))
            if entry.expires > now or entry.answer is not None:
                break  # not expired, or still in flight: never dropped under a retry
            entries.popitem(last=False)

    def lookup(self, key: tuple, body_hash: bytes) -> asyncio.Future | None:
        """A future of the earlier answer (status, document) for ``key``, or None (then call ``begin``).

        Raises KeyReusedError when the key came with a different body."""
        now = self.clock()
        self._expire(now)
        entry = self._entries.get(key)
        if entry is None or (entry.expires <= now and entry.answer is None):
            return None
        if entry.body_hash != body_hash:
            raise KeyReusedError("this Idempotency-Key was used for a different body; use a fresh random key per upload")
        if entry.answer is not None:
            return entry.answer
        done = asyncio.get_running_loop().create_future()
        done.set_result((202, accepted_doc(entry.accepted)))
        return done

    def begin(self, key: tuple, body_hash: bytes) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self._entries[key] = _Entry(body_hash, self.clock() + self.window, future)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_keys:
            self._entries.popitem(last=False)
            self.evicted += 1
        return future

    def finish(self, key: tuple, status: int, doc: dict) -> None:
        entry = self._entries.get(key)
        if entry is None:
            return
        if entry.answer is not None and not entry.answer.done():
            entry.answer.set_result((status, doc))
        if status != 202:
            del self._entries[key]
            return
        entry.accepted = (doc["accepted"], doc["metric"], doc["version"])
        entry.answer = None
        entry.expires = self.clock() + self.window


class KeyReusedError(OCMSError):
    reason = "idempotency_key_reused"


def body_digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).digest()
