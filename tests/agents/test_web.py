"""The HTTP API of a live worker (embedded broker): a fuzz of every endpoint and parameter,
and values that must come back exactly as they went in (JSON and Prometheus labels).

Every request has a time bound and /healthz must keep answering within a second
between requests: a request may be refused, never hang or stall the worker.
"""

from __future__ import annotations

import json
import random
import time
import unicodedata
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.answers.request import PARAMETERS
from cms_core import OCMSParams, wire
from cms_core.privatize import simulate_reports
from cms_core.values import elements_to_array, encode_value, limbs_for
from infra.broker import EmbeddedBroker
from registry.values_file import write_values_file

from .harness import Message, WorkerProcess, report_messages, send

pytestmark = pytest.mark.integration  # a broker and workers

REQUEST_BOUND_S = 10.0  # generous for a loaded CI machine; a stalled worker takes minutes or forever
HEALTH_BOUND_S = 1.0
PARAMS = OCMSParams.build(2.0, 1000)

NFC = unicodedata.normalize("NFC", "caf\u00e9")
NFD = unicodedata.normalize("NFD", "caf\u00e9")
AWKWARD_STRINGS = [" a", "a ", "a", "", "line\nbreak", NFC, NFD, "\U0001f389 party", "a/b", "50%", "q?x=1&y", "#hash",
                   'quote"back\\slash', "tab\there"]
AWKWARD_INTEGERS = [2**53 + 1, 2**63, 2**64 - 1, 0, 7]


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


def get(worker: WorkerProcess, path_and_query: str, bound: float = REQUEST_BOUND_S) -> tuple[int, bytes, float]:
    """(status, body, seconds) of one GET of a raw path and query string, within ``bound``."""
    start = time.monotonic()
    try:
        with urllib.request.urlopen(worker.base_url + path_and_query, timeout=bound) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    return status, body, time.monotonic() - start


def assert_healthy_quickly(worker: WorkerProcess) -> None:
    status, body, seconds = get(worker, "/healthz", bound=5)
    assert status == 200 and seconds < HEALTH_BOUND_S, (status, seconds, body[:200])


@pytest.fixture(scope="module")
def fed(broker, tmp_path_factory):
    """A worker (d = 1,000, 60 s buckets, a 1 h rollup) with 6,000 reports in the last buckets."""
    log_dir = tmp_path_factory.mktemp("web")
    worker = WorkerProcess(broker.bootstrap_servers, "web-fuzz", "web-fuzz", log_dir, "--epsilon", "2",
                           "--dictionary-size", "1000", "--bucket-seconds", "60", "--retention-seconds", "3600",
                           "--rollup-seconds", "3600", "--rollup-retention-seconds", "86400").start()
    try:
        worker.wait_healthy()
        rng = np.random.default_rng(5)
        now_ms = int(time.time() * 1000)
        stamps = [now_ms - 60_000 * (i % 5) for i in range(60)]
        send(broker.bootstrap_servers, "web-fuzz",
             report_messages(PARAMS, rng.integers(0, 50, 6000), 100, seed=6, timestamps_ms=stamps))
        worker.wait_for_n(6000)
        yield worker
    finally:
        worker.stop()


# ------------------------------------------------------------------ fuzz
NOW_S = time.time()
HOSTILE = [
    "", " ", "0", "-1", "-5", "1", "5", "60", "2.5", "1e300", "-1e300", "1e20", "1e21", "nan", "NaN", "inf", "-inf",
    "Infinity", "9" * 400, "999999999999999999999h", "999999999999999999999", "-999999999999999999999d",
    str(int(NOW_S) + 10**6), str(int(NOW_S) + 10**9), "1" + "0" * 30, "now", "-15m", "-100000d", "now-1h",
    "1970-01-01T00:00:00Z", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59Z", "2023-02-30",
    "%00", "\u00e9", "\n", "'", "<script>", "x" * 5000, "5x", "-0", "+3", "0x10", "1_000", "total", "latest_bucket",
    "range", "none", "clip", "norm_sub", "simplex", "normal", "chernoff", "0.95", "1", "0.0000001",
]
ENDPOINTS = {"/estimates": "estimates", "/estimates/3": "estimate_value", "/topk": "topk", "/trend": "trend",
             "/params": "params", "/healthz": "healthz", "/metrics": "metrics"}
BASE = {"trend": {"value": "3"}}


def check_answer(endpoint: str, query: list[tuple[str, str]], status: int, body: bytes, seconds: float) -> None:
    where = (endpoint, query, status, body[:300])
    assert seconds < REQUEST_BOUND_S, where
    assert status in (200, 400, 404, 503), where
    if endpoint == "/metrics" and status == 200:
        list(text_string_to_metric_families(body.decode()))
        return
    doc = json.loads(body)  # always JSON, never NaN/Infinity
    if status in (400, 404):
        names = [name for name, _ in query] + (["value"] if endpoint == "/estimates/3" else [])
        # The parameter blamed is one given, or one missing that the request needs.
        assert doc["parameter"] in names or doc["error"].startswith("is required"), where
        assert len(doc["error"]) < 300, where  # a short rendering, never a 300-digit number


def url(path: str, query: list[tuple[str, str]]) -> str:
    return path + ("?" + urllib.parse.urlencode(query) if query else "")


def test_every_parameter_of_every_endpoint_with_hostile_values(fed):
    for path, endpoint in ENDPOINTS.items():
        names = list(PARAMETERS[endpoint]) + ["postprocesss", "unknown"]
        for name in names:
            for raw in HOSTILE:
                base = [(k, v) for k, v in BASE.get(endpoint, {}).items() if k != name]
                query = base + [(name, raw)]
                status, body, seconds = get(fed, url(path, query))
                check_answer(path, query, status, body, seconds)
                if status == 400 and name not in PARAMETERS[endpoint]:
                    assert json.loads(body)["parameter"] == name
            assert_healthy_quickly(fed)


def test_duplicated_and_unknown_parameters_are_named(fed):
    for path, endpoint in ENDPOINTS.items():
        base = list(BASE.get(endpoint, {}).items())
        for name in PARAMETERS[endpoint]:
            query = base + [(name, "1"), (name, "1")]
            status, body, _ = get(fed, url(path, query))
            assert status == 400 and json.loads(body)["parameter"] == name, (path, name, body)
            assert "more than once" in json.loads(body)["error"]
        status, body, _ = get(fed, url(path, base + [("postprocesss", "clip")]))
        doc = json.loads(body)
        assert status == 400 and doc["parameter"] == "postprocesss", (path, doc)
        if "postprocess" in PARAMETERS[endpoint]:
            assert "did you mean 'postprocess'" in doc["error"]


@pytest.mark.parametrize("query, parameter", [
    ({"from": "1e20", "to": "1e21"}, "from"),  # issue 19: this froze the worker for good
    ({"from": "1e300"}, "from"),  # blamed "to" and printed 300 digits
    ({"from": "-15m", "to": str(int(NOW_S) + 10**8)}, "to"),
    ({"from": "1"}, "from"),  # before every level's retention
    ({"from": "nan"}, "from"),
    ({"from": "-1e300"}, "from"),
])
def test_absurd_ranges_blame_the_right_parameter_quickly(fed, query, parameter):
    for path in ("/estimates", "/topk", "/estimates/3", "/trend?value=3"):
        sep = "&" if "?" in path else "?"
        status, body, seconds = get(fed, path + sep + urllib.parse.urlencode(query))
        doc = json.loads(body)
        assert (status, doc["parameter"]) == (400, parameter), (path, doc)
        assert len(doc["error"]) < 200 and seconds < REQUEST_BOUND_S
    assert_healthy_quickly(fed)


def test_absurd_step_blames_step(fed):
    for step in ("999999999999999999999h", "9" * 400, "0", "-60", "nan"):
        status, body, _ = get(fed, "/trend?" + urllib.parse.urlencode({"value": "3", "step": step}))
        doc = json.loads(body)
        assert (status, doc["parameter"]) == (400, "step"), (step, doc)
        assert len(doc["error"]) < 200


def test_seeded_random_requests(fed):
    rng = random.Random(1917)
    values = ["3", "0", "999", "1000", "abc", "", "007", "18446744073709551616"]
    for i in range(300):
        path = rng.choice(list(ENDPOINTS))
        endpoint = ENDPOINTS[path]
        names = list(PARAMETERS[endpoint]) + ["junk"]
        query = [(rng.choice(names), rng.choice(HOSTILE + values)) for _ in range(rng.randint(0, 4))]
        if path == "/estimates/3" and rng.random() < 0.5:
            path = "/estimates/" + urllib.parse.quote(rng.choice(values + HOSTILE[:20]), safe="")
        status, body, seconds = get(fed, url(path, query))
        if path.startswith("/estimates/") and status == 404 and json.loads(body).get("reason") == "no_such_route":
            continue  # the web server's 404 for a path that names no route (e.g. /estimates/), JSON too
        check_answer(path if not path.startswith("/estimates/") else "/estimates/3", query, status, body, seconds)
        if i % 25 == 0:
            assert_healthy_quickly(fed)
    assert_healthy_quickly(fed)


def test_valid_answers_still_answer(fed):
    status, body, _ = get(fed, "/estimates?from=-10m&postprocess=clip")
    doc = json.loads(body)
    assert status == 200 and doc["n"] == 6000 and all(isinstance(r["value"], str) for r in doc["estimates"])
    status, body, _ = get(fed, "/trend?value=3&from=-10m")
    doc = json.loads(body)
    assert status == 200 and doc["value"] == "3" and sum(p["n"] for p in doc["points"]) == 6000
    status, body, _ = get(fed, "/estimates/007")  # value_from_json: decimal digits
    assert status == 200 and json.loads(body)["estimate"]["value"] == "7"


# ------------------------------------------------------- awkward values
def strings_worker(broker, tmp_path_factory, app_id: str, values: list, *args: str) -> WorkerProcess:
    log_dir = tmp_path_factory.mktemp(app_id)
    tracked = log_dir / "tracked.jsonl"
    write_values_file(tracked, values)
    return WorkerProcess(broker.bootstrap_servers, app_id, app_id, log_dir, "--epsilon", "2",
                         "--tracked-file", str(tracked), "--top-k", str(len(values)), *args).start()


def reports_of(params: OCMSParams, values: list, per_value: int, seed: int) -> list[Message]:
    rng = np.random.default_rng(seed)
    elements = elements_to_array([encode_value(params, v) for v in values for _ in range(per_value)], limbs_for(params))
    batch = simulate_reports(params, elements, rng)
    return [Message(wire.encode_frame(params, batch.slice(i, min(i + 50, len(batch)))), b"k%d" % i)
            for i in range(0, len(batch), 50)]


def check_round_trip(worker: WorkerProcess, expected: list[str], n: int) -> None:
    doc = worker.wait_for_n(n)
    assert [r["value"] for r in doc["estimates"]] == expected  # exactly, in tracked order
    for i, value in enumerate(expected):
        if value == "":
            continue  # no path names the empty value; /trend?value= does (below)
        status, body, _ = get(worker, "/estimates/" + urllib.parse.quote(value, safe=""))
        assert status == 200, (value, body)
        assert json.loads(body)["estimate"] == doc["estimates"][i], value
        status, body, _ = get(worker, "/trend?" + urllib.parse.urlencode({"value": value, "from": "-10m"}))
        assert status == 200 and json.loads(body)["value"] == value
    if "" in expected:
        status, body, _ = get(worker, "/trend?value=&from=-10m")
        assert status == 200 and json.loads(body)["value"] == ""
    text = worker.text("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    exported = [s.labels["value"] for s in families["ocms_estimate_ratio"].samples if s.labels["window"] == "total"]
    assert sorted(exported) == sorted(expected)  # every value once, byte for byte
    by_value = {s.labels["value"]: s.value for s in families["ocms_estimate_ratio"].samples
                if s.labels["window"] == "total"}
    for record in doc["estimates"]:
        assert by_value[record["value"]] == record["frequency"]


def test_awkward_strings_round_trip_through_json_paths_and_metrics(broker, tmp_path_factory):
    params = OCMSParams.build(2.0, value_domain="string")
    worker = strings_worker(broker, tmp_path_factory, "web-strings", AWKWARD_STRINGS, "--strings")
    try:
        worker.wait_healthy()
        send(broker.bootstrap_servers, "web-strings", reports_of(params, AWKWARD_STRINGS, 20, seed=8))
        check_round_trip(worker, AWKWARD_STRINGS, 20 * len(AWKWARD_STRINGS))
    finally:
        worker.stop()


def test_awkward_integers_round_trip_exactly(broker, tmp_path_factory):
    params = OCMSParams.build(2.0, 2**64)
    worker = strings_worker(broker, tmp_path_factory, "web-ints", AWKWARD_INTEGERS, "--dictionary-size", str(2**64))
    try:
        worker.wait_healthy()
        send(broker.bootstrap_servers, "web-ints", reports_of(params, AWKWARD_INTEGERS, 20, seed=9))
        check_round_trip(worker, [str(v) for v in AWKWARD_INTEGERS], 20 * len(AWKWARD_INTEGERS))
        status, body, _ = get(worker, "/estimates/" + str(2**64))  # one past the dictionary
        assert status == 404 and json.loads(body)["parameter"] == "value"
        status, body, _ = get(worker, "/estimates/0018446744073709551615")  # decimal digits: the same value
        assert status == 200 and json.loads(body)["estimate"]["value"] == str(2**64 - 1)
    finally:
        worker.stop()


# ------------------------------------------------------------ benchmark
def test_query_storm_benchmark_runs_at_tiny_size(capsys):
    """benchmarks/bench_query_storm.py keeps working (tiny sizes; its figures are not checked)."""
    from benchmarks import bench_query_storm as bench

    result = bench.run(tracked=200, seconds=1.0, clients=2, rounds=1, partitions=2, load=0.5, capacity_reports=5000,
                       log=lambda *a, **k: None)
    quiet, storm = result["rounds"][0]
    assert quiet["reports_per_s"] > 0 and storm["health_polls"] > 0
    assert sum(sum(counts.values()) for counts in storm["statuses"].values()) > 0
    bench.report(result)
    assert "intake under storm" in capsys.readouterr().out
