"""Small hand-made topologies and a protocol driver for the ns3 / backend-comparison tests."""

from __future__ import annotations

from dataclasses import dataclass

from xsim_trace.network.protocol import Flow


@dataclass(frozen=True, slots=True)
class Link:
    src: object
    dst: object
    bw_GBps: float
    latency_ns: int


class StarTopology:
    """``n`` ranks (vertices 0..n-1) on one switch ``"sw"``; every link ``bw_GBps``/``latency_ns`` each way."""

    def __init__(self, n: int, bw_GBps: float, latency_ns: int) -> None:
        self.vertices = [*range(n), "sw"]
        self.links = []
        for r in range(n):
            self.links.append(Link(r, "sw", bw_GBps, latency_ns))
            self.links.append(Link("sw", r, bw_GBps, latency_ns))
        self._by_ends = {(l.src, l.dst): l for l in self.links}

    def route(self, src: int, dst: int) -> list[Link]:
        return [self._by_ends[(src, "sw")], self._by_ends[("sw", dst)]]


def drive(backend, flows_at: list[tuple[int, Flow]]) -> dict[int, int]:
    """Feed ``(start_ns, flow)`` pairs through the protocol; return flow_id -> finish ns."""
    pending = sorted(flows_at, key=lambda p: (p[0], p[1].flow_id))
    finish: dict[int, int] = {}
    i = 0
    now = 0
    while i < len(pending) or len(finish) < len(pending):
        nxt = backend.next_completion_ns()
        start = pending[i][0] if i < len(pending) else None
        if start is not None and (nxt is None or start <= nxt):
            now = start
            finished = backend.advance(now)
            while i < len(pending) and pending[i][0] == now:
                backend.start_flow(pending[i][1], now)
                i += 1
        else:
            assert nxt is not None, "backend idle with flows unfinished"
            now = nxt
            finished = backend.advance(now)
        for fid in finished:
            finish[fid] = now
    return finish
