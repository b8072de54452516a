"""Trace statistics: node counts by type, collective bytes by kind, compute time; JSON-ready node dicts."""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from xsim_trace.errors import GraphError
from xsim_trace.graph.bounds import node_problems
from xsim_trace.graph.kinds import AttrKind, CollectiveType, NodeType
from xsim_trace.graph.model import Attr, Node


@dataclass
class TraceStats:
    """Accumulates over a stream of nodes (so 1M-node files need no list in memory).  ``source``: the
    file the nodes come from, named by the error a node with a value of the wrong kind raises."""

    source: str | None = None
    nodes: int = 0
    by_type: Counter = field(default_factory=Counter)
    coll_count: Counter = field(default_factory=Counter)
    coll_bytes: Counter = field(default_factory=Counter)
    p2p_bytes: Counter = field(default_factory=Counter)
    compute_ns: int = 0
    cpu_ns: int = 0

    def add(self, node: Node) -> None:
        try:
            self._add(node)
        except (TypeError, ValueError, OverflowError) as exc:
            for fld, why in node_problems(node):
                raise GraphError(why, file=self.source, node=node.id, field=fld) from exc
            raise

    def _add(self, node: Node) -> None:
        self.nodes += 1
        t = node.type
        self.by_type[t.name if isinstance(t, NodeType) else f"UNKNOWN({int(t)})"] += 1
        if t == NodeType.COMP:
            if node.is_cpu_op:
                self.cpu_ns += node.duration_ns
            else:
                self.compute_ns += node.duration_ns
        elif t == NodeType.COMM_COLL:
            ct = node.comm_type
            key = ct.name if ct is not None else "UNKNOWN"
            self.coll_count[key] += 1
            self.coll_bytes[key] += node.comm_size_bytes
        elif t in (NodeType.COMM_SEND, NodeType.COMM_RECV):
            self.p2p_bytes[t.name] += node.comm_size_bytes

    def extend(self, nodes: Iterable[Node]) -> "TraceStats":
        for n in nodes:
            self.add(n)
        return self

    def to_dict(self) -> dict[str, Any]:
        order = [t.name for t in NodeType]
        return {
            "nodes": self.nodes,
            "by_type": {k: self.by_type[k] for k in sorted(self.by_type, key=lambda k: (order.index(k) if k in order else 99, k))},
            "collectives": {
                k: {"count": self.coll_count[k], "bytes": self.coll_bytes[k]}
                for k in sorted(self.coll_count, key=lambda k: (CollectiveType[k].value if k in CollectiveType.__members__ else 99))
            },
            "p2p_bytes": dict(sorted(self.p2p_bytes.items())),
            "compute_ns": self.compute_ns,
            "cpu_ns": self.cpu_ns,
        }


def _json_value(attr: Attr) -> Any:
    v = attr.value
    if attr.kind is AttrKind.BYTES:
        return base64.b64encode(v).decode()
    if attr.kind is AttrKind.BYTES_LIST:
        return [base64.b64encode(x).decode() for x in v]
    if isinstance(v, tuple):
        return list(v)
    return v


def node_to_json(node: Node) -> dict[str, Any]:
    t = node.type
    d: dict[str, Any] = {
        "id": node.id,
        "name": node.name,
        "type": t.name if isinstance(t, NodeType) else int(t),
    }
    if node.data_deps:
        d["data_deps"] = list(node.data_deps)
    if node.ctrl_deps:
        d["ctrl_deps"] = list(node.ctrl_deps)
    if node.start_time_micros:
        d["start_time_micros"] = node.start_time_micros
    d["duration_micros"] = node.duration_micros
    for key in ("inputs", "outputs"):
        io = getattr(node, key)
        if io is not None:
            d[key] = {"values": io.values, "shapes": io.shapes, "types": io.types}
    if node.attrs:
        d["attrs"] = {a.name: {"kind": a.kind.value or None, "value": _json_value(a)} for a in node.attrs}
    return d
