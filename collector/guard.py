"""Abuse controls and retries: rate limits and idempotency keys; bearer tokens and the tokens file are in
infra/tokens.py (the worker's read tokens use the same file format), re-exported here for the collector."""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from typing import Callable

from cms_core.errors import OCMSError
from infra.tokens import (Application, AuthError, Authenticator, TokensFileError, hash_token, load_tokens,  # noqa: F401
                          tokens_file)


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


#: An entry's fields: the body's digest, when it expires, while the first attempt waits its future (or
#: IN_FLIGHT until a retry asks for one: most uploads are never retried), None after, and (reports, metric,
#: version) of its 202. A tuple, not an object: once answered it holds only
#: bytes, numbers and strings, so the cyclic garbage collector stops tracking it, and a full collection no
#: longer walks every remembered key (with a million keys, objects made full collections 16% of the
#: collector's CPU under keyed load, py-spy --native).
_BODY, _EXPIRES, _ANSWER, _ACCEPTED = range(4)
IN_FLIGHT = True
#: Expired answers are swept from the oldest end at most this often.
SWEEP_SECONDS = 1.0


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
    With the shared idempotency log the log answers retries instead, and this cache is used
    only while the log is off (``--idempotency-topic off``, or a broker without transactions).
    """

    def __init__(self, window: float, max_keys: int, clock: Callable[[], float] = time.monotonic):
        self.window = window
        self.max_keys = max_keys
        self.clock = clock
        self._entries: OrderedDict[tuple, tuple] = OrderedDict()  # key -> (_BODY, _EXPIRES, _ANSWER, _ACCEPTED)
        self.evicted = 0
        self._sweep_at = float("-inf")  # the next sweep of expired answers (:meth:`_expire`)

    @property
    def enabled(self) -> bool:
        return self.window > 0 and self.max_keys > 0

    def __len__(self) -> int:
        return len(self._entries)

    def _expire(self, now: float) -> None:
        """Drop expired answers from the oldest end, at most once per :data:`SWEEP_SECONDS` (a lookup checks its own
        entry's expiry, so a sweep's timing changes only how long memory is held: under keyed load the sweep's
        look at the oldest entry, a cache miss in a table of a million keys, was a tenth of the cache's cost)."""
        if now < self._sweep_at:
            return
        self._sweep_at = now + SWEEP_SECONDS
        entries = self._entries
        while entries:
            entry = entries[next(iter(entries))]
            if entry[_EXPIRES] > now or entry[_ANSWER] is not None:
                break  # not expired, or still in flight: never dropped under a retry
            entries.popitem(last=False)

    def lookup(self, key: tuple, body_hash: int) -> asyncio.Future | None:
        """A future of the earlier answer (status, document) for ``key``, or None (then call ``begin``).

        Raises KeyReusedError when the key came with a different body."""
        now = self.clock()
        self._expire(now)
        entry = self._entries.get(key)
        if entry is None or (entry[_EXPIRES] <= now and entry[_ANSWER] is None):
            return None
        return self._earlier(key, entry, body_hash)

    def claim(self, key: tuple, body_hash: int) -> asyncio.Future | None:
        """:meth:`lookup`, and :meth:`begin` when it finds no answer (None): one clock read and one table lookup for
        a fresh key, the path of nearly every keyed upload."""
        now = self.clock()
        self._expire(now)
        entries = self._entries
        entry = entries.get(key)
        if entry is not None:
            if entry[_EXPIRES] > now or entry[_ANSWER] is not None:
                return self._earlier(key, entry, body_hash)
            del entries[key]  # expired: begun afresh at the newest end
        entries[key] = (body_hash, now + self.window, IN_FLIGHT, None)
        if len(entries) > self.max_keys:
            self._evict()
        return None

    def _earlier(self, key: tuple, entry: tuple, body_hash: int) -> asyncio.Future:
        if entry[_BODY] != body_hash:
            raise KeyReusedError(KEY_REUSED)
        answer = entry[_ANSWER]
        if answer is IN_FLIGHT:  # the first retry while the first attempt waits: a future for both
            answer = asyncio.get_running_loop().create_future()
            self._entries[key] = (entry[_BODY], entry[_EXPIRES], answer, None)
        if answer is not None:
            return answer
        done = asyncio.get_running_loop().create_future()
        done.set_result((202, accepted_doc(entry[_ACCEPTED])))
        return done

    def begin(self, key: tuple, body_hash: int) -> None:
        """The first attempt of ``key`` starts (its answer: :meth:`finish`)."""
        entries = self._entries
        entries[key] = (body_hash, self.clock() + self.window, IN_FLIGHT, None)
        entries.move_to_end(key)
        self._evict()

    def _evict(self) -> None:
        entries = self._entries
        while len(entries) > self.max_keys:
            entries.popitem(last=False)
            self.evicted += 1

    def finish(self, key: tuple, status: int, doc: dict) -> None:
        entry = self._entries.get(key)
        if entry is None:
            return
        answer = entry[_ANSWER]
        if answer is not None and answer is not IN_FLIGHT and not answer.done():
            answer.set_result((status, doc))
        if status != 202:
            del self._entries[key]
            return
        # only atomic values from here on: untracked by the garbage collector at its next pass
        self._entries[key] = (entry[_BODY], self.clock() + self.window, None,
                              (doc["accepted"], str(doc["metric"]), doc["version"]))


KEY_REUSED = "this Idempotency-Key was used for a different body; use a fresh random key per upload"


class KeyReusedError(OCMSError):
    reason = "idempotency_key_reused"


def body_digest(body: bytes) -> int:
    """What tells a retry's body from another body under the same key, in this process only: Python's hash of
    the bytes (SipHash with a key drawn per process, so not steerable from outside; 64 bits). A third of a
    microsecond less per keyed upload than BLAKE2b, and the cache never leaves the process."""
    return hash(body)
