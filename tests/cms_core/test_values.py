"""Values in JSON: one string type, exact for every value (issue 18)."""

import json as _json

import pytest

from cms_core.errors import InvalidValueError
from cms_core.params import OCMSParams
from cms_core.values import value_from_json, value_to_json


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
