"""Shuffling in the collector (opt-in: ``--shuffle-min-reports N``, ``--shuffle-max-seconds S``).

Per metric version the collector holds the reports of accepted uploads until N are held (or S
seconds passed since the first, then the batch is what it holds), permutes them with the operating
system's CSPRNG and produces them as frames in that order, every frame of the batch with the same
timestamp (the event-time bucket the batch closed in) and the header ``ocms-shuffle-n: <reports in
the batch>`` (:data:`cms_core.wire.SHUFFLE_HEADER`), so the worker can state the central epsilon
of a window (cms_core.shuffle; docs/collector.md, "Shuffling"). The batch is a shuffled
:class:`collector.lanes.Unit` (collector.lanes.ShuffleLane holds it); each upload is answered when
every frame of its batch is acknowledged (202 still means "in Kafka").

What reaches Kafka links no report to its upload: the order is a uniform permutation of the batch,
frames are cut from it at sizes that depend on the batch's size alone (never on upload boundaries),
they carry no key, one timestamp per batch, and headers that are the same for every frame of the
batch but for the exactly-once nonce's frame index (collector/exactly_once/: the idempotency log
lists the keys of a whole batch together, so a key maps to its batch, never to a frame).
"""

from __future__ import annotations

import logging
import os

import numpy as np

from cms_core import claims, wire

#: Batches of more reports than this are permuted on a thread (about 1 µs a report in Python), so the
#: event loop keeps answering meanwhile.
THREAD_MIN_REPORTS = 20_000
_MAX_WORD = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


def uniform_below(bounds: np.ndarray) -> np.ndarray:
    """One uniform draw in [0, b) per bound b (uint64 array, every b >= 1), from ``os.urandom``.

    A 64-bit word is kept only below the largest multiple of b that fits in 64 bits (rejected with
    probability below b / 2^64, so almost never), which makes ``word % b`` exactly uniform: no value
    is favoured, as plain ``word % b`` would favour the small ones."""
    bounds = np.asarray(bounds, dtype=np.uint64)
    out = np.empty(bounds.shape[0], np.uint64)
    todo = np.arange(bounds.shape[0])
    while todo.size:
        words = np.frombuffer(os.urandom(8 * todo.size), np.uint64)
        b = bounds[todo]
        excess = (_MAX_WORD % b + np.uint64(1)) % b  # 2^64 mod b
        keep = words <= _MAX_WORD - excess  # words < 2^64 - (2^64 mod b): a whole number of b-cycles
        out[todo[keep]] = words[keep] % b[keep]
        todo = todo[~keep]
    return out


def secure_permutation(n: int) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` from the CSPRNG (never Python's ``random``).

    Fisher-Yates: for i = n-1 down to 1, swap position i with a position j uniform in [0, i]; the
    n - 1 draws come from :func:`uniform_below` in one ``os.urandom`` call. Each of the n! orders
    has probability 1/n! (every draw sequence gives a distinct permutation)."""
    order = list(range(n))
    if n < 2:
        return np.asarray(order, dtype=np.int64)
    draws = uniform_below(np.arange(n, 1, -1, dtype=np.uint64)).tolist()  # bounds i + 1 for i = n-1 .. 1
    for i, j in zip(range(n - 1, 0, -1), draws):
        order[i], order[j] = order[j], order[i]
    return np.asarray(order, dtype=np.int64)


def frame_sizes(n: int, max_records: int) -> list[int]:
    """The record counts of the frames a batch of n reports is cut into: as few frames as the bound
    allows, sizes differing by at most one. They depend on n alone (never on where uploads began)."""
    frames = -(-n // max_records)
    small, extra = divmod(n, frames)
    return [small + 1] * extra + [small] * (frames - extra)


def shuffle_and_cut(records: bytes | memoryview, record_size: int, fingerprint: bytes, max_records: int) -> list[bytes]:
    """Reports (``record_size`` bytes each, back to back) permuted (:func:`secure_permutation`) and cut into
    frames of one metric version (:func:`frame_sizes`)."""
    n = len(records) // record_size
    if n == 0:
        return []
    rows = np.frombuffer(records, np.uint8).reshape(n, record_size)[secure_permutation(n)]
    frames, start = [], 0
    for count in frame_sizes(n, max_records):
        header = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, fingerprint, count)
        frames.append(header + rows[start:start + count].tobytes())
        start += count
    return frames



def shuffle_claim_key(settings) -> bytes:
    """The key shuffled batches' claims are signed with (``--shuffle-claim-key-file``; cms_core.claims), b"" for
    none: a shuffling collector without one says once that no worker will state a central epsilon for its batches."""
    if settings.shuffle_claim_key_file:
        return claims.read_key(settings.shuffle_claim_key_file, settings.label("shuffle_claim_key_file"))
    if settings.shuffle_min_reports:
        logging.getLogger("ocms.collector").warning(
            "shuffling without --shuffle-claim-key-file: the batches' claims are not signed, so no worker states a "
            "central epsilon for them (docs/privacy.md, Who may claim a shuffle); the reports are shuffled all the same")
    return b""
