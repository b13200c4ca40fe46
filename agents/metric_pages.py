"""HTTP routes by metric name: /metrics/NAME/estimates, /estimates/VALUE, /topk, /trend; the listing.

``GET /metrics`` stays Prometheus's exposition (what every scrape config points at); the same
path answers the JSON listing of served metrics (name, description, owner, unit, live versions
with epsilon, mechanism, fingerprint and reports counted, freshness) to a client that asks for
JSON: ``Accept: application/json`` or ``?format=json``. Per-metric answers take the parameters
of their name-less twins plus ``version`` (default: the newest live version) and name values
(``/metrics/flight_dest/estimates/ATL``).
"""

from __future__ import annotations

from .answers.request import ApiError


def wants_listing(request) -> bool:
    """True for a JSON listing request (an explicit ``format=json``, or JSON preferred by Accept)."""
    pairs = list(request.query.items())
    formats = [raw for key, raw in pairs if key == "format"]
    if formats:
        if len(pairs) > 1 or formats[0] != "json":
            raise ApiError("format", "/metrics takes only format=json (the metric listing) or nothing "
                                     "(the Prometheus exposition)")
        return True
    accept = request.headers.get("Accept", "")
    return accept.split(",")[0].split(";")[0].strip() == "application/json"


def add_metric_pages(app, worker, answer, error) -> None:
    @app.page("/metrics/{name}/estimates")
    async def metric_estimates(web, request, name):
        return await answer(web, request, "estimates", metric=name)

    @app.page("/metrics/{name}/estimates/{value}")
    async def metric_estimate_value(web, request, name, value):
        return await answer(web, request, "estimate_value", value, metric=name)

    @app.page("/metrics/{name}/topk")
    async def metric_topk(web, request, name):
        return await answer(web, request, "topk", metric=name)

    @app.page("/metrics/{name}/histogram")  # a numeric metric's (issue 40)
    async def metric_histogram(web, request, name):
        return await answer(web, request, "histogram", metric=name)

    @app.page("/metrics/{name}/trend")
    async def metric_trend(web, request, name):
        return await answer(web, request, "trend", metric=name)

    @app.page("/metrics/{name}")
    async def metric_describe(web, request, name):
        try:
            if list(request.query.items()):
                raise ApiError(list(request.query.keys())[0], "unknown parameter; this endpoint takes no parameters")
            entry = worker.catalog.metric(name)
        except ApiError as exc:
            return error(web, exc)

        async def here():
            return web.json(entry.describe())

        return await worker.router.route(web, request, name, here)  # its counts: from the view holding them
