"""Numba kernel of the compiled replay loop (contention-free backends, collectives priced whole).

The same rules, in the same order, as the reference engine (:mod:`xsim_trace.replay.engine` and its
parts): one event heap ordered by (time, seq); flows land in (finish time, flow id) order and go
before events of the same time; resources are FIFO; sends and receives match first come first
matched per (src, dst, tag).  All state lives in arrays the caller owns, so a run can stop after a
budget of events (for progress reports) and resume.

One function holds the loop, its sections named after the reference engine's parts (streams,
collectives, p2p): numba passes arrays between compiled functions with reference counting, which
costs more than the work of an event when dozens of arrays travel through several calls; only the
small helpers (heap, FIFO, transfer-time lookup) are separate functions.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from xsim_trace.replay._kernel_common import fifo_pop, fifo_push, node_ends, rdv_match, wake

K_TIMED, K_SEND, K_RECV, K_COLL = 0, 1, 2, 3
EV_DONE, EV_EAGER, EV_RDV = 0, 1, 2
FL_EAGER, FL_RDV = 0, 1
S_HSIZE, S_SEQ, S_FSIZE, S_FID, S_EVENTS, S_FINISHED, S_FLOWS, S_COLLS, S_PRICED, S_SEEDED = range(10)
N_SCALARS = 10


@njit(cache=True, nogil=True)
def _push(qt, qs, qk, qa, qb, size, t, s, k, a, b):
    """Add (t, s, k, a, b) to the heap ordered by (t, s); returns the new size."""
    i = size
    while i > 0:
        p = (i - 1) >> 1
        if t < qt[p] or (t == qt[p] and s < qs[p]):
            qt[i] = qt[p]
            qs[i] = qs[p]
            qk[i] = qk[p]
            qa[i] = qa[p]
            qb[i] = qb[p]
            i = p
        else:
            break
    qt[i] = t
    qs[i] = s
    qk[i] = k
    qa[i] = a
    qb[i] = b
    return size + 1


@njit(cache=True, nogil=True)
def _pop(qt, qs, qk, qa, qb, size):
    """Remove the top (read it first); returns the new size."""
    size -= 1
    if size == 0:
        return 0
    t, s, k, a, b = qt[size], qs[size], qk[size], qa[size], qb[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and (qt[c + 1] < qt[c] or (qt[c + 1] == qt[c] and qs[c + 1] < qs[c])):
            c += 1
        if qt[c] < t or (qt[c] == t and qs[c] < s):
            qt[i] = qt[c]
            qs[i] = qs[c]
            qk[i] = qk[c]
            qa[i] = qa[c]
            qb[i] = qb[c]
            i = c
        else:
            break
    qt[i] = t
    qs[i] = s
    qk[i] = k
    qa[i] = a
    qb[i] = b
    return size


@njit(cache=True, nogil=True)
def _xfer_ns(size_ptr, sizes, times, key, size):
    """Transfer time of ``size`` bytes on p2p key ``key`` (its (src, dst) pair)."""
    lo = size_ptr[key]
    hi = size_ptr[key + 1]
    while lo < hi - 1:
        mid = (lo + hi) >> 1
        if sizes[mid] <= size:
            lo = mid
        else:
            hi = mid
    return times[lo]


@njit(cache=True, nogil=True)
def _flow_end(now, key, size, size_ptr, sizes, times, booked_mode, k_lat, k_bw, k_pptr, k_ports, port_bw, booked, ceil):
    """When a p2p flow of ``size`` bytes on ``key`` started at ``now`` lands: ``now`` + its
    transfer time alone (a contention-free backend), or, on a backend that books endpoint ports
    (:class:`~xsim_trace.network.protocol.PortBookedFlows`), after its ports have carried it."""
    if not booked_mode:
        return now + _xfer_ns(size_ptr, sizes, times, key, size)
    bw = k_bw[key]
    if bw == 0.0:
        return now
    x = size / bw
    for j in range(k_pptr[key], k_pptr[key + 1]):
        p = k_ports[j]
        y = float(max(booked[p] - now, 0)) + size / port_bw[p]
        booked[p] = now + (np.int64(math.ceil(y - 1e-9 * abs(y))) if ceil else np.int64(y))
        if y > x:
            x = y
    t = k_lat[key] + x
    return now + (np.int64(math.ceil(t - 1e-9 * abs(t))) if ceil else np.int64(t))


@njit(cache=True, nogil=True)
def _eager_landed(si, now, sent_at, key, rw_head, rw_tail, ld_head, ld_tail, q_next, peer_of, start, wait,
                  ht, hs, hk, ha, hb, sc):
    """The eager data of send ``si`` (sent at ``sent_at``) is there: a waiting receive takes it and
    ends now, else it waits for its receive."""
    q = key[si]
    if rw_head[q] >= 0:
        j = fifo_pop(rw_head, rw_tail, q_next, q)
        peer_of[j] = si
        peer_of[si] = j
        if sent_at > start[j]:
            wait[j] = sent_at - start[j]
        sc[S_SEQ] += 1
        sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now, sc[S_SEQ], EV_DONE, j, 0)
    else:
        fifo_push(ld_head, ld_tail, q_next, q, si)


@njit(cache=True, nogil=True)
def run(ht, hs, hk, ha, hb,  # event heap
        ft, ff, fk, fa, fb,  # flow heap (finish, flow id, kind, a, b)
        ready, start, end, wait, peer_of,  # node times
        kind, dur, res, indeg, succ_ptr, succ_idx,  # graph
        busy, r_head, r_tail, r_next,  # resources: busy flag, FIFO of waiting nodes
        rank, peer_rank, key, size1, sw_head, sw_tail, rw_head, rw_tail, ld_head, ld_tail, q_next,  # p2p matching
        size_ptr, sizes, times,  # p2p transfer time per (key, size) on a contention-free backend
        booked_mode, k_lat, k_bw, k_pptr, k_ports, port_bw, booked, ceil,  # or: endpoint-port booking
        inst_of, arrived, inst_ptr, inst_nodes, inst_off, inst_priced,  # collectives
        work, sc, delay, eager, budget):
    """Run until nothing is left (returns 0) or ``budget`` events were handled (returns 1).
    ``work``: scratch of >= max out-degree + 2 nodes: the nodes to start, in order."""
    spent = 0
    while True:
        nw = 0
        now = 0
        if sc[S_SEEDED] == 0:  # -- seed: every node without deps is ready at 0
            sc[S_SEEDED] = 1
            for i in range(indeg.shape[0]):
                if indeg[i] == 0:
                    nw = wake(i, 0, res, r_head, r_tail, r_next, busy, ready, work, nw)
                    if nw == work.shape[0]:
                        return 2  # the caller's scratch is too small (cannot happen: sized by n)
        else:
            if spent >= budget:
                return 1
            if sc[S_HSIZE] > 0 and (sc[S_FSIZE] == 0 or ht[0] < ft[0]):
                now, k, a, b = ht[0], hk[0], ha[0], hb[0]
                sc[S_HSIZE] = _pop(ht, hs, hk, ha, hb, sc[S_HSIZE])
                sc[S_EVENTS] += 1
                spent += 1
                if k == EV_DONE:  # -- streams: node a ends, its resource passes on, successors wake
                    sc[S_FINISHED] += 1
                    nw = node_ends(a, now, end, res, r_head, r_tail, r_next, busy, succ_ptr, succ_idx, indeg, ready, work, nw)
                elif k == EV_EAGER:  # -- p2p: a delayed eager send puts its data on the wire
                    fid = sc[S_FID]
                    sc[S_FID] += 1
                    sc[S_FLOWS] += 1
                    sc[S_FSIZE] = _push(ft, ff, fk, fa, fb, sc[S_FSIZE],
                                        _flow_end(now, key[a], size1[a], size_ptr, sizes, times, booked_mode, k_lat, k_bw, k_pptr, k_ports, port_bw, booked, ceil), fid, FL_EAGER, a, now)
                else:  # -- p2p: a delayed rendezvous pair moves its data
                    fid = sc[S_FID]
                    sc[S_FID] += 1
                    sc[S_FLOWS] += 1
                    t_end = _flow_end(now, key[a], max(size1[a], size1[b]), size_ptr, sizes, times, booked_mode, k_lat, k_bw, k_pptr, k_ports, port_bw, booked, ceil)
                    sc[S_FSIZE] = _push(ft, ff, fk, fa, fb, sc[S_FSIZE], t_end, fid, FL_RDV, a, b)
            elif sc[S_FSIZE] > 0:  # -- network: every flow finishing now lands, in flow id order
                now = ft[0]
                while sc[S_FSIZE] > 0 and ft[0] <= now:
                    k, a, b = fk[0], fa[0], fb[0]
                    sc[S_FSIZE] = _pop(ft, ff, fk, fa, fb, sc[S_FSIZE])
                    sc[S_EVENTS] += 1
                    spent += 1
                    sc[S_SEQ] += 1
                    sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now, sc[S_SEQ], EV_DONE, a, 0)
                    if k == FL_RDV:
                        sc[S_SEQ] += 1
                        sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now, sc[S_SEQ], EV_DONE, b, 0)
                        continue
                    _eager_landed(a, now, b, key, rw_head, rw_tail, ld_head, ld_tail, q_next,
                                  peer_of, start, wait, ht, hs, hk, ha, hb, sc)
                continue
            else:
                return 0

        for w in range(nw):  # -- start the nodes that got their resource, in order
            i = work[w]
            start[i] = now
            ki = kind[i]
            if ki == K_TIMED:
                sc[S_SEQ] += 1
                sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now + dur[i], sc[S_SEQ], EV_DONE, i, 0)
            elif ki == K_COLL:  # -- collectives: the last member to arrive starts it, priced whole
                x = inst_of[i]
                arrived[x] += 1
                if arrived[x] == inst_ptr[x + 1] - inst_ptr[x]:
                    sc[S_COLLS] += 1
                    sc[S_PRICED] += inst_priced[x]
                    for j in range(inst_ptr[x], inst_ptr[x + 1]):
                        g = inst_nodes[j]
                        wait[g] = now - start[g]
                    for j in range(inst_ptr[x], inst_ptr[x + 1]):
                        sc[S_SEQ] += 1
                        sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now + inst_off[j], sc[S_SEQ], EV_DONE,
                                            inst_nodes[j], 0)
            elif eager:
                q = key[i]
                if ki == K_SEND:  # -- p2p, eager: the data leaves when the send starts
                    if rank[i] == peer_rank[i]:
                        sc[S_SEQ] += 1
                        sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now + delay, sc[S_SEQ], EV_DONE, i, 0)
                        _eager_landed(i, now + delay, now + delay, key, rw_head, rw_tail, ld_head, ld_tail, q_next,
                                      peer_of, start, wait, ht, hs, hk, ha, hb, sc)
                    elif delay:
                        sc[S_SEQ] += 1
                        sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now + delay, sc[S_SEQ], EV_EAGER, i, 0)
                    else:
                        fid = sc[S_FID]
                        sc[S_FID] += 1
                        sc[S_FLOWS] += 1
                        sc[S_FSIZE] = _push(ft, ff, fk, fa, fb, sc[S_FSIZE],
                                            _flow_end(now, q, size1[i], size_ptr, sizes, times, booked_mode, k_lat, k_bw, k_pptr, k_ports, port_bw, booked, ceil), fid, FL_EAGER, i, now)
                elif ld_head[q] >= 0:  # a receive whose data is already there ends now
                    si = fifo_pop(ld_head, ld_tail, q_next, q)
                    peer_of[i] = si
                    peer_of[si] = i
                    sc[S_SEQ] += 1
                    sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now, sc[S_SEQ], EV_DONE, i, 0)
                else:
                    fifo_push(rw_head, rw_tail, q_next, q, i)
            else:  # -- p2p, rendezvous: the data moves once both sides have started
                q = key[i]
                si, ri = rdv_match(ki == K_SEND, i, q, rw_head, rw_tail, sw_head, sw_tail, q_next, now, start, wait, peer_of)
                if si >= 0:
                    if rank[si] == rank[ri]:
                        sc[S_SEQ] += 1
                        sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now + delay, sc[S_SEQ], EV_DONE, si, 0)
                        sc[S_SEQ] += 1
                        sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now + delay, sc[S_SEQ], EV_DONE, ri, 0)
                    elif delay:
                        sc[S_SEQ] += 1
                        sc[S_HSIZE] = _push(ht, hs, hk, ha, hb, sc[S_HSIZE], now + delay, sc[S_SEQ], EV_RDV, si, ri)
                    else:
                        fid = sc[S_FID]
                        sc[S_FID] += 1
                        sc[S_FLOWS] += 1
                        t_end = _flow_end(now, q, max(size1[si], size1[ri]), size_ptr, sizes, times, booked_mode, k_lat, k_bw, k_pptr, k_ports, port_bw, booked, ceil)
                        sc[S_FSIZE] = _push(ft, ff, fk, fa, fb, sc[S_FSIZE], t_end, fid, FL_RDV, si, ri)
