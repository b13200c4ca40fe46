"""Wire format v1: the one codec both the devices and the worker use.

Layout (all integers big-endian, "network order"); see docs/wire-format.md:

    offset size  field
    0      2     magic  0x4F 0x43 ("OC")
    2      1     version = 1
    3      1     kind: 1 = single report, 2 = frame of reports
    4      8     parameter fingerprint (OCMSParams.fingerprint)
    12     4     record count (1 for a single report; 1..MAX_FRAME_RECORDS for a frame)
    16     ...   count records of  a0 (W bytes) | a1 (W bytes) | z (Z bytes)

W = ceil(bits(field order - 1) / 8) and Z = ceil(bits(m - 1) / 8) come from the
parameters the fingerprint names, so a small field gives small reports
(F(10007), m = 4: 2 + 2 + 1 = 5 bytes per record). Direct randomized response
(the fingerprint names mechanism "direct", m = d) sends records of z alone, Z =
ceil(bits(d - 1) / 8) bytes (d = 16: 1 byte); the decoder restores the
identity coefficients (0, 1).

Decoding validates everything and raises exactly one :class:`WireFormatError`
subclass per fault; each carries a short ``reason`` code for dead-letter
headers and metric labels.
"""

from __future__ import annotations

import struct
from typing import Mapping

import numpy as np

from .errors import OCMSError
from .params import OCMSParams
from .reports import Report, ReportBatch, identity_coefficients
from .values import limbs_for

MAGIC = b"OC"
VERSION = 1
KIND_REPORT = 1
KIND_FRAME = 2
HEADER = struct.Struct(">2sBB8sI")
HEADER_SIZE = HEADER.size  # 16
#: A frame of this many 37-byte GF(2^128) records is ~37 MiB; Kafka's default limit is 1 MiB.
MAX_FRAME_RECORDS = 1 << 20


class WireFormatError(OCMSError, ValueError):
    """A message that is not a valid wire-format v1 message."""

    reason = "malformed"


class BadMagicError(WireFormatError):
    reason = "bad_magic"


class UnsupportedVersionError(WireFormatError):
    reason = "bad_version"


class UnknownKindError(WireFormatError):
    reason = "bad_kind"


class UnknownFingerprintError(WireFormatError):
    reason = "unknown_fingerprint"


class TruncatedMessageError(WireFormatError):
    reason = "truncated"


class OversizedMessageError(WireFormatError):
    reason = "oversized"


class CountMismatchError(WireFormatError):
    reason = "count_mismatch"


class CoefficientOutOfFieldError(WireFormatError):
    reason = "coefficient_out_of_field"


class HashRangeError(WireFormatError):
    reason = "z_out_of_range"


REASONS = tuple(
    cls.reason
    for cls in (
        BadMagicError, UnsupportedVersionError, UnknownKindError, UnknownFingerprintError, TruncatedMessageError,
        OversizedMessageError, CountMismatchError, CoefficientOutOfFieldError, HashRangeError,
    )
)


def record_size(params: OCMSParams) -> int:
    return params.report_bytes


def _record_columns(params: OCMSParams, batch: ReportBatch) -> list[np.ndarray]:
    """The (n, width) byte columns of one record each: a0 | a1 | z, or z alone (direct RR)."""
    z = _column_bytes(batch.z.astype(np.uint64), params.z_bytes)
    if params.is_direct:
        return [z]
    w = params.coefficient_bytes
    return [_column_bytes(batch.a0, w), _column_bytes(batch.a1, w), z]


def _column_bytes(column: np.ndarray, width: int) -> np.ndarray:
    """(n, width) uint8 big-endian bytes of a uint64 (n,) or (n, 2)-limb column."""
    n = column.shape[0]
    if column.ndim == 1:
        full = column.astype(">u8").view(np.uint8).reshape(n, 8)
        return full[:, 8 - width :]
    hi = column[:, 1].astype(">u8").view(np.uint8).reshape(n, 8)
    lo = column[:, 0].astype(">u8").view(np.uint8).reshape(n, 8)
    return np.concatenate([hi, lo], axis=1)[:, 16 - width :]


def _bytes_column(raw: np.ndarray, width: int, limbs: int) -> np.ndarray:
    """Inverse of :func:`_column_bytes`: (n, width) uint8 -> uint64 column(s)."""
    n = raw.shape[0]
    padded = np.zeros((n, 8 * limbs), np.uint8)
    padded[:, 8 * limbs - width :] = raw
    if limbs == 1:
        return padded.view(">u8").reshape(n).astype(np.uint64)
    words = padded.view(">u8").reshape(n, 2).astype(np.uint64)
    return np.ascontiguousarray(words[:, ::-1])  # little-endian limbs: [lo, hi]


_WORD_DTYPES = {1: ">u1", 2: ">u2", 4: ">u4", 8: ">u8"}


def _record_dtype(params: OCMSParams) -> np.dtype | None:
    """A numpy dtype that reads one record in place: fields ``a0``, ``a1``, ``z`` (16-byte
    coefficients as ``a0_hi``/``a0_lo`` ...), or None when a field is 3, 5, 6 or 7 bytes wide
    (those take the padded path of :func:`_bytes_column`). Direct RR records are ``z`` alone."""

    def build() -> np.dtype | None:
        w, limbs = params.coefficient_bytes, limbs_for(params)
        widths = [("z", params.z_bytes)] if params.is_direct else [("a0", w), ("a1", w), ("z", params.z_bytes)]
        fields = []
        for name, width in widths:
            if width in _WORD_DTYPES and (name == "z" or limbs == 1):
                fields.append((name, _WORD_DTYPES[width]))
            elif width == 16 and name != "z" and limbs == 2:
                fields += [(name + "_hi", ">u8"), (name + "_lo", ">u8")]
            else:
                return None
        return np.dtype(fields)

    return params.cached("wire.record_dtype", build)


def _record_field(records: np.ndarray, name: str, limbs: int) -> np.ndarray:
    """One coefficient column of in-place records as uint64 (n,) or little-endian limbs (n, 2)."""
    if limbs == 1:
        return records[name].astype(np.uint64)
    out = np.empty((records.shape[0], 2), np.uint64)
    out[:, 0] = records[name + "_lo"]
    out[:, 1] = records[name + "_hi"]
    return out


def encode_batch(params: OCMSParams, batch: ReportBatch, *, kind: int = KIND_FRAME) -> bytes:
    """One message holding every report of ``batch`` (validated first)."""
    batch.validate(params)
    n = len(batch)
    if kind == KIND_REPORT and n != 1:
        raise CountMismatchError(f"a single-report message holds exactly 1 record, not {n}")
    if not 1 <= n <= MAX_FRAME_RECORDS:
        raise CountMismatchError(f"a frame holds 1..{MAX_FRAME_RECORDS} records, not {n}")
    body = np.concatenate(_record_columns(params, batch), axis=1)
    return HEADER.pack(MAGIC, VERSION, kind, params.fingerprint, n) + body.tobytes()


def encode_reports(params: OCMSParams, batch: ReportBatch) -> list[bytes]:
    """One single-report message per report of ``batch`` (vectorized)."""
    batch.validate(params)
    n = len(batch)
    if n == 0:
        return []
    header = np.frombuffer(HEADER.pack(MAGIC, VERSION, KIND_REPORT, params.fingerprint, 1), np.uint8)
    rows = np.concatenate([np.broadcast_to(header, (n, HEADER_SIZE))] + _record_columns(params, batch), axis=1)
    flat = rows.tobytes()
    size = rows.shape[1]
    return [flat[i : i + size] for i in range(0, n * size, size)]


def encode_report(params: OCMSParams, report: Report) -> bytes:
    """A single-report message."""
    return encode_batch(params, ReportBatch.from_reports(params, [report]), kind=KIND_REPORT)


def encode_frame(params: OCMSParams, batch: ReportBatch) -> bytes:
    """A frame packing many reports (gateways, the simulator)."""
    return encode_batch(params, batch, kind=KIND_FRAME)


def _unsupported_version(version: int) -> str:
    """What a device (or an operator reading a dead letter) needs to know about a wire version this build
    cannot read: which one it reads, and which side to upgrade (docs/compatibility.md)."""
    from .version import __version__

    if version > VERSION:
        return (f"unsupported wire version {version}: ocms {__version__} reads wire version {VERSION}; the device "
                f"client is newer than this server: upgrade the collector and workers to a release that reads "
                f"wire version {version} (docs/compatibility.md), or use a client that writes version {VERSION}")
    return (f"unsupported wire version {version}: ocms {__version__} reads wire version {VERSION}; upgrade the "
            f"device client to one that writes wire version {VERSION} (docs/compatibility.md)")


def peek_header(data: bytes) -> tuple[int, bytes, int]:
    """(kind, fingerprint, count) after checking magic, version and kind."""
    if len(data) < HEADER_SIZE:
        raise TruncatedMessageError(f"message of {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
    magic, version, kind, fingerprint, count = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise BadMagicError(f"bad magic {magic.hex()} (expected {MAGIC.hex()})")
    if version != VERSION:
        raise UnsupportedVersionError(_unsupported_version(version))
    if kind not in (KIND_REPORT, KIND_FRAME):
        raise UnknownKindError(f"unknown message kind {kind}")
    return kind, fingerprint, count


def decode_message(data: bytes, registry: Mapping[bytes, OCMSParams]) -> tuple[OCMSParams, ReportBatch]:
    """Parse and validate one message; ``registry`` maps fingerprints to parameters."""
    data = bytes(data) if not isinstance(data, bytes) else data
    kind, fingerprint, count = peek_header(data)
    params = registry.get(fingerprint)
    if params is None:
        raise UnknownFingerprintError(f"unknown parameter fingerprint {fingerprint.hex()}")
    if kind == KIND_REPORT and count != 1:
        raise CountMismatchError(f"a single-report message must hold 1 record, header says {count}")
    if count == 0 or count > MAX_FRAME_RECORDS:
        raise CountMismatchError(f"record count {count} outside 1..{MAX_FRAME_RECORDS}")
    size = record_size(params)
    expected = HEADER_SIZE + count * size
    if len(data) < expected:
        raise TruncatedMessageError(f"{len(data)} bytes for {count} records of {size} bytes (need {expected})")
    if len(data) > expected:
        if (len(data) - HEADER_SIZE) % size == 0:
            raise CountMismatchError(
                f"header says {count} records but the body holds {(len(data) - HEADER_SIZE) // size}"
            )
        raise OversizedMessageError(f"{len(data)} bytes, expected {expected} for {count} records")
    if params.is_direct:
        a0, a1 = identity_coefficients(count)
    dtype = _record_dtype(params)
    if dtype is not None:  # the common widths: read in place, one numpy view (the worker's intake path)
        records = np.frombuffer(data, dtype, count=count, offset=HEADER_SIZE)
        z = records["z"]
        if not params.is_direct:
            limbs = limbs_for(params)
            a0, a1 = _record_field(records, "a0", limbs), _record_field(records, "a1", limbs)
    else:
        raw = np.frombuffer(data, np.uint8, offset=HEADER_SIZE).reshape(count, size)
        zw = params.z_bytes
        z = _bytes_column(raw[:, size - zw :], zw, 1)  # z closes every record (and is all of a direct one)
        if not params.is_direct:
            w, limbs = params.coefficient_bytes, limbs_for(params)
            a0 = _bytes_column(raw[:, :w], w, limbs)
            a1 = _bytes_column(raw[:, w : 2 * w], w, limbs)
    if params.field.kind == "prime" and not params.is_direct:
        order = params.field.order
        if int(a0.max()) >= order or int(a1.max()) >= order:
            bad = int(np.argmax((a0 >= order) | (a1 >= order)))
            raise CoefficientOutOfFieldError(f"record {bad}: a0 or a1 >= field order {order}")
    if int(z.max()) >= params.hash_range:
        bad = int(np.argmax(z >= params.hash_range))
        raise HashRangeError(f"record {bad}: z={int(z[bad])} >= m={params.hash_range}")
    return params, ReportBatch(a0, a1, z.astype(np.uint32))


#: Kafka record header of a frame a shuffling collector produced (docs/wire-format.md, "Shuffled
#: frames"): the number of reports of the shuffled batch the frame's reports were permuted among,
#: ASCII decimal digits. Frames without it were not shuffled.
SHUFFLE_HEADER = "ocms-shuffle-n"


#: What :func:`header_value` returns for a header given more than once.
TWICE = object()


def header_value(headers, name: str):
    """The value of Kafka header ``name`` in ``headers`` ((name, value) pairs or a mapping; None for none): None
    when absent, :data:`TWICE` when given more than once (neither value is believed)."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found = None
    for pair in pairs:
        try:
            key, value = pair
        except (TypeError, ValueError):
            continue
        if key == name or key == name.encode():
            if found is not None:
                return TWICE
            found = value
    return found


def shuffled_batch_size(headers, records: int) -> int | None:
    """The shuffled batch size a frame's Kafka headers state: 0 without :data:`SHUFFLE_HEADER` (not
    shuffled), None for a header that is not a count of at least the frame's ``records`` (a batch of
    n reports cannot hold a frame of more than n; the caller treats such a frame as not shuffled).

    ``headers``: what a Kafka client gives, (name, bytes) pairs or a mapping; None for none."""
    found = header_value(headers, SHUFFLE_HEADER)
    if found is None:
        return 0
    if found is TWICE:
        return None  # two batch sizes: neither is believed
    if isinstance(found, str):
        found = found.encode("ascii", "replace")
    if not isinstance(found, (bytes, bytearray)) or not 1 <= len(found) <= 10 or not found.isdigit():
        return None
    size = int(found)
    return size if size >= max(1, records) else None
