"""The compiled replay loop: the reference engine's rules run by a numba kernel
(:mod:`xsim_trace.replay._fast_kernel`) over flat arrays, for a contention-free backend with every
collective priced whole (the closed-form path).  Same times bit for bit as the pure-Python engine,
which stays the reference (``tests/test_replay_compiled.py`` compares every node of both).

What is prepared here, in Python, once: each collective instance's member offsets (from the
pricer, memoised per shape), the transfer time of every (p2p key, size) a send/recv pair can use
(from the backend's uncontended timing), and the p2p matching keys.
"""

from __future__ import annotations

import logging
from itertools import chain
from typing import Callable

import numpy as np

from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.replay.compile import K_SEND, CompiledWorkload
from xsim_trace.replay.distinct import distinct_rows
from xsim_trace.replay.p2p_keys import p2p_keys
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


def _collectives(w: CompiledWorkload, pricer, full=None) -> tuple:
    """``full``: (rank ids, members per group) of a workload that holds some ranks of a larger
    set only (:mod:`xsim_trace.replay.fold_declared`): each collective is priced for its whole
    group and its present members take their own offsets."""
    n_inst = len(w.instances)
    sizes = np.fromiter((len(x.nodes) for x in w.instances), np.int64, n_inst)
    ptr = np.zeros(n_inst + 1, np.int64)
    np.cumsum(sizes, out=ptr[1:])
    nodes = np.fromiter(chain.from_iterable(x.nodes for x in w.instances), np.int64, int(ptr[-1]))
    offs: list = []  # per instance its members' offsets, zeros where not priced
    priced = np.zeros(n_inst, np.int8)
    barrier = CollectiveType.BARRIER
    for x, inst in enumerate(w.instances):
        members = w.groups[inst.group] if full is None else full[1][inst.group]
        if len(members) <= 1 or (inst.size_bytes == 0 and inst.comm_type != barrier):
            offs.append((0,) * len(inst.nodes))
            continue
        priced[x] = 1
        if full is None:
            offs.append(pricer.offsets_ns(inst, members))
        else:
            where = np.searchsorted(members, full[0][list(w.groups[inst.group])])
            offs.append(np.asarray(pricer.offsets_ns(inst, members), np.int64)[where].tolist())
    off = np.fromiter(chain.from_iterable(offs), np.int64, int(ptr[-1]))
    inst_of = w.coll_instance.astype(np.int64)
    return inst_of, np.zeros(n_inst, np.int64), ptr, nodes, off, priced


def _routes(backend, uniq: np.ndarray) -> tuple:
    """Per p2p key, the route the backend books (latency, bottleneck, endpoint ports), its link
    bandwidths, an all-free booking table and the rounding (``PortBookedFlows``)."""
    lat, bw, ptr, ports = [], [], [0], []
    for src, dst in uniq[:, :2].tolist():
        a, b, p = backend.flow_route(int(src), int(dst))
        lat.append(float(a))
        bw.append(float(b))
        ports.extend(int(x) for x in p)
        ptr.append(len(ports))
    port_bw = np.asarray(backend.port_bw_Bpns(), np.float64)
    return (True, np.asarray(lat, np.float64), np.asarray(bw, np.float64), np.asarray(ptr, np.int64),
            np.asarray(ports, np.int64), port_bw, np.zeros(max(len(port_bw), 1), np.int64), backend.rounding == "ceil")


def _p2p(w: CompiledWorkload, schedules: ScheduleCache, booked: bool, rank_ids: np.ndarray | None = None) -> tuple:
    """``rank_ids``: the backend's rank id of each workload rank (a partial set), else the same."""
    n = w.num_nodes
    keys = p2p_keys(w)
    is_p2p, idx, rank, peer, key, uniq = keys.is_p2p, keys.idx, keys.rank, keys.peer, keys.key, keys.triples
    size1 = np.maximum(w.comm_size, 1).astype(np.int64)
    if len(idx):
        if rank_ids is not None:
            uniq = np.stack([rank_ids[uniq[:, 0]], rank_ids[uniq[:, 1]], uniq[:, 2]], 1)
        # every size a pair on a key can move: max(size1 of send, size1 of recv) is one of them
        ks = distinct_rows(np.stack([key[idx], size1[idx]], 1))[0]  # (np.unique would import numpy.ma)
        n_keys = len(uniq)
        size_ptr = np.zeros(n_keys + 1, np.int64)
        np.cumsum(np.bincount(ks[:, 0], minlength=n_keys), out=size_ptr[1:])
        sizes = ks[:, 1].copy()
        if booked:
            times = np.zeros(len(sizes), np.int64)
        else:  # each (key, size) priced alone: one transfer per call, never a batch
            times = np.asarray([int(schedules.transfer_times(uniq[k:k + 1, 0], uniq[k:k + 1, 1], np.asarray([z], np.int64))[0])
                                for k, z in ks.tolist()], np.int64)
    else:
        n_keys = 0
        uniq = np.zeros((0, 3), np.int64)
        size_ptr = np.zeros(1, np.int64)
        sizes = times = np.zeros(0, np.int64)
    q = max(n_keys, 1)
    heads = [np.full(q, -1, np.int64) for _ in range(6)]
    peer_rank = np.where(is_p2p, peer, -1)
    if booked:
        route = _routes(schedules.backend, uniq)
    else:
        route = (False, np.zeros(1), np.zeros(1), np.zeros(2, np.int64), np.zeros(1, np.int64), np.zeros(1),
                 np.zeros(1, np.int64), False)
    return (rank, peer_rank, key, size1, *heads, np.full(n, -1, np.int64), size_ptr, sizes, np.asarray(times, np.int64),
            *route)


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
    ``w`` holds some ranks of a larger set only (see :func:`_collectives`)."""
    k = kernel()
    assert k is not None
    p2p = _p2p(w, schedules, booked, None if full is None else full[0])
    colls = _collectives(w, pricer, full)
    found = _find_fold(w, p2p, colls, booked, rank_class) if fold else None
    if found is None:
        graph = (w.exec_kind, w.duration_ns, w.resource, w.indegree.astype(np.int32), w.succ_ptr, w.succ_idx)
        times, stats = _run(k, graph, max(w.num_resources, 1), p2p, colls, settings, progress)
        if full is not None:  # the present ranks of a folded set stand for others: the same guard
            from xsim_trace.replay.fold import Quotient  # noqa: PLC0415

            every = np.arange(w.num_nodes, dtype=np.int64)
            stats["order_tie"] = _order_decided_tie(w, Quotient(every, every), times, p2p, booked, settings)
        return times, dict(stats, folded_ranks=0)
    from xsim_trace.replay.fold import expand, quotient  # noqa: PLC0415

    q = quotient(w, found)
    graph, n_res, p2p_q, colls_q = _quotient_arrays(w, q, p2p, colls)
    times_q, stats = _run(k, graph, n_res, p2p_q, colls_q, settings, None)
    times = expand(w, found, q, times_q)
    why = _order_decided_tie(w, q, times, p2p, booked, settings)
    if why is not None or stats["finished"] != len(q.nodes):
        log.debug("fold: replaying every rank (%s)", why or "the quotient did not finish")
        return run_compiled(w, schedules, settings, pricer, progress, booked, fold=False, full=full)
    if progress is not None:
        progress(w.num_nodes)
    stats["finished"] = w.num_nodes
    return times, dict(stats, folded_ranks=found.folded_ranks, rep_of=found.rep_of)


def _order_decided_tie(w: CompiledWorkload, q, times: tuple, p2p: tuple, booked: bool, settings: ReplaySettings):
    """Why the folded run cannot stand for the full one (a tie broken by the global event order), or None."""
    from xsim_trace.replay.fold import order_decided_tie  # noqa: PLC0415

    ready, start, end, _, peer = times
    flow_ports = flow_start = None
    if booked:
        kind, rank, peer_rank = w.exec_kind, p2p[0], p2p[1]
        sends = np.flatnonzero((kind == K_SEND) & (rank != peer_rank))
        flow_start = np.full(w.num_nodes, -1, np.int64)
        at = start[sends] if settings.p2p == "eager" else np.maximum(start[sends], start[peer[sends]])
        flow_start[sends] = at + settings.endpoint_delay_ns
        flow_ports = (p2p[17], p2p[18])
    return order_decided_tie(w, q, ready, start, end, p2p[2], flow_ports, flow_start)


def _find_fold(w: CompiledWorkload, p2p: tuple, colls: tuple, booked: bool, rank_class):
    from xsim_trace.replay.fold import Couplings, combine, find_fold, segment_sum  # noqa: PLC0415

    key, size_ptr, sizes, times = p2p[2], p2p[11], p2p[12], p2p[13]
    n_keys = len(size_ptr) - 1
    if booked:
        k_lat, k_bw, k_pptr, k_ports, port_bw = p2p[15:20]
        port_h = np.zeros(len(k_ports), np.uint64) if not len(k_ports) else combine(port_bw[k_ports].view(np.int64))
        key_sig = combine(k_lat[:n_keys].view(np.int64), k_bw[:n_keys].view(np.int64),
                          segment_sum(port_h, k_pptr)[:n_keys].view(np.int64)) if n_keys else np.zeros(0, np.uint64)
        ports = (k_pptr, k_ports)
    else:
        key_sig = segment_sum(combine(sizes, times), size_ptr) if n_keys else np.zeros(0, np.uint64)
        ports = None
    _, _, inst_ptr, inst_nodes, off, _ = colls
    c = Couplings(p2p_key=key, key_sig=key_sig, key_ports=ports, inst_ptr=inst_ptr, inst_nodes=inst_nodes, inst_off=off)
    return find_fold(w, c, rank_class)


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
