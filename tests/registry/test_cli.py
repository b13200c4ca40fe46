"""`ocms registry check|lock|describe` and `ocms plan --registry`, through the real entry point."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


from registry import load_registry

from .helpers import APP_LAUNCHES_V1, run, write

ROOT = Path(__file__).resolve().parents[2]

TEXT = "metrics:\n" + APP_LAUNCHES_V1 + """\
  - name: build_id
    description: 64-bit ids
    owner: release
    integers: 2^64
    tracked: ["18446744073709551615", "7"]
    epsilon: 3
"""


def test_check_lock_cycle(tmp_path, capsys):
    path = write(tmp_path, TEXT)
    code, out, _ = run(capsys, "registry", "check", str(path))
    assert code == 0 and "valid: 2 metrics, 2 versions (2 live); no lock file" in out
    code, _, err = run(capsys, "registry", "check", str(path), "--require-locked")
    assert code == 2 and "no lock file" in err
    code, out, _ = run(capsys, "registry", "lock", str(path))
    assert code == 0 and "locked 2 new versions: app_launches@1, build_id@1" in out
    code, out, _ = run(capsys, "registry", "check", str(path), "--require-locked")
    assert code == 0 and "2 locked versions unchanged" in out
    code, out, _ = run(capsys, "registry", "lock", str(path))
    assert code == 0 and "up to date" in out

    # Edit version 1 in place: check and lock both refuse, naming the metric and version, and the lock is unchanged.
    lock_before = (tmp_path / "registry.lock").read_text()
    path.write_text(TEXT.replace("epsilon: 2", "epsilon: 1"))
    for verb in ("check", "lock"):
        code, _, err = run(capsys, "registry", verb, str(path))
        assert code == 2
        assert f"{path}:7: metric 'app_launches': version 1: published version edited in place" in err
        assert "add version 2 with the change instead" in err
    assert (tmp_path / "registry.lock").read_text() == lock_before

    # The way to change it: a new version; check lists it as new, lock publishes it.
    path.write_text(TEXT.replace("        epsilon: 2\n", "        epsilon: 2\n      - version: 2\n        epsilon: 1\n"))
    code, out, _ = run(capsys, "registry", "check", str(path))
    assert code == 0 and "new, to lock" in out and "app_launches@2" in out
    code, _, err = run(capsys, "registry", "check", str(path), "--require-locked")
    assert code == 2 and "not locked yet: app_launches@2" in err
    code, out, _ = run(capsys, "registry", "lock", str(path))
    assert code == 0 and "locked 1 new version: app_launches@2" in out


def test_check_against_a_previous_file(tmp_path, capsys):
    old = write(tmp_path, TEXT, "old.yaml")
    new = write(tmp_path, TEXT.replace("epsilon: 3", "epsilon: 4"), "new.yaml")
    code, _, err = run(capsys, "registry", "check", str(new), "--previous", str(old))
    assert code == 2 and "metric 'build_id': version 1: published version edited in place" in err
    assert f"in {old}" in err


def test_check_reports_validation_errors(tmp_path, capsys):
    path = write(tmp_path, TEXT.replace("epsilon: 3", "epsilon: -1"))
    code, _, err = run(capsys, "registry", "check", str(path))
    assert code == 2
    assert f"{path}:14: metric 'build_id': field 'epsilon': must be > 0, got -1" in err
    assert "Traceback" not in err


def test_describe_table_and_json(tmp_path, capsys):
    path = write(tmp_path, TEXT)
    reg = load_registry(path)
    code, out, _ = run(capsys, "registry", "describe", str(path))
    assert code == 0
    header = out.splitlines()[0].split()
    assert header == ["metric", "version", "status", "fingerprint", "epsilon", "m", "mechanism", "domain", "size",
                      "tracked"]
    build = reg.metric("build_id").latest
    row = next(line.split() for line in out.splitlines() if line.startswith("build_id"))
    assert row == ["build_id", "1", "live", build.fingerprint.hex(), "3", str(build.params.hash_range), "ocms",
                   "integers", "2^64", "2"]
    code, out, _ = run(capsys, "registry", "describe", str(path), "--json", "--metric", "build_id")
    doc = json.loads(out)
    assert [m["name"] for m in doc["metrics"]] == ["build_id"]
    version = doc["metrics"][0]["versions"][0]
    assert version["fingerprint"] == build.fingerprint.hex()
    assert version["domain_size"] == "18446744073709551616"  # every value a JSON string (cms_core.values)
    assert version["tracked"] == {"kind": "list", "count": "2", "source": "list"}
    code, _, err = run(capsys, "registry", "describe", str(path), "--metric", "nope")
    assert code == 2 and "no metric 'nope'" in err


def test_describe_json_lists_every_discovery_level(capsys):
    """Each discovery level of a version, as docs/discovery.md says (it used to be the level count only)."""
    from registry.discovery import discovery_of

    from .test_deploy_registry import REGISTRY

    build = load_registry(REGISTRY).metric("build_id").latest
    code, out, _ = run(capsys, "registry", "describe", str(REGISTRY), "--json", "--metric", "build_id")
    assert code == 0
    discovery = json.loads(out)["metrics"][0]["versions"][0]["discovery"]
    expected = discovery_of(build).params_by_level
    assert len(expected) == 8 and (discovery["kind"], discovery["bits_per_level"]) == ("integers", 8)
    assert [level["level"] for level in discovery["levels"]] == list(range(1, 9))
    assert [level["binding"] for level in discovery["levels"]] == [f"build_id@1/level{i}" for i in range(1, 9)]
    assert [level["fingerprint"] for level in discovery["levels"]] == [p.fingerprint.hex() for p in expected]
    assert all(level["params"] == p.describe() and level["hash_range"] == p.hash_range
               for level, p in zip(discovery["levels"], expected))


def test_plan_registry(tmp_path, capsys):
    path = write(tmp_path, TEXT)
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--n", "10000", "--target-ci", "0.01")
    assert code == 0
    lines = out.splitlines()
    assert "predictions at n=10,000" in lines[0]
    assert lines[1].split()[:6] == ["metric", "version", "epsilon", "mechanism", "m", "field"]
    assert [line.split()[0] for line in lines[2:4]] == ["app_launches", "build_id"]
    assert lines[4].startswith("fakes for 1% / for floor: ") and len(lines) == 5  # the legend, no note
    code, out, _ = run(capsys, "plan", "--registry", str(path), "--metric", "app_launches", "--json")
    doc = json.loads(out)
    (record,) = doc["metrics"]
    reg = load_registry(path)
    assert record["params"]["fingerprint"] == reg.metric("app_launches").latest.fingerprint.hex()
    assert record["prediction"]["n"] == 100_000
    assert record["mechanisms"]["chosen"] == record["params"]["mechanism"] == "direct"  # d = 3 at eps 2
    code, _, err = run(capsys, "plan", "--registry", str(path), "--epsilon", "2")
    assert code == 2 and "drop --epsilon" in err
    code, _, err = run(capsys, "plan", "--registry", str(path), "--mechanism", "ocms")
    assert code == 2 and "drop --mechanism" in err
    code, _, err = run(capsys, "plan", "-d", "100")
    assert code == 2 and "--epsilon is required" in err
    code, _, err = run(capsys, "plan", "-e", "2", "-d", "100", "--metric", "x")
    assert code == 2 and "--metric needs --registry" in err
    code, out, _ = run(capsys, "plan", "-e", "2", "-d", "100")
    assert code == 0 and "hash range m" in out


@pytest.mark.integration
def test_shipped_registry_checks_clean_with_the_installed_command():
    ocms = shutil.which("ocms", path=str(Path(sys.executable).parent))
    command = [ocms] if ocms else [sys.executable, "-m", "ocms"]
    done = subprocess.run([*command, "registry", "check", "deploy/registry.yaml", "--require-locked"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "locked versions unchanged" in done.stdout


@pytest.mark.integration
def test_describe_into_a_closed_pipe_is_quiet(tmp_path):
    # ~1 MB of JSON: far beyond a pipe's buffer, so the writer really meets a closed pipe.
    names = ", ".join(f"screen_{i}" for i in range(60_000))
    path = write(tmp_path, TEXT.replace("[home, search, settings]", f"[{names}]"))
    done = subprocess.run(f"{sys.executable} -m ocms registry describe {path} --json | head -c 10",
                          shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout == '{\n "regist'
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_device_config_is_minimal_and_sufficient(tmp_path, capsys):
    """A device can rebuild the exact parameters (same fingerprint) from the config, and nothing else is in it."""
    from cms_core import OCMSParams
    from cms_core.fields import BinaryField, PrimeField
    from cms_core.privatize import keep_threshold

    from .test_deploy_registry import REGISTRY

    out_path = tmp_path / "device.json"
    code, _, err = run(capsys, "registry", "device-config", str(REGISTRY), "--out", str(out_path))
    assert code == 0, err
    doc = json.loads(out_path.read_text())
    reg = load_registry(REGISTRY)
    assert doc["format"] == 1 and [m["name"] for m in doc["metrics"]] == [m.name for m in reg.metrics]
    for entry in doc["metrics"]:
        spec = reg.metric(entry["name"])
        assert entry["version"] == spec.latest.version
        allowed = {"name", "version", "fingerprint", "epsilon", "m", "keep_threshold", "field", "domain", "categories",
                   "dictionary_size", "mechanism", "discovery", "numeric"}
        assert set(entry) <= allowed
        if "numeric" in entry:  # issue 40 (flight_air_time): the layout a device bucketizes with, and only it
            from cms_core.numeric import BucketLayout

            n = entry["numeric"]
            assert set(n) == {"lower", "upper", "bounds"}
            assert BucketLayout.explicit(n["bounds"], n["lower"], n["upper"]) == spec.latest.numeric.layout
        field = entry["field"]
        field = PrimeField(int(field["order"])) if field["kind"] == "prime" else BinaryField(field["degree"])
        d = len(entry["categories"]) if entry["domain"] == "categories" else (
            int(entry["dictionary_size"]) if entry["domain"] == "integers" else 2**128)
        rebuilt = OCMSParams(epsilon=entry["epsilon"], hash_range=entry["m"], field=field, dictionary_size=d,
                             value_domain="string" if entry["domain"] == "strings" else "integer",
                             binding=f"{entry['name']}@{entry['version']}",
                             mechanism=entry.get("mechanism", "ocms"))
        assert rebuilt.fingerprint.hex() == entry["fingerprint"] == spec.latest.fingerprint.hex()
        assert int(entry["keep_threshold"]) == keep_threshold(rebuilt)  # the device keeps with the Python integer
        for level in entry.get("discovery", {}).get("levels", []):  # issue 15: each level rebuilds too
            lf = level["field"]
            lf = PrimeField(int(lf["order"])) if lf["kind"] == "prime" else BinaryField(lf["degree"])
            rebuilt = OCMSParams(epsilon=entry["epsilon"], hash_range=level["m"], field=lf,
                                 dictionary_size=int(level["dictionary_size"]), mode="mse", f_star=0.0,
                                 binding=f"{entry['name']}@{entry['version']}/level{level['level']}")
            assert rebuilt.fingerprint.hex() == level["fingerprint"]
            assert int(level["keep_threshold"]) == keep_threshold(rebuilt)
    code, out, _ = run(capsys, "registry", "device-config", str(REGISTRY), "--metric", "app_launches")
    (entry,) = json.loads(out)["metrics"]
    assert entry["version"] == 2 and entry["categories"][-1] == "wallet"
    code, _, err = run(capsys, "registry", "device-config", str(REGISTRY), "--out", str(tmp_path / "no" / "x.json"))
    assert code == 2 and "--out" in err and "Traceback" not in err
