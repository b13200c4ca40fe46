"""A small load generator for the fault tests: concurrent uploads with a log of every answer.

Each upload is a few single-report messages of fresh random reports; the log keeps
the records of every upload with its answer (202, another status, or no answer
at all), so a test can compare what got a 202 with what is in Kafka.

No two uploads of a test process share a record: a report is a few bytes (5 for the test
registry's "dest": two F(1009) coefficients and a hash output, about 4 million values), so
random reports repeat by chance (birthday collisions: in 9 streams of 3,000 uploads of 3
reports, 792 values occur twice). Without this, two uploads that drew the same report looked
like one report stored twice (test_broker_faults saw it once in 3 runs and took it for a double
store); with it, a record value found twice in Kafka is one upload stored twice.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from cms_core import wire
from cms_core.privatize import simulate_reports

from tests.support.waiting import poll_until

from .harness import WIRE, records_of


#: Every record the generators of this process have issued (module docstring), under its lock.
_ISSUED: set[bytes] = set()
_ISSUED_LOCK = threading.Lock()


def _issue(records: list[bytes]) -> bool:
    """Reserve ``records`` for one upload: False when one of them was issued before (draw again)."""
    with _ISSUED_LOCK:
        if len(set(records)) != len(records) or not _ISSUED.isdisjoint(records):
            return False
        _ISSUED.update(records)
        return True


@dataclass
class Outcome:
    status: int | None  # None: no answer (connection refused/reset, timeout)
    records: list[bytes]
    retry_after: str | None = None
    attempts: int = 1  # RetryingLoad: attempts until the 202
    replayed: bool = False  # the 202 said Idempotent-Replayed
    cut_off: bool = False  # an attempt of it got no answer (a kill) before the 202


@dataclass
class LoadLog:
    outcomes: list[Outcome] = field(default_factory=list)

    def records(self, status) -> Counter:
        return Counter(r for o in self.outcomes if o.status == status for r in o.records)

    def statuses(self) -> Counter:
        return Counter(o.status for o in self.outcomes)

    def wait_for_accepted(self, more: int, timeout: float = 30.0) -> int:
        """Wait until ``more`` uploads beyond those so far got a 202; fails after ``timeout`` s."""
        target = self.statuses()[202] + more
        return poll_until(lambda: self.statuses()[202], timeout, f"{more} more accepted uploads ({target} in all)",
                          until=lambda accepted: accepted >= target, interval=0.02)


class LoadGenerator:
    """``concurrency`` tasks uploading ``per_upload`` reports each until stopped (in a thread)."""

    def __init__(self, url: str, version, *, concurrency: int = 8, per_upload: int = 3, seed: int = 0,
                 pause_s: float = 0.0):
        self.url = url
        self.version = version
        self.concurrency = concurrency
        self.per_upload = per_upload
        self.rng = np.random.default_rng(seed)
        self.pause_s = pause_s
        self.log = LoadLog()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _upload(self) -> tuple[bytes, list[bytes]]:
        """One upload's body and records; its records were never issued before in this process."""
        while True:
            values = self.rng.integers(0, 1000, self.per_upload).astype(np.uint64)
            messages = wire.encode_reports(self.version.params, simulate_reports(self.version.params, values, self.rng))
            records = [r for m in messages for r in records_of(m, self.version)]
            if _issue(records):
                return b"".join(messages), records

    async def _worker(self, session) -> None:
        import aiohttp

        while not self._stop.is_set():
            body, records = self._upload()
            headers = {"Content-Type": WIRE, "Idempotency-Key": secrets.token_urlsafe(18)}
            try:
                async with session.post(self.url, data=body, headers=headers) as response:
                    await response.read()
                    self.log.outcomes.append(Outcome(response.status, records, response.headers.get("Retry-After")))
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                self.log.outcomes.append(Outcome(None, records))
                await asyncio.sleep(0.02)
            if self.pause_s:
                await asyncio.sleep(self.pause_s)

    async def _main(self) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=20)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.gather(*(self._worker(session) for _ in range(self.concurrency)))

    def start(self) -> "LoadGenerator":
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> LoadLog:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "load generator did not stop"
        return self.log


class RetryingLoad(LoadGenerator):
    """Like a device: every upload is retried with its Idempotency-Key until it gets a 202.

    On stop, uploads under way keep being retried (up to ``drain_s``) so that at the end every
    upload in the log got its 202: the log's accepted records are then exactly what must be in Kafka.
    """

    def __init__(self, url, version, *, urls: list[str] | None = None, drain_s: float = 120.0, **kw):
        super().__init__(url, version, **kw)
        self.urls = urls or [url]
        self.drain_s = drain_s
        self.unfinished = 0

    async def _worker(self, session) -> None:
        import aiohttp
        import random

        rng = random.Random(secrets.randbits(32))
        while not self._stop.is_set():
            body, records = self._upload()
            headers = {"Content-Type": WIRE, "Idempotency-Key": secrets.token_urlsafe(18)}
            attempts, cut_off, deadline = 0, False, None
            while True:
                attempts += 1
                try:
                    async with session.post(rng.choice(self.urls), data=body, headers=headers) as response:
                        await response.read()
                        status = response.status
                        replayed = response.headers.get("Idempotent-Replayed") == "true"
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    status, replayed = None, False
                    cut_off = True
                if status == 202:
                    self.log.outcomes.append(Outcome(202, records, None, attempts, replayed, cut_off))
                    break
                assert status in (None, 503), f"unexpected answer {status}"
                if self._stop.is_set():
                    deadline = deadline or asyncio.get_running_loop().time() + self.drain_s
                    if asyncio.get_running_loop().time() > deadline:
                        self.unfinished += 1
                        self.log.outcomes.append(Outcome(None, records, None, attempts, False, cut_off))
                        break
                await asyncio.sleep(0.05)
            if self.pause_s:
                await asyncio.sleep(self.pause_s)

    def stop(self) -> LoadLog:
        self._stop.set()
        self._thread.join(self.drain_s + 60)
        assert not self._thread.is_alive(), "load generator did not stop"
        return self.log
