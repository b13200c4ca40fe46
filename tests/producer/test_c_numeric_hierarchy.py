"""The C client's numeric metrics reported as hierarchical histograms (issue 40): every case of
tests/vectors/numeric_hierarchy_v1.json through the example's config reader and the library (ocms_tree_draw, then
ocms_privatize with the level's parameters; and the one-call ocms_report_tree) byte for byte, a damaged "hierarchy"
entry refused by name, and ocms-report-c's reports of a tree read back by ``ocms estimate`` within the tree's
intervals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.support.trees import check_capture_of_size_tree

from .c_client import C_DIR, VECTORS, Driver, make, run_cli, vector_fixtures

pytestmark = pytest.mark.integration  # builds and runs the C driver and CLI

DOC = json.loads((VECTORS / "numeric_hierarchy_v1.json").read_text(encoding="utf-8"))
CASES = DOC["cases"]


config, driver = vector_fixtures(DOC, "c-tree")


def test_every_tree_vector_byte_for_byte(driver):
    """Both paths (the steps, and ocms_report_tree in one call), buffered and not, on the recorded bytes."""
    for case in CASES:
        for buffered in (False, True):
            answer = driver.ask(op="report", metric=case["metric"], line=json.dumps(str(case["value"])),
                                random_hex=case["random_hex"], buffered=buffered)
            assert "error" not in answer, (case, answer)
            assert answer["message_hex"] == answer["device_path_hex"] == case["message_hex"], case
            assert answer["level"] == answer["device_path_level"] == case["level"], case
            assert answer["used"] == len(case["random_hex"]) // 2, case  # exactly the recorded bytes
            assert answer["z"] == case["report"]["z"] and answer["a0"] == case["report"]["a0"], case


def test_a_damaged_hierarchy_entry_is_refused_naming_it(driver):
    entry = next(m for m in DOC["device_config"]["metrics"] if m["name"] == "size_tree")
    cases = [
        (lambda e: e["hierarchy"]["levels"][1].__setitem__("dictionary_size", "11"), "levels[1].fingerprint"),
        (lambda e: e["hierarchy"].__setitem__("branching", 3), "smallest h"),
        (lambda e: e["hierarchy"]["levels"][0].__setitem__("fingerprint", e["hierarchy"]["levels"][1]["fingerprint"]),
         "levels[0].fingerprint"),
        (lambda e: e.pop("hierarchy"), "hierarchy"),
        # the spans the config states are checked, not computed over (issue 40): 40 buckets at branching 4 span 16, 4, 1
        (lambda e: e["hierarchy"]["levels"][1].__setitem__("span", 5),
         "hierarchy.levels[1].span: states 5, but level 2 of 3 at branching 4 spans 4 buckets"),
        (lambda e: e["hierarchy"]["levels"][0].__setitem__("span", 4), "hierarchy.levels[0].span: states 4"),
        (lambda e: e["hierarchy"]["levels"][2].pop("span"), "hierarchy.levels[2].span: missing"),
    ]
    for damage, says in cases:
        broken = json.loads(json.dumps(entry))
        damage(broken)
        answer = driver.ask(op="load_text", text=json.dumps({"format": 1, "metrics": [broken]}))
        assert says in answer.get("error", ""), (says, answer)
    assert "error" not in driver.ask(op="load_text", text=json.dumps({"format": 1, "metrics": [entry]}))


def test_the_cli_reports_a_tree_that_ocms_estimate_reads_back(config, tmp_path, capsys):
    """6,000 numbers of size_tree (40 buckets, three levels) through ocms-report-c (its CSPRNG: no seed): each level
    about a third of the reports, the raw CDF at every edge and the mean within 4.5 sd of the truth (the tree's exact
    noise); the negative control, a fleet twice as large, more than 6 sd away."""
    values = np.random.default_rng(6).lognormal(math.log(8), 0.8, 6000)
    out = tmp_path / "reports.ocap"
    done = run_cli(["--config", config, "--metric", "size_tree", "--out", out], [json.dumps(repr(float(v)))
                                                                                  for v in values])
    assert done.returncode == 0, done.stderr
    check_capture_of_size_tree(capsys, tmp_path, out, values)


def test_tree_vectors_and_damaged_trees_under_the_sanitizers(config):
    """AddressSanitizer and UBSan over every tree vector and 300 seeded damaged "hierarchy" entries (each loaded or
    refused with a one-line reason, never a crash)."""
    import random

    from .c_client import sanitizer_env
    from .test_c_client_sanitizers import _clean

    make("sanitize")
    driver = Driver(C_DIR / "build-asan" / "ocms-c-driver", env=sanitizer_env())
    rng = random.Random(40)
    junk = [None, True, -1, 0, 1, 3, 17, 2**64, "", "x" * 300, "18446744073709551616", [], {}, "7 "]
    try:
        assert "error" not in driver.ask(op="load", path=str(config))
        for case in CASES:
            answer = driver.ask(op="report", metric=case["metric"], line=json.dumps(str(case["value"])),
                                random_hex=case["random_hex"])
            assert answer.get("message_hex") == case["message_hex"], answer
        for _ in range(300):
            doc = json.loads(json.dumps(DOC["device_config"]))
            tree = rng.choice(doc["metrics"])["hierarchy"]
            target = rng.choice([tree] + tree["levels"])
            target[rng.choice(sorted(target))] = rng.choice(junk)
            if rng.random() < 0.2 and isinstance(tree["levels"], list) and tree["levels"]:
                tree["levels"].pop(rng.randrange(len(tree["levels"])))
            answer = driver.ask(op="load_text", text=json.dumps(doc))
            assert "error" in answer or answer.get("metrics") == 3, answer
    finally:
        code, err = driver.close()
    _clean(err)
    assert code == 0, err[-4000:]


def test_the_cli_memoizes_a_trees_report_by_its_bucket_level_included(config, tmp_path):
    """--memoize: a number of a bucket seen this period re-sends that report (its level too), free; another bucket
    is a new report (latency_tree at epsilon 2: two charges)."""
    from infra.capture import CaptureReader

    out, ledger = tmp_path / "t.capture", tmp_path / "ledger.txt"
    values = ["42", "45.5", "4000", "42", "49", "4000"]  # buckets 4, 4, 9, 4, 4, 9
    done = run_cli(["--config", config, "--metric", "latency_tree", "--out", out, "--ledger", ledger, "--budget",
                    "100", "--memoize"], [json.dumps(v) for v in values])
    assert done.returncode == 0, done.stderr
    messages = list(CaptureReader(out))
    assert messages[0] == messages[1] == messages[3] == messages[4] and messages[2] == messages[5]
    assert " 4000000000 2\n" in ledger.read_text()  # two charges of epsilon 2: bucket 9 is a report of its own
