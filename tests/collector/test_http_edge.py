"""The HTTP edge of the collector and the worker (infra/http_edge.py): every error answer is
JSON with a reason, counted by reason and logged in one line (no header bytes, no client address
unless asked); connections that never finish are closed; a connection cap keeps idle connections
from starving valid uploads and /healthz, also at a low open-files limit."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import resource
import socket
import time

import pytest

from collector.settings import CollectorSettings
from infra.broker import EmbeddedBroker
from infra.http_edge import ErrorAnswers, drift, json_errors

from tests.support.waiting import poll_until

from .harness import (WIRE, CollectorProcess, parse_answer, raw_exchange, read_answer, request, serving_worker,
                      single_messages, trickle)

TOPIC = "edge-http"


def metric_value(url: str, name: str, labels: str = "") -> float:
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith(name + (("{" + labels + "}") if labels else "")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_http_server_internals_match_the_installed_aiohttp():
    assert drift() == []


def test_connection_settings_default_to_closing_idle_connections_within_a_minute(registry_path):
    s = CollectorSettings.build({}, registry=str(registry_path), bootstrap_servers="k:9092")
    assert s.idle_timeout_seconds <= 60 and s.header_timeout_seconds <= 60 and s.max_connections >= 1000
    env = {"OCMS_REGISTRY": str(registry_path), "OCMS_BOOTSTRAP_SERVERS": "k:9092",
           "OCMS_COLLECTOR_IDLE_TIMEOUT_SECONDS": "5", "OCMS_COLLECTOR_HEADER_TIMEOUT_SECONDS": "2",
           "OCMS_COLLECTOR_MAX_CONNECTIONS": "100"}
    s = CollectorSettings.build(env, max_connections="50")
    assert (s.idle_timeout_seconds, s.header_timeout_seconds, s.max_connections) == (5.0, 2.0, 50)
    for name, bad in (("idle_timeout_seconds", "0"), ("header_timeout_seconds", "inf"), ("max_connections", "0")):
        with pytest.raises(Exception) as info:
            CollectorSettings.build({}, registry=str(registry_path), bootstrap_servers="k:9092", **{name: bad})
        assert "--" + name.replace("_", "-") in str(info.value)


# ----------------------------------------------------------------------------- in process
def test_a_handler_failure_is_a_json_500_logged_in_one_line_without_its_message(caplog):
    """A bug in a handler (here a ValueError carrying request bytes) answers JSON 500 internal_error,
    counted, logged in one line that names the exception and its code line, not its message."""
    from aiohttp import web

    counted = []
    answers = ErrorAnswers(lambda status, reason: counted.append((status, reason)), logging.getLogger("edge.test"))

    async def failing(request):
        raise ValueError("Bearer secret-token-bytes")

    async def run() -> list:
        app = web.Application(middlewares=[json_errors(answers)])
        app.router.add_get("/fail", failing)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        try:
            return [await loop.run_in_executor(None, raw_exchange, port, b"GET /fail HTTP/1.1\r\nHost: x\r\n\r\n"),
                    await loop.run_in_executor(None, raw_exchange, port, b"GET /none HTTP/1.1\r\nHost: x\r\n\r\n")]
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.INFO, logger="edge.test"):
        (status, doc, _), (status404, doc404, _) = asyncio.run(run())
    assert (status, doc["reason"]) == (500, "internal_error") and "secret" not in json.dumps(doc)
    assert (status404, doc404["reason"]) == (404, "no_such_route")
    assert counted == [(500, "internal_error"), (404, "no_such_route")]
    lines = [r for r in caplog.records if r.name == "edge.test"]
    assert len(lines) == 2 and all(r.exc_info is None and "\n" not in r.getMessage() for r in lines)
    assert "ValueError at test_http_edge.py:" in lines[0].getMessage() and "in failing" in lines[0].getMessage()
    assert "secret" not in lines[0].getMessage()


# ------------------------------------------------------------------------------ collector
@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        b.create_topics({TOPIC: 2, "edge-cap": 2, "edge-worker": 4})
        yield b


def tokens_file(directory, *tokens: bytes):
    path = directory / "tokens.json"
    path.write_text(json.dumps({"applications": [
        {"name": f"app{i}", "token_sha256": hashlib.sha256(t).hexdigest()} for i, t in enumerate(tokens)]}))
    return path


@pytest.fixture(scope="module")
def edge_collector(broker, registry_path, tmp_path_factory):
    directory = tmp_path_factory.mktemp("edge")
    tokens = tokens_file(directory, b"plain-token-123", b"\xff\xfe-raw-bytes-token")
    with CollectorProcess(registry_path, broker.bootstrap_servers, TOPIC, directory, "--reject-delay-ms", "0",
                          "--tokens-file", str(tokens), "--header-timeout-seconds", "1", "--idle-timeout-seconds",
                          "2", "--body-timeout-seconds", "2") as c:
        yield c


def upload_request(dest, path=b"/v1/reports", token=b"plain-token-123", seed=1) -> bytes:
    body = single_messages(dest, 1, seed=seed)[0]
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: " + WIRE.encode() + b"\r\nAuthorization: Bearer "
            + token + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


@pytest.mark.integration
def test_every_collector_error_is_json_with_a_reason_counted_and_logged_in_one_line(edge_collector, dest):
    port = edge_collector.port
    cases = [
        (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, "no_such_route"),
        (b"DELETE /v1/reports HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method_not_allowed"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "malformed_request"),  # TLS to an HTTP port
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\x01: y\r\n\r\n", 400, "malformed_request"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 9000 + b"\r\n\r\n", 400, "headers_too_large"),
        (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "malformed_request"),
        (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400,
         "malformed_request"),
        # non-UTF-8 bytes in Authorization: hashed as sent (was a 500 with a traceback)
        (upload_request(dest, token=b"\x80\x81 not-utf8 \xc3\x28"), 401, "unknown_token"),
    ]
    for data, status, reason in cases:
        got, doc, raw = raw_exchange(port, data)
        assert (got, doc.get("reason")) == (status, reason), (data[:60], raw[:300])
        assert doc.get("status") == status and doc.get("detail"), doc
        assert b"text/plain" not in raw.split(b"\r\n\r\n")[0]
    # a token of non-UTF-8 bytes in the tokens file is the same bytes on the wire: accepted
    got, doc, _ = raw_exchange(port, upload_request(dest, token=b"\xff\xfe-raw-bytes-token"))
    assert got == 202, doc
    assert metric_value(edge_collector.url, "ocms_collector_http_errors_total", 'reason="malformed_request"') >= 4
    assert metric_value(edge_collector.url, "ocms_collector_http_errors_total", 'reason="no_such_route"') >= 1
    assert metric_value(edge_collector.url, "ocms_collector_requests_total", 'reason="unknown_token",status="401"') >= 1
    log = edge_collector.log_path.read_text(errors="replace")
    errors = [line for line in log.splitlines() if "ocms.collector.errors" in line]
    assert any("answered 400 malformed_request: BadHttpMethod" in line for line in errors), errors[-10:]
    assert "Traceback" not in log and "Error handling request" not in log
    assert not any("127.0.0.1" in line or "not-utf8" in line for line in errors), "no address, no header bytes"


@pytest.mark.integration
def test_error_log_lines_name_the_client_only_when_asked(broker, registry_path, tmp_path):
    with CollectorProcess(registry_path, broker.bootstrap_servers, TOPIC, tmp_path,
                          "--access-log-client-addresses") as c:
        assert raw_exchange(c.port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 404
        assert raw_exchange(c.port, b"BAD\x00 / HTTP/1.1\r\n\r\n")[0] == 400
        log = poll_until(lambda: (text := c.log_path.read_text()).count("answered 4") >= 2 and text, 10, "error lines")
    errors = [line for line in log.splitlines() if "ocms.collector.errors" in line]
    assert len(errors) == 2 and all(line.endswith("from 127.0.0.1") for line in errors), errors


# ---------------------------------------------------------------------------- timeouts
@pytest.mark.integration
def test_a_trickled_header_is_cut_and_idle_connections_are_closed(edge_collector, dest):
    port = edge_collector.port
    before = metric_value(edge_collector.url, "ocms_collector_connections_closed_total", 'reason="header_timeout"')
    # a header trickled a byte every 0.3 s: cut after --header-timeout-seconds 1 with a JSON 408
    cut_after, answer = trickle(port, b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"s" * 200, 0.3, limit=20)
    status, doc, _ = parse_answer(answer)
    assert (status, doc.get("reason")) == (408, "header_timeout"), answer[:300]
    assert cut_after < 6, f"cut after {cut_after:.1f} s"
    assert metric_value(edge_collector.url, "ocms_collector_connections_closed_total",
                        'reason="header_timeout"') >= before + 1
    # a connection that sends nothing, and one idle after its answer: closed after --idle-timeout-seconds 2
    idle_before = metric_value(edge_collector.url, "ocms_collector_connections_closed_total", 'reason="idle_timeout"')
    for first in (b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"):
        sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        started = time.monotonic()
        if first:
            sock.sendall(first)
            assert read_answer(sock).startswith(b"HTTP/1.1 200")
            started = time.monotonic()
        assert sock.recv(100) == b"", "closed by the server"
        assert time.monotonic() - started < 8
        sock.close()
    poll_until(lambda: metric_value(edge_collector.url, "ocms_collector_connections_closed_total",
                                    'reason="idle_timeout"'), 10, "both closed at the idle timeout, counted",
               until=lambda closed: closed >= idle_before + 2)


# --------------------------------------------------------------------------- connection cap
def raise_own_open_files(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard) if hard != resource.RLIM_INFINITY else needed,
                                                    hard))


@pytest.mark.integration
def test_idle_connections_at_a_low_open_files_limit_leave_room_for_uploads_and_healthz(broker, registry_path, dest,
                                                                                         tmp_path):
    """At an open-files limit of 256, 300 idle connections used to take every descriptor: valid uploads
    and /healthz failed with nothing logged. Now the cap (256 less a reserve) closes the longest-idle
    connection for each new one, counts it and says so in the log."""
    raise_own_open_files(1024)
    with CollectorProcess(registry_path, broker.bootstrap_servers, "edge-cap", tmp_path, open_files=256) as c:
        idle = []
        try:
            for _ in range(300):
                idle.append(socket.create_connection(("127.0.0.1", c.port), timeout=10))
            for i in range(10):
                status, doc, _ = request(c.url + "/v1/reports", single_messages(dest, 1, seed=100 + i)[0], timeout=15)
                assert status == 202, doc
                status, doc, _ = request(c.url + "/healthz", method="GET", timeout=15)
                assert status == 200, doc
            assert metric_value(c.url, "ocms_collector_connections") <= 192
            assert metric_value(c.url, "ocms_collector_connections_closed_total", 'reason="evicted_idle"') >= 100
        finally:
            for sock in idle:
                sock.close()
        log = c.log_path.read_text()
    assert "connection cap 192 reached (the open-files limit 256 less 64)" in log


@pytest.mark.integration
def test_at_the_cap_with_every_connection_busy_a_new_one_is_answered_503(broker, registry_path, dest, tmp_path):
    """--max-connections 4, four uploads whose body never completes (busy, not idle): a fifth connection
    is answered 503 too_many_connections before its request is read. (A partial upload the server had
    not read yet when the fifth came is idle and closed for it instead: it is replaced and tried again.)"""
    def partial_upload() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", c.port), timeout=10)
        sock.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: " + WIRE.encode()
                     + b"\r\nContent-Length: 100\r\n\r\nOC")
        return sock

    def closed_by_server(sock: socket.socket) -> bool:
        sock.setblocking(False)
        try:
            return sock.recv(1) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            sock.setblocking(True)

    with CollectorProcess(registry_path, broker.bootstrap_servers, "edge-cap", tmp_path, "--max-connections", "4",
                          "--body-timeout-seconds", "60") as c:
        busy = [partial_upload() for _ in range(4)]
        try:
            answers = []

            def fifth_connection() -> tuple[int, str | None]:
                status, doc, _ = raw_exchange(c.port, upload_request(dest, token=b""))
                answers.append((status, doc.get("reason")))
                for i, sock in enumerate(busy):  # the fifth took the place of one not yet busy
                    if closed_by_server(sock):
                        sock.close()
                        busy[i] = partial_upload()
                return answers[-1]

            # On a loaded machine the server may not have read a fresh partial upload before the next
            # fifth comes (it is idle then, and closed for it): try again, giving it time, until refused.
            poll_until(fifth_connection, 60, "a fifth connection refused while four uploads are busy",
                       until=lambda answer: answer[0] == 503, interval=0.25)
            assert answers[-1] == (503, "too_many_connections"), answers
            busy.pop().close()  # room for a scrape
            assert poll_until(lambda: metric_value(c.url, "ocms_collector_connections_refused_total"), 10,
                              "the refusal counted") >= 1
        finally:
            for sock in busy:
                sock.close()
        # room again: a valid upload goes through
        poll_until(lambda: request(c.url + "/v1/reports", single_messages(dest, 1, seed=7)[0])[0] == 202, 20,
                   "an upload after the busy connections closed")
        assert "refused (503)" in c.log_path.read_text()


# ---------------------------------------------------------------------------------- fuzz
def hostile_requests(n: int, seed: int, paths: list[bytes]) -> list[bytes]:
    rng = random.Random(seed)
    methods = [b"GET", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS", b"HEAD", b"get", b"G\x00T", b"\xff\xfe",
               b"CONNECT", b"TRACE", b"X" * 300]
    headers_pool = [b"Content-Type: application/json", b"Content-Type: application/vnd.ocms.wire-v1",
                    b"Content-Type: \xff\xfe", b"Authorization: Bearer \x80\x81\x82", b"Authorization: \xff",
                    b"Idempotency-Key: \xf0\x9f\x98\x80" * 5, b"Idempotency-Key: " + b"k" * 200,
                    b"Content-Length: -1", b"Content-Length: 99999999999999999999", b"Content-Length: abc",
                    b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip, chunked", b"Expect: 100-continue",
                    b"Accept: application/json", b"Host: \x00", b"X-Long: " + b"x" * 20000, b": empty-name",
                    b"Bad\x7fName: v", b"Connection: close", b"Content-Encoding: gzip"]
    bodies = [b"", b"{", b'{"fingerprint": "' + b"9" * 16 + b'", "reports": [{"a0": ' + b"9" * 5000 + b"}]}",
              b'{"version": ' + b"1" * 4400 + b"}", b"[" * 20000, b"\x00" * 100, bytes(rng.randrange(256) for _ in range(300)),
              b"OC\x01\x01" + b"\xff" * 40, b"0\r\n\r\n", b"zz\r\nxx\r\n"]
    out = []
    for _ in range(n):
        method = rng.choice(methods)
        path = rng.choice(paths) + rng.choice([b"", b"?x=%ff", b"?q=" + b"\xe2\x82" * 3, b"/../x", b"%00", b"?" + b"a" * 9000])
        version = rng.choice([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/9", b""])
        headers = [b"Host: x"] + rng.sample(headers_pool, rng.randrange(0, 5))
        body = rng.choice(bodies)
        if rng.random() < 0.7 and not any(h.lower().startswith(b"content-length") for h in headers):
            headers.append(b"Content-Length: %d" % len(body))
        line_end = rng.choice([b"\r\n"] * 12 + [b"\n", b"\r"])
        out.append(method + b" " + path + b" " + version + line_end + line_end.join(headers) + line_end + line_end + body)
    return out


def fuzz(port: int, requests_: list[bytes]) -> list:
    """Every answer that is not JSON with a reason, or is a 500 (16 requests at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(data: bytes):
        status, doc, raw = raw_exchange(port, data, timeout=10)
        if status is None:
            return None  # no answer: the server closed the connection (e.g. a half-sent body on a closed socket)
        if (status >= 500 and status != 503) or (status >= 400 and (not doc.get("reason") or "not json" in doc)):
            return data[:80], raw[:200]
        return None

    with ThreadPoolExecutor(16) as pool:
        return [bad for bad in pool.map(one, requests_) if bad is not None]


@pytest.mark.integration
def test_a_fuzz_of_hostile_requests_gets_json_answers_and_never_a_500(edge_collector, dest):
    paths = [b"/v1/reports", b"/v1/metrics/dest/reports", b"/v1/metrics/%ff/reports", b"/v1/metrics", b"/healthz",
             b"/metrics", b"/", b"/v1/metrics/\xc3\x28/reports", b"*", b"http://x/v1/reports"]
    bad = fuzz(edge_collector.port, hostile_requests(400, seed=24, paths=paths))
    assert not bad, bad[:5]
    assert edge_collector.alive()
    status, doc, _ = raw_exchange(edge_collector.port, upload_request(dest, seed=99))
    assert status == 202, doc


@pytest.fixture(scope="module")
def edge_worker(broker, registry_path, tmp_path_factory):
    with serving_worker(registry_path, broker.bootstrap_servers, "edge-worker",
                        tmp_path_factory.mktemp("w")) as w:
        yield w


@pytest.mark.integration
def test_every_worker_error_is_json_with_a_reason_counted_and_never_a_500(edge_worker):
    port = edge_worker.web_port
    cases = [
        (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, "no_such_route"),
        (b"POST /estimates HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405, "method_not_allowed"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "malformed_request"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\x01: y\r\n\r\n", 400, "malformed_request"),
        (b"GET /estimates?bogus=1 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_parameter"),
        (b"GET /estimates/100000 HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not_found"),
        (b"GET /console/nope.js HTTP/1.1\r\nHost: x\r\n\r\n", 404, "no_such_route"),
    ]
    for data, status, reason in cases:
        got, doc, raw = raw_exchange(port, data)
        assert (got, doc.get("reason")) == (status, reason), (data[:60], raw[:300])
        assert doc.get("error"), doc
    paths = [b"/estimates", b"/estimates/3", b"/topk", b"/trend", b"/params", b"/healthz", b"/metrics",
             b"/metrics/dest", b"/metrics/dest/estimates", b"/", b"/console/app.js", b"/discovered"]
    bad = fuzz(port, hostile_requests(300, seed=25, paths=paths))
    assert not bad, bad[:5]
    assert edge_worker.get("/estimates")[0] == 200
    assert metric_value(edge_worker.base_url, "ocms_http_errors_total", 'reason="malformed_request"') >= 2
    assert metric_value(edge_worker.base_url, "ocms_http_errors_total", 'reason="bad_parameter"') >= 1
    log = edge_worker.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "Error handling request" not in log
