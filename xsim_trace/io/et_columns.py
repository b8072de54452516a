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
import sys
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from xsim_trace.errors import XsimError
from xsim_trace.graph.model import GlobalMetadata
from xsim_trace.io.et_wanted import INT_ATTRS
from xsim_trace.io.metadata import metadata_from_bytes

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
    #: nodes per file when several files were read as one set (``read_columns_many``)
    rank_sizes: tuple[int, ...] = ()
    #: each file's GlobalMetadata record, in file order (decoded from the same bytes as the nodes)
    metadata: tuple[GlobalMetadata, ...] = ()

    def __len__(self) -> int:
        return int(self.node_id.shape[0])

    def int_attr(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        from xsim_trace.io.et_wanted import INT_ATTRS

        k = INT_ATTRS.index(name)
        return self.ivals[:, k], self.ihas[:, k].astype(bool)


#: from this many bytes of rank files on, the numba kernel decodes them (where numba is installed): below,
#: its numpy twin is cheaper than loading numba (~0.5 s of CPU per process, its import and first kernel)
NUMBA_DECODE_MIN_BYTES = 24 << 20


def _kernel(decoder: str | None, total_bytes: int):
    """The numba kernel module, or None for the numpy decoder (:mod:`xsim_trace.io._et_numpy`).
    ``decoder``: "numba", "numpy", or None to decide by size (numba where it is loaded already)."""
    if decoder == "numpy" or (decoder is None and total_bytes < NUMBA_DECODE_MIN_BYTES and "numba" not in sys.modules):
        return None
    if decoder not in (None, "numba"):
        raise ValueError(f"decoder {decoder!r}: expected 'numba', 'numpy' or None")
    try:
        from xsim_trace.io import _et_kernel
    except ImportError:  # numba not installed
        return None
    return _et_kernel


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error):  # unreadable: the typed reader words the error
        return None
    return data


def _read_file(path: str) -> tuple[bytes, GlobalMetadata] | None:
    """A file's (uncompressed) bytes and its metadata record, read once; None where either is
    unreadable (the typed reader words the error)."""
    data = _read_bytes(path)
    if data is None:
        return None
    try:
        return data, metadata_from_bytes(data)
    except XsimError:
        return None


def read_columns(path: str | os.PathLike[str], *, decoder: str | None = None) -> NodeColumns | None:
    """The columns of one ``.et`` file (plain or gzip), or None to read it the typed way."""
    return read_columns_many([path], decoder=decoder)


def read_columns_many(paths: Sequence[str | os.PathLike[str]], *, decoder: str | None = None) -> NodeColumns | None:
    """The columns of several ``.et`` files as one set, in order (``rank_sizes`` says where each
    file's nodes are), or None to read them the typed way.  ``decoder``: "numba", "numpy" or None
    (by size: :data:`NUMBA_DECODE_MIN_BYTES`); both give the same columns or both refuse."""
    names = [os.fspath(p) for p in paths]
    try:
        total_bytes = sum(os.path.getsize(n) for n in names)
    except OSError:
        return None
    k = _kernel(decoder, total_bytes)
    if k is None:
        return _read_numpy(names)
    return _read_numba(k, names)


def _read_numba(k, names: list[str]) -> NodeColumns | None:
    """The numba kernel's way: each file is read once and its nodes counted, then the files' bytes
    are decoded into the shared arrays (each file's bytes let go once decoded), so no per-file copy
    of the columns is kept."""
    sizes, blobs, metas = [], [], []
    for name in names:
        got = _read_file(name)
        records = -1 if got is None else int(k.count_records(np.frombuffer(got[0], np.uint8)))
        if records < 1:
            return None
        sizes.append(records - 1)
        blobs.append(got[0])
        metas.append(got[1])
    total = sum(sizes)
    wn, wo = k.wanted_names()
    node_id = np.empty(total, np.int64)
    ntype = np.empty(total, np.int64)
    dur = np.empty(total, np.int64)
    ivals = np.zeros((total, k.N_INT), np.int64)
    ihas = np.zeros((total, k.N_INT), np.uint8)
    dep_ptr = np.empty(total + 1, np.int64)
    deps, tables, strs, rings, seen = [], [], [{}, {}], {}, {}
    base = nd_base = 0
    for i, (name, n) in enumerate(zip(names, sizes)):
        data, blobs[i] = blobs[i], None
        buf = np.frombuffer(data, np.uint8)
        name_off, name_len = np.empty(n, np.int64), np.empty(n, np.int64)
        soff, slen = np.empty((n, k.N_STR), np.int64), np.empty((n, k.N_STR), np.int64)
        loff, llen = np.empty(n, np.int64), np.empty(n, np.int64)
        local_ptr = np.empty(n + 1, np.int64)
        local_deps = np.empty(len(data), np.int64)
        sl = slice(base, base + n)
        status, nd = k.decode_nodes(buf, wn, wo, node_id[sl], ntype[sl], dur[sl], name_off, name_len, ivals[sl], ihas[sl],
                                    soff, slen, loff, llen, local_ptr, local_deps, np.empty(len(data), np.int64))
        if status != k.OK:
            log.debug("%s: fast decoder status %d, reading it the typed way", name, status)
            return None
        if not _strings_of(data, name_off, name_len, soff, slen, loff, llen, base, tables, strs, rings, seen):
            return None
        dep_ptr[sl] = local_ptr[:n] + nd_base
        deps.append(local_deps[:nd].copy())
        base += n
        nd_base += nd
    dep_ptr[total] = nd_base
    return NodeColumns(source=names[0] if len(names) == 1 else None, node_id=node_id, node_type=ntype,
                       duration_micros=dur, names=NameTable.concat(tables) if len(tables) != 1 else tables[0],
                       dep_ptr=dep_ptr, deps=np.concatenate(deps) if deps else np.zeros(0, np.int64),
                       ivals=ivals, ihas=ihas, pg_name=strs[0], comm_kind=strs[1], ring_order=rings,
                       rank_sizes=tuple(sizes), metadata=tuple(metas))


#: the numpy decoder walks files together in batches of about this many bytes: one walk for many small
#: files (a 1,024-rank set of one node each), one per file of a MB (walking two at once was ~20 % slower)
NUMPY_BATCH_BYTES = 256 << 10


def _read_numpy(names: list[str]) -> NodeColumns | None:
    """The numpy decoder's way: every file read, a file like an earlier one decoded by difference
    (:mod:`xsim_trace.io.et_diff`), the others whole in batches (:func:`_et_numpy.decode_many`);
    the batches' columns concatenated in file order."""
    from xsim_trace.io import _et_numpy, et_diff

    datas, metas = [], []
    for name in names:
        got = _read_file(name)
        if got is None:
            return None
        datas.append(got[0])
        metas.append(got[1])
    plan = _diff_plan(datas)
    if plan is None:
        return None
    parts, tables, strs, rings, sizes, seen = [], [], [{}, {}], {}, [], {}
    local: dict[int, _et_numpy.FileColumns] = {}  # base files' own columns, by file index
    base = 0
    for batch in _batches(plan, datas):
        whole = plan[batch[0]][0] is None
        if whole:
            got = _et_numpy.decode_many([datas[i] for i in batch], [plan[i][1] for i in batch])
            if not isinstance(got, tuple):
                log.debug("numpy decoder status %s, reading the set the typed way", got)
                return None
            c, batch_sizes, joined = got
            _keep_bases(plan, batch, datas, c, local)
        else:
            c, batch_sizes, joined = _decode_by_difference(plan, batch, datas, local)
            if c is None:
                return None
        if not _strings_of(joined, c.name_off, c.name_len, c.soff, c.slen, c.loff, c.llen, base, tables, strs, rings, seen):
            return None
        parts.append(c)
        sizes.extend(batch_sizes)
        base += c.node_id.shape[0]
    if not parts:
        return None
    dep_ptr = np.zeros(base + 1, np.int64)
    at = deps_at = 0
    for c in parts:
        n = c.node_id.shape[0]
        dep_ptr[at:at + n] = c.dep_ptr[:n] + deps_at
        at += n
        deps_at += c.deps.shape[0]
    dep_ptr[base] = deps_at

    def cat(field: str) -> np.ndarray:
        cols = [getattr(c, field) for c in parts]
        return cols[0] if len(cols) == 1 else np.concatenate(cols)

    return NodeColumns(source=names[0] if len(names) == 1 else None, node_id=cat("node_id"), node_type=cat("node_type"),
                       duration_micros=cat("duration_micros"),
                       names=NameTable.concat(tables) if len(tables) != 1 else tables[0], dep_ptr=dep_ptr,
                       deps=cat("deps"), ivals=cat("ivals"), ihas=cat("ihas"), pg_name=strs[0], comm_kind=strs[1],
                       ring_order=rings, rank_sizes=tuple(sizes), metadata=tuple(metas))


def _diff_plan(datas: list[bytes]) -> list[tuple] | None:
    """Per file: ``(None, framed)`` to decode it whole, or ``(base file, changed node records)`` to
    decode it by difference from an earlier whole-decoded file of its length; None where a file's
    framing is broken (the typed reader words the error)."""
    from xsim_trace.io import _et_numpy, et_diff

    plan: list[tuple] = []
    base_of_len: dict[int, int] = {}
    framings: dict[int, object] = {}
    for i, data in enumerate(datas):
        b = base_of_len.get(len(data))
        if b is not None:
            changed = et_diff.changed_records(data, datas[b], framings[b])
            if changed is not None and changed.records.shape[0] <= et_diff.MAX_CHANGED_FRACTION * framings[b].nodes:
                plan.append((b, changed))
                continue
        framed = _et_numpy.frame(data)
        if framed is None or not framed[0]:
            return None
        plan.append((None, framed))
        framings[i] = et_diff.framing(framed)
        base_of_len[len(data)] = i
    return [(None, p[1]) if p[0] is None else (p[0], p[1], framings[p[0]]) for p in plan]


def _batches(plan: list[tuple], datas: list[bytes]):
    """Runs of consecutive files decoded the same way: whole, about :data:`NUMPY_BATCH_BYTES` a
    batch; by difference, the whole run (one decode of all its changed records)."""
    batch: list[int] = []
    size = 0
    for i, p in enumerate(plan):
        whole = p[0] is None
        if batch and (whole != (plan[batch[0]][0] is None) or (whole and size >= NUMPY_BATCH_BYTES)):
            yield batch
            batch, size = [], 0
        batch.append(i)
        size += len(datas[i])
    if batch:
        yield batch


def _keep_bases(plan: list[tuple], batch: list[int], datas: list[bytes], c, local: dict) -> None:
    """Keep the own columns of the files of a whole-decoded batch that others are decoded from."""
    from xsim_trace.io import et_diff

    needed = {p[0] for p in plan if p[0] is not None}
    row = off = 0
    for i in batch:
        n = len(plan[i][1][0]) - 1
        if i in needed:
            local[i] = et_diff.file_slice(c, row, row + n, off)
        row += n
        off += len(datas[i])


def _decode_by_difference(plan: list[tuple], batch: list[int], datas: list[bytes], local: dict):
    """``(columns, nodes per file, the files joined)`` of a batch of files decoded by difference, or
    ``(None, ...)`` where a changed record is refused (as a whole decode would refuse it)."""
    from xsim_trace.io import _et_numpy, et_diff

    offs, off = [], 0
    for i in batch:
        offs.append(off)
        off += len(datas[i])
    joined = datas[batch[0]] if len(batch) == 1 else b"".join(datas[i] for i in batch)
    bases = [local[plan[i][0]] for i in batch]
    changed = [et_diff.to_decode(plan[i][1], b) for i, b in zip(batch, bases)]
    starts, ends = et_diff.record_bounds([plan[i][2] for i in batch], changed, offs)
    fresh = _et_numpy.decode_records(joined, starts, ends)
    if not isinstance(fresh, tuple):
        log.debug("numpy decoder status %s, reading the set the typed way", fresh)
        return None, (), joined
    return et_diff.splice(bases, changed, offs, fresh), tuple(int(b.node_id.shape[0]) for b in bases), joined


def _strings_of(data: bytes, name_off, name_len, soff, slen, loff, llen, base: int, tables: list, strs: list,
                rings: dict, seen: dict[bytes, str]) -> bool:
    """Add one file's names, string attributes and ring orders to the set's; False where one is not
    valid UTF-8 or a ring order does not parse (the typed reader words the error).  ``seen``: the
    set's string values decoded so far (bytes -> str), shared by its files."""
    try:
        tables.append(_names(data, name_off, name_len))
        present = soff >= 0
        if int(np.count_nonzero(present)) <= SMALL_STRINGS:
            for j in range(len(strs)):
                strs[j].update(_few_strings(data, soff[:, j], slen[:, j], base, seen))
        else:
            from xsim_trace.io._et_numpy import words_at

            words = words_at(data) if present.any() else None
            for j in range(len(strs)):
                strs[j].update(_strings(data, soff[:, j], slen[:, j], base, words))
        rings.update(_rings(data, loff, llen, base))
    except (UnicodeDecodeError, ValueError):
        return False
    return True


#: up to this many string attributes in a file, :func:`_few_strings` decodes them one by one (a file of
#: a generated step holds ~50: numpy's dedup costs more per file than the loop)
SMALL_STRINGS = 512


def _few_strings(data: bytes, off: np.ndarray, ln: np.ndarray, base: int, seen: dict[bytes, str]) -> dict[int, str]:
    """:func:`_strings`' result, value by value: each distinct byte string decoded once per set."""
    idx = np.flatnonzero(off >= 0)
    out: dict[int, str] = {}
    for i, a, b in zip(idx.tolist(), off[idx].tolist(), ln[idx].tolist()):
        raw = data[a:a + b]
        value = seen.get(raw)
        if value is None:
            value = seen[raw] = raw.decode("utf-8")
        out[base + i] = value
    return out


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
    gathered = src[idx]
    packed = gathered.tobytes()
    if total == 0 or int(gathered.max()) < 0x80:  # ASCII: valid UTF-8
        return NameTable(packed, offsets)
    sep = np.zeros(total + n, np.uint8)
    pos = np.arange(total, dtype=np.int64) + np.repeat(np.arange(n, dtype=np.int64), ln)
    sep[pos] = src[idx]
    sep.tobytes().decode("utf-8")  # raises UnicodeDecodeError like the typed reader would
    return NameTable(packed, offsets)


def _strings(data: bytes, off: np.ndarray, ln: np.ndarray, base: int = 0, words: np.ndarray | None = None) -> dict[int, str]:
    """``{base + i: value}`` of the string attributes present (``off[i] >= 0``); each distinct value of
    up to 16 bytes decoded once (found by its length and two words, numpy), longer ones one by one."""
    from xsim_trace.io._et_numpy import short_keys, words_at

    idx = np.flatnonzero(off >= 0)
    if idx.shape[0] == 0:
        return {}
    o, n = off[idx], ln[idx]
    short = n <= 16
    out: dict[int, str] = {}
    if short.any():
        head, tail = short_keys(words_at(data) if words is None else words, o[short], n[short])
        rows = np.stack([n[short], head.view(np.int64), tail.view(np.int64)])
        order = np.lexsort(rows[::-1])
        s = rows[:, order]
        new = np.empty(order.shape[0], bool)
        new[0] = True
        np.any(s[:, 1:] != s[:, :-1], axis=0, out=new[1:])
        firsts = order[new]
        so = o[short][firsts].tolist()
        values = [data[a:a + b].decode("utf-8") for a, b in zip(so, n[short][firsts].tolist())]
        which = np.empty(order.shape[0], np.int64)
        which[order] = np.cumsum(new) - 1
        keys = (idx[short] + base).tolist()
        out = dict(zip(keys, map(values.__getitem__, which.tolist())))
    if not short.all():
        for i in np.flatnonzero(~short).tolist():
            out[int(idx[i]) + base] = data[int(o[i]):int(o[i]) + int(n[i])].decode("utf-8")
        out = dict(sorted(out.items()))
    return out


def _rings(data: bytes, off: np.ndarray, ln: np.ndarray, base: int = 0) -> dict[int, tuple[int, ...]]:
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
        out[base + i] = value
    return out
