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

#: Whether this process's worker holds a claim key (read by agents.query's notes; one worker per process).
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
