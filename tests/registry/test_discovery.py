"""The registry's optional discovery: block (issue 15): accepted shapes, and every mistake located."""

from __future__ import annotations

import pytest

from cms_core.discovery import UTF8
from registry import RegistryValidationError

from .helpers import SCREENS, TYPED_WORDS, line_of, load, single_problem

WORDS = "metrics:\n" + TYPED_WORDS + """\
    discovery:
      alphabet: "abcdefghijklmnopqrstuvwxyz'"
      max_length: 12
  - name: build_id
    description: Build ids
    owner: release
    integers: 2^64
    tracked: ["1", "2"]
    epsilon: 2
    discovery: {bits_per_level: 8}
""" + SCREENS


def test_a_discovery_block_gives_each_version_its_levels(tmp_path):
    from registry.discovery import discovery_of

    reg = load(tmp_path, WORDS)
    words = discovery_of(reg.metric("typed_words").latest)
    assert words.domain.alphabet == "abcdefghijklmnopqrstuvwxyz'" and words.domain.levels == 12
    assert words.params_by_level[0].binding == "typed_words@1/level1" and words.params_by_level[0].epsilon == 4
    assert words.level_of(words.params_by_level[4].fingerprint) == 5
    # Level fingerprints are not the metric's own: ordinary reports and discovery reports never mix.
    assert reg.by_fingerprint(words.params_by_level[0].fingerprint) is None
    build = discovery_of(reg.metric("build_id").latest)
    assert (build.domain.bits, build.domain.bits_per_level, build.domain.levels) == (64, 8, 8)
    assert reg.metric("build_id").latest.describe()["discovery"]["levels"] == 8
    with pytest.raises(RegistryValidationError, match="declares no 'discovery:' block"):
        discovery_of(reg.metric("screens").latest)


def test_utf8_is_the_default_alphabet(tmp_path):
    reg = load(tmp_path, WORDS.replace('      alphabet: "abcdefghijklmnopqrstuvwxyz\'"\n', ""))
    assert reg.metric("typed_words").latest.discovery.alphabet == UTF8


@pytest.mark.parametrize("old, new, field, needle, message", [
    ("    categories: [home, search]\n", "    categories: [home, search]\n    discovery: {bits_per_level: 8}\n",
     "discovery", "discovery: {bits_per_level: 8}#2", "only 'strings' and 'integers'"),
    ("      max_length: 12\n", "", "discovery.max_length", "    discovery:\n", "missing 'max_length'"),
    ("      max_length: 12\n", "      max_length: 12\n      bits: 8\n", "discovery.bits", "      bits: 8", "belongs to integers"),
    ("      max_length: 12\n", "      max_length: twelve\n", "discovery.max_length", "max_length: twelve", "positive integer"),
    ("      max_length: 12\n", "      max_length: 12\n      colour: red\n", "discovery.colour", "colour", "unknown key"),
    ('      alphabet: "abcdefghijklmnopqrstuvwxyz\'"\n', '      alphabet: "abca"\n', "discovery.alphabet", "abca",
     "more than once"),
    ("    discovery: {bits_per_level: 8}\n", "    discovery: {bits: 32}\n", "discovery.bits", "bits: 32",
     "cannot hold the dictionary"),
    ("    discovery: {bits_per_level: 8}\n", "    discovery: {bits_per_level: 20}\n", "discovery.bits_per_level",
     "bits_per_level: 20", "candidates per prefix"),
    ("    discovery: {bits_per_level: 8}\n", "    discovery: [8]\n", "discovery", "discovery: [8]", "must be a mapping"),
])
def test_discovery_mistakes_name_metric_field_and_line(tmp_path, old, new, field, needle, message):
    text = WORDS.replace(old, new, 1)
    assert text != WORDS
    problem = single_problem(tmp_path, text)
    assert problem.field == field and message in problem.message
    assert problem.metric in ("typed_words", "build_id", "screens")
    needle, _, occurrence = needle.partition("#")
    assert problem.line == line_of(text, needle.rstrip("\n"), int(occurrence or 1)), str(problem)


def test_device_config_carries_each_discovery_level(tmp_path):
    from registry.device import device_config
    from registry.discovery import discovery_of

    reg = load(tmp_path, WORDS)
    config = {m["name"]: m for m in device_config(reg)["metrics"]}
    words = config["typed_words"]["discovery"]
    spec = discovery_of(reg.metric("typed_words").latest)
    assert words["alphabet"] == "abcdefghijklmnopqrstuvwxyz'" and len(words["levels"]) == 12
    assert [lv["fingerprint"] for lv in words["levels"]] == [p.fingerprint.hex() for p in spec.params_by_level]
    assert words["levels"][0]["m"] == spec.params_by_level[0].hash_range
    assert "discovery" not in config["screens"]
