"""Who may read (agents.trust.ReadAccess; issue 37): with --api-tokens-file every answer holding counts
needs a bearer token of an application allowed that metric; /metrics (every metric) needs a token without a
metric list; /healthz and the console's page and code stay open. Without the file reads stay open."""

from __future__ import annotations

import hashlib
import json
import logging
from types import SimpleNamespace

import pytest

from agents.trust import ReadAccess
from infra.http_edge import ErrorAnswers


def tokens(tmp_path, entries) -> str:
    path = tmp_path / "read-tokens.json"
    path.write_text(json.dumps({"applications": [
        {"name": name, "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
         **({"metrics": metrics} if metrics is not None else {})} for name, token, metrics in entries]}))
    return str(path)


def request(path: str, token: str | None = None, **query):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return SimpleNamespace(path=path, query=query, headers=headers, method="GET")


@pytest.fixture
def access(tmp_path):
    counted = []
    answers = ErrorAnswers(lambda status, reason: counted.append(reason), logging.getLogger("test"), detail_field="error")
    path = tokens(tmp_path, [("ops", "all-secret-token", None), ("dest-team", "dest-secret-token", ["dest"])])
    access = ReadAccess(path, "dest", answers)
    access.counted = counted
    return access


def status(access, *args, **kwargs):
    refused = access.refusal(request(*args, **kwargs))
    if refused is None:
        return 200, None
    return refused.status, json.loads(refused.body)["reason"]


@pytest.mark.parametrize("path, query", [("/estimates", {}), ("/estimates/3", {}), ("/topk", {}), ("/trend", {}),
                                         ("/params", {}), ("/metrics", {}), ("/metrics/dest/estimates", {}),
                                         ("/metrics/screen", {}), ("/discovered", {"metric": "screen"}),
                                         ("/console/truth", {}), ("/nope", {})])
def test_no_token_and_an_unknown_token_read_nothing(access, path, query):
    assert status(access, path, **query) == (401, "missing_token")
    assert status(access, path, "guessed-token", **query) == (401, "unknown_token")
    assert status(access, path, "all-secret-token", **query) == (200, None)


def test_a_token_for_another_metric_reads_only_its_own(access):
    assert status(access, "/metrics/dest/estimates", "dest-secret-token") == (200, None)
    assert status(access, "/estimates", "dest-secret-token") == (200, None)  # the first metric is dest
    assert status(access, "/metrics/screen/estimates", "dest-secret-token") == (403, "metric_not_allowed")
    assert status(access, "/discovered", "dest-secret-token", metric="screen") == (403, "metric_not_allowed")
    assert status(access, "/metrics", "dest-secret-token") == (403, "metric_not_allowed")  # every metric
    assert access.counted.count("metric_not_allowed") == 3


def test_liveness_and_the_console_code_stay_open(access):
    for path in ("/healthz", "/", "/console/console.js", "/console/vendor/uPlot.iife.min.js"):
        assert status(access, path) == (200, None)


def test_without_a_tokens_file_reads_stay_open():
    open_access = ReadAccess(None, "dest", None)
    assert not open_access.enabled and open_access.refusal(request("/metrics")) is None


def test_a_bad_tokens_file_is_refused_once_naming_the_flag(tmp_path):
    from agents.settings import WorkerSettings
    from cms_core.errors import InvalidParameterError

    bad = tmp_path / "bad.json"
    bad.write_text('{"applications": [{"name": "x", "token_sha256": "abc"}]}')
    with pytest.raises(InvalidParameterError, match="--api-tokens-file.*token_sha256"):
        WorkerSettings.build(broker="embedded", api_tokens_file=str(bad))
