"""Collective algorithms as step schedules over member positions 0..n-1.

A schedule is a sequence of steps; each step is a set of transfers (src position, dst position,
bytes).  Execution rule (both the flow path and the closed-form path of the engine follow it):
a member issues its sends of step s once every receive addressed to it in steps < s has arrived
(plus the reduction delay for reducing steps); the endpoint delay is added before each send.
Chunking and in-flight limits are applied by the engine on top of one chunk's schedule.

Sizes follow the NCCL convention: ``comm_size`` is the full buffer (the output of an all-gather,
the input of a reduce-scatter, the payload of an all-reduce / broadcast); an all-to-all moves
size/n to every peer.  Transfers carry at least one byte so every message pays its latency.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from xsim_trace.graph.kinds import CollectiveType as C
from xsim_trace.replay.distinct import all_distinct

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Step:
    src: np.ndarray  # int64 member positions
    dst: np.ndarray  # int64 member positions
    size_bytes: np.ndarray  # int64
    reduce: bool = False

    @property
    def dst_unique(self) -> bool:
        return all_distinct(self.dst)

    @property
    def src_unique(self) -> bool:
        return all_distinct(self.src)


@dataclass(frozen=True, slots=True)
class Schedule:
    algorithm: str
    n: int
    steps: tuple[Step, ...]

    @property
    def num_transfers(self) -> int:
        return sum(len(s.src) for s in self.steps)


def _step(src, dst, size, reduce: bool = False) -> Step:
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    sizes = np.broadcast_to(np.asarray(np.maximum(size, 1), np.int64), src.shape).copy()
    return Step(src, dst, sizes, reduce)


def _ring_steps(positions: Sequence[Sequence[int]], count: int, size: int, reduce: bool) -> list[Step]:
    """``count`` ring steps run concurrently on each ring in ``positions`` (lists of positions)."""
    src = np.concatenate([np.asarray(r, np.int64) for r in positions if len(r) > 1] or [np.zeros(0, np.int64)])
    dst = np.concatenate([np.roll(np.asarray(r, np.int64), -1) for r in positions if len(r) > 1] or [np.zeros(0, np.int64)])
    return [_step(src, dst, size, reduce) for _ in range(count)]


def _all_pairs(n: int, size: int, reduce: bool = False) -> Step:
    p = np.arange(n, dtype=np.int64)
    src = np.repeat(p, n - 1)
    dst = np.concatenate([np.delete(p, i) for i in range(n)]) if n > 1 else np.zeros(0, np.int64)
    return _step(src, dst, size, reduce)


def ring(ctype: int, n: int, chunk: int, root: int = 0) -> list[Step]:
    ring_all = [list(range(n))]
    if ctype == C.ALL_REDUCE:
        return _ring_steps(ring_all, n - 1, chunk // n, True) + _ring_steps(ring_all, n - 1, chunk // n, False)
    if ctype in (C.REDUCE_SCATTER, C.REDUCE_SCATTER_BLOCK):
        return _ring_steps(ring_all, n - 1, chunk // n, True)
    if ctype == C.ALL_GATHER:
        return _ring_steps(ring_all, n - 1, chunk // n, False)
    if ctype == C.BROADCAST:  # a pipelined chain from the root
        return [_step([(root + j) % n], [(root + j + 1) % n], chunk) for j in range(n - 1)]
    if ctype == C.REDUCE:  # a chain that ends at the root
        return [_step([(root + 1 + j) % n], [(root + 2 + j) % n], chunk, True) for j in range(n - 1)]
    return direct(ctype, n, chunk, root)


def direct(ctype: int, n: int, chunk: int, root: int = 0) -> list[Step]:
    others = [p for p in range(n) if p != root]
    if ctype == C.ALL_REDUCE:
        return [_all_pairs(n, chunk // n, True), _all_pairs(n, chunk // n, False)]
    if ctype in (C.REDUCE_SCATTER, C.REDUCE_SCATTER_BLOCK):
        return [_all_pairs(n, chunk // n, True)]
    if ctype in (C.ALL_GATHER, C.ALL_TO_ALL):
        return [_all_pairs(n, chunk // n)]
    if ctype == C.BARRIER:
        return [_all_pairs(n, 1)]
    if ctype == C.GATHER:
        return [_step(others, [root] * len(others), chunk // n)]
    if ctype == C.SCATTER:
        return [_step([root] * len(others), others, chunk // n)]
    if ctype == C.BROADCAST:
        return [_step([root] * len(others), others, chunk)]
    if ctype == C.REDUCE:
        return [_step(others, [root] * len(others), chunk, True)]
    return [_all_pairs(n, chunk // n)]


def halving_doubling(ctype: int, n: int, chunk: int, root: int = 0) -> list[Step]:
    if n & (n - 1) or ctype not in (C.ALL_REDUCE, C.REDUCE_SCATTER, C.REDUCE_SCATTER_BLOCK, C.ALL_GATHER):
        log.info("halving-doubling needs a power-of-two group and a reduce/gather collective; using ring (n=%d)", n)
        return ring(ctype, n, chunk, root)
    p = np.arange(n, dtype=np.int64)
    levels = n.bit_length() - 1
    halving = [_step(p, p ^ (n >> (j + 1)), chunk >> (j + 1), True) for j in range(levels)]
    doubling = [_step(p, p ^ (n >> (j + 1)), chunk >> (j + 1)) for j in reversed(range(levels))]
    if ctype == C.ALL_REDUCE:
        return halving + doubling
    if ctype == C.ALL_GATHER:
        return doubling
    return halving


def tree(ctype: int, n: int, chunk: int, root: int = 0) -> list[Step]:
    """Double binary tree: two trees (a heap over positions and its mirror) each carry half the
    data, reduce towards the root level by level, then broadcast back."""
    if ctype in (C.BROADCAST, C.REDUCE):
        return _binary_tree(ctype, n, chunk, root)
    if ctype != C.ALL_REDUCE:
        return ring(ctype, n, chunk, root)
    if n == 1:
        return []
    depth = n.bit_length() - 1  # levels below the root
    pos = np.arange(1, n, dtype=np.int64)  # every non-root position of tree A
    level = np.floor(np.log2(pos + 1)).astype(np.int64)
    parent = (pos - 1) // 2
    half = chunk // 2
    up, down = [], []
    for lv in range(depth, 0, -1):
        sel = level == lv
        a_src, a_dst = pos[sel], parent[sel]
        b_src, b_dst = n - 1 - a_src, n - 1 - a_dst
        up.append(_step(np.concatenate([a_src, b_src]), np.concatenate([a_dst, b_dst]), half, True))
    for lv in range(1, depth + 1):
        sel = level == lv
        a_dst, a_src = pos[sel], parent[sel]
        b_dst, b_src = n - 1 - a_dst, n - 1 - a_src
        down.append(_step(np.concatenate([a_src, b_src]), np.concatenate([a_dst, b_dst]), half))
    return up + down


def _binary_tree(ctype: int, n: int, chunk: int, root: int) -> list[Step]:
    """Broadcast down / reduce up one binary heap tree over positions relabelled so ``root`` is 0."""
    if n == 1:
        return []
    rel = np.arange(1, n, dtype=np.int64)
    level = np.floor(np.log2(rel + 1)).astype(np.int64)
    child, parent = (rel + root) % n, ((rel - 1) // 2 + root) % n
    levels = range(1, int(level.max()) + 1)
    if ctype == C.BROADCAST:
        return [_step(parent[level == lv], child[level == lv], chunk) for lv in levels]
    return [_step(child[level == lv], parent[level == lv], chunk, True) for lv in reversed(levels)]


def hierarchical(ctype: int, n: int, chunk: int, root: int = 0, node_of: Sequence[int] | None = None) -> list[Step]:
    """Two-level rings over L members per node and M nodes (members with the same index in their
    node form the inter-node rings):

    * all-reduce: intra-node reduce-scatter (S/L per step), inter-node all-reduce of each slice
      (S/(L*M)), intra-node all-gather (S/L);
    * reduce-scatter: intra-node reduce-scatter (S/L), then inter-node reduce-scatter (S/(L*M));
    * all-gather: inter-node all-gather of the own piece (S/(L*M)), then intra-node all-gather of
      the gathered slices (S/L).

    Needs the same number of members on every node; otherwise, and for other collectives, ring.
    """
    if node_of is None or ctype not in (C.ALL_REDUCE, C.REDUCE_SCATTER, C.REDUCE_SCATTER_BLOCK, C.ALL_GATHER):
        return ring(ctype, n, chunk, root)
    by_node: dict[int, list[int]] = {}
    for p, nd in enumerate(node_of):
        by_node.setdefault(int(nd), []).append(p)
    locals_ = [by_node[k] for k in sorted(by_node)]
    sizes = {len(g) for g in locals_}
    if len(locals_) == 1 or sizes == {1} or len(sizes) > 1:
        return ring(ctype, n, chunk, root)
    lsize, nodes = len(locals_[0]), len(locals_)
    slices = [[g[j] for g in locals_] for j in range(lsize)]
    if ctype in (C.REDUCE_SCATTER, C.REDUCE_SCATTER_BLOCK):
        return _ring_steps(locals_, lsize - 1, chunk // lsize, True) + _ring_steps(
            slices, nodes - 1, chunk // (lsize * nodes), True
        )
    if ctype == C.ALL_GATHER:
        return _ring_steps(slices, nodes - 1, chunk // (lsize * nodes), False) + _ring_steps(
            locals_, lsize - 1, chunk // lsize, False
        )
    return (
        _ring_steps(locals_, lsize - 1, chunk // lsize, True)
        + _ring_steps(slices, nodes - 1, chunk // (lsize * nodes), True)
        + _ring_steps(slices, nodes - 1, chunk // (lsize * nodes), False)
        + _ring_steps(locals_, lsize - 1, chunk // lsize, False)
    )


_BUILDERS = {"ring": ring, "direct": direct, "halving_doubling": halving_doubling, "tree": tree}


def build_schedule(
    algorithm: str,
    ctype: int,
    n: int,
    chunk_bytes: int,
    *,
    root: int = 0,
    node_of: Sequence[int] | None = None,
    order: Sequence[int] | None = None,
) -> Schedule:
    """One chunk's schedule for a collective of ``ctype`` over ``n`` members.

    ``root``: the member position of a broadcast / reduce / gather / scatter root.  ``order``: the
    member positions in ring order; the algorithm then runs over that order (ring neighbours, the
    broadcast / reduce chain, tree and halving-doubling positions follow it) and the steps are
    mapped back to member positions."""
    if n <= 1:
        return Schedule(algorithm, n, ())
    perm = None
    if order is not None:
        perm = np.asarray(order, np.int64)
        if sorted(perm.tolist()) != list(range(n)):
            raise ValueError(f"order {list(order)} is not a permutation of 0..{n - 1}")
        root = int(np.flatnonzero(perm == root)[0])
        if node_of is not None:
            node_of = [node_of[int(p)] for p in perm]
    if algorithm == "hierarchical":
        steps = hierarchical(ctype, n, chunk_bytes, root, node_of)
    else:
        steps = _BUILDERS[algorithm](ctype, n, chunk_bytes, root)
    if perm is not None:
        steps = [Step(perm[s.src], perm[s.dst], s.size_bytes, s.reduce) for s in steps]
    return Schedule(algorithm, n, tuple(s for s in steps if len(s.src)))
