"""CORS (--cors-origins) for browser uploads, and GET /v1/device-config, against real collector processes."""

from __future__ import annotations

import json

import pytest

from cms_core.errors import InvalidParameterError
from collector.settings import CollectorSettings
from infra.broker import EmbeddedBroker
from registry.device import device_config

from .harness import CollectorProcess, request, single_messages

TOPIC = "col-cors"
PAGE = "https://app.example.com"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        b.create_topics({TOPIC: 2})
        yield b


@pytest.fixture(scope="module")
def collector(broker, registry_path, tmp_path_factory):
    with CollectorProcess(registry_path, broker.bootstrap_servers, TOPIC, tmp_path_factory.mktemp("cors"),
                          "--cors-origins", f"{PAGE},http://127.0.0.1:8000", "--reject-delay-ms", "0") as c:
        yield c


def preflight(url: str, origin: str, method: str = "POST"):
    return request(url, method="OPTIONS", content_type=None, headers={
        "Origin": origin, "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "content-type,idempotency-key,authorization"})


@pytest.mark.integration
@pytest.mark.parametrize("path", ["/v1/reports", "/v1/metrics/dest/reports", "/v1/device-config"])
def test_preflight_of_an_allowed_origin_allows_the_client_headers(collector, path):
    status, _, headers = preflight(collector.url + path, PAGE)
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == PAGE
    allowed = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {"content-type", "idempotency-key", "authorization"} <= allowed
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert "Access-Control-Allow-Credentials" not in headers


@pytest.mark.integration
def test_preflight_of_another_origin_is_refused(collector):
    status, doc, headers = preflight(collector.url + "/v1/reports", "https://evil.example.net")
    assert status == 403 and doc["reason"] == "origin_not_allowed"
    assert "Access-Control-Allow-Origin" not in headers


@pytest.mark.integration
def test_uploads_and_refusals_carry_the_cors_headers_for_an_allowed_origin(collector, dest):
    body = b"".join(single_messages(dest, 3, seed=4))
    status, doc, headers = request(collector.url + "/v1/reports", body,
                                   headers={"Origin": PAGE, "Idempotency-Key": "k" * 24})
    assert status == 202, doc
    assert headers["Access-Control-Allow-Origin"] == PAGE
    assert set(headers["Access-Control-Expose-Headers"].replace(" ", "").split(",")) == {"Retry-After", "Idempotent-Replayed"}
    status, doc, headers = request(collector.url + "/v1/reports", b"XX", headers={"Origin": PAGE})
    assert status == 400 and headers["Access-Control-Allow-Origin"] == PAGE, "the page may read why it was refused"
    status, _, headers = request(collector.url + "/v1/reports", body, headers={"Origin": "https://evil.example.net"})
    assert "Access-Control-Allow-Origin" not in headers


@pytest.mark.integration
def test_device_config_is_the_registrys(collector, reg):
    status, doc, headers = request(collector.url + "/v1/device-config", method="GET", content_type=None,
                                   headers={"Origin": PAGE})
    assert status == 200
    assert doc == json.loads(json.dumps(device_config(reg)))
    assert headers["Access-Control-Allow-Origin"] == PAGE


@pytest.mark.integration
def test_without_the_setting_there_is_no_cors(broker, registry_path, tmp_path, dest):
    with CollectorProcess(registry_path, broker.bootstrap_servers, TOPIC, tmp_path) as plain:
        status, _, headers = preflight(plain.url + "/v1/reports", PAGE)
        assert status == 405 and "Access-Control-Allow-Origin" not in headers
        status, _, headers = request(plain.url + "/v1/reports", single_messages(dest, 1, seed=5)[0], headers={"Origin": PAGE})
        assert status == 202 and "Access-Control-Allow-Origin" not in headers


@pytest.mark.parametrize("raw, problem", [
    ("https://app.example.com/path", "is not an origin"),
    ("app.example.com", "is not an origin"),
    ("*,https://a.example.com", "give it alone"),
])
def test_bad_cors_origins_name_the_flag(registry_path, raw, problem):
    with pytest.raises(InvalidParameterError) as info:
        CollectorSettings.build({}, registry=str(registry_path), bootstrap_servers="x:1", cors_origins=raw)
    assert "--cors-origins" in str(info.value) and problem in str(info.value)
    env = CollectorSettings.build({"OCMS_COLLECTOR_CORS_ORIGINS": "*"}, registry=str(registry_path), bootstrap_servers="x:1")
    assert env.cors_origins == ("*",)
