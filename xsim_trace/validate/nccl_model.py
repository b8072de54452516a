"""The NCCL collective model in validation: which algorithm/protocol it picks for each captured kernel, and,
for a capture of a single rank, the absent peers' arrival skew it implies.

A measured NCCL kernel lasts as long as its rank waits for the last peer plus the transfer.  With one
captured rank the peers are mirrors that arrive exactly when it does, so the wait vanishes from the replay.
The model prices the transfer; what the measured kernel lasts beyond it is the wait, and delaying every
mirror by that much before the collective (:func:`with_peer_skew`) makes the captured rank wait as it did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import NodeType
from xsim_trace.graph.model import Trace, make_node
from xsim_trace.network.nccl.model import CollectivePrice
from xsim_trace.network.nccl.pricer import NcclPricer
from xsim_trace.validate.commops import comm_operations

#: name of the delay node :func:`with_peer_skew` adds before a collective
PEER_SKEW_NODE = "xsim.validate peer skew"


def modelled_ops(trace: Trace, comm_groups: Mapping[str, Sequence[int]] | None, world_size: int,
                 pricer: NcclPricer) -> list[CollectivePrice | None]:
    """Per communication operation of ``trace`` (comm_operations order): the model's price of the
    collective, or None for sends/receives and collectives without a size."""
    out: list[CollectivePrice | None] = []
    for positions in comm_operations(trace):
        n = trace.nodes[positions[0]]
        if n.type != NodeType.COMM_COLL or n.comm_type is None or not n.comm_size_bytes:
            out.append(None)
            continue
        members = tuple((comm_groups or {}).get(n.pg_name or "", ())) or tuple(range(world_size))
        out.append(pricer.price(int(n.comm_type), members, int(n.comm_size_bytes)))
    return out


def with_peer_skew(trace: Trace, delays_ns: Sequence[int]) -> Trace:
    """``trace`` with collective operation ``k`` (comm_operations order) made to start ``delays_ns[k]`` later
    than its dependencies allow: a delay node between them, on the collective's stream."""
    ops = comm_operations(trace)
    nodes = list(trace.nodes)
    next_id = max((n.id for n in nodes), default=0) + 1
    extra = []
    for k, positions in enumerate(ops):
        delay = int(delays_ns[k]) if k < len(delays_ns) else 0
        n = nodes[positions[0]]
        if delay <= 0 or n.type != NodeType.COMM_COLL:
            continue
        d = make_node(next_id, PEER_SKEW_NODE, NodeType.COMP, duration_micros=delay // 1000,
                      data_deps=n.data_deps, ctrl_deps=n.ctrl_deps,
                      **{A.DELAY: True, A.DURATION_NS: delay, A.STREAM: n.attr(A.STREAM) if n.attr(A.STREAM) is not None else 0})
        extra.append(d)
        for p in positions:
            nodes[p] = replace(nodes[p], ctrl_deps=(*nodes[p].ctrl_deps, next_id))
        next_id += 1
    return replace(trace, nodes=tuple(nodes) + tuple(extra)) if extra else trace
