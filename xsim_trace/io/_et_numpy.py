"""numpy twin of the numba ``.et`` decoder (:mod:`xsim_trace.io._et_kernel`): the same columns, the
same statuses, without loading numba (~0.5 s of CPU per process: its import and its first cached
kernel), for rank sets too small to repay that.

The records of a file are framed by a Python loop over their length prefixes; then every node record
is walked at once, one field per record per round ("lockstep": round k reads the k-th field of every
record still open), and every attribute message likewise, with numpy doing each round's varints for
all records together.  Each rule of the kernel is applied the same way here (last value wins for a
scalar, data deps before ctrl deps in order of appearance, a wanted attribute twice or of an
unexpected kind is ODD_VALUE, a malformed record BAD_WIRE / BAD_FRAME), so that both decoders return
the same columns or the same refusal; ``tests/test_et_decoders.py`` compares them, also on mangled
bytes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from xsim_trace.io.et_wanted import (
    ALL_ATTRS,
    BAD_FRAME,
    BAD_WIRE,
    IS_CPU_OP,
    N_INT,
    N_STR,
    ODD_VALUE,
    OK,
)

_LOW7 = np.uint8(0x7F)
_WANTED = tuple(s.encode() for s in ALL_ATTRS)


class _Refused(Exception):
    """The decoder's status for this file (BAD_WIRE, ODD_VALUE ...)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class FileColumns(NamedTuple):
    """One file's nodes, as :func:`xsim_trace.io._et_kernel.decode_nodes` fills them."""

    node_id: np.ndarray
    node_type: np.ndarray
    duration_micros: np.ndarray
    name_off: np.ndarray
    name_len: np.ndarray
    ivals: np.ndarray
    ihas: np.ndarray
    soff: np.ndarray
    slen: np.ndarray
    loff: np.ndarray
    llen: np.ndarray
    dep_ptr: np.ndarray
    deps: np.ndarray


def frame(data: bytes) -> tuple[list[int], list[int]] | None:
    """``(starts, ends)`` of every record's message; None if the framing is broken (a bad length
    varint, a length of 2**32 or more, a record past the end)."""
    pos, end = 0, len(data)
    starts: list[int] = []
    ends: list[int] = []
    add, add_end = starts.append, ends.append
    while pos < end:
        b = data[pos]
        pos += 1
        if b < 0x80:
            ln = b
        else:
            ln, shift = b & 0x7F, 7
            while True:
                if pos >= end or shift > 63:
                    return None
                b = data[pos]
                pos += 1
                ln |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            if ln >= 1 << 32:
                return None
        add(pos)
        pos += ln
        add_end(pos)
    if pos > end:
        return None
    return starts, ends


def _varints(buf: np.ndarray, pos: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each ``pos`` (its bytes before ``limit``): (values as int64 bits, positions after)."""
    if pos.size == 0:
        return np.zeros(0, np.int64), pos
    if np.any(pos >= limit):
        raise _Refused(BAD_WIRE)
    b = buf[pos]
    val = (b & _LOW7).astype(np.uint64)
    after = pos + 1
    more = np.flatnonzero(b >= 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            raise _Refused(BAD_WIRE)
        p = after[more]
        if np.any(p >= limit[more]):
            raise _Refused(BAD_WIRE)
        b = buf[p]
        val[more] |= (b & _LOW7).astype(np.uint64) << np.uint64(shift)
        after[more] = p + 1
        more = more[b >= 0x80]
        shift += 7
    return val.view(np.int64), after


def _fixed(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Little-endian ``width``-byte values at ``pos`` as int64 bits."""
    val = np.zeros(pos.shape[0], np.uint64)
    for j in range(width):
        val |= buf[pos + j].astype(np.uint64) << np.uint64(8 * j)
    return val.view(np.int64)


class _Fields(NamedTuple):
    """One round of a lockstep walk: the field each open message reads next."""

    field: np.ndarray
    wt: np.ndarray
    value: np.ndarray  # a varint's value, a length, or (with ``fixed``) a fixed field's value
    voff: np.ndarray  # where the value (or a length-delimited payload) starts
    after: np.ndarray


def _next_fields(buf: np.ndarray, pos: np.ndarray, limit: np.ndarray, fixed: bool) -> _Fields:
    key, p = _varints(buf, pos, limit)
    field, wt = key >> 3, key & 7
    value = np.zeros(pos.shape[0], np.int64)
    voff = p.copy()
    vi = np.flatnonzero((wt == 0) | (wt == 2))
    if vi.size:
        v, q = _varints(buf, p[vi], limit[vi])
        value[vi] = v
        p[vi] = q
        voff[vi] = q
    if np.any((wt != 0) & (wt != 1) & (wt != 2) & (wt != 5)):
        raise _Refused(BAD_WIRE)
    size = np.where(wt == 2, value, np.where(wt == 1, 8, np.where(wt == 5, 4, 0)))
    if np.any(size < 0) or np.any(p + size > limit):
        raise _Refused(BAD_WIRE)
    if fixed:
        for wtype, width in ((1, 8), (5, 4)):
            fi = np.flatnonzero(wt == wtype)
            if fi.size:
                value[fi] = _fixed(buf, p[fi], width)
    return _Fields(field, wt, value, voff, p + size)


def _walk(buf: np.ndarray, start: np.ndarray, end: np.ndarray, fixed: bool):
    """Yield ``(messages, fields, round)`` for each round of a lockstep walk over the messages
    ``[start, end)``; ``messages`` are the indices of those still open."""
    pos = start.copy()
    open_ = np.flatnonzero(pos < end)
    rnd = 0
    while open_.size:
        f = _next_fields(buf, pos[open_], end[open_], fixed)
        yield open_, f, rnd
        pos[open_] = f.after
        open_ = open_[f.after < end[open_]]
        rnd += 1


def _packed(buf: np.ndarray, off: np.ndarray, ln: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varints packed in each ``[off, off + ln)``: (values, piece of each, index within its piece)."""
    total = int(ln.sum())
    if total == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    first_byte = np.zeros(ln.shape[0], np.int64)
    np.cumsum(ln[:-1], out=first_byte[1:])
    idx = np.repeat(off - first_byte, ln) + np.arange(total, dtype=np.int64)
    b = buf[idx]
    last = b < 0x80
    ends = first_byte + ln - 1
    if np.any(~last[ends[ln > 0]]):  # a varint running past its piece
        raise _Refused(BAD_WIRE)
    starts = np.flatnonzero(np.concatenate(([True], last[:-1])))
    k = np.arange(total, dtype=np.int64) - np.repeat(starts, np.diff(np.append(starts, total)))
    if np.any(k > 9):
        raise _Refused(BAD_WIRE)
    parts = (b & _LOW7).astype(np.uint64) << (7 * k).astype(np.uint64)
    values = np.bitwise_or.reduceat(parts, starts).view(np.int64)
    piece_of_byte = np.repeat(np.arange(ln.shape[0], dtype=np.int64), ln)
    piece = piece_of_byte[starts]
    piece_first = np.zeros(ln.shape[0], np.int64)
    counts = np.bincount(piece, minlength=ln.shape[0])
    np.cumsum(counts[:-1], out=piece_first[1:])
    return values, piece, np.arange(values.shape[0], dtype=np.int64) - piece_first[piece]


def decode(data: bytes) -> FileColumns | int:
    """The node columns of one decompressed ``.et`` file, or the kernel's status refusing it."""
    got = decode_many([data])
    return got if isinstance(got, int) else got[0]


def decode_many(datas: list[bytes], framings: list | None = None) -> tuple[FileColumns, tuple[int, ...], bytes] | int:
    """The node columns of several decompressed ``.et`` files walked as one: ``(columns, nodes per
    file, the files joined)`` (byte offsets in the columns are into the joined bytes), or the kernel's
    status refusing one of them.  One walk over all files' records: a few numpy calls per round for
    the whole set, however many files (a 1,024-rank set of one node each is one walk, not 1,024).
    ``framings``: each file's :func:`frame`, where the caller has it already."""
    starts: list[int] = []
    ends: list[int] = []
    sizes, bases = [], []
    base = 0
    for i, data in enumerate(datas):
        framed = frame(data) if framings is None else framings[i]
        if framed is None or not framed[0]:
            return BAD_FRAME
        starts.extend(framed[0][1:])  # record 0 of each file is its GlobalMetadata
        ends.extend(framed[1][1:])
        sizes.append(len(framed[0]) - 1)
        bases.append(base)
        base += len(data)
    joined = datas[0] if len(datas) == 1 else b"".join(datas)
    shift = np.repeat(np.asarray(bases, np.int64), sizes)  # each file's records into the joined bytes
    try:
        cols = _decode(np.frombuffer(joined, np.uint8), words_at(joined), np.asarray(starts, np.int64) + shift,
                       np.asarray(ends, np.int64) + shift)
    except _Refused as why:
        return why.status
    return cols, tuple(sizes), joined


def decode_records(joined: bytes, starts: np.ndarray, ends: np.ndarray) -> FileColumns | int:
    """The columns of the node records ``[starts[i], ends[i])`` of ``joined`` (offsets into it), or
    the kernel's status refusing one of them (:mod:`xsim_trace.io.et_diff`)."""
    try:
        return _decode(np.frombuffer(joined, np.uint8), words_at(joined), starts, ends)
    except _Refused as why:
        return why.status


def _decode(buf: np.ndarray, words: np.ndarray, rec_start: np.ndarray, rec_end: np.ndarray) -> FileColumns:
    n = rec_start.shape[0]
    node_id = np.zeros(n, np.int64)
    ntype = np.zeros(n, np.int64)
    dur = np.zeros(n, np.int64)
    name_off = np.zeros(n, np.int64)
    name_len = np.zeros(n, np.int64)
    dep_parts: list[tuple] = []  # (record, ctrl, round, index, value) arrays
    packed: list[tuple] = []  # (record, ctrl, round, off, len)
    attrs: list[tuple] = []  # (record, round, off, len)
    for rec, f, rnd in _walk(buf, rec_start, rec_end, fixed=False):
        field, wt, v = f.field, f.wt, f.value
        for fno, out in ((1, node_id), (3, ntype), (7, dur)):
            m = np.flatnonzero((field == fno) & (wt == 0))
            if m.size:
                x = v[m]
                if fno == 3:  # an enum is an int32 on the wire
                    x = x & 0xFFFFFFFF
                    x = np.where(x >= 0x80000000, x - 0x100000000, x)
                elif np.any(x < 0):
                    raise _Refused(ODD_VALUE)
                out[rec[m]] = x
        m = np.flatnonzero((field == 2) & (wt == 2))
        name_off[rec[m]] = f.voff[m]
        name_len[rec[m]] = v[m]
        dep = (field == 4) | (field == 5)
        m = np.flatnonzero(dep & (wt == 0))
        if m.size:
            if np.any(v[m] < 0):
                raise _Refused(ODD_VALUE)
            dep_parts.append((rec[m], (field[m] == 4).astype(np.int64), np.full(m.size, rnd), np.zeros(m.size, np.int64), v[m]))
        m = np.flatnonzero(dep & (wt == 2))
        if m.size:
            packed.append((rec[m], (field[m] == 4).astype(np.int64), np.full(m.size, rnd), f.voff[m], v[m]))
        m = np.flatnonzero((field == 10) & (wt == 2))
        if m.size:
            attrs.append((rec[m], np.full(m.size, rnd), f.voff[m], v[m]))
    if packed:
        prec, pctrl, prnd, poff, plen = (np.concatenate(c) for c in zip(*packed))
        values, piece, index = _packed(buf, poff, plen)
        if np.any(values < 0):
            raise _Refused(ODD_VALUE)
        dep_parts.append((prec[piece], pctrl[piece], prnd[piece], index, values))
    dep_ptr, deps = _dep_columns(dep_parts, n)
    ivals, ihas, soff, slen, loff, llen = _attr_columns(buf, words, attrs, n)
    return FileColumns(node_id, ntype, dur, name_off, name_len, ivals, ihas, soff, slen, loff, llen, dep_ptr, deps)


def _dep_columns(parts: list[tuple], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``dep_ptr`` and ``deps``: per node its data deps then its ctrl deps, each in order of appearance."""
    dep_ptr = np.zeros(n + 1, np.int64)
    if not parts:
        return dep_ptr, np.zeros(0, np.int64)
    rec, ctrl, rnd, index, value = (np.concatenate(c) for c in zip(*parts))
    order = np.lexsort((index, rnd, ctrl, rec))
    np.cumsum(np.bincount(rec, minlength=n), out=dep_ptr[1:])
    return dep_ptr, value[order]


def _attr_columns(buf: np.ndarray, words: np.ndarray, attrs: list[tuple], n: int):
    ivals = np.zeros((n, N_INT), np.int64)
    ihas = np.zeros((n, N_INT), np.uint8)
    soff = np.full((n, N_STR), -1, np.int64)
    slen = np.zeros((n, N_STR), np.int64)
    loff = np.full(n, -1, np.int64)
    llen = np.zeros(n, np.int64)
    if not attrs:
        return ivals, ihas, soff, slen, loff, llen
    rec, rnd, aoff, alen = (np.concatenate(c) for c in zip(*attrs))
    m = rec.shape[0]
    an_off = np.full(m, -1, np.int64)
    an_len = np.zeros(m, np.int64)
    vfield = np.zeros(m, np.int64)
    vwt = np.zeros(m, np.int64)
    vval = np.zeros(m, np.int64)
    vpos = np.zeros(m, np.int64)
    for a, f, _ in _walk(buf, aoff, aoff + alen, fixed=True):
        is_name = np.flatnonzero((f.field == 1) & (f.wt == 2))
        an_off[a[is_name]] = f.voff[is_name]
        an_len[a[is_name]] = f.value[is_name]
        val = np.flatnonzero((f.field >= 3) & (f.field <= 32))
        sel = a[val]
        vfield[sel] = f.field[val]
        vwt[sel] = f.wt[val]
        vval[sel] = f.value[val]
        vpos[sel] = f.voff[val]
    k = _match_names(words, an_off, an_len)
    hit = np.flatnonzero(k >= 0)
    rec, k, vfield, vwt, vval, vpos = rec[hit], k[hit], vfield[hit], vwt[hit], vval[hit], vpos[hit]
    aoff, alen = aoff[hit], alen[hit]
    slot = rec * len(ALL_ATTRS) + k
    if slot.size and np.bincount(slot).max() > 1:  # a wanted attribute twice: readers differ on which wins
        raise _Refused(ODD_VALUE)
    empty = vfield == 0  # no value: absent for is_cpu_op and the strings, a bounds error elsewhere
    if np.any(empty & (k != IS_CPU_OP) & ((k < N_INT) | (k >= N_INT + N_STR))):
        raise _Refused(ODD_VALUE)
    keep = ~empty
    i = np.flatnonzero(keep & (k < N_INT))
    x = _int_values(vfield[i], vwt[i], vval[i], k[i])
    ivals[rec[i], k[i]] = x
    ihas[rec[i], k[i]] = 1
    s = np.flatnonzero(keep & (k >= N_INT) & (k < N_INT + N_STR))
    if np.any((vfield[s] != 29) | (vwt[s] != 2)):
        raise _Refused(ODD_VALUE)
    soff[rec[s], k[s] - N_INT] = vpos[s]
    slen[rec[s], k[s] - N_INT] = vval[s]
    r = np.flatnonzero(keep & (k == N_INT + N_STR))  # ring_order: the caller decodes the whole AttributeProto
    loff[rec[r]] = aoff[r]
    llen[rec[r]] = alen[r]
    return ivals, ihas, soff, slen, loff, llen


def words_at(data: bytes) -> np.ndarray:
    """An unaligned little-endian uint64 view starting at every byte of ``data`` (8 zero bytes
    appended, so a view near the end reads zeros past it)."""
    padded = data + bytes(8)
    return np.ndarray(shape=(len(data) + 1,), dtype="<u8", buffer=padded, offset=0, strides=(1,))


def short_keys(words: np.ndarray, off: np.ndarray, ln: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two uint64 words that, with the length, identify each byte string of up to 16 bytes exactly:
    its first 8 bytes (zero past its end) and its last 8 (its first 8 again below 8 bytes)."""
    head = words[off]
    short = ln < 8
    mask = np.where(short, (np.uint64(1) << (8 * np.minimum(ln, 7)).astype(np.uint64)) - np.uint64(1),
                    np.uint64(0xFFFFFFFFFFFFFFFF))
    head = head & mask
    tail = np.where(short, head, words[np.maximum(off + ln - 8, 0)])
    return head, tail


def _key_of(name: bytes) -> tuple[int, int]:
    head = int.from_bytes(name[:8].ljust(8, b"\0"), "little")
    return head, (head if len(name) < 8 else int.from_bytes(name[-8:], "little"))


_WANTED_KEYS = tuple((len(name), *_key_of(name)) for name in _WANTED)


def _match_names(words: np.ndarray, off: np.ndarray, ln: np.ndarray) -> np.ndarray:
    """Index of each attribute's name in ALL_ATTRS, -1 for another name (or none)."""
    k = np.full(off.shape[0], -1, np.int64)
    cand = np.flatnonzero((off >= 0) & (ln <= 16))
    if cand.size == 0:
        return k
    head, tail = short_keys(words, off[cand], ln[cand])
    lens = ln[cand]
    for c, (n, h, t) in enumerate(_WANTED_KEYS):
        k[cand[(lens == n) & (head == np.uint64(h)) & (tail == np.uint64(t))]] = c
    return k


def _int_values(vfield: np.ndarray, vwt: np.ndarray, vval: np.ndarray, k: np.ndarray) -> np.ndarray:
    """An int attribute's value from its oneof member, as the kernel converts it (ODD_VALUE where it
    would refuse: a bool for a number, a float, a negative uint64, a list)."""
    if np.any((vfield == 27) & (k != IS_CPU_OP)):  # a bool where a number belongs
        raise _Refused(ODD_VALUE)
    x = vval.copy()
    varint = vwt == 0
    plain = varint & np.isin(vfield, (7, 9, 11, 13, 27))
    zigzag = varint & ((vfield == 15) | (vfield == 17))
    fixed32 = (vwt == 5) & ((vfield == 19) | (vfield == 23))
    fixed64 = (vwt == 1) & ((vfield == 21) | (vfield == 25))
    if np.any(~(plain | zigzag | fixed32 | fixed64)):
        raise _Refused(ODD_VALUE)
    if np.any(plain & (vfield == 13) & (vval < 0)) or np.any(fixed64 & (vfield == 21) & (vval < 0)):
        raise _Refused(ODD_VALUE)
    low32 = plain & ((vfield == 7) | (vfield == 11))  # 32-bit: protobuf keeps the low 32 bits
    x[low32] &= 0xFFFFFFFF
    signed32 = (low32 & (vfield == 7)) | (fixed32 & (vfield == 23))
    x[signed32 & (x >= 0x80000000)] -= 0x100000000
    b = plain & (vfield == 27)
    x[b] = (x[b] != 0).astype(np.int64)
    zi = np.flatnonzero(zigzag)
    if zi.size:
        u = vval[zi].view(np.uint64)
        u = np.where(vfield[zi] == 15, u & np.uint64(0xFFFFFFFF), u)
        x[zi] = (u >> np.uint64(1)).view(np.int64) ^ -(u & np.uint64(1)).view(np.int64)
    return x
