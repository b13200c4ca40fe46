"""Release 0.2.0's own code reads what this code writes with ``--upgrade-from 0.2``, and refuses or skips what it
writes without (issue 39): why the first rolling bounce needs the flag, checked with the real previous release
(commit b078575, materialised with ``git archive``: benchmarks.faults.release), not with a model of it.

* A table value (changelog record): 0.2.0's ``agents.state`` decodes this code's v1/v3 members and refuses its
  v4/v5 members (a 0.2.0 worker's view would reject the record, its checkpoint fail on it).
* An idempotency log lease: 0.2.0's ``ListingLog`` hears a collector through an ``F`` lease and skips an ``L``
  lease as an unknown record (it would take a live collector for silent).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from agents.state import PartialCounts, encode_bundle, members_written_for
from benchmarks.faults.release import PREVIOUS_COMMIT, PREVIOUS_RELEASE, ReleaseMissing, materialise
from collector.exactly_once import log as idem

pytestmark = [pytest.mark.upgrade, pytest.mark.integration]  # runs the previous release in a subprocess

#: Run by 0.2.0's Python: reads hex records from stdin, prints what its own code makes of each.
PREVIOUS_READER = r"""
import json, sys
from agents import state
from collector.exactly_once import log as idem
from cms_core.version import __version__
doc = json.load(sys.stdin)
out = {"version": __version__, "tables": [], "leases": []}
for value in doc["tables"]:
    try:
        members = {fp: state.PartialCounts.from_bytes(raw).to_json() for fp, raw in state.decode_bundle(bytes.fromhex(value)).items()}
        out["tables"].append({"members": members})
    except Exception as exc:
        out["tables"].append({"refused": f"{type(exc).__name__}: {exc}"})
for value in doc["leases"]:
    log = idem.ListingLog(window_s=900, max_keys=1000, clock=lambda: 0.0, observer="observer")
    log.apply(0, idem.encode_listing(b"n" * 16, "writer", b"i" * 8, 0, 0, 100, [b"k" * 16]))  # writer holds a key
    log.apply(1, idem.encode_listing(b"m" * 16, "observer", b"i" * 8, 0, 0, 101, []))
    log.apply(2, bytes.fromhex(value))  # the writer's lease
    log.apply(3, idem.encode_listing(b"o" * 16, "observer", b"i" * 8, 0, 0, 160, []))
    out["leases"].append({"bad_records": log.bad_records, "writer_silent_s": log.silent_for("writer")})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def previous(tmp_path_factory):
    try:
        return materialise(PREVIOUS_COMMIT, tmp_path_factory.mktemp("release") / PREVIOUS_RELEASE, PREVIOUS_RELEASE)
    except ReleaseMissing as exc:
        pytest.fail(str(exc))


def read_with_previous(previous, tables: list[bytes], leases: list[bytes]) -> dict:
    done = subprocess.run([sys.executable, "-c", PREVIOUS_READER], cwd=previous, env={"PYTHONPATH": str(previous)},
                          input=json.dumps({"tables": [t.hex() for t in tables], "leases": [x.hex() for x in leases]}),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["version"] == PREVIOUS_RELEASE
    return out


def table_value() -> tuple[bytes, dict]:
    states = {"00" * 8: PartialCounts(7, [3, 0, 4], 41), "11" * 8: PartialCounts(9, [2, 5], 12, 9, 4, 6)}
    return encode_bundle({fp: s.to_bytes() for fp, s in states.items()}), {fp: s.to_json() for fp, s in states.items()}


def test_the_previous_release_reads_table_values_written_for_it_and_refuses_this_releases(previous):
    with members_written_for("0.2"):
        for_previous, expected = table_value()
    own, _ = table_value()
    tables = read_with_previous(previous, [for_previous, own], [])["tables"]
    assert tables[0] == {"members": expected}
    assert "refused" in tables[1] and "not a PartialCounts v1/v2/v3" in tables[1]["refused"], tables[1]


def test_the_previous_release_hears_a_lease_written_for_it_and_skips_this_releases(previous):
    leases = []
    for upgrade_from in ("0.2", None):
        idem.write_leases_for(upgrade_from)
        try:
            leases.append(idem.encode_lease("writer", b"i" * 8, 0, 130))
        finally:
            idem.write_leases_for(None)
    heard = read_with_previous(previous, [], leases)["leases"]
    assert heard[0] == {"bad_records": 0, "writer_silent_s": 0.0}  # its lease heard: the observer's 160 is after it
    assert heard[1] == {"bad_records": 1, "writer_silent_s": 59.0}  # the L lease skipped: silent from 101 to 160
