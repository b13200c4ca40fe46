"""The worker's HTTP API: routes on the Faust web server, answers from agents.query.

The event loop that serves these routes also runs intake, the changelog view
and /healthz, so no request may hold it for long. ``EstimateService.prepare``
checks a request and states its work on the loop (cheap, bounded); an answer
of little work is computed inline, a heavy one (e.g. /estimates of 100,000
values, /topk or a long /trend) on one query thread from the snapshot taken by
``prepare``, JSON text included. That thread runs one answer at a time and at
most ``QUERY_CPU_SHARE`` of one CPU (after an answer that took t seconds of
CPU it rests t * (1 / share - 1)), so a storm of queries cannot starve intake;
at most ``MAX_WAITING`` answers wait for it, more are turned away with 503 and
Retry-After rather than queued without bound.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

import faust
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .query import INLINE_WORK, ApiError, check_query

if TYPE_CHECKING:
    from .app import OCMSWorker

#: CPU of one core the query thread may use on average while answers wait.
QUERY_CPU_SHARE = 0.25
#: Heavy answers that may wait for the query thread; more get 503.
MAX_WAITING = 8
JSON_TYPE = "application/json"


class QueryBusy(Exception):
    """The query thread has ``MAX_WAITING`` answers waiting already."""


def to_json(doc: dict) -> bytes:
    # allow_nan=False: JSON has no NaN/Infinity; records map unbounded ends to null first.
    return json.dumps(doc, allow_nan=False, separators=(",", ":")).encode()


class QueryRunner:
    """One thread for heavy answers, used at most ``cpu_share`` of the time on average."""

    def __init__(self, cpu_share: float = QUERY_CPU_SHARE, max_waiting: int = MAX_WAITING):
        self.cpu_share = cpu_share
        self.max_waiting = max_waiting
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ocms-query")
        self.waiting = 0
        self.rest_until = 0.0
        self._turn: asyncio.Lock | None = None
        self.answered = 0
        self.busy_seconds = 0.0  # CPU time of the query thread

    async def run(self, compute: Callable[[], bytes]) -> bytes:
        if self.waiting >= self.max_waiting:
            raise QueryBusy()
        if self._turn is None:
            self._turn = asyncio.Lock()  # created on the loop that serves requests
        self.waiting += 1
        try:
            async with self._turn:
                rest = self.rest_until - time.monotonic()
                if rest > 0:
                    await asyncio.sleep(rest)
                body, cpu = await asyncio.get_running_loop().run_in_executor(self.executor, _timed, compute)
                self.answered += 1
                self.busy_seconds += cpu
                self.rest_until = time.monotonic() + cpu * (1.0 / self.cpu_share - 1.0)
                return body
        finally:
            self.waiting -= 1


def _timed(compute: Callable[[], bytes]) -> tuple[bytes, float]:
    start = time.thread_time()
    body = compute()
    return body, time.thread_time() - start


def add_pages(app: faust.App, worker: "OCMSWorker") -> None:
    service = worker.service
    runner = QueryRunner()

    def error(web, exc: ApiError):
        return web.bytes(to_json(exc.as_json()), content_type=JSON_TYPE, status=exc.status)

    async def answer(web, request, endpoint: str, value: str | None = None):
        try:
            query = check_query(endpoint, request.query.items())
            prepared = service.prepare(endpoint, query, value)
            if prepared.work <= INLINE_WORK:
                body = to_json(prepared.compute())
            else:
                body = await runner.run(lambda: to_json(prepared.compute()))
        except ApiError as exc:
            return error(web, exc)
        except QueryBusy:
            doc = {"error": f"{runner.max_waiting} heavy queries are waiting already; retry later", "status": 503}
            return web.bytes(to_json(doc), content_type=JSON_TYPE, status=503, headers={"Retry-After": "1"})
        return web.bytes(body, content_type=JSON_TYPE)

    @app.page("/estimates")
    async def estimates(web, request):
        return await answer(web, request, "estimates")

    @app.page("/estimates/{value}")
    async def estimate_value(web, request, value):
        return await answer(web, request, "estimate_value", value)

    @app.page("/topk")
    async def topk(web, request):
        return await answer(web, request, "topk")

    @app.page("/trend")
    async def trend(web, request):
        return await answer(web, request, "trend")

    @app.page("/params")
    async def params(web, request):
        return await answer(web, request, "params")

    @app.page("/healthz")
    async def healthz(web, request):
        try:
            check_query("healthz", request.query.items())
        except ApiError as exc:
            return error(web, exc)
        doc = worker.health()
        return web.json(doc, status=200 if doc["status"] == "ok" else 503)

    @app.page("/metrics")
    async def metrics(web, request):
        try:
            check_query("metrics", request.query.items())
        except ApiError as exc:
            return error(web, exc)
        worker.update_lag_metrics()
        # aiohttp takes the charset separately; the exposition format is UTF-8 text.
        content_type = CONTENT_TYPE_LATEST.split("; charset")[0]
        return web.bytes(generate_latest(worker.metrics.registry), content_type=content_type)
