"""The C client's longitudinal reports (issue 38): tests/vectors/longitudinal_v1.json replayed byte for byte
through ocms_longitudinal_privatize (producer/c/src/longitudinal.c), its thresholds checked, leaky ones refused."""

import json

import pytest

from .c_client import C_DIR, VECTORS, Driver, make

pytestmark = pytest.mark.integration  # builds and runs the C driver

DOC = json.loads((VECTORS / "longitudinal_v1.json").read_text(encoding="utf-8"))
CONFIGS = {m["name"]: m for m in DOC["device_config"]["metrics"]}


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    make("all", "test-tools")
    path = tmp_path_factory.mktemp("c") / "device-config.json"
    path.write_text(json.dumps(DOC["device_config"], ensure_ascii=False), encoding="utf-8")
    d = Driver(C_DIR / "build" / "ocms-c-driver")
    assert d.ask(op="load", path=str(path))["metrics"] == len(CONFIGS)
    yield d
    assert d.close()[0] == 0


def ask(driver, case, **override):
    memo = CONFIGS[case["metric"]]["longitudinal"]
    command = dict(op="longitudinal", metric=case["metric"], line=json.dumps(case["value"], ensure_ascii=False),
                   secret_hex=case["secret_hex"], random_hex=case["random_hex"],
                   lifetime_epsilon=memo["lifetime_epsilon"], memo_threshold=memo["memo_threshold"],
                   report_threshold=memo["report_threshold"])
    command.update(override)
    return driver.ask(**command)


@pytest.mark.parametrize("index", range(len(DOC["cases"])))
def test_every_vector_is_reproduced_byte_for_byte(driver, index):
    case = DOC["cases"][index]
    got = ask(driver, case)
    assert got.get("error") is None, got
    assert got["check"] == "ok"
    assert got["message_hex"] == case["message_hex"]
    assert got["used"] == len(case["random_hex"]) // 2  # exactly the recorded second-round bytes
    assert got["hashed"] == case["hashed"] and got["seen_key_hex"] == case["seen_key_hex"]
    assert {k: str(got[k]) if k != "z" else got[k] for k in ("a0", "a1", "z")} == case["report"]


def test_a_report_threshold_that_weakens_privacy_is_refused(driver):
    case = DOC["cases"][0]
    t2 = int(CONFIGS[case["metric"]]["longitudinal"]["report_threshold"])
    assert "report_threshold" in ask(driver, case, report_threshold=str(t2 + (t2 >> 20)))["check"]
    t1 = int(CONFIGS[case["metric"]]["longitudinal"]["memo_threshold"])
    assert ask(driver, case, memo_threshold=str(t1 // 2))["check"] != "ok"


def _capture(path):
    data, out = path.read_bytes(), []
    while data:
        n = int.from_bytes(data[:4], "big")
        out.append(data[4:4 + n])
        data = data[4 + n:]
    return out


def test_the_c_cli_reports_a_longitudinal_metric_with_its_ledger(tmp_path):
    """ocms-report-c --ledger: hash and memoized response from the ledger's secret (the Python device path agrees),
    eps_inf charged once per hashed value, nothing for repeats; without --ledger it refuses (nothing produced)."""
    from cms_core import longitudinal as L
    from cms_core.wire import decode_message
    from registry.loader import parse_registry
    from tests.vectors.make_longitudinal_vectors import REGISTRY

    from .c_client import run_cli

    make("all")
    config = tmp_path / "device-config.json"
    config.write_text(json.dumps(DOC["device_config"], ensure_ascii=False), encoding="utf-8")
    done = run_cli(["--config", config, "--metric", "cat_small", "--out", tmp_path / "none"], ['"home"'])
    assert done.returncode == 2 and b"--ledger" in done.stderr and not (tmp_path / "none").exists()

    ledger = tmp_path / "ledger.txt"
    base = ["--config", config, "--metric", "cat_small", "--ledger", ledger, "--budget", "10"]
    done = run_cli(base + ["--out", tmp_path / "a"], ['"home"'] * 20)
    assert done.returncode == 0, done.stderr
    text = ledger.read_text()
    secret = bytes.fromhex(next(line.split()[1] for line in text.splitlines() if line.startswith("secret ")))
    assert sum(line.startswith("seen ") for line in text.splitlines()) == 1
    spend = [line.split() for line in text.splitlines() if line.startswith("spend ")]
    assert [int(row[3]) for row in spend] == [2_000_000_000]  # eps_inf = 2, once

    lp = parse_registry(REGISTRY).metric("cat_small").latest.longitudinal
    reports = [decode_message(m, {lp.report.fingerprint: lp.report})[1].to_reports()[0] for m in _capture(tmp_path / "a")]
    assert len(reports) == 20 and {(r.a0, r.a1) for r in reports} == {L.device_hash(lp, secret)}
    y1 = L.memoized_response(lp, secret, L.hashed_value(lp, secret, 0))
    assert max(sum(r.z == z for r in reports) for z in range(lp.g)) < 20 or all(r.z == y1 for r in reports)

    # a second run: the same secret and hash, "home" is free; every category at most g hashed values in all
    done = run_cli(base + ["--out", tmp_path / "b"], ['"home"', '"café"', '"maps"', '"search"'] * 3)
    assert done.returncode == 0, done.stderr
    text = ledger.read_text()
    seen = sum(line.startswith("seen ") for line in text.splitlines())
    expected = {L.hashed_value(lp, secret, v) for v in (0, 1, 2, 11)}
    assert seen == len(expected) <= lp.g
    spent = sum(int(row.split()[3]) for row in text.splitlines() if row.startswith("spend "))
    assert spent == 2_000_000_000 * len(expected)
