"""Every registry validation error names the file:line, the metric and the field."""

from __future__ import annotations

import json

import pytest

from registry import RegistryError, RegistryFileError, RegistryValidationError, load_registry

from .helpers import line_of, load, problems, single_problem, write


def metric(*lines: str, categories="categories: [home, search, settings]", epsilon="epsilon: 2") -> str:
    """A one-metric registry: the base fields plus ``lines`` (each at metric indentation)."""
    body = ["metrics:", "  - name: app_launches", "    description: Screen the app opens on", "    owner: mobile-team"]
    if categories:
        body.append("    " + categories)
    if epsilon:
        body.append("    " + epsilon)
    body += ["    " + line for line in lines]
    return "\n".join(body) + "\n"


# (registry text, text on the expected line, field, fragment of the message, version or None)
CASES = {
    "epsilon negative": (metric(epsilon="epsilon: -1"), "epsilon: -1", "epsilon", "must be > 0, got -1", None),
    "epsilon not a number": (metric(epsilon="epsilon: two"), "epsilon: two", "epsilon", "must be a number, got 'two'", None),
    "epsilon too large": (metric(epsilon="epsilon: 1000"), "epsilon: 1000", "epsilon", "must be <= 100", None),
    "epsilon bool": (metric(epsilon="epsilon: true"), "epsilon: true", "epsilon", "must be a number, got true", None),
    "epsilon missing": (metric(epsilon=""), "- name: app_launches", "epsilon", "missing; the privacy budget", None),
    "epsilon needs a huge m": (metric(epsilon="epsilon: 60"), "epsilon: 60", "epsilon", "above the maximum", None),
    "mode": (metric("mode: l3"), "mode: l3", "mode", "must be 'mse' or 'l2', got 'l3'", None),
    "f_star range": (metric("f_star: 1.5"), "f_star: 1.5", "f_star", "must be a number in (0, 1], got 1.5", None),
    "f_star with l2": (metric("mode: l2", "f_star: 0.5"), "f_star: 0.5", "f_star", "applies to mode 'mse' only", None),
    "tracked_count": (metric("tracked_count: 0"), "tracked_count: 0", "tracked_count", "must be an integer >= 1, got 0", None),
    "hash_range": (metric("hash_range: 1"), "hash_range: 1", "hash_range", "must be an integer in [2, ", None),
    "unknown key": (metric("epsilion: 2"), "epsilion: 2", "epsilion", "unknown key (did you mean 'epsilon'?)", None),
    "unit": (metric("unit: 5"), "unit: 5", "unit", "must be a non-empty string, got 5", None),
    "owner empty": (metric().replace("owner: mobile-team", "owner: ''"), "owner: ''", "owner",
                    "must be a non-empty string, got ''", None),
    "description missing": (metric().replace("    description: Screen the app opens on\n", ""), "- name: app_launches",
                            "description", "missing; a non-empty string is required", None),
    "no domain": (metric(categories=""), "- name: app_launches", "categories", "missing a value domain", None),
    "two domains": (metric("integers: 10"), "integers: 10", "integers", "a metric has one value domain", None),
    "category twice": (metric(categories="categories: [home, search, home]"), "categories:", "categories",
                       "'home' is listed twice", None),
    "category number": (metric(categories="categories: [home, 1.10]"), "categories:", "categories",
                        "quote numbers, e.g. '14' or '1.10'), got 1.1", None),
    "one category": (metric(categories="categories: [home]"), "categories:", "categories", "needs at least 2 categories",
                     None),
    "categories not a list": (metric(categories="categories: home"), "categories:", "categories",
                              "must be a list of names, got 'home'", None),
    "integers bad": (metric(categories="integers: lots"), "integers: lots", "integers",
                     "must be the dictionary size d (an integer such as 1000 or 2^64), got 'lots'", None),
    "integers too large": (metric("tracked: {range: [0, 10]}", categories="integers: 2^65"), "integers: 2^65", "integers",
                           "must be in [2, 2^64], got 36893488147419103232", None),
    "strings not true": (metric("tracked: [a, b]", categories="strings: yes"), "strings: yes", "strings",
                         "must be true", None),
    "strings untracked": (metric(categories="strings: true"), "- name: app_launches", "tracked",
                          "a 'strings' metric needs its tracked values", None),
    "integers too large to track whole": (metric(categories="integers: 1000000"), "- name: app_launches", "tracked",
                                          "more than 100,000 to track whole", None),
    "tracked bad form": (metric("tracked: 5"), "tracked: 5", "tracked", "must be 'all', a list of values", None),
    "tracked range on categories": (metric("tracked: {range: [0, 2]}"), "tracked:", "tracked.range",
                                    "a range tracks integers", None),
    "tracked range outside": (metric("tracked: {range: [0, 200]}", categories="integers: 100"), "tracked:", "tracked.range",
                              "range [0, 200) must lie inside the dictionary [0, 100)", None),
    "tracked integer outside": (metric("tracked: [5, 100]", categories="integers: 100"), "tracked:", "tracked",
                                "100 is outside the dictionary [0, 100)", None),
    "tracked range reversed": (metric("tracked: {range: [5, 2]}", categories="integers: 100"), "tracked:",
                               "tracked.range", "must satisfy 0 <= START < STOP, got [5, 2]", None),
    "tracked duplicate": (metric("tracked: [a, b, a]", categories="strings: true"), "tracked:", "tracked",
                          "'a' is listed twice", None),
    "tracked not a category": (metric("tracked: [home, nowhere]"), "tracked:", "tracked",
                               "'nowhere' is not a category of any version", None),
    "tracked integer not digits": (metric("tracked: [1, x2]", categories="integers: 100"), "tracked:", "tracked",
                                   "an integer value (decimal digits) expected, got 'x2'", None),
    "tracked file missing": (metric("tracked: {file: nowhere.jsonl}", categories="strings: true"), "tracked:",
                             "tracked.file", "nowhere.jsonl: cannot read", None),
    "bucket bad": (metric("bucket: 5 minutes"), "bucket: 5 minutes", "bucket",
                   "must be a duration such as 60, 90s, 15m, 1h or 7d, got '5 minutes'", None),
    "bucket zero": (metric("bucket: 0s"), "bucket: 0s", "bucket", "must be in [1, 86400] seconds, got 0 s", None),
    "bucket too wide": (metric("bucket: 2d"), "bucket: 2d", "bucket", "must be in [1, 86400] seconds, got 172800 s", None),
    "retention below bucket": (metric("bucket: 1h", "retention: 30m"), "retention: 30m", "retention",
                               "must be >= the bucket width 3600 s, got 1800 s", None),
    "rollup not a multiple": (metric("bucket: 1m", "rollup: {bucket: 90s}"), "rollup:", "rollup.bucket",
                              "must be a multiple of the bucket width 60 s and larger, got 90 s", None),
    "rollup without bucket": (metric("rollup: {retention: 30d}"), "rollup:", "rollup.bucket", "missing", None),
    "rollup unknown key": (metric("rollup: {bucket: 1h, width: 1h}"), "rollup:", "rollup.width", "unknown key", None),
    "rollup retention": (metric("rollup: {bucket: 1h, retention: 30m}"), "rollup:", "rollup.retention",
                         "must be >= the rollup width 3600 s, got 1800 s", None),
    "rollup not a mapping": (metric("rollup: 1h"), "rollup: 1h", "rollup", "must be a mapping", None),
    "watch not tracked": (metric("watch: [home, nowhere]"), "watch:", "watch",
                          "'nowhere' is not a tracked value of any version", None),
    "watch twice": (metric("watch: [home, home]"), "watch:", "watch", "'home' is listed twice", None),
    "watch not a list": (metric("watch: home"), "watch: home", "watch", "must be a list of value names", None),
    "top_k negative": (metric("top_k: -1"), "top_k: -1", "top_k", "must be in [0, 10000], got -1", None),
    "top_k text": (metric("top_k: many"), "top_k: many", "top_k", "must be an integer, got 'many'", None),
    "min_reports": (metric("min_reports: -5"), "min_reports: -5", "min_reports", "must be in [0, ", None),
    "versions empty": (metric("versions: []"), "versions: []", "versions", "must be a non-empty list of versions", None),
    "version zero": (metric("versions:", "  - version: 0"), "- version: 0", "version",
                     "must be an integer in [1, 1,000,000], got 0",
                     None),
    "version order": (metric("versions:", "  - version: 2", "  - version: 1"), "- version: 1", "version",
                      "increasing order without repeats; 1 follows 2", None),
    "version repeated": (metric("versions:", "  - version: 1", "  - version: 1"), ("- version: 1", 2), "version",
                         "1 follows 1", None),
    "version number missing": (metric("versions:", "  - epsilon: 1"), "- epsilon: 1", "version", "missing", None),
    "version unknown key": (metric("versions:", "  - version: 1", "    epsilom: 1"), "epsilom: 1", "epsilom",
                            "did you mean 'epsilon'?", 1),
    "version epsilon": (metric("versions:", "  - version: 1", "  - version: 2", "    epsilon: 0"), "epsilon: 0",
                        "epsilon", "must be > 0, got 0", 2),
    "version retired": (metric("versions:", "  - version: 1", "    retired: maybe"), "retired: maybe", "retired",
                        "must be true or false, got 'maybe'", 1),
    "add_categories on integers": (metric("versions:", "  - version: 1", "    add_categories: [x]",
                                          categories="integers: 10"), "add_categories", "add_categories",
                                   "only a 'categories' metric can add categories", 1),
    "add_categories existing": (metric("versions:", "  - version: 1", "  - version: 2", "    add_categories: [search]"),
                                "add_categories", "add_categories", "'search' is listed twice", 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_field_error_names_metric_field_and_line(tmp_path, case):
    text, needle, field, fragment, version = CASES[case]
    problem = single_problem(tmp_path, text, RegistryValidationError)
    needle, occurrence = needle if isinstance(needle, tuple) else (needle, 1)
    assert problem.line == line_of(text, needle, occurrence), str(problem)
    assert problem.field == field, str(problem)
    assert problem.metric == "app_launches", str(problem)
    assert problem.version == version, str(problem)
    assert fragment in problem.message, str(problem)
    shown = str(problem)
    assert shown.startswith(f"{tmp_path / 'registry.yaml'}:{problem.line}: metric 'app_launches': ")
    assert f"field '{field}': " in shown


def test_the_brief_example_message(tmp_path):
    path = write(tmp_path, metric(epsilon="epsilon: -1"))
    with pytest.raises(RegistryValidationError) as info:
        load_registry(path)
    assert str(info.value) == f"{path}:6: metric 'app_launches': field 'epsilon': must be > 0, got -1"


def test_name_errors(tmp_path):
    bad = metric().replace("name: app_launches", "name: 2launches")
    problem = single_problem(tmp_path, bad)
    assert (problem.line, problem.field, problem.metric) == (2, "name", None)
    assert "must match [a-zA-Z_][a-zA-Z0-9_]*" in problem.message and "'2launches'" in problem.message
    reserved = metric().replace("name: app_launches", "name: __launches")
    assert "reserved by Prometheus" in single_problem(tmp_path, reserved).message
    missing = metric().replace("  - name: app_launches\n    description", "  - description")
    problem = single_problem(tmp_path, missing)
    assert (problem.line, problem.field) == (2, "name") and "missing" in problem.message


def test_a_bad_name_does_not_hide_the_other_mistakes(tmp_path):
    text = metric(epsilon="epsilon: -1").replace("name: app_launches", "name: app-launches")
    found = problems(tmp_path, text)
    assert len(found) == 2
    assert "field 'name': must match" in found[0]
    assert found[1].endswith("metric '#1': field 'epsilon': must be > 0, got -1")


def test_duplicate_metric_names(tmp_path):
    text = metric() + metric().replace("metrics:\n", "")
    problem = single_problem(tmp_path, text)
    assert problem.metric == "app_launches" and problem.field == "name"
    assert problem.line == line_of(text, "- name: app_launches", 2)
    assert "duplicate metric name (first defined at line 2)" in problem.message


def test_several_mistakes_are_all_reported(tmp_path):
    text = metric("top_k: -1", "bucket: 0", epsilon="epsilon: -1")
    found = problems(tmp_path, text)
    assert len(found) == 3
    assert [f.split(": field ")[1].split(":")[0] for f in found] == ["'bucket'", "'top_k'", "'epsilon'"]


def test_tracked_file_errors_name_the_file_line(tmp_path):
    (tmp_path / "sigs.jsonl").write_text('"ok"\n\n42\nnot json\n"ok"\n', encoding="utf-8")
    text = metric("tracked: {file: sigs.jsonl}", categories="strings: true")
    found = problems(tmp_path, text)
    line = line_of(text, "tracked:")
    assert len(found) == 3
    assert all(f.startswith(f"{tmp_path / 'registry.yaml'}:{line}: metric 'app_launches': field 'tracked.file': ")
               for f in found)
    assert "sigs.jsonl line 4: not a JSON value" in found[0]  # the format (registry.values_file) first
    assert "sigs.jsonl line 3: a non-empty string expected (quote numbers), got 42" in found[1]
    assert "sigs.jsonl line 5: 'ok' is listed twice" in found[2]


def test_tracked_file_is_relative_to_the_registry(tmp_path):
    (tmp_path / "sigs.jsonl").write_text("".join(json.dumps(s) + "\n" for s in ["a", "b\u00e9", 'q"uote']), encoding="utf-8")
    reg = load(tmp_path, metric("tracked: {file: sigs.jsonl}", "watch: ['q\"uote']", categories="strings: true"))
    version = reg.metric("app_launches").latest
    assert version.tracked_names() == ["a", "b\u00e9", 'q"uote']
    assert version.watch_indices() == (2,)


def test_file_level_errors(tmp_path):
    problem = single_problem(tmp_path, "", RegistryValidationError)
    assert "empty" in problem.message and problem.line == 1
    found = problems(tmp_path, "metric:\n  - name: x\n")
    assert any("unknown key (did you mean 'metrics'?)" in f for f in found)
    problem = single_problem(tmp_path, "metrics: {}\n")
    assert problem.field == "metrics" and "non-empty list" in problem.message
    problem = single_problem(tmp_path, "metrics:\n  - just a string\n")
    assert problem.line == 2 and "expected a mapping" in problem.message
    problem = single_problem(tmp_path, "- a\n- b\n")
    assert "top-level 'metrics:'" in problem.message


def test_yaml_syntax_and_duplicate_keys_are_located(tmp_path):
    text = metric("epsilon: 3")  # a key given twice is an error, not "the last one wins"
    problem = single_problem(tmp_path, text, RegistryFileError)
    assert problem.line == line_of(text, "epsilon: 3") and "not valid YAML" in problem.message
    assert "duplicate key" in problem.message
    problem = single_problem(tmp_path, metric("watch: [home"), RegistryFileError)
    assert problem.line is not None and "not valid YAML" in problem.message


def test_unreadable_file(tmp_path):
    with pytest.raises(RegistryFileError, match="cannot read the registry"):
        load_registry(tmp_path / "absent.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00metrics")
    with pytest.raises(RegistryFileError, match="cannot read the registry"):
        load_registry(tmp_path / "bin.yaml")


def test_mechanism(tmp_path):
    """Unless pinned, the mechanism with the lower exact objective (auto); a pin is passed to cms_core."""
    reg = load(tmp_path, metric(epsilon="epsilon: 2"))  # d = 3 < 3e^2 + 2: direct RR is more accurate
    assert reg.metric("app_launches").latest.mechanism == "direct"
    assert load(tmp_path, metric("mechanism: ocms")).metric("app_launches").latest.mechanism == "ocms"
    assert load(tmp_path, metric("hash_range: 8")).metric("app_launches").latest.mechanism == "ocms"
    big = load(tmp_path, metric(categories="integers: 100000"))
    assert big.metric("app_launches").latest.mechanism == "ocms"  # d = 100,000: OCMS+RR wins
    for text, needle, field, fragment in [
        (metric("mechanism: grr"), "mechanism: grr", "mechanism", "must be one of ocms, direct, auto, got 'grr'"),
        (metric("mechanism: auto", "hash_range: 8"), "hash_range: 8", "hash_range", "fixes OCMS+RR's m"),
        (metric("mechanism: direct", "tracked: [a]", categories="strings: true"), "mechanism: direct", "mechanism",
         "direct randomized response needs integer values"),
        (metric("mechanism: direct", "tracked: {range: [0, 10]}", categories="integers: 2^40"), "mechanism: direct",
         "mechanism", "direct randomized response needs 2 <= d <= 4294967295"),
        (metric("mechanism: direct", "hash_range: 8"), "hash_range: 8", "hash_range", "direct randomized response has m = d"),
    ]:
        problem = single_problem(tmp_path, text)
        assert (problem.line, problem.field, problem.metric) == (line_of(text, needle), field, "app_launches"), str(problem)
        assert fragment in problem.message, str(problem)


def test_errors_are_ocms_errors(tmp_path):
    from cms_core.errors import OCMSError

    assert issubclass(RegistryError, OCMSError)
    with pytest.raises(OCMSError):
        load(tmp_path, metric(epsilon="epsilon: 0"))


def test_yaml_1_2_keeps_country_codes_as_strings(tmp_path):
    reg = load(tmp_path, metric(categories="categories: [NO, SE, on, off, null_island]"))
    assert reg.metric("app_launches").latest.value_names == ("NO", "SE", "on", "off", "null_island")


def test_extension_keys_hold_shared_anchors(tmp_path):
    text = """\
x-common: &common
  owner: team
  epsilon: 2
metrics:
  - name: a
    <<: *common
    description: x
    categories: [p, q]
  - name: b
    <<: *common
    description: y
    categories: [p, q]
    epsilon: 1
"""
    reg = load(tmp_path, text)
    assert [(m.owner, m.latest.params.epsilon) for m in reg.metrics] == [("team", 2.0), ("team", 1.0)]
    problem = single_problem(tmp_path, text.replace("x-common", "common"))
    assert (problem.line, problem.field) == (1, "common") and "unknown key" in problem.message


def test_an_anchor_defined_twice_is_an_error(tmp_path):
    text = """\
x-a: &shared
  owner: team
x-b: &shared
  owner: other
metrics:
  - name: a
    <<: *shared
    description: x
    categories: [p, q]
    epsilon: 1
"""
    problem = single_problem(tmp_path, text, RegistryFileError)
    assert problem.line == 3 and problem.message == "anchor &shared is defined twice (lines 1 and 3): give each anchor its own name"
