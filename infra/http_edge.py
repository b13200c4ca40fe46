"""The HTTP edge of the collector and the worker: JSON error answers, connection timeouts and a cap.

**Error answers.** aiohttp answers what never reaches a handler in plain text (a malformed
request line or header: 400; a handler exception: 500, with a traceback in the log that names
the client) and a router miss or a wrong method with a plain-text 404/405. :class:`ErrorAnswers`
makes every one of them a JSON document ``{"status", "reason", <detail field>}`` with a reason
*name*, counts it by reason and logs it in one line: the status, the reason and what failed (an
exception's class and the code line that raised it), never header bytes (a bearer token may be
in them), and the client address only when the operator asked for it
(``--access-log-client-addresses``). :func:`json_errors` is the middleware for the routes;
:meth:`ErrorAnswers.handle_error` replaces aiohttp's ``RequestHandler.handle_error`` (the
collector's own handler class; :func:`install_handle_error` for a server built elsewhere, the
worker's Faust web server).

**Connections** (the collector, :class:`GuardedAppRunner`): a connection that sends nothing is
closed after the idle timeout (aiohttp's keep-alive timer, which also runs from a connection's
start); a request whose header is still incomplete ``header_timeout`` seconds after its first
byte is answered 408 ``header_timeout`` and closed; and at most ``max_connections`` are open
(never more than the open-files limit allows, less a reserve for Kafka and files): a connection
beyond that closes the one idle the longest to make room, or is answered 503 when all are busy.
Counted in ``ocms_collector_connections`` and ``ocms_collector_connections_{refused,closed}_total``;
logged in one line (at most every 10 s while it goes on).

aiohttp names used beyond its documented API (``AppRunner._make_server``, ``Server.__call__``'s
construction of the handler, ``RequestHandler.handle_error``/``data_received``) are checked by
:func:`drift` (``tests/collector/test_http_edge.py``).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import json
import logging
import os
import resource
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from aiohttp import web, web_protocol, web_server
from aiohttp.http_exceptions import BadHttpMethod, HttpProcessingError, LineTooLong

#: The aiohttp version the private names here were checked against.
PINNED_VERSIONS = {"aiohttp": "3.14.5"}

#: Reason names of HTTP statuses raised by aiohttp or a handler (names, not codes, in metrics and answers).
REASONS = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "no_such_route", 405: "method_not_allowed",
    406: "not_acceptable", 408: "request_timeout", 411: "length_required", 413: "body_too_large",
    414: "uri_too_long", 415: "unsupported_media_type", 417: "expectation_failed", 422: "unprocessable",
    429: "too_many_requests", 431: "headers_too_large", 500: "internal_error", 501: "not_implemented",
    503: "unavailable", 504: "timeout",
}
#: File descriptors left to Kafka clients, the log and the registry when the open-files limit caps connections.
FD_RESERVE = 64
#: The cap's log line is written at most this often while connections are closed or refused.
CAP_LOG_SECONDS = 10.0
#: A connection closed idle this much short of the idle timeout still counts as closed by it.
IDLE_SLACK_S = 0.05


def reason_of(status: int) -> str:
    return REASONS.get(status, "client_error" if status < 500 else "server_error")


def where(exc: BaseException) -> str:
    """The code line that raised ``exc`` (file:line in function), without its message (it may hold request bytes)."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if not frames:
        return type(exc).__name__
    last = frames[-1]
    return f"{type(exc).__name__} at {os.path.basename(last.filename)}:{last.lineno} in {last.name}"


class ErrorAnswers:
    """Error answers of one server: JSON with a reason name, counted by reason, logged in one line.

    ``count(status, reason)`` counts an answer; ``detail_field`` is where the human text goes
    (the collector: ``detail``; the worker: ``error``, as its API errors have it).
    """

    def __init__(self, count: Callable[[int, str], None], logger: logging.Logger, *, detail_field: str = "detail",
                 client_addresses: bool = False):
        self.count = count
        self.log = logger
        self.detail_field = detail_field
        self.client_addresses = client_addresses

    def document(self, status: int, reason: str, detail: str) -> dict:
        return {"status": status, "reason": reason, self.detail_field: detail}

    def response(self, status: int, reason: str, detail: str, headers: dict | None = None) -> web.Response:
        response = web.Response(body=json.dumps(self.document(status, reason, detail)).encode(), status=status,
                                headers=headers, content_type="application/json", charset="utf-8")
        response.ocms_reason = reason
        return response

    def answered(self, request, status: int, reason: str, what: str, count: bool = True) -> None:
        """Count and log one error answer (4xx at info, 5xx at error), in one line."""
        if count:
            try:
                self.count(status, reason)
            except Exception:  # pragma: no cover - counting never costs the answer
                pass
        client = ""
        if self.client_addresses and request is not None:
            try:
                client = f" from {request.remote}"
            except Exception:
                client = ""
        self.log.log(logging.ERROR if status >= 500 else logging.INFO, "answered %d %s: %s%s", status, reason, what,
                     client)

    def for_http_exception(self, request, exc: web.HTTPException) -> web.Response:
        status = exc.status
        reason = reason_of(status)
        detail = {404: "no such route", 405: f"method {request.method} is not allowed here",
                  413: "the body is too large"}.get(status, exc.reason or reason)
        headers = {k: v for k, v in exc.headers.items() if k in ("Allow", "Retry-After", "WWW-Authenticate")}
        self.answered(request, status, reason, f"{_method(request)} {_route(request)}")
        return self.response(status, reason, detail, headers or None)

    def with_reason(self, request, response: web.Response) -> web.Response:
        """An error answer a handler returned: kept if it is JSON with a reason (its handler counted it), else
        given one (a JSON object gains ``reason``; anything else becomes a JSON answer), counted and logged."""
        body = response.body
        doc = None
        if isinstance(body, (bytes, bytearray)) and len(body) <= 65536:
            try:
                doc = json.loads(body)
            except ValueError:
                doc = None
        if isinstance(doc, dict) and "reason" in doc:
            return response
        reason = reason_of(response.status)
        self.answered(request, response.status, reason, f"{_method(request)} {_route(request)}")
        if isinstance(doc, dict):
            response.body = json.dumps({**doc, "reason": reason}).encode()
            return response
        text = body.decode("utf-8", "replace")[:200] if isinstance(body, (bytes, bytearray)) else reason
        headers = {k: v for k, v in response.headers.items() if k in ("Allow", "Retry-After", "WWW-Authenticate")}
        return self.response(response.status, reason, text, headers or None)

    def for_exception(self, request, exc: BaseException | None, count: bool = True) -> web.Response:
        what = where(exc) if exc is not None else "no exception"
        self.answered(request, 500, "internal_error", f"{_method(request)} {_route(request)}: {what}", count)
        return self.response(500, "internal_error", "the server failed to answer this request; it is logged")

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """aiohttp's ``RequestHandler.handle_error``, answered in JSON: a malformed request (400, or the
        parser's status), a handler that raised (500) or timed out (504)."""
        if request.writer.output_size > 0:  # as aiohttp: some data already got sent, the connection is broken
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        if status == 500:
            response = self.for_exception(request, exc)
        elif status == 504:
            self.answered(request, 504, "timeout", "the handler timed out")
            response = self.response(504, "timeout", "the server did not answer in time")
        else:
            reason = "headers_too_large" if isinstance(exc, LineTooLong) else "malformed_request"
            kind = type(exc).__name__ if exc is not None else "HttpProcessingError"
            if isinstance(exc, BadHttpMethod):
                detail = "not an HTTP request (bad method)"
            elif isinstance(exc, LineTooLong):
                detail = "a request line or header is too long"
            else:
                detail = f"malformed HTTP request ({kind})"
            self.answered(request, status, reason, kind)
            response = self.response(status, reason, detail)
        response.force_close()
        return response


def close_after(request, response: web.StreamResponse) -> web.StreamResponse:
    """``response``, after which the connection is closed at once (a client too slow to keep): aiohttp would
    otherwise read the rest of an unread body for up to its lingering time (10 s) first."""
    response.force_close()
    protocol = getattr(request, "protocol", None)
    if protocol is not None and hasattr(protocol, "_lingering_time"):
        protocol._lingering_time = 0.0  # this connection only: it closes after this answer
    return response


def _method(request) -> str:
    try:
        return request.method
    except Exception:  # pragma: no cover
        return "?"


def _route(request) -> str:
    """The path as a short, printable text (no query string, no header)."""
    try:
        path = request.path
    except Exception:
        return "?"
    return ascii(path[:80])[1:-1]


def json_errors(answers: ErrorAnswers):
    """Middleware: router misses, wrong methods, aiohttp's 413 and handler exceptions answered in JSON."""

    @web.middleware
    async def middleware(request, handler):
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return answers.for_http_exception(request, exc)
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as exc:
            return answers.for_exception(request, exc)
        if response.status >= 400 and isinstance(response, web.Response):
            return answers.with_reason(request, response)
        return response

    return middleware


_process_answers: ErrorAnswers | None = None
_aiohttp_handle_error = web.RequestHandler.handle_error


def _installed_handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                            message: str | None = None):
    answers = getattr(self, "ocms_answers", None) or _process_answers
    if answers is None:  # pragma: no cover - install_handle_error sets it
        return _aiohttp_handle_error(self, request, status, exc, message)
    return answers.handle_error(request, status, exc, message)


def install_handle_error(answers: ErrorAnswers) -> None:
    """Answer malformed requests and handler failures of every aiohttp server of this process with
    ``answers`` (for a server whose handler class is not ours: the worker's Faust web server)."""
    global _process_answers
    _process_answers = answers
    web.RequestHandler.handle_error = _installed_handle_error
    quiet_aiohttp_server_log()


def quiet_aiohttp_server_log() -> None:
    """What aiohttp's server still logs itself (an unhandled exception of a connection) in one line."""
    server_log = logging.getLogger("aiohttp.server")
    if _one_line_filter not in server_log.filters:
        server_log.addFilter(_one_line_filter)


def _one_line_filter(record: logging.LogRecord) -> bool:
    """aiohttp's own server errors in one line, without their arguments (a client address) or traceback."""
    if record.exc_info:
        kind = record.exc_info[0].__name__ if record.exc_info[0] else "error"
        record.msg = f"{str(record.msg).split(' from ')[0].split('%')[0].strip()} ({kind})"
        record.args = ()
        record.exc_info = None
        record.exc_text = None
    return True


# ------------------------------------------------------------------------------- TLS
def server_tls_context(cert: str, key: str, client_ca: str | None = None):
    """The TLS context of a server (the collector's, the worker's): ``cert`` (PEM chain) and ``key``; with
    ``client_ca`` every client must present a certificate that CA signed (mutual TLS). TLS 1.2 at least."""
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if client_ca:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_tls_context(ca: str | None = None, cert: str | None = None, key: str | None = None):
    """The TLS context of a client (a worker forwarding to another): servers verified against ``ca`` (the system's
    authorities when None), and with ``cert``/``key`` this process's certificate presented (mutual TLS)."""
    import ssl

    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert and key:
        context.load_cert_chain(cert, key)
    return context


def check_tls(values: dict, labels, cert: str = "tls_cert", key: str = "tls_key", ca: str = "tls_client_ca") -> None:
    """The TLS settings of a server, once at start: both files or neither, and they load (an error names the flag
    and the file, never a traceback)."""
    import ssl

    from cms_core.errors import InvalidParameterError

    if (values[cert] is None) != (values[key] is None):
        raise InvalidParameterError(labels[key], values[key], f"{labels[cert]} and {labels[key]} go together")
    if values[ca] and not values[cert]:
        raise InvalidParameterError(labels[ca], values[ca], f"applies to TLS: give {labels[cert]} and {labels[key]}")
    if values[cert]:
        try:
            server_tls_context(values[cert], values[key], values[ca])
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise InvalidParameterError(labels[cert], values[cert], f"does not load with {labels[key]} "
                                        f"{values[key]}{' and ' + labels[ca] + ' ' + values[ca] if values[ca] else ''}: "
                                        f"{exc}") from None


# ------------------------------------------------------------------------------- connections
def open_files_limit() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def connection_cap(max_connections: int) -> int:
    """``max_connections``, lowered to fit the open-files limit (less FD_RESERVE for Kafka and files)."""
    limit = open_files_limit()
    if limit is None:
        return max_connections
    return max(1, min(max_connections, limit - FD_RESERVE))


class ConnectionMetrics:
    """What a :class:`ConnectionGuard` counts: ``<prefix>_connections`` (open now, set by the server),
    ``<prefix>_connections_refused_total`` and ``<prefix>_connections_closed_total{reason}``."""

    def __init__(self, prefix: str, server: str, registry, cap_flag: str):
        from prometheus_client import Counter, Gauge

        self.connections = Gauge(f"{prefix}_connections", f"Open connections of {server}'s HTTP server",
                                 registry=registry)
        self.connections_refused = Counter(f"{prefix}_connections_refused",
                                           f"Connections answered 503 at {cap_flag} (none idle to close)",
                                           registry=registry)
        self.connections_closed = Counter(f"{prefix}_connections_closed",
                                          f"Connections {server} closed: evicted_idle (to make room at the cap), "
                                          "header_timeout, idle_timeout (no request for the idle timeout)", ["reason"],
                                          registry=registry)
        for reason in ("evicted_idle", "header_timeout", "idle_timeout"):
            self.connections_closed.labels(reason)


@dataclass(eq=False)
class ConnectionGuard:
    """Open connections of one server: a cap (closing the longest-idle one, else refusing), a
    header timeout, and a count of connections closed idle: ``idle_timeout`` is the server's idle
    (keep-alive) timeout, after which aiohttp closes a connection that sent no request; a connection
    that closes once idle that long is counted ``idle_timeout``. ``metrics`` has ``connections_refused``
    (Counter) and ``connections_closed`` (Counter by reason); ``logger`` gets the cap's line and, at most
    every CAP_LOG_SECONDS, how many idle connections the timeout closed."""

    max_connections: int
    header_timeout: float
    metrics: object
    logger: logging.Logger
    answers: ErrorAnswers
    clock: Callable[[], float] = time.monotonic
    idle_timeout: float | None = None
    #: the cap in force: ``max_connections`` or less, as the open-files limit allows
    cap: int = field(init=False)
    open: set = field(init=False, default_factory=set)
    #: handler -> since when it is idle (clock), longest idle first
    idle: collections.OrderedDict = field(init=False, default_factory=collections.OrderedDict)
    _idle_closed_since: int = field(init=False, default=0)
    _sweep: asyncio.TimerHandle | None = field(init=False, default=None)
    _idle_logged_at: float = field(init=False, default=-CAP_LOG_SECONDS)
    _closed_since: int = field(init=False, default=0)
    _refused_since: int = field(init=False, default=0)
    _logged_at: float = field(init=False, default=-CAP_LOG_SECONDS)

    def __post_init__(self) -> None:
        self.cap = connection_cap(self.max_connections)

    def __len__(self) -> int:
        return len(self.open)

    def opened(self, handler) -> None:
        if len(self.open) >= self.cap:
            if self.idle:
                victim, _ = self.idle.popitem(last=False)
                self.open.discard(victim)
                victim.close_quietly()
                self.metrics.connections_closed.labels("evicted_idle").inc()
                self._closed_since += 1
            else:
                handler.refuse()
                self.metrics.connections_refused.inc()
                self._refused_since += 1
                self._log_cap()
                return
            self._log_cap()
        self.open.add(handler)
        self.idle[handler] = self.clock()

    def closed(self, handler) -> None:
        self.open.discard(handler)
        since = self.idle.pop(handler, None)
        # aiohttp's keep-alive timer fires at the timeout: idle that long means it closed it (its deadline runs from
        # a moment before this guard's, and the event loop's timers round to the millisecond: IDLE_SLACK_S)
        if since is not None and self.idle_timeout is not None and \
                self.clock() - since >= self.idle_timeout - IDLE_SLACK_S:
            self.metrics.connections_closed.labels("idle_timeout").inc()
            self._idle_closed_since += 1
            now = self.clock()
            if now - self._idle_logged_at >= CAP_LOG_SECONDS:
                self.logger.info("%d connections closed after the idle timeout (%g s without a request) since the "
                                 "last line", self._idle_closed_since, self.idle_timeout)
                self._idle_logged_at = now
                self._idle_closed_since = 0

    def busy(self, handler) -> None:
        self.idle.pop(handler, None)

    def done(self, handler) -> None:
        if handler in self.open:
            self.idle[handler] = self.clock()
            self.idle.move_to_end(handler)

    def header_started(self) -> None:
        """A connection began a request's header: the sweep that enforces the header timeout runs while any
        header is unfinished. One timer per server, not one per request (a timer set and cancelled for every
        request cost 2 us of a single-report upload's ~50)."""
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.sweep_interval, self._sweep_headers)

    @property
    def sweep_interval(self) -> float:
        """How often unfinished headers are looked at: a header is cut between the timeout and a quarter more."""
        return max(0.05, min(1.0, self.header_timeout / 4))

    def _sweep_headers(self) -> None:
        self._sweep = None
        now, waiting = self.clock(), False
        for handler in list(self.open):
            since = handler.header_since
            if since is None:
                continue
            if now - since >= self.header_timeout:
                handler.header_late()
            else:
                waiting = True
        if waiting:
            self._sweep = asyncio.get_running_loop().call_later(self.sweep_interval, self._sweep_headers)

    def header_timed_out(self) -> None:
        self.metrics.connections_closed.labels("header_timeout").inc()

    def _log_cap(self) -> None:
        now = self.clock()
        if now - self._logged_at < CAP_LOG_SECONDS:
            return
        limit = open_files_limit()
        why = f"--max-connections {self.max_connections}" if self.cap == self.max_connections else \
            f"the open-files limit {limit} less {FD_RESERVE}"
        self.logger.warning("connection cap %d reached (%s): %d idle connections closed to make room, %d refused "
                            "(503) since the last line", self.cap, why, self._closed_since, self._refused_since)
        self._logged_at = now
        self._closed_since = self._refused_since = 0


#: Written to a connection refused at the cap (before its request is read) and then closed.
_REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
            b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n")


def _canned(status_line: bytes, doc: dict) -> bytes:
    body = json.dumps(doc).encode()
    return (status_line + b"\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's connection handler with JSON error answers, a header timeout and the guard's cap."""

    ocms_answers: ErrorAnswers
    guard: ConnectionGuard | None = None
    #: when the first bytes of a request's header came (the guard's clock), until the request starts
    header_since: float | None = None
    _busy = 0
    #: the body of the connection's latest request: bytes that arrive while it is unread (aiohttp reads the
    #: rest of a body its handler left, for up to lingering_time) are that body, not a new request's header
    _payload = None

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None):
        return self.ocms_answers.handle_error(request, status, exc, message)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._payload is not None and not self._payload.is_eof():
            return  # the rest of the latest request's body (after a 413, say): no new header has begun
        guard = self.guard
        if self._busy == 0 and self.header_since is None and guard is not None and self.transport is not None:
            # the first bytes of a request: its whole header must follow within header_timeout (the guard's sweep)
            self.header_since = guard.clock()
            guard.header_started()

    def request_started(self, request=None) -> None:
        self._busy += 1
        self._payload = getattr(request, "content", None)
        self.header_since = None
        if self.guard is not None:
            self.guard.busy(self)

    def request_done(self) -> None:
        self._busy -= 1
        if self._busy == 0 and self.guard is not None:
            self.guard.done(self)

    def header_late(self) -> None:
        """The guard's sweep found this connection's header unfinished after the header timeout: 408, close."""
        self.header_since = None
        if self._busy or self.transport is None:
            return
        self.guard.header_timed_out()
        detail = f"the request header did not arrive within {self.guard.header_timeout:g} s"
        self.ocms_answers.answered(None, 408, "header_timeout", detail)
        self.transport.write(_canned(b"HTTP/1.1 408 Request Timeout",
                                     self.ocms_answers.document(408, "header_timeout", detail)))
        self.force_close()

    def refuse(self) -> None:
        """Over the cap and nothing idle to close: 503 (Retry-After) before the request is read, then close."""
        if self.transport is not None:
            body = json.dumps(self.ocms_answers.document(
                503, "too_many_connections", "this server holds as many connections as it may; retry")).encode()
            self.transport.write(_REFUSED % len(body) + body)
        self.force_close()

    def close_quietly(self) -> None:
        self.header_since = None
        self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.header_since = None
        super().connection_lost(exc)


class GuardedServer(web_server.Server):
    """aiohttp's ``Server`` handing connections to :class:`GuardedRequestHandler` under a guard."""

    def __init__(self, handler, *, guard: ConnectionGuard, answers: ErrorAnswers, loop=None, **kwargs):
        self.ocms_guard = guard
        self.ocms_answers = answers
        self.handler_kwargs = {k: v for k, v in kwargs.items() if k not in ("request_factory", "handler_cancellation")}
        super().__init__(handler, loop=loop, **kwargs)
        self.handler_loop = loop or asyncio.get_running_loop()

    @property
    def request_handler(self):
        return self._tracked

    @request_handler.setter
    def request_handler(self, handler) -> None:
        """Every request handler set (aiohttp's, then the collector's fast path) marks its connection busy."""

        async def tracked(request):
            protocol = request.protocol
            started = getattr(protocol, "request_started", None)
            if started is None:
                return await handler(request)
            started(request)
            try:
                return await handler(request)
            finally:
                protocol.request_done()

        tracked.inner = handler
        self._tracked = tracked

    @property
    def inner_request_handler(self):
        return self._tracked.inner

    def __call__(self) -> GuardedRequestHandler:
        handler = GuardedRequestHandler(self, loop=self.handler_loop, **self.handler_kwargs)
        handler.ocms_answers = self.ocms_answers
        handler.guard = self.ocms_guard
        return handler

    def connection_made(self, handler, transport) -> None:
        super().connection_made(handler, transport)
        self.ocms_guard.opened(handler)

    def connection_lost(self, handler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self.ocms_guard.closed(handler)


class GuardedAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server is a :class:`GuardedServer`."""

    def __init__(self, app: web.Application, *, guard: ConnectionGuard, answers: ErrorAnswers, **kwargs):
        super().__init__(app, **kwargs)
        self.ocms_guard = guard
        self.ocms_answers = answers
        self.server_kwargs = {k: v for k, v in kwargs.items() if k != "handle_signals"}

    async def _make_server(self) -> GuardedServer:
        plain = await super()._make_server()  # starts the app (on_startup) and builds aiohttp's server
        return GuardedServer(plain.request_handler, request_factory=plain.request_factory,
                             handler_cancellation=plain.handler_cancellation, guard=self.ocms_guard,
                             answers=self.ocms_answers, **self.server_kwargs)


# ----------------------------------------------------------------- drift check
def drift() -> list[str]:
    """What differs from the aiohttp this module was written against (empty when nothing does)."""
    from .pinned import version_drift

    problems = version_drift(PINNED_VERSIONS, "infra/http_edge.py")
    make = getattr(web.AppRunner, "_make_server", None)
    if make is None or not inspect.iscoroutinefunction(make):
        problems.append("aiohttp's AppRunner._make_server is gone or no longer a coroutine")
    elif "_make_handler(" not in inspect.getsource(make) or "Server(" not in inspect.getsource(web.Application._make_handler):
        problems.append("aiohttp's AppRunner._make_server no longer builds the app's Server")
    if "RequestHandler(self" not in inspect.getsource(web_server.Server.__call__):
        problems.append("aiohttp's Server.__call__ no longer builds RequestHandler(self, ...)")
    got = tuple(inspect.signature(_aiohttp_handle_error).parameters)
    if got != ("self", "request", "status", "exc", "message"):
        problems.append(f"aiohttp's RequestHandler.handle_error takes {got}")
    for name, needle in (("_handle_request", "self.handle_error(request, 500, exc)"),
                         ("start", "self._make_error_handler(")):
        if needle not in inspect.getsource(getattr(web_protocol.RequestHandler, name)):
            problems.append(f"aiohttp's RequestHandler.{name} no longer calls {needle!r}")
    if "lingering_time = self._lingering_time" not in inspect.getsource(web_protocol.RequestHandler.start):
        problems.append("aiohttp's RequestHandler.start no longer reads its _lingering_time per request")
    if "self._manager.connection_made(self" not in inspect.getsource(web_protocol.RequestHandler.connection_made):
        problems.append("aiohttp's RequestHandler.connection_made no longer tells its manager")
    if "manager.request_handler" not in inspect.getsource(web_protocol.RequestHandler.__init__):
        problems.append("aiohttp's RequestHandler no longer reads its manager's request_handler")
    if not issubclass(HttpProcessingError, Exception):  # pragma: no cover
        problems.append("aiohttp's HttpProcessingError changed")
    return problems
