"""The flat tables of a closed-form replay, shared by the compiled loop
(:mod:`xsim_trace.replay.compiled_loop`, whose kernel takes them as arguments) and by symmetry
folding on either loop (:mod:`xsim_trace.replay.fold`, :mod:`xsim_trace.replay.fold_loop`): the p2p
matching keys with each key's transfer times or booked route (:func:`p2p_tables`), each collective
instance's members and priced offsets (:func:`collective_tables`), the fold those couplings give
(:func:`fold_of`) and the tie guard over a run's times (:func:`order_tie`).

Layout of :func:`p2p_tables`' tuple (the compiled kernel's p2p arguments, in order): rank, peer rank,
p2p key per node, size (at least 1) per node, six per-key queue heads, the per-node queue link, per key
the CSR of its sizes and their transfer times, then the route (booked, latency and bottleneck per key,
the CSR of each key's endpoint ports, every link's bandwidth, the ports' booking table, rounding up).
:func:`collective_tables`': per node its instance, per instance a counter, the CSR of the instances'
member nodes, each member's offset, per instance whether it is priced.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.replay.compile import K_SEND, CompiledWorkload
from xsim_trace.replay.distinct import distinct_rows
from xsim_trace.replay.fold import Couplings, Fold, combine, find_fold, order_decided_tie, segment_sum
from xsim_trace.replay.p2p_keys import p2p_keys
from xsim_trace.replay.schedule_cache import ScheduleCache
from xsim_trace.replay.settings import ReplaySettings

def collective_tables(w: CompiledWorkload, pricer, full=None) -> tuple:
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


def p2p_tables(w: CompiledWorkload, schedules: ScheduleCache, booked: bool, rank_ids: np.ndarray | None = None) -> tuple:
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


def order_tie(w: CompiledWorkload, q, times: tuple, p2p: tuple, booked: bool, settings: ReplaySettings) -> str | None:
    """Why the folded run (``q``: its quotient) cannot stand for the full one (a tie broken by the
    global event order, :func:`~xsim_trace.replay.fold.order_decided_tie`), or None."""
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


def fold_of(w: CompiledWorkload, p2p: tuple, colls: tuple, booked: bool, rank_class) -> Fold | None:
    """The fold (:func:`~xsim_trace.replay.fold.find_fold`) of the couplings these tables describe."""
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


