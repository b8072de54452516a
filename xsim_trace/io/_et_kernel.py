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

from xsim_trace.io.et_wanted import (  # noqa: F401 - re-exported: the kernel's contract
    ALL_ATTRS as _ALL,
    BAD_FRAME,
    BAD_WIRE,
    INT_ATTRS,
    IS_CPU_OP,
    LIST_ATTR,
    N_INT,
    N_STR,
    NO_METADATA,
    ODD_VALUE,
    OK,
    STR_ATTRS,
)


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
                 loff, llen, dep_ptr, deps, ctrl):
    """Fill the node columns (sized by count_records - 1) and ``deps`` (data deps then ctrl deps of
    each node; ``deps`` and the scratch ``ctrl`` hold at least one slot per byte of ``buf``).
    Returns (status, number of deps).

    One function with the varint loops written out: numba calls between compiled functions cost
    tens of ns each (reference counts on every array argument), more than decoding a field."""
    end = buf.shape[0]
    nd = 0
    # -- the GlobalMetadata record: skipped
    pos = 0
    ln = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            return BAD_FRAME, 0
        b = buf[pos]
        pos += 1
        ln |= np.int64(b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    pos += ln
    i = 0
    while pos < end:
        # -- one Node record
        ln = 0
        shift = 0
        while True:
            if pos >= end or shift > 63:
                return BAD_FRAME, 0
            b = buf[pos]
            pos += 1
            ln |= np.int64(b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        rec_end = pos + ln
        if ln < 0 or rec_end > end:
            return BAD_FRAME, 0
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
        nc = 0
        seen = np.int64(0)
        p = pos
        while p < rec_end:
            # field key
            key = np.int64(0)
            shift = 0
            while True:
                if p >= rec_end or shift > 63:
                    return BAD_WIRE, 0
                b = buf[p]
                p += 1
                key |= np.int64(b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            field = key >> 3
            wt = key & 7
            # its value: a varint (wt 0), a length then bytes (wt 2), or fixed bytes (1, 5)
            v = np.int64(0)
            voff = p
            if wt == 0 or wt == 2:
                shift = 0
                while True:
                    if p >= rec_end or shift > 63:
                        return BAD_WIRE, 0
                    b = buf[p]
                    p += 1
                    v |= np.int64(b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                voff = p
                if wt == 2:
                    if v < 0 or p + v > rec_end:
                        return BAD_WIRE, 0
                    p += v
            elif wt == 1:
                if p + 8 > rec_end:
                    return BAD_WIRE, 0
                p += 8
            elif wt == 5:
                if p + 4 > rec_end:
                    return BAD_WIRE, 0
                p += 4
            else:
                return BAD_WIRE, 0
            if field == 1 and wt == 0:
                if v < 0:
                    return ODD_VALUE, 0
                nid = v
            elif field == 3 and wt == 0:
                ty = v & 0xFFFFFFFF  # an enum is an int32 on the wire
                if ty >= 0x80000000:
                    ty -= 0x100000000
            elif field == 7 and wt == 0:
                if v < 0:
                    return ODD_VALUE, 0
                du = v
            elif field == 2 and wt == 2:
                name_off[i] = voff
                name_len[i] = v
            elif (field == 4 or field == 5) and wt == 0:
                if v < 0:
                    return ODD_VALUE, 0
                if field == 5:
                    deps[nd] = v
                    nd += 1
                else:
                    ctrl[nc] = v
                    nc += 1
            elif (field == 4 or field == 5) and wt == 2:  # packed deps
                q = voff
                q_end = voff + v
                while q < q_end:
                    d = np.int64(0)
                    shift = 0
                    while True:
                        if q >= q_end or shift > 63:
                            return BAD_WIRE, 0
                        b = buf[q]
                        q += 1
                        d |= np.int64(b & 0x7F) << shift
                        if b < 0x80:
                            break
                        shift += 7
                    if d < 0:
                        return ODD_VALUE, 0
                    if field == 5:
                        deps[nd] = d
                        nd += 1
                    else:
                        ctrl[nc] = d
                        nc += 1
            elif field == 10 and wt == 2:
                a_end = voff + v
                # -- one AttributeProto: its name and the oneof member seen last
                an_off = -1
                an_len = 0
                vfield = 0
                vwt = 0
                vval = np.int64(0)
                vpos = 0
                q = voff
                while q < a_end:
                    akey = np.int64(0)
                    shift = 0
                    while True:
                        if q >= a_end or shift > 63:
                            return BAD_WIRE, 0
                        b = buf[q]
                        q += 1
                        akey |= np.int64(b & 0x7F) << shift
                        if b < 0x80:
                            break
                        shift += 7
                    af = akey >> 3
                    awt = akey & 7
                    av = np.int64(0)
                    apos = q
                    if awt == 0 or awt == 2:
                        shift = 0
                        while True:
                            if q >= a_end or shift > 63:
                                return BAD_WIRE, 0
                            b = buf[q]
                            q += 1
                            av |= np.int64(b & 0x7F) << shift
                            if b < 0x80:
                                break
                            shift += 7
                        apos = q
                        if awt == 2:
                            if av < 0 or q + av > a_end:
                                return BAD_WIRE, 0
                            q += av
                    elif awt == 1:
                        if q + 8 > a_end:
                            return BAD_WIRE, 0
                        for j in range(8):
                            av |= np.int64(buf[q + j]) << (8 * j)
                        q += 8
                    elif awt == 5:
                        if q + 4 > a_end:
                            return BAD_WIRE, 0
                        for j in range(4):
                            av |= np.int64(buf[q + j]) << (8 * j)
                        q += 4
                    else:
                        return BAD_WIRE, 0
                    if af == 1 and awt == 2:
                        an_off = apos
                        an_len = av
                    elif 3 <= af <= 32:
                        vfield = af
                        vwt = awt
                        vval = av
                        vpos = apos
                if an_off < 0:
                    continue
                # which wanted attribute (if any)
                k = -1
                for c in range(noffs.shape[0] - 1):
                    a0 = noffs[c]
                    if noffs[c + 1] - a0 != an_len:
                        continue
                    same = True
                    for j in range(an_len):
                        if buf[an_off + j] != names[a0 + j]:
                            same = False
                            break
                    if same:
                        k = c
                        break
                if k < 0:
                    continue
                bit = np.int64(1) << k
                if seen & bit:  # a wanted attribute twice: readers differ on which wins
                    return ODD_VALUE, 0
                seen |= bit
                if vfield == 0:  # no value: absent for is_cpu_op and the strings, a bounds error elsewhere
                    if k == IS_CPU_OP or (k >= N_INT and k < N_INT + N_STR):
                        continue
                    return ODD_VALUE, 0
                if k < N_INT:
                    if vfield == 27 and k != IS_CPU_OP:  # a bool where a number belongs
                        return ODD_VALUE, 0
                    if vwt == 0 and (vfield == 7 or vfield == 9 or vfield == 11 or vfield == 13 or vfield == 27):
                        x = vval
                        if vfield == 13 and x < 0:
                            return ODD_VALUE, 0
                        if vfield == 7 or vfield == 11:  # 32-bit: protobuf keeps the low 32 bits
                            x &= 0xFFFFFFFF
                            if vfield == 7 and x >= 0x80000000:
                                x -= 0x100000000
                        if vfield == 27:
                            x = 1 if x != 0 else 0
                    elif vwt == 0 and (vfield == 15 or vfield == 17):  # zigzag
                        u = np.uint64(vval)
                        if vfield == 15:
                            u &= np.uint64(0xFFFFFFFF)
                        x = np.int64(u >> np.uint64(1)) ^ -np.int64(u & np.uint64(1))
                    elif vwt == 5 and (vfield == 19 or vfield == 23):
                        x = vval
                        if vfield == 23 and x >= 0x80000000:
                            x -= 0x100000000
                    elif vwt == 1 and (vfield == 21 or vfield == 25):
                        x = vval
                        if vfield == 21 and x < 0:
                            return ODD_VALUE, 0
                    else:
                        return ODD_VALUE, 0
                    ivals[i, k] = x
                    ihas[i, k] = 1
                elif k < N_INT + N_STR:
                    if vfield != 29 or vwt != 2:
                        return ODD_VALUE, 0
                    soff[i, k - N_INT] = vpos
                    slen[i, k - N_INT] = vval
                else:  # ring_order: the caller decodes the whole AttributeProto
                    loff[i] = voff
                    llen[i] = v
            # anything else: an unknown or unused field, skipped
        for j in range(nc):
            deps[nd] = ctrl[j]
            nd += 1
        node_id[i] = nid
        ntype[i] = ty
        dur_us[i] = du
        i += 1
        pos = rec_end
    dep_ptr[i] = nd
    return OK, nd
