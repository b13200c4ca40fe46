"""The worker's HTTP server bounded as the collector's (issue 37): the shared edge of infra/http_edge.py.

Faust builds the worker's aiohttp server (``app.web``: an ``AppRunner`` it starts itself); before it starts, its
runner is replaced by the collector's :class:`infra.http_edge.GuardedAppRunner`, so the worker's API,
console and ``/metrics`` get the same bounds, each a setting (agents/settings.py) with a metric:

* a connection that sends nothing, or nothing after its last answer, is closed after
  ``--web-idle-timeout-seconds`` (aiohttp's keep-alive timer, from the connection's start too);
* a request whose header is incomplete ``--web-header-timeout-seconds`` after its first byte is answered 408
  ``header_timeout`` and closed (``ocms_http_connections_closed_total{reason="header_timeout"}``, a log line);
* at most ``--web-max-connections`` are open (lowered to fit the open-files limit): beyond it the connection
  idle the longest is closed (``evicted_idle``), or the new one is answered 503 ``too_many_connections``
  (``ocms_http_connections_refused_total``; one log line at most every 10 s while it lasts);
* a body nobody reads (the API takes none) is read and dropped for at most aiohttp's lingering time (10 s)
  after the answer, then the connection is closed.

``ocms_http_connections`` is the number open. With ``--tls-cert``/``--tls-key`` the server speaks HTTPS
(:func:`infra.http_edge.server_tls_context`, shared with the collector), and the other workers are
reached at https:// (:func:`peer_tls`); with ``--tls-client-ca`` every client must present a certificate
that authority signed, and the workers present theirs to each other.
"""

from __future__ import annotations

import logging

from infra.http_edge import (ConnectionGuard, ConnectionMetrics, ErrorAnswers, GuardedAppRunner,
                                   client_tls_context)


def guard_web_server(app, settings, registry, answers: ErrorAnswers) -> ConnectionGuard:
    """Bound the connections of ``app``'s Faust web server (before it starts); returns the guard."""
    metrics = ConnectionMetrics("ocms_http", "the worker", registry, "--web-max-connections")
    guard = ConnectionGuard(settings.web_max_connections, settings.web_header_timeout_seconds, metrics,
                            logging.getLogger("ocms.web.connections"), answers,
                            idle_timeout=settings.web_idle_timeout_seconds)
    metrics.connections.set_function(lambda: len(guard))
    web = app.web
    # Faust's driver starts web._runner (faust/web/drivers/aiohttp.py: start_server): the same AppRunner with
    # the guard's server, and aiohttp's keep-alive timer as the idle timeout.
    web._runner = GuardedAppRunner(web.web_app, guard=guard, answers=answers, access_log=None,
                                   keepalive_timeout=settings.web_idle_timeout_seconds)
    return guard


def peer_tls(settings):
    """The TLS context this worker forwards queries to the others with (None without TLS): they are verified
    against ``--tls-client-ca`` (else the system's authorities), and it presents its own certificate."""
    if not settings.tls_cert:
        return None
    return client_tls_context(settings.tls_client_ca, settings.tls_cert, settings.tls_key)
