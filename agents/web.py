"""The worker's HTTP API: routes on the Faust web server, answers from agents.answers.

The event loop that serves these routes also runs intake, the changelog view
and /healthz, so no request may hold it for long. ``EstimateService.prepare``
checks a request and states its work on the loop (cheap, bounded). An answer
of little work is computed inline. A heavy one (e.g. /estimates of 100,000
values, /topk, a long /trend) is computed off the loop in two steps:

* the query thread sums the snapshot's counts (numpy, which releases the GIL);
* the answer process turns the sums into estimates, records and JSON text.
  Building 100,000 records and their JSON is seconds of pure Python: in a
  thread it would hold the GIL and stall the loop (each of the loop's system
  calls then waits for the GIL), so it runs in a process of its own, at a
  lower CPU priority than intake.

One heavy answer is computed at a time; the query thread uses at most
``QUERY_CPU_SHARE`` of a CPU (after t seconds of CPU it rests
t * (1 / share - 1)); at most ``MAX_WAITING`` heavy answers wait, more are
turned away with 503 and Retry-After instead of queueing without bound.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Callable, Protocol

import faust
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest

from infra.http_edge import ErrorAnswers, install_handle_error, json_errors

from .answers.encode import count_dropped, to_json
from .answers.request import ApiError, check_query
from .answers.service import INLINE_WORK, Answer, Estimator, Read, finish_json, start_answer_process

from .metric_pages import add_metric_pages, wants_listing
from .shards import FORWARDED_HEADER, Router
from .trust import ReadAccess, read_tokens_middleware
from .web_edge import guard_web_server

if TYPE_CHECKING:
    from .catalog import Catalog
    from .metrics import PipelineMetrics

#: CPU of one core the query thread may use on average while answers wait.
QUERY_CPU_SHARE = 0.25
#: Heavy answers that may wait; more get 503.
MAX_WAITING = 8
#: The answer process runs this much nicer than the worker (intake first).
ANSWER_NICENESS = 10
JSON_TYPE = "application/json"


class ServedWorker(Protocol):
    """What the routes read of the worker (``agents.app.OCMSWorker`` is one). A protocol, not the
    class: app.py installs these routes, so this module imports nothing of it."""

    catalog: Catalog  # every served metric version, by name and fingerprint (the first: the name-less routes')
    settings: object  # agents.settings.WorkerSettings: the HTTP server's bounds
    metrics: PipelineMetrics  # what /metrics exposes
    router: Router  # answers here, or forwards to the worker whose view holds the metric (--view share)

    def health(self) -> dict: ...

    def update_lag_metrics(self) -> None: ...


class QueryBusy(Exception):
    """``MAX_WAITING`` heavy answers are waiting already (or the answer process restarts)."""


class QueryRunner:
    """Heavy answers off the event loop: sums on one thread, the rest in one process."""

    def __init__(self, estimator: Estimator, cpu_share: float = QUERY_CPU_SHARE, max_waiting: int = MAX_WAITING):
        self.estimator = estimator
        self.cpu_share = cpu_share
        self.max_waiting = max_waiting
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ocms-query")
        self.process: ProcessPoolExecutor | None = None
        self.waiting = 0
        self.rest_until = 0.0
        self._turn: asyncio.Lock | None = None
        self.answered = 0

    def _process(self) -> ProcessPoolExecutor:
        if self.process is None:
            # spawn: a fresh interpreter (forking a running Faust worker copies its threads' locks).
            self.process = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                initializer=start_answer_process, initargs=(self.estimator.sets, ANSWER_NICENESS))
        return self.process

    async def run(self, answer: Answer) -> bytes:
        if self.waiting >= self.max_waiting:
            raise QueryBusy(f"{self.max_waiting} heavy queries are waiting already; retry later")
        if self._turn is None:
            self._turn = asyncio.Lock()  # created on the loop that serves requests
        self.waiting += 1
        try:
            async with self._turn:
                rest = self.rest_until - time.monotonic()
                if rest > 0:
                    await asyncio.sleep(rest)
                loop = asyncio.get_running_loop()
                job, cpu = await loop.run_in_executor(self.thread, _timed, answer.gather)
                self.rest_until = time.monotonic() + cpu * (1.0 / self.cpu_share - 1.0)
                try:
                    body, dropped = await loop.run_in_executor(self._process(), finish_json, job)
                except BrokenProcessPool:
                    self.process = None  # the answer process died (e.g. killed): a new one next time
                    raise QueryBusy("the answer process restarted; retry") from None
                count_dropped(dropped)  # records the answer process left out (agents.answers.encode.json_answer)
                self.answered += 1
                return body
        finally:
            self.waiting -= 1

    def close(self) -> None:
        self.thread.shutdown(wait=False, cancel_futures=True)
        if self.process is not None:
            self.process.shutdown(wait=False, cancel_futures=True)


def _timed(compute: Callable):
    start = time.thread_time()
    result = compute()
    return result, time.thread_time() - start


def add_pages(app: faust.App, worker: ServedWorker) -> QueryRunner:
    """Install the worker's routes; returns the runner of their heavy answers. The runner and the router's
    forwarding client are closed when the web server stops (the worker's stop): only these routes use them."""
    # The estimator of every served fingerprint (agents.catalog) answers inline and in the runner.
    answers = AnswerPages(worker, QueryRunner(worker.catalog.estimator), _install_error_edge(app, worker))
    app.web.web_app.on_cleanup.append(answers.release)
    _add_answer_pages(app, worker, answers)
    add_metric_pages(app, worker, answers.answer, answers.error)
    _add_metrics_page(app, worker, answers)
    return answers.runner


def _install_error_edge(app: faust.App, worker: ServedWorker) -> Counter:
    """Every error answer is JSON with a reason name, counted by reason and logged in one line: the API's own
    (bad_parameter, not_found, busy) and the web server's (no_such_route, method_not_allowed,
    malformed_request, internal_error: infra/http_edge.py), never with a client address. Returns the counter."""
    http_errors = Counter("ocms_http_errors", "Error answers of the worker's HTTP server, by reason", ["reason"],
                          registry=worker.metrics.registry)
    answers = ErrorAnswers(lambda status, reason: http_errors.labels(reason).inc(), logging.getLogger("ocms.web"),
                           detail_field="error")
    app.web.web_app.middlewares.append(json_errors(answers))
    install_handle_error(answers)
    guard_web_server(app, worker.settings, worker.metrics.registry, answers)  # timeouts and a cap (agents.web_edge)
    access = ReadAccess(worker.settings.api_tokens_file, worker.catalog.primary.name, answers)
    if access.enabled:  # bearer tokens for every read of counts (agents.trust)
        app.web.web_app.middlewares.append(read_tokens_middleware(access))
    return http_errors


class AnswerPages:
    """What every answer route does: check the request on whichever worker it reached, route it to the view
    holding the metric (agents.shards), answer inline or in the runner, and write errors as JSON."""

    def __init__(self, worker: ServedWorker, runner: QueryRunner, http_errors: Counter):
        self.worker = worker
        self.runner = runner
        self.http_errors = http_errors  # ocms_http_errors (_install_error_edge)
        self.estimator = worker.catalog.estimator
        self.primary = worker.catalog.primary.name

    async def release(self, web_app) -> None:
        # aiohttp's on_cleanup: the server has stopped listening and its handlers have finished (Faust
        # may send it twice; both closes are idempotent).
        self.runner.close()
        await self.worker.router.close()

    def error(self, web, exc: ApiError):
        reason = "not_found" if exc.status == 404 else "bad_parameter"
        self.http_errors.labels(reason).inc()
        return web.bytes(to_json({**exc.as_json(), "reason": reason}), content_type=JSON_TYPE, status=exc.status)

    async def answer(self, web, request, endpoint: str, value: str | None = None, metric: str | None = None):
        # The request is checked here, on whichever worker it reached, before it is routed: a bad parameter
        # is a 400 naming it (an unknown metric, version or value a 404), also while the metric's share is
        # moving (a 503 would have the client retry a request that can never succeed).
        catalog = self.worker.catalog
        try:
            if metric is None:  # /estimates ...: the first metric's (agents.catalog)
                read = catalog.check_primary(endpoint, request.query.items(), value)
            else:  # /metrics/NAME/...: one version of a named metric (agents.catalog)
                read = catalog.check(metric, endpoint, request.query.items(), value)
        except ApiError as exc:
            return self.error(web, exc)
        # Answered here when this view holds the metric, else by the worker that does (agents.shards).
        return await self.worker.router.route(web, request, metric or self.primary,
                                              lambda: self.answer_here(web, read))

    async def answer_here(self, web, read: Read):
        try:
            prepared = read()  # reads the view's snapshot; a request over the work bound is a 400 here
            if prepared.work <= INLINE_WORK:
                body = to_json(self.estimator.finish(prepared.gather()))
            else:
                body = await self.runner.run(prepared)
        except ApiError as exc:
            return self.error(web, exc)
        except QueryBusy as exc:
            self.http_errors.labels("busy").inc()
            doc = {"error": str(exc), "status": 503, "reason": "busy"}
            return web.bytes(to_json(doc), content_type=JSON_TYPE, status=503, headers={"Retry-After": "1"})
        return web.bytes(body, content_type=JSON_TYPE)


def _add_answer_pages(app: faust.App, worker: ServedWorker, answers: AnswerPages) -> None:
    """The first metric's answers (/estimates, /topk, /trend, /params) and /healthz."""
    answer = answers.answer

    @app.page("/estimates")
    async def estimates(web, request):
        return await answer(web, request, "estimates")

    @app.page("/estimates/{value}")
    async def estimate_value(web, request, value):
        return await answer(web, request, "estimate_value", value)

    @app.page("/topk")
    async def topk(web, request):
        return await answer(web, request, "topk")

    @app.page("/histogram")  # a numeric metric's (issue 40)
    async def histogram(web, request):
        return await answer(web, request, "histogram")

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
            return answers.error(web, exc)
        doc = worker.health()
        if doc["status"] != "ok":
            doc["reason"] = doc["status"]  # a state, not a fault: not counted as an error answer
        return web.json(doc, status=200 if doc["status"] == "ok" else 503)


def _add_metrics_page(app: faust.App, worker: ServedWorker, answers: AnswerPages) -> None:
    """/metrics: the Prometheus exposition, or the metric listing (JSON) for a client asking for JSON."""
    @app.page("/metrics")
    async def metrics(web, request):
        try:
            if wants_listing(request):  # the metric listing (JSON); Prometheus gets the exposition
                doc = await worker.router.listing(worker.catalog.describe(), bool(request.headers.get(FORWARDED_HEADER)),
                                                  request.headers.get("Authorization"))
                return web.bytes(to_json(doc), content_type=JSON_TYPE)
            check_query("metrics", request.query.items())
        except ApiError as exc:
            return answers.error(web, exc)
        worker.update_lag_metrics()
        # aiohttp takes the charset separately; the exposition format is UTF-8 text.
        content_type = CONTENT_TYPE_LATEST.split("; charset")[0]
        return web.bytes(generate_latest(worker.metrics.registry), content_type=content_type)
