"""The C client's Hybrid means (issue 40): every case of tests/vectors/numeric_mean_v1.json through ocms_mean_draw
on the recorded bytes, buffered and not (part 0: its z from exactly the part's and the Hybrid report's bytes; any
other part: only the part drawn), and through the example's config reader and the device path (ocms_mean_draw then
the carrier's framing, and the one-call ocms_report_mean) byte for byte as the Python client reports them; a damaged
``mean`` entry refused by the reader naming its field, a damaged ocms_mean or a NaN refused by the library; and
ocms-report-c's reports of a metric with a mean read back by ``ocms estimate`` (the mean within its interval), its
--memoize keyed by the bucket (a Hybrid report re-sent too), under the sanitizers too."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from .c_client import C_DIR, VECTORS, Driver, make, run_cli, sanitizer_env, vector_fixtures

pytestmark = pytest.mark.integration  # builds and runs the C driver

DOC = json.loads((VECTORS / "numeric_mean_v1.json").read_text(encoding="utf-8"))
MEANS = {m["name"]: m["mean"] for m in DOC["device_config"]["metrics"]}

config, driver = vector_fixtures(DOC, "c-mean")


def part_bytes(parts: int, random_hex: str) -> int:
    """The bytes below(parts) took from the recorded stream (the randomness contract: rejection sampling)."""
    if parts == 1:
        return 0
    bits = (parts - 1).bit_length()
    width, data, at = (bits + 7) // 8, bytes.fromhex(random_hex), 0
    while int.from_bytes(data[at:at + width], "big") & ((1 << bits) - 1) >= parts:
        at += width
    return at + width


def test_every_mean_vector_byte_for_byte(driver):
    for case in DOC["cases"]:
        mean = MEANS[case["metric"]]
        for buffered in (False, True):
            answer = driver.ask(op="mean", mean=mean, value=case["value"], random_hex=case["random_hex"],
                                buffered=buffered)
            assert "error" not in answer, (case, answer)
            if case["part"] == 0:
                assert answer["is_mean"] and answer["z"] == case["z"], (case, answer)
                assert answer["used"] == len(case["random_hex"]) // 2, case  # exactly the recorded bytes
            else:
                assert not answer["is_mean"] and answer["used"] == part_bytes(mean["parts"], case["random_hex"])


@pytest.mark.parametrize("damage, says", [
    (lambda m: m.__setitem__("grid", 1023), "grid must be even"),
    (lambda m: m.__setitem__("window", 0), "window"),
    (lambda m: m.__setitem__("parts", 0), "parts"),
    (lambda m: m.__setitem__("duchi_step", "18446744073709551615"), "below 2^64"),
    (lambda m: m.__setitem__("upper", m["lower"]), "lower < upper"),
])
def test_a_damaged_mean_is_refused_naming_it(driver, damage, says):
    broken = json.loads(json.dumps(MEANS["startup_mean"]))
    damage(broken)
    answer = driver.ask(op="mean", mean=broken, value=1.0, random_hex="00" * 64)
    assert says in answer.get("error", ""), answer


def test_nan_is_refused_before_any_draw(driver):
    answer = driver.ask(op="mean", mean=MEANS["startup_mean"], value="NaN", random_hex="00" * 64)
    assert answer["error"] and answer["used"] == 0 and not answer["is_mean"]


def test_the_reader_reads_every_mean_entry(driver):
    """The old reader ignored ``mean`` (0 of 4 read): a metric with a mean then reported its histogram only."""
    assert driver.ask(op="load_text", text=json.dumps(DOC["device_config"]))["means"] == 4


def test_every_vector_through_the_reader_and_the_device_path_byte_for_byte(driver):
    """The steps (ocms_mean_draw, then the carrier's framing or the histogram's report) and ocms_report_mean in one
    call, buffered and not, on the recorded bytes: the Python client's message (the vector's), every byte drawn."""
    assert driver.ask(op="load_text", text=json.dumps(DOC["device_config"]))["means"] == 4
    for case in DOC["cases"]:
        for buffered in (False, True):
            answer = driver.ask(op="report", metric=case["metric"], line=json.dumps(str(case["value"])),
                                random_hex=case["random_hex"], buffered=buffered)
            assert "error" not in answer, (case, answer)
            assert answer["message_hex"] == answer["device_path_hex"] == case["message_hex"], (case, answer)
            assert answer["used"] == len(case["random_hex"]) // 2, case
            if case["part"] == 0:
                assert answer["z"] == case["z"] and answer["device_path_level"] == 0, (case, answer)


def _mean_entry(doc: dict, name: str = "latency_split") -> dict:
    return next(m for m in doc["metrics"] if m["name"] == name)["mean"]


DAMAGED = [
    (lambda m: m.__setitem__("fingerprint", "0" * 16), "metrics[0].mean.fingerprint: does not match"),
    (lambda m: m.__setitem__("keep_threshold", "30413594464537156000"), "mean.keep_threshold"),
    (lambda m: m.__setitem__("keep_threshold", str(int(m["keep_threshold"]) * 2)), "mean.keep_threshold"),
    (lambda m: m.__setitem__("m", 1646), "mean.keep_threshold: 30413594464537155 does not belong to epsilon 1 and m 1646"),
    (lambda m: (m.__setitem__("window", 620)), "mean.m, dictionary_size: the carrier is direct RR over"),
    (lambda m: m.__setitem__("grid", 1023), "mean: mean: grid must be even"),
    (lambda m: m.__setitem__("window", 0), "mean.window: must be an integer in [1, 1024]"),
    (lambda m: m.__setitem__("parts", 0), "mean.parts: must be an integer in [1, 65536]"),
    (lambda m: m.pop("pm_keep"), "mean.pm_keep: missing or not a string"),
    (lambda m: m.__setitem__("pm_share", 7258228221132386304), "mean.pm_share: missing or not a string"),
    (lambda m: m.__setitem__("duchi_low", "18446744073709551616"), "mean.duchi_low: above 2^64 - 1"),
    (lambda m: m.__setitem__("duchi_step", "18446744073709551615"), "below 2^64"),
    (lambda m: m.__setitem__("lower", 1.0), "mean.lower, upper: must be the numeric entry's"),
    (lambda m: m.__setitem__("mechanism", "ocms"), "mean.mechanism: must be \"direct\""),
    (lambda m: m.__setitem__("field", {"kind": "prime", "order": "1663"}), "mean.fingerprint"),
    (lambda m: m.__setitem__("dictionary_size", "1646"), "mean: direct randomized response has m = d"),
]


@pytest.mark.parametrize("damage, says", DAMAGED)
def test_a_damaged_mean_entry_is_refused_by_the_reader_naming_it(driver, damage, says):
    """Each of these loaded without complaint in the old reader (it never read ``mean``)."""
    doc = json.loads(json.dumps(DOC["device_config"]))
    damage(_mean_entry(doc))
    answer = driver.ask(op="load_text", text=json.dumps(doc))
    assert says in answer.get("error", ""), answer


def test_a_mean_entry_on_a_metric_that_is_not_numeric_is_refused(driver):
    doc = json.loads(json.dumps(DOC["device_config"]))
    entry = next(m for m in doc["metrics"] if m["name"] == "latency_split")
    entry.pop("numeric")
    answer = driver.ask(op="load_text", text=json.dumps(doc))
    assert "metrics[0].mean: an object, on a numeric metric" in answer.get("error", ""), answer


def _estimate(capsys, tmp_path, capture) -> dict:
    from tests.registry.helpers import run, write
    from tests.vectors.make_numeric_mean_vectors import REGISTRY

    code, text, err = run(capsys, "estimate", "--registry", str(write(tmp_path, REGISTRY)), "--metric",
                          "latency_split", str(capture))
    assert code == 0 and "fingerprint" not in err, err
    return json.loads(text)


def test_the_cli_reports_a_mean_that_ocms_estimate_reads_back(config, tmp_path, capsys):
    """6,000 log-normal numbers of latency_split (2 parts) through ocms-report-c (its CSPRNG: no seed): about half
    of the reports Hybrid ones (binomial sd 39), all decoded, the Hybrid mean within 4.5 of its stated sd of the
    truth; the negative control, the fleet 2,000 higher (about 10 sd), more than 6 sd away."""
    from tests.support.trees import mean_z

    values = np.random.default_rng(40).lognormal(math.log(300), 0.8, 6000)
    out = tmp_path / "reports.ocap"
    done = run_cli(["--config", config, "--metric", "latency_split", "--out", out],
                   [json.dumps(repr(float(v))) for v in values])
    assert done.returncode == 0, done.stderr
    doc = _estimate(capsys, tmp_path, out)
    mean = doc["histogram"]["mean"]
    assert doc["messages"] == 6000 and doc["rejected"] == {} and doc["n"] + mean["reports"] == 6000
    assert abs(mean["reports"] - 3000) < 4.5 * math.sqrt(6000 * 0.25) and mean["mechanism"] == "hybrid"
    truth = float(np.clip(values, 0, 10000).mean())
    assert abs(mean_z(doc["histogram"], truth)) < 4.5, (mean, truth)
    assert abs(mean_z(doc["histogram"], float(np.clip(values + 2000, 0, 10000).mean()))) > 6


def test_the_cli_memoizes_by_the_bucket_a_hybrid_report_included(config, tmp_path):
    """--memoize: a number of a bucket seen this period re-sends that report (a Hybrid one as a histogram one),
    free; startup_mean has one part (every report Hybrid), latency_split two; one charge per bucket (epsilon 4, 1)."""
    from infra.capture import CaptureReader

    for name, values, charged in (("startup_mean", ["-3", "-40", "7", "-3.5", "49"], " 8000000000 2\n"),
                                  ("latency_split", ["42", "45.5", "4000", "42", "49", "4000"], " 2000000000 2\n")):
        out, ledger = tmp_path / f"{name}.capture", tmp_path / f"{name}.ledger"
        done = run_cli(["--config", config, "--metric", name, "--out", out, "--ledger", ledger, "--budget", "100",
                        "--memoize"], [json.dumps(v) for v in values])
        assert done.returncode == 0, done.stderr
        messages = list(CaptureReader(out))
        if name == "startup_mean":  # buckets 0, 0, 1, 0, 1: every message under the mean's fingerprint
            assert messages[0] == messages[1] == messages[3] and messages[2] == messages[4]
            assert {m[4:12].hex() for m in messages} == {MEANS[name]["fingerprint"]}
        else:  # buckets 3, 3, 9, 3, 3, 9
            assert messages[0] == messages[1] == messages[3] == messages[4] and messages[2] == messages[5]
        assert charged in ledger.read_text(), ledger.read_text()


def test_the_cli_refuses_a_nan_before_anything_is_drawn(config, tmp_path):
    done = run_cli(["--config", config, "--metric", "startup_mean", "--out", tmp_path / "x.ocap"],
                   [json.dumps("1"), json.dumps("NaN")])
    assert done.returncode == 2 and b"line 2" in done.stderr and not (tmp_path / "x.ocap").exists()


def test_mean_vectors_and_damaged_means_under_the_sanitizers(config, tmp_path):
    """AddressSanitizer and UBSan over every mean vector (both paths), 300 seeded damaged ``mean`` entries (each
    loaded or refused with a one-line reason, never a crash), and ocms-report-c's memoized reports of a tree with a
    mean (payload_tree_mean: 4 parts)."""
    from .test_c_client_sanitizers import _clean

    make("sanitize")
    driver = Driver(C_DIR / "build-asan" / "ocms-c-driver", env=sanitizer_env())
    rng = random.Random(40)
    junk = [None, True, -1, 0, 1, 2, 1023, 2**20 + 2, 2**64, "", "x" * 300, "18446744073709551616", "-1", [], {},
            "7 ", 1e308, "1657"]
    try:
        assert driver.ask(op="load", path=str(config))["means"] == 4
        for case in DOC["cases"]:
            answer = driver.ask(op="report", metric=case["metric"], line=json.dumps(str(case["value"])),
                                random_hex=case["random_hex"])
            assert answer.get("message_hex") == answer.get("device_path_hex") == case["message_hex"], answer
        for _ in range(300):
            doc = json.loads(json.dumps(DOC["device_config"]))
            mean = rng.choice(doc["metrics"])["mean"]
            target = mean["field"] if rng.random() < 0.15 else mean
            target[rng.choice(sorted(target))] = rng.choice(junk)
            answer = driver.ask(op="load_text", text=json.dumps(doc))
            assert "error" in answer or answer.get("means") == 4, answer
    finally:
        code, err = driver.close()
    _clean(err)
    assert code == 0, err[-4000:]
    done = run_cli(["--config", config, "--metric", "payload_tree_mean", "--out", tmp_path / "t.ocap", "--ledger",
                    tmp_path / "ledger", "--budget", "1000", "--memoize"],
                   [json.dumps(str(v)) for v in [0.5, 3, 3, 1e6, "Infinity", 700.25] * 20],
                   binary=C_DIR / "build-asan" / "ocms-report-c", env=sanitizer_env())
    _clean(done.stderr.decode())
    assert done.returncode == 0 and b"wrote 120 reports" in done.stderr, done.stderr
