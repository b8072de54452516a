"""Small network backends and workload builders for the replay tests (not the product's backends)."""

from __future__ import annotations

import heapq
import math
from typing import ClassVar

import numpy as np

from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Trace, make_metadata, make_node
from xsim_trace.network.protocol import BackendCapabilities, Flow


class StarAlphaBeta:
    """Contention-free star: every transfer crosses two links: 2 * latency + size / bw."""

    name: ClassVar[str] = "test-alpha-beta"
    capabilities = BackendCapabilities(closed_form=True, contention_free=True)

    def __init__(self, bw_GBps: float, latency_ns: int) -> None:
        self.bw = bw_GBps  # bytes per ns
        self.lat = latency_ns
        self.active: dict[int, int] = {}

    def time_ns(self, size: int) -> int:
        return 2 * self.lat + math.ceil(size / self.bw)

    def transfer_ns(self, src, dst, size_bytes):
        return self.time_ns(size_bytes)

    def transfer_time_ns(self, src, dst, size_bytes):
        return 2 * self.lat + np.ceil(np.asarray(size_bytes) / self.bw).astype(np.int64)

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self.active[flow.flow_id] = now_ns + self.time_ns(flow.size_bytes)

    def next_completion_ns(self):
        return min(self.active.values()) if self.active else None

    def advance(self, now_ns: int) -> list[int]:
        done = sorted((t, f) for f, t in self.active.items() if t <= now_ns)
        for _, f in done:
            del self.active[f]
        return [f for _, f in done]


class FifoStar:
    """Congestion-aware star like ASTRA-sim's analytical backend: links up_i (NPU->switch) and
    down_j (switch->NPU), FIFO, store-and-forward; a chunk holds a link for size/bw and reaches the
    next device after trunc(latency + size/bw)."""

    name: ClassVar[str] = "test-fifo-star"

    def __init__(self, bw_Bpns: float, latency_ns: float) -> None:
        self.bw = bw_Bpns
        self.lat = latency_ns
        self.free: dict[tuple[str, int], int] = {}
        self.events: list = []  # (time, seq, fid, hop)
        self.routes: dict[int, list[tuple[str, int]]] = {}
        self.sizes: dict[int, int] = {}
        self.seq = 0
        self.now = 0

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self._run(now_ns, inclusive=False)
        self.routes[flow.flow_id] = [("up", flow.src), ("down", flow.dst)]
        self.sizes[flow.flow_id] = flow.size_bytes
        self.seq += 1
        heapq.heappush(self.events, (now_ns, self.seq, flow.flow_id, 0))

    def next_completion_ns(self):
        return self.events[0][0] if self.events else None

    def _run(self, t: int, inclusive: bool) -> list[int]:
        done = []
        while self.events and (self.events[0][0] < t or (inclusive and self.events[0][0] == t)):
            when, _, fid, hop = heapq.heappop(self.events)
            route = self.routes[fid]
            if hop == len(route):
                done.append((when, fid))
                del self.routes[fid]
                continue
            link = route[hop]
            size = self.sizes[fid]
            begin = max(when, self.free.get(link, 0))
            self.free[link] = begin + int(size / self.bw)
            self.seq += 1
            heapq.heappush(self.events, (begin + int(self.lat + size / self.bw), self.seq, fid, hop + 1))
        return [f for _, f in sorted(done)]

    def advance(self, now_ns: int) -> list[int]:
        return self._run(now_ns, inclusive=True)


class MaxMinStar:
    """Max-min fair sharing on a star (up_i, down_j links of equal capacity), no latency."""

    name: ClassVar[str] = "test-maxmin-star"

    def __init__(self, bw_GBps: float) -> None:
        self.cap = bw_GBps
        self.left: dict[int, float] = {}
        self.links: dict[int, tuple] = {}
        self.rate: dict[int, float] = {}
        self.now = 0.0

    def _rates(self) -> None:
        remaining = set(self.left)
        cap: dict = {}
        for f in remaining:
            for link in self.links[f]:
                cap[link] = self.cap
        self.rate = {}
        while remaining:
            users: dict = {}
            for f in remaining:
                for link in self.links[f]:
                    users.setdefault(link, []).append(f)
            link = min(users, key=lambda k: (cap[k] / len(users[k]), k))
            share = cap[link] / len(users[link])
            for f in sorted(users[link]):
                self.rate[f] = share
                remaining.discard(f)
                for other in self.links[f]:
                    cap[other] -= share

    def _move(self, t: float) -> None:
        dt = t - self.now
        for f in self.left:
            self.left[f] -= self.rate[f] * dt
        self.now = t

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self._move(now_ns)
        self.left[flow.flow_id] = float(flow.size_bytes)
        self.links[flow.flow_id] = (("up", flow.src), ("down", flow.dst))
        self._rates()

    def next_completion_ns(self):
        if not self.left:
            return None
        return math.ceil(self.now + min(self.left[f] / self.rate[f] for f in self.left) - 1e-9)

    def advance(self, now_ns: int) -> list[int]:
        self._move(now_ns)
        done = sorted(f for f, v in self.left.items() if v <= 1e-6)
        for f in done:
            del self.left[f], self.links[f]
        if done:
            self._rates()
        return done


def comp(node_id: int, deps=(), dur_ns: int = 1000, **attrs):
    return make_node(node_id, f"comp{node_id}", NodeType.COMP, data_deps=deps, duration_micros=dur_ns // 1000, duration_ns=dur_ns, **attrs)


def coll(node_id: int, size: int, deps=(), ctype=CollectiveType.ALL_REDUCE, pg: str = "", **attrs):
    return make_node(node_id, f"coll{node_id}", NodeType.COMM_COLL, data_deps=deps, comm_type=int(ctype), comm_size=size, pg_name=pg, **attrs)


def trace(rank: int, nodes) -> Trace:
    return Trace(metadata=make_metadata(rank=rank), nodes=tuple(nodes), rank=rank)


def all_reduce_workload(n: int, size: int) -> dict[int, Trace]:
    return {r: trace(r, [coll(1, size)]) for r in range(n)}


def send(node_id, dst, size, tag=0, deps=()):
    return make_node(node_id, f"send{node_id}", NodeType.COMM_SEND, data_deps=deps, comm_dst=dst, comm_size=size, comm_tag=tag)


def recv(node_id, src, size, tag=0, deps=()):
    return make_node(node_id, f"recv{node_id}", NodeType.COMM_RECV, data_deps=deps, comm_src=src, comm_size=size, comm_tag=tag)


__all__ = ["A", "FifoStar", "MaxMinStar", "StarAlphaBeta", "all_reduce_workload", "coll", "comp", "recv", "send", "trace"]


def chains(ranks: int, iterations: int, size: int, ctype=CollectiveType.ALL_REDUCE) -> dict[int, Trace]:
    """Every rank: per iteration, a compute (10 us + 37 ns per iteration) then a collective over all ranks."""
    nodes, last = [], ()
    for k in range(iterations):
        nodes.append(make_node(2 * k, f"c{k}", NodeType.COMP, data_deps=last, duration_ns=10_000 + 37 * k, is_cpu_op=False))
        nodes.append(make_node(2 * k + 1, f"x{k}", NodeType.COMM_COLL, data_deps=(2 * k,), comm_type=int(ctype),
                               comm_size=size))
        last = (2 * k + 1,)
    return {r: Trace(make_metadata(world_size=ranks), tuple(nodes), rank=r) for r in range(ranks)}


FOLD_TIMES = ("ready_ns", "start_ns", "end_ns", "wait_ns", "peer_node")


def assert_same_node_times(a, b) -> None:
    """Every node's ready, start, end, wait and peer equal in two replays' raw times (folded vs reference)."""
    for name in FOLD_TIMES:
        assert np.array_equal(np.asarray(getattr(a, name), np.int64), np.asarray(getattr(b, name), np.int64)), name


def generate_pipeline_step(folder):
    """A generated Llama-2-7B TP2 PP2 DP4 step of 2 layers (send/recv between stages, TP and DP collectives)
    written under ``folder``; returns the rank-set prefix."""
    from xsim_trace.cli.main import main as xsim

    prefix = folder / "step"
    assert xsim(["--quiet", "generate", "--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "4", "--layers", "2",
                 "--out", str(prefix)]) == 0
    return prefix
