"""The project's one version (semantic versioning), and what a running process says about itself.

``__version__`` is the single source: pyproject.toml reads it (setuptools' dynamic version), ``ocms
--version`` prints it, the worker's and the collector's /healthz answer it and their /metrics export it
as ``ocms_build_info{version, wire_format} 1``. The JS client (producer/js/package.json and its exported
``VERSION``) and the C library (``OCMS_VERSION_*`` in producer/c/include/ocms_client.h, ``ocms_version()``)
state the same number; tests/test_versions.py checks that they agree. docs/compatibility.md says which
stored and wire formats this release writes and reads (cms_core/formats.py).

Kept free of imports: setuptools reads the literal below without importing the package.
"""

__version__ = "0.2.0"

#: The wire format version of the device messages this release writes (cms_core.wire.VERSION; checked by
#: tests/test_versions.py: this module imports nothing, so that the build can read it cheaply).
WIRE_FORMAT = 1


def build_info_labels() -> dict[str, str]:
    """The labels of the ``ocms_build_info`` gauge (value 1): two bounded values per process."""
    return {"version": __version__, "wire_format": str(WIRE_FORMAT)}


def release_tuple(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a release ``X.Y.Z`` (semantic versioning, no pre-release); ValueError otherwise."""
    parts = str(text).strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() and (p == "0" or not p.startswith("0")) for p in parts):
        raise ValueError(f"not a release X.Y.Z: {text!r}")
    major, minor, patch = (int(p) for p in parts)
    return major, minor, patch


def too_old_for(needed: str | None, what: str, client: str = __version__) -> str | None:
    """None when a client of release ``client`` may report ``what`` (its registry or device configuration asks
    for at least ``needed``), else the refusal, naming the version to upgrade to."""
    if needed is None or release_tuple(client) >= release_tuple(needed):
        return None
    return (f"{what} needs an ocms client of release {needed} or later; this client is {client}: upgrade it to "
            f"{needed} or later")

