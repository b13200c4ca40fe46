"""Capture files: a sequence of wire messages, each prefixed by its length.

Format: for each message, a 4-byte big-endian unsigned length, then the
message bytes. This is exactly what kcat writes for a topic dump with
``kcat -C -b BROKER -t TOPIC -e -f '%R%s'`` (``%R`` = payload length as a
binary big-endian 32-bit integer), and what ``ocms simulate --out`` writes, so
``ocms estimate`` reads both.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from cms_core.errors import OCMSError

_LEN = struct.Struct(">I")
#: Larger than any valid wire message (1 Mi records of 37 bytes + header).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class CaptureFormatError(OCMSError, ValueError):
    """A capture file is truncated or holds an impossible length prefix."""


class CaptureWriter:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file: BinaryIO = open(self.path, "wb")
        self.messages = 0

    def write(self, message: bytes) -> None:
        self._file.write(_LEN.pack(len(message)))
        self._file.write(message)
        self.messages += 1

    def write_all(self, messages: Iterable[bytes]) -> None:
        for message in messages:
            self.write(message)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "CaptureWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_capture(path: str | Path) -> Iterator[bytes]:
    """Yield the messages of a capture file; a torn tail raises CaptureFormatError."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise CaptureFormatError(f"cannot read capture file {path}: {exc.strerror}") from exc
    with f:
        index = 0
        while True:
            prefix = f.read(_LEN.size)
            if not prefix:
                return
            if len(prefix) < _LEN.size:
                raise CaptureFormatError(f"{path}: message {index}: truncated length prefix")
            (size,) = _LEN.unpack(prefix)
            if size > MAX_MESSAGE_BYTES:
                raise CaptureFormatError(f"{path}: message {index}: length {size} exceeds {MAX_MESSAGE_BYTES}")
            body = f.read(size)
            if len(body) < size:
                raise CaptureFormatError(f"{path}: message {index}: {len(body)} of {size} bytes (truncated file)")
            yield body
            index += 1
