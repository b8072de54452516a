"""The critical path of a replay: the chain of nodes that sets the iteration time.

Walking back from the node that ends last: a node that waited for its resource continues at the
node that held the resource until it started; a collective member continues at the member that
arrived last (the straggler); otherwise the dependency that finished last (the one that made it
ready) continues the path.  A collective appears once, as the member the path arrived at, from the
moment its last member arrived; the path then continues from that last member's causes.  A receive
that waited for its sender likewise appears from the moment the data moved, and the path continues
from the sender's causes (the endpoint delay before the send is then not on the path).  Everything is read from the replay's times, nothing is re-simulated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xsim_trace.replay.compile import K_COLL, K_RECV, CompiledWorkload
from xsim_trace.replay.engine import RawTimes


@dataclass(frozen=True, slots=True)
class PathNode:
    index: int  # global node index
    rank: int
    node_id: int
    name: str
    start_ns: int
    end_ns: int
    via: str  # how the path reached it from its successor: "dep", "resource" or "end" (the last node)


class _Holders:
    """Who held a resource until a given time: the lowest-index node on it that ended then."""

    def __init__(self, resource: np.ndarray, end: np.ndarray) -> None:
        self.order = np.lexsort((np.arange(len(end)), end, resource))
        self.res, self.end = resource[self.order], end[self.order]

    def get(self, resource: int, t: int) -> int | None:
        lo = int(np.searchsorted(self.res, resource, "left"))
        hi = int(np.searchsorted(self.res, resource, "right"))
        k = lo + int(np.searchsorted(self.end[lo:hi], t, "left"))
        return int(self.order[k]) if k < hi and int(self.end[k]) == t else None


def critical_path(w: CompiledWorkload, t: RawTimes) -> list[PathNode]:
    """Nodes of the critical path in time order."""
    if w.num_nodes == 0:
        return []
    start, end, ready, wait = t.start_ns, t.end_ns, t.ready_ns, t.wait_ns
    # predecessor CSR from the successor CSR
    counts = np.diff(w.succ_ptr)
    src = np.repeat(np.arange(w.num_nodes, dtype=np.int64), counts)
    order = np.argsort(w.succ_idx, kind="stable")
    pred_idx = src[order]
    pred_ptr = np.zeros(w.num_nodes + 1, np.int64)
    np.cumsum(np.bincount(w.succ_idx, minlength=w.num_nodes), out=pred_ptr[1:])
    holder = _Holders(w.resource, end)

    path: list[PathNode] = []
    i = int(np.lexsort((np.arange(w.num_nodes), -end))[0])
    via = "end"
    seen: set[int] = set()
    while i not in seen:
        seen.add(i)
        if via not in ("straggler", "peer"):
            path.append(PathNode(i, int(w.node_rank[i]), int(w.node_id[i]), w.names[i], int(start[i]), int(end[i]), via))
        s = int(start[i])
        if int(w.exec_kind[i]) == K_COLL and int(wait[i]) > 0:
            inst = w.instances[int(w.coll_instance[i])]
            began = s + int(wait[i])
            nxt = next((g for g in inst.nodes if int(start[g]) == began), None)
            if nxt is not None and nxt != i:
                # the path runs through the collective once: this member from the moment the
                # last member (the straggler) arrived, then on from the straggler's causes
                last = path[-1]
                path[-1] = PathNode(last.index, last.rank, last.node_id, last.name, began, last.end_ns, last.via)
                i, via = nxt, "straggler"
                continue
        kind = int(w.exec_kind[i])
        if kind == K_RECV and int(wait[i]) > 0 and int(t.peer_node[i]) >= 0:
            # the receive waited for its sender: on from the moment the data moved, then the sender's causes
            began = s + int(wait[i])
            last = path[-1]
            path[-1] = PathNode(last.index, last.rank, last.node_id, last.name, began, last.end_ns, last.via)
            i, via = int(t.peer_node[i]), "peer"
            continue
        if s > int(ready[i]):
            nxt = holder.get(int(w.resource[i]), s)
            if nxt is not None and nxt != i:
                i, via = nxt, "resource"
                continue
        preds = pred_idx[pred_ptr[i]:pred_ptr[i + 1]]
        if len(preds) == 0 or s == 0:
            break
        last = preds[end[preds] == ready[i]]
        if len(last) == 0:
            break
        i, via = int(last.min()), "dep"
    path.reverse()
    return path
