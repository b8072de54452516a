"""Which nodes of a converted graph came from one captured NCCL kernel."""

from __future__ import annotations

import re

from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import NodeType
from xsim_trace.graph.model import Trace

#: the peer suffix xsim-convert gives the per-peer nodes of an all-to-all
PEER_SUFFIX = re.compile(r" (?:send->|recv<-)\d+$")
COMM_TYPES = (NodeType.COMM_SEND, NodeType.COMM_RECV, NodeType.COMM_COLL)


def comm_operations(trace: Trace) -> list[list[int]]:
    """Node positions of ``trace`` grouped into the captured NCCL kernels they came from, in start
    order.  A kernel converted into several nodes (an all-to-all's per-peer sends and receives) keeps
    its stream, captured start time and name (less the `` send->N`` / `` recv<-N`` peer suffix)."""
    groups: dict[tuple, list[int]] = {}
    for i, n in enumerate(trace.nodes):
        if n.type not in COMM_TYPES:
            continue
        key = (n.start_time_micros, n.attr(A.STREAM), PEER_SUFFIX.sub("", n.name))
        groups.setdefault(key, []).append(i)
    return [groups[k] for k in sorted(groups, key=lambda k: (k[0], groups[k][0]))]
