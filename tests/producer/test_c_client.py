"""The C client (producer/c, issue 25): cross-language vectors, arithmetic, exact privacy, the CLI.

Every record of tests/vectors/ (privatize_v1, wire_v1, binding_v1) is replayed through the C
library from the files, so a case added to a Python generator is picked up here. Single reports
run four ways: randomness read per draw or through the read-ahead buffer, PCLMUL or the portable
carry-less multiply; a separately built portable library (no unsigned __int128, no PCLMUL) replays
them too.
"""

from __future__ import annotations

import json
import math
import os
import random
import stat
import time
from fractions import Fraction

import pytest

from cms_core import OCMSParams, audit, wire
from cms_core.fields import PRIME_64, BinaryField, PrimeField
from cms_core.privatize import keep_threshold
from infra.capture import CaptureReader, read_report_batch
from registry.loader import parse_registry
from tests.vectors.make_privatize_vectors import REGISTRY

from .c_client import (C_DIR, CLI, PRIVATIZE_VECTORS, VECTORS, Driver, device_config_file, line_of, make,
                       run_cli)

pytestmark = pytest.mark.integration

SINGLES = PRIVATIZE_VECTORS["singles"]
FRAMES = PRIVATIZE_VECTORS["frames"]
INVALID = PRIVATIZE_VECTORS["invalid"]
WIRE = json.loads((VECTORS / "wire_v1.json").read_text(encoding="utf-8"))
BINDING = json.loads((VECTORS / "binding_v1.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def built():
    make("all", "test-tools")


@pytest.fixture(scope="module")
def config(built, tmp_path_factory):
    return device_config_file(tmp_path_factory.mktemp("c-config"))


@pytest.fixture(scope="module")
def driver(config):
    d = Driver(C_DIR / "build" / "ocms-c-driver")
    assert d.ask(op="load", path=str(config))["metrics"] == len(PRIVATIZE_VECTORS["device_config"]["metrics"])
    yield d
    code, err = d.close()
    assert code == 0, err


def _expect_single(answer: dict, case: dict, how: str) -> None:
    assert "error" not in answer, (how, answer)
    assert answer["message_hex"] == case["message_hex"], how
    assert answer["device_path_hex"] == case["message_hex"], how  # ocms_report_* = privatize + encode
    assert answer["used"] == len(case["random_hex"]) // 2, f"{how}: must draw exactly the recorded bytes"
    assert answer["level"] == case.get("level", 0) == answer["device_path_level"], how
    assert (answer["a0"], answer["a1"], answer["z"]) == (case["report"]["a0"], case["report"]["a1"], case["report"]["z"])


# ------------------------------------------------------------------ privatize_v1
@pytest.mark.parametrize("case", SINGLES, ids=[f"{i}-{c['metric']}" for i, c in enumerate(SINGLES)])
def test_single_report_vectors(driver, case):
    for ascii_only in (False, True):  # raw UTF-8 and \u escapes (surrogate pairs) read the same
        for buffered in (False, True):
            for pclmul in (True, False):
                how = f"ascii={ascii_only} buffered={buffered} pclmul={pclmul}"
                answer = driver.ask(op="report", metric=case["metric"], line=line_of(case["value"], ascii_only),
                                    random_hex=case["random_hex"], buffered=buffered, pclmul=pclmul)
                _expect_single(answer, case, how)


@pytest.mark.parametrize("case", FRAMES, ids=[c["metric"] for c in FRAMES])
def test_frame_vectors(driver, case):
    for buffered in (False, True):
        answer = driver.ask(op="frame", metric=case["metric"], lines=[line_of(v) for v in case["values"]],
                            random_hex=case["random_hex"], buffered=buffered)
        assert answer.get("message_hex") == case["message_hex"], answer
        assert answer["used"] == len(case["random_hex"]) // 2
        assert answer["reports"] == [{**r, "z": r["z"]} for r in case["reports"]]


@pytest.mark.parametrize("case", INVALID, ids=[f"{c['metric']}:{c['value']}" for c in INVALID])
def test_invalid_values_are_refused_before_any_byte_is_drawn(driver, case):
    answer = driver.ask(op="report", metric=case["metric"], line=line_of(case["value"]), random_hex="")
    assert "error" in answer and answer["used"] == 0, answer
    assert answer["error"] != "the randomness source failed"


def test_the_portable_build_reproduces_every_single_report(config):
    """No unsigned __int128 (64 x 64 products from 32-bit halves, 128-bit remainders bit by bit), no PCLMUL."""
    make("portable")
    d = Driver(C_DIR / "build-portable" / "ocms-c-driver")
    try:
        d.ask(op="load", path=str(config))
        assert d.ask(op="pclmul")["active"] == 0
        for case in SINGLES:
            _expect_single(d.ask(op="report", metric=case["metric"], line=line_of(case["value"]),
                                 random_hex=case["random_hex"]), case, "portable")
    finally:
        assert d.close()[0] == 0


# ------------------------------------------------------------------ wire_v1 and binding_v1
def _params_command(params: OCMSParams) -> dict:
    field = ({"kind": "prime", "order": str(params.field.order)} if params.field.kind == "prime"
             else {"kind": "binary", "degree": params.field.degree})
    return {"epsilon": params.epsilon, "m": params.hash_range, "field": field,
            "dictionary_size": str(params.dictionary_size), "domain": params.value_domain,
            "mechanism": params.mechanism, "fingerprint": params.fingerprint.hex()}


def _wire_params(name: str) -> OCMSParams:
    spec = WIRE["param_sets"][name]
    if spec.get("value_domain") == "string":
        return OCMSParams.build(spec["epsilon"], value_domain="string")
    return OCMSParams.build(spec["epsilon"], spec["dictionary_size"])


@pytest.mark.parametrize("name", sorted(WIRE["param_sets"]))
def test_wire_vector_fingerprints(driver, name):
    params = _wire_params(name)
    answer = driver.ask(op="fingerprint", **{**_params_command(params), "fingerprint": None})
    assert answer["fingerprint"] == WIRE["param_sets"][name]["fingerprint"] == params.fingerprint.hex()


@pytest.mark.parametrize("case", WIRE["valid"], ids=[c["title"] for c in WIRE["valid"]])
def test_wire_vector_encodings(driver, case):
    params = _wire_params(case["params"])
    answer = driver.ask(op="encode", kind=case["kind"], records=case["records"], **_params_command(params))
    assert answer.get("hex") == case["hex"], answer
    assert driver.ask(op="check", hex=case["hex"], **_params_command(params))["count"] == len(case["records"])


@pytest.mark.parametrize("case", WIRE["malformed"], ids=[c["title"] for c in WIRE["malformed"]])
def test_wire_vector_malformed_messages_get_the_workers_reason(driver, case):
    params = _wire_params(case["params"])
    assert driver.ask(op="check", hex=case["hex"], **_params_command(params)).get("reason") == case["reason"]


def _binding_params(v: dict) -> dict:
    field = v["field"]
    if field.startswith("GF"):
        spec = {"kind": "binary", "degree": int(field[5:-1])}
    else:
        spec = {"kind": "prime", "order": field[2:-1]}
    return {"epsilon": v["epsilon"], "m": v["hash_range"], "field": spec, "dictionary_size": v["dictionary_size"],
            "domain": v["value_domain"], "mechanism": v["mechanism"]}


@pytest.mark.parametrize("vector", BINDING["vectors"], ids=[v["binding"] for v in BINDING["vectors"]])
def test_binding_vectors(driver, vector):
    command = _binding_params(vector)
    assert driver.ask(op="fingerprint", binding=vector["binding"], **command)["fingerprint"] == vector["fingerprint"]
    assert driver.ask(op="fingerprint", **command)["fingerprint"] == vector["unbound_fingerprint"]
    single = vector["single_report"]
    record = {"a0": single["a0"], "a1": single["a1"], "z": single["z"]}
    answer = driver.ask(op="encode", kind=1, records=[record], fingerprint=vector["fingerprint"], **command)
    assert answer["hex"] == single["hex"]


def test_the_library_holds_the_configs_thresholds_and_parameters(driver):
    for metric in PRIVATIZE_VECTORS["device_config"]["metrics"]:
        got = driver.ask(op="params", metric=metric["name"])
        assert (got["keep_threshold"], got["m"], got["fingerprint"], got["epsilon"]) == (
            metric["keep_threshold"], metric["m"], metric["fingerprint"], metric["epsilon"])
        levels = metric.get("discovery", {}).get("levels", [])
        assert [(lv["keep_threshold"], lv["m"], lv["fingerprint"], lv["dictionary_size"]) for lv in got["levels"]] == [
            (lv["keep_threshold"], lv["m"], lv["fingerprint"], lv["dictionary_size"]) for lv in levels]


# ------------------------------------------------------------------ BLAKE2b and field arithmetic
def test_blake2b_matches_hashlib_for_every_length_key_and_personalisation(driver):
    import hashlib

    rng = random.Random(25)
    cases = [(n, 0, b"", 64) for n in range(0, 300)]
    cases += [(rng.randrange(0, 1000), rng.randrange(0, 65), rng.randbytes(rng.randrange(0, 17)), rng.randrange(1, 65))
              for _ in range(300)]
    cases += [(128, 64, b"ocms-memo-v1", 32), (256, 0, b"", 8), (129, 1, b"x" * 16, 16), (127, 0, b"", 1)]
    for n, keylen, person, size in cases:
        data, key = rng.randbytes(n), rng.randbytes(keylen)
        expected = hashlib.blake2b(data, digest_size=size, key=key, person=person).hexdigest()
        chunk = rng.choice([0, 1, 7, 64, 128, 129])
        answer = driver.ask(op="blake2b", data_hex=data.hex(), key_hex=key.hex(), person_hex=person.hex(),
                            digest_size=size, chunk=chunk)
        assert answer["digest"] == expected, (n, keylen, person, size, chunk)


FIELDS = [PrimeField(29), PrimeField(65537), PrimeField(4294967291), PrimeField(2**61 - 1), PrimeField(PRIME_64),
          BinaryField(64), BinaryField(128)]


@pytest.mark.parametrize("field", FIELDS, ids=str)
def test_field_hash_matches_cms_core_on_random_and_extreme_elements(driver, field):
    rng = random.Random(str(field))
    order = field.order
    extremes = [0, 1, 2, order - 1, order - 2, order // 2, (1 << (field.bits - 1))]
    command = {"field": {"kind": "prime", "order": str(order)} if field.kind == "prime"
               else {"kind": "binary", "degree": field.degree}, "dictionary_size": "2", "m": 4294967291}
    for i in range(400):
        a0, a1, x = (rng.choice(extremes) if rng.random() < 0.3 else rng.randrange(order) for _ in range(3))
        expected = field.hash_value(a0, a1, x)
        for pclmul in (True, False):
            answer = driver.ask(op="field_hash", a0=str(a0), a1=str(a1), x=str(x), pclmul=pclmul, **command)
            assert answer["hash"] == str(expected), (a0, a1, x, pclmul)
            assert answer["residue"] == expected % 4294967291


# ------------------------------------------------------------------ exact privacy with the client's T
def _client_params(driver, name: str) -> tuple[OCMSParams, int]:
    """The metric's parameters rebuilt in Python, and the T the C library really holds."""
    metric = next(m for m in PRIVATIZE_VECTORS["device_config"]["metrics"] if m["name"] == name)
    got = driver.ask(op="params", metric=name)
    d = len(metric["categories"])
    params = OCMSParams.build(metric["epsilon"], d, hash_range=metric["m"], field=PrimeField(int(metric["field"]["order"])),
                              mechanism=metric.get("mechanism", "ocms"), binding=f"{name}@{metric['version']}")
    assert params.fingerprint.hex() == got["fingerprint"]
    return params, int(got["keep_threshold"])


@pytest.mark.parametrize("name", ["cat_small", "cat_direct"])
def test_exact_privacy_loss_with_the_threshold_the_client_uses(driver, name, monkeypatch):
    params, client_t = _client_params(driver, name)
    monkeypatch.setattr(audit, "keep_threshold", lambda p: client_t)  # cms_core.audit's exact enumeration, the C client's T
    loss = audit.exact_privacy_loss(params)
    assert loss <= Fraction(math.exp(params.epsilon))
    assert loss == Fraction(client_t * (params.hash_range - 1), 2**64 - client_t)
    assert float(loss) == pytest.approx(math.exp(params.epsilon), rel=1e-14)  # the budget is used, not wasted
    # negative control: the threshold of 1.25 epsilon is caught by the same enumeration
    leaky_t = keep_threshold(OCMSParams.build(params.epsilon * 1.25, params.dictionary_size, hash_range=params.hash_range,
                                              field=params.field, mechanism=params.mechanism))
    monkeypatch.setattr(audit, "keep_threshold", lambda p: leaky_t)
    assert audit.exact_privacy_loss(params) > Fraction(math.exp(params.epsilon))


def test_every_threshold_the_client_holds_keeps_the_ratio_at_most_e_eps(driver):
    """Fields too large to enumerate: the realised ratio T (m - 1) / (2^64 - T), exactly, for every version and level."""
    for metric in PRIVATIZE_VECTORS["device_config"]["metrics"]:
        got = driver.ask(op="params", metric=metric["name"])
        for p in [got, *got["levels"]]:
            t = int(p["keep_threshold"])
            ratio = Fraction(t * (p["m"] - 1), 2**64 - t)
            assert ratio <= Fraction(math.exp(metric["epsilon"])), (metric["name"], p)
            assert float(ratio) == pytest.approx(math.exp(metric["epsilon"]), rel=1e-14)


# ------------------------------------------------------------------ the command-line example
def test_cli_writes_one_report_per_line_in_order(config, tmp_path):
    values = ["home", "東京", "maps", "🚀", "home"]
    out = tmp_path / "c.capture"
    done = run_cli(["--config", config, "--metric", "cat_small", "--out", out], [line_of(v) for v in values])
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode() == f"ocms-report-c: wrote 5 reports of cat_small@1 to {out}\n" and not done.stdout
    version = parse_registry(REGISTRY).metric("cat_small").latest
    batch = read_report_batch(out, version.params)
    assert len(batch) == 5


@pytest.mark.parametrize("lines, line_no, message", [
    (['"home"', '"Home"'], 2, '"Home" is not a category of metric cat_small'),
    (['"home"', 'home'], 2, "not a JSON string"),
    (['"home"', '', '"maps"'], 2, "empty line"),
    (['"home"', '"maps" "feed"'], 2, "text after the JSON string"),
    (['"home', ], 1, "unterminated JSON string"),
    (['"\\ud800"'], 1, "lone high surrogate"),
    (['"café"'], 1, None),  # the control: a category with a non-ASCII name is accepted
    (['42'], 1, "not a JSON string"),
])
def test_cli_bad_line_is_one_line_error_naming_it_and_nothing_is_written(config, tmp_path, lines, line_no, message):
    out = tmp_path / "c.capture"
    done = run_cli(["--config", config, "--metric", "cat_small", "--out", out], lines)
    if message is None:
        assert done.returncode == 0, done.stderr
        return
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and err.startswith(f"ocms-report-c: error: line {line_no}: "), err
    assert message in err
    assert not out.exists(), "nothing is written when a line is bad"


def test_cli_integers_strings_and_discovery_metrics(config, tmp_path):
    cases = {"int_gf64": ["0", "18446744073709551615", "0007"], "words": ["", "a" * 5000, "line\nbreak"],
             "words_disc": ["zebra", "", "abcdefgh"], "utf8_disc": ["東京タワー", "x"], "build_disc": ["65535", "1"],
             "cat_direct": ["naïve", "red"], "int_prime64": ["4611686018427387903"]}
    registry = parse_registry(REGISTRY)

    for name, values in cases.items():
        out = tmp_path / f"{name}.capture"
        done = run_cli(["--config", config, "--metric", name, "--out", out], [line_of(v) for v in values])
        assert done.returncode == 0, (name, done.stderr)
        version = registry.metric(name).latest
        if version.discovery is not None:
            from registry.discovery import discovery_of

            sets = {p.fingerprint: p for p in discovery_of(version).params_by_level}
        else:
            sets = {version.params.fingerprint: version.params}
        messages = list(CaptureReader(out))
        assert len(messages) == len(values)
        for message in messages:
            wire.decode_message(message, sets)  # every message valid for the metric (its level's parameters)


def test_cli_flag_and_config_errors_exit_2_with_one_line(config, tmp_path):
    bad_config = tmp_path / "bad.json"
    doc = json.loads(config.read_text(encoding="utf-8"))
    doc["metrics"][0]["keep_threshold"] = str(int(doc["metrics"][0]["keep_threshold"]) + 10**8)
    bad_config.write_text(json.dumps(doc))
    tampered = tmp_path / "tampered.json"
    doc = json.loads(config.read_text(encoding="utf-8"))
    doc["metrics"][0]["m"] = 5  # a consistent T for m = 5, but the fingerprint names m = 4
    doc["metrics"][0]["keep_threshold"] = str(keep_threshold(OCMSParams.build(2.0, 12, hash_range=5, field=PrimeField(29))))
    tampered.write_text(json.dumps(doc))
    cases = [
        ([], "--config is required"),
        (["--config", config], "--metric is required"),
        (["--config", config, "--metric", "cat_small"], "give exactly one of --out CAPTURE and --collector URL"),
        (["--config", config, "--metric", "cat_small", "--out", "x", "--collector", "http://127.0.0.1:9"], "exactly one"),
        (["--config", config, "--metric", "nope", "--out", tmp_path / "x"], "--metric nope: not in"),
        (["--config", tmp_path / "missing.json", "--metric", "m", "--out", "x"], "cannot read"),
        (["--config", bad_config, "--metric", "cat_small", "--out", "x"], "keep_threshold"),
        (["--config", tampered, "--metric", "cat_small", "--out", "x"], "fingerprint: does not match"),
        (["--config", config, "--metric", "cat_small", "--out", "x", "--bogus", "1"], "unknown flag --bogus"),
        (["--config", config, "--metric", "cat_small", "--out", "x", "--budget", "1"], "need --ledger"),
        (["--config", config, "--metric", "cat_small", "--out", "x", "--ledger", tmp_path / "l"], "--ledger needs --budget"),
        (["--config", config, "--metric", "cat_small", "--collector", "ftp://x"], "http:// or https://"),
    ]
    for args, message in cases:
        done = run_cli(args, ['"home"'])
        err = done.stderr.decode()
        assert done.returncode == 2, (args, err)
        assert message in err and err.strip().splitlines()[-1].startswith("ocms-report-c: error: "), (args, err)
    assert run_cli(["--help"]).returncode == 0


def test_cli_refuses_a_metric_that_needs_a_newer_client_naming_the_release(config, tmp_path):
    """min_client_version (issue 39): the linked library's release (ocms_version()) older than the config asks for is
    refused before anything is drawn or written; one it is new enough for reports as before."""
    from cms_core.version import __version__, release_tuple

    major, minor, _ = release_tuple(__version__)
    newer = f"{major}.{minor + 1}.0"
    doc = json.loads(config.read_text(encoding="utf-8"))
    for i, (needs, ok) in enumerate(((newer, False), (__version__, True), ("0.1.0", True), ("0.3", None), ("0.03.0", None))):
        doc["metrics"][0]["min_client_version"] = needs
        path = tmp_path / "needs.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        out = tmp_path / f"c-{i}.capture"
        done = run_cli(["--config", path, "--metric", doc["metrics"][0]["name"], "--out", out], ['"home"'])
        err = done.stderr.decode()
        if ok:
            assert done.returncode == 0, (needs, err)
            continue
        assert done.returncode == 2 and not out.exists(), (needs, err)
        if ok is None:
            assert "min_client_version: expected a release \"X.Y.Z\"" in err, (needs, err)
        else:
            assert err.strip().endswith(f'metric "{doc["metrics"][0]["name"]}" needs an ocms client of release {newer} or '
                                        f"later; this client is {__version__}: upgrade it to {newer} or later"), err


def test_cli_default_timeout_outlasts_a_shuffling_collectors_default_wait(built):
    """An upload to a shuffling collector is answered once its batch is in Kafka (60 s + the acknowledgement by
    default): the example's delivery deadline, 60 s, gave up on a quiet metric whose reports still got counted."""
    import re

    from tests.support.collector_defaults import longest_default_answer_s

    done = run_cli(["--help"])
    default = re.search(r"--timeout S .*\(default ([0-9.]+)\)", done.stdout.decode() + done.stderr.decode())
    assert default is not None, done
    assert float(default.group(1)) > longest_default_answer_s()


def test_cli_ledger_refuses_beyond_the_budget_and_memoizes(config, tmp_path):
    ledger = tmp_path / "ledger.txt"
    out = tmp_path / "c.capture"
    args = ["--config", config, "--metric", "cat_small", "--out", out, "--ledger", ledger, "--budget", "5"]
    done = run_cli(args, ['"home"', '"maps"', '"feed"'])  # epsilon 2 each: 2 + 2 <= 5, the third would be 6
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "line 3: privacy budget exhausted for metric cat_small" in err and "spent 4" in err
    assert len(list(CaptureReader(out))) == 2
    assert stat.S_IMODE(os.stat(ledger).st_mode) == 0o600
    done = run_cli(args, ['"home"'])  # the spend is on file: nothing left this period
    assert done.returncode == 1 and "line 1:" in done.stderr.decode()
    # exactly at the budget: ten charges of 0.1 fill 1.0 (epsilon 2 here: 2.5 charges of 2 = 5 -> 2 fit)
    ledger2 = tmp_path / "ledger2.txt"
    done = run_cli(["--config", config, "--metric", "cat_small", "--out", out, "--ledger", ledger2, "--budget", "4"],
                   ['"home"', '"maps"'])
    assert done.returncode == 0, done.stderr  # spend == budget is allowed
    # memoization: a repeated value re-sends its first report, free
    ledger3 = tmp_path / "ledger3.txt"
    done = run_cli(["--config", config, "--metric", "cat_small", "--out", out, "--ledger", ledger3, "--budget", "4",
                    "--memoize"], ['"home"', '"maps"', '"home"', '"maps"', '"home"'])
    assert done.returncode == 0, done.stderr
    messages = list(CaptureReader(out))
    assert messages[0] == messages[2] == messages[4] and messages[1] == messages[3]
    text = ledger3.read_text()
    assert " 4000000000 2\n" in text, text  # spent 4.0 in 2 charges
    assert "686f6d65" not in text, "the ledger never holds a value in the clear"  # hex of 'home'
    # the period length is fixed per file
    done = run_cli(["--config", config, "--metric", "cat_small", "--out", out, "--ledger", ledger3, "--budget", "4",
                    "--period-seconds", "60"], ['"home"'])
    assert done.returncode == 2 and "created with --period-seconds 86400" in done.stderr.decode()


def test_cli_memoizes_discovery_reports_by_the_whole_value_level_included(config, tmp_path):
    out, ledger = tmp_path / "d.capture", tmp_path / "ledger.txt"
    values = ["zebra", "zoo", "zebra", "zebra", "zoo", "a"]
    done = run_cli(["--config", config, "--metric", "words_disc", "--out", out, "--ledger", ledger, "--budget", "100",
                    "--memoize"], [line_of(v) for v in values])
    assert done.returncode == 0, done.stderr
    messages = list(CaptureReader(out))
    assert messages[0] == messages[2] == messages[3] and messages[1] == messages[4]  # same bytes, same level
    assert len({messages[0], messages[1], messages[5]}) == 3
    assert " 12000000000 3\n" in ledger.read_text()  # three charges of epsilon 4


def test_ledger_accounts_decimal_epsilons_exactly(built, tmp_path):
    """Ten charges of 0.1 fill a budget of 1.0 exactly (producer/ledger.py's rule), the eleventh is refused."""
    from registry.device import device_config

    registry = parse_registry("metrics:\n  - name: tenth\n    description: d\n    owner: o\n    categories: [a, b, c]\n"
                              "    epsilon: 0.1\n")
    path = tmp_path / "dc.json"
    path.write_text(json.dumps(device_config(registry)))
    args = ["--config", path, "--metric", "tenth", "--out", tmp_path / "c", "--ledger", tmp_path / "l", "--budget", "1.0"]
    assert run_cli(args, ['"a"'] * 10).returncode == 0
    done = run_cli(args, ['"a"'])
    assert done.returncode == 1 and "spent 1," in done.stderr.decode(), done.stderr


# ------------------------------------------------------------------ upload: retries and idempotency
class _Stub:
    """A collector stand-in on 127.0.0.1 answering from a script: (status, headers, body) per request."""

    def __init__(self, answers):
        import http.server
        import threading

        stub = self
        self.answers, self.requests = list(answers), []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                import time

                body = self.rfile.read(int(self.headers["Content-Length"]))
                stub.requests.append((time.monotonic(), self.path, dict(self.headers), body))
                status, headers, doc = stub.answers.pop(0) if stub.answers else (202, {}, {"status": 202})
                raw = json.dumps(doc).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_upload_retries_with_the_same_idempotency_key_after_retry_after(config, tmp_path):
    stub = _Stub([(503, {"Retry-After": "1"}, {"status": 503, "reason": "kafka_unavailable"}),
                  (429, {"Retry-After": "1"}, {"status": 429, "reason": "rate_limited"})])
    try:
        done = run_cli(["--config", config, "--metric", "cat_small", "--collector", stub.url, "--max-upload-reports", "2",
                        "--token", "s3cret"], ['"home"', '"maps"', '"feed"'])
        assert done.returncode == 0, done.stderr
        assert "uploaded 3 reports of cat_small@1" in done.stderr.decode()
        times, paths, headers, bodies = zip(*stub.requests)
        assert len(stub.requests) == 4  # upload 1 three times (503, 429, 202), upload 2 once
        assert set(paths) == {"/v1/reports"}
        keys = [h["Idempotency-Key"] for h in headers]
        assert keys[0] == keys[1] == keys[2] != keys[3], "one key per upload, reused by its retries"
        assert all(len(k) == 32 and set(k) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
                   for k in keys)
        assert all(h["Content-Type"] == "application/vnd.ocms.wire-v1" and h["Authorization"] == "Bearer s3cret"
                   for h in headers)
        assert times[1] - times[0] >= 0.45 and times[2] - times[1] >= 0.45, "Retry-After honoured (jitter 0.5-1.0)"
        assert bodies[0] == bodies[1] == bodies[2] and len(bodies[0]) == 2 * 19 and len(bodies[3]) == 19
        sent = {k.lower() for h in headers for k in h}
        assert sent <= {"host", "accept", "content-type", "content-length", "idempotency-key", "authorization"}, sent
    finally:
        stub.close()


def test_upload_refused_is_permanent_exit_1_with_the_collectors_reason(config):
    stub = _Stub([(400, {}, {"status": 400, "reason": "unknown_fingerprint", "detail": "no such parameter set"})])
    try:
        done = run_cli(["--config", config, "--metric", "cat_small", "--collector", stub.url + "/"], ['"home"'])
        err = done.stderr.decode()
        assert done.returncode == 1, err
        assert "refused with HTTP 400 unknown_fingerprint: no such parameter set" in err
        assert len(stub.requests) == 1, "a 4xx is not retried"
    finally:
        stub.close()


def test_upload_gives_up_after_its_retries(config):
    stub = _Stub([(503, {"Retry-After": "0"}, {"status": 503, "reason": "queue_full"})] * 3)
    try:
        done = run_cli(["--config", config, "--metric", "cat_small", "--collector", stub.url, "--retries", "2",
                        "--max-backoff", "0.1"], ['"home"'])
        assert done.returncode == 1 and "gave up after 3 attempts, last: HTTP 503 queue_full" in done.stderr.decode()
    finally:
        stub.close()


def test_upload_gives_up_at_the_timeout(config):
    stub = _Stub([(503, {"Retry-After": "1"}, {"status": 503, "reason": "kafka_unavailable"})] * 100)
    try:
        start = time.monotonic()
        done = run_cli(["--config", config, "--metric", "cat_small", "--collector", stub.url, "--timeout", "1.5"],
                       ['"home"'])
        assert done.returncode == 1 and "not delivered within the --timeout" in done.stderr.decode(), done.stderr
        assert 1.0 <= time.monotonic() - start < 30
    finally:
        stub.close()


def test_discovery_uploads_carry_one_level_each(config):
    stub = _Stub([])
    try:
        done = run_cli(["--config", config, "--metric", "words_disc", "--collector", stub.url],
                       [line_of(v) for v in ["zebra", "abc", "a", "the"] * 25])
        assert done.returncode == 0, done.stderr
        levels = set()
        for _, _, _, body in stub.requests:  # 33-byte messages (F(2^64 - 59): 16 + 8 + 8 + 1 bytes)
            fingerprints = {body[i + 4:i + 12] for i in range(0, len(body), 33)}
            assert len(fingerprints) == 1, "one parameter set (level) per upload"
            levels |= fingerprints
        assert sum(len(b) for *_, b in stub.requests) == 100 * 33
        assert len(levels) == 4, "all four levels were drawn and uploaded" 
    finally:
        stub.close()


def test_library_exports_only_its_api_and_needs_no_allocator(built):
    import subprocess

    symbols = subprocess.run(["nm", "-D", "--defined-only", str(C_DIR / "libocms_client.so")], capture_output=True,
                             text=True, check=True).stdout.split()
    exported = sorted(s for s in symbols if s.startswith("ocms_"))
    header = (C_DIR / "include" / "ocms_client.h").read_text()
    assert exported and all(f"{name}(" in header for name in exported), exported
    assert "ocms_field_hash" not in exported
    assert CLI.exists()
    # nothing but libc's memory and string primitives, the OS CSPRNG and the compiler's runtime: no allocator, no I/O
    undefined = set(subprocess.run(["nm", "-u", str(C_DIR / "libocms_client.a")], capture_output=True, text=True,
                                   check=True).stdout.split()) - {"U"}
    external = {s for s in undefined if not s.startswith("ocms_") and not s.endswith(":")}
    assert external <= {"memcpy", "memset", "memcmp", "strlen", "getrandom", "getentropy", "__errno_location",
                        "__umodti3", "__cpu_model", "__cpu_indicator_init", "_GLOBAL_OFFSET_TABLE_"}, external
