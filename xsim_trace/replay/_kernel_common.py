"""numba pieces both compiled loops share (the closed-form one in :mod:`._fast_kernel` and the
analytical-ca one in :mod:`._ca_kernel`): the per-resource FIFO of waiting nodes and what happens when a
node ends (its resource passes to the next waiting node, its successors wake).

numba's on-disk cache does not see edits to a function called from another module: after editing
this file, clear the ``__pycache__`` of ``xsim_trace/replay`` (a fresh install has no cache)."""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def fifo_push(head, tail, nxt, q, i):
    nxt[i] = -1
    if tail[q] < 0:
        head[q] = i
    else:
        nxt[tail[q]] = i
    tail[q] = i


@njit(cache=True, nogil=True)
def fifo_pop(head, tail, nxt, q):
    i = head[q]
    head[q] = nxt[i]
    if head[q] < 0:
        tail[q] = -1
    return i


@njit(cache=True, nogil=True)
def node_ends(a, now, end, res, r_head, r_tail, r_next, busy, succ_ptr, succ_idx, indeg, ready, work, nw):
    """Node ``a`` ends at ``now``: the next node waiting on its resource (or none) goes to ``work``, and
    every successor whose last dependency this was becomes ready (to ``work`` if its resource is free,
    else to the resource's FIFO).  Returns the new length of ``work``."""
    end[a] = now
    r = res[a]
    if r_head[r] >= 0:
        work[nw] = fifo_pop(r_head, r_tail, r_next, r)
        nw += 1
    else:
        busy[r] = 0
    for kk in range(succ_ptr[a], succ_ptr[a + 1]):
        s = succ_idx[kk]
        indeg[s] -= 1
        if indeg[s] == 0:
            nw = wake(s, now, res, r_head, r_tail, r_next, busy, ready, work, nw)
    return nw


@njit(cache=True, nogil=True)
def wake(i, now, res, r_head, r_tail, r_next, busy, ready, work, nw):
    """Node ``i`` has no dependency left at ``now``: it goes to ``work`` if its resource is free (taking
    it), else to the resource's FIFO.  Returns the new length of ``work``."""
    ready[i] = now
    r = res[i]
    if busy[r]:
        fifo_push(r_head, r_tail, r_next, r, i)
    else:
        busy[r] = 1
        work[nw] = i
        nw += 1
    return nw


@njit(cache=True, nogil=True)
def rdv_match(is_send, i, q, rw_head, rw_tail, sw_head, sw_tail, q_next, now, start, wait, peer_of):
    """Rendezvous p2p: node ``i`` (a send if ``is_send``, else a receive) on matching key ``q`` meets the
    first peer waiting there, or waits itself.  Returns the (send, receive) pair that meets now, with
    their waits and peers set, or (-1, -1)."""
    si = ri = -1
    if is_send:
        if rw_head[q] >= 0:
            si, ri = i, fifo_pop(rw_head, rw_tail, q_next, q)
        else:
            fifo_push(sw_head, sw_tail, q_next, q, i)
    elif sw_head[q] >= 0:
        si, ri = fifo_pop(sw_head, sw_tail, q_next, q), i
    else:
        fifo_push(rw_head, rw_tail, q_next, q, i)
    if si >= 0:
        wait[si] = now - start[si]
        peer_of[si] = ri
        peer_of[ri] = si
        wait[ri] = now - start[ri]
    return si, ri
