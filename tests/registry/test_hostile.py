"""Hostile registry files (issue 24): each refused with file:line and exit 2, never a traceback or a hang.

The full-size cases (10^6 categories, a 16 MiB file, ...) are timed by benchmarks/bench_registry_load.py;
here the same paths run at small scale, with the bounds lowered where a case needs a big file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import registry.files as files
import registry.load_tracked as load_tracked
import registry.load_versions as load_versions
import registry.loader as loader
from registry.values_file import ValuesFileError, read_raw_values
from registry import RegistryError, RegistryFileError, RegistryValidationError, load_registry
from registry.errors import FileRefusedError, LockFileError
from registry.lock import read_lock

from .helpers import line_of, run, single_problem, write

HEAD = "metrics:\n  - name: m\n    description: d\n    owner: o\n"
ROOT = Path(__file__).resolve().parents[2]


def check(capsys, path: Path) -> tuple[int, str]:
    """``ocms registry check PATH`` in this process: (exit status, stderr); never a traceback."""
    code, out, err = run(capsys, "registry", "check", str(path))
    assert "Traceback" not in out + err
    return code, err


def refused_at(capsys, path: Path, line: int, fragment: str) -> None:
    code, err = check(capsys, path)
    assert code == 2, err
    assert err.startswith(f"ocms registry: error: {path}:{line}: "), err
    assert fragment in err, err


# ------------------------------------------------------------------ nesting and numbers

@pytest.mark.parametrize("body, line", [
    ("    categories: " + "[" * 1_500 + "]" * 1_500 + "\n", 6),            # flow lists
    ("    categories:\n      " + "- " * 1_500 + "x\n", 7),                 # block lists
    ("    x-deep: " + "{a: " * 1_500 + "1" + "}" * 1_500 + "\n", 6),        # flow mappings
])
def test_deep_nesting_is_refused_at_its_line(tmp_path, capsys, body, line):
    path = write(tmp_path, HEAD + "    epsilon: 2\n" + body)
    refused_at(capsys, path, line, "nested more than 32 levels deep")


@pytest.mark.parametrize("field, text", [
    ("epsilon", "    categories: [a, b]\n    epsilon: " + "9" * 5_000 + "\n"),
    ("version", "    categories: [a, b]\n    epsilon: 2\n    versions:\n      - version: " + "9" * 5_000 + "\n"),
    ("retention", "    categories: [a, b]\n    epsilon: 2\n    retention: " + "9" * 4_301 + "\n"),
    ("top_k", "    categories: [a, b]\n    epsilon: 2\n    top_k: 0x" + "f" * 5_000 + "\n"),
])
def test_integers_beyond_any_field_are_refused_at_their_line(tmp_path, capsys, field, text):
    path = write(tmp_path, HEAD + text)
    refused_at(capsys, path, line_of(HEAD + text, "9" * 50 if field != "top_k" else "0x"), "digits")


@pytest.mark.parametrize("text, needle, fragment", [
    ("    categories: [a, b]\n    epsilon: 2\n    bucket: " + "9" * 5_000 + "s\n", "bucket:", "must be a duration"),
    ("    integers: '9999^9999'\n    epsilon: 2\n", "integers:", "must be the dictionary size"),
    ("    integers: '" + "9" * 5_000 + "'\n    epsilon: 2\n", "integers:", "must be the dictionary size"),
    ("    integers: 2^64\n    epsilon: 2\n    tracked: ['" + "7" * 5_000 + "']\n", "tracked:", "an integer value"),
    ("    integers: 2^64\n    epsilon: 2\n    tracked: {range: [0, '9^9999']}\n", "range:", "must be [START, STOP]"),
])
def test_huge_numbers_written_as_text_are_refused_as_values(tmp_path, capsys, text, needle, fragment):
    path = write(tmp_path, HEAD + text)
    refused_at(capsys, path, line_of(HEAD + text, needle), fragment)


def test_powers_and_digit_strings_are_bounded():
    assert loader.parse_domain_size("2^64") == 2**64 and loader.parse_domain_size("10^100") == 10**100
    assert loader.parse_domain_size("9999^9999") is None and loader.parse_domain_size("9" * 101) is None
    assert loader.parse_duration("1h30m") == 5400 and loader.parse_duration("9" * 200 + "s") is None


def test_the_smallest_epsilon_is_refused_with_its_bound(tmp_path, capsys):
    """1e-320 was accepted and `ocms plan` printed nan."""
    text = HEAD + "    categories: [a, b]\n    epsilon: 1e-320\n"
    path = write(tmp_path, text)
    refused_at(capsys, path, 6, "field 'epsilon': must be >= 8.9e-16")
    code, err = run(capsys, "plan", "--registry", str(path))[::2]
    assert code == 2 and "nan" not in err and "8.9e-16" in err


# ------------------------------------------------------------------ files that are not regular files

class _Watchdog:
    """Frees a reader blocked on ``fifo`` after ``seconds`` (opens and closes its write end: end of file), so a
    regression fails the test instead of hanging it; ``fired`` says whether it had to."""

    def __init__(self, fifo: Path, seconds: float = 60.0):
        self.fifo, self.fired = fifo, False
        self.timer = threading.Timer(seconds, self.unblock)

    def unblock(self) -> None:
        self.fired = True
        try:
            os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # nobody is reading it

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        assert not self.fired, f"blocked on {self.fifo} until the watchdog freed it"


def test_a_fifo_registry_is_refused_without_waiting(tmp_path, capsys):
    fifo = tmp_path / "registry.yaml"
    os.mkfifo(fifo)
    with _Watchdog(fifo):
        code, err = check(capsys, fifo)
    assert code == 2 and f"{fifo}: cannot read the registry: it is a FIFO (named pipe), not a regular file" in err


def test_tracked_files_that_are_devices_or_fifos_are_refused_at_the_file_key(tmp_path, capsys):
    os.mkfifo(tmp_path / "values.jsonl")
    for target, what in (("/dev/zero", "a character device"), ("values.jsonl", "a FIFO (named pipe)"),
                         (".", "a directory")):
        text = HEAD + f"    strings: true\n    epsilon: 2\n    tracked: {{file: {target}}}\n"
        path = write(tmp_path, text)
        with _Watchdog(tmp_path / "values.jsonl"):
            code, err = check(capsys, path)
        assert code == 2 and err.startswith(f"ocms registry: error: {path}:7: metric 'm': field 'tracked.file': "), err
        assert f"is {what}, not a regular file" in err


def test_the_size_bound_holds_while_reading_not_from_stat(tmp_path):
    """/proc files report st_size 0 yet hold bytes: the bound counts what is read."""
    status = Path("/proc/self/status")
    assert status.stat().st_size == 0 and len(status.read_bytes()) > 100
    with pytest.raises(FileRefusedError, match="is larger than 100 bytes"):
        files.read_regular_file(status, 100)
    assert files.read_regular_file(status, 1 << 20).startswith(b"Name:")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * 2_000)
    with pytest.raises(FileRefusedError, match="larger than 1,000 bytes"):
        files.read_regular_file(big, 1_000)


def test_a_registry_over_the_bound_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "MAX_REGISTRY_BYTES", 1_000)
    path = write(tmp_path, HEAD + "    description2: " + "x" * 2_000 + "\n")
    with pytest.raises(RegistryFileError, match="it is larger than 1,000 bytes"):
        load_registry(path)


def test_values_files_and_locks_read_only_regular_files(tmp_path):
    fifo = tmp_path / "values.jsonl"
    os.mkfifo(fifo)
    for target in ("/dev/zero", fifo):
        with _Watchdog(fifo), pytest.raises(ValuesFileError, match="not a regular file"):
            read_raw_values(target)
    with _Watchdog(fifo), pytest.raises(LockFileError, match="not a regular file"):
        read_lock(fifo)


# ------------------------------------------------------------------ large and long files (bounds lowered)

def test_too_many_values_are_refused_while_parsing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(files, "MAX_YAML_NODES", 1_000)
    text = HEAD + "    epsilon: 2\n    categories:\n" + "".join(f"      - c{i}\n" for i in range(2_000))
    path = write(tmp_path, text)
    code, err = check(capsys, path)
    line = int(err.split(f"{path}:")[1].split(":")[0])
    assert code == 2 and 8 < line < 8 + 1_000 and "more than 1,000 values, lists and mappings" in err  # stops early


def test_merge_keys_cannot_multiply_a_mapping_without_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_YAML_NODES", 1_000)
    base = "x-b: &b {" + ", ".join(f"k{i}: 1" for i in range(300)) + "}\n"
    text = base + "metrics:\n" + "".join(f"  - <<: *b\n    name: m{i}\n" for i in range(5))
    problem = single_problem(tmp_path, text, RegistryFileError)
    assert problem.line == line_of(text, "- <<: *b", 4) and "merge keys (<<) copy more than 1,000 keys" in problem.message


def test_a_file_of_millions_of_mistakes_lists_the_first_and_counts_the_rest(tmp_path):
    text = HEAD + "    epsilon: 2\n    categories:\n" + "      - a\n" * 5_001
    with pytest.raises(RegistryValidationError) as info:
        load_registry(write(tmp_path, text))
    problems = info.value.problems
    assert len(problems) == loader.MAX_PROBLEMS + 1
    assert problems[0].line == 8 and "'a' is listed twice" in problems[0].message
    assert problems[-1].message == f"... and {5_000 - loader.MAX_PROBLEMS:,} more problems (the first 200 are shown)"


def test_tracked_files_are_read_with_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(load_tracked, "MAX_TRACKED", 10)  # and so at most 20 lines (registry.values_file)
    text = HEAD + "    strings: true\n    epsilon: 2\n    tracked: {file: values.jsonl}\n"
    path = write(tmp_path, text)
    for content, fragment in (("".join(f'"v{i}"\n' for i in range(20)), "values.jsonl line 11: more than 10 values"),
                              ("\n" * 40, "values.jsonl: more than 20 lines"),
                              ('"' + "x" * 30_000 + '"\n', "values.jsonl line 1: longer than 24,640 characters"),
                              (b"\xff\xfe\n", "values.jsonl: not UTF-8 text")):
        target = tmp_path / "values.jsonl"
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(RegistryValidationError) as info:
            load_registry(path)
        (problem,) = info.value.problems
        assert problem.line == 7 and fragment in problem.message, str(problem)


def test_versions_share_their_category_list_and_tracked_set(tmp_path):
    """1,000 versions of a 10^6-category metric took minutes: the list is held once, not once a version."""
    names = ", ".join(f"c{i}" for i in range(5_000))
    versions = "".join(f"      - version: {v}\n" for v in range(1, 101))
    reg = load_registry(write(tmp_path, HEAD + f"    epsilon: 2\n    tracked: [c0, c7]\n    categories: [{names}]\n"
                                            f"    versions:\n{versions}      - version: 101\n"
                                            "        add_categories: [new]\n"))
    versions = reg.metric("m").versions
    assert len({id(v.value_names) for v in versions}) == 2 and len({id(v.tracked) for v in versions[:100]}) == 1
    assert versions[-1].value_names[-1] == "new" and versions[0].tracked.values == (0, 7)
    assert versions[0].definition_digest == versions[99].definition_digest != versions[100].definition_digest
    assert versions[0]._names_cache() is versions[99]._names_cache()


def test_versions_adding_categories_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(load_versions, "MAX_VERSIONED_NAMES", 1_000)
    names = ", ".join(f"c{i}" for i in range(300))
    versions = "".join(f"      - version: {v}\n        add_categories: [n{v}]\n" for v in range(2, 6))
    text = HEAD + f"    epsilon: 2\n    categories: [{names}]\n    versions:\n      - version: 1\n{versions}"
    with pytest.raises(RegistryValidationError) as info:
        load_registry(write(tmp_path, text))
    first = info.value.problems[0]
    assert first.line == line_of(text, "add_categories: [n4]") and first.version == 4
    assert "would hold more than 1,000 names in all" in first.message


# ------------------------------------------------------------------ YAML semantics kept from the round-trip loader

def test_merge_keys_aliases_and_their_lines(tmp_path):
    text = """\
x-a: &a {owner: team, epsilon: 2}
x-b: &b {epsilon: 3, unit: u}
metrics:
  - name: m
    <<: [*a, *b]
    description: d
    categories: &names [p, q]
  - name: n
    <<: *b
    epsilon: 1
    owner: o
    description: d
    categories: *names
"""
    reg = load_registry(write(tmp_path, text))
    m, n = reg.metric("m"), reg.metric("n")
    assert (m.owner, m.unit, m.latest.params.epsilon) == ("team", "u", 2.0)  # earlier merges win
    assert (n.owner, n.latest.params.epsilon, n.latest.value_names) == ("o", 1.0, ("p", "q"))  # explicit keys win
    bad = text.replace("epsilon: 2}", "epsilon: -2}")
    problem = single_problem(tmp_path, bad)
    assert problem.line == 1 and problem.metric == "m" and problem.field == "epsilon"  # where the merged key is written


@pytest.mark.parametrize("text, line, fragment", [
    ("a: &r [*r]\n", 1, "alias *r is inside the node &r it names"),
    ("a: *nowhere\n", 1, "alias *nowhere names no anchor"),
    ("a: {<<: {x: 1}, <<: {y: 2}}\n", 1, "duplicate merge key '<<'"),
    ("a: 1\nb: 2\na: 3\n", 3, "duplicate key 'a' (first at line 1)"),
    ("a: !!binary aGk=\n", 1, "the tag !!binary is not allowed"),
    ("a: !!python/object:os.system x\n", 1, "the tag !!python/object:os.system is not allowed"),
    ("a: !custom {b: 1}\n", 1, "the tag !custom is not allowed"),
    ("%YAML 1.1\n---\na: NO\n", 1, "%YAML 1.1: a registry is read as YAML 1.2"),
    ("a: 1\n---\nb: 2\n", 2, "a second YAML document starts here"),
    ("a: [1, 2\n", 2, "not valid YAML"),
    ("a: \"\x01\"\n", 1, "not valid YAML"),
    ("? [a, b]\n: c\n", 1, "a mapping key must be a plain value"),
])
def test_yaml_refusals_are_located(tmp_path, text, line, fragment):
    problem = single_problem(tmp_path, text, RegistryFileError)
    assert problem.line == line and fragment in problem.message, str(problem)


def test_scalars_resolve_as_yaml_1_2_with_ruamels_conversions():
    doc = files.compose("a: [NO, off, yes, true, ~, 0x1F, 0o17, 1_000, '5', 1e400, 2026-01-01, !!str 12, !!int '7']\n",
                        "f")
    import datetime
    assert doc["a"] == ["NO", "off", "yes", True, None, 31, 15, 1000, "5", float("inf"), datetime.date(2026, 1, 1),
                        "12", 7]
    assert doc.key_lines == {"a": 1} and list(doc["a"].item_lines) == [1] * 13


def test_libyaml_is_installed_and_the_pure_parser_composes_the_same(monkeypatch):
    """ruamel.yaml[libyaml] is a dependency (speed); without it the pure parser gives the same document."""
    assert files.CParser is not None
    text = (ROOT / "deploy" / "registry.yaml").read_text(encoding="utf-8")
    fast = files.compose(text, "r")
    monkeypatch.setattr(files, "CParser", None)
    slow = files.compose(text, "r")
    assert fast == slow and fast["metrics"].item_lines == slow["metrics"].item_lines
    with pytest.raises(RegistryFileError, match="nested more than 32"):
        files.compose("a: " + "[" * 1_000 + "]" * 1_000 + "\n", "r")


def test_every_hostile_file_is_a_registry_error(tmp_path):
    """The loader's one promise: a registry or a RegistryError (never another exception)."""
    for text in ("a: " + "{" * 100 + "}" * 100, "metrics: " + "9" * 5_000, "metrics: [" + "[" * 40 + "]" * 41,
                 "metrics:\n  - name: m\n    epsilon: 5e-324\n", "\ufeffmetrics: 1\n", "metrics: !!set {a}\n"):
        with pytest.raises(RegistryError):
            load_registry(write(tmp_path, text))
