"""Initial conditions of a validation replay that the captured step itself does not contain.

* Start offsets: ranks on one host share a clock, and a captured step can begin at different times on
  different ranks (the skew comes from before the step: the previous iteration, the profiler starting).
  :func:`with_start_offset` delays a rank by putting one host delay node in front of every root, so a
  rank that starts early waits for its peers inside its first collective, as it did on the hardware.
* Absent peers: a single-rank capture of a multi-rank job has collectives and sends/receives whose
  peers are not in the capture.  :func:`mirror_peers` models each absent rank as a mirror of the present
  one: the same graph and timings, with send/recv peers shifted by the rank difference (modulo the world
  size), so a pipeline exchange pairs up the way it would in a symmetric job, and an all-to-all's per-peer
  sends and receives re-issued in the order the mirrored rank would use.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping, Sequence

from xsim_trace.errors import GraphError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Node, Trace, make_node, set_attrs
from xsim_trace.validate.commops import PEER_SUFFIX, comm_operations

#: name of the delay node :func:`with_start_offset` adds
START_OFFSET_NODE = "xsim.validate start offset"


def with_start_offset(trace: Trace, offset_ns: int, cpu_stream: int = -1) -> Trace:
    """``trace`` with every dependency-free node made to wait ``offset_ns`` (a host delay node)."""
    if offset_ns < 0:
        raise GraphError(f"expected a start offset >= 0 ns, found {offset_ns}", rank=trace.rank)
    if offset_ns == 0 or not trace.nodes:
        return trace
    ids = {n.id for n in trace.nodes}
    new_id = max(ids) + 1
    delay = make_node(
        new_id,
        START_OFFSET_NODE,
        NodeType.COMP,
        duration_micros=offset_ns // 1000,
        **{A.IS_CPU_OP: True, A.DELAY: True, A.DURATION_NS: int(offset_ns), A.STREAM: cpu_stream},
    )
    nodes = [delay]
    for n in trace.nodes:
        if not any(d in ids for d in n.deps):
            n = replace(n, ctrl_deps=(new_id, *n.ctrl_deps))
        nodes.append(n)
    return replace(trace, nodes=tuple(nodes))


#: ``order(rank, members) -> [(peer, send_first), ...]``: the per-peer order an all-to-all uses on ``rank``
AllToAllOrder = Callable[[int, Sequence[int]], Sequence[tuple[int, bool]]]


def _shift(peer: object, delta: int, world_size: int) -> object:
    if peer is None:
        return None
    return (int(peer) + delta) % world_size


def _reorder_alltoall(nodes: list[Node], positions: list[int], rank: int, members: Sequence[int],
                      order: AllToAllOrder) -> bool:
    """Re-issue the per-peer nodes of one all-to-all in ``order`` for ``rank``; False if they don't fit."""
    plan = list(order(rank, members))
    if len(positions) != 2 * len(plan):
        return False
    sends = [nodes[p] for p in positions if nodes[p].type == NodeType.COMM_SEND]
    recvs = [nodes[p] for p in positions if nodes[p].type == NodeType.COMM_RECV]
    if not sends or not recvs:
        return False
    base = PEER_SUFFIX.sub("", nodes[positions[0]].name)
    tmpl = {NodeType.COMM_SEND: sends[0], NodeType.COMM_RECV: recvs[0]}
    seq: list[tuple[NodeType, int]] = []
    for peer, send_first in plan:
        pair = [(NodeType.COMM_SEND, peer), (NodeType.COMM_RECV, peer)]
        seq.extend(pair if send_first else pair[::-1])
    for p, (ntype, peer) in zip(positions, seq):
        t = tmpl[ntype]
        src, dst = (rank, peer) if ntype == NodeType.COMM_SEND else (peer, rank)
        arrow = f"send->{peer}" if ntype == NodeType.COMM_SEND else f"recv<-{peer}"
        nodes[p] = replace(nodes[p], type=ntype, name=f"{base} {arrow}",
                           attrs=set_attrs(nodes[p].attrs, {A.COMM_SRC: src, A.COMM_DST: dst,
                                                             A.COMM_SIZE: t.comm_size_bytes}))
    return True


def mirror_rank(
    trace: Trace,
    src_rank: int,
    dst_rank: int,
    world_size: int,
    *,
    alltoall_order: AllToAllOrder | None = None,
    comm_groups: Mapping[str, Sequence[int]] | None = None,
) -> Trace:
    """A copy of rank ``src_rank``'s graph acting as rank ``dst_rank``.

    Sends and receives get their peers shifted by ``dst_rank - src_rank`` modulo ``world_size``; with
    ``alltoall_order``, the per-peer nodes of each all-to-all are instead re-issued in the order that
    rank would use (the converter pairs ranks round by round, an order that is not shift-invariant)."""
    delta = dst_rank - src_rank
    nodes = list(trace.nodes)
    done: set[int] = set()
    if alltoall_order is not None:
        for positions in comm_operations(trace):
            first = nodes[positions[0]]
            if first.type not in (NodeType.COMM_SEND, NodeType.COMM_RECV) or first.attr(A.COMM_TYPE) != int(
                CollectiveType.ALL_TO_ALL
            ):
                continue
            pg = first.pg_name or "0"
            members = tuple((comm_groups or {}).get(pg, ())) or tuple(range(world_size))
            if _reorder_alltoall(nodes, positions, dst_rank, members, alltoall_order):
                done.update(positions)
    for i, n in enumerate(nodes):
        if i in done or n.type not in (NodeType.COMM_SEND, NodeType.COMM_RECV):
            continue
        values = {}
        for name in (A.COMM_SRC, A.COMM_DST):
            v = n.attr(name)
            if v is not None:
                values[name] = _shift(v, delta, world_size)
        if values:
            nodes[i] = replace(n, attrs=set_attrs(n.attrs, values))
    meta = replace(trace.metadata, attrs=set_attrs(trace.metadata.attrs, {A.META_RANK: dst_rank}))
    return Trace(metadata=meta, nodes=tuple(nodes), rank=dst_rank, source=trace.source)


def mirror_peers(
    traces: Mapping[int, Trace],
    world_size: int,
    *,
    alltoall_order: AllToAllOrder | None = None,
    comm_groups: Mapping[str, Sequence[int]] | None = None,
) -> tuple[dict[int, Trace], tuple[int, ...]]:
    """``traces`` completed to ranks ``0..world_size-1``; each absent rank mirrors the nearest present
    rank below it (else the first present rank).  Returns the full set and the mirrored ranks."""
    if not traces:
        raise GraphError("no ranks to complete")
    present = sorted(traces)
    if world_size <= present[-1]:
        raise GraphError(f"world size {world_size} does not cover rank {present[-1]}")
    out: dict[int, Trace] = {}
    mirrored: list[int] = []
    for r in range(world_size):
        if r in traces:
            out[r] = traces[r]
            continue
        below = [p for p in present if p < r]
        src = below[-1] if below else present[0]
        out[r] = mirror_rank(traces[src], src, r, world_size, alltoall_order=alltoall_order,
                             comm_groups=comm_groups)
        mirrored.append(r)
    return out, tuple(mirrored)
