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

    def _run(self, limit: float, stop_at_done: bool) -> list[tuple[int, int]]:
        """Run events with time <= limit; completions are popped and returned, or (``stop_at_done``)
        left on top.  One loop with local names: this is the hot path."""
        heap = self._heap
        busy = self._busy
        queue = self._queue
        journal = self._journal
        seq = self._seq
        pop = heapq.heappop
        push = heapq.heappush
        done: list[tuple[int, int]] = []
        n = 0
        while heap:
            e = heap[0]
            t = e[0]
            if t > limit:
                break
            kind, obj, hop = e[2], e[3], e[4]
            if kind == _ARRIVE and hop == len(obj.links):
                if stop_at_done:
                    break
                pop(heap)
                done.append((t, obj.fid))
                continue
            pop(heap)
            n += 1
            if kind == _FREE:
                link = obj
                q = queue.get(link)
                if journal is not None and link not in journal:
                    journal[link] = (busy[link], tuple(q) if q else ())
                if not q:
                    busy[link] = False
                    continue
                rec, h = q.popleft()
            else:
                link = obj.links[hop]
                if busy[link]:
                    if journal is not None and link not in journal:
                        q = queue.get(link)
                        journal[link] = (True, tuple(q) if q else ())
                    q = queue.get(link)
                    if q is None:
                        q = queue[link] = deque()
                    q.append((obj, hop))
                    continue
                if journal is not None and link not in journal:
                    q = queue.get(link)
                    journal[link] = (False, tuple(q) if q else ())
                rec, h = obj, hop
            # transmit rec on link: arrival first, then the release (ASTRA-sim's order)
            busy[link] = True
            seq += 1
            push(heap, (t + rec.comm[h], seq, _ARRIVE, rec, h + 1))
            seq += 1
            push(heap, (t + rec.ser[h], seq, _FREE, link, 0))
        self._seq = seq
        self.events += n
        return done

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
        self._run(float("inf"), True)
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
        done = self._run(now_ns, False)
        for _, fid in done:
            self._active.discard(fid)
        done.sort()
        return [fid for _, fid in done]
