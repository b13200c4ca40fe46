"""Signed shuffle claims: a shuffled batch's size, believed only with a MAC of a key the shufflers hold.

A shuffling collector produces each frame of a batch with the header ``ocms-shuffle-n`` (the batch's
reports, :data:`cms_core.wire.SHUFFLE_HEADER`). Anyone who may write to the reports topic can write that
header too, so the worker states a central epsilon only for frames whose claim it can verify
(docs/privacy.md, "Who may claim a shuffle"): with ``--shuffle-claim-key-file`` the collector adds

* ``ocms-shuffle-batch``: the batch's id, 32 hex digits (16 random bytes, one per batch), and
* ``ocms-shuffle-mac``: HMAC-SHA256 under the shared claim key of the claim's version, the batch size,
  the batch id and the frame's bytes (so its metric version: the fingerprint is in the frame header),
  64 hex digits,

and a worker given the same key counts the frame's reports as shuffled only when the MAC verifies.
Binding the frame's bytes means a claim cannot be moved onto other reports; copying a verified frame
whole (a replay) adds reports that really were shuffled in that batch (a question of integrity, not of
the claim). The key never leaves the two processes: a reader of Kafka sees MACs, not the key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from .errors import InvalidParameterError
from .wire import SHUFFLE_HEADER, header_value, shuffled_batch_size

BATCH_HEADER = "ocms-shuffle-batch"
MAC_HEADER = "ocms-shuffle-mac"
#: What the MAC covers first: a claim of another scheme or version never verifies as this one.
DOMAIN = b"ocms-shuffle-claim/1\n"
#: Fewest bytes a claim key file may hold (after surrounding whitespace): 32 bytes, e.g. 64 hex digits.
MIN_KEY_BYTES = 32
MAX_KEY_BYTES = 4096
BATCH_ID_BYTES = 16

#: Why a frame's claim was not believed (``ocms_shuffle_claims_rejected_total{reason}``).
REJECT_REASONS = ("invalid_size", "no_key", "missing_mac", "bad_mac")


def read_key(path: str, label: str, minimum: int = MIN_KEY_BYTES,
             shared: str = "the same file for every shuffling collector and every worker") -> bytes:
    """The key in ``path`` (its bytes without surrounding whitespace), checked: at least ``minimum`` bytes
    (the claim key's :data:`MIN_KEY_BYTES`). A bad file raises InvalidParameterError naming ``label`` and
    the path; ``shared`` says who must hold the same file."""
    try:
        with open(path, "rb") as f:
            key = f.read(MAX_KEY_BYTES + 1).strip()
    except OSError as exc:
        raise InvalidParameterError(label, path, f"cannot be read: {exc.strerror or exc}") from None
    if len(key) > MAX_KEY_BYTES:
        raise InvalidParameterError(label, path, f"holds more than {MAX_KEY_BYTES} bytes: not a key file")
    if len(key) < minimum:
        raise InvalidParameterError(label, path, f"holds {len(key)} bytes; a key needs at least {minimum} "
                                                 f"(e.g. openssl rand -hex 32 > FILE), {shared}")
    return key


def new_batch_id() -> bytes:
    """A fresh batch id (hex ASCII), from the operating system's CSPRNG."""
    return os.urandom(BATCH_ID_BYTES).hex().encode("ascii")


def mac(key: bytes, size: int, batch_id: bytes, frame: bytes | memoryview) -> bytes:
    """The claim's MAC (hex ASCII): HMAC-SHA256 over the domain, the batch size, the batch id and the frame."""
    h = hmac.new(key, DOMAIN + str(int(size)).encode("ascii") + b"\n" + bytes(batch_id) + b"\n", hashlib.sha256)
    h.update(frame)
    return h.hexdigest().encode("ascii")


def claim_headers(key: bytes, size: int, batch_id: bytes, frame: bytes | memoryview) -> list[tuple[str, bytes]]:
    """The headers a shuffled frame carries: its batch's size, and with a key the batch id and the MAC."""
    headers = [(SHUFFLE_HEADER, str(int(size)).encode("ascii"))]
    if key:
        headers += [(BATCH_HEADER, batch_id), (MAC_HEADER, mac(key, size, batch_id, frame))]
    return headers


def _header(headers, name: str) -> bytes | None:
    """The one value of header ``name`` as bytes (None when absent, given twice, or not text)."""
    found = header_value(headers, name)
    if isinstance(found, str):
        found = found.encode("ascii", "replace")
    return bytes(found) if isinstance(found, (bytes, bytearray, memoryview)) else None


def verify(key: bytes | None, headers, frame: bytes | memoryview, records: int) -> tuple[int, str | None]:
    """(the shuffled batch size a frame's claim verifies, 0 when it makes none or it does not verify;
    why it was not believed: one of :data:`REJECT_REASONS`, None when believed or when no claim was made).

    ``key``: the worker's claim key (None: it has none, so no claim is believed)."""
    size = shuffled_batch_size(headers, records)
    if size == 0:
        return 0, None
    if size is None:
        return 0, "invalid_size"
    if not key:
        return 0, "no_key"
    batch_id, claimed = _header(headers, BATCH_HEADER), _header(headers, MAC_HEADER)
    if batch_id is None or claimed is None or not 1 <= len(batch_id) <= 64:
        return 0, "missing_mac"
    if not hmac.compare_digest(mac(key, size, batch_id, frame), claimed):
        return 0, "bad_mac"
    return size, None


def key_file(raw, label: str) -> str:
    """A flag's parser (registry.flags.Setting): the path of a readable claim key file (:func:`read_key`)."""
    path = str(raw)
    read_key(path, label)
    return path
