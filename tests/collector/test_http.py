"""The collector's answers, one by one, against a real collector process and the embedded broker.

A 202 is checked in Kafka (the records read back from the topic); every refusal
names its reason; the privacy rules (no key, coarsened timestamps, no client
address in the access log) are checked on what actually left the collector.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import socket
import struct
import time

import numpy as np
import pytest

from cms_core import wire
from infra.broker import EmbeddedBroker

from tests.support.topics import consume
from tests.support.waiting import poll_until

from .harness import (
    WIRE, CollectorProcess, read_answer, records_of, reports, request, single_messages,
)

pytestmark = pytest.mark.integration  # a broker and collectors

TOPIC = "col-http"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        b.create_topics({TOPIC: 4, "col-limits": 2, "col-tokens": 2})
        yield b


@pytest.fixture(scope="module")
def collector(broker, registry_path, tmp_path_factory):
    with CollectorProcess(registry_path, broker.bootstrap_servers, TOPIC, tmp_path_factory.mktemp("collector"),
                          "--body-timeout-seconds", "1", "--max-upload-reports", "200", "--reject-delay-ms", "0") as c:
        yield c


def post(collector, body, path="/v1/reports", **kw):
    return request(collector.url + path, body, **kw)


def topic_records(broker, topic, version):
    """Every report record in the topic, with the Kafka record of its frame."""
    out = []
    for record in consume(broker.bootstrap_servers, topic):
        for raw in records_of(record.value, version):
            out.append((raw, record))
    return out


# ----------------------------------------------------------------------------------------- 202


def test_accepted_upload_is_in_kafka_keyless_with_a_coarsened_timestamp(broker, collector, dest):
    messages = single_messages(dest, 25, seed=1)
    before = time.time()
    status, doc, _ = post(collector, b"".join(messages))
    assert status == 202, doc
    assert doc == {"status": 202, "reason": "accepted", "accepted": 25, "metric": "dest", "version": 1}
    sent = [r for m in messages for r in records_of(m, dest)]
    found = topic_records(broker, TOPIC, dest)
    in_kafka = [raw for raw, _ in found]
    for raw in sent:
        assert raw in in_kafka
    for raw, record in found:
        if raw in sent:
            assert record.key is None, "frames are keyed by nobody, never by a device"
            assert record.timestamp % 60_000 == 0, "event time coarsened to the metric's 1-minute bucket"
            assert before - 60 <= record.timestamp / 1000 <= time.time()
            assert wire.peek_header(record.value)[1] == dest.fingerprint


def test_frame_upload_and_json_upload_are_accepted(broker, collector, dest):
    batch = reports(dest, 7, seed=2)
    status, doc, _ = post(collector, wire.encode_frame(dest.params, batch), path="/v1/metrics/dest/reports")
    assert status == 202 and doc["accepted"] == 7
    body = {"fingerprint": dest.fingerprint.hex(),
            "reports": [{"a0": str(int(batch.a0[i])), "a1": str(int(batch.a1[i])), "z": str(int(batch.z[i]))}
                        for i in range(3)]}
    status, doc, _ = post(collector, json.dumps(body).encode(), content_type="application/json")
    assert status == 202 and doc["accepted"] == 3, doc
    # the JSON form on the metric path may omit the fingerprint (one live version)
    body.pop("fingerprint")
    status, doc, _ = post(collector, json.dumps(body).encode(), path="/v1/metrics/dest/reports",
                          content_type="application/json")
    assert status == 202, doc
    in_kafka = {raw for raw, _ in topic_records(broker, TOPIC, dest)}
    assert set(records_of(wire.encode_frame(dest.params, batch), dest)) <= in_kafka


# ----------------------------------------------------------------------------------------- 400


def _header(kind=1, fingerprint=b"", count=1, magic=wire.MAGIC, version=1):
    return wire.HEADER.pack(magic, version, kind, fingerprint, count)


def malformed_cases(dest, reg):
    fp = dest.fingerprint
    good = single_messages(dest, 2, seed=3)
    retired = reg.metric("screen").version(1)
    screen = reg.metric("screen").version(2)
    order = dest.params.field.order
    return [
        (b"", "empty"),
        (b"OC\x01", "truncated"),
        (b"XX" + good[0][2:], "bad_magic"),
        (_header(version=2, fingerprint=fp) + good[0][16:], "bad_version"),
        (_header(kind=7, fingerprint=fp) + good[0][16:], "bad_kind"),
        (_header(fingerprint=b"\x01" * 8) + good[0][16:], "unknown_fingerprint"),
        (good[0][:-1], "truncated"),
        (good[0] + b"\x00", "oversized"),
        (_header(kind=1, fingerprint=fp, count=2) + good[0][16:] * 2, "count_mismatch"),
        (_header(kind=2, fingerprint=fp, count=0), "count_mismatch"),
        (_header(kind=2, fingerprint=fp, count=1) + good[0][16:] * 2, "count_mismatch"),
        (_header(fingerprint=fp) + struct.pack(">HHB", order, 1, 0), "coefficient_out_of_field"),
        (_header(fingerprint=fp) + struct.pack(">HHB", 1, 1, dest.params.hash_range), "z_out_of_range"),
        (good[0] + good[1][:-2], "truncated"),  # a valid message, then a truncated one: nothing accepted
        (good[0] + single_messages(screen, 1, seed=4)[0], "mixed_parameter_sets"),
        (single_messages(retired, 1, seed=5)[0], "retired_version"),
    ]


def test_malformed_uploads_get_400_with_the_dead_letter_reason(collector, dest, reg):
    for body, reason in malformed_cases(dest, reg):
        status, doc, _ = post(collector, body)
        assert (status, doc.get("reason")) == (400, reason), (body.hex(), doc)
        assert doc["detail"], "every refusal says what is wrong"


def test_foreign_reports_on_a_metric_path_are_400_and_unknown_metrics_404(collector, dest):
    message = single_messages(dest, 1, seed=6)[0]
    status, doc, _ = post(collector, message, path="/v1/metrics/screen/reports")
    assert (status, doc["reason"]) == (400, "foreign_metric")
    status, doc, _ = post(collector, message, path="/v1/metrics/no_such_metric/reports")
    assert (status, doc["reason"]) == (404, "unknown_metric")


def test_malformed_json_bodies_get_400(collector, dest):
    fp = dest.fingerprint.hex()
    order = dest.params.field.order
    cases = [
        (b"{not json", "malformed_json"),
        (b"[]", "malformed_json"),
        (json.dumps({"fingerprint": "zz", "reports": [{"a0": "1", "a1": "1", "z": "0"}]}), "malformed_json"),
        (json.dumps({"fingerprint": fp, "reports": []}), "empty"),
        (json.dumps({"fingerprint": fp, "reports": [{"a0": "1", "a1": "x", "z": "0"}]}), "malformed_json"),
        (json.dumps({"fingerprint": fp, "reports": [{"a0": "-1", "a1": "1", "z": "0"}]}), "malformed_json"),
        (json.dumps({"fingerprint": fp, "reports": [{"a0": str(order), "a1": "1", "z": "0"}]}), "coefficient_out_of_field"),
        (json.dumps({"fingerprint": fp, "reports": [{"a0": str(1 << 200), "a1": "1", "z": "0"}]}), "malformed_json"),
        (json.dumps({"fingerprint": fp, "reports": [{"a0": "1", "a1": "1", "z": "999"}]}), "z_out_of_range"),
        (json.dumps({"fingerprint": fp, "reports": [{"a0": "1", "a1": "1"}]}), "malformed_json"),
        (json.dumps({"fingerprint": fp, "extra": 1, "reports": []}), "malformed_json"),
        (json.dumps({"fingerprint": "01" * 8, "reports": [{"a0": "1", "a1": "1", "z": "0"}]}), "unknown_fingerprint"),
        # stricter than before, as documented: report numbers are strings; "version" agrees with the fingerprint
        (json.dumps({"fingerprint": fp, "reports": [{"a0": 1, "a1": "1", "z": "0"}]}), "malformed_json"),
        (json.dumps({"fingerprint": fp, "reports": [{"a0": "1", "a1": "1", "z": 0}]}), "malformed_json"),
        (json.dumps({"fingerprint": fp, "reports": [{"a0": 1.0, "a1": "1", "z": "0"}]}), "malformed_json"),
        (json.dumps({"fingerprint": fp, "version": 2, "reports": [{"a0": "1", "a1": "1", "z": "0"}]}), "version_mismatch"),
        (json.dumps({"fingerprint": fp, "version": "1", "reports": [{"a0": "1", "a1": "1", "z": "0"}]}), "malformed_json"),
        (json.dumps({"fingerprint": fp, "version": True, "reports": [{"a0": "1", "a1": "1", "z": "0"}]}), "malformed_json"),
        # integers json.loads refuses (over 4,300 digits), in a report and in "version": 400, not 500
        ('{"fingerprint": "%s", "reports": [{"a0": %s, "a1": "1", "z": "0"}]}' % (fp, "9" * 5000), "malformed_json"),
        ('{"fingerprint": "%s", "version": %s, "reports": [{"a0": "1", "a1": "1", "z": "0"}]}' % (fp, "1" * 4301),
         "malformed_json"),
    ]
    for body, reason in cases:
        body = body.encode() if isinstance(body, str) else body
        status, doc, _ = post(collector, body, content_type="application/json")
        assert (status, doc.get("reason")) == (400, reason), (body[:200], doc)
        assert "9999999999" not in doc["detail"] and len(doc["detail"]) < 400, "details stay short"
    # a "version" that agrees with the fingerprint is fine (on either path)
    agreeing = json.dumps({"fingerprint": fp, "version": 1, "reports": [{"a0": "1", "a1": "1", "z": "0"}]}).encode()
    for path in ("/v1/reports", "/v1/metrics/dest/reports"):
        status, doc, _ = post(collector, agreeing, path=path, content_type="application/json")
        assert status == 202, doc


# ------------------------------------------------------------------------------ 413, 415, 408


def test_size_limits_answer_413(collector, dest):
    status, doc, _ = post(collector, b"\x00" * (1_048_576 + 1))
    assert (status, doc["reason"]) == (413, "body_too_large")
    too_many = wire.encode_frame(dest.params, reports(dest, 201, seed=7))
    status, doc, _ = post(collector, too_many)
    assert (status, doc["reason"]) == (413, "too_many_reports")
    # a huge declared count in a short body is refused without allocating anything
    status, doc, _ = post(collector, _header(kind=2, fingerprint=dest.fingerprint, count=1 << 20) + b"\x00" * 5)
    assert (status, doc["reason"]) == (413, "too_many_reports")


def test_wrong_content_type_is_415(collector, dest):
    message = single_messages(dest, 1, seed=8)[0]
    for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
        status, doc, _ = post(collector, message, content_type=ctype)
        assert (status, doc["reason"]) == (415, "unsupported_content_type"), ctype
    # no Content-Type at all (urllib would add one): not taken as binary, as documented
    for path in ("/v1/reports", "/v1/metrics/dest/reports"):
        sock = socket.create_connection(("127.0.0.1", collector.port), timeout=10)
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(message)}\r\n\r\n".encode() + message)
        answer = read_answer(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 415"), answer[:200]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["reason"] == "unsupported_content_type"


def _raw_post(port: int, body_prefix: bytes, length: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: {WIRE}\r\n"
                 f"Content-Length: {length}\r\n\r\n".encode() + body_prefix)
    return sock


def test_slow_upload_is_408_and_aborted_uploads_do_not_hurt(collector, dest):
    message = single_messages(dest, 1, seed=9)[0]
    slow = _raw_post(collector.port, message[:5], len(message))  # the rest never comes
    answer = slow.recv(4096).decode(errors="replace")  # the 1 s body timeout answers
    slow.close()
    assert answer.startswith("HTTP/1.1 408"), answer
    assert '"body_timeout"' in answer
    for _ in range(20):  # aborted mid-body
        _raw_post(collector.port, message[:3], len(message)).close()
    status, doc, _ = post(collector, message)
    assert status == 202, doc
    assert collector.alive()


# ----------------------------------------------------------------------------- idempotency


def test_a_retried_upload_is_answered_once_and_produced_once(broker, collector, dest):
    messages = single_messages(dest, 4, seed=10)
    body = b"".join(messages)
    key = secrets.token_urlsafe(24)
    first = post(collector, body, headers={"Idempotency-Key": key})
    second = post(collector, body, headers={"Idempotency-Key": key})
    assert first[0] == second[0] == 202
    assert first[1] == second[1]
    assert second[2].get("Idempotent-Replayed") == "true" and "Idempotent-Replayed" not in first[2]
    in_kafka = [raw for raw, _ in topic_records(broker, TOPIC, dest)]
    for raw in (r for m in messages for r in records_of(m, dest)):
        assert in_kafka.count(raw) == 1, "the retry was produced again"
    status, doc, _ = post(collector, body + body, headers={"Idempotency-Key": key})
    assert (status, doc["reason"]) == (422, "idempotency_key_reused")
    status, doc, _ = post(collector, body, headers={"Idempotency-Key": "short"})
    assert (status, doc["reason"]) == (400, "bad_idempotency_key")


def test_concurrent_attempts_of_one_key_store_it_once_and_a_different_body_is_refused(broker, collector, dest):
    """With the shared log, attempts of one key that overlap in one process are answered by the log (the first's
    202, or 503 while it is in doubt), and a body other than the first's is refused while this process holds the
    first's digest: in flight and after (collector.app, _upload_shared)."""
    from concurrent.futures import ThreadPoolExecutor

    messages = single_messages(dest, 12, seed=11)
    same, key = b"".join(messages[:4]), secrets.token_urlsafe(24)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: post(collector, same, headers={"Idempotency-Key": key}), range(8)))
    assert all((s, d["reason"]) in ((202, "accepted"), (503, "idempotency_pending")) for s, d, _ in answers), answers
    assert sum("Idempotent-Replayed" not in h for s, _, h in answers if s == 202) == 1, "one attempt was stored"
    assert post(collector, same, headers={"Idempotency-Key": key})[2].get("Idempotent-Replayed") == "true"
    other = secrets.token_urlsafe(24)
    bodies = [b"".join(messages[4 + i:6 + i]) for i in range(8)]  # 8 different bodies under one key
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda b: post(collector, b, headers={"Idempotency-Key": other}), bodies))
    assert sorted(s for s, _, _ in answers) == [202] + [422] * 7, answers
    stored = bodies[[s for s, _, _ in answers].index(202)]
    status, _, headers = post(collector, stored, headers={"Idempotency-Key": other})
    assert status == 202 and headers.get("Idempotent-Replayed") == "true"
    in_kafka = [raw for raw, _ in topic_records(broker, TOPIC, dest)]
    for raw in (r for m in messages[:4] for r in records_of(m, dest)):
        assert in_kafka.count(raw) == 1, "an overlapping attempt was produced again"
    for i, message in enumerate(messages[4:], start=4):  # the refused bodies' reports are nowhere
        expected = int(message in messages[4 + bodies.index(stored):6 + bodies.index(stored)])
        assert all(in_kafka.count(raw) == expected for raw in records_of(message, dest)), i


# -------------------------------------------------------------------------- health, metrics


def test_healthz_and_prometheus_metrics(collector):
    status, doc, _ = request(collector.url + "/healthz", method="GET")
    assert status == 200 and doc["kafka"] == "available"
    assert doc["version"] == __import__("cms_core.version").version.__version__  # issue 39
    with __import__("urllib.request").request.urlopen(collector.url + "/metrics") as response:
        text = response.read().decode()
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {(s.labels["status"], s.labels["reason"]): s.value for s in families["ocms_collector_requests"].samples
                if s.name.endswith("_total")}
    assert requests[("202", "accepted")] >= 1
    assert requests[("400", "truncated")] >= 1
    assert requests[("413", "too_many_reports")] >= 1
    for name in ("ocms_collector_request_seconds", "ocms_collector_frames_produced", "ocms_collector_reports_produced",
                 "ocms_collector_queue_reports", "ocms_collector_kafka_available", "ocms_build_info"):
        assert name in families, name


def _access_lines(collector, dest) -> list[str]:
    post(collector, single_messages(dest, 1, seed=11)[0], headers={"User-Agent": "device-model-XYZ/1.0"})
    poll_until(lambda: "POST /v1/reports" in collector.log_path.read_text(), 30, "the upload's access-log line")
    return [line for line in collector.log_path.read_text().splitlines() if "ocms.collector.access" in line]


def test_access_log_holds_no_client_address_or_user_agent(broker, registry_path, collector, dest, tmp_path):
    lines = _access_lines(collector, dest)
    assert any("POST /v1/reports" in line for line in lines)
    assert not any("127.0.0.1" in line or "device-model-XYZ" in line for line in lines), lines
    # control: an operator can turn client addresses on, and then they are there
    with CollectorProcess(registry_path, broker.bootstrap_servers, "col-limits", tmp_path, "--access-log-client-addresses") as c:
        lines = [line for line in _access_lines(c, dest) if "POST" in line]
        assert lines and all("127.0.0.1" in line and "device-model-XYZ" in line for line in lines), lines


# ---------------------------------------------------------------------- tokens and rate limits


def test_tokens_and_rate_limits(broker, registry_path, dest, reg, tmp_path):
    tokens = {"fast": secrets.token_urlsafe(32), "slow": secrets.token_urlsafe(32), "screens": secrets.token_urlsafe(32)}
    doc = {"applications": [
        {"name": "fast", "token_sha256": hashlib.sha256(tokens["fast"].encode()).hexdigest()},
        {"name": "slow", "token_sha256": hashlib.sha256(tokens["slow"].encode()).hexdigest(),
         "rate_limit": 0.5, "rate_burst": 3},
        {"name": "screens", "token_sha256": hashlib.sha256(tokens["screens"].encode()).hexdigest(), "metrics": ["screen"]},
    ]}
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(doc))
    with CollectorProcess(registry_path, broker.bootstrap_servers, "col-tokens", tmp_path, "--tokens-file", str(path)) as c:
        message = single_messages(dest, 1, seed=12)[0]

        def auth(name):
            return {"Authorization": f"Bearer {tokens[name]}"}

        status, doc, headers = post(c, message)
        assert (status, doc["reason"]) == (401, "missing_token") and "Bearer" in headers["WWW-Authenticate"]
        status, doc, _ = post(c, message, headers={"Authorization": "Bearer not-a-token"})
        assert (status, doc["reason"]) == (401, "unknown_token")
        status, doc, _ = post(c, message, headers=auth("screens"))
        assert (status, doc["reason"]) == (403, "metric_not_allowed")
        status, doc, _ = post(c, message, path="/v1/metrics/dest/reports", headers=auth("screens"))
        assert (status, doc["reason"]) == (403, "metric_not_allowed")
        answers = [post(c, message, headers=auth("slow")) for _ in range(5)]
        assert [a[0] for a in answers[:3]] == [202, 202, 202]
        assert [a[0] for a in answers[3:]] == [429, 429]
        assert answers[3][1]["reason"] == "rate_limited_application"
        assert 1 <= int(answers[3][2]["Retry-After"]) <= 2
        # another application is not affected by the slow one's limit
        assert all(post(c, message, headers=auth("fast"))[0] == 202 for _ in range(10))


def test_global_rate_limit(broker, registry_path, dest, tmp_path):
    with CollectorProcess(registry_path, broker.bootstrap_servers, "col-limits", tmp_path,
                          "--rate-limit", "1", "--rate-burst", "4") as c:
        message = single_messages(dest, 1, seed=13)[0]
        statuses = [post(c, message)[0] for _ in range(6)]
        assert statuses[:4] == [202] * 4 and statuses[4:] == [429, 429]


def test_bad_settings_exit_2_naming_the_variable(registry_path, tmp_path):
    import subprocess
    import sys

    from .harness import ROOT

    cases = [
        (["--registry", str(registry_path), "--bootstrap-servers", "x:1", "--port", "eighty"], "--port eighty:"),
        (["--registry", str(tmp_path / "missing.yaml"), "--bootstrap-servers", "x:1"], "--registry "),
        (["--registry", str(registry_path)], "--bootstrap-servers (or OCMS_BOOTSTRAP_SERVERS)"),
        (["--registry", str(registry_path), "--bootstrap-servers", "x:1", "--max-upload-reports", "20000"],
         "--max-upload-reports 20000:"),
        (["--registry", str(registry_path), "--bootstrap-servers", "x:1", "--event-loop", "trio"], "--event-loop trio:"),
        (["--registry", str(registry_path), "--bootstrap-servers", "x:1", "--tls-cert", str(registry_path)],
         "OCMS_COLLECTOR_TLS_KEY"),
    ]
    bad_registry = tmp_path / "bad.yaml"
    bad_registry.write_text("metrics:\n  - name: x\n")
    bad_tokens = tmp_path / "tokens.json"
    bad_tokens.write_text('{"applications": [{"name": "a"}]}')
    cases += [
        (["--registry", str(bad_registry), "--bootstrap-servers", "x:1"], "metric 'x': field 'description'"),
        (["--registry", str(registry_path), "--bootstrap-servers", "x:1", "--tokens-file", str(bad_tokens)],
         "applications[0].token_sha256"),
    ]
    for args, name in cases:
        done = subprocess.run([sys.executable, "-m", "ocms", "collector", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert name in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_tls_with_cert_and_key(broker, registry_path, dest, tmp_path):
    import shutil
    import ssl
    import subprocess
    import urllib.request

    if shutil.which("openssl") is None:
        pytest.fail("openssl (Debian package openssl) is needed to make the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    c = CollectorProcess(registry_path, broker.bootstrap_servers, "col-limits", tmp_path,
                         "--tls-cert", str(cert), "--tls-key", str(key))
    c.start()
    try:
        context = ssl.create_default_context(cafile=str(cert))
        url = f"https://127.0.0.1:{c.port}"

        def healthy() -> bool:
            assert c.alive(), c.log_path.read_text()[-2000:]
            with urllib.request.urlopen(url + "/healthz", context=context, timeout=5) as response:
                return response.status == 200

        poll_until(healthy, 30, "the TLS collector to answer /healthz with 200")
        req = urllib.request.Request(url + "/v1/reports", data=single_messages(dest, 1, seed=14)[0], method="POST",
                                     headers={"Content-Type": WIRE})
        with urllib.request.urlopen(req, context=context, timeout=10) as response:
            assert response.status == 202
        with pytest.raises(OSError):  # plain HTTP on the TLS port gets no HTTP answer
            request(f"http://127.0.0.1:{c.port}/healthz", method="GET", timeout=5)
    finally:
        c.stop()


def test_bad_uploads_validated_in_one_batch_with_good_ones_fail_alone(broker, collector, dest):
    import asyncio

    import aiohttp

    good = single_messages(dest, 40, seed=15)
    order = dest.params.field.order
    bad = [_header(fingerprint=dest.fingerprint) + struct.pack(">HHB", order + i, 1, 0) for i in range(8)]
    bodies = [(g, 202) for g in good] + [(b, 400) for b in bad]
    random_order = np.random.default_rng(4).permutation(len(bodies))

    async def go():
        async with aiohttp.ClientSession() as session:
            async def one(body):
                async with session.post(collector.url + "/v1/reports", data=body,
                                        headers={"Content-Type": WIRE}) as response:
                    return response.status, (await response.json())["reason"]

            return await asyncio.gather(*(one(bodies[i][0]) for i in random_order))

    answers = asyncio.run(go())
    for i, (status, reason) in zip(random_order, answers):
        expected = bodies[i][1]
        assert status == expected, (i, status, reason)
        if expected == 400:
            assert reason == "coefficient_out_of_field"
    in_kafka = [raw for raw, _ in topic_records(broker, TOPIC, dest)]
    for message in good:
        assert records_of(message, dest)[0] in in_kafka


def test_client_faults_are_answered_after_a_growing_reject_delay(broker, registry_path, dest, tmp_path):
    import http.client

    with CollectorProcess(registry_path, broker.bootstrap_servers, "col-limits", tmp_path, "--reject-delay-ms", "50") as c:
        connection = http.client.HTTPConnection("127.0.0.1", c.port, timeout=30)  # one keep-alive connection

        def timed_post(body):
            started = time.monotonic()
            connection.request("POST", "/v1/reports", body=body, headers={"Content-Type": WIRE})
            response = connection.getresponse()
            response.read()
            return response.status, time.monotonic() - started

        answers = [timed_post(b"garbage") for _ in range(5)]
        assert [status for status, _ in answers] == [400] * 5
        assert answers[0][1] >= 0.05
        assert answers[4][1] >= 0.05 * 2 ** 4, "the fifth fault in a row waits 16 times the delay"
        assert timed_post(single_messages(dest, 1, seed=16)[0])[0] == 202  # and resets the count
        connection.close()


def test_clients_can_read_the_live_metric_versions(collector, reg):
    status, doc, _ = request(collector.url + "/v1/metrics", method="GET")
    assert status == 200
    by_name = {m["name"]: m for m in doc["metrics"]}
    assert set(by_name) == {"dest", "screen"}
    assert [v["version"] for v in by_name["screen"]["versions"]] == [2], "retired versions are not offered"
    status, dest_doc, _ = request(collector.url + "/v1/metrics/dest", method="GET")
    assert status == 200 and dest_doc["versions"][0]["fingerprint"] == reg.metric("dest").version(1).fingerprint.hex()
    assert dest_doc["upload"] == "/v1/metrics/dest/reports"
    status, doc, _ = request(collector.url + "/v1/metrics/nope", method="GET")
    assert (status, doc["reason"]) == (404, "unknown_metric")


def test_uploads_taken_before_the_router_answer_as_through_it(collector, dest):
    """POST /v1/reports and /v1/metrics/{name}/reports skip the app's router (collector.app.fast_uploads);
    a percent-encoded path or Expect: 100-continue takes the router's path: the same answers either way."""
    messages = single_messages(dest, 4, seed=21)
    fast = post(collector, messages[0], path="/v1/metrics/dest/reports")
    routed = post(collector, messages[1], path="/v1/metrics/%64est/reports")  # %64 = "d": the router decodes it
    expect = post(collector, messages[2], path="/v1/metrics/dest/reports", headers={"Expect": "100-continue"})
    for status, doc, headers in (fast, routed, expect):
        assert (status, doc) == (202, fast[1])
        assert headers["Content-Type"] == "application/json; charset=utf-8"
    for path in ("/v1/metrics/screen/reports", "/v1/metrics/scr%65en/reports"):
        status, doc, _ = post(collector, messages[3], path=path)
        assert (status, doc["reason"]) == (400, "foreign_metric")
    for path in ("/v1/metrics/nope/reports", "/v1/metrics/n%6Fpe/reports"):
        status, doc, _ = post(collector, messages[3], path=path)
        assert (status, doc["reason"]) == (404, "unknown_metric")
    assert post(collector, messages[3], path="/v1/metrics/dest/x/reports")[0] == 404  # no such route
    assert post(collector, messages[3], path="/v1/reports/")[0] == 404
    assert request(collector.url + "/v1/reports", method="GET")[0] == 405
