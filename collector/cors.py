"""CORS for web pages that upload from the browser (``--cors-origins``, off by default).

A page on ``https://app.example.com`` that posts to the collector on another origin needs the
collector's consent: the browser first sends a preflight ``OPTIONS`` (the upload's Content-Type
``application/vnd.ocms.wire-v1`` and its ``Idempotency-Key`` and ``Authorization`` headers are not
CORS-safelisted), then the POST, whose answer it shows the page only with ``Access-Control-Allow-Origin``.

``--cors-origins`` lists the origins allowed (``https://app.example.com,https://www.example.com``) or
``*`` for any. No credentials (cookies) are ever allowed: the producer/js client sends none, and a
token travels in ``Authorization``. Answers expose ``Retry-After`` and ``Idempotent-Replayed`` to the
page's script. Preflights are answered for the upload routes and the two GET routes a client reads
(``/v1/device-config``, ``/v1/metrics``), without a token.
"""

from __future__ import annotations

import re

from aiohttp import web

from cms_core.errors import InvalidParameterError

#: Headers the browser client sends on an upload (producer/js uploader.ts).
ALLOWED_HEADERS = "Content-Type, Idempotency-Key, Authorization"
EXPOSED_HEADERS = "Retry-After, Idempotent-Replayed"
PREFLIGHT_MAX_AGE_S = 600
#: Paths a preflight is answered for (the upload routes and what a client GETs).
CORS_ROUTES = ("/v1/reports", "/v1/metrics/{metric}/reports", "/v1/device-config", "/v1/metrics")


def parse_origins(raw, label: str) -> tuple[str, ...]:
    """``*`` or a comma-separated list of origins (scheme://host[:port], no path) -> a tuple."""
    items = tuple(part.strip() for part in str(raw).split(",") if part.strip())
    for item in items:
        if item != "*" and not re.fullmatch(r"https?://([A-Za-z0-9.-]+|\[[0-9a-fA-F:]+\])(:[0-9]{1,5})?", item):
            raise InvalidParameterError(label, raw, f"{item!r} is not an origin (scheme://host[:port], no path) or *")
    if "*" in items and len(items) > 1:
        raise InvalidParameterError(label, raw, "* allows every origin: give it alone")
    return items


class CorsPolicy:
    def __init__(self, origins: tuple[str, ...]):
        self.origins = frozenset(origins)
        self.any = "*" in self.origins

    def __bool__(self) -> bool:
        return bool(self.origins)

    def headers(self, request: web.BaseRequest) -> dict | None:
        """The CORS headers of an answer to ``request``, or None (no Origin, or one not allowed)."""
        origin = request.headers.get("Origin")
        if origin is None or not (self.any or origin in self.origins):
            return None
        return {"Access-Control-Allow-Origin": "*" if self.any else origin, "Vary": "Origin",
                "Access-Control-Expose-Headers": EXPOSED_HEADERS}

    async def preflight(self, request: web.Request) -> web.Response:
        headers = self.headers(request)
        if headers is None:
            return web.json_response({"status": 403, "reason": "origin_not_allowed",
                                      "detail": f"origin {request.headers.get('Origin')!r} is not in --cors-origins"},
                                     status=403)
        headers.update({"Access-Control-Allow-Methods": "POST, GET, OPTIONS",
                        "Access-Control-Allow-Headers": ALLOWED_HEADERS,
                        "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S)})
        return web.Response(status=204, headers=headers)

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        response = await handler(request)
        headers = self.headers(request)
        if headers is not None:
            response.headers.update(headers)
        return response

    def install(self, app: web.Application) -> None:
        """Preflight routes and the middleware that adds the headers to routed answers (the fast upload
        path adds them itself: Collector._post)."""
        for path in CORS_ROUTES:
            app.router.add_route("OPTIONS", path, self.preflight)
        app.middlewares.append(self.middleware)
