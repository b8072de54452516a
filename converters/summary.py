"""A short human-readable account of a conversion (what the CLI prints)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType


def comm_counts(trace: Any) -> dict[str, int]:
    """NCCL operations of one rank: collectives by type, all-to-alls (a tag's p2p nodes count once),
    other sends / recvs."""
    counts: Counter[str] = Counter()
    a2a_tags: set[int] = set()
    for n in trace.nodes:
        if n.type == NodeType.COMM_COLL and n.comm_type is not None:
            counts[n.comm_type.name] += 1
        elif n.type in (NodeType.COMM_SEND, NodeType.COMM_RECV):
            if n.attr(A.COMM_TYPE) == int(CollectiveType.ALL_TO_ALL):
                a2a_tags.add(int(n.comm_tag or 0))
            else:
                counts[n.type.name] += 1
    if a2a_tags:
        counts["ALL_TO_ALL"] += len(a2a_tags)
    return dict(sorted(counts.items()))


def describe(conv: Any, prefix: str) -> str:
    lines = []
    for rank, trace in sorted(conv.traces.items()):
        step = trace.metadata.attr(A.META_STEP)
        measured = trace.measured_step_ns
        ops = ", ".join(f"{k} x{v}" for k, v in comm_counts(trace).items()) or "no communication"
        when = ""
        if measured is not None and step is not None:
            label = "whole capture" if step == -1 else f"ProfilerStep#{step}"
            when = f", {label} {measured / 1e6:.3f} ms"
        lines.append(f"rank {rank}: {len(trace.nodes)} nodes{when}; {ops}")
    groups = ", ".join(f"{k}: {len(v)} ranks" for k, v in sorted(conv.comm_groups.items()))
    lines.append(f"{prefix}: {len(conv.traces)} rank file(s); comm groups {groups or 'none'}")
    return "\n".join(lines)
