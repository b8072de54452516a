"""``analytical-ca``: congestion-aware analytical backend, the semantics of ASTRA-sim's
congestion-aware analytical network.

Every directed link has a busy flag and a FIFO queue.  A flow is one store-and-forward unit
(ASTRA-sim's chunk): arriving at a link it queues if the link is busy, else is transmitted at once.
Transmitting ``S`` bytes at time ``t`` schedules the flow's arrival at the next vertex at
``t + floor(latency + S / bw)`` and the link's release at ``t + floor(S / bw)`` (in that order), so
latency overlaps the next flow's serialisation; a released link transmits its oldest queued flow.
The flow completes when it arrives at its destination.  Events at equal times run in the order they
were scheduled.  ``rounding="ceil"`` rounds the two delays up instead of truncating.

``next_completion_ns`` must look past internal events without committing them (a flow started
later could still reach a link first), so it runs them under a journal (heap copy + the state of
every link it touched), kept when ``advance`` reaches that completion, rolled back otherwise.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any, ClassVar

from xsim_trace.network._common import FlowChecks, check_rounding, to_ns
from xsim_trace.network.protocol import Flow

_ARRIVE = 0
_FREE = 1


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
        n = len(topology.links)
        self._busy: list[bool] = [False] * n
        self._queue: dict[int, deque] = {}
        self._bw = [float(x) for x in topology.bw_Bpns]
        self._lat = [float(x) for x in topology.latency]
        # heap entries: (time, seq, kind, rec or link, hop); ARRIVE with hop == len(links) = completion
        self._heap: list[tuple] = []
        self._seq = 0
        self._journal: dict[int, tuple[bool, tuple]] | None = None
        self._spec: tuple[list, int, int | None] | None = None
        self._hops: dict[tuple[int, int, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}
        self.flows_started = 0
        self.events = 0

    # ---- the link model ---------------------------------------------------------------------------
    def _push(self, t: int, kind: int, obj: Any, hop: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, obj, hop))

    def _save(self, link: int) -> None:
        j = self._journal
        if j is not None and link not in j:
            q = self._queue.get(link)
            j[link] = (self._busy[link], tuple(q) if q else ())

    def _transmit(self, t: int, rec: _Rec, hop: int) -> None:
        link = rec.links[hop]
        self._save(link)
        self._busy[link] = True
        self._push(t + rec.comm[hop], _ARRIVE, rec, hop + 1)
        self._push(t + rec.ser[hop], _FREE, link, 0)

    def _step(self) -> None:
        """Run the event on top of the heap (never a completion)."""
        t, _, kind, obj, hop = heapq.heappop(self._heap)
        self.events += 1
        if kind == _FREE:
            self._save(obj)
            q = self._queue.get(obj)
            if q:
                rec, h = q.popleft()
                self._busy[obj] = False
                self._transmit(t, rec, h)
            else:
                self._busy[obj] = False
            return
        link = obj.links[hop]
        if self._busy[link]:
            self._save(link)
            self._queue.setdefault(link, deque()).append((obj, hop))
        else:
            self._transmit(t, obj, hop)

    @staticmethod
    def _is_done(e: tuple) -> bool:
        return e[2] == _ARRIVE and e[4] == len(e[3].links)

    # ---- protocol ---------------------------------------------------------------------------------
    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self._check_start(flow, now_ns)
        self._rollback()
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
        self._active.add(flow.flow_id)
        self.flows_started += 1
        self._push(now_ns, _ARRIVE, _Rec(flow.flow_id, *hit), 0)

    def _rollback(self) -> None:
        spec = self._spec
        self._spec = None
        if spec is None:
            return
        self._heap, self._seq, _ = spec
        for link, (busy, q) in self._journal.items():
            self._busy[link] = busy
            if q:
                self._queue[link] = deque(q)
            else:
                self._queue.pop(link, None)
        self._journal = None

    def next_completion_ns(self) -> int | None:
        if self._spec is not None:
            return self._spec[2]
        h = self._heap
        if not h:
            return None
        if self._is_done(h[0]):
            return h[0][0]
        saved = (list(h), self._seq)
        self._journal = {}
        while self._heap and not self._is_done(self._heap[0]):
            self._step()
        c = self._heap[0][0] if self._heap else None
        self._spec = (*saved, c)
        return c

    def advance(self, now_ns: int) -> list[int]:
        self._check_advance(now_ns)
        spec = self._spec
        if spec is not None:
            if spec[2] is not None and now_ns >= spec[2]:
                self._spec = None
                self._journal = None
            else:
                self._rollback()
        self._now_ns = now_ns
        h = self._heap
        done: list[tuple[int, int]] = []
        while h and h[0][0] <= now_ns:
            e = h[0]
            if self._is_done(e):
                heapq.heappop(h)
                done.append((e[0], e[3].fid))
                self._active.discard(e[3].fid)
                continue
            self._step()
            h = self._heap
        done.sort()
        return [fid for _, fid in done]
