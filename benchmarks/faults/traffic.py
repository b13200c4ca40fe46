"""What the clients of a fault schedule do and record: uploads with a ledger of every 202, queries of every
worker for every metric, and every worker's /healthz, each with the times they began and ended.

* :class:`Uploaders`: devices. Each upload is one frame of 1-20 fresh reports of one metric with a fresh
  ``Idempotency-Key``; anything but a 202 (an error status, a refused connection, a timeout) is retried with
  the same key and body, at a collector picked at random, until it is answered 202. A 202 goes in the ledger
  (the body is kept: the checker decodes it offline). A 4xx other than 429 is a client fault the harness never
  makes: it is recorded as ``refused`` and not retried (the checker reports it).
* :class:`Queries`: a loop per worker asking it for every metric's estimates (forwarded or not, as users
  do), recording status, n and each value's match count.
* :class:`Health`: each worker's /healthz twice a second.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from dataclasses import dataclass, field

import aiohttp
import numpy as np

from cms_core import wire
from cms_core.privatize import simulate_reports

UPLOAD_TIMEOUT_S = 30.0
QUERY_TIMEOUT_S = 10.0
WIRE = "application/vnd.ocms.wire-v1"


@dataclass
class Upload:
    metric: str
    key: str
    body: bytes
    reports: int
    first_try: float
    attempts: int = 0
    acked_at: float | None = None
    statuses: list = field(default_factory=list)  # every answer: status, or a string naming the failure
    refused: int | None = None  # a 4xx the harness never provokes


@dataclass
class Answer:
    worker: str
    metric: str
    began: float
    ended: float
    status: int | None  # None: no answer (connection refused, timeout)
    n: int | None = None
    counts: tuple | None = None
    answered_by: str | None = None
    error: str | None = None


@dataclass
class HealthSample:
    worker: str
    at: float
    status: int | None
    doc: dict | None


class _Loops:
    """Client loops sharing one HTTP session: started together, cancelled and closed together."""

    timeout_s = QUERY_TIMEOUT_S

    def __init__(self):
        self._tasks: list[asyncio.Task] = []
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        self._tasks = [asyncio.create_task(loop) for loop in self.loops()]

    def loops(self) -> list:
        raise NotImplementedError

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None


class Uploaders(_Loops):
    """``concurrency`` devices uploading to the collectors until :meth:`stop`, retrying until 202."""

    def __init__(self, collectors: list[str], metrics: dict, seed: int, concurrency: int = 48,
                 pause_s: tuple[float, float] = (0.0, 0.05)):
        super().__init__()
        self.collectors = collectors  # base URLs
        self.metrics = metrics  # name -> (params, category count, weights)
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.concurrency = concurrency
        self.pause_s = pause_s
        self.uploads: list[Upload] = []
        self._sending = True

    def _new_upload(self) -> Upload:
        name = self.rng.choice(sorted(self.metrics))
        params, count, weights = self.metrics[name]
        n = self.rng.randint(1, 20)
        values = self.np_rng.choice(count, n, p=weights).astype(np.uint64)
        body = wire.encode_frame(params, simulate_reports(params, values, self.np_rng))
        return Upload(name, secrets.token_urlsafe(24), body, n, time.time())

    timeout_s = UPLOAD_TIMEOUT_S

    def loops(self) -> list:
        return [self._device(i) for i in range(self.concurrency)]

    async def _device(self, index: int) -> None:
        while self._sending:
            upload = self._new_upload()
            self.uploads.append(upload)
            await self._until_acked(upload)
            await asyncio.sleep(self.rng.uniform(*self.pause_s))

    async def _until_acked(self, upload: Upload) -> None:
        while True:
            upload.attempts += 1
            collector = self.rng.choice(self.collectors)
            retry_after = 0.2
            try:
                async with self._session.post(
                        f"{collector}/v1/metrics/{upload.metric}/reports", data=upload.body,
                        headers={"Content-Type": WIRE, "Idempotency-Key": upload.key}) as response:
                    await response.read()
                    upload.statuses.append(response.status)
                    if response.status == 202:
                        upload.acked_at = time.time()
                        return
                    if 400 <= response.status < 500 and response.status not in (408, 429):
                        upload.refused = response.status
                        return
                    try:
                        retry_after = min(5.0, float(response.headers.get("Retry-After", "0.5")))
                    except ValueError:
                        retry_after = 0.5
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                upload.statuses.append(type(exc).__name__)
            await asyncio.sleep(retry_after * self.rng.uniform(0.5, 1.5))

    def stop_new(self) -> None:
        """Start no new uploads; those under way go on until answered 202."""
        self._sending = False

    async def drained(self, timeout: float) -> bool:
        """Whether every upload under way was answered within ``timeout``."""
        done, pending = await asyncio.wait(self._tasks, timeout=timeout)
        return not pending

    def acked(self) -> list[Upload]:
        return [u for u in self.uploads if u.acked_at is not None]


class Queries(_Loops):
    """One loop per worker asking for every metric's estimates (``window=total``) in turn."""

    def __init__(self, workers: dict[str, str], metrics: list[str], pause_s: float = 0.02):
        super().__init__()
        self.workers = workers  # name -> base URL
        self.metrics = metrics
        self.pause_s = pause_s
        self.answers: list[Answer] = []
        self._running = True

    def loops(self) -> list:
        return [self._loop(name, url) for name, url in self.workers.items()]

    async def ask(self, worker: str, url: str, metric: str) -> Answer:
        began = time.time()
        try:
            async with self._session.get(f"{url}/metrics/{metric}/estimates") as response:
                doc = await response.json(content_type=None)
                ended = time.time()
                if response.status == 200:
                    counts = tuple(r["match_count"] for r in doc["estimates"])
                    return Answer(worker, metric, began, ended, 200, doc["n"], counts,
                                  response.headers.get("X-OCMS-Answered-By"))
                return Answer(worker, metric, began, ended, response.status, error=str(doc.get("error"))[:200])
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            return Answer(worker, metric, began, time.time(), None, error=type(exc).__name__)

    async def _loop(self, worker: str, url: str) -> None:
        while self._running:
            for metric in self.metrics:
                self.answers.append(await self.ask(worker, url, metric))
                await asyncio.sleep(self.pause_s)

    async def close(self) -> None:
        self._running = False
        await super().close()


class Health(_Loops):
    """Every worker's /healthz every ``interval`` seconds."""

    timeout_s = 5.0

    def __init__(self, workers: dict[str, str], interval: float = 0.5):
        super().__init__()
        self.workers = workers
        self.interval = interval
        self.samples: list[HealthSample] = []

    def loops(self) -> list:
        return [self._loop(name, url) for name, url in self.workers.items()]

    async def _loop(self, worker: str, url: str) -> None:
        while True:
            at = time.time()
            try:
                async with self._session.get(f"{url}/healthz") as response:
                    self.samples.append(HealthSample(worker, at, response.status, await response.json(content_type=None)))
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
                self.samples.append(HealthSample(worker, at, None, None))
            await asyncio.sleep(self.interval)
