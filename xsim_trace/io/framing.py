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
    window = _Window(stream, name)
    while True:
        head = window.length_prefix()
        if head is None:
            return
        yield window.payload(*head)


class _Window:
    """A window over ``stream`` read in chunks: ``buf[pos:]`` is not consumed yet, ``base`` is the
    stream offset of ``buf[0]``; a record split across chunks is kept whole by refilling from its start."""

    __slots__ = ("stream", "name", "buf", "pos", "base", "eof")

    def __init__(self, stream: IO[bytes], name: str) -> None:
        self.stream, self.name = stream, name
        self.buf = b""
        self.pos = 0
        self.base = 0
        self.eof = False

    def refill(self) -> bool:
        """Drop the consumed bytes and append the next chunk; False at the end of the stream."""
        if self.eof:
            return False
        try:
            more = self.stream.read(CHUNK_BYTES)
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise FormatError(f"cannot decompress: {exc}", file=self.name, offset=self.base + len(self.buf)) from None
        if not more:
            self.eof = True
            return False
        self.base += self.pos
        self.buf = self.buf[self.pos:] + more
        self.pos = 0
        return True

    def length_prefix(self) -> tuple[int, int] | None:
        """(start, length) of the next record, ``pos`` just after its varint32 length prefix; None at a
        clean end of the stream."""
        if self.pos >= len(self.buf) and not self.refill():
            return None
        while True:
            start = pos = self.pos
            length = shift = 0
            while pos < len(self.buf):
                byte = self.buf[pos]
                pos += 1
                length |= (byte & 0x7F) << shift
                if byte < 0x80:
                    if length > MAX_RECORD_BYTES:
                        raise FormatError(f"corrupt record: implausible length {length}", file=self.name,
                                          offset=self.base + start)
                    self.pos = pos
                    return start, length
                shift += 7
                if shift >= 35:
                    raise FormatError("corrupt record: length prefix longer than 5 bytes", file=self.name,
                                      offset=self.base + start)
            if not self.refill():  # the chunk ends inside the prefix: decode it again from a fuller window
                raise FormatError("truncated record: file ends inside a length prefix", file=self.name,
                                  offset=self.base + self.pos)

    def payload(self, start: int, length: int) -> tuple[int, bytes]:
        """(offset, bytes) of the record whose prefix starts at ``start`` (``pos`` is after the prefix)."""
        prefix_len = self.pos - start
        end = self.pos + length
        while end > len(self.buf):
            self.pos = start  # keep the whole record (prefix included) in the window
            if not self.refill():
                have = len(self.buf) - start - prefix_len
                raise FormatError(f"truncated record: needs {length} bytes, file has {have} left", file=self.name,
                                  offset=self.base + start)
            start = 0
            self.pos = prefix_len
            end = self.pos + length
        self.pos = end
        return self.base + start, self.buf[end - length:end]


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
