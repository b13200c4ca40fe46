"""The JavaScript device client (producer/js) from Python: build it, run its tools.

    from producer.jsclient import ensure_built, node
    ensure_built()                       # npm ci when the lock file changed, npm run build when a source did
    node("producer/js/bin/ocms-report.mjs", "--config", ...)

``write_device_config`` writes a registry and the device configuration the client reads from it.
Used by the tests (tests/producer/test_js_client.py, test_js_browser.py) and benchmarks/bench_js_client.py,
so that ``make test`` on a fresh clone installs the pinned npm dependencies (package-lock.json) and builds
dist/ itself. Node >= 20.19 and npm come from the system (scripts/ensure_system_packages.sh).
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from cms_core.errors import OCMSError

JS_DIR = Path(__file__).resolve().parent / "js"
CLI = JS_DIR / "bin" / "ocms-report.mjs"
BUNDLE = JS_DIR / "dist" / "ocms-client.min.js"
BUNDLE_WITHOUT_HASH = JS_DIR / "dist" / "ocms-client.nohash.min.js"
MIN_NODE = (20, 19)
_SOURCES = ("src", "scripts", "tsconfig.json", "package.json", "package-lock.json")


class NodeMissingError(OCMSError, RuntimeError):
    """Node or npm is not installed (or too old) for the JavaScript client."""


def node_binary() -> str:
    path = shutil.which("node")
    if path is None or shutil.which("npm") is None:
        raise NodeMissingError("node and npm are needed for producer/js: run scripts/ensure_system_packages.sh "
                               "(Debian packages nodejs, npm)")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    parts = tuple(int(x) for x in version.lstrip("v").split(".")[:2])
    if parts < MIN_NODE:
        raise NodeMissingError(f"node {version} is too old for producer/js (needs >= {MIN_NODE[0]}.{MIN_NODE[1]})")
    return path


def _newest_source_mtime() -> float:
    newest = 0.0
    for name in _SOURCES:
        path = JS_DIR / name
        paths = path.rglob("*") if path.is_dir() else [path]
        newest = max([newest] + [p.stat().st_mtime for p in paths if p.is_file()])
    return newest


def ensure_built() -> Path:
    """npm ci (when package-lock.json is not what node_modules was installed from) and npm run build
    (when a source is newer than dist/); serialized by a lock file. Returns the package directory."""
    node_binary()
    npm = shutil.which("npm")
    with open(JS_DIR / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock_digest = hashlib.sha256((JS_DIR / "package-lock.json").read_bytes()).hexdigest()
        installed = JS_DIR / "node_modules" / ".ocms-lock-sha256"
        if not installed.exists() or installed.read_text() != lock_digest:
            _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"])  # runs `prepare`: the build
            installed.write_text(lock_digest)
        stamp = JS_DIR / "dist" / ".ocms-build-stamp"
        if not stamp.exists() or stamp.stat().st_mtime < _newest_source_mtime() or not BUNDLE.exists():
            _run([npm, "run", "--silent", "build"])
            stamp.touch()
    return JS_DIR


def _run(command: list[str]) -> None:
    done = subprocess.run(command, cwd=JS_DIR, capture_output=True, text=True, env={**os.environ, "CI": "true"})
    if done.returncode != 0:
        raise OCMSError(f"{' '.join(command)} in {JS_DIR} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def node(*args: str | os.PathLike, input: bytes | None = None, timeout: float = 600, check: bool = True,
         cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``node ARGS`` (output captured as bytes)."""
    done = subprocess.run([node_binary(), *map(str, args)], input=input, capture_output=True, timeout=timeout,
                          cwd=cwd or JS_DIR)
    if check and done.returncode != 0:
        raise OCMSError(f"node {' '.join(map(str, args))} exited {done.returncode}:\n"
                        f"{done.stdout.decode(errors='replace')[-3000:]}\n{done.stderr.decode(errors='replace')[-3000:]}")
    return done


def write_device_config(directory: str | os.PathLike, registry_text: str):
    """Write ``registry_text`` to DIRECTORY/registry.yaml and the device configuration the JS client reads
    (registry.device.device_config) to DIRECTORY/device-config.json: (registry path, Registry, config path)."""
    import json

    from registry import load_registry
    from registry.device import device_config

    directory = Path(directory)
    registry_path = directory / "registry.yaml"
    registry_path.write_text(registry_text, encoding="utf-8")
    registry = load_registry(registry_path)
    config = directory / "device-config.json"
    config.write_text(json.dumps(device_config(registry)), encoding="utf-8")
    return registry_path, registry, config


def js_reports(config: str | os.PathLike, version, value_name: str, n: int, leaky_threshold: int | None = None):
    """A ReportBatch of n reports of one value made by the JS client (test/tools/reports.mjs: the public API
    and the CSPRNG; with ``leaky_threshold``, the same keeping with that threshold)."""
    from cms_core import wire

    with tempfile.TemporaryDirectory(prefix="ocms-js-") as tmp:
        out = Path(tmp) / "reports.bin"
        node("test/tools/reports.mjs", config, version.metric, value_name, str(n), out,
             *([str(leaky_threshold)] if leaky_threshold is not None else []))
        _, batch = wire.decode_message(out.read_bytes(), {version.params.fingerprint: version.params})
    if len(batch) != n:
        raise OCMSError(f"the JS client made {len(batch)} reports, not {n}")
    return batch


def audit_js_client(config: str | os.PathLike, version, x1: int, x2: int, trials: int, alpha: float,
                    leaky_threshold: int | None = None):
    """cms_core.audit.black_box_audit's procedure (the distinguishing event, one-sided Clopper-Pearson bounds at
    alpha / 2 each) on ``trials`` reports per input from the JS client; x1, x2 are dictionary values."""
    import numpy as np

    from cms_core import audit

    params = version.params
    event = audit.distinguishing_event(params, x1, x2)
    hits = [int(np.count_nonzero(event(js_reports(config, version, version.value_name(x), trials, leaky_threshold))))
            for x in (x1, x2)]
    lower = audit.clopper_pearson_lower(hits[0], trials, alpha / 2)
    upper = audit.clopper_pearson_upper(hits[1], trials, alpha / 2)
    bound = math.log(lower / upper) if lower > 0 else -math.inf
    return audit.AuditResult(params.epsilon, trials, hits[0], hits[1], alpha, bound)


def leaky_threshold_for(params, factor: float = 1.25) -> int:
    """The keep threshold of ``factor`` x epsilon with the same m and field: the leaky device of the negative controls."""
    from cms_core import OCMSParams
    from cms_core.privatize import keep_threshold

    return keep_threshold(OCMSParams.build(params.epsilon * factor, params.dictionary_size, hash_range=params.hash_range,
                                           field=params.field, mechanism=params.mechanism))
