"""Grouped send/recv all-to-alls back as one collective, for the NCCL model to price.

xsim-convert expands a captured all-to-all (one NCCL kernel running every peer's send and receive at
once) into a chain of per-peer COMM_SEND / COMM_RECV nodes that keep the kernel's ``comm_type``
ALL_TO_ALL.  Replayed as a chain, its transfers run one after another; NCCL runs them together over
its channels.  When the NCCL model prices collectives, :func:`group_alltoalls` turns each such chain
back into one COMM_COLL ALL_TO_ALL node whose size is what the rank sends in all (nccl-tests'
all-to-all ``size``), so the model's all-to-all prices it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Node, Trace, set_attrs
from xsim_trace.validate.commops import PEER_SUFFIX, comm_operations

_P2P = (NodeType.COMM_SEND, NodeType.COMM_RECV)


def alltoall_chains(trace: Trace) -> list[list[int]]:
    """Node positions of each all-to-all converted into per-peer sends and receives, in start order."""
    out = []
    for positions in comm_operations(trace):
        nodes = [trace.nodes[p] for p in positions]
        if len(nodes) > 1 and all(n.type in _P2P for n in nodes) and nodes[0].comm_type == CollectiveType.ALL_TO_ALL:
            out.append(positions)
    return out


def _collapsed(nodes: list[Node], size_bytes: int) -> Node:
    """One COMM_COLL for a chain: the id of its last node (what later nodes depend on), the chain's
    outside dependencies, the kernel's name and measured time."""
    ids = {n.id for n in nodes}
    data = tuple(dict.fromkeys(d for n in nodes for d in n.data_deps if d not in ids))
    ctrl = tuple(dict.fromkeys(d for n in nodes for d in n.ctrl_deps if d not in ids and d not in data))
    tail = nodes[-1]
    values = {A.COMM_TYPE: int(CollectiveType.ALL_TO_ALL), A.COMM_SIZE: int(size_bytes)}
    measured = [n.attr(A.MEASURED_DURATION_NS) for n in nodes]
    if all(m is not None for m in measured):
        values[A.MEASURED_DURATION_NS] = int(sum(int(m) for m in measured))
    attrs = tuple(a for a in set_attrs(tail.attrs, values) if a.name not in (A.COMM_SRC, A.COMM_DST, A.COMM_TAG))
    return replace(tail, type=NodeType.COMM_COLL, name=PEER_SUFFIX.sub("", tail.name), data_deps=data,
                   ctrl_deps=ctrl, attrs=attrs)


def group_alltoalls(traces: Mapping[int, Trace]) -> tuple[dict[int, Trace], int]:
    """``(traces, count)``: every per-peer all-to-all chain of ``traces`` as one COMM_COLL ALL_TO_ALL.
    The k-th all-to-all of a process group takes, on every rank, the largest of the ranks' totals (one
    collective has one size; an uneven all-to-all moves different bytes per rank)."""
    chains = {r: alltoall_chains(t) for r, t in traces.items()}
    largest: dict[tuple, int] = {}
    for r, t in traces.items():
        seen: dict[str, int] = {}
        for positions in chains[r]:
            pg = t.nodes[positions[0]].pg_name or ""
            k = seen[pg] = seen.get(pg, -1) + 1
            sent = sum(t.nodes[p].comm_size_bytes for p in positions if t.nodes[p].type == NodeType.COMM_SEND)
            largest[(pg, k)] = max(largest.get((pg, k), 0), sent)
    out: dict[int, Trace] = {}
    count = 0
    for r, t in traces.items():
        if not chains[r]:
            out[r] = t
            continue
        nodes: list[Node | None] = list(t.nodes)
        remap: dict[int, int] = {}
        seen = {}
        for positions in chains[r]:
            chain = [t.nodes[p] for p in positions]
            pg = chain[0].pg_name or ""
            k = seen[pg] = seen.get(pg, -1) + 1
            nodes[positions[-1]] = _collapsed(chain, largest[(pg, k)])
            for p in positions[:-1]:
                nodes[p] = None
                remap[t.nodes[p].id] = chain[-1].id
            count += 1
        kept = [n for n in nodes if n is not None]
        if remap:
            kept = [_remapped(n, remap) for n in kept]
        out[r] = replace(t, nodes=tuple(kept))
    return out, count


def _remapped(n: Node, remap: Mapping[int, int]) -> Node:
    if not any(d in remap for d in n.data_deps) and not any(d in remap for d in n.ctrl_deps):
        return n
    data = tuple(dict.fromkeys(remap.get(d, d) for d in n.data_deps if remap.get(d, d) != n.id))
    ctrl = tuple(dict.fromkeys(remap.get(d, d) for d in n.ctrl_deps if remap.get(d, d) != n.id and remap.get(d, d) not in data))
    return replace(n, data_deps=data, ctrl_deps=ctrl)
