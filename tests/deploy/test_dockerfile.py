"""Dockerfile and .dockerignore, checked without a Docker engine.

The build context test copies exactly what the Dockerfile COPYs (minus
.dockerignore) and builds the project wheel from it, so a package directory
missing from the image fails here.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.deploy.conftest import run
from tests.deploy.promql import ROOT

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue
        buf += " " + stripped[:-1] if stripped.endswith("\\") else " " + stripped
        if not stripped.endswith("\\"):
            keyword, _, args = buf.strip().partition(" ")
            out.append((keyword.upper(), args.strip()))
            buf = ""
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, args in _instructions():
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, args))
    return stages


def _args() -> dict[str, str]:
    out = {}
    for keyword, args in _instructions():
        if keyword == "ARG" and "=" in args:
            name, _, value = args.partition("=")
            out.setdefault(name, value)
    return out


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _copy_sources() -> list[str]:
    sources = []
    for keyword, args in _stages()[0]:
        if keyword == "COPY" and not args.startswith("--from"):
            parts = args.split()
            sources += [p for p in parts[:-1] if not p.startswith("--")]
    return sources


def _ignore_patterns() -> list[str]:
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _ignored(rel: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        if pattern.startswith("!"):
            continue
        bare = pattern[3:] if pattern.startswith("**/") else pattern
        if fnmatch.fnmatch(rel, pattern) or any(fnmatch.fnmatch(part, bare) for part in rel.split("/")):
            return True
    return False


def test_base_image_and_entrypoint():
    assert _args()["PYTHON_IMAGE"] == "python:3.11-slim"
    froms = [args for keyword, args in _instructions() if keyword == "FROM"]
    assert froms and all(f.startswith("${PYTHON_IMAGE}") for f in froms)
    assert ("ENTRYPOINT", '["ocms"]') in _instructions()


def test_build_stage_has_a_c_compiler_and_installs_the_rocksdb_extra():
    build = " ".join(args for keyword, args in _stages()[0] if keyword == "RUN")
    assert re.search(r"apt-get install -y --no-install-recommends [^&]*\bgcc\b", build)
    assert "libc6-dev" in build
    assert _args()["OCMS_EXTRAS"] == "rocksdb"
    assert 'pip wheel --wheel-dir /wheels ".[${OCMS_EXTRAS}]"' in build
    runtime = " ".join(args for keyword, args in _stages()[-1] if keyword == "RUN")
    assert '"ocms-pipeline[${OCMS_EXTRAS}]"' in runtime and "--no-index" in runtime
    assert "k.BACKEND == 'compiled'" in runtime, "the image must fail to build without the compiled kernel"


def test_extras_baked_into_the_image_exist_in_pyproject():
    extras = set(_pyproject()["project"].get("optional-dependencies", {}))
    wanted = set(_args()["OCMS_EXTRAS"].split(","))
    assert wanted <= extras, f"Dockerfile installs extras {sorted(wanted - extras)} that pyproject.toml does not define"


def test_runtime_runs_as_a_user_owning_the_store_directory():
    runtime = _stages()[-1]
    users = [args for keyword, args in runtime if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    run_text = " ".join(args for keyword, args in runtime if keyword == "RUN")
    assert "mkdir -p /var/lib/ocms" in run_text and f"chown {users[-1]}:{users[-1]} /var/lib/ocms" in run_text
    assert ("EXPOSE", "6066") in runtime


def test_copy_covers_every_package_and_the_readme():
    sources = {s.rstrip("/") for s in _copy_sources()}
    project = _pyproject()
    # a subpackage (agents.console) travels inside its top-level package's directory
    packages = {package.split(".")[0] for package in project["tool"]["setuptools"]["packages"]}
    assert packages <= sources, f"packages not copied into the image: {sorted(packages - sources)}"
    assert {"pyproject.toml", "setup.py", project["project"]["readme"]} <= sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not _ignored(source, _ignore_patterns()), f".dockerignore drops {source}, which the Dockerfile copies"


def test_dockerignore_keeps_local_builds_out():
    patterns = _ignore_patterns()
    for rel in (".venv", ".git", "build", "cms_core/_kernel.cpython-311-x86_64-linux-gnu.so",
                "agents/__pycache__", "ocms_pipeline.egg-info", "tests"):
        assert _ignored(rel, patterns), f"{rel} would be sent to the Docker daemon"


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_build_context_builds_the_wheel_with_the_kernel(tmp_path):
    """`pip wheel` on exactly the COPYed files (what the build stage does, without dependencies)."""
    pytest.importorskip("setuptools")
    ctx = tmp_path / "src"
    ctx.mkdir()
    patterns = _ignore_patterns()
    for source in _copy_sources():
        src = ROOT / source
        if src.is_dir():
            shutil.copytree(src, ctx / source,
                            ignore=lambda d, names: [n for n in names
                                                     if _ignored(str((Path(d) / n).relative_to(ROOT)), patterns)])
        else:
            shutil.copy2(src, ctx / source)
    result = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "--quiet", "--wheel-dir", str(tmp_path / "wheels"), str(ctx)], timeout=540)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "wheels").glob("ocms_pipeline-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for package in _pyproject()["tool"]["setuptools"]["packages"]:
        assert f"{package.replace('.', '/')}/__init__.py" in names
    assert any(re.fullmatch(r"cms_core/_kernel\..*\.so", n) for n in names), "decode kernel not compiled"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "ocms = ocms.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
