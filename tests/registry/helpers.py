"""Small helpers for registry tests: write a registry, load it, find a line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from registry import RegistryError, load_registry


def write(tmp_path: Path, text: str, name: str = "registry.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(tmp_path: Path, text: str):
    return load_registry(write(tmp_path, text))


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """1-based line of the ``occurrence``-th line containing ``needle``."""
    found = 0
    for number, line in enumerate(textwrap.dedent(text).splitlines(), 1):
        if needle in line:
            found += 1
            if found == occurrence:
                return number
    raise AssertionError(f"{needle!r} not in the text")


def problems(tmp_path: Path, text: str, error=RegistryError) -> list[str]:
    with pytest.raises(error) as info:
        load(tmp_path, text)
    return [str(p) for p in info.value.problems]


def single_problem(tmp_path: Path, text: str, error=RegistryError):
    with pytest.raises(error) as info:
        load(tmp_path, text)
    assert len(info.value.problems) == 1, str(info.value)
    return info.value.problems[0]


def run(capsys, *argv):
    """``ocms ARGV`` in this process through the real entry point: (exit status, stdout, stderr)."""
    from ocms.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


#: A metric with one published version, in explicit ``versions:`` form: the registry CLI's and the
#: lock's tests edit that version in place, or add a version 2 after it.
APP_LAUNCHES_V1 = """\
  - name: app_launches
    description: Screen the app opens on
    owner: mobile-team
    categories: [home, search, settings]
    versions:
      - version: 1
        epsilon: 2
"""

#: The discoverable string metric of the discovery tests, up to its ``discovery:`` block (each adds its own).
TYPED_WORDS = """\
  - name: typed_words
    description: Words typed
    owner: keyboard-team
    strings: true
    tracked: [the]
    epsilon: 4
"""

#: A plain categorical metric beside the discoverable ones.
SCREENS = """\
  - name: screens
    description: Screens
    owner: app
    categories: [home, search]
    epsilon: 2
"""

#: The symbols of wordfreq's English words (``--dataset wordfreq:n=...``).
WORDFREQ_ALPHABET = "abcdefghijklmnopqrstuvwxyz'.01234567"

#: typed_words over wordfreq's words up to 6 symbols, and screens: the registry of `ocms discover`'s
#: tests and of the worker's discovery tests.
WORDS_AND_SCREENS = ("metrics:\n" + TYPED_WORDS + f'    discovery: {{alphabet: "{WORDFREQ_ALPHABET}", max_length: 6}}\n'
                     + SCREENS)

#: Two discoverable metrics (a string domain, and integers with a retired and a live version): the
#: registry the discovery intake tests of the worker and of the collector share.
DISCOVERY_METRICS = "metrics:\n" + TYPED_WORDS + """\
    discovery: {alphabet: "abcdefghijklmnopqrstuvwxyz", max_length: 4}
  - name: build_id
    description: Build ids
    owner: release
    integers: 2^16
    tracked: {range: [0, 10]}
    discovery: {bits_per_level: 8}
    versions:
      - version: 1
        epsilon: 2
        retired: true
      - version: 2
        epsilon: 3
"""


def screen_metric(categories: str, *, epsilons: tuple[float, ...], fields: str = "", added_in_2: str = "") -> str:
    """The categorical ``screen`` metric of the worker's catalog, named-metric and console tests: direct RR in
    explicit versions, version N at ``epsilons[N - 1]``. ``categories`` is its YAML flow list, ``fields`` its
    further lines (indented four spaces, ending in a newline), ``added_in_2`` the categories version 2 adds."""
    versions = "".join(f"      - version: {number}\n        epsilon: {epsilon}\n"
                       + (f"        add_categories: {added_in_2}\n" if number == 2 and added_in_2 else "")
                       for number, epsilon in enumerate(epsilons, 1))
    return f"""\
  - name: screen
    description: Screen opened at launch
    owner: mobile@example.com
    categories: {categories}
    mechanism: direct
{fields}    versions:
{versions}"""
