"""The C library's Hybrid means (issue 40): every case of tests/vectors/numeric_mean_v1.json through ocms_mean_draw
on the recorded bytes, buffered and not (part 0: its z from exactly the part's and the Hybrid report's bytes; any
other part: only the part drawn), the config's vector file loaded by the example's reader (it ignores ``mean``),
and a damaged mean entry or a NaN refused. The example's reader and ocms_report_* do not frame Hybrid reports yet."""

from __future__ import annotations

import json

import pytest

from .c_client import VECTORS, vector_fixtures

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
