"""Capture files: a sequence of wire messages, each prefixed by its length.

Format: for each message, a 4-byte big-endian unsigned length, then the
message bytes. This is exactly what kcat writes for a topic dump with
``kcat -C -b BROKER -t TOPIC -e -f '%R%s'`` (``%R`` = payload length as a
binary big-endian 32-bit integer), and what ``ocms simulate --out`` writes, so
``ocms estimate`` reads both. The path ``-`` is standard output for a writer and
standard input for a reader, so ``ocms simulate --out - | ocms estimate ... -`` works.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Iterable, Iterator

from cms_core.errors import OCMSError

if TYPE_CHECKING:
    from cms_core.reports import ReportBatch

_LEN = struct.Struct(">I")
#: Larger than any valid wire message (1 Mi records of 37 bytes + header).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: The path that means standard output (writing) or standard input (reading), as in most Unix tools.
STDIO_PATH = "-"


def is_stdio(path) -> bool:
    """Whether ``path`` names standard output or input (``-``) rather than a file."""
    return str(path) == STDIO_PATH


def output_name(path: str) -> str:
    """How a summary names an output: ``-`` is standard output."""
    return "standard output" if is_stdio(path) else path


class CaptureFormatError(OCMSError, ValueError):
    """A capture file is truncated or holds an impossible length prefix."""


class CaptureWriter:
    """Write a capture file; ``-`` writes to standard output (flushed, not closed, at the end)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._stdio = is_stdio(path)
        self._file: BinaryIO = sys.stdout.buffer if self._stdio else open(self.path, "wb")
        self.messages = 0

    def write(self, message: bytes) -> None:
        self._file.write(_LEN.pack(len(message)))
        self._file.write(message)
        self.messages += 1

    def write_all(self, messages: Iterable[bytes]) -> None:
        for message in messages:
            self.write(message)

    def close(self) -> None:
        if self._stdio:
            self._file.flush()
        else:
            self._file.close()

    def __enter__(self) -> "CaptureWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class CaptureDamage:
    """Where a capture file stops being readable: everything from ``offset`` on is ignored.

    A capture tool killed mid-write leaves a torn last message (a short length
    prefix or a short body); an impossible length prefix leaves the rest of the
    file unreadable too (the format has no resynchronisation marker).
    """

    path: str
    offset: int  # byte offset of the first unreadable length prefix
    message_index: int  # messages before it (all read)
    reason: str
    ignored_bytes: int  # bytes from offset to the end of the file (a lower bound when not ignored_bytes_exact)
    ignored_bytes_exact: bool = True  # False: a stream longer than MAX_COUNTED_TAIL_BYTES past the damage

    def describe(self) -> str:
        ignored = (f"the last {self.ignored_bytes:,} bytes are ignored" if self.ignored_bytes_exact else
                   f"the rest of the stream (more than {self.ignored_bytes:,} bytes) is ignored")
        return (f"{self.path}: damaged tail at byte offset {self.offset} (after {self.message_index:,} complete "
                f"messages): {self.reason}; {ignored}")


class CaptureReader:
    """Iterate a capture's complete messages; a damaged tail ends the iteration and is kept in ``damage``.

    ``strict=True`` raises :class:`CaptureFormatError` at the damage instead.
    """

    def __init__(self, path: str | Path, *, strict: bool = False):
        self.path = Path(path)
        self.strict = strict
        self.messages = 0
        self.damage: CaptureDamage | None = None

    def __iter__(self) -> Iterator[bytes]:
        path = self.path
        if is_stdio(path):
            yield from self._read(sys.stdin.buffer, "standard input")
            return
        try:
            f = open(path, "rb")
        except OSError as exc:
            raise CaptureFormatError(f"cannot read capture file {path}: {exc.strerror}") from exc
        with f:
            yield from self._read(f, str(path))

    def _read(self, f: BinaryIO, name: str) -> Iterator[bytes]:
        offset = 0
        while True:
            prefix = f.read(_LEN.size)
            if not prefix:
                return
            reason, body = None, b""
            if len(prefix) < _LEN.size:
                reason = f"truncated length prefix ({len(prefix)} of {_LEN.size} bytes)"
            else:
                (size,) = _LEN.unpack(prefix)
                if size > MAX_MESSAGE_BYTES:
                    reason = f"length prefix {size:,} exceeds {MAX_MESSAGE_BYTES:,} (not a capture file, or corrupt)"
                else:
                    body = f.read(size)
                    if len(body) < size:
                        reason = f"truncated message: {len(body):,} of {size:,} bytes"
            if reason is not None:
                ignored, exact = bytes_to_end(f, offset, len(prefix) + len(body))
                self.damage = CaptureDamage(name, offset, self.messages, reason, ignored, exact)
                if self.strict:
                    raise CaptureFormatError(self.damage.describe())
                return
            offset += _LEN.size + size
            self.messages += 1
            yield body


#: How much of a stream past its damage is read to count the ignored bytes (a pipe has no size).
MAX_COUNTED_TAIL_BYTES = 256 * 1024 * 1024


def bytes_to_end(f: BinaryIO, offset: int, read_past_offset: int) -> tuple[int, bool]:
    """(bytes from ``offset`` to the end of ``f``, exact?), ``f`` having read ``read_past_offset`` of them.

    A regular file's size says it. A pipe (``-``, /dev/stdin) has size 0, so it is read to its end and
    counted, up to MAX_COUNTED_TAIL_BYTES (then the count is a lower bound: an endless stream)."""
    info = os.fstat(f.fileno())
    if stat.S_ISREG(info.st_mode):
        return max(info.st_size - offset, 0), True
    rest = read_past_offset
    while rest <= MAX_COUNTED_TAIL_BYTES:
        chunk = f.read(1 << 20)
        if not chunk:
            return rest, True
        rest += len(chunk)
    return rest, False


def read_capture(path: str | Path, *, strict: bool = True) -> Iterator[bytes]:
    """Yield the messages of a capture file; a torn tail raises CaptureFormatError (``strict=False``: stops)."""
    return iter(CaptureReader(path, strict=strict))


def read_report_batch(path: str | Path, params) -> "ReportBatch":
    """All reports of a capture of single-report messages of one parameter set, as one ReportBatch.

    Vectorized (one ``cms_core.wire.decode_message`` over the records re-framed), for captures of
    millions of reports from a device client (``ocms-report-c --out``, the privacy audit); every
    message must be a single report with ``params``' fingerprint (CaptureFormatError otherwise).
    """
    import numpy as np

    from cms_core import wire

    raw = np.frombuffer(Path(path).read_bytes(), np.uint8)
    size = wire.HEADER_SIZE + wire.record_size(params)
    if raw.size == 0 or raw.size % (4 + size):
        raise CaptureFormatError(f"{path}: not a capture of single reports of {size} bytes")
    rows = raw.reshape(-1, 4 + size)
    single = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_REPORT, params.fingerprint, 1)
    if not ((rows[:, :4].view(">u4").ravel() == size).all() and (rows[:, 4:4 + wire.HEADER_SIZE] == np.frombuffer(single, np.uint8)).all()):
        raise CaptureFormatError(f"{path}: a message is not a single report of fingerprint {params.fingerprint.hex()}")
    header = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, params.fingerprint, rows.shape[0])
    return wire.decode_message(header + rows[:, 4 + wire.HEADER_SIZE:].tobytes(), {params.fingerprint: params})[1]
