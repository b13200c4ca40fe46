"""Every release's golden samples (tests/golden/RELEASE/) read by the current code (issue 39; pytest -m upgrade).

A release writes one sample of each stored format (scripts/write_golden.py RELEASE) and a manifest of the
fields it decodes from each, or of the error a reader must refuse it with (the negative controls: an unknown
version, a corrupt sample). These tests read every release's samples with this code and compare: a change to
a stored format that leaves an earlier release's samples unread, or reads them differently, fails here. The
current release's directory must cover every format of cms_core/formats.py, and be what this code writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cms_core.formats import FORMATS
from cms_core.version import __version__
from producer.jsclient import NodeMissingError
from tests.golden.formats import (LEARNED, NEEDS_NODE, NOT_BYTE_EXACT, READERS, READS_AS, UNRELEASED, UPGRADE_FROM,
                                  read_sample, write_release)

pytestmark = pytest.mark.upgrade

GOLDEN = Path(__file__).resolve().parent
#: Every release's directory in release order, then what this code writes beyond the last release (UNRELEASED).
RELEASES = sorted((p for p in GOLDEN.iterdir() if (p / "manifest.json").is_file()),
                  key=lambda p: (1,) if p.name == UNRELEASED else (0, *(int(x) for x in p.name.split("."))))


def manifest(release: Path) -> dict:
    return json.loads((release / "manifest.json").read_text())


SAMPLES = [pytest.param(release, sample, id=f"{release.name}/{sample['file']}",
                         marks=[pytest.mark.integration] if sample["format"] in NEEDS_NODE else [])
           for release in RELEASES for sample in manifest(release)["samples"]]


def read(fmt: str, path: Path) -> dict:
    """read_sample; a sample whose reader needs node is skipped without node (failed with
    OCMS_REQUIRE_SYSTEM_TOOLS=1, as make test sets: tests/producer/conftest.py)."""
    try:
        return read_sample(fmt, path)
    except NodeMissingError as exc:
        if os.environ.get("OCMS_REQUIRE_SYSTEM_TOOLS", "") not in ("", "0"):
            raise
        pytest.skip(str(exc))


def error_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


@pytest.mark.parametrize("release,sample", SAMPLES)
def test_this_release_reads_every_golden_sample(release, sample):
    fmt, path = sample["format"], release / sample["file"]
    assert READS_AS.get(fmt, fmt) in READERS, f"release {release.name} wrote format {fmt!r}: this code has no reader"
    if (release.name, sample["file"]) in LEARNED:  # a version that release did not know, and this code reads
        assert read(fmt, path), LEARNED[release.name, sample["file"]]
    elif "refused" in sample:
        refused = sample["refused"]
        with pytest.raises(Exception) as raised:
            read(fmt, path)
        assert refused["error"] in error_names(raised.value), f"{path.name}: refused with {raised.value!r}"
        assert refused["match"] in str(raised.value), f"{path.name}: refused with {raised.value!r}"
    else:
        assert read(fmt, path) == sample["expect"], f"{path.name} of release {release.name} reads differently"


def test_the_current_release_has_golden_samples_of_every_format():
    assert (GOLDEN / __version__ / "manifest.json").is_file(), f"run scripts/write_golden.py {__version__}"
    current = manifest(GOLDEN / __version__)
    assert current["release"] == __version__
    written = {READS_AS.get(s["format"], s["format"]) for s in current["samples"] if "expect" in s}
    refused = {s["format"] for s in current["samples"] if "refused" in s}
    for fmt in FORMATS:
        if fmt.golden:
            assert READS_AS.get(fmt.key, fmt.key) in written, f"no golden sample of {fmt.key}"
    assert {"wire", "table_value", "table_member", "idempotency_log", "sketch", "capture"} <= refused


@pytest.mark.parametrize("release", [__version__, UNRELEASED])
def test_this_code_writes_the_current_releases_samples(tmp_path, release):
    """What this code writes is the current release's golden directory, byte for byte, when it writes for that
    release (``--upgrade-from``: the first rolling bounce writes exactly what the previous release wrote), and
    the unreleased directory without (a format change that did not write its samples fails here). Node's
    samples (the JS ledger's) are left out: their reading is checked above, and node does not run in the fast
    loop."""
    assert release in UPGRADE_FROM, f"tests/golden/formats.py: UPGRADE_FROM names no --upgrade-from for {release}"
    written = write_release(tmp_path / release, release, with_node=False)
    committed = GOLDEN / release
    expected = [s for s in manifest(committed)["samples"] if s["format"] not in NEEDS_NODE]
    assert written["samples"] == expected, f"regenerate: scripts/write_golden.py {release} --force"
    for sample in written["samples"]:
        name = sample["file"]
        if name not in NOT_BYTE_EXACT:
            assert (tmp_path / release / name).read_bytes() == (committed / name).read_bytes(), name
