"""Peers that authenticate to each other (issue 37): two workers with ``--view share`` serving over mutual TLS
with read tokens. A query reaching the worker that does not hold its metric is forwarded over TLS (the
worker presents its certificate, verifies the holder's against --tls-client-ca) carrying the client's
token, which the holder checks again: every metric answers through either worker with a valid token, and
a token for one metric is refused the other's at the holder too, forwarded or not."""

from __future__ import annotations

import hashlib
import json

import pytest

from agents.shards import ANSWERED_BY_HEADER
from infra.broker import EmbeddedBroker
from tests.support.tls import client, fetch, make_pki, wait_answer

from .harness import WorkerProcess
from .test_shard_integration import NAMES, registry_text

pytestmark = pytest.mark.integration


def test_forwarded_queries_travel_over_mutual_tls_with_the_client_s_token(tmp_path):
    import urllib.request

    pki = make_pki(tmp_path)
    (tmp_path / "registry.yaml").write_text(registry_text(), encoding="utf-8")
    tokens = {"ops": "ops-read-token-123456", "one": "one-metric-token-123456"}
    (tmp_path / "tokens.json").write_text(json.dumps({"applications": [
        {"name": "ops", "token_sha256": hashlib.sha256(tokens["ops"].encode()).hexdigest()},
        {"name": "one", "token_sha256": hashlib.sha256(tokens["one"].encode()).hexdigest(), "metrics": [NAMES[0]]}]}))
    args = ("--registry", str(tmp_path / "registry.yaml"), "--view", "share", "--tls-cert", str(pki / "server.pem"),
            "--tls-key", str(pki / "server.key"), "--tls-client-ca", str(pki / "ca.pem"),
            "--api-tokens-file", str(tmp_path / "tokens.json"))
    context = client(pki, "client")
    ops = {"Authorization": f"Bearer {tokens['ops']}"}
    with EmbeddedBroker() as broker:
        workers = [WorkerProcess(broker.bootstrap_servers, "trust-shards", "trust-shards", tmp_path, *args)
                   for _ in range(2)]
        try:
            for w in workers:
                w.start()
            urls = [f"https://127.0.0.1:{w.web_port}" for w in workers]
            for w, url in zip(workers, urls):
                wait_answer(url + "/healthz", context, w.running)
            for w, url in zip(workers, urls):
                for name in NAMES:
                    wait_answer(f"{url}/metrics/{name}/estimates", context, w.running, headers=ops)
            answered_by = set()
            for url in urls:
                for name in NAMES:
                    request = urllib.request.Request(f"{url}/metrics/{name}/estimates", headers=ops)
                    with urllib.request.urlopen(request, timeout=10, context=context) as response:
                        assert response.status == 200 and json.loads(response.read())["n"] == 0
                        answered_by.add((url, response.headers[ANSWERED_BY_HEADER]))
            assert {by for _, by in answered_by} == set(urls), "each worker holds a share"
            assert any(url != by for url, by in answered_by), "some answers were forwarded"
            one = {"Authorization": f"Bearer {tokens['one']}"}
            for url in urls:  # forwarded or not, the holder refuses the other metrics to this token
                assert fetch(f"{url}/metrics/{NAMES[0]}/estimates", context, headers=one)[0] == 200
                for name in NAMES[1:]:
                    status, body = fetch(f"{url}/metrics/{name}/estimates", context, headers=one)
                    assert (status, json.loads(body)["reason"]) == (403, "metric_not_allowed")
                listing = json.loads(fetch(url + "/metrics?format=json", context, headers=ops)[1])
                assert {m["name"] for m in listing["metrics"] if "unavailable" not in m} == set(NAMES)
        finally:
            for w in workers:
                w.stop()
