"""The compiled replay loop over ``analytical-ca``: the reference engine with its collectives run flow
by flow over the congestion-aware link model, run by a numba kernel
(:mod:`xsim_trace.replay._ca_kernel`) over flat arrays.  Same times, event counts and backend
counters bit for bit as the pure-Python engine over
:class:`~xsim_trace.network.analytical_ca.AnalyticalCongestionAwareBackend`, which stays the
reference (``tests/test_replay_compiled_ca.py`` compares every node of both).

What is prepared here, in Python, once: every chunk schedule the collectives use, flattened (per
step a table of each member's sends and the receives it needs; identical steps share a table), the
route of every (src, dst) rank pair a flow can take, and the p2p matching keys.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.network.analytical_ca import AnalyticalCongestionAwareBackend
from xsim_trace.replay.collective_pricing import chunk_sizes
from xsim_trace.replay.compile import K_SEND, CompiledWorkload
from xsim_trace.replay.p2p_keys import p2p_keys
from xsim_trace.replay.schedule_cache import ScheduleCache
from xsim_trace.replay.settings import ReplaySettings

#: events handled between two progress reports
SLICE_EVENTS = 1 << 20
#: from this many flows on (estimated), the engine runs an analytical-ca replay compiled by default:
#: below it, loading numba and the kernel (~0.4-0.6 s CPU) costs more than the Python loop
#: (~5-8 us per flow) spends
COMPILED_CA_MIN_FLOWS = 100_000
#: the same where numba is loaded already (e.g. by the columnar decoder): then only the kernel's
#: cache is loaded (~0.1 s)
COMPILED_CA_MIN_FLOWS_NUMBA_LOADED = 5_000


def kernel():
    """The numba kernel module, or None where numba is not installed."""
    try:
        from xsim_trace.replay import _ca_kernel
    except ImportError:
        return None
    return _ca_kernel


def applies(backend) -> bool:
    """The kernel reproduces this backend exactly: a fresh ``analytical-ca`` (no flow started yet)."""
    return type(backend) is AnalyticalCongestionAwareBackend and backend.flows_started == 0 and not backend._heap


def worth_it(w: CompiledWorkload, settings: ReplaySettings) -> bool:
    """Whether the kernel pays for its loading on this workload (by default)."""
    import sys  # noqa: PLC0415

    floor = COMPILED_CA_MIN_FLOWS_NUMBA_LOADED if "numba" in sys.modules else COMPILED_CA_MIN_FLOWS
    return estimated_flows(w, settings) >= floor


def estimated_flows(w: CompiledWorkload, settings: ReplaySettings) -> int:
    """A cheap guess of the flows a replay starts (a ring's 2 n (n - 1) per chunk of each collective)."""
    n_sends = int(np.count_nonzero(w.exec_kind == K_SEND))
    total = 0
    for inst in w.instances:
        n = len(inst.nodes)
        total += 2 * n * (n - 1)
    return n_sends + total * max(settings.chunks, 1)


class _Schedules:
    """Every chunk schedule of the replay, flattened: per schedule its steps; per step a table id and
    whether it reduces; per table and member position the receives it needs and its sends (peer
    position, bytes, route pair key)."""

    def __init__(self, num_ranks: int) -> None:
        self.R = num_ranks
        self.ids: dict[int, int] = {}
        self.step_ptr = [0]
        self.step_tab: list[int] = []
        self.step_reduce: list[int] = []
        self.tab_base: list[int] = []
        self.need: list[np.ndarray] = []
        self.sptr: list[np.ndarray] = []
        self.q: list[np.ndarray] = []
        self.size: list[np.ndarray] = []
        self.pair: list[np.ndarray] = []
        self.n_entries = 0
        self.n_sends = 0
        self.max_steps = 0

    def add(self, cached, members: np.ndarray) -> int:
        hit = self.ids.get(id(cached))
        if hit is not None:
            return hit
        sched = cached.schedule
        n = len(members)
        tables: dict[bytes, int] = {}
        for step in sched.steps:
            key = step.src.tobytes() + b"|" + step.dst.tobytes() + b"|" + step.size_bytes.tobytes()
            t = tables.get(key)
            if t is None:
                t = tables[key] = len(self.tab_base)
                self.tab_base.append(self.n_entries)
                order = np.argsort(step.src, kind="stable")
                src, dst = step.src[order], step.dst[order]
                counts = np.bincount(step.src, minlength=n)
                ptr = np.zeros(n, np.int64)
                np.cumsum(counts[:-1], out=ptr[1:])
                self.sptr.append(ptr + self.n_sends)
                self.need.append(np.bincount(step.dst, minlength=n).astype(np.int64))
                self.q.append(dst)
                self.size.append(step.size_bytes[order])
                self.pair.append(members[src] * self.R + members[dst])
                self.n_entries += n
                self.n_sends += len(src)
            self.step_tab.append(t)
            self.step_reduce.append(int(step.reduce))
        self.max_steps = max(self.max_steps, len(sched.steps))
        self.step_ptr.append(len(self.step_tab))
        pid = self.ids[id(cached)] = len(self.step_ptr) - 2
        return pid


def _i64(x) -> np.ndarray:
    """``x`` as a contiguous, writable int64 array: one kernel signature (one numba cache entry)
    whichever path compiled the workload."""
    a = np.ascontiguousarray(x, np.int64)
    return a if a.flags.writeable else a.copy()


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def _collectives(w: CompiledWorkload, schedules: ScheduleCache, settings: ReplaySettings):
    """Per collective instance: its member nodes, chunk count (0: it ends when it starts), chunk
    schedules and progress offsets; the flattened schedules.  None where the kernel cannot run it.
    A member node -1 is a folded member (:mod:`~xsim_trace.replay.fold_ca`): it does not run, and what
    lands at it counts for its instance's one present member (``twin``, per member entry; ``absent``,
    per instance, how many are folded)."""
    flat = _Schedules(w.num_ranks)
    n_inst = len(w.instances)
    nodes_ptr = np.zeros(n_inst + 1, np.int64)
    k_of = np.zeros(n_inst, np.int64)
    cp = np.zeros(n_inst, np.int64)
    plan_ptr = [0]
    plans: list[int] = []
    nodes: list[tuple] = []
    n_cp = 0
    flows = 0
    for x, inst in enumerate(w.instances):
        members = w.groups[inst.group]
        nodes.append(inst.nodes)
        nodes_ptr[x + 1] = nodes_ptr[x] + len(inst.nodes)
        cp[x] = n_cp
        if len(members) <= 1 or (inst.size_bytes == 0 and inst.comm_type != CollectiveType.BARRIER):
            plan_ptr.append(len(plans))
            continue
        if len(members) != len(inst.nodes):
            return None
        marr = np.asarray(members, np.int64)
        sizes = chunk_sizes(max(inst.size_bytes, 1), settings.chunks)
        for cb in sizes:
            cached = schedules.get(inst, cb)
            plans.append(flat.add(cached, marr))
            flows += cached.schedule.num_transfers
        plan_ptr.append(len(plans))
        k_of[x] = len(sizes)
        n_cp += len(sizes) * len(members)
    inst_nodes = np.fromiter((g for t in nodes for g in t), np.int64, int(nodes_ptr[-1]))
    inst = (nodes_ptr, inst_nodes, k_of, np.asarray(plan_ptr, np.int64), np.asarray(plans, np.int64), cp)
    twin, absent = _twins(nodes_ptr, inst_nodes)
    tab_base = np.asarray(flat.tab_base, np.int64)
    e_sptr = np.append(_cat(flat.sptr), flat.n_sends).astype(np.int64)
    sched = (np.asarray(flat.step_ptr, np.int64), np.asarray(flat.step_tab, np.int64),
             np.asarray(flat.step_reduce, np.int8), tab_base, _cat(flat.need), e_sptr, _cat(flat.q), _cat(flat.size))
    return inst, sched, _cat(flat.pair), n_cp, flat.max_steps, flows, twin, absent


def _twins(ptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per member entry its position, or for a folded member (node -1) its instance's first present
    member's; per instance its folded members."""
    n = np.diff(ptr)
    inst = np.repeat(np.arange(len(n), dtype=np.int64), n)
    pos = np.arange(len(nodes), dtype=np.int64) - ptr[:-1][inst]
    absent = np.bincount(inst[nodes < 0], minlength=len(n)).astype(np.int64)
    if not absent.any():
        return pos, absent
    none = np.iinfo(np.int64).max
    first = np.full(len(n), none, np.int64)
    present = np.flatnonzero(nodes >= 0)
    np.minimum.at(first, inst[present], pos[present])  # each instance's lowest present position
    first[first == none] = 0  # an instance with no present member
    return np.where(nodes >= 0, pos, first[inst]), absent


def _pack(parts: list[np.ndarray]) -> tuple[np.ndarray, tuple, list[np.ndarray]]:
    """One int64 array holding ``parts`` one after another, the offsets of each (a tuple of ints) and
    each part as a view of it (the kernel reads and writes the same memory through either)."""
    sizes = [len(x) for x in parts]
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    packed = np.concatenate([np.asarray(x, np.int64) for x in parts]) if parts else np.zeros(0, np.int64)
    views = [packed[offsets[i]:offsets[i + 1]] for i in range(len(parts))]
    return packed, tuple(np.int64(o) for o in offsets[:-1].tolist()), views


def _p2p(w: CompiledWorkload) -> tuple:
    """Matching keys (src, dst, tag) of the sends and receives, and each key's (src, dst) pair key."""
    n = w.num_nodes
    k = p2p_keys(w)
    uniq = k.triples
    q = max(len(uniq), 1)
    heads = [np.full(q, -1, np.int64) for _ in range(6)]
    size1 = np.maximum(w.comm_size, 1).astype(np.int64)
    pair = np.where(uniq[:, 0] != uniq[:, 1], uniq[:, 0] * w.num_ranks + uniq[:, 1], -1)
    return k.rank, np.where(k.is_p2p, k.peer, -1), k.key, size1, heads, np.full(n, -1, np.int64), pair


def _routes(backend, pair_keys: np.ndarray, R: int, map_route=None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The sorted distinct pair keys and the CSR of their routes (link ids).  ``map_route(src, dst,
    links)``: the links a flow src -> dst takes instead, or None where it cannot stand for one (then
    None: :mod:`~xsim_trace.replay.fold_ca`, where a folded rank's links are its representative's)."""
    uniq = np.unique(pair_keys[pair_keys >= 0])
    ptr = [0]
    links: list[int] = []
    route = backend.topology.route
    for k in uniq.tolist():
        a, b = divmod(k, R)
        got = route(a, b)
        if map_route is not None:
            got = map_route(a, b, got)
            if got is None:
                return None
        links.extend(got)
        ptr.append(len(links))
    return uniq, np.asarray(ptr, np.int64), np.asarray(links, np.int64)


def _pair_index(uniq: np.ndarray, keys: np.ndarray) -> np.ndarray:
    out = np.searchsorted(uniq, keys).astype(np.int64)
    return np.where(keys >= 0, out, -1)


def run_compiled_ca(w: CompiledWorkload, backend: AnalyticalCongestionAwareBackend, schedules: ScheduleCache,
                    settings: ReplaySettings, progress: Callable[[int], None] | None = None, *, fold: bool = False,
                    rank_class: np.ndarray | None = None):
    """``(ready, start, end, wait, peer)`` and a stats dict of the replay run by the kernel, or None
    where the kernel cannot run this workload (then the reference engine runs it).  The backend's
    counters (``flows_started``, ``events``, ``heap_ops``) are set as the reference would leave them.
    ``fold``: simulate one rank per class of equivalent ranks where that is exact
    (:mod:`~xsim_trace.replay.fold_ca`; ``stats['folded_ranks']``; the counters are then the
    simulated ranks' own), else every rank."""
    k = kernel()
    if k is None:
        return None
    if fold:
        from xsim_trace.replay import fold_ca  # noqa: PLC0415

        out = fold_ca.run_folded(w, backend, schedules, settings, rank_class)
        if out is not None:
            if progress is not None:
                progress(w.num_nodes)
            return out
    out = run_kernel(w, backend, schedules, settings, progress)
    if out is None:
        return None
    for extra in ("link_tie", "ties", "batch"):
        out[1].pop(extra)
    return out[0], dict(out[1], folded_ranks=0)


def run_kernel(w: CompiledWorkload, backend: AnalyticalCongestionAwareBackend, schedules: ScheduleCache,
               settings: ReplaySettings, progress: Callable[[int], None] | None = None, map_route=None):
    """The kernel's run of ``w`` (``map_route``: see :func:`_routes`): (times, stats), or None where the
    kernel cannot run ``w``.  ``stats`` also hold where the event order decided at a link (see
    :mod:`~xsim_trace.replay._ca_kernel`): ``link_tie``, ``ties`` (pairs of causes) and ``batch``."""
    k = kernel()
    prep = _collectives(w, schedules, settings)
    if k is None or prep is None:
        return None
    inst, sched, s_pair, n_cp, max_steps, n_coll_flows, twin, absent = prep
    rank, peer_rank, key, size1, heads, q_next, p2p_pair = _p2p(w)
    R = w.num_ranks
    routes = _routes(backend, np.concatenate([s_pair, p2p_pair]), R, map_route)
    if routes is None:
        return None
    uniq, route_ptr, route_links = routes
    s_route = _pair_index(uniq, s_pair)
    key_route = _pair_index(uniq, p2p_pair)
    if not len(key_route):
        key_route = np.full(1, -1, np.int64)
    n = w.num_nodes
    n_sends = int(np.count_nonzero(w.exec_kind == K_SEND))
    n_links = len(backend.topology.links)
    nres = max(w.num_resources, 1)
    kind = np.ascontiguousarray(w.exec_kind, np.int8)
    graph = (kind if kind.flags.writeable else kind.copy(), _i64(w.duration_ns), _i64(w.resource), None,
             _i64(w.succ_ptr), _i64(w.succ_idx))
    nl = max(n_links, 1)
    link_f = np.zeros(2 * nl, np.float64)
    link_f[:n_links] = backend._bw
    link_f[nl:nl + n_links] = backend._lat
    S, O, tables = _pack([*inst, *sched[:1], *sched[1:2], *sched[3:], s_route, route_ptr, route_links, twin])
    max_k = int(inst[2].max()) if len(inst[2]) else 0
    cap = min(n_coll_flows + n_sends + 1, 1 << 16)
    while True:
        times = (np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.int64),
                 np.full(n, -1, np.int64))
        hcap = 1 << max(4, int(4 * cap).bit_length())
        state = (np.zeros((n + 2 * n_cp + 2 * n_sends + cap + 16, 8), np.int64),  # engine heap (column 7: cause)
                 np.zeros((cap + n_links + 16, 4), np.int64),  # backend heap
                 np.zeros((cap, k.NF), np.int64), np.arange(cap, dtype=np.int64)[::-1].copy(),  # flow slots
                 np.zeros(cap, np.int64),  # landed flows of one turn
                 np.full(hcap, -1, np.int64), np.zeros((hcap, 2), np.int64),  # arrivals
                 np.zeros((2 * max_k + 8, 5), np.int64))  # frames
        resources = (np.zeros(nres, np.int8), np.full(nres, -1, np.int64), np.full(nres, -1, np.int64),
                     np.full(n, -1, np.int64))
        ncp, nm = max(n_cp, 1), max(len(inst[1]), 1)
        M, OM, prog = _pack([np.full(ncp, -1, np.int64), np.zeros(ncp, np.int64), np.zeros(ncp, np.int64),
                             np.zeros(nm, np.int64), np.zeros(nm, np.int64)])
        colls = (_i64(w.coll_instance).copy(), absent.copy(), *tables[:6])  # folded members count as arrived
        schedules_ = (*tables[6:8], sched[2], *tables[8:13])
        # per link: release in the heap, FIFO head and tail, last release's time and seq, last arrival's
        # time and cause (see _ca_kernel._brun)
        links = np.concatenate([np.zeros(nl, np.int64), np.full(3 * nl, -1, np.int64), np.zeros(nl, np.int64),
                                np.full(2 * nl, -1, np.int64)])
        batch = np.full(2 * n, -1, np.int64)
        args = (*state, *times, *graph[:3], w.indegree.astype(np.int64), *graph[4:], *resources,
                rank, peer_rank, key, size1, *heads, q_next, key_route, *colls, *schedules_, tables[13], *prog,
                np.int64(max_steps + 1), batch, links, link_f, np.int64(backend.chunk_bytes), backend.rounding == "ceil",
                S, O, M, OM)
        work = np.empty(n + 2, np.int64)
        sc = np.zeros(k.N_SCALARS + 2 * k.TIE_CAP, np.int64)
        sc[k.S_FREE] = cap
        opts = (np.int64(settings.endpoint_delay_ns), np.int64(settings.reduction_delay_ns), np.int64(settings.in_flight),
                settings.p2p == "eager")
        reported = 0
        while True:
            rc = k.run(*args, work, sc, *opts, SLICE_EVENTS)
            if rc != 1:
                break
            if progress is not None:
                progress(int(sc[k.S_FINISHED]) - reported)
                reported = int(sc[k.S_FINISHED])
        if rc != 3:
            break
        cap *= 4  # a capacity ran out: rerun from scratch with room to spare (the same result)
    if progress is not None:
        progress(int(sc[k.S_FINISHED]) - reported)
    backend.flows_started += int(sc[k.S_FLOWS])
    backend.events += int(sc[k.S_BEVENTS])
    backend.heap_ops += int(sc[k.S_BOPS])
    stats = dict(events=int(sc[k.S_EVENTS]), flows=int(sc[k.S_FLOWS]), collectives=int(sc[k.S_COLLS]),
                 closed_form_collectives=0, finished=int(sc[k.S_FINISHED]), link_tie=bool(sc[k.S_LINK_TIE]),
                 ties=sc[k.N_SCALARS:k.N_SCALARS + 2 * int(sc[k.S_NTIES])].reshape(-1, 2).copy(), batch=batch.reshape(-1, 2))
    return times, stats
