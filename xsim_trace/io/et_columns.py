"""Decode a Chakra ``.et`` file straight into per-node numpy columns, with no per-node Python
objects: the replay path's reader (the typed :func:`~xsim_trace.io.et.read_et` stays for library
users and for error reporting).

:func:`read_columns` returns None when the fast decoder is unavailable (numba missing) or meets
anything it does not handle exactly like the typed reader (malformed records, a replay attribute of
an unexpected kind, ids above 2**63-1); the caller then reads the file the typed way, which raises
the precise error or handles the odd case.
"""

from __future__ import annotations

import gzip
import logging
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

log = logging.getLogger(__name__)


class NameTable(Sequence[str]):
    """Node names kept as one UTF-8 byte buffer and offsets; a name is decoded when asked for."""

    __slots__ = ("_buf", "_off")

    def __init__(self, buf: bytes, offsets: np.ndarray) -> None:
        self._buf = buf
        self._off = offsets  # int64 [n+1]

    def __len__(self) -> int:
        return int(self._off.shape[0]) - 1

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._buf[int(self._off[i]):int(self._off[i + 1])].decode("utf-8")

    @property
    def nbytes(self) -> int:
        return len(self._buf) + self._off.nbytes

    @staticmethod
    def concat(tables: Sequence["NameTable"]) -> "NameTable":
        bufs, offs, base = [], [np.zeros(1, np.int64)], 0
        for t in tables:
            bufs.append(t._buf)
            offs.append(t._off[1:] + base)
            base += len(t._buf)
        return NameTable(b"".join(bufs), np.concatenate(offs))


@dataclass(frozen=True, slots=True)
class NodeColumns:
    """What replay reads of one rank's nodes, in file order.  ``*_has`` says whether the attribute
    is present (an attribute with no value counts as absent); ``pg_name``, ``comm_kind`` and
    ``ring_order`` map a node's position to its value, for the nodes that have one."""

    source: str | None
    node_id: np.ndarray  # int64
    node_type: np.ndarray  # int64 (the raw enum value)
    duration_micros: np.ndarray  # int64
    names: NameTable
    dep_ptr: np.ndarray  # int64 [n+1]: deps of node i are deps[dep_ptr[i]:dep_ptr[i+1]], data deps first
    deps: np.ndarray  # int64 node ids
    ivals: np.ndarray  # int64 [n, len(INT_ATTRS)]
    ihas: np.ndarray  # uint8 [n, len(INT_ATTRS)]
    pg_name: dict[int, str]
    comm_kind: dict[int, str]
    ring_order: dict[int, tuple[int, ...]]

    def __len__(self) -> int:
        return int(self.node_id.shape[0])

    def int_attr(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        from xsim_trace.io._et_kernel import INT_ATTRS

        k = INT_ATTRS.index(name)
        return self.ivals[:, k], self.ihas[:, k].astype(bool)


def _kernel():
    try:
        from xsim_trace.io import _et_kernel
    except ImportError:  # numba not installed: the typed reader does the work
        return None
    return _et_kernel


def read_columns(path: str | os.PathLike[str]) -> NodeColumns | None:
    """The columns of one ``.et`` file (plain or gzip), or None to read it the typed way."""
    k = _kernel()
    if k is None:
        return None
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError):
        return None
    buf = np.frombuffer(data, np.uint8)
    records = int(k.count_records(buf))
    if records < 1:
        return None
    n = records - 1
    wn, wo = k.wanted_names()
    node_id = np.empty(n, np.int64)
    ntype = np.empty(n, np.int64)
    dur = np.empty(n, np.int64)
    name_off = np.empty(n, np.int64)
    name_len = np.empty(n, np.int64)
    ivals = np.zeros((n, k.N_INT), np.int64)
    ihas = np.zeros((n, k.N_INT), np.uint8)
    soff = np.empty((n, k.N_STR), np.int64)
    slen = np.empty((n, k.N_STR), np.int64)
    loff = np.empty(n, np.int64)
    llen = np.empty(n, np.int64)
    dep_ptr = np.empty(n + 1, np.int64)
    status, deps = k.decode_nodes(buf, wn, wo, node_id, ntype, dur, name_off, name_len, ivals, ihas, soff, slen,
                                  loff, llen, dep_ptr, max(16, 2 * n))
    if status != k.OK:
        log.debug("%s: fast decoder status %d, reading it the typed way", name, status)
        return None
    try:
        names = _names(data, name_off, name_len)
        strs = [_strings(data, soff[:, j], slen[:, j]) for j in range(k.N_STR)]
        rings = _rings(data, loff, llen)
    except (UnicodeDecodeError, ValueError):
        return None
    return NodeColumns(source=name, node_id=node_id, node_type=ntype, duration_micros=dur, names=names,
                       dep_ptr=dep_ptr, deps=deps.copy(), ivals=ivals, ihas=ihas,
                       pg_name=strs[0], comm_kind=strs[1], ring_order=rings)


def _names(data: bytes, off: np.ndarray, ln: np.ndarray) -> NameTable:
    """All names gathered into one buffer (checked as UTF-8 once, NUL-separated so no two names
    can join into one valid sequence), kept without the separators."""
    n = off.shape[0]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(ln, out=offsets[1:])
    if n == 0:
        return NameTable(b"", offsets)
    src = np.frombuffer(data, np.uint8)
    total = int(offsets[-1])
    idx = np.repeat(off - offsets[:-1], ln) + np.arange(total, dtype=np.int64)
    packed = src[idx].tobytes()
    sep = np.zeros(total + n, np.uint8)
    pos = np.arange(total, dtype=np.int64) + np.repeat(np.arange(n, dtype=np.int64), ln)
    sep[pos] = src[idx]
    sep.tobytes().decode("utf-8")  # raises UnicodeDecodeError like the typed reader would
    return NameTable(packed, offsets)


def _strings(data: bytes, off: np.ndarray, ln: np.ndarray) -> dict[int, str]:
    out: dict[int, str] = {}
    memo: dict[bytes, str] = {}
    for i in np.flatnonzero(off >= 0).tolist():
        raw = data[int(off[i]):int(off[i]) + int(ln[i])]
        s = memo.get(raw)
        if s is None:
            s = memo[raw] = raw.decode("utf-8")
        out[i] = s
    return out


def _rings(data: bytes, off: np.ndarray, ln: np.ndarray) -> dict[int, tuple[int, ...]]:
    """``ring_order`` values, decoded by protobuf from each attribute's bytes."""
    idx = np.flatnonzero(off >= 0).tolist()
    if not idx:
        return {}
    from google.protobuf.message import DecodeError

    from xsim_trace.io.codec import attr_from_pb
    from xsim_trace.schema import pb

    out: dict[int, tuple[int, ...]] = {}
    for i in idx:
        msg = pb.AttributeProto()
        try:
            msg.ParseFromString(data[int(off[i]):int(off[i]) + int(ln[i])])
        except DecodeError as exc:
            raise ValueError(str(exc)) from None
        value = attr_from_pb(msg).value
        if value is None:
            continue
        if not isinstance(value, tuple) or not all(isinstance(x, int) for x in value):
            raise ValueError("ring_order is not a list of ints")
        out[i] = value
    return out
