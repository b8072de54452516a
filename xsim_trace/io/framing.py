"""Length-delimited record framing of Chakra ``.et`` files: ``varint32(len) + message`` repeated.

The reader streams in fixed-size chunks, accepts gzip transparently, and distinguishes a clean end
of file (exactly at a record boundary) from a truncated or corrupt one, which raises
:class:`~xsim_trace.errors.FormatError` naming the file and byte offset (offsets are positions in
the decompressed stream for gzip input).
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from typing import IO, Iterator

from xsim_trace.errors import FormatError

CHUNK_BYTES = 1 << 22
GZIP_MAGIC = b"\x1f\x8b"
#: a record longer than this is taken as a corrupt length prefix, not an allocation to attempt
MAX_RECORD_BYTES = 1 << 30


def encode_varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def frame(payload: bytes) -> bytes:
    """One record: the payload's length as a varint, then the payload."""
    return encode_varint(len(payload)) + payload


def open_binary(source: str | os.PathLike[str] | IO[bytes]) -> tuple[IO[bytes], str, bool]:
    """Open ``source`` for binary reading, transparently un-gzipping.

    Returns (stream, display name, whether this function opened it and must close it).
    """
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        try:
            raw: IO[bytes] = open(name, "rb")
        except FileNotFoundError:
            raise FormatError("no such file", file=name) from None
        except IsADirectoryError:
            raise FormatError("is a directory, expected an .et file", file=name) from None
        except OSError as exc:
            raise FormatError(f"cannot open: {exc.strerror}", file=name) from None
        owned = True
    else:
        raw = source
        name = getattr(source, "name", None) or "<stream>"
        name = name if isinstance(name, str) else "<stream>"
        owned = False
    head = _peek(raw, 2)
    if head == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb"), name, True
    return raw, name, owned


def _peek(stream: IO[bytes], n: int) -> bytes:
    peek = getattr(stream, "peek", None)
    if peek is not None:
        return peek(n)[:n]
    if stream.seekable():
        pos = stream.tell()
        data = stream.read(n)
        stream.seek(pos)
        return data
    raise FormatError("stream is neither peekable nor seekable", file=getattr(stream, "name", "<stream>"))


def iter_records(stream: IO[bytes], name: str) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, payload)`` for each record of ``stream``; offset is where its prefix starts."""
    buf = b""
    pos = 0  # index into buf
    base = 0  # stream offset of buf[0]
    eof = False

    def refill() -> bool:
        nonlocal buf, pos, base, eof
        if eof:
            return False
        try:
            more = stream.read(CHUNK_BYTES)
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise FormatError(f"cannot decompress: {exc}", file=name, offset=base + len(buf)) from None
        if not more:
            eof = True
            return False
        base += pos
        buf = buf[pos:] + more
        pos = 0
        return True

    while True:
        if pos >= len(buf) and not refill():
            return
        start = pos
        # decode the varint32 length prefix
        length = 0
        shift = 0
        while True:
            if pos >= len(buf):
                pos = start
                if not refill():
                    raise FormatError(
                        "truncated record: file ends inside a length prefix", file=name, offset=base + pos
                    )
                start = pos
                length = 0
                shift = 0
                continue
            byte = buf[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift >= 35:
                raise FormatError("corrupt record: length prefix longer than 5 bytes", file=name, offset=base + start)
        if length > MAX_RECORD_BYTES:
            raise FormatError(f"corrupt record: implausible length {length}", file=name, offset=base + start)
        prefix_len = pos - start
        end = pos + length
        while end > len(buf):
            pos = start  # keep the whole record (prefix included) in the window
            if not refill():
                have = len(buf) - start - prefix_len
                raise FormatError(
                    f"truncated record: needs {length} bytes, file has {have} left", file=name, offset=base + start
                )
            start = 0
            pos = prefix_len
            end = pos + length
        yield base + start, buf[pos:end]
        pos = end


def read_all_records(source: str | os.PathLike[str] | IO[bytes]) -> Iterator[tuple[int, bytes, str]]:
    stream, name, owned = open_binary(source)
    try:
        for offset, payload in iter_records(stream, name):
            yield offset, payload, name
    finally:
        if owned:
            stream.close()


class RecordWriter:
    """Buffered writer of framed records to a binary stream."""

    def __init__(self, stream: IO[bytes], buffer_bytes: int = 1 << 20) -> None:
        self._stream = stream
        self._parts: list[bytes] = []
        self._size = 0
        self._limit = buffer_bytes

    def write(self, payload: bytes) -> None:
        n = len(payload)
        self._parts.append(encode_varint(n) if n >= 0x80 else bytes((n,)))
        self._parts.append(payload)
        self._size += n
        if self._size >= self._limit:
            self.flush()

    def flush(self) -> None:
        if self._parts:
            self._stream.write(b"".join(self._parts))
            self._parts.clear()
            self._size = 0


def is_gzip_name(path: str | os.PathLike[str]) -> bool:
    return os.fspath(path).endswith(".gz")


def bytes_io(data: bytes) -> io.BytesIO:
    return io.BytesIO(data)
