"""Registry errors: every one names the file, the line, the metric and the field.

The messages follow the shape of Prometheus' config checker, e.g.::

    deploy/registry.yaml:14: metric 'app_launches': field 'epsilon': must be > 0, got -1

so that a user can jump straight to the line. A file with several mistakes
reports all of them at once (one line each), not only the first.
"""

from __future__ import annotations

from dataclasses import dataclass

from cms_core.errors import OCMSError


@dataclass(frozen=True)
class Problem:
    """One mistake in a registry (or lock) file."""

    path: str
    line: int | None
    message: str
    metric: str | None = None
    field: str | None = None
    version: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        parts = [where]
        if self.metric is not None:
            parts.append(f"metric {self.metric!r}")
        if self.version is not None:
            parts.append(f"version {self.version}")
        if self.field is not None:
            parts.append(f"field {self.field!r}")
        return ": ".join(parts) + ": " + self.message


class RegistryError(OCMSError):
    """Root of every registry error; ``problems`` lists each mistake with its line."""

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem("", None, problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class FileRefusedError(OCMSError):
    """A file that is not read at all: not a regular file (a FIFO, a device, a directory), or over its size bound."""


class RegistryFileError(RegistryError):
    """The registry file cannot be read, or is not well-formed YAML (syntax, duplicate keys)."""


class RegistryValidationError(RegistryError):
    """A field of a well-formed registry has a bad value (one problem per bad field)."""


class UnknownMetricError(RegistryError, LookupError):
    """A metric name (or metric@version) that the registry does not define."""


class LockFileError(RegistryError):
    """The lock file cannot be read or is malformed."""


class PublishedVersionChangedError(RegistryError):
    """A version recorded in the lock (published) was edited in place or removed."""
