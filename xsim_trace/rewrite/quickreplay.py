"""A small alpha-beta replay of rewritten rank sets, for plan comparison and the metrics tests.

Stand-in until the engine in ``xsim_trace.replay`` is available; it replays the same graphs with
simpler rules: per rank one compute stream (COMP nodes in ready order, ties by node id), every comm
node on its own; a send/recv pair (matched by src, dst, tag) runs once both are ready; the k-th
collective of a process group on each member is one instance that starts when its last member is
ready.  Times: ``latency + bytes / bw`` per P2P; ring all-reduce ``2(n-1)(latency + bytes/(n bw))``;
broadcast ``ceil(log2 n) latency + bytes / bw``; all-gather / reduce-scatter half an all-reduce;
``bw`` is the slowest link between consecutive members (no contention).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable, Mapping

from xsim_trace.errors import GraphError
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Trace


@dataclass(frozen=True, slots=True)
class NodeTime:
    ready_ns: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class QuickReplayResult:
    times: dict[tuple[int, int], NodeTime]  # (rank, node id) -> times
    iteration_ns: int

    def rank_end_ns(self, rank: int) -> int:
        return max((t.end_ns for (r, _), t in self.times.items() if r == rank), default=0)


def _ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b)) if b > 0 else 0


def quick_replay(
    traces: Mapping[int, Trace],
    bw_GBps: Callable[[int, int], float],
    *,
    latency_ns: int = 2000,
) -> QuickReplayResult:
    """Replay ``traces`` (rank -> Trace) with link bandwidth ``bw_GBps(a, b)`` (1e9 bytes/s)."""
    nodes = {(r, n.id): n for r, t in traces.items() for n in t.nodes}
    dependents: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    waiting: dict[tuple[int, int], int] = {}
    for (r, nid), n in nodes.items():
        deps = n.deps
        for d in deps:
            if (r, d) not in nodes:
                raise GraphError(f"dependency on missing node {d}", rank=r, node=nid)
            dependents[(r, d)].append((r, nid))
        waiting[(r, nid)] = len(deps)
    coll_seq: dict[tuple[int, str], int] = defaultdict(int)
    coll_key: dict[tuple[int, int], tuple[str, int]] = {}
    members: dict[str, set[int]] = defaultdict(set)
    for r in sorted(traces):
        for n in traces[r].nodes:
            if n.type == NodeType.COMM_COLL:
                k = coll_seq[(r, n.pg_name)]
                coll_seq[(r, n.pg_name)] += 1
                coll_key[(r, n.id)] = (n.pg_name, k)
                members[n.pg_name].add(r)

    heap: list[tuple[int, int, int, tuple[int, int]]] = []  # (time, order, seq, key); order 0=end, 1=ready
    seq = 0
    ready_at: dict[tuple[int, int], int] = {}
    start_at: dict[tuple[int, int], int] = {}
    end_at: dict[tuple[int, int], int] = {}
    busy_until: dict[int, int] = defaultdict(int)
    queue: dict[int, deque] = defaultdict(deque)
    p2p_wait: dict[tuple[int, int, int], tuple[int, int]] = {}
    coll_wait: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)

    def push(t: int, order: int, key: tuple[int, int]) -> None:
        nonlocal seq
        heapq.heappush(heap, (t, order, seq, key))
        seq += 1

    def start(key: tuple[int, int], t: int, dur: int) -> None:
        start_at[key] = t
        push(t + dur, 0, key)

    def coll_time(n, ranks: list[int]) -> int:
        size, k = n.comm_size_bytes, len(ranks)
        if k < 2:
            return 0
        order = list(n.attr("ring_order") or ranks)
        bw = min(bw_GBps(order[i], order[(i + 1) % k]) for i in range(k))
        ct = n.comm_type
        if ct == CollectiveType.BROADCAST:
            return math.ceil(math.log2(k)) * latency_ns + _ceil_div(size, bw)
        steps = (k - 1) if ct in (CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER) else 2 * (k - 1)
        return steps * latency_ns + _ceil_div(steps * size / k, bw)

    for key, w in waiting.items():
        if w == 0:
            push(0, 1, key)
    while heap:
        t, order, _, key = heapq.heappop(heap)
        r, nid = key
        n = nodes[key]
        if order == 0:  # end
            end_at[key] = t
            if n.type == NodeType.COMP and not n.is_cpu_op:
                busy_until[r] = t
                if queue[r]:
                    nxt = queue[r].popleft()
                    busy_until[r] = t + nodes[nxt].duration_ns
                    start(nxt, t, nodes[nxt].duration_ns)
            for d in dependents[key]:
                waiting[d] -= 1
                if waiting[d] == 0:
                    push(t, 1, d)
            continue
        ready_at[key] = t
        if n.type == NodeType.COMP and not n.is_cpu_op:
            if busy_until[r] <= t and not queue[r]:
                busy_until[r] = t + n.duration_ns
                start(key, t, n.duration_ns)
            else:
                queue[r].append(key)
        elif n.type in (NodeType.COMM_SEND, NodeType.COMM_RECV):
            pair = (int(n.comm_src), int(n.comm_dst), int(n.comm_tag))
            if pair in p2p_wait:
                other = p2p_wait.pop(pair)
                dur = latency_ns + _ceil_div(n.comm_size_bytes, bw_GBps(pair[0], pair[1]))
                start(key, t, dur)
                start(other, t, dur)
            else:
                p2p_wait[pair] = key
        elif n.type == NodeType.COMM_COLL:
            ck = coll_key[key]
            coll_wait[ck].append(key)
            group = sorted(members[ck[0]])
            if len(coll_wait[ck]) == len(group):
                dur = coll_time(n, group)
                for k2 in coll_wait.pop(ck):
                    start(k2, t, dur)
        else:
            start(key, t, n.duration_ns)
    missing = [k for k in nodes if k not in end_at]
    if missing:
        r, nid = missing[0]
        raise GraphError(f"{len(missing)} node(s) never ran (unmatched send/recv or collective)", rank=r, node=nid)
    times = {k: NodeTime(ready_at[k], start_at[k], end_at[k]) for k in nodes}
    return QuickReplayResult(times=times, iteration_ns=max(end_at.values(), default=0))
