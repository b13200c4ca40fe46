"""Bearer tokens of applications, for the collector's uploads and the worker's reads (issue 37).

Tokens file (JSON; only SHA-256 hashes of tokens, never tokens)::

    {"applications": [
        {"name": "ios-app", "token_sha256": "<64 hex>", "rate_limit": 500, "rate_burst": 1000,
         "metrics": ["app_launch"]}
    ]}

``rate_limit`` (uploads/s) and ``rate_burst`` default to the collector's ``--app-rate-limit``; ``metrics``
(optional) restricts what the token may upload or read (anything else answers 403). Hash a token with
``printf %s TOKEN | sha256sum``. The collector (collector/guard.py) and the worker (agents/trust.py) both read it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from cms_core.errors import OCMSError


class TokensFileError(OCMSError, ValueError):
    """The tokens file is unreadable or malformed (the message names the entry and field)."""


@dataclass(frozen=True)
class Application:
    name: str
    token_sha256: bytes
    rate_limit: float | None = None
    rate_burst: int | None = None
    metrics: frozenset[str] | None = None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def load_tokens(path: str | Path) -> dict[bytes, Application]:
    """Applications by token hash; errors name the entry and field to fix."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise TokensFileError(f"{path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TokensFileError(f"{path}: not JSON: {exc}") from None
    apps = doc.get("applications") if isinstance(doc, dict) else None
    if not isinstance(apps, list) or not apps:
        raise TokensFileError(f"{path}: expected {{\"applications\": [...]}} with at least one application")
    out: dict[bytes, Application] = {}
    names = set()
    for i, entry in enumerate(apps):
        where = f"{path}: applications[{i}]"
        if not isinstance(entry, dict):
            raise TokensFileError(f"{where}: expected an object")
        unknown = set(entry) - {"name", "token_sha256", "rate_limit", "rate_burst", "metrics"}
        if unknown:
            raise TokensFileError(f"{where}: unknown field(s) {sorted(unknown)}")
        name = entry.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise TokensFileError(f"{where}.name: expected 1-64 characters of [A-Za-z0-9_.-], got {name!r}")
        if name in names:
            raise TokensFileError(f"{where}.name: {name!r} appears twice")
        names.add(name)
        digest = entry.get("token_sha256")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
            raise TokensFileError(f"{where}.token_sha256: expected 64 hex digits (sha256 of the token), got {digest!r}")
        rate = entry.get("rate_limit")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0):
            raise TokensFileError(f"{where}.rate_limit: expected a number >= 0 (uploads/s; 0 = unlimited), got {rate!r}")
        burst = entry.get("rate_burst")
        if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst < 0):
            raise TokensFileError(f"{where}.rate_burst: expected an integer >= 0, got {burst!r}")
        metrics = entry.get("metrics")
        if metrics is not None and (not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics)):
            raise TokensFileError(f"{where}.metrics: expected a list of metric names, got {metrics!r}")
        key = bytes.fromhex(digest)
        if key in out:
            raise TokensFileError(f"{where}.token_sha256: the same token as application {out[key].name!r}")
        out[key] = Application(name, key, rate, burst, frozenset(metrics) if metrics is not None else None)
    return out


def tokens_file(raw, label: str) -> str:
    """A flag's parser (registry.flags.Setting): the path of a tokens file that loads (:func:`load_tokens`)."""
    from cms_core.errors import InvalidParameterError

    path = str(raw)
    try:
        load_tokens(path)
    except TokensFileError as exc:
        raise InvalidParameterError(label, raw, str(exc)) from None
    return path


class Authenticator:
    """``Authorization: Bearer <token>`` against the token hashes (None = open collector)."""

    def __init__(self, applications: dict[bytes, Application] | None, server: str = "collector"):
        self.applications = applications
        self.server = server  # named in the answers: "this collector needs ..."

    @property
    def enabled(self) -> bool:
        return self.applications is not None

    def identify(self, header: str | None) -> Application | None:
        """The application of the header's token; raises AuthError when tokens are on and it is missing/unknown."""
        if self.applications is None:
            return None
        if not header:
            raise AuthError("missing_token", f"this {self.server} needs 'Authorization: Bearer <token>'")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("missing_token", "expected 'Authorization: Bearer <token>'")
        # aiohttp hands header bytes that are not UTF-8 over as surrogates: hash the bytes as sent
        digest = hashlib.sha256(token.strip().encode("utf-8", "surrogateescape")).digest()
        app = self.applications.get(digest)
        # The dict lookup is by hash; compare again in constant time to keep the check honest.
        if app is None or not hmac.compare_digest(app.token_sha256, digest):
            raise AuthError("unknown_token", f"the bearer token is not known to this {self.server}")
        return app


class AuthError(OCMSError):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
