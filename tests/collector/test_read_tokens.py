"""Reads need a token where the operator asks for it (issue 37), driven from outside: a worker with
--api-tokens-file answers nothing that holds counts without a valid bearer token, a token for another
metric reads only its own, the Prometheus scrape needs a token for every metric; /healthz stays open."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request

import pytest

from .harness import serving_worker

TOPIC = "read-tokens"
TOKENS = {"ops": ("ops-token-0123456789", None), "dest-team": ("dest-token-0123456789", ["dest"]),
          "screen-team": ("screen-token-0123456789", ["screen"])}


@pytest.fixture(scope="module")
def guarded_worker(broker, registry_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("read-tokens")
    path = folder / "api-tokens.json"
    path.write_text(json.dumps({"applications": [
        {"name": name, "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
         **({"metrics": metrics} if metrics else {})} for name, (token, metrics) in TOKENS.items()]}))
    with serving_worker(registry_path, broker.bootstrap_servers, TOPIC, folder, "--api-tokens-file", str(path),
                        token=TOKENS["ops"][0]) as w:
        yield w


def get(worker, path: str, token: str | None = None) -> tuple[int, bytes, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(worker.base_url + path, headers=headers), timeout=10) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


@pytest.mark.integration
def test_reads_without_a_valid_token_get_no_counts(guarded_worker):
    for path in ("/estimates", "/topk?k=3", "/params", "/metrics", "/metrics?format=json", "/metrics/dest/estimates",
                 "/metrics/dest", "/discovered?metric=dest"):
        for token, reason in ((None, "missing_token"), ("not-a-token", "unknown_token")):
            status, body, headers = get(guarded_worker, path, token)
            doc = json.loads(body)
            assert (status, doc["reason"]) == (401, reason), (path, token, body[:200])
            assert set(doc) == {"status", "reason", "error"} and headers.get("WWW-Authenticate", "").startswith("Bearer")
    assert get(guarded_worker, "/healthz")[0] == 200
    assert get(guarded_worker, "/")[0] == 200 and get(guarded_worker, "/console/console.js")[0] == 200


@pytest.mark.integration
def test_a_token_for_another_metric_reads_only_its_own(guarded_worker):
    dest, screen = TOKENS["dest-team"][0], TOKENS["screen-team"][0]
    assert get(guarded_worker, "/metrics/dest/estimates", dest)[0] == 200
    assert get(guarded_worker, "/estimates", dest)[0] == 200  # the name-less routes answer dest, the first metric
    status, body, _ = get(guarded_worker, "/metrics/dest/estimates", screen)
    assert (status, json.loads(body)["reason"]) == (403, "metric_not_allowed")
    assert get(guarded_worker, "/metrics/screen/estimates", screen)[0] == 200
    assert get(guarded_worker, "/metrics", dest)[0] == 403, "the exposition holds every metric"
    status, body, _ = get(guarded_worker, "/metrics", TOKENS["ops"][0])
    assert status == 200 and b"ocms_http_errors_total" in body
    assert b'reason="missing_token"' in body and b'reason="metric_not_allowed"' in body
