"""What the worker believes of a frame's shuffle claim (cms_core.claims; docs/privacy.md, "Who may claim a shuffle").

A frame's ``ocms-shuffle-n`` claim counts only when its MAC verifies under ``--shuffle-claim-key-file``;
every other claim is counted in ``ocms_shuffle_claims_rejected_total{reason}``, logged once per reason,
and its reports count as not shuffled (they still count: only the claim about them is the weaker, local,
one). Without a key no claim is believed, and the answers say so (:func:`claim_key_note`).
"""

from __future__ import annotations

import logging

from cms_core import claims

log = logging.getLogger("ocms.worker")

#: Whether this process's worker holds a claim key (read by agents.answers.privacy's notes; one worker per process).
_verifying = False


def verifying() -> bool:
    return _verifying


def unverified_note() -> str:
    """Why a window without a believed claim states none, when this worker cannot believe any."""
    return "" if _verifying else (" (this worker has no --shuffle-claim-key-file, so it believes no shuffle claim: "
                                  "docs/privacy.md, Who may claim a shuffle)")


class ClaimCheck:
    """The worker's check of each frame's claim: :meth:`size` per accepted frame."""

    def __init__(self, settings, metrics):
        global _verifying
        path = getattr(settings, "shuffle_claim_key_file", None)
        self.key = claims.read_key(path, settings.label("shuffle_claim_key_file")) if path else None
        _verifying = self.key is not None
        self.metrics = metrics
        self._said: set[str] = set()

    def size(self, message, reports: int) -> int | None:
        """The verified shuffled batch of a frame's reports; 0: no claim, or one not believed; None: a header
        that is not a batch size (the caller counts it as ocms_shuffle_header_invalid_total too)."""
        size, reason = claims.verify(self.key, getattr(message, "headers", None), message.value, reports)
        if reason is None:
            return size
        self.metrics.shuffle_claims_rejected.labels(reason).inc()
        if reason == "invalid_size":
            return None
        if reason not in self._said:
            self._said.add(reason)
            why = {"no_key": "this worker has no --shuffle-claim-key-file",
                   "missing_mac": f"the frame has no {claims.BATCH_HEADER}/{claims.MAC_HEADER} headers",
                   "bad_mac": "its MAC does not verify under this worker's key (another key, or a forged claim)"}
            log.warning("partition %s offset %s: a shuffle claim not believed (%s): its reports count as not shuffled "
                        "(ocms_shuffle_claims_rejected_total{reason=%r}; logged once per reason)",
                        getattr(message, "partition", "?"), getattr(message, "offset", "?"), why[reason], reason)
        return 0


# ---------------------------------------------------------------------------------------------- reads
#: Paths anyone may read: liveness for orchestrators, and the console's page and code (they hold no counts;
#: the console's requests for data carry the token).
OPEN_PATHS = ("/healthz", "/")
OPEN_PREFIXES = ("/console/",)
#: Routes that answer the first metric's counts (agents.catalog: the name-less routes).
PRIMARY_PATHS = ("/estimates", "/topk", "/trend", "/params")


class ReadAccess:
    """Who may read what (``--api-tokens-file``: the collector's tokens file format, only SHA-256 hashes of
    tokens; collector/guard.py): every answer that holds counts needs ``Authorization: Bearer <token>`` of an
    entry whose ``metrics`` lists the metric read, or that has no ``metrics`` (every metric). The Prometheus
    exposition and the metric listing (``/metrics``) hold every metric, so they need an entry without
    ``metrics``. Without the file every read is open, as before (docs/reference.md, Who may read)."""

    def __init__(self, path: str | None, primary: str, answers):
        from infra.tokens import Authenticator, load_tokens

        self.auth = Authenticator(load_tokens(path) if path else None, server="worker")
        self.primary = primary
        self.answers = answers

    @property
    def enabled(self) -> bool:
        return self.auth.enabled

    def metric_of(self, request) -> str | None:
        """The metric a request reads; "" for every metric (the exposition, the listing), None for no counts."""
        path = request.path
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES) and path != "/console/truth":
            return None
        if path in PRIMARY_PATHS or path.startswith("/estimates/"):
            return self.primary
        if path.startswith("/metrics/"):
            return path.split("/")[2]
        if path in ("/discovered", "/console/truth"):
            return request.query.get("metric") or self.primary
        return ""  # /metrics, and any other path: a token for every metric

    def refusal(self, request):
        """None when ``request`` may be answered, else the JSON 401/403 answer (counted and logged)."""
        from infra.tokens import AuthError

        metric = self.metric_of(request)
        if metric is None or not self.enabled:
            return None
        try:
            app = self.auth.identify(request.headers.get("Authorization"))
        except AuthError as exc:
            return self._refuse(request, 401, exc.reason, str(exc), {"WWW-Authenticate": 'Bearer realm="ocms"'})
        if app.metrics is None:
            return None
        if metric == "":
            return self._refuse(request, 403, "metric_not_allowed", f"application {app.name!r} may read only metrics "
                                f"{sorted(app.metrics)}; this page holds every metric (a token without \"metrics\")")
        if metric not in app.metrics:
            return self._refuse(request, 403, "metric_not_allowed",
                                f"application {app.name!r} may not read metric {metric[:80]!r}")
        return None

    def _refuse(self, request, status: int, reason: str, detail: str, headers: dict | None = None):
        self.answers.answered(request, status, reason, f"{request.method} {ascii(request.path[:80])[1:-1]}")
        return self.answers.response(status, reason, detail, headers)


def read_tokens_middleware(access: ReadAccess):
    """aiohttp middleware: :meth:`ReadAccess.refusal` before any handler (outside the JSON error answers)."""
    from aiohttp import web

    @web.middleware
    async def middleware(request, handler):
        refused = access.refusal(request)
        return refused if refused is not None else await handler(request)

    return middleware
