"""NetworkX views of traces for analysis: dependency DiGraph and the critical path."""

from __future__ import annotations

import networkx as nx

from xsim_trace.graph.model import Trace


def to_networkx(trace: Trace) -> nx.DiGraph:
    """Dependency graph: an edge dep -> node for each data/ctrl dependency (attr ``kind``).

    Node attributes: ``name``, ``type`` (NodeType or int), ``duration_ns``, ``node`` (the Node).
    Dependencies on ids absent from the trace are left out (see checks for reporting them).
    """
    g = nx.DiGraph()
    for node in trace.nodes:
        g.add_node(node.id, name=node.name, type=node.type, duration_ns=node.duration_ns, node=node)
    for node in trace.nodes:
        for dep in node.data_deps:
            if dep in g and dep != node.id:
                g.add_edge(dep, node.id, kind="data")
        for dep in node.ctrl_deps:
            if dep in g and dep != node.id and not g.has_edge(dep, node.id):
                g.add_edge(dep, node.id, kind="ctrl")
    return g


def critical_path(trace: Trace) -> tuple[int, list[int]]:
    """Longest duration-weighted dependency path: (total ns, node ids in order). Needs a DAG."""
    g = to_networkx(trace)
    best: dict[int, tuple[int, int | None]] = {}
    for n in nx.topological_sort(g):
        dur = g.nodes[n]["duration_ns"]
        prev = max(((best[p][0], p) for p in g.predecessors(n)), default=(0, None))
        best[n] = (prev[0] + dur, prev[1])
    if not best:
        return 0, []
    end = max(best, key=lambda n: (best[n][0], -n))
    total = best[end][0]
    path = []
    cur: int | None = end
    while cur is not None:
        path.append(cur)
        cur = best[cur][1]
    return total, path[::-1]
