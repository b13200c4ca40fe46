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


def test_the_c_cli_refuses_a_longitudinal_metric_rather_than_report_it_one_shot(tmp_path):
    from .c_client import run_cli

    make("all")
    config = tmp_path / "device-config.json"
    config.write_text(json.dumps(DOC["device_config"], ensure_ascii=False), encoding="utf-8")
    done = run_cli(["--config", config, "--metric", "cat_small", "--out", tmp_path / "out"], ['"home"'])
    assert done.returncode == 2 and b"longitudinal" in done.stderr
    assert not (tmp_path / "out").exists() or (tmp_path / "out").stat().st_size == 0
