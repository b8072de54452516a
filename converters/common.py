"""Graph building blocks shared by the converters.

Converters first build :class:`GNode` s carrying the *measured* start / end of what they stand for
(integer ns from the capture) and their dependencies.  :func:`finalize` then turns them into a
Chakra :class:`~xsim_trace.graph.model.Trace`:

* ids are assigned in a topological order (ties by measured start, then creation), so every
  dependency points to an earlier node and output is deterministic;
* a host node's duration is ``end - ready`` (ready = the latest measured end of its deps), so
  time spent waiting on a dependency is not counted twice;
* where a device node starts later than its deps allow, a delay node (``is_delay``) of that gap
  is put in front of it, so replay with measured durations reproduces the measured timeline.

:func:`measured_replay` is that replay (unlimited resources, measured durations): tests and
validation use it to check a conversion is faithful.
"""

from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from xsim_trace.errors import GraphError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import NodeType
from xsim_trace.graph.model import IOInfo, Node, Trace, make_attr, make_metadata

NS_PER_US = 1000
MAX_NAME_CHARS = 400


@dataclass(slots=True, eq=False)
class GNode:
    """A node under construction.  ``start`` / ``end`` are measured times (ns); ``fixed`` says the
    duration is the measured one (device work) rather than derived from readiness (host work)."""

    seq: int
    name: str
    type: NodeType
    start: int
    end: int
    on_cpu: bool
    data_deps: list["GNode"] = field(default_factory=list)
    ctrl_deps: list["GNode"] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    fixed: bool = True
    timed: bool = True  # False for comm nodes: no duration_ns (the simulator times them)
    #: for a node that becomes a chain of nodes (all-to-all -> sends/recvs): one attr dict each
    expand: list[tuple[NodeType, str, dict[str, Any]]] | None = None
    #: device nodes: the stream was busy with work outside the graph until this time (backlog from
    #: an earlier step); the delay in front of the node counts only idle time after it
    idle_from: int | None = None
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None

    @property
    def dur(self) -> int:
        return self.end - self.start

    def deps(self) -> list["GNode"]:
        seen: dict[int, GNode] = {}
        for d in self.data_deps:
            seen.setdefault(id(d), d)
        for d in self.ctrl_deps:
            seen.setdefault(id(d), d)
        return list(seen.values())


class GraphBuilder:
    def __init__(self) -> None:
        self.nodes: list[GNode] = []
        self._names: dict[str, str] = {}

    def add(self, name: str, node_type: NodeType, start: int, end: int, *, on_cpu: bool,
            deps: Iterable[GNode | None] = (), fixed: bool = True, timed: bool = True, **attrs: Any) -> GNode:
        name = self._names.setdefault(name, name[:MAX_NAME_CHARS])
        node = GNode(len(self.nodes), name, node_type, start, max(end, start), on_cpu,
                     [d for d in deps if d is not None], [], dict(attrs), fixed, timed)
        self.nodes.append(node)
        return node


def _ready(node: GNode) -> int | None:
    ends = [d.end for d in node.deps()]
    return max(ends) if ends else None


def _insert_delays(builder: GraphBuilder, origin: int) -> int:
    """Put a delay node in front of each device node that starts after its deps are done."""
    added = 0
    for node in list(builder.nodes):
        if node.on_cpu or not node.fixed:
            continue
        ready = _ready(node)
        if ready is None:
            ready = origin
        if node.idle_from is not None:
            ready = max(ready, min(node.idle_from, node.start))
        gap = node.start - ready
        if gap <= 0:
            continue
        delay = GNode(len(builder.nodes), "delay", NodeType.COMP, node.start - gap, node.start, False,
                      list(node.data_deps), list(node.ctrl_deps),
                      {A.DELAY: True, **({A.STREAM: node.attrs[A.STREAM]} if A.STREAM in node.attrs else {})})
        builder.nodes.append(delay)
        node.data_deps, node.ctrl_deps = [delay], []
        added += 1
    return added


def _topo_order(nodes: list[GNode]) -> list[GNode]:
    """Kahn's algorithm, ready nodes by (measured start, creation); compact arrays (``seq`` is the
    node's index in ``nodes``) so large graphs stay small."""
    n = len(nodes)
    indeg = array("l", bytes(8 * n)) if array("l").itemsize == 8 else array("l", [0] * n)
    counts = array("l", [0]) * (n + 1)
    for g in nodes:
        ds = g.deps()
        indeg[g.seq] = len(ds)
        for d in ds:
            counts[d.seq + 1] += 1
    for i in range(n):
        counts[i + 1] += counts[i]
    users = array("l", [0]) * counts[n]
    fill = array("l", counts[:n])
    for g in nodes:
        for d in g.deps():
            users[fill[d.seq]] = g.seq
            fill[d.seq] += 1
    del fill
    heap = [(g.start, g.seq) for g in nodes if indeg[g.seq] == 0]
    heapq.heapify(heap)
    out: list[GNode] = []
    while heap:
        _, i = heapq.heappop(heap)
        out.append(nodes[i])
        for k in range(counts[i], counts[i + 1]):
            u = users[k]
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(heap, (nodes[u].start, u))
    if len(out) != n:
        stuck = next(g for g in nodes if indeg[g.seq] > 0)
        raise GraphError(f"converter built a dependency cycle through {stuck.name!r}", node=stuck.seq)
    return out


#: attributes whose values are (nearly) unique per node: not worth sharing
_UNIQUE_ATTRS = frozenset({A.DURATION_NS, A.MEASURED_DURATION_NS, A.COMM_TAG})


def _attr(name: str, value: Any, cache: dict) -> Any:
    """``make_attr`` with one shared (frozen) object per repeated (name, value) within one trace:
    most attributes of a converted trace repeat (streams, flags, scopes, groups)."""
    if name in _UNIQUE_ATTRS:
        return make_attr(name, value)
    try:
        key = (name, type(value), value)
        hit = cache.get(key)
    except TypeError:  # unhashable value
        return make_attr(name, value)
    if hit is None:
        hit = cache[key] = make_attr(name, value)
    return hit


def _micros(ns: int) -> int:
    return (ns + NS_PER_US // 2) // NS_PER_US


def finalize(builder: GraphBuilder, metadata: Mapping[str, Any], *, origin: int, rank: int | None = None,
             delays: bool = True) -> Trace:
    """Chakra nodes from the builder (see module doc); ``origin`` is time zero (ns)."""
    if delays:
        _insert_delays(builder, origin)
    order = _topo_order(builder.nodes)
    shared: dict = {}
    last_id: dict[int, int] = {}
    nodes: list[Node] = []
    next_id = 0
    for g in order:
        ready = _ready(g)
        base = g.start if (g.fixed or ready is None) else ready
        dur = g.dur if g.fixed else max(0, g.end - base)
        data = tuple(dict.fromkeys(last_id[id(d)] for d in g.data_deps))
        ctrl = tuple(i for i in dict.fromkeys(last_id[id(d)] for d in g.ctrl_deps) if i not in data)
        start_us = _micros(max(0, base - origin))
        parts = g.expand or [(g.type, g.name, {})]
        share, rest = divmod(dur, len(parts))
        prev: int | None = None
        for k, (ptype, pname, pattrs) in enumerate(parts):
            piece = share + (rest if k == len(parts) - 1 else 0)
            attrs = dict(g.attrs)
            attrs.update(pattrs)
            attrs.setdefault(A.IS_CPU_OP, g.on_cpu)
            if g.timed:
                attrs[A.DURATION_NS] = piece
            else:
                attrs[A.MEASURED_DURATION_NS] = piece
            node = Node(
                id=next_id,
                name=pname[:MAX_NAME_CHARS],
                type=ptype,
                data_deps=data if prev is None else (prev,),
                ctrl_deps=ctrl if prev is None else (),
                start_time_micros=start_us,
                duration_micros=_micros(piece) if g.timed else 0,
                inputs=g.inputs,
                outputs=g.outputs,
                attrs=tuple(_attr(k2, v, shared) for k2, v in attrs.items()),
            )
            nodes.append(node)
            prev = next_id
            next_id += 1
        last_id[id(g)] = prev  # type: ignore[assignment]
    meta = make_metadata(**{k: v for k, v in metadata.items() if v is not None})
    return Trace(metadata=meta, nodes=tuple(nodes), rank=rank)


def node_time_ns(node: Node) -> int:
    """Measured duration of a node: ``duration_ns`` for timed nodes, ``measured_duration_ns`` for comm."""
    exact = node.attr(A.DURATION_NS)
    if exact is not None:
        return int(exact)
    measured = node.attr(A.MEASURED_DURATION_NS)
    if measured is not None:
        return int(measured)
    return node.duration_micros * NS_PER_US


@dataclass(frozen=True, slots=True)
class MeasuredReplay:
    end_ns: dict[int, int]  # node id -> end time
    cpu_end_ns: int  # when the last host node ends
    makespan_ns: int  # when the last node ends


def measured_replay(trace: Trace) -> MeasuredReplay:
    """ASAP schedule of one rank with measured durations and no resource limits (deps only).

    Nodes must be in topological order (converter output is)."""
    end: dict[int, int] = {}
    cpu_end = 0
    for n in trace.nodes:
        start = max((end[d] for d in n.deps), default=0)
        end[n.id] = start + node_time_ns(n)
        if n.is_cpu_op:
            cpu_end = max(cpu_end, end[n.id])
    return MeasuredReplay(end, cpu_end, max(end.values(), default=0))
