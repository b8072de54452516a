"""Symmetry folding on the compiled ``analytical-ca`` loop: collectives run flow by flow over the
congestion-aware link model, one rank per class of equivalent ranks simulated.

The classes are :mod:`xsim_trace.replay.fold`'s colour refinement, over what couples ranks on this
path: a send/recv's peer class and route (each hop's bandwidth and latency), a collective's members
(class, node position).  The quotient keeps the representatives' nodes; a collective instance that
holds a representative keeps every member position, the folded ones without a node (-1).  In the
kernel (:mod:`xsim_trace.replay._ca_kernel`) the folded members do not run, and a flow that lands at
one counts for its *twin*, the instance's representative.  Each flow runs over the links of its
sender (a representative) and, for a folded receiver, the links of the receiver's representative
(``map_route``): the image, under the symmetry, of the flow that reaches the representative in the
full run.  So every link of the quotient carries what the representative's link carries in the
full run, flow for flow, as long as the full run treats equivalent ranks alike.

That holds (and the quotient is used) only where all of this is true, checked before or after the
quotient's run; otherwise every rank is replayed:

- closed classes (:func:`~xsim_trace.replay.fold.find_fold`): every representative's send/recv
  peer is a representative; every member of a collective a representative is in has its class's
  representative in that collective at the same node position;
- an instance with folded members has exactly one member present (all its members are of one
  class), and every step of its chunk schedules is a permutation of the members moving one size:
  each member sends one transfer and receives one, all of the same bytes (a ring's steps), so the
  one transfer the representative sends stands for the one it receives;
- every link that touches a folded rank has its representative's twin (the same other end,
  bandwidth and latency), and every link a quotient flow takes touches its sender or its receiver
  and no other rank: a single switch or an NVSwitch node qualifies; a fabric link shared between
  nodes does not (flows of other classes would meet on it differently);
- the event order decided nothing that the full run could decide otherwise (the quotient numbers
  its events differently): no flow reached a link at the instant of the link's release or of a
  later hop's arrival there (the kernel's ``S_LINK_TIE``); where two flows' first hops reached a
  sender's link at one instant, the full run starts them in the quotient's order
  (:func:`ties_carry_over`); and the node-level guard
  (:func:`~xsim_trace.replay.fold.order_decided_tie`) finds no tie decided by the event order.

``tests/test_replay_fold_ca.py`` replays folded and unfolded (the compiled kernel and the pure-Python
engine over the Python backend, the reference) and compares every node's ready/start/end/wait/peer.
"""

from __future__ import annotations

import logging

import numpy as np

from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.replay.collective_pricing import chunk_sizes
from xsim_trace.replay.compile import CollectiveInstance, CompiledWorkload
from xsim_trace.replay.fold import Couplings, Fold, expand, find_fold, order_decided_tie, quotient
from xsim_trace.replay.fold_loop import restricted
from xsim_trace.replay.p2p_keys import p2p_keys
from xsim_trace.replay.schedule_cache import ScheduleCache
from xsim_trace.replay.settings import ReplaySettings

log = logging.getLogger(__name__)


def run_folded(w: CompiledWorkload, backend, schedules: ScheduleCache, settings: ReplaySettings, rank_class=None):
    """``(times, stats)`` of the folded replay (``stats['folded_ranks']``, ``stats['rep_of']``), or
    None where no rank folds or the fold would not be exact (see the module docstring)."""
    from xsim_trace.replay.compiled_ca import run_kernel  # noqa: PLC0415

    if w.num_ranks < 2:
        return None
    keys = p2p_keys(w)
    fold = classes(w, backend, keys, rank_class)
    if fold is None:
        return None
    q = quotient(w, fold)
    wq = quotient_workload(w, q)
    routes = RouteMap(backend.topology, fold.rep_of)
    why = routes.asymmetric() or uneven_instances(wq, fold, schedules, settings)
    if why is None:
        saved = (backend.flows_started, backend.events, backend.heap_ops)
        out = run_kernel(wq, backend, schedules, settings, None, routes)
        if out is None:
            why = "a flow's route is not its ranks' own links (or the kernel cannot run the quotient)"
        else:
            tq, stats = out
            why, times = _after(w, fold, q, tq, stats, keys.key)
        if why is not None:
            backend.flows_started, backend.events, backend.heap_ops = saved
    if why is not None:
        log.debug("fold (analytical-ca): replaying every rank (%s)", why)
        return None
    stats.pop("link_tie")
    stats.pop("ties", None)
    stats.pop("batch", None)
    stats["finished"] = w.num_nodes
    return times, dict(stats, folded_ranks=fold.folded_ranks, rep_of=fold.rep_of)


def _after(w: CompiledWorkload, fold: Fold, q, tq: tuple, stats: dict, p2p_key: np.ndarray) -> tuple[str | None, tuple]:
    """``(why, times)``: why the quotient's run cannot stand for the full one (None where it can),
    and the full run's times expanded from it (empty where it cannot)."""
    if stats["finished"] != len(q.nodes):
        return "the quotient did not finish", ()
    if stats["link_tie"]:
        return "a flow reached a link at the instant of another arrival or of its release", ()
    if not ties_carry_over(stats.pop("ties"), stats.pop("batch")):
        return "two flows left a rank at one instant in an order the full run may not keep", ()
    times = expand(w, fold, q, tq)
    ready, start, end, _, _ = times
    return order_decided_tie(w, q, ready, start, end, p2p_key), times


def ties_carry_over(ties: np.ndarray, batch: np.ndarray) -> bool:
    """Whether the full run starts each pair of flows whose first hops reached their sender's link
    at one instant in the quotient's order (``ties``: (earlier, later) causes, each the node whose
    start sent the flow, ``-2 - node`` where that node is a collective member whose start drive sent
    it; ``batch``: per node the batch of node starts it began in and its place there).

    The two pushes happen in the order of the rank's own node starts when both nodes started in one
    batch (one wake-up of the rank: a rank-local order) and the earlier flow came from a node's own
    start (a send): the later one then came from a later node's start, or from the drive of a
    collective, which runs when its last member starts, never before this member did.  A collective
    member's flows among themselves keep the order of its one drive.  Anything else (a flow from a
    collective's drive first, another batch) may be ordered differently by the full run's numbering."""
    for a, b in ties.tolist():
        na, nb = (a if a >= 0 else -2 - a), (b if b >= 0 else -2 - b)
        if batch[na, 0] < 0 or batch[na, 0] != batch[nb, 0]:
            return False
        if a < 0:  # the earlier from a collective's drive: only the same member's drive keeps it first
            if not (b < 0 and na == nb):
                return False
        elif not batch[na, 1] < batch[nb, 1]:
            return False
    return True


def classes(w: CompiledWorkload, backend, keys, rank_class=None) -> Fold | None:
    """The fold of ``w`` on this path: p2p keys signed by their route's hops (bandwidth, latency),
    collective members by class and node position (no offsets: the flows time them)."""
    topo = backend.topology
    bw, lat = np.asarray(topo.bw_Bpns, np.float64), np.asarray(topo.latency, np.float64)
    ids: dict[tuple, int] = {}
    of_pair: dict[tuple[int, int], int] = {}
    sig = []
    for src, dst, _ in keys.triples.tolist():
        got = of_pair.get((src, dst))
        if got is None:
            links = list(topo.route(src, dst))
            got = of_pair[(src, dst)] = ids.setdefault((tuple(bw[links].tolist()), tuple(lat[links].tolist())), len(ids))
        sig.append(got)
    n_inst = len(w.instances)
    ptr = np.zeros(n_inst + 1, np.int64)
    np.cumsum([len(x.nodes) for x in w.instances], out=ptr[1:])
    nodes = np.fromiter((g for x in w.instances for g in x.nodes), np.int64, int(ptr[-1]))
    c = Couplings(p2p_key=keys.key, key_sig=np.asarray(sig, np.int64).view(np.uint64), key_ports=None,
                  inst_ptr=ptr, inst_nodes=nodes, inst_off=np.zeros(len(nodes), np.int64))
    return find_fold(w, c, rank_class)


def quotient_workload(w: CompiledWorkload, q) -> CompiledWorkload:
    """The representatives' nodes; each instance that holds one keeps every member position, a folded
    member's node -1."""
    instances, inst_map = [], np.full(max(len(w.instances), 1), -1, np.int64)
    for x, inst in enumerate(w.instances):
        at = q.index_of[np.asarray(inst.nodes, np.int64)]
        if not np.any(at >= 0):
            continue
        inst_map[x] = len(instances)
        instances.append(CollectiveInstance(inst.group, inst.seq, inst.comm_type, inst.size_bytes, tuple(at.tolist()),
                                            inst.root, inst.ring))
    return restricted(w, q, tuple(instances), inst_map)


def uneven_instances(wq: CompiledWorkload, fold: Fold, schedules: ScheduleCache, settings: ReplaySettings) -> str | None:
    """Why some instance with folded members cannot be run by its one present member, or None."""
    seen: dict[int, bool] = {}
    for inst in wq.instances:
        nodes = np.asarray(inst.nodes, np.int64)
        absent = int(np.count_nonzero(nodes < 0))
        if not absent:
            continue
        if len(nodes) - absent != 1:
            return "a collective holds folded members and more than one representative"
        if inst.size_bytes == 0 and inst.comm_type != CollectiveType.BARRIER:
            continue
        for cb in chunk_sizes(max(inst.size_bytes, 1), settings.chunks):
            cached = schedules.get(inst, cb)
            ok = seen.get(id(cached))
            if ok is None:
                ok = seen[id(cached)] = _one_to_one(cached.schedule, len(nodes))
            if not ok:
                return "a step of a collective with folded members is not one transfer of one size per member"
    return None


def _one_to_one(schedule, n: int) -> bool:
    """Every step: each of the ``n`` members sends one transfer and receives one, all of one size."""
    for step in schedule.steps:
        if len(step.src) != n or np.any(np.bincount(step.src, minlength=n) != 1):
            return False
        if np.any(np.bincount(step.dst, minlength=n) != 1):
            return False
        if np.any(step.size_bytes != step.size_bytes[0]):
            return False
    return True


class RouteMap:
    """``map_route`` of :func:`~xsim_trace.replay.compiled_ca.run_kernel`: a quotient flow's links,
    a folded receiver's replaced by its representative's twin links; None where a link touches
    neither end of the flow, another rank, or has no twin of the same bandwidth and latency."""

    def __init__(self, topology, rep_of: np.ndarray) -> None:
        self.rep_of = rep_of
        self.n = int(topology.num_ranks)
        self.links = topology.links
        self.by_ends = {(ln.src, ln.dst): i for i, ln in enumerate(topology.links)}
        self.bw = np.asarray(topology.bw_Bpns, np.float64)
        self.lat = np.asarray(topology.latency, np.float64)

    def asymmetric(self) -> str | None:
        """Why some folded rank's links are not its representative's (a link of another speed, one
        without a twin), or None."""
        for lid, ln in enumerate(self.links):
            a, b = self._rank(ln.src), self._rank(ln.dst)
            ends = (ln.src if a is None else int(self.rep_of[a]), ln.dst if b is None else int(self.rep_of[b]))
            if ends == (ln.src, ln.dst):
                continue
            if self._twin(lid, ends) is None:
                return "a folded rank's link differs from its representative's"
        return None

    def _twin(self, lid: int, ends: tuple) -> int | None:
        """The link between ``ends`` when it has link ``lid``'s bandwidth and latency, else None."""
        twin = self.by_ends.get(ends)
        if twin is None or self.bw[twin] != self.bw[lid] or self.lat[twin] != self.lat[lid]:
            return None
        return twin

    def _rank(self, v) -> int | None:
        return int(v) if isinstance(v, (int, np.integer)) and 0 <= int(v) < self.n else None

    def __call__(self, src: int, dst: int, links) -> list[int] | None:
        out = []
        rep = int(self.rep_of[dst])
        for lid in links:
            ln = self.links[lid]
            a, b = self._rank(ln.src), self._rank(ln.dst)
            if a is not None and a != src or b is not None and b != dst:
                return None  # another rank's link (a route through a GPU)
            if a is None and b is None:
                return None  # a fabric link, shared with other ranks' flows
            if b == dst and rep != dst:
                twin = self._twin(lid, (ln.src, rep))
                if twin is None:
                    return None
                lid = twin
            out.append(int(lid))
        return out
