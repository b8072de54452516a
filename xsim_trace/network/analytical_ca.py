"""``analytical-ca``: congestion-aware analytical backend, the semantics of ASTRA-sim's
congestion-aware analytical network.

Every directed link is a FIFO server.  A flow is one store-and-forward unit: at each hop it waits
for the link to be free (first come, first served by arrival time at the link; ties in event order),
holds it for ``floor(S / bw)`` ns (serialisation), and reaches the next vertex
``floor(latency + S / bw)`` ns after it started on that link, i.e. latency overlaps the next
flow's serialisation.  The flow completes when it reaches its destination.  Times are integer ns,
truncated per hop as in ASTRA-sim (``rounding="ceil"`` rounds up instead).

``next_completion_ns`` must look past internal hop events without committing them (a flow started
later could still overtake them at a link), so it runs on a speculative copy (heap copy + overlay
of link free times) which ``advance`` adopts when it reaches that completion, else discards.
"""

from __future__ import annotations

import heapq
from typing import Any, ClassVar

from xsim_trace.network._common import FlowChecks, check_rounding, to_ns
from xsim_trace.network.protocol import Flow


class _Rec:
    __slots__ = ("fid", "links", "ser", "comm")

    def __init__(self, fid: int, links: tuple[int, ...], ser: tuple[int, ...], comm: tuple[int, ...]) -> None:
        self.fid = fid
        self.links = links
        self.ser = ser
        self.comm = comm


class AnalyticalCongestionAwareBackend(FlowChecks):
    name: ClassVar[str] = "analytical-ca"

    def __init__(self, topology: Any, *, rounding: str = "floor") -> None:
        self.topology = topology
        self.rounding = check_rounding(rounding)
        self._now_ns = 0
        self._active: set[int] = set()
        self._free: list[int] = [0] * len(topology.links)
        self._bw = [float(x) for x in topology.bw_Bpns]
        self._lat = [float(x) for x in topology.latency]
        # heap entries: (time, seq, rec, hop); hop == len(rec.links) is the completion
        self._heap: list[tuple[int, int, _Rec, int]] = []
        self._seq = 0
        self._spec: tuple[list, dict[int, int], int, int | None] | None = None
        self._hops: dict[tuple[int, int, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}
        self.flows_started = 0
        self.events = 0

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self._check_start(flow, now_ns)
        self._spec = None
        key = (flow.src, flow.dst, flow.size_bytes)
        hit = self._hops.get(key)
        if hit is None:
            links = self.topology.route(flow.src, flow.dst)
            s = float(flow.size_bytes)
            r = self.rounding
            ser = tuple(to_ns(s / self._bw[l], r) for l in links)
            comm = tuple(to_ns(self._lat[l] + s / self._bw[l], r) for l in links)
            hit = (links, ser, comm)
            if len(self._hops) < 1 << 20:
                self._hops[key] = hit
        rec = _Rec(flow.flow_id, *hit)
        self._active.add(flow.flow_id)
        self.flows_started += 1
        self._seq += 1
        heapq.heappush(self._heap, (now_ns, self._seq, rec, 0))

    @staticmethod
    def _step(heap: list, free_get: Any, free_set: Any, seq: int) -> int:
        """Process the (non-completion) event on top of ``heap``; returns the new seq counter."""
        t, _, rec, hop = heapq.heappop(heap)
        link = rec.links[hop]
        f = free_get(link)
        start = t if t >= f else f
        free_set(link, start + rec.ser[hop])
        seq += 1
        heapq.heappush(heap, (start + rec.comm[hop], seq, rec, hop + 1))
        return seq

    def next_completion_ns(self) -> int | None:
        h = self._heap
        if not h:
            return None
        top = h[0]
        if top[3] == len(top[2].links):
            return top[0]
        if self._spec is not None:
            return self._spec[3]
        heap = list(h)
        overlay: dict[int, int] = {}
        base = self._free

        def get(l: int) -> int:
            v = overlay.get(l)
            return base[l] if v is None else v

        seq = self._seq
        while heap and heap[0][3] != len(heap[0][2].links):
            seq = self._step(heap, get, overlay.__setitem__, seq)
            self.events += 1
        c = heap[0][0] if heap else None
        self._spec = (heap, overlay, seq, c)
        return c

    def advance(self, now_ns: int) -> list[int]:
        self._check_advance(now_ns)
        spec = self._spec
        self._spec = None
        if spec is not None and spec[3] is not None and now_ns >= spec[3]:
            heap, overlay, seq, _ = spec
            for l, v in overlay.items():
                self._free[l] = v
            self._heap, self._seq = heap, seq
        self._now_ns = now_ns
        h = self._heap
        free = self._free
        done: list[tuple[int, int]] = []
        while h and h[0][0] <= now_ns:
            t, _, rec, hop = h[0]
            if hop == len(rec.links):
                heapq.heappop(h)
                done.append((t, rec.fid))
                self._active.discard(rec.fid)
                continue
            self._seq = self._step(h, free.__getitem__, free.__setitem__, self._seq)
            self.events += 1
        done.sort()
        return [fid for _, fid in done]
