"""Replay results as frozen dataclasses, and the per-rank / per-device-group breakdown.

Each rank's iteration (time 0 to its last node's end) is split into disjoint parts by priority:
compute (any device compute node running) > exposed communication by kind (a comm node moving
data, nothing computing) > straggler wait (a collective member waiting for its last peer) >
p2p wait (a send/recv waiting for its peer: the pipeline bubble of a pipeline-parallel rank) >
host (only CPU ops running) > idle.  Overlapping comms of different kinds go to the first kind in
``COMM_KINDS`` order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from xsim_trace.replay.compile import COMM_KINDS, K_COLL, K_TIMED, ROLE_CPU, CompiledWorkload
from xsim_trace.replay.distinct import sorted_distinct
from xsim_trace.replay.engine import EngineStats, RawTimes
from xsim_trace.replay.settings import ReplaySettings


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where one rank's (or a group's mean rank's) iteration went, ns."""

    iteration_ns: int
    compute_ns: int
    exposed_comm_ns: tuple[tuple[str, int], ...]  # (kind, ns) in COMM_KINDS order
    straggler_wait_ns: int
    p2p_wait_ns: int  # send/recv waiting for the peer (pipeline bubble)
    host_ns: int
    idle_ns: int

    @property
    def exposed_comm_total_ns(self) -> int:
        return sum(v for _, v in self.exposed_comm_ns)

    def exposed(self, kind: str) -> int:
        return dict(self.exposed_comm_ns).get(kind, 0)


@dataclass(frozen=True, slots=True)
class RankResult:
    rank: int
    group: str
    breakdown: Breakdown
    comm_busy_ns: int  # time any comm node of the rank was active (overlapped or not)


@dataclass(frozen=True, slots=True)
class GroupResult:
    """Per device group: iteration = slowest member; the breakdown is the members' mean."""

    name: str
    ranks: tuple[int, ...]
    iteration_ns: int
    mean: Breakdown


@dataclass(frozen=True, slots=True)
class ReplayResult:
    iteration_ns: int
    ranks: tuple[RankResult, ...]
    groups: tuple[GroupResult, ...]
    backend: str
    settings: ReplaySettings
    stats: EngineStats
    workload: CompiledWorkload = field(repr=False)
    times: RawTimes = field(repr=False)

    def rank_iteration_ns(self) -> list[int]:
        return [r.breakdown.iteration_ns for r in self.ranks]


_N_KINDS = len(COMM_KINDS)


def _coverage(bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Boolean per elementary segment: covered by at least one [start, end)."""
    diff = np.zeros(len(bounds), np.int64)
    keep = ends > starts
    if np.any(keep):
        np.add.at(diff, np.searchsorted(bounds, starts[keep]), 1)
        np.add.at(diff, np.searchsorted(bounds, ends[keep]), -1)
    return np.cumsum(diff)[:-1] > 0


def rank_breakdown(w: CompiledWorkload, t: RawTimes, rank: int) -> tuple[Breakdown, int]:
    lo, hi = int(w.rank_ptr[rank]), int(w.rank_ptr[rank + 1])
    start, end, wait = t.start_ns[lo:hi], t.end_ns[lo:hi], t.wait_ns[lo:hi]
    iteration = int(end.max()) if hi > lo else 0
    if hi == lo or iteration == 0:
        return Breakdown(iteration, 0, tuple((k, 0) for k in COMM_KINDS), 0, 0, 0, iteration), 0
    kind = w.exec_kind[lo:hi]
    role = w.resource_role[w.resource[lo:hi]]
    is_comm = kind != K_TIMED
    is_cpu = (role == ROLE_CPU) & ~is_comm
    is_comp = ~is_cpu & ~is_comm
    move_start = np.where(is_comm, start + np.minimum(wait, end - start), start)
    bounds = sorted_distinct(np.concatenate([[0, iteration], start, end, move_start]))
    seg = np.diff(bounds)
    comp = _coverage(bounds, start[is_comp], end[is_comp])
    left = ~comp
    comm_kind = w.comm_kind[lo:hi]
    exposed = []
    any_comm = np.zeros(len(seg), bool)
    for k in range(_N_KINDS):
        sel = is_comm & (comm_kind == k)
        cov = _coverage(bounds, move_start[sel], end[sel]) if np.any(sel) else np.zeros(len(seg), bool)
        any_comm |= cov
        mine = cov & left
        exposed.append((COMM_KINDS[k], int(seg[mine].sum())))
        left &= ~mine
    coll = kind == K_COLL
    waiting = _coverage(bounds, start[coll], move_start[coll]) & left
    left &= ~waiting
    p2p = is_comm & ~coll
    p2p_wait = _coverage(bounds, start[p2p], move_start[p2p]) & left
    left &= ~p2p_wait
    host = _coverage(bounds, start[is_cpu], end[is_cpu]) & left
    left &= ~host
    comm_busy = any_comm | _coverage(bounds, start[is_comm], move_start[is_comm])
    return (
        Breakdown(
            iteration_ns=iteration,
            compute_ns=int(seg[comp].sum()),
            exposed_comm_ns=tuple(exposed),
            straggler_wait_ns=int(seg[waiting].sum()),
            p2p_wait_ns=int(seg[p2p_wait].sum()),
            host_ns=int(seg[host].sum()),
            idle_ns=int(seg[left].sum()),
        ),
        int(seg[comm_busy].sum()),
    )


def mean_breakdown(items: Sequence[Breakdown]) -> Breakdown:
    n = max(len(items), 1)

    def avg(values) -> int:
        return int(round(sum(values) / n))

    return Breakdown(
        iteration_ns=avg(b.iteration_ns for b in items),
        compute_ns=avg(b.compute_ns for b in items),
        exposed_comm_ns=tuple((k, avg(b.exposed(k) for b in items)) for k in COMM_KINDS),
        straggler_wait_ns=avg(b.straggler_wait_ns for b in items),
        p2p_wait_ns=avg(b.p2p_wait_ns for b in items),
        host_ns=avg(b.host_ns for b in items),
        idle_ns=avg(b.idle_ns for b in items),
    )


def build_result(
    w: CompiledWorkload,
    t: RawTimes,
    *,
    backend: str,
    settings: ReplaySettings,
    group_of: Callable[[int], str] | None = None,
) -> ReplayResult:
    group_of = group_of or (lambda r: "all")
    ranks = []
    # a folded rank has its representative's node times and columns: its breakdown is the same
    rep_of = t.rep_of if t.rep_of is not None else range(w.num_ranks)
    done: dict[int, tuple[Breakdown, int]] = {}
    for r in range(w.num_ranks):
        rep = int(rep_of[r])
        if rep not in done:
            done[rep] = rank_breakdown(w, t, rep)
        b, busy = done[rep]
        ranks.append(RankResult(r, str(group_of(r)), b, busy))
    names: dict[str, list[RankResult]] = {}
    for rr in ranks:
        names.setdefault(rr.group, []).append(rr)
    groups = tuple(
        GroupResult(
            name=g,
            ranks=tuple(x.rank for x in members),
            iteration_ns=max(x.breakdown.iteration_ns for x in members),
            mean=mean_breakdown([x.breakdown for x in members]),
        )
        for g, members in sorted(names.items(), key=lambda kv: kv[1][0].rank)
    )
    overall = max((x.breakdown.iteration_ns for x in ranks), default=0)
    return ReplayResult(overall, tuple(ranks), groups, backend, settings, t.stats, w, t)
