"""Small builders for the hardening tests: a two-rank all-reduce rank set with one value replaced."""

from __future__ import annotations

from pathlib import Path

from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import AttrKind, CollectiveType, NodeType
from xsim_trace.graph.model import Attr, Node, Trace, make_metadata, make_node
from xsim_trace.io import write_rank_set


def allreduce_traces(on_ranks: tuple[int, ...] = (0,), **override) -> dict[int, Trace]:
    """Rank 0 and 1: a compute node, then a 1 MiB all-reduce on stream 7.  ``override`` replaces
    node fields (``id``, ``duration_micros``) or attributes (name -> (AttrKind, value)) of the
    collective of the ranks ``on_ranks``."""
    traces = {}
    for rank in (0, 1):
        comp = make_node(1, "gemm", NodeType.COMP, duration_micros=10)
        coll = make_node(2, "allreduce", NodeType.COMM_COLL, data_deps=[1], comm_type=int(CollectiveType.ALL_REDUCE),
                         comm_size=1 << 20, stream=7)
        if rank in on_ranks and override:
            coll = _override(coll, override)
        traces[rank] = Trace(make_metadata(), (comp, coll), rank=rank)
    return traces


def _override(node: Node, override: dict) -> Node:
    fields = {k: v for k, v in override.items() if k in ("id", "duration_micros", "type")}
    attrs = [a for a in node.attrs if a.name not in override]
    for name, spec in override.items():
        if name in fields:
            continue
        kind, value = spec
        attrs.append(Attr(name, kind, tuple(value) if kind.is_list else value))
    data = {"id": node.id, "name": node.name, "type": node.type, "data_deps": node.data_deps,
            "duration_micros": node.duration_micros, **fields}
    return Node(attrs=tuple(attrs), **data)


def write_allreduce(tmp: Path, **override) -> str:
    prefix = str(tmp / "run")
    write_rank_set(prefix, allreduce_traces(**override), {"0": [0, 1]})
    return prefix


#: every .et crash class of issue 15: (label, override)
ET_CRASHES = [
    ("node id 2^63", {"id": 1 << 63}),
    ("duration_micros 2^63/1000", {"duration_micros": (1 << 63) // 1000 + 1}),
    ("stream inf", {A.STREAM: (AttrKind.DOUBLE, float("inf"))}),
    ("stream nan", {A.STREAM: (AttrKind.DOUBLE, float("nan"))}),
    ("comm_size 2^63", {A.COMM_SIZE: (AttrKind.UINT64, 1 << 63)}),
    ("comm_size 2^60", {A.COMM_SIZE: (AttrKind.INT64, 1 << 60)}),
    ("comm_type 2^15", {A.COMM_TYPE: (AttrKind.INT64, 1 << 15)}),
    ("comm_type string", {A.COMM_TYPE: (AttrKind.STRING, "allreduce")}),
    ("comm_type 42", {A.COMM_TYPE: (AttrKind.INT64, 42)}),
    ("duration_ns 2^63", {A.DURATION_NS: (AttrKind.UINT64, 1 << 63)}),
    ("comm_root 2^31", {A.COMM_ROOT: (AttrKind.INT64, 1 << 31)}),
    ("ring_order text", {A.RING_ORDER: (AttrKind.STRING_LIST, ["a", "b"])}),
    ("tid list", {A.THREAD: (AttrKind.INT64_LIST, [1, 2]), A.IS_CPU_OP: (AttrKind.BOOL, True)}),
]
#: send/recv peers out of range (the p2p crash classes)
P2P_CRASHES = [
    ("comm_dst 2^31", A.COMM_DST, 1 << 31),
    ("comm_src 2^31", A.COMM_SRC, 1 << 31),
    ("comm_dst 2^40", A.COMM_DST, 1 << 40),
]


def write_p2p(tmp: Path, field: str, value: int) -> str:
    traces = {}
    for rank in (0, 1):
        if rank == 0:
            node = make_node(1, "send", NodeType.COMM_SEND, comm_size=1024, comm_dst=1, comm_tag=0)
        else:
            node = make_node(1, "recv", NodeType.COMM_RECV, comm_size=1024, comm_src=0, comm_tag=0)
        if (rank == 0) == (field == A.COMM_DST):
            node = _override(node, {field: (AttrKind.INT64, value)})
        traces[rank] = Trace(make_metadata(), (node,), rank=rank)
    prefix = str(tmp / "p2p")
    write_rank_set(prefix, traces, {})
    return prefix
