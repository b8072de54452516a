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
            ready[s] = now
            r = res[s]
            if busy[r]:
                fifo_push(r_head, r_tail, r_next, r, s)
            else:
                busy[r] = 1
                work[nw] = s
                nw += 1
    return nw
