"""Numba kernel: Chakra ``.et`` bytes -> the per-node columns the replay compiler needs.

A hand-written protobuf wire walker over one decompressed file (``varint32(len) + message``
records; the first is the GlobalMetadata, skipped).  It reads only what replay uses: node id,
name (as a byte range), type, deps, ``duration_micros`` and a fixed set of attributes
(:data:`INT_ATTRS` as int64, :data:`STR_ATTRS` as byte ranges, ``ring_order`` as the byte range
of its AttributeProto).  Anything it does not expect (a wanted attribute of an unexpected kind,
an id above 2**63-1, a malformed record) makes it return a non-zero status, and the caller falls
back to the typed reader, which raises the exact error or handles the odd case.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: int-valued attributes, in column order
INT_ATTRS = ("duration_ns", "stream", "tid", "is_cpu_op", "comm_size", "comm_tag", "comm_src", "comm_dst",
             "comm_type", "comm_root")
#: string-valued attributes, in column order
STR_ATTRS = ("pg_name", "comm_kind")
LIST_ATTR = "ring_order"
_ALL = INT_ATTRS + STR_ATTRS + (LIST_ATTR,)
N_INT = len(INT_ATTRS)
N_STR = len(STR_ATTRS)
IS_CPU_OP = INT_ATTRS.index("is_cpu_op")

OK, BAD_FRAME, BAD_WIRE, ODD_VALUE, NO_METADATA = 0, 1, 2, 3, 4


def wanted_names() -> tuple[np.ndarray, np.ndarray]:
    """The wanted attribute names as one byte array and offsets (kernel input)."""
    data = b"".join(s.encode() for s in _ALL)
    offs = np.zeros(len(_ALL) + 1, np.int64)
    np.cumsum([len(s) for s in _ALL], out=offs[1:])
    return np.frombuffer(data, np.uint8).copy(), offs


@njit(cache=True, nogil=True)
def _varint(buf, pos, end):
    """(value as uint64-in-int64 bits, new pos); pos = -1 on a bad varint."""
    result = np.uint64(0)
    shift = np.uint64(0)
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            return np.int64(result), pos
        shift += np.uint64(7)
        if shift >= np.uint64(70):
            return np.int64(0), -1
    return np.int64(0), -1


@njit(cache=True, nogil=True)
def _skip(buf, pos, end, wt):
    """Position after a field of wire type ``wt`` starting at ``pos``; -1 if malformed."""
    if wt == 0:
        _, pos = _varint(buf, pos, end)
        return pos
    if wt == 1:
        return pos + 8 if pos + 8 <= end else -1
    if wt == 5:
        return pos + 4 if pos + 4 <= end else -1
    if wt == 2:
        n, pos = _varint(buf, pos, end)
        if pos < 0 or n < 0 or pos + n > end:
            return -1
        return pos + n
    return -1


@njit(cache=True, nogil=True)
def _match(buf, off, ln, names, noffs):
    for k in range(noffs.shape[0] - 1):
        a = noffs[k]
        b = noffs[k + 1]
        if b - a != ln:
            continue
        same = True
        for j in range(ln):
            if buf[off + j] != names[a + j]:
                same = False
                break
        if same:
            return k
    return -1


@njit(cache=True, nogil=True)
def _fixed(buf, pos, nbytes):
    v = np.uint64(0)
    for j in range(nbytes):
        v |= np.uint64(buf[pos + j]) << np.uint64(8 * j)
    return v


@njit(cache=True, nogil=True)
def _attr(buf, pos, end, names, noffs):
    """Decode one AttributeProto in buf[pos:end]: (status, wanted index or -1, has value, int value,
    string offset, string length).  Returns scalars only: numba passes arrays between compiled
    functions with reference counting, which would cost more than the decoding."""
    name_off = -1
    name_len = 0
    vfield = 0  # the oneof member seen last (0: none)
    vpos = 0
    vwt = 0
    p = pos
    while p < end:
        key, p = _varint(buf, p, end)
        if p < 0:
            return BAD_WIRE, -1, 0, 0, 0, 0
        field = key >> 3
        wt = key & 7
        if field == 1 and wt == 2:
            n, p2 = _varint(buf, p, end)
            if p2 < 0 or n < 0 or p2 + n > end:
                return BAD_WIRE, -1, 0, 0, 0, 0
            name_off = p2
            name_len = n
            p = p2 + n
            continue
        q = _skip(buf, p, end, wt)
        if q < 0:
            return BAD_WIRE, -1, 0, 0, 0, 0
        if 3 <= field <= 32:
            vfield = field
            vpos = p
            vwt = wt
        p = q
    if name_off < 0:
        return OK, -1, 0, 0, 0, 0
    k = _match(buf, name_off, name_len, names, noffs)
    if k < 0:
        return OK, -1, 0, 0, 0, 0
    if vfield == 0:  # no value: absent for is_cpu_op and the strings; a bounds error elsewhere
        if k == IS_CPU_OP or (k >= N_INT and k < N_INT + N_STR):
            return OK, k, 0, 0, 0, 0
        return ODD_VALUE, k, 0, 0, 0, 0
    if vfield == 27 and k != IS_CPU_OP:  # a bool where a number belongs: the bounds check words it
        return ODD_VALUE, k, 0, 0, 0, 0
    if k < N_INT:
        v = np.int64(0)
        if vfield in (7, 9, 11, 13, 27) and vwt == 0:
            v, _ = _varint(buf, vpos, end)
            if vfield == 13 and v < 0:
                return ODD_VALUE, k, 0, 0, 0, 0
            if vfield == 7 or vfield == 11:  # 32-bit: protobuf keeps the low 32 bits
                v32 = v & 0xFFFFFFFF
                if vfield == 7 and v32 >= 0x80000000:
                    v32 -= 0x100000000
                v = v32
            if vfield == 27:
                v = 1 if v != 0 else 0
        elif vfield in (15, 17) and vwt == 0:
            u, _ = _varint(buf, vpos, end)
            uu = np.uint64(u)
            if vfield == 15:
                uu &= np.uint64(0xFFFFFFFF)
            v = np.int64(uu >> np.uint64(1)) ^ -np.int64(uu & np.uint64(1))
        elif vfield in (19, 23) and vwt == 5:
            v = np.int64(_fixed(buf, vpos, 4))
            if vfield == 23 and v >= 0x80000000:
                v -= 0x100000000
        elif vfield in (21, 25) and vwt == 1:
            v = np.int64(_fixed(buf, vpos, 8))
            if vfield == 21 and v < 0:
                return ODD_VALUE, k, 0, 0, 0, 0
        else:
            return ODD_VALUE, k, 0, 0, 0, 0
        return OK, k, 1, v, 0, 0
    if k < N_INT + N_STR:
        if vfield != 29 or vwt != 2:
            return ODD_VALUE, k, 0, 0, 0, 0
        n, p2 = _varint(buf, vpos, end)
        return OK, k, 1, 0, p2, n
    return OK, k, 1, 0, pos, end - pos  # ring_order: the caller decodes the whole AttributeProto


@njit(cache=True, nogil=True)
def count_records(buf):
    """Number of records, or -1 if the framing is broken."""
    pos = 0
    n = 0
    end = buf.shape[0]
    while pos < end:
        ln, pos = _varint(buf, pos, end)
        if pos < 0 or ln < 0 or ln >= (1 << 32) or pos + ln > end:
            return -1
        pos += ln
        n += 1
    return n


@njit(cache=True, nogil=True)
def decode_nodes(buf, names, noffs, node_id, ntype, dur_us, name_off, name_len, ivals, ihas, soff, slen,
                 loff, llen, dep_ptr, deps_cap):
    """Fill the node columns (sized by count_records - 1); returns (status, deps array)."""
    end = buf.shape[0]
    deps = np.empty(deps_cap, np.int64)
    nd = 0
    ln, pos = _varint(buf, 0, end)
    if pos < 0:
        return BAD_FRAME, deps[:0]
    pos += ln  # the GlobalMetadata record
    i = 0
    while pos < end:
        ln, pos = _varint(buf, pos, end)
        rec_end = pos + ln
        if pos < 0 or rec_end > end:
            return BAD_FRAME, deps[:0]
        nid = np.int64(0)
        ty = np.int64(0)
        du = np.int64(0)
        name_off[i] = 0
        name_len[i] = 0
        loff[i] = -1
        llen[i] = 0
        for k in range(ivals.shape[1]):
            ihas[i, k] = 0
        for k in range(soff.shape[1]):
            soff[i, k] = -1
            slen[i, k] = 0
        dep_ptr[i] = nd
        seen = np.int64(0)
        # two walks: data deps (field 5) first, then ctrl deps (4), as the typed path lists them
        for want in (5, 4):
            p = pos
            while p < rec_end:
                key, p = _varint(buf, p, rec_end)
                if p < 0:
                    return BAD_WIRE, deps[:0]
                field = key >> 3
                wt = key & 7
                if field == want and (wt == 0 or wt == 2):
                    if wt == 0:
                        v, p = _varint(buf, p, rec_end)
                        if p < 0:
                            return BAD_WIRE, deps[:0]
                        if v < 0:
                            return ODD_VALUE, deps[:0]
                        if nd == deps.shape[0]:
                            grown = np.empty(2 * deps.shape[0] + 16, np.int64)
                            grown[:nd] = deps[:nd]
                            deps = grown
                        deps[nd] = v
                        nd += 1
                    else:
                        n, p = _varint(buf, p, rec_end)
                        if p < 0 or n < 0 or p + n > rec_end:
                            return BAD_WIRE, deps[:0]
                        q = p + n
                        while p < q:
                            v, p = _varint(buf, p, q)
                            if p < 0:
                                return BAD_WIRE, deps[:0]
                            if v < 0:
                                return ODD_VALUE, deps[:0]
                            if nd == deps.shape[0]:
                                grown = np.empty(2 * deps.shape[0] + 16, np.int64)
                                grown[:nd] = deps[:nd]
                                deps = grown
                            deps[nd] = v
                            nd += 1
                    continue
                if want == 4:
                    q = _skip(buf, p, rec_end, wt)
                    if q < 0:
                        return BAD_WIRE, deps[:0]
                    p = q
                    continue
                # first walk: everything else
                if field == 1 and wt == 0:
                    nid, p = _varint(buf, p, rec_end)
                    if nid < 0:
                        return ODD_VALUE, deps[:0]
                elif field == 3 and wt == 0:
                    ty, p = _varint(buf, p, rec_end)
                    ty = ty & 0xFFFFFFFF  # an enum is an int32 on the wire
                    if ty >= 0x80000000:
                        ty -= 0x100000000
                elif field == 7 and wt == 0:
                    du, p = _varint(buf, p, rec_end)
                    if du < 0:
                        return ODD_VALUE, deps[:0]
                elif field == 2 and wt == 2:
                    n, p2 = _varint(buf, p, rec_end)
                    if p2 < 0 or n < 0 or p2 + n > rec_end:
                        return BAD_WIRE, deps[:0]
                    name_off[i] = p2
                    name_len[i] = n
                    p = p2 + n
                elif field == 10 and wt == 2:
                    n, p2 = _varint(buf, p, rec_end)
                    if p2 < 0 or n < 0 or p2 + n > rec_end:
                        return BAD_WIRE, deps[:0]
                    st, k, has, v, so, sl = _attr(buf, p2, p2 + n, names, noffs)
                    if st != OK:
                        return st, deps[:0]
                    if k >= 0:  # a wanted attribute twice: readers differ on which wins, so leave it
                        bit = np.int64(1) << k
                        if seen & bit:
                            return ODD_VALUE, deps[:0]
                        seen |= bit
                    if k >= 0 and k < N_INT:
                        ihas[i, k] = has
                        ivals[i, k] = v
                    elif k >= N_INT and k < N_INT + N_STR:
                        soff[i, k - N_INT] = so if has else -1
                        slen[i, k - N_INT] = sl
                    elif k >= 0:
                        loff[i] = so if has else -1
                        llen[i] = sl
                    p = p2 + n
                else:
                    q = _skip(buf, p, rec_end, wt)
                    if q < 0:
                        return BAD_WIRE, deps[:0]
                    p = q
                if p < 0:
                    return BAD_WIRE, deps[:0]
        node_id[i] = nid
        ntype[i] = ty
        dur_us[i] = du
        i += 1
        pos = rec_end
    dep_ptr[i] = nd
    return OK, deps[:nd]
