"""Values in JSON: one string type, exact for every value (issue 18)."""

import json as _json

import pytest

from cms_core.errors import InvalidValueError
from cms_core.params import OCMSParams
from cms_core.values import value_from_json, value_record, value_to_json


@pytest.mark.parametrize("value", [0, 1, 2**53 - 1, 2**53 + 1, 2**63, 2**64 - 1])
def test_integer_values_round_trip_json_exactly(value):
    params = OCMSParams.build(epsilon=2.0, dictionary_size=2**64)
    text = _json.loads(_json.dumps(value_to_json(value)))
    assert text == str(value)
    assert value_from_json(params, text) == value


@pytest.mark.parametrize("value", ["", " a", "a ", "line\nbreak", "caf\u00e9", "cafe\u0301", "\U0001f600"])
def test_string_values_round_trip_json_exactly(value):
    params = OCMSParams.build(epsilon=2.0, value_domain="string")
    assert value_from_json(params, _json.loads(_json.dumps(value_to_json(value)))) == value


@pytest.mark.parametrize("bad", ["-1", "1e3", " 5", "0x10", "", True, 1.5, "9" * 5000, "1" + "0" * 40])
def test_integer_json_values_reject_non_decimal_text(bad):
    params = OCMSParams.build(epsilon=2.0, dictionary_size=2**64)
    with pytest.raises(InvalidValueError):
        value_from_json(params, bad)


# ------------------------------------------------ values that are not whole characters (issue 24, section 1)

CAFE_CUT = "café".encode()[:4]  # level 4 of café: b"caf\xc3", inside é
TOWER_CUT = "ab東京タワー東京".encode()[:16]  # max_length 16 cuts ー after two of its three bytes


@pytest.mark.parametrize("raw, text, cut", [
    (CAFE_CUT, "caf\ufffd", True),
    (TOWER_CUT, "ab東京タワ\ufffd", True),
    ("🎉".encode()[:3], "\ufffd", True),
    (b"\xffab", "\ufffdab", False),  # not UTF-8, but not cut at the end either
    (b"\xffab\xe6", "\ufffdab\ufffd", True),
])
def test_bytes_that_are_not_whole_characters_are_text_plus_their_exact_bytes(raw, text, cut):
    record = value_record(raw)
    assert record == {"value": text, "bytes_hex": raw.hex(), "cut_inside_character": cut}
    assert bytes.fromhex(record["bytes_hex"]) == raw  # the exact bytes are recoverable
    encoded = _json.dumps(record, ensure_ascii=False).encode("utf-8")  # raised UnicodeEncodeError before
    assert _json.loads(encoded.decode("utf-8", errors="strict")) == record


@pytest.mark.parametrize("value", ["café", "naïve", "東京", "🎉", "", "café".encode(), 7])
def test_whole_values_are_one_field_as_before(value):
    assert value_record(value) == {"value": value_to_json(value)}
    assert value_record(value, "prefix") == {"prefix": value_to_json(value)}


def test_value_to_json_never_yields_a_lone_surrogate():
    for raw in (CAFE_CUT, TOWER_CUT, b"\xed\xa0\x80", bytes(range(256))):
        value_to_json(raw).encode("utf-8")  # strict: no lone surrogate (surrogateescape gave "caf\udcc3")


def test_a_string_with_a_lone_surrogate_is_refused_not_fingerprinted():
    params = OCMSParams.build(epsilon=2.0, value_domain="string")
    with pytest.raises(InvalidValueError, match="lone surrogate"):
        value_from_json(params, _json.loads('"caf\\udcc3"'))
