"""``analytical``: congestion-unaware alpha-beta per hop.

A flow of ``S`` bytes over links ``l1..lk`` finishes at ``start + sum(latency_ns) + S / min(bw)``
(ASTRA-sim's congestion-unaware analytical backend with per-link latencies and a bottleneck bandwidth
instead of one uniform dimension); flows never slow each other down.  Rounded to integer ns once
(``rounding="floor"`` truncates like ASTRA-sim; ``"ceil"`` rounds up).
"""

from __future__ import annotations

import heapq
from typing import Any, ClassVar

from xsim_trace.network._common import FlowChecks, check_rounding, to_ns
from xsim_trace.network.protocol import Flow


class AnalyticalBackend(FlowChecks):
    name: ClassVar[str] = "analytical"

    def __init__(self, topology: Any, *, rounding: str = "floor") -> None:
        self.topology = topology
        self.rounding = check_rounding(rounding)
        self._now_ns = 0
        self._active: set[int] = set()
        self._heap: list[tuple[int, int]] = []
        self._path: dict[tuple[int, int], tuple[float, float]] = {}
        self.flows_started = 0

    def _alpha_beta(self, src: int, dst: int) -> tuple[float, float]:
        key = (src, dst)
        ab = self._path.get(key)
        if ab is None:
            route = self.topology.route(src, dst)
            if not route:
                ab = (0.0, 0.0)
            else:
                lat = float(sum(float(self.topology.latency[i]) for i in route))
                bw = float(min(float(self.topology.bw_Bpns[i]) for i in route))
                ab = (lat, bw)
            self._path[key] = ab
        return ab

    def transfer_ns(self, src: int, dst: int, size_bytes: int) -> int:
        """Duration of one uncontended flow (the same number ``start_flow`` schedules)."""
        lat, bw = self._alpha_beta(src, dst)
        if bw == 0.0:
            return 0
        return to_ns(lat + size_bytes / bw, self.rounding)

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self._check_start(flow, now_ns)
        self._active.add(flow.flow_id)
        self.flows_started += 1
        heapq.heappush(self._heap, (now_ns + self.transfer_ns(flow.src, flow.dst, flow.size_bytes), flow.flow_id))

    def next_completion_ns(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def advance(self, now_ns: int) -> list[int]:
        self._check_advance(now_ns)
        self._now_ns = now_ns
        out = []
        h = self._heap
        while h and h[0][0] <= now_ns:
            _, fid = heapq.heappop(h)
            out.append(fid)
            self._active.discard(fid)
        return out
