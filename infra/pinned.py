"""Which third-party versions a module that uses their private names was checked against.

``collector.kafka_internals`` (aiokafka) and ``infra.http_edge`` (aiohttp) reach into names their
libraries do not promise to keep; each states the versions it was read against, and its drift test
fails with these lines when another version is installed.
"""

from __future__ import annotations

from importlib import metadata


def version_drift(pinned: dict[str, str], module: str) -> list[str]:
    """Installed versions other than those ``module`` (a path, for the message) was checked against."""
    installed = {package: _installed(package) for package in pinned}
    return [f"{package} {installed[package]} is installed; {module} was checked against {version}"
            for package, version in pinned.items() if installed[package] != version]


def _installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
