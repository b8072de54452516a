"""The GlobalMetadata record of an ``.et`` file, read without loading protobuf where it is plain.

A replay looks at every rank file's metadata (world size, device, step start) before it decodes the
nodes column-wise; importing protobuf for that alone costs ~0.025 s of CPU.  A metadata record
holding only a version string and attributes with a name and a scalar int64 / int32 / uint64 / bool /
string / double value (what every writer of this package and the Chakra tools write) is decoded here
by hand; anything else (gzip, another field or kind, a repeated field, a malformed record, text that
is not UTF-8) is read by protobuf (:func:`xsim_trace.io.et.read_metadata`), which gives the same
model or words the error.
"""

from __future__ import annotations

import functools
import io
import os
import struct
from typing import IO

from xsim_trace.graph.kinds import AttrKind
from xsim_trace.graph.model import Attr, GlobalMetadata

#: the scalar AttributeProto members decoded here: field number -> (kind, wire type)
_SCALARS = {
    3: (AttrKind.DOUBLE, 1),
    7: (AttrKind.INT32, 0),
    9: (AttrKind.INT64, 0),
    13: (AttrKind.UINT64, 0),
    27: (AttrKind.BOOL, 0),
    29: (AttrKind.STRING, 2),
}
_HEAD_BYTES = 1 << 16


class _Unplain(Exception):
    """Not a plain record: protobuf reads it."""


def read_metadata(source: str | os.PathLike[str] | IO[bytes]) -> GlobalMetadata:
    """The GlobalMetadata record alone (reads only the first record)."""
    if isinstance(source, (str, os.PathLike)):
        try:
            meta = _read_plain(os.fspath(source))
        except (OSError, _Unplain):
            meta = None
        if meta is not None:
            return meta
    from xsim_trace.io import et

    return et.read_metadata(source)


def metadata_from_bytes(data: bytes) -> GlobalMetadata:
    """The GlobalMetadata record of a whole ``.et`` file's (uncompressed) bytes: what
    :func:`read_metadata` gives for the file, from bytes already read."""
    try:
        ln, pos = _varint(data, 0, len(data))
        if pos + ln > len(data):
            raise _Unplain
        return _metadata(data, pos, pos + ln)
    except _Unplain:
        pass
    from xsim_trace.io import et

    return et.read_metadata(io.BytesIO(data))


def _read_plain(path: str) -> GlobalMetadata:
    with open(path, "rb") as f:
        head = f.read(_HEAD_BYTES)
        if head[:2] == b"\x1f\x8b":
            raise _Unplain
        ln, pos = _varint(head, 0, len(head))
        if pos + ln > len(head):
            if pos + ln > os.fstat(f.fileno()).st_size:
                raise _Unplain
            head += f.read(pos + ln - len(head))
            if pos + ln > len(head):
                raise _Unplain
    return _metadata(head, pos, pos + ln)


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Unplain
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7


def _fields(buf: bytes, pos: int, end: int):
    """``(field, wire type, value or (start, end) of a length-delimited payload)`` of one message."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wt = key >> 3, key & 7
        if wt == 0:
            value, pos = _varint(buf, pos, end)
        elif wt == 2:
            ln, pos = _varint(buf, pos, end)
            if pos + ln > end:
                raise _Unplain
            value, pos = (pos, pos + ln), pos + ln
        elif wt == 1:
            if pos + 8 > end:
                raise _Unplain
            value, pos = buf[pos:pos + 8], pos + 8
        else:
            raise _Unplain
        yield field, wt, value


def _text(buf: bytes, span: tuple[int, int]) -> str:
    try:
        return buf[span[0]:span[1]].decode("utf-8")
    except UnicodeDecodeError:
        raise _Unplain from None


def _metadata(buf: bytes, pos: int, end: int) -> GlobalMetadata:
    version = None
    attrs = []
    for field, wt, value in _fields(buf, pos, end):
        if field == 1 and wt == 2 and version is None:
            version = _text(buf, value)
        elif field == 2 and wt == 2:
            attrs.append(_attr_of(buf[value[0]:value[1]]))
        else:
            raise _Unplain
    return GlobalMetadata(version=version or "", attrs=tuple(attrs))


@functools.lru_cache(maxsize=256)
def _attr_of(raw: bytes) -> Attr:
    """One attribute record's Attr, decoded once per distinct record: a rank set's files repeat
    most of theirs (world size, device, the comm groups' text of ~20 KB on 1,024 ranks)."""
    return _attr(raw, 0, len(raw))


def _attr(buf: bytes, pos: int, end: int) -> Attr:
    name = doc = None
    kind, value = AttrKind.NONE, None
    for field, wt, raw in _fields(buf, pos, end):
        if field == 1 and wt == 2 and name is None:
            name = _text(buf, raw)
        elif field == 2 and wt == 2 and doc is None:
            doc = _text(buf, raw)
        elif field in _SCALARS and _SCALARS[field][1] == wt and kind is AttrKind.NONE:
            kind = _SCALARS[field][0]
            value = _scalar(buf, kind, raw)
        else:
            raise _Unplain
    return Attr(name=name or "", kind=kind, value=value, doc_string=doc or "")


def _scalar(buf: bytes, kind: AttrKind, raw):
    if kind is AttrKind.STRING:
        return _text(buf, raw)
    if kind is AttrKind.DOUBLE:
        return struct.unpack("<d", raw)[0]
    if kind is AttrKind.BOOL:
        return raw != 0
    if kind is AttrKind.UINT64:
        return raw
    if kind is AttrKind.INT32:
        raw &= 0xFFFFFFFF
        return raw - (1 << 32) if raw >= 1 << 31 else raw
    return raw - (1 << 64) if raw >= 1 << 63 else raw  # INT64
