"""The compiled replay loop: the reference engine's rules run by a numba kernel
(:mod:`xsim_trace.replay._fast_kernel`) over flat arrays, for a contention-free backend with every
collective priced whole (the closed-form path).  Same times bit for bit as the pure-Python engine,
which stays the reference (``tests/test_replay_compiled.py`` compares every node of both).

What is prepared in Python, once (:mod:`xsim_trace.replay.closed_form_tables`): each collective
instance's member offsets (from the pricer, memoised per shape), the transfer time of every (p2p
key, size) a send/recv pair can use (from the backend's uncontended timing), and the p2p matching keys.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from xsim_trace.replay.closed_form_tables import collective_tables, fold_of, order_tie, p2p_tables
from xsim_trace.replay.compile import K_SEND, CompiledWorkload
from xsim_trace.replay.schedule_cache import ScheduleCache
from xsim_trace.replay.settings import ReplaySettings

log = logging.getLogger(__name__)

#: events handled between two progress reports
SLICE_EVENTS = 1 << 20


def kernel():
    """The numba kernel module, or None where numba is not installed."""
    try:
        from xsim_trace.replay import _fast_kernel
    except ImportError:
        return None
    return _fast_kernel


def run_compiled(w: CompiledWorkload, schedules: ScheduleCache, settings: ReplaySettings, pricer,
                 progress: Callable[[int], None] | None = None, booked: bool = False, *,
                 fold: bool = False, rank_class: np.ndarray | None = None, full=None):
    """``(times, stats dict)`` of the replay, run by the kernel: times are (ready, start, end, wait,
    peer) per node.  ``booked``: p2p flows book endpoint ports (the backend is a
    ``PortBookedFlows``), else each is timed alone (a contention-free backend).  ``fold``: simulate
    one rank per class of equivalent ranks (:mod:`xsim_trace.replay.fold`; ``rank_class``: a device
    class per rank that equivalent ranks share); ``stats['folded_ranks']`` says how many were not
    simulated (their times are their representative's), and the counts of events are the
    simulated ones.  ``full``: (backend rank id per workload rank, full members per group) when
    ``w`` holds some ranks of a larger set only (see :func:`~xsim_trace.replay.closed_form_tables.collective_tables`)."""
    k = kernel()
    assert k is not None
    p2p = p2p_tables(w, schedules, booked, None if full is None else full[0])
    colls = collective_tables(w, pricer, full)
    found = fold_of(w, p2p, colls, booked, rank_class) if fold else None
    if found is None:
        graph = (w.exec_kind, w.duration_ns, w.resource, w.indegree.astype(np.int32), w.succ_ptr, w.succ_idx)
        times, stats = _run(k, graph, max(w.num_resources, 1), p2p, colls, settings, progress)
        if full is not None:  # the present ranks of a folded set stand for others: the same guard
            from xsim_trace.replay.fold import Quotient  # noqa: PLC0415

            every = np.arange(w.num_nodes, dtype=np.int64)
            stats["order_tie"] = order_tie(w, Quotient(every, every), times, p2p, booked, settings)
        return times, dict(stats, folded_ranks=0)
    from xsim_trace.replay.fold import expand, quotient  # noqa: PLC0415

    q = quotient(w, found)
    graph, n_res, p2p_q, colls_q = _quotient_arrays(w, q, p2p, colls)
    times_q, stats = _run(k, graph, n_res, p2p_q, colls_q, settings, None)
    times = expand(w, found, q, times_q)
    why = order_tie(w, q, times, p2p, booked, settings)
    if why is not None or stats["finished"] != len(q.nodes):
        log.debug("fold: replaying every rank (%s)", why or "the quotient did not finish")
        return run_compiled(w, schedules, settings, pricer, progress, booked, fold=False, full=full)
    if progress is not None:
        progress(w.num_nodes)
    stats["finished"] = w.num_nodes
    return times, dict(stats, folded_ranks=found.folded_ranks, rep_of=found.rep_of)


def _quotient_arrays(w: CompiledWorkload, q, p2p: tuple, colls: tuple):
    """The kernel's arrays restricted to the representatives' nodes (indices renumbered)."""
    from xsim_trace.replay.fold import sub_csr  # noqa: PLC0415

    n = q.nodes
    succ_ptr, succ_idx = sub_csr(w.succ_ptr, w.succ_idx, n, q.index_of)
    res_used = np.unique(w.resource[n])
    res_map = np.full(max(w.num_resources, 1), -1, np.int64)
    res_map[res_used] = np.arange(len(res_used))
    graph = (w.exec_kind[n], w.duration_ns[n], res_map[w.resource[n]].astype(np.int32),
             w.indegree[n].astype(np.int32), succ_ptr, succ_idx.astype(np.int32))
    rank, peer_rank, key, size1 = (a[n] for a in p2p[:4])
    p2p_q = (rank, peer_rank, key, size1, *p2p[4:10], np.full(len(n), -1, np.int64), *p2p[11:])
    inst_of, _, inst_ptr, inst_nodes, off, priced = colls
    keep_entry = q.index_of[inst_nodes] >= 0
    n_inst = len(inst_ptr) - 1
    per_inst = np.add.reduceat(keep_entry.astype(np.int64), inst_ptr[:-1]) if len(inst_nodes) else np.zeros(n_inst, np.int64)
    per_inst = np.where(np.diff(inst_ptr) > 0, per_inst, 0)
    kept = np.flatnonzero(per_inst > 0)
    inst_map = np.full(max(n_inst, 1), -1, np.int64)
    inst_map[kept] = np.arange(len(kept))
    ptr_q = np.zeros(len(kept) + 1, np.int64)
    np.cumsum(per_inst[kept], out=ptr_q[1:])
    io = inst_of[n]
    colls_q = (np.where(io >= 0, inst_map[np.maximum(io, 0)], -1), np.zeros(len(kept), np.int64), ptr_q,
               q.index_of[inst_nodes[keep_entry]], off[keep_entry], priced[kept])
    return graph, len(res_used), p2p_q, colls_q


def _run(k, graph: tuple, n_res: int, p2p: tuple, colls: tuple, settings: ReplaySettings, progress):
    n = len(graph[0])
    n_sends = int(np.count_nonzero(graph[0] == K_SEND))
    cap = n + n_sends + 1
    heap = (np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.int8), np.zeros(cap, np.int64), np.zeros(cap, np.int64))
    fcap = n_sends + 1
    flows = (np.zeros(fcap, np.int64), np.zeros(fcap, np.int64), np.zeros(fcap, np.int8), np.zeros(fcap, np.int64), np.zeros(fcap, np.int64))
    times = (np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.int64), np.full(n, -1, np.int64))
    resources = (np.zeros(n_res, np.int8), np.full(n_res, -1, np.int64), np.full(n_res, -1, np.int64), np.full(n, -1, np.int64))
    args = (*heap, *flows, *times, *graph, *resources, *p2p, *colls)
    work = np.empty(n + 2, np.int64)
    sc = np.zeros(k.N_SCALARS, np.int64)
    delay = np.int64(settings.endpoint_delay_ns)
    eager = settings.p2p == "eager"
    reported = 0
    while k.run(*args, work, sc, delay, eager, SLICE_EVENTS):
        if progress is not None:
            progress(int(sc[k.S_FINISHED]) - reported)
            reported = int(sc[k.S_FINISHED])
    if progress is not None:
        progress(int(sc[k.S_FINISHED]) - reported)
    stats = dict(events=int(sc[k.S_EVENTS]), flows=int(sc[k.S_FLOWS]), collectives=int(sc[k.S_COLLS]),
                 closed_form_collectives=int(sc[k.S_PRICED]), finished=int(sc[k.S_FINISHED]))
    return times, stats
