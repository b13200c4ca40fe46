"""The worker's HTTP API: routes on the Faust web server, answers from agents.query."""

from __future__ import annotations

from typing import TYPE_CHECKING

import faust
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .query import ApiError

if TYPE_CHECKING:
    from .app import OCMSWorker


def add_pages(app: faust.App, worker: "OCMSWorker") -> None:
    service = worker.service

    def answer(web, compute):
        try:
            return web.json(compute())
        except ApiError as exc:
            return web.json(exc.as_json(), status=exc.status)

    def query(request) -> dict:
        return {k: request.query[k] for k in request.query}

    @app.page("/estimates")
    async def estimates(web, request):
        return answer(web, lambda: service.estimates(query(request)))

    @app.page("/estimates/{value}")
    async def estimate_value(web, request, value):
        return answer(web, lambda: service.estimate_value(value, query(request)))

    @app.page("/topk")
    async def topk(web, request):
        return answer(web, lambda: service.topk(query(request)))

    @app.page("/trend")
    async def trend(web, request):
        return answer(web, lambda: service.trend(query(request)))

    @app.page("/params")
    async def params(web, request):
        return answer(web, service.params_doc)

    @app.page("/healthz")
    async def healthz(web, request):
        doc = worker.health()
        return web.json(doc, status=200 if doc["status"] == "ok" else 503)

    @app.page("/metrics")
    async def metrics(web, request):
        worker.update_lag_metrics()
        # aiohttp takes the charset separately; the exposition format is UTF-8 text.
        content_type = CONTENT_TYPE_LATEST.split("; charset")[0]
        return web.bytes(generate_latest(worker.metrics.registry), content_type=content_type)
