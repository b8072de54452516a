"""Numba kernel of the compiled replay loop over ``analytical-ca`` (congestion-aware: a busy flag and
a FIFO per directed link, each flow pipelined in chunks), with collectives run flow by flow.

It runs the reference engine's rules in the reference's order, so the times come out bit for bit
(``tests/test_replay_compiled_ca.py``):

- the engine (:mod:`~xsim_trace.replay.engine`): one event heap ordered by (time, seq); each turn
  asks the backend for its next completion with the engine's next event as the horizon, and a
  completion at or before that event goes first;
- streams, p2p matching: as :mod:`xsim_trace.replay._fast_kernel`;
- collectives (:mod:`~xsim_trace.replay.collectives`): ``enter_step`` / ``chunk_done`` /
  ``flow_landed``; the reference's synchronous calls (a chunk done starts the next one at once when
  the endpoint delay is 0) run on an explicit frame stack in the same order;
- the backend (:mod:`~xsim_trace.network.analytical_ca`): its own heap of (time, seq, kind, x),
  ARRIVE (a flow's head reaches hop ``h``), FREE (a link is released), DONE (the tail reaches the
  destination); a flow is in exactly one place at a time (a heap entry or one link's FIFO), so its
  hop and tail time live in its slot.  Each event costs O(log n) heap work, whatever the flows in
  flight;
- symmetry folding (:mod:`~xsim_trace.replay.fold_ca`): an instance may hold folded members (node
  -1) that do not run, and a flow that lands at one counts for its twin position (``inst_twin``).
  Where the event order decides at a link (a flow reaching it at the instant of another arrival or
  of its release) the run says so, for the folded run numbers its events differently: ``S_LINK_TIE``
  where that cannot be carried over, else the pair of first-hop arrivals and their *causes* (the
  node whose start sent each: ``-2 - node`` where the node is a collective member whose start drive
  sent it, -1 unknown) after the scalars, for :func:`~xsim_trace.replay.fold_ca.ties_carry_over`;
  per node, the batch of node starts it began in and its place there (``batch``).

Fixed-size state (arrays the caller owns); a push past a capacity sets ``S_OVER`` and the caller
reruns from scratch with larger arrays (deterministic, so the result is the same).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from xsim_trace.replay._borrowed import borrowed
from xsim_trace.replay._kernel_common import fifo_pop, fifo_push, node_ends, rdv_match, wake

K_TIMED, K_SEND, K_RECV, K_COLL = 0, 1, 2, 3
# engine events: node done, a chunk's member reaches a step, a delayed issue of a step's sends,
# a delayed eager send, a delayed rendezvous transfer
EV_DONE, EV_STEP, EV_ISSUE, EV_EAGER, EV_RDV = 0, 1, 2, 3, 4
# backend events
B_ARRIVE, B_FREE, B_DONE = 0, 1, 2
# what a landed flow completes
CB_COLL, CB_EAGER, CB_RDV = 0, 1, 2
# flow slot fields
F_FID, F_SIZE, F_ROUTE, F_NH, F_HOP, F_TAIL, F_NEXT, F_CB, F_A, F_B, F_C, F_D, F_E, F_CAUSE = range(14)
NF = 14
# frames of the collective driver
FR_ENTER, FR_CHUNK, FR_POST = 0, 1, 2
(S_TURN_SEQ, S_LINK_TIE, S_NTIES, S_CAUSE, S_FID, S_FREE, S_INFLIGHT, S_NFIN, S_HCOUNT, S_OVER, S_EVENTS, S_FINISHED,
 S_FLOWS, S_COLLS, S_SEEDED, S_BEVENTS, S_BOPS, S_BATCH) = range(18)
N_SCALARS = 18
#: first-hop arrival ties recorded after the scalars (pairs of causes); more set ``S_LINK_TIE``
TIE_CAP = 256
NO_HORIZON = 1 << 62
#: the read-only int64 tables packed into one array ``S`` (offsets ``O`` in this order): a call then
#: passes one array, not fifteen (numba counts references of every array argument, atomically, on
#: every call: that was half of the time per flow)
PACKED = ("inst_nodes_ptr", "inst_nodes", "inst_k", "inst_plan_ptr", "inst_plans", "inst_cp", "plan_step_ptr",
          "step_tab", "tab_base", "e_need", "e_sptr", "s_q", "s_size", "s_route", "route_ptr", "route_links",
          "inst_twin")
(O_INP, O_IN, O_K, O_IPP, O_IPL, O_ICP, O_PSP, O_ST, O_TB, O_EN, O_ESP, O_SQ, O_SSZ, O_SRT, O_RP, O_RL, O_TW) = range(17)
#: the per-chunk-member and per-member progress packed into ``M`` (offsets ``OM`` in this order)
PACKED_PROGRESS = ("cp_wait", "cp_pend", "cp_over", "p_done", "p_fin")


# ---- heaps: row 0 is the header (size, last seq, overflow); entries are rows 1..size, (t, seq, ...),
# ordered by (t, seq); each push takes the next seq.  One array per call: numba counts references of
# every array argument (atomically) on each call.
@njit(cache=True, nogil=True)
def _slot(h, t):
    """Take the next seq and sift a new row at time ``t`` up to its place; returns that row's index with
    (t, seq) written, or 0 when the heap is full (the header's overflow flag is set)."""
    size = h[0, 0]
    if size + 1 >= h.shape[0]:
        h[0, 2] = 1
        return 0
    s = h[0, 1] + 1
    h[0, 1] = s
    w = h.shape[1]
    i = size + 1
    while i > 1:
        p = i >> 1
        if t < h[p, 0] or (t == h[p, 0] and s < h[p, 1]):
            for j in range(w):
                h[i, j] = h[p, j]
            i = p
        else:
            break
    h[i, 0] = t
    h[i, 1] = s
    h[0, 0] = size + 1
    return i


@njit(cache=True, nogil=True)
def _epush(h, t, k, a, b, c, d):
    """An engine event; its cause (column 7) is the one being handled (the header's column 3)."""
    i = _slot(h, t)
    if i:
        h[i, 2] = k
        h[i, 3] = a
        h[i, 4] = b
        h[i, 5] = c
        h[i, 6] = d
        h[i, 7] = h[0, 3]


@njit(cache=True, nogil=True)
def _cause(eh, sc, v):
    """What the actions from here on are caused by (see the module docstring)."""
    eh[0, 3] = v
    sc[S_CAUSE] = v


@njit(cache=True, nogil=True)
def _bpush(h, t, k, x):
    i = _slot(h, t)
    if i:
        h[i, 2] = k
        h[i, 3] = x


@njit(cache=True, nogil=True)
def _pop(h):
    """Remove the top row (row 1; read it first)."""
    size = h[0, 0] - 1
    h[0, 0] = size
    if size == 0:
        return
    w = h.shape[1]
    last = size + 1
    t, s = h[last, 0], h[last, 1]
    i = 1
    while True:
        c = 2 * i
        if c > size:
            break
        if c + 1 <= size and (h[c + 1, 0] < h[c, 0] or (h[c + 1, 0] == h[c, 0] and h[c + 1, 1] < h[c, 1])):
            c += 1
        if h[c, 0] < t or (h[c, 0] == t and h[c, 1] < s):
            for j in range(w):
                h[i, j] = h[c, j]
            i = c
        else:
            break
    for j in range(w):
        h[i, j] = h[last, j]


@njit(cache=True, nogil=True)
def _node_done(eh, node, t):
    _epush(eh, t, EV_DONE, node, 0, 0, 0)


# ---- arrivals of a (chunk member, step): open addressing, linear probing ----------------------------
@njit(cache=True, nogil=True)
def _home(key, mask):
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(h >> np.uint64(32)) & mask


@njit(cache=True, nogil=True)
def _hfind(hk, key):
    """Slot of ``key``, or -1 - (the free slot where it would go)."""
    mask = hk.shape[0] - 1
    i = _home(key, mask)
    while hk[i] != -1:
        if hk[i] == key:
            return i
        i = (i + 1) & mask
    return -1 - i


@njit(cache=True, nogil=True)
def _hdel(hk, hv, i, sc):
    mask = hk.shape[0] - 1
    j = i
    while True:
        j = (j + 1) & mask
        if hk[j] == -1:
            break
        k = _home(hk[j], mask)
        if (i <= j and i < k <= j) or (i > j and (k > i or k <= j)):
            continue
        hk[i] = hk[j]
        hv[i, 0] = hv[j, 0]
        hv[i, 1] = hv[j, 1]
        i = j
    hk[i] = -1
    sc[S_HCOUNT] -= 1


# ---- the backend ------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _to_ns(x, ceil):
    if ceil:
        return np.int64(math.ceil(x - 1e-9 * abs(x)))
    if x >= 0:
        return np.int64(x)
    return np.int64(math.floor(x))


@njit(cache=True, nogil=True)
def _start_flow(now, size, route, cb, a, b, c, d, e, fl, fstack, bh, S, o_rp, sc, L, LF, o_rl, chunk, ceil):
    """``start_flow``: a slot, the next flow id, its arrival at its first link handled now (see
    :func:`_brun`; DONE at once on an empty route)."""
    if sc[S_FREE] == 0:
        sc[S_OVER] = 1
        return
    sc[S_FREE] -= 1
    f = fstack[sc[S_FREE]]
    fl[f, F_FID] = sc[S_FID]
    sc[S_FID] += 1
    sc[S_FLOWS] += 1
    sc[S_INFLIGHT] += 1
    nh = S[o_rp + route + 1] - S[o_rp + route]
    fl[f, F_SIZE] = size
    fl[f, F_ROUTE] = route
    fl[f, F_NH] = nh
    fl[f, F_HOP] = 0
    fl[f, F_TAIL] = now
    fl[f, F_CB] = cb
    fl[f, F_A] = a
    fl[f, F_B] = b
    fl[f, F_C] = c
    fl[f, F_D] = d
    fl[f, F_E] = e
    fl[f, F_CAUSE] = sc[S_CAUSE]
    if nh == 0:
        _bpush(bh, now, B_DONE, f)
        sc[S_BOPS] += 1
        return
    sc[S_BOPS] += 2  # the reference's push and pop of the arrival
    sc[S_BEVENTS] += 1
    _arrive(now, sc[S_TURN_SEQ], f, bh, fl, L, LF, S, o_rp, o_rl, chunk, ceil, sc)


@njit(cache=True, nogil=True)
def _bpush_seq(h, t, s, k, x):
    """Push a row with the seq ``s`` taken earlier (a release pushed late: see :func:`_brun`)."""
    size = h[0, 0]
    if size + 1 >= h.shape[0]:
        h[0, 2] = 1
        return
    i = size + 1
    while i > 1:
        p = i >> 1
        if t < h[p, 0] or (t == h[p, 0] and s < h[p, 1]):
            h[i, 0] = h[p, 0]
            h[i, 1] = h[p, 1]
            h[i, 2] = h[p, 2]
            h[i, 3] = h[p, 3]
            i = p
        else:
            break
    h[i, 0] = t
    h[i, 1] = s
    h[i, 2] = k
    h[i, 3] = x
    h[0, 0] = size + 1


@njit(cache=True, nogil=True)
def _transmit(t, f, link, bh, fl, L, LF, chunk, ceil, sc):
    """Flow ``f`` sends its next hop on ``link`` at ``t``: its head (or tail) event first, then the
    link's release (kept with the link unless flows wait for it: see :func:`_brun`)."""
    nl = L.shape[0] // 7
    h = fl[f, F_HOP]
    size = fl[f, F_SIZE]
    s = float(size)
    cs = float(min(size, chunk)) if chunk else s
    bw = LF[link]
    lat = LF[nl + link]
    free_t = t + _to_ns(s / bw, ceil)
    comm = _to_ns(lat + s / bw, ceil)
    ccomm = _to_ns(lat + cs / bw, ceil)
    if h == 0:
        tail_next = t + comm
    else:
        tail_next = max(t + comm, fl[f, F_TAIL] + ccomm)
    fl[f, F_HOP] = h + 1
    fl[f, F_TAIL] = tail_next
    if h + 1 == fl[f, F_NH]:
        _bpush(bh, tail_next, B_DONE, f)
    else:
        _bpush(bh, t + ccomm, B_ARRIVE, f)
    bh[0, 1] += 1  # the release's seq
    L[3 * nl + link] = free_t
    L[4 * nl + link] = bh[0, 1]
    if L[nl + link] >= 0:  # flows wait: the release goes into the heap now
        _bpush_seq(bh, free_t, bh[0, 1], B_FREE, link)
        L[link] = 1
    sc[S_BOPS] += 3  # the event pushed, the release's push and pop
    sc[S_BEVENTS] += 1  # the release


@njit(cache=True, nogil=True)
def _arrive(t, s_ev, f, bh, fl, L, LF, S, o_rp, o_rl, chunk, ceil, sc):
    """Flow ``f``'s head reaches its next link at (``t``, ``s_ev``): it waits there while the link's
    last release is later than that (in the reference: its FREE event is not handled yet), else it
    is sent at once."""
    nl = L.shape[0] // 7
    link = S[o_rl + S[o_rp + fl[f, F_ROUTE]] + fl[f, F_HOP]]
    rt = L[3 * nl + link]
    first = fl[f, F_HOP] == 0
    if rt == t:  # the event order decides (see the module docstring)
        sc[S_LINK_TIE] = 1
    elif L[5 * nl + link] == t:
        prev = L[6 * nl + link]
        if not first or prev == -1 or fl[f, F_CAUSE] == -1 or sc[S_NTIES] == TIE_CAP:
            sc[S_LINK_TIE] = 1
        else:
            j = N_SCALARS + 2 * sc[S_NTIES]
            sc[j] = prev
            sc[j + 1] = fl[f, F_CAUSE]
            sc[S_NTIES] += 1
    L[5 * nl + link] = t
    L[6 * nl + link] = fl[f, F_CAUSE] if first else -1
    if L[link] or rt > t or (rt == t and L[4 * nl + link] > s_ev):
        if not L[link]:
            _bpush_seq(bh, rt, L[4 * nl + link], B_FREE, link)
            L[link] = 1
        fl[f, F_NEXT] = -1
        tail = L[2 * nl + link]
        if tail < 0:
            L[nl + link] = f
        else:
            fl[tail, F_NEXT] = f
        L[2 * nl + link] = f
        return
    _transmit(t, f, link, bh, fl, L, LF, chunk, ceil, sc)


@njit(cache=True, nogil=True)
def _brun(limit, stop_at_done, bh, fl, fin, L, LF, S, o_rp, o_rl, chunk, ceil, sc):
    """The backend's ``_run``: events with time <= ``limit``; with ``stop_at_done`` it stops before the
    first completion and returns its time (also beyond ``limit``), else -1.  Completions go to ``fin``.
    ``L``: per link whether its release is in the heap, the head and the tail of its FIFO, the time
    and seq of its last release, the time of its last arrival and that arrival's cause if it was a
    flow's first hop, else -1 (7 x links); ``LF``: per link its bandwidth, then its latency; routes
    in ``S`` from ``o_rp`` (CSR pointers) and ``o_rl``.

    Two events of the reference are not heap rows here, with the same outcome and counters:

    - a link's release (FREE) goes into the heap only when a flow has to wait for it: until then its
      (time, seq) is kept with the link (the seq taken when the reference pushes it, so the heap's
      order is the reference's), and a flow arriving at (t, s) finds the link busy when that release
      is later than (t, s);
    - a flow's arrival at its first link is handled when the flow starts (:func:`_start_flow`): the
      reference handles it in its next ``_run``, before anything pushed after it, and by then every
      backend event up to ``now`` has been handled except what this turn's own first arrivals made.

    Both are counted (``heap_ops``, ``events``) when they happen, as the reference pushes and pops
    every one; a ring without contention then makes 2 heap events per two-hop flow instead of 5."""
    nl = L.shape[0] // 7
    while bh[0, 0] > 0:
        t = bh[1, 0]
        k = bh[1, 2]
        if t > limit:
            if stop_at_done and k == B_DONE:
                return t
            return -1
        if k == B_DONE and stop_at_done:
            return t
        s_ev = bh[1, 1]
        x = bh[1, 3]
        _pop(bh)
        if k == B_DONE:
            sc[S_BOPS] += 1
            fin[sc[S_NFIN]] = x
            sc[S_NFIN] += 1
        elif k == B_FREE:  # a release some flow waits for (counted when it was made)
            link = x
            L[link] = 0
            f = L[nl + link]
            L[nl + link] = fl[f, F_NEXT]
            if L[nl + link] < 0:
                L[2 * nl + link] = -1
            _transmit(t, f, link, bh, fl, L, LF, chunk, ceil, sc)
        else:
            sc[S_BOPS] += 1
            sc[S_BEVENTS] += 1
            _arrive(t, s_ev, x, bh, fl, L, LF, S, o_rp, o_rl, chunk, ceil, sc)
    return -1


# ---- collectives on the flow path ------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _issue(x, c, s, p, now, S, O, fl, fstack, bh, sc, L, LF, chunk, ceil):
    """Member ``p`` of chunk ``c`` sends its transfers of step ``s``, in schedule order (``S``: the
    read-only tables packed into one array, ``O`` their offsets: see :data:`PACKED`)."""
    st = S[O[O_PSP] + S[O[O_IPL] + S[O[O_IPP] + x] + c]] + s
    e = S[O[O_TB] + S[O[O_ST] + st]] + p
    for j in range(S[O[O_ESP] + e], S[O[O_ESP] + e + 1]):
        _start_flow(now, S[O[O_SSZ] + j], S[O[O_SRT] + j], CB_COLL, x, c, s, S[O[O_SQ] + j], p, fl, fstack, bh, S,
                    O[O_RP], sc, L, LF, O[O_RL], chunk, ceil)


@njit(cache=True, nogil=True)
def _drive(typ, x, c, p, v, now, stk, S, O, M, OM, hk, hv, s1, eh, fl, fstack, bh, sc, delay, in_flight,
               L, LF, chunk, ceil):
    """``enter_step`` (FR_ENTER, v = step), ``chunk_done`` (FR_CHUNK) and what ``chunk_done`` does
    after a synchronous start of the next chunk (FR_POST, v = its finish time), run to the end."""
    o_inp, o_in, o_k, o_ipp, o_ipl, o_icp = O[O_INP], O[O_IN], O[O_K], O[O_IPP], O[O_IPL], O[O_ICP]
    o_psp, o_st, o_tb, o_en, o_esp = O[O_PSP], O[O_ST], O[O_TB], O[O_EN], O[O_ESP]
    m_wait, m_pend, m_over, m_done, m_fin = OM[0], OM[1], OM[2], OM[3], OM[4]
    stk[0, 0] = typ
    stk[0, 1] = x
    stk[0, 2] = c
    stk[0, 3] = p
    stk[0, 4] = v
    top = 1
    while top > 0:
        top -= 1
        typ = stk[top, 0]
        x = stk[top, 1]
        c = stk[top, 2]
        p = stk[top, 3]
        v = stk[top, 4]
        n = S[o_inp + x + 1] - S[o_inp + x]
        cpp = S[o_icp + x] + c * n + p
        if typ == FR_ENTER:
            plan = S[o_ipl + S[o_ipp + x] + c]
            base = S[o_psp + plan]
            nst = S[o_psp + plan + 1] - base
            s = v
            through = True
            while s < nst:
                e = S[o_tb + S[o_st + base + s]] + p
                nsend = S[o_esp + e + 1] - S[o_esp + e]
                if nsend:
                    M[m_pend + cpp] += nsend
                    if delay:
                        _epush(eh, now + delay, EV_ISSUE, x, c, s, p)
                    else:
                        _issue(x, c, s, p, now, S, O, fl, fstack, bh, sc, L, LF, chunk, ceil)
                need = S[o_en + e]
                if need:
                    slot = _hfind(hk, cpp * s1 + s)
                    if slot < 0 or hv[slot, 0] < need:
                        M[m_wait + cpp] = s
                        through = False
                        break
                    t_eff = hv[slot, 1]
                    _hdel(hk, hv, slot, sc)
                    if t_eff > now:
                        _epush(eh, t_eff, EV_STEP, x, c, p, s + 1)
                        through = False
                        break
                s += 1
            if not through:
                continue
            if M[m_pend + cpp]:  # a member's chunk ends once its own sends are delivered too
                M[m_over + cpp] = 1
                continue
            typ = FR_CHUNK
        if typ == FR_CHUNK:
            t_fin = now + delay
            c2 = c + in_flight
            if c2 < S[o_k + x]:
                if t_fin > now:
                    _epush(eh, t_fin, EV_STEP, x, c2, p, 0)
                else:
                    if top + 2 > stk.shape[0]:
                        sc[S_OVER] = 1
                        return
                    stk[top, 0] = FR_POST
                    stk[top, 1] = x
                    stk[top, 2] = c
                    stk[top, 3] = p
                    stk[top, 4] = t_fin
                    stk[top + 1, 0] = FR_ENTER
                    stk[top + 1, 1] = x
                    stk[top + 1, 2] = c2
                    stk[top + 1, 3] = p
                    stk[top + 1, 4] = 0
                    top += 2
                    continue
            v = t_fin
        # FR_POST (or the rest of FR_CHUNK): count the chunk, the member ends with its last
        pi = S[o_inp + x] + p
        M[m_done + pi] += 1
        if v > M[m_fin + pi]:
            M[m_fin + pi] = v
        if M[m_done + pi] == S[o_k + x]:
            _node_done(eh, S[o_in + pi], M[m_fin + pi])


# ---- p2p ---------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _eager_landed(si, now, sent_at, key, rw_head, rw_tail, ld_head, ld_tail, q_next, peer_of, start, wait, eh, sc):
    q = key[si]
    if rw_head[q] >= 0:
        j = fifo_pop(rw_head, rw_tail, q_next, q)
        peer_of[j] = si
        peer_of[si] = j
        if sent_at > start[j]:
            wait[j] = sent_at - start[j]
        _node_done(eh, j, now)
    else:
        fifo_push(ld_head, ld_tail, q_next, q, si)


# ---- the loop ------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def run(eh, bh, fl, fstack, fin, hk, hv, stk,  # fixed-capacity state
        ready, start, end, wait, peer_of,  # node times
        kind, dur, res, indeg, succ_ptr, succ_idx,  # graph
        busy, r_head, r_tail, r_next,  # resources
        rank, peer_rank, key, size1, sw_head, sw_tail, rw_head, rw_tail, ld_head, ld_tail, q_next, key_route,  # p2p
        inst_of, arrived, inst_nodes_ptr, inst_nodes, inst_k, inst_plan_ptr, inst_plans, inst_cp,  # collectives
        plan_step_ptr, step_tab, step_reduce, tab_base, e_need, e_sptr, s_q, s_size, s_route,  # schedules
        cp_wait, cp_pend, cp_over, p_done, p_fin, s1,  # collective progress
        batch,  # per node: the batch of starts it began in, its place there (2 x nodes)
        L, LF, chunk, ceil,  # the network: link state, bandwidth and latency (routes in S)
        S, O, M, OM,  # the same tables and progress packed (views of these above), for the calls
        work, sc, delay, red_delay, in_flight, eager, budget):
    """Run until nothing is left (returns 0), ``budget`` events were handled (1), or a capacity
    was exceeded (3: the state is spoilt, rerun with larger arrays)."""
    # borrowed views (:mod:`._borrowed`): no atomic reference counting on the calls inside the loop
    eh, bh, fl, fstack = borrowed(eh), borrowed(bh), borrowed(fl), borrowed(fstack)
    fin, hk, hv, stk = borrowed(fin), borrowed(hk), borrowed(hv), borrowed(stk)
    ready, start, end, wait = borrowed(ready), borrowed(start), borrowed(end), borrowed(wait)
    peer_of, kind, dur, res = borrowed(peer_of), borrowed(kind), borrowed(dur), borrowed(res)
    indeg, succ_ptr, succ_idx, busy = borrowed(indeg), borrowed(succ_ptr), borrowed(succ_idx), borrowed(busy)
    r_head, r_tail, r_next, rank = borrowed(r_head), borrowed(r_tail), borrowed(r_next), borrowed(rank)
    peer_rank, key, size1, sw_head = borrowed(peer_rank), borrowed(key), borrowed(size1), borrowed(sw_head)
    sw_tail, rw_head, rw_tail, ld_head = borrowed(sw_tail), borrowed(rw_head), borrowed(rw_tail), borrowed(ld_head)
    ld_tail, q_next, key_route, inst_of = borrowed(ld_tail), borrowed(q_next), borrowed(key_route), borrowed(inst_of)
    arrived, inst_nodes_ptr, inst_nodes, inst_k = borrowed(arrived), borrowed(inst_nodes_ptr), borrowed(inst_nodes), borrowed(inst_k)
    inst_plan_ptr, inst_plans, inst_cp, plan_step_ptr = borrowed(inst_plan_ptr), borrowed(inst_plans), borrowed(inst_cp), borrowed(plan_step_ptr)
    step_tab, step_reduce, tab_base, e_need = borrowed(step_tab), borrowed(step_reduce), borrowed(tab_base), borrowed(e_need)
    e_sptr, s_q, s_size, s_route = borrowed(e_sptr), borrowed(s_q), borrowed(s_size), borrowed(s_route)
    cp_wait, cp_pend, cp_over, p_done = borrowed(cp_wait), borrowed(cp_pend), borrowed(cp_over), borrowed(p_done)
    p_fin, L, LF, S = borrowed(p_fin), borrowed(L), borrowed(LF), borrowed(S)
    M, work, sc, batch = borrowed(M), borrowed(work), borrowed(sc), borrowed(batch)
    spent = 0
    while True:
        if sc[S_OVER] or eh[0, 2] or bh[0, 2]:
            return 3
        nw = 0
        now = 0
        if sc[S_SEEDED] == 0:  # -- seed: every node without deps is ready at 0
            sc[S_SEEDED] = 1
            for i in range(indeg.shape[0]):
                if indeg[i] == 0:
                    nw = wake(i, 0, res, r_head, r_tail, r_next, busy, ready, work, nw)
        else:
            if spent >= budget:
                return 1
            t_net = -1
            if sc[S_INFLIGHT] > 0:  # -- the backend's next completion, the engine's next event its horizon
                horizon = eh[1, 0] if eh[0, 0] > 0 else NO_HORIZON
                if bh[0, 0] > 0 and bh[1, 2] == B_DONE:
                    cand = bh[1, 0]
                elif bh[0, 0] == 0 or bh[1, 0] > horizon:  # nothing due: _brun would return at once
                    cand = -1
                else:
                    cand = _brun(horizon, True, bh, fl, fin, L, LF, S, O[O_RP], O[O_RL], chunk, ceil, sc)
                if cand >= 0 and cand <= horizon:
                    t_net = cand
            if eh[0, 0] > 0 and (t_net < 0 or eh[1, 0] < t_net):
                now, k, a, b, c, d = eh[1, 0], eh[1, 2], eh[1, 3], eh[1, 4], eh[1, 5], eh[1, 6]
                _cause(eh, sc, eh[1, 7] if k == EV_ISSUE else (a if k == EV_EAGER else -1))
                _pop(eh)
                sc[S_TURN_SEQ] = bh[0, 1]  # this turn's first arrivals: see _brun
                sc[S_EVENTS] += 1
                spent += 1
                if k == EV_DONE:  # -- streams: node a ends, its resource passes on, successors wake
                    sc[S_FINISHED] += 1
                    nw = node_ends(a, now, end, res, r_head, r_tail, r_next, busy, succ_ptr, succ_idx, indeg, ready, work, nw)
                elif k == EV_STEP:  # -- collectives: member c of chunk b reaches step d
                    _drive(FR_ENTER, a, b, c, d, now, stk, S, O, M, OM, hk, hv, s1, eh, fl, fstack, bh, sc, delay, in_flight,
                           L, LF, chunk, ceil)
                elif k == EV_ISSUE:  # -- collectives: the delayed sends of member d, chunk b, step c
                    _issue(a, b, c, d, now, S, O, fl, fstack, bh, sc, L, LF, chunk, ceil)
                elif k == EV_EAGER:  # -- p2p: a delayed eager send puts its data on the wire
                    _start_flow(now, size1[a], key_route[key[a]], CB_EAGER, a, now, 0, 0, 0, fl, fstack, bh, S, O[O_RP], sc, L, LF, O[O_RL], chunk, ceil)
                else:  # -- p2p: a delayed rendezvous pair moves its data
                    _start_flow(now, max(size1[a], size1[b]), key_route[key[a]], CB_RDV, a, b, 0, 0, 0, fl, fstack,
                                bh, S, O[O_RP], sc, L, LF, O[O_RL], chunk, ceil)
            elif t_net >= 0:  # -- network: the flows landing at t_net, in flow id order
                now = t_net
                _cause(eh, sc, -1)
                _brun(now, False, bh, fl, fin, L, LF, S, O[O_RP], O[O_RL], chunk, ceil, sc)
                sc[S_TURN_SEQ] = bh[0, 1]
                nf = sc[S_NFIN]
                sc[S_NFIN] = 0
                if nf > 16:  # flow id order
                    fids = np.empty(nf, np.int64)
                    for j in range(nf):
                        fids[j] = fl[fin[j], F_FID]
                    order = np.argsort(fids)
                    fids[:] = fin[:nf]
                    for j in range(nf):
                        fin[j] = fids[order[j]]
                else:
                    for j in range(1, nf):
                        f = fin[j]
                        fid = fl[f, F_FID]
                        m = j - 1
                        while m >= 0 and fl[fin[m], F_FID] > fid:
                            fin[m + 1] = fin[m]
                            m -= 1
                        fin[m + 1] = f
                sc[S_EVENTS] += nf
                spent += nf
                for j in range(nf):
                    f = fin[j]
                    sc[S_INFLIGHT] -= 1
                    fstack[sc[S_FREE]] = f
                    sc[S_FREE] += 1
                    cb = fl[f, F_CB]
                    a = fl[f, F_A]
                    b = fl[f, F_B]
                    if cb == CB_RDV:
                        _node_done(eh, a, now)
                        _node_done(eh, b, now)
                    elif cb == CB_EAGER:
                        _node_done(eh, a, now)
                        _eager_landed(a, now, b, key, rw_head, rw_tail, ld_head, ld_tail, q_next, peer_of, start,
                                      wait, eh, sc)
                    else:  # flow_landed: transfer of step s of chunk c from position p to q (run x)
                        x, c, s, p = a, b, fl[f, F_C], fl[f, F_E]
                        q = S[O[O_TW] + inst_nodes_ptr[x] + fl[f, F_D]]  # a folded member's twin
                        n = inst_nodes_ptr[x + 1] - inst_nodes_ptr[x]
                        cpp = inst_cp[x] + c * n + p
                        cp_pend[cpp] -= 1
                        if cp_pend[cpp] == 0 and cp_over[cpp]:
                            cp_over[cpp] = 0
                            _drive(FR_CHUNK, x, c, p, 0, now, stk, S, O, M, OM, hk, hv, s1, eh, fl, fstack, bh, sc, delay, in_flight,
                                   L, LF, chunk, ceil)
                        st = plan_step_ptr[inst_plans[inst_plan_ptr[x] + c]] + s
                        eff = now + red_delay if red_delay and step_reduce[st] else now
                        cpq = inst_cp[x] + c * n + q
                        need_q = e_need[tab_base[step_tab[st]] + q]
                        go = -1
                        if cp_wait[cpq] == s and need_q == 1:
                            cp_wait[cpq] = -1
                            go = eff
                        else:
                            hkey = cpq * s1 + s
                            slot = _hfind(hk, hkey)
                            if slot < 0:
                                slot = -1 - slot
                                hk[slot] = hkey
                                hv[slot, 0] = 1
                                hv[slot, 1] = eff
                                sc[S_HCOUNT] += 1
                                if 2 * sc[S_HCOUNT] > hk.shape[0]:
                                    sc[S_OVER] = 1
                            else:
                                hv[slot, 0] += 1
                                if eff > hv[slot, 1]:
                                    hv[slot, 1] = eff
                            if cp_wait[cpq] == s and hv[slot, 0] == need_q:
                                cp_wait[cpq] = -1
                                go = hv[slot, 1]
                                _hdel(hk, hv, slot, sc)
                        if go >= 0:
                            if go > now:
                                _epush(eh, go, EV_STEP, x, c, q, s + 1)
                            else:
                                _drive(FR_ENTER, x, c, q, s + 1, now, stk, S, O, M, OM, hk, hv, s1, eh, fl, fstack, bh, sc, delay, in_flight,
                                       L, LF, chunk, ceil)
                continue
            else:
                return 0

        if nw:
            sc[S_BATCH] += 1
        for w in range(nw):  # -- start the nodes that got their resource, in order
            i = work[w]
            start[i] = now
            batch[2 * i] = sc[S_BATCH]
            batch[2 * i + 1] = w
            _cause(eh, sc, -1)
            ki = kind[i]
            if ki == K_TIMED:
                _node_done(eh, i, now + dur[i])
            elif ki == K_COLL:  # -- collectives: the last member to arrive starts it
                x = inst_of[i]
                arrived[x] += 1
                a0 = inst_nodes_ptr[x]
                n = inst_nodes_ptr[x + 1] - a0
                if arrived[x] == n:
                    sc[S_COLLS] += 1
                    for j in range(a0, a0 + n):  # (a folded member's node is -1: see compiled_ca)
                        g = inst_nodes[j]
                        if g >= 0:
                            wait[g] = now - start[g]
                    if inst_k[x] == 0:
                        for j in range(a0, a0 + n):
                            if inst_nodes[j] >= 0:
                                _node_done(eh, inst_nodes[j], now)
                    else:
                        for c in range(min(in_flight, inst_k[x])):
                            for p in range(n):
                                if inst_nodes[a0 + p] < 0:
                                    continue
                                _cause(eh, sc, -2 - inst_nodes[a0 + p])  # its own start drives it
                                _drive(FR_ENTER, x, c, p, 0, now, stk, S, O, M, OM, hk, hv, s1, eh, fl, fstack, bh, sc, delay, in_flight,
                                       L, LF, chunk, ceil)
            elif eager:
                q = key[i]
                if ki == K_SEND:  # -- p2p, eager: the data leaves when the send starts
                    if rank[i] == peer_rank[i]:
                        _node_done(eh, i, now + delay)
                        _eager_landed(i, now + delay, now + delay, key, rw_head, rw_tail, ld_head, ld_tail, q_next,
                                      peer_of, start, wait, eh, sc)
                    elif delay:
                        _epush(eh, now + delay, EV_EAGER, i, 0, 0, 0)
                    else:
                        _cause(eh, sc, i)
                        _start_flow(now, size1[i], key_route[q], CB_EAGER, i, now, 0, 0, 0, fl, fstack, bh, S, O[O_RP], sc, L, LF, O[O_RL], chunk, ceil)
                elif ld_head[q] >= 0:  # a receive whose data is already there ends now
                    si = fifo_pop(ld_head, ld_tail, q_next, q)
                    peer_of[i] = si
                    peer_of[si] = i
                    _node_done(eh, i, now)
                else:
                    fifo_push(rw_head, rw_tail, q_next, q, i)
            else:  # -- p2p, rendezvous: the data moves once both sides have started
                q = key[i]
                si, ri = rdv_match(ki == K_SEND, i, q, rw_head, rw_tail, sw_head, sw_tail, q_next, now, start, wait, peer_of)
                if si >= 0:
                    if rank[si] == rank[ri]:
                        _node_done(eh, si, now + delay)
                        _node_done(eh, ri, now + delay)
                    elif delay:
                        _epush(eh, now + delay, EV_RDV, si, ri, 0, 0)
                    else:
                        _start_flow(now, max(size1[si], size1[ri]), key_route[q], CB_RDV, si, ri, 0, 0, 0, fl,
                                    fstack, bh, S, O[O_RP], sc, L, LF, O[O_RL], chunk, ceil)
