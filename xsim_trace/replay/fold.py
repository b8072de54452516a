"""Symmetry folding of the compiled replay: ranks that would replay identically are simulated once.

Two ranks are *equivalent* when their node columns agree on everything that times a node (kind,
type, duration, sizes, collective type, tag, kind of traffic, rank-local resources and
dependencies), they sit in the same device class, and every peer they meet is equivalent in turn:
a send/recv's peer is of the same class over a route of the same latency, bandwidth and port
speeds (or the same transfer times), and a collective's members have the same classes at the same
node positions with the same priced offsets.  The classes come from a colour refinement over those
couplings (64-bit mixing hashes; the first, per-rank step is also compared array for array).

One rank per class (its lowest) is simulated: the *quotient* holds the representatives' nodes
only, collectives are priced for their full groups (the offsets come from the full workload) and
wait for the representatives among their members.  The quotient is only used when it is closed:
every representative's send/recv peer is a representative, every member of a collective a
representative is in has its class's representative in that same collective at the same node
position, and (on a backend that books endpoint ports) no port the representatives' flows book is
booked by any other flow.  Then every rank's times are its representative's, node for node
(``tests/test_replay_fold.py`` replays folded and unfolded and compares every node).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from xsim_trace.replay.compile import K_RECV, K_SEND, CompiledWorkload
from xsim_trace.replay.distinct import distinct_rows, sorted_distinct

log = logging.getLogger(__name__)

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
#: refinement rounds at most (each splits classes or ends it)
MAX_ROUNDS = 16


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise on uint64 (wrapping arithmetic)."""
    x = np.asarray(x).astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= _M1
        x ^= x >> np.uint64(27)
        x *= _M2
        x ^= x >> np.uint64(31)
    return x


def combine(*cols: np.ndarray) -> np.ndarray:
    """One uint64 per row of the columns (order-sensitive)."""
    h = np.zeros(len(cols[0]), np.uint64)
    with np.errstate(over="ignore"):
        for c in cols:
            h = mix(h * _GOLD + np.asarray(c).astype(np.int64).view(np.uint64))
    return h


def segment_sum(values: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Sum (wrapping uint64) of ``values[ptr[i]:ptr[i+1]]`` per segment, 0 for empty ones."""
    cs = np.zeros(len(values) + 1, np.uint64)
    with np.errstate(over="ignore"):
        np.cumsum(values, out=cs[1:])
        return cs[ptr[1:]] - cs[ptr[:-1]]


@dataclass(frozen=True, slots=True)
class Fold:
    """Which rank is simulated for which: ``rep_of[r]`` (``r`` itself for a representative)."""

    rep_of: np.ndarray  # int64 per rank

    @property
    def reps(self) -> np.ndarray:
        return np.flatnonzero(self.rep_of == np.arange(len(self.rep_of)))

    @property
    def folded_ranks(self) -> int:
        """Ranks not simulated (their times are their representative's)."""
        return int(len(self.rep_of) - len(self.reps))


@dataclass(frozen=True, slots=True)
class Couplings:
    """What ties ranks together in a compiled replay, per node / per collective member entry."""

    p2p_key: np.ndarray  # int64 per node: p2p key (src, dst, tag) index, -1 if none
    key_sig: np.ndarray  # uint64 per p2p key: its route / transfer times
    key_ports: tuple[np.ndarray, np.ndarray] | None  # (ptr, ports) per key on a port-booking backend
    inst_ptr: np.ndarray  # int64 [X+1]
    inst_nodes: np.ndarray  # int64 per member entry
    inst_off: np.ndarray  # int64 per member entry: priced offset (end - start)


def _local(w: CompiledWorkload) -> tuple[np.ndarray, np.ndarray]:
    """(node position within its rank, rank's first node) per node."""
    base = w.rank_ptr[:-1][w.node_rank]
    return np.arange(w.num_nodes, dtype=np.int64) - base, base


def _node_columns(w: CompiledWorkload) -> list[np.ndarray]:
    """Per node, the columns that time it, in rank-local terms (resources, successors)."""
    res_base = np.searchsorted(w.resource_rank, np.arange(w.num_ranks))
    local_res = w.resource.astype(np.int64) - res_base[w.node_rank]
    deg = np.diff(w.succ_ptr)
    edge_owner = np.repeat(np.arange(w.num_nodes, dtype=np.int64), deg)
    edge_local = w.succ_idx.astype(np.int64) - w.rank_ptr[:-1][w.node_rank[edge_owner]] if len(edge_owner) else edge_owner
    edge_pos = np.arange(len(edge_owner), dtype=np.int64) - w.succ_ptr[:-1][edge_owner]
    succ_h = segment_sum(combine(edge_local, edge_pos), w.succ_ptr)
    return [w.exec_kind, w.node_type, w.duration_ns, w.comm_size, w.comm_type, _tag_roles(w), w.comm_kind,
            local_res, w.resource_role[w.resource], deg, succ_h.view(np.int64)]


def _tag_roles(w: CompiledWorkload) -> np.ndarray:
    """A send/recv's tag as the rank-local position of the first send/recv the rank matches on the
    same (peer, direction, tag): which of its transfers share a queue, not the tag's value; 0 for
    other nodes (their tag times nothing)."""
    out = np.zeros(w.num_nodes, np.int64)
    idx = np.flatnonzero((w.exec_kind == K_SEND) | (w.exec_kind == K_RECV))
    if len(idx):
        keys = np.stack([w.node_rank[idx].astype(np.int64), w.comm_peer[idx].astype(np.int64),
                         w.exec_kind[idx].astype(np.int64), w.comm_tag[idx]], 1)
        uniq, inv = distinct_rows(keys)
        first = np.full(len(uniq), len(keys), np.int64)
        np.minimum.at(first, inv, np.arange(len(keys), dtype=np.int64))  # each key's first row
        out[idx] = idx[first][inv] - w.rank_ptr[:-1][w.node_rank[idx]] + 1
    return out


def _rank_hash(w: CompiledWorkload, node_h: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return segment_sum(mix(node_h ^ mix(pos)), w.rank_ptr)


def _labels(*keys: np.ndarray) -> np.ndarray:
    """Dense class labels of the rows of ``keys`` (equal rows, equal label)."""
    stacked = np.stack([np.asarray(k).astype(np.int64) for k in keys], 1)
    return distinct_rows(stacked)[1]


def _first_of(labels: np.ndarray) -> np.ndarray:
    """Per row, the lowest row with its label."""
    first = np.full(int(labels.max()) + 1 if len(labels) else 0, len(labels), np.int64)
    np.minimum.at(first, labels, np.arange(len(labels), dtype=np.int64))
    return first[labels]


def _split_mismatches(w: CompiledWorkload, cols: list[np.ndarray], cls: np.ndarray) -> np.ndarray:
    """Exact check of the hashed first step: a rank whose columns differ from its class's first
    rank's in any node gets a class of its own."""
    rep = _first_of(cls)
    pos, _ = _local(w)
    counts = np.diff(w.rank_ptr)
    same_len = counts == counts[rep]
    ok_node = same_len[w.node_rank]
    twin = np.where(ok_node, w.rank_ptr[:-1][rep[w.node_rank]] + pos, 0)
    twin = np.minimum(twin, max(w.num_nodes - 1, 0))
    diff = ~ok_node
    for c in cols[:-1]:  # the successor hash is checked edge by edge below
        diff |= np.asarray(c)[twin] != np.asarray(c)
    if len(w.succ_idx):  # a node whose out-degree differs is flagged above; its edges compare garbage
        edge_owner = np.repeat(np.arange(w.num_nodes, dtype=np.int64), cols[9])
        twin_edge = w.succ_ptr[:-1][twin[edge_owner]] + (np.arange(len(edge_owner)) - w.succ_ptr[:-1][edge_owner])
        twin_edge = np.minimum(twin_edge, len(w.succ_idx) - 1)
        mine = w.succ_idx.astype(np.int64) - w.rank_ptr[:-1][w.node_rank[edge_owner]]
        theirs = w.succ_idx[twin_edge].astype(np.int64) - w.rank_ptr[:-1][w.node_rank[twin[edge_owner]]]
        np.logical_or.at(diff, edge_owner[mine != theirs], True)
    bad_rank = np.zeros(w.num_ranks, bool)
    np.logical_or.at(bad_rank, w.node_rank[diff], True)
    bad_rank |= ~same_len
    if not bad_rank.any():
        return cls
    return np.where(bad_rank, cls.max() + 1 + np.arange(w.num_ranks), cls)


def _coupling_hash(w: CompiledWorkload, c: Couplings, cls: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Per node, what it meets under the current classes: a p2p peer's class and route, a
    collective's members (class, node position, offset) and its own offset."""
    h = np.zeros(w.num_nodes, np.uint64)
    p2p = np.flatnonzero(c.p2p_key >= 0)
    if len(p2p):
        h[p2p] = combine(cls[w.comm_peer[p2p]], c.key_sig[c.p2p_key[p2p]].view(np.int64), np.full(len(p2p), 1))
    if len(c.inst_nodes):
        m = c.inst_nodes
        member = combine(cls[w.node_rank[m]], pos[m], c.inst_off)
        inst_h = segment_sum(member, c.inst_ptr) ^ mix(np.diff(c.inst_ptr))
        inst_of_entry = np.repeat(np.arange(len(c.inst_ptr) - 1, dtype=np.int64), np.diff(c.inst_ptr))
        h[m] = combine(inst_h[inst_of_entry].view(np.int64), c.inst_off, np.full(len(m), 2))
    return h


def find_fold(w: CompiledWorkload, c: Couplings, rank_class: np.ndarray | None = None) -> Fold | None:
    """The fold of ``w``, or None when no rank can be folded (or the quotient would not be closed)."""
    if w.num_ranks < 2:
        return None
    pos, _ = _local(w)
    cols = _node_columns(w)
    first = _rank_hash(w, combine(*cols), pos)
    extra = np.zeros(w.num_ranks, np.int64) if rank_class is None else np.asarray(rank_class, np.int64)
    cls = _labels(first.view(np.int64), extra, np.diff(w.rank_ptr))
    cls = _labels(_split_mismatches(w, cols, cls))
    for _ in range(MAX_ROUNDS):
        n_cls = int(cls.max()) + 1
        if n_cls == w.num_ranks:
            return None
        step = _rank_hash(w, _coupling_hash(w, c, cls, pos), pos)
        new = _labels(cls, step.view(np.int64))
        if int(new.max()) + 1 == n_cls:
            break
        cls = new
    else:
        log.debug("fold: refinement did not settle in %d rounds", MAX_ROUNDS)
        return None
    fold = Fold(rep_of=_first_of(cls))
    why = _not_closed(w, c, fold, pos)
    if why:
        log.debug("fold: not folding (%s)", why)
        return None
    return fold


def _not_closed(w: CompiledWorkload, c: Couplings, fold: Fold, pos: np.ndarray) -> str | None:
    rep_of = fold.rep_of
    is_rep = rep_of == np.arange(w.num_ranks)
    in_q = is_rep[w.node_rank]
    p2p = np.flatnonzero(in_q & (c.p2p_key >= 0))
    if len(p2p) and not is_rep[w.comm_peer[p2p]].all():
        return "a representative's send/recv peer is folded"
    if len(c.inst_nodes):
        n_inst = len(c.inst_ptr) - 1
        inst_of_entry = np.repeat(np.arange(n_inst, dtype=np.int64), np.diff(c.inst_ptr))
        has_rep = np.zeros(n_inst, bool)
        np.logical_or.at(has_rep, inst_of_entry, in_q[c.inst_nodes])
        sel = has_rep[inst_of_entry]
        m = c.inst_nodes[sel]
        twin = w.rank_ptr[:-1][rep_of[w.node_rank[m]]] + pos[m]
        entry_of = np.full(w.num_nodes, -1, np.int64)
        entry_of[c.inst_nodes] = np.arange(len(c.inst_nodes))
        te = entry_of[twin]
        if np.any(te < 0) or np.any(inst_of_entry[te] != inst_of_entry[sel]):
            return "a collective's member class has no representative in it"
        if np.any(c.inst_off[te] != c.inst_off[sel]):
            return "members of one class get different offsets"
    if c.key_ports is not None and len(c.key_ports[1]):
        kptr, kports = c.key_ports
        n_keys = len(kptr) - 1
        key_in_q = np.zeros(n_keys, bool)
        key_in_q[c.p2p_key[p2p]] = True
        owner = np.repeat(np.arange(n_keys), np.diff(kptr))
        q_ports = sorted_distinct(kports[key_in_q[owner]])
        other = sorted_distinct(kports[~key_in_q[owner]])
        at = np.minimum(np.searchsorted(other, q_ports), max(len(other) - 1, 0))
        if len(other) and np.any(other[at] == q_ports):  # (np.intersect1d would import numpy.ma)
            return "a port the representatives book is booked by folded ranks' flows too"
    return None


@dataclass(frozen=True, slots=True)
class Quotient:
    """The representatives' part of a workload: ``nodes`` are its nodes' indices in the full one."""

    nodes: np.ndarray  # int64, ascending
    index_of: np.ndarray  # int64 per full node: its quotient index, -1 if folded


def quotient(w: CompiledWorkload, fold: Fold) -> Quotient:
    is_rep = fold.rep_of == np.arange(w.num_ranks)
    nodes = np.flatnonzero(is_rep[w.node_rank]).astype(np.int64)
    index_of = np.full(w.num_nodes, -1, np.int64)
    index_of[nodes] = np.arange(len(nodes))
    return Quotient(nodes, index_of)


def sub_csr(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray, remap: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``rows`` of a CSR, values mapped through ``remap`` (when given)."""
    deg = (ptr[rows + 1] - ptr[rows]).astype(np.int64)
    out_ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(deg, out=out_ptr[1:])
    take = np.repeat(ptr[rows] - out_ptr[:-1], deg) + np.arange(int(out_ptr[-1]), dtype=np.int64)
    vals = idx[take]
    return out_ptr, (remap[vals] if remap is not None else vals)


def expand(w: CompiledWorkload, fold: Fold, q: Quotient, times: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Full-workload (ready, start, end, wait, peer) from the quotient's: each node takes its
    representative twin's times; a send/recv's peer is the twin's peer position on its own peer rank."""
    pos, _ = _local(w)
    twin = q.index_of[w.rank_ptr[:-1][fold.rep_of[w.node_rank]] + pos]
    ready, start, end, wait, peer_q = times
    out = [a[twin] for a in (ready, start, end, wait)]
    peer_full = np.full(w.num_nodes, -1, np.int64)
    pq = peer_q[twin]
    has = pq >= 0
    if has.any():
        pn = q.nodes[pq[has]]
        peer_pos = pn - w.rank_ptr[:-1][w.node_rank[pn]]
        peer_full[has] = w.rank_ptr[:-1][w.comm_peer[has]] + peer_pos
    return (*out, peer_full)


def order_decided_tie(w: CompiledWorkload, q: Quotient, ready: np.ndarray, start: np.ndarray, end: np.ndarray,
                      p2p_key: np.ndarray, flow_ports: tuple[np.ndarray, np.ndarray] | None = None,
                      flow_start: np.ndarray | None = None) -> str | None:
    """Whether the quotient's run broke a tie by the global event order (which, with fewer ranks,
    may differ from the full run's), on the representatives' nodes (full-workload indices and
    times).  None when every order-dependent choice was decided by times and rank-local facts:

    - nodes that wait for one resource and became ready at one instant were woken by one node, or
      by timed nodes that started at different times (their end events are ordered by that);
    - no two sends (or receives) on one (src, dst, tag) queue started at one instant;
    - on a port-booking backend, no two flows of the representatives booked one port at one instant
      (``flow_ports``: (ptr, ports) per p2p key; ``flow_start``: per send node, when its flow
      started, -1 if none)."""
    nodes = q.nodes
    ptr, succ = sub_csr(w.succ_ptr, w.succ_idx, nodes, None)
    src = np.repeat(nodes, np.diff(ptr))
    dst = succ.astype(np.int64)
    hit = end[src] == ready[dst]
    n_trig = np.bincount(dst[hit], minlength=w.num_nodes)
    trig = np.full(w.num_nodes, -1, np.int64)
    trig[dst[hit]] = src[hit]
    res = w.resource[nodes].astype(np.int64)
    uniq, inv = distinct_rows(np.stack([res, ready[nodes]], 1))
    cnt = np.bincount(inv, minlength=len(uniq))
    waits = np.zeros(len(cnt), bool)
    np.logical_or.at(waits, inv, start[nodes] > ready[nodes])
    tied = (cnt[inv] > 1) & waits[inv]
    if tied.any():
        m = nodes[tied]
        seeded = (w.indegree[m] == 0) & (ready[m] == 0)
        if np.any((n_trig[m] != 1) & ~seeded):
            return "a node woken by several ends at one instant waited in a tie"
        t = np.where(seeded, -2, trig[m])
        pair = distinct_rows(np.stack([inv[tied], t], 1))[0]
        shared = pair[:, 1] >= 0
        groups, trigs = pair[shared, 0], pair[shared, 1]
        if len(trigs) and np.any(w.exec_kind[trigs] != 0):
            many = np.bincount(groups, minlength=len(cnt)) > 1
            if np.any(many[groups] & (w.exec_kind[trigs] != 0)):
                return "waiting nodes woken at one instant by a collective or a transfer"
        if len(trigs):
            key = np.stack([groups, start[trigs]], 1)
            if len(distinct_rows(key)[0]) != len(key):
                return "waiting nodes woken by timed nodes that started at one instant"
    p2p = nodes[p2p_key[nodes] >= 0]
    if len(p2p):
        key = np.stack([p2p_key[p2p], w.exec_kind[p2p].astype(np.int64), start[p2p]], 1)
        if len(distinct_rows(key)[0]) != len(key):
            return "two transfers on one (src, dst, tag) queue started at one instant"
    if flow_ports is not None and flow_start is not None:
        sends = p2p[(w.exec_kind[p2p] == 1) & (flow_start[p2p] >= 0)]
        if len(sends):
            kptr, kports = flow_ports
            k = p2p_key[sends]
            n_ports = kptr[k + 1] - kptr[k]
            owner = np.repeat(np.arange(len(sends)), n_ports)
            port = kports[np.repeat(kptr[k] - np.concatenate([[0], np.cumsum(n_ports)[:-1]]), n_ports)
                          + np.arange(int(n_ports.sum()))]
            key = np.stack([port, flow_start[sends][owner]], 1)
            if len(distinct_rows(key)[0]) != len(key):
                return "two flows booked one port at one instant"
    return None
