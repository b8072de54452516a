"""The graph model: typed nodes and traces, attribute names, checks and the NetworkX view."""

from xsim_trace.graph.kinds import AttrKind, CollectiveType, NodeType
from xsim_trace.graph.model import (
    Attr,
    GlobalMetadata,
    IOInfo,
    Node,
    Trace,
    comm_groups_to_json,
    make_attr,
    make_metadata,
    make_node,
)

__all__ = [
    "Attr",
    "AttrKind",
    "CollectiveType",
    "GlobalMetadata",
    "IOInfo",
    "Node",
    "NodeType",
    "Trace",
    "comm_groups_to_json",
    "make_attr",
    "make_metadata",
    "make_node",
]
