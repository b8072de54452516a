"""Symmetry folding on the pure-Python loop: the closed-form replay of a small or mid-size rank set
(no numba loaded) simulates one rank per class of equivalent ranks, as the compiled loop does.

The classes, the closedness check and the tie guard are :mod:`xsim_trace.replay.fold`'s, over the
same couplings the compiled loop builds (p2p keys and routes, every collective priced for its full
group).  The quotient is a :class:`~xsim_trace.replay.compile.CompiledWorkload` of the
representatives' nodes (every rank kept, the folded ones empty): its collectives wait for the
representatives among their members and take the full group's offsets
(:class:`QuotientPricer`), its sends and receives meet representatives only.  The Python loop runs
it over a copy of the backend (the backend a replay was given stays untouched, so a quotient that
cannot stand for the full run is replayed whole on it); every other rank then takes its
representative twin's times (:func:`~xsim_trace.replay.fold.expand`).  ``tests/test_replay_fold.py``
compares folded and unfolded Python-loop replays node by node.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import replace
from typing import Sequence

import numpy as np

from xsim_trace.replay.closed_form_tables import collective_tables, fold_of, p2p_tables
from xsim_trace.replay.compile import CollectiveInstance, CompiledWorkload
from xsim_trace.replay.fold import Fold, Quotient, quotient, sub_csr

log = logging.getLogger(__name__)


#: the Python loop folds from this many nodes on: below, finding the classes (~0.01-0.03 s: pricing every
#: collective instance, the refinement, a copy of the backend) costs about what simulating every rank does
#: (~2.5 us per event)
MIN_NODES = 20_000


class QuotientPricer:
    """Offsets of the quotient's collectives: each representative member's offset in its full group
    (priced once by the run's pricer when the couplings were built)."""

    def __init__(self, offsets: dict[tuple[int, int], list[int]]) -> None:
        self._offsets = offsets

    def offsets_ns(self, inst: CollectiveInstance, members: Sequence[int]) -> list[int]:
        return self._offsets[(inst.group, inst.seq)]


def find(w: CompiledWorkload, schedules, pricer, booked: bool, rank_class) -> tuple | None:
    """``(fold, couplings)`` of ``w`` where some rank folds, else None; couplings = the compiled loop's
    (p2p, collectives) tuples, which the tie guard reads again."""
    if w.num_ranks < 2 or w.num_nodes < MIN_NODES:
        return None
    p2p = p2p_tables(w, schedules, booked)
    colls = collective_tables(w, pricer)
    found = fold_of(w, p2p, colls, booked, rank_class)
    return None if found is None else (found, p2p, colls)


def quotient_workload(w: CompiledWorkload, fold: Fold, colls: tuple) -> tuple[CompiledWorkload, Quotient, QuotientPricer]:
    """The representatives' nodes as a workload of its own (node indices renumbered, resources and
    groups kept), and the pricer of its collectives."""
    q = quotient(w, fold)
    _, _, inst_ptr, inst_nodes, off, _ = colls
    kept = np.flatnonzero(q.index_of[inst_nodes] >= 0)  # member entries on representatives
    entry_inst = np.repeat(np.arange(len(w.instances), dtype=np.int64), np.diff(inst_ptr))[kept]
    instances, offsets = [], {}
    inst_map = np.full(max(len(w.instances), 1), -1, np.int64)
    by_inst: dict[int, tuple[list, list]] = {}
    for x, node, o in zip(entry_inst.tolist(), q.index_of[inst_nodes[kept]].tolist(), off[kept].tolist()):
        got = by_inst.get(x)
        if got is None:
            got = by_inst[x] = ([], [])
        got[0].append(node)
        got[1].append(o)
    for x, (nodes_x, off_x) in by_inst.items():  # in instance order: entries are
        inst = w.instances[x]
        inst_map[x] = len(instances)
        instances.append(CollectiveInstance(inst.group, inst.seq, inst.comm_type, inst.size_bytes, tuple(nodes_x),
                                            inst.root, inst.ring))
        offsets[(inst.group, inst.seq)] = off_x
    return restricted(w, q, tuple(instances), inst_map), q, QuotientPricer(offsets)


def restricted(w: CompiledWorkload, q: Quotient, instances: tuple, inst_map: np.ndarray) -> CompiledWorkload:
    """``w`` restricted to the quotient's nodes (renumbered; every rank kept, the folded ones empty;
    resources and groups kept) with ``instances`` as its collectives (``inst_map``: each of ``w``'s
    instances' index among them, -1 where dropped)."""
    n = q.nodes
    succ_ptr, succ_idx = sub_csr(w.succ_ptr, w.succ_idx, n, q.index_of)
    counts = np.bincount(w.node_rank[n], minlength=w.num_ranks)
    rank_ptr = np.zeros(w.num_ranks + 1, np.int64)
    np.cumsum(counts, out=rank_ptr[1:])
    ci = w.coll_instance[n].astype(np.int64)
    coll_q = np.where(ci >= 0, inst_map[np.maximum(ci, 0)], -1).astype(w.coll_instance.dtype)
    return replace(
        w, rank_ptr=rank_ptr, node_rank=w.node_rank[n], node_id=w.node_id[n], node_type=w.node_type[n],
        exec_kind=w.exec_kind[n], duration_ns=w.duration_ns[n], resource=w.resource[n], indegree=w.indegree[n],
        succ_ptr=succ_ptr, succ_idx=succ_idx.astype(w.succ_idx.dtype), comm_size=w.comm_size[n],
        comm_type=w.comm_type[n], comm_peer=w.comm_peer[n], comm_tag=w.comm_tag[n], comm_kind=w.comm_kind[n],
        coll_instance=coll_q, names=(), instances=instances,
    )


def backend_copy(backend):
    """A deep copy of ``backend`` (its bookings, clock and counters its own); None where it cannot be
    copied (then nothing is folded)."""
    try:
        return copy.deepcopy(backend)
    except Exception as exc:  # noqa: BLE001 - a backend holding what cannot be copied (a process, a socket)
        log.debug("fold: the backend cannot be copied (%s): replaying every rank", exc)
        return None
