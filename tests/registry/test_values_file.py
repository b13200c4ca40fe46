"""Values files hold any value exactly (issue 18): formats, round trips, errors naming the line."""

import json
import re

import pytest

from cms_core import OCMSParams
from cms_core.errors import InvalidParameterError
from fleet.datasets import parse_dataset
from registry.values_file import (ValuesFileError, count_values, read_raw_values, read_values_file, tracked_from_file,
                                  write_values_file)

STRINGS = OCMSParams.build(2.0, value_domain="string")
INTEGERS = OCMSParams.build(2.0, 2**64)
AWKWARD_STRINGS = [" a", "a", "a ", "", "line\nbreak", "cr\r\nlf", "tab\there", "caf\u00e9", "cafe\u0301",
                   "\U0001f600", '"quoted"', "\u2028", "\ufeffbom", "[1]", "7"]
AWKWARD_INTEGERS = [0, 7, 2**53 + 1, 2**63, 2**64 - 1]


@pytest.mark.parametrize("suffix", [".jsonl", ".ndjson", ".json"])
def test_awkward_strings_round_trip_exactly(tmp_path, suffix):
    path = tmp_path / f"values{suffix}"
    write_values_file(path, AWKWARD_STRINGS)
    assert read_values_file(path, STRINGS) == AWKWARD_STRINGS
    tracked = tracked_from_file(path, STRINGS)
    assert tracked.all_labels() == AWKWARD_STRINGS  # NFC and NFD are two values, in file order
    assert count_values(path) == len(AWKWARD_STRINGS)


def test_awkward_integers_round_trip_exactly_as_decimal_strings(tmp_path):
    path = tmp_path / "ints.jsonl"
    write_values_file(path, AWKWARD_INTEGERS)
    lines = path.read_text().splitlines()
    assert lines[-1] == '"18446744073709551615"' and lines[2] == '"9007199254740993"'
    assert read_values_file(path, INTEGERS) == AWKWARD_INTEGERS
    # JSON numbers are read exactly too (Python's json keeps big integers)
    path.write_text("\n".join(str(v) for v in AWKWARD_INTEGERS) + "\n")
    assert read_values_file(path, INTEGERS) == AWKWARD_INTEGERS


def test_plain_lines_where_unambiguous(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_bytes("\ufeffNew York\r\ncaf\u00e9\n\U0001f600".encode())  # BOM, CRLF, no final newline
    assert read_values_file(path, STRINGS) == ["New York", "caf\u00e9", "\U0001f600"]
    path.write_text("18446744073709551615\n9007199254740993\n0\n")
    assert read_values_file(path, INTEGERS) == [2**64 - 1, 2**53 + 1, 0]


@pytest.mark.parametrize("text, line, fragment", [
    ("a\n\nb\n", 2, "is empty"),
    (" a\nb\n", 1, "leading or trailing whitespace"),
    ("a\nb \n", 2, "leading or trailing whitespace"),
    ("a\n\"b\"\n", 2, "starts with a quote"),
    ("a\x0bb\n", 1, "U+000B"),
    ("a\u2028b\n", 1, "U+2028"),
])
def test_ambiguous_plain_lines_are_refused_naming_the_line(tmp_path, text, line, fragment):
    path = tmp_path / "plain.txt"
    path.write_text(text, encoding="utf-8", newline="")
    with pytest.raises(ValuesFileError, match=f"line {line}: .*{re.escape(fragment)}") as info:
        read_raw_values(path)
    assert ".jsonl" in str(info.value) or "JSON" in str(info.value)


@pytest.mark.parametrize("name, text, params, fragment", [
    ("d.jsonl", '" a"\n"b"\n" a"\n', STRINGS, 'line 3: duplicate value " a" (already on line 1)'),
    ("d.txt", "5\n007\n7\n", INTEGERS, 'line 3: duplicate value "7" (already on line 2 as "007")'),
    ("d.json", '["x", "x"]', STRINGS, 'item 2: duplicate value "x" (already on item 1)'),
    ("b.jsonl", '"a"\n{"v": 1}\n', STRINGS, "line 2: {\"v\": 1} is not a value"),
    ("b.jsonl", '"a"\n"b\n', STRINGS, "line 2: not a JSON value"),
    ("b.jsonl", "true\n", INTEGERS, "line 1: true is not a value"),
    ("i.jsonl", '"5"\n"-1"\n', INTEGERS, "line 2: value '-1': not a non-negative decimal integer"),
    ("i.txt", "5\n1e3\n", INTEGERS, "line 2: value '1e3'"),
    ("i.jsonl", '"18446744073709551616"\n', INTEGERS, "line 1: value 18446744073709551616: outside the dictionary"),
    ("s.jsonl", '"a"\n7\n', STRINGS, "line 2: value 7: the string domain takes JSON strings"),
    ("e.jsonl", "\n  \n", STRINGS, "holds no values"),
    ("a.json", '{"a": 1}', STRINGS, "one JSON array"),
])
def test_bad_values_files_name_file_line_and_value(tmp_path, name, text, params, fragment):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValuesFileError) as info:
        read_values_file(path, params)
    assert fragment in str(info.value) and str(path) in str(info.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(ValuesFileError, match="cannot read"):
        read_raw_values(tmp_path / "missing.jsonl")
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"a\n\xff\n")
    with pytest.raises(ValuesFileError, match="not UTF-8"):
        read_raw_values(binary)
    with pytest.raises(ValuesFileError, match="name the file \\*.jsonl"):
        write_values_file(tmp_path / "out.txt", ["a"])


def test_worker_setting_names_the_variable(tmp_path):
    import argparse

    from registry.flags import METRIC_SETTINGS, metrics_from_args

    path = tmp_path / "t.jsonl"
    path.write_text('" a"\n" a"\n')
    args = argparse.Namespace(registry=None, **{s.name: None for s in METRIC_SETTINGS})
    with pytest.raises(InvalidParameterError) as info:
        metrics_from_args(args, {"OCMS_EPSILON": "2", "OCMS_STRINGS": "1", "OCMS_TRACKED_FILE": str(path)})
    assert info.value.name == "OCMS_TRACKED_FILE" and 'line 2: duplicate value " a"' in str(info.value)


def test_dataset_file_reads_json_lines_exactly(tmp_path):
    path = tmp_path / "fleet.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in [" a", "a", "a", "", "line\nbreak"]))
    ds = parse_dataset(f"file:{path}")
    assert ds.labels == ("", " a", "a", "line\nbreak")
    big = tmp_path / "big.jsonl"
    write_values_file(big, [2**64 - 1, 2**53 + 1, 2**53 + 1])
    with big.open("a") as f:
        f.write('"0018446744073709551615"\n')  # the same integer, spelled with leading zeros
    ds = parse_dataset(f"file:{big}")  # beyond 2^32: decimal labels, sent as the integers they spell
    assert sorted(int(x) for x in ds.labels) == [2**53 + 1, 2**64 - 1]


def tracking_version(tmp_path, domain: str, name: str):
    """The version of a one-metric registry (``domain``) whose tracked values are the file ``name``."""
    from registry import load_registry

    (tmp_path / "r.yaml").write_text(f"metrics:\n  - name: m\n    description: d\n    owner: o\n    {domain}\n"
                                     f"    epsilon: 2\n    tracked: {{file: {name}}}\n", encoding="utf-8")
    return load_registry(tmp_path / "r.yaml").metric("m").latest


@pytest.mark.parametrize("name, text", [
    ("t.jsonl", '"ATL"\n\n"caf\\u00e9"\n"N725MQ"\n'),
    ("t.json", '["ATL", "caf\\u00e9", "N725MQ"]'),
    ("t.txt", "ATL\r\ncaf\u00e9\nN725MQ"),
])
def test_a_values_file_means_the_same_to_the_registry_and_to_the_flags(tmp_path, name, text):
    """Issue 26: one grammar. The registry's tracked: {file: ...} and --tracked-file read a file alike."""
    (tmp_path / name).write_text(text, encoding="utf-8", newline="")
    version = tracking_version(tmp_path, "strings: true", name)
    assert version.tracked_names() == ["ATL", "caf\u00e9", "N725MQ"]
    assert tracked_from_file(tmp_path / name, STRINGS).all_labels() == version.tracked_names()


def test_integers_in_json_lines_are_read_alike_as_numbers_or_digits(tmp_path):
    (tmp_path / "i.jsonl").write_text('7\n"18446744073709551615"\n', encoding="utf-8")
    version = tracking_version(tmp_path, "integers: 2^64", "i.jsonl")
    assert version.tracked.values == (7, 2**64 - 1)
    assert read_values_file(tmp_path / "i.jsonl", INTEGERS) == [7, 2**64 - 1]


def test_every_bad_line_is_named_up_to_ten(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(f"x{i}\n" for i in range(25)) + '"ok"\n', encoding="utf-8")
    with pytest.raises(ValuesFileError) as info:
        read_raw_values(path)
    assert [where for where, _ in info.value.problems] == [f"line {i}" for i in range(1, 11)]
    assert info.value.more == 15 and info.value.good.items == ("ok",)
    assert str(info.value).startswith(f"{path} line 1: not a JSON value") and "(and 24 more bad lines)" in str(info.value)
