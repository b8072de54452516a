"""``analytical-ca``: congestion-aware analytical backend: ASTRA-sim's congestion-aware link model
(busy flag and FIFO queue per directed link), with a flow pipelined in chunks as NCCL sends it.

A flow holds each link of its route in turn, in FIFO order with the other flows on that link.  On
link ``l`` (bandwidth ``bw``, latency ``lat``) a flow of ``S`` bytes that starts transmitting at
``t``, whose tail reached this link's source vertex at ``a_prev``, with chunk ``c = min(S, chunk)``:

- its head (first chunk) reaches the next vertex at ``t + comm(c)``, where it queues for the next
  link (``comm(x) = lat + x / bw``, ``ser(x) = x / bw``, each rounded once);
- the link is released at ``t + ser(S)``: the flow uses the link for its own serialisation time
  (its bytes' share of the link), also when a slower upstream link feeds it more slowly, so a fast
  link shared by slow flows carries them one after another at its own rate, as a fluid would;
- its tail reaches the next vertex at ``max(t + comm(S), a_prev + comm(c))`` (the last chunk
  cannot leave before it has arrived); the flow completes when its tail reaches the destination.

So a message crossing ``k`` equal links costs ``k lat + (S + (k-1) c) / bw`` (NCCL's chunk
pipeline), not ``k (lat + S / bw)`` (whole-message store and forward).  With ``chunk_bytes=0``, or
for flows no larger than a chunk, this is exactly ASTRA-sim's congestion-aware analytical network:
each flow one store-and-forward chunk, arrival ``t + floor(lat + S/bw)``, release
``t + floor(S/bw)``, scheduled in that order (latency overlaps the next flow's serialisation).
Events at equal times run in the order they were scheduled.  ``rounding="ceil"`` rounds up.

The default chunk is 128 KiB (NCCL's ``NCCL_P2P_NET_CHUNKSIZE`` default).  Completions are found by
:class:`~xsim_trace.network.speculate.SpeculativeBackend` (with a horizon: no speculation, O(log n)
per event; without: a journal of touched links and of heap entries, undone on rollback).
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import ClassVar

from xsim_trace.errors import BackendError
from xsim_trace.network._common import check_rounding, to_ns
from xsim_trace.network.protocol import BackendCapabilities, Flow, TopologyLike
from xsim_trace.network.speculate import SpeculativeBackend

_ARRIVE = 0  # the head reaches hop ``hop``'s link
_FREE = 1  # a link is released
_DONE = 2  # the tail reaches the destination

#: NCCL's default chunk for network point-to-point transfers (NCCL_P2P_NET_CHUNKSIZE)
DEFAULT_CHUNK_BYTES = 128 << 10


class _Rec:
    """One flow's route and its per-hop delays: whole message (ser, comm), one chunk (ccomm)."""

    __slots__ = ("fid", "links", "ser", "comm", "ccomm", "nh")

    def __init__(self, fid: int, hops: tuple) -> None:
        self.fid = fid
        self.links, self.ser, self.comm, self.ccomm = hops
        self.nh = len(self.links)


class AnalyticalCongestionAwareBackend(SpeculativeBackend):
    name: ClassVar[str] = "analytical-ca"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(horizon_hint=True, endpoint_sharing=True,
                                                                      lone_flow_timing=True)

    def __init__(self, topology: TopologyLike, *, rounding: str = "floor", chunk_bytes: int | None = DEFAULT_CHUNK_BYTES) -> None:
        self.topology = topology
        self.rounding = check_rounding(rounding)
        if chunk_bytes is not None and (not isinstance(chunk_bytes, int) or chunk_bytes < 0):
            raise BackendError(f"expected chunk_bytes >= 0 (0 = store and forward), found {chunk_bytes!r}",
                               field="chunk_bytes")
        self.chunk_bytes = int(chunk_bytes or 0)
        self._now_ns = 0
        self._promised_ns = 0
        self._active: set[int] = set()
        self._finished: list[tuple[int, int]] = []
        self._spec = None
        n = len(topology.links)
        self._busy: list[bool] = [False] * n
        self._queue: dict[int, deque] = {}
        self._bw = [float(x) for x in topology.bw_Bpns]
        self._lat = [float(x) for x in topology.latency]
        # heap entries: (time, seq, kind, rec or link, hop, tail time at the hop's source vertex)
        self._heap: list[tuple] = []
        self._seq = 0
        # journal while speculating: link -> (busy, queue), heap entries popped, seqs pushed
        self._journal: dict[int, tuple[bool, tuple]] | None = None
        self._popped: list[tuple] = []
        self._pushed: set[int] = set()
        self._dead: set[int] = set()
        self._hops: dict[tuple[int, int, int], tuple] = {}
        self.flows_started = 0
        self.events = 0
        self.heap_ops = 0

    # ---- the link model ---------------------------------------------------------------------------
    def _hop_delays(self, src: int, dst: int, size: int) -> tuple:
        key = (src, dst, size)
        hit = self._hops.get(key)
        if hit is None:
            links = tuple(self.topology.route(src, dst))
            s = float(size)
            c = float(min(size, self.chunk_bytes)) if self.chunk_bytes else s
            r = self.rounding
            bw, lat = self._bw, self._lat
            ser = tuple(to_ns(s / bw[l], r) for l in links)
            comm = tuple(to_ns(lat[l] + s / bw[l], r) for l in links)
            ccomm = tuple(to_ns(lat[l] + c / bw[l], r) for l in links)
            hit = (links, ser, comm, ccomm)
            if len(self._hops) < 1 << 20:
                self._hops[key] = hit
        return hit

    def lone_flow_ns(self, src: int, dst: int, size_bytes: int) -> float:
        """A flow alone: every hop's latency, the message once at the slowest hop, and one chunk at each
        other hop (the pipeline filling; the whole message per hop with store and forward)."""
        links = tuple(self.topology.route(src, dst))
        if not links:
            return 0.0
        s = float(size_bytes)
        c = float(min(size_bytes, self.chunk_bytes)) if self.chunk_bytes else s
        bw = [self._bw[l] for l in links]
        slow = min(range(len(links)), key=bw.__getitem__)
        return sum(self._lat[l] for l in links) + s / bw[slow] + sum(c / b for i, b in enumerate(bw) if i != slow)

    def lone_flow_hops(self, src: int, dst: int, size_bytes: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
        """One flow alone in the network, by the rules of :meth:`_run` with every link free: its links,
        each hop's transmit start after the flow's start, each hop's serialisation (the link is busy
        from that start for that long) and the landing after the start (0 without links)."""
        links, ser, comm, ccomm = self._hop_delays(src, dst, size_bytes)
        starts = []
        t = tail = 0
        for h in range(len(links)):
            starts.append(t)
            tail = t + comm[h] if h == 0 else max(t + comm[h], tail + ccomm[h])
            t += ccomm[h]
        return links, tuple(starts), ser, tail

    def _run(self, limit: float, stop_at_done: bool) -> int | None:
        """Run events with time <= limit.  One loop with local names: this is the hot path."""
        heap = self._heap
        busy = self._busy
        queue = self._queue
        journal = self._journal
        dead = self._dead
        seq = self._seq
        pop = heapq.heappop
        push = heapq.heappush
        finished = self._finished
        n = 0
        ops = 0
        stop: int | None = None
        while heap:
            e = heap[0]
            if dead and e[1] in dead:
                pop(heap)
                dead.discard(e[1])
                continue
            t = e[0]
            if t > limit:
                if stop_at_done and e[2] == _DONE:
                    stop = t
                break
            kind = e[2]
            if kind == _DONE and stop_at_done:
                stop = t
                break
            pop(heap)
            ops += 1
            if journal is not None:
                if e[1] in self._pushed:
                    self._pushed.discard(e[1])
                else:
                    self._popped.append(e)
            if kind == _DONE:
                finished.append((t, e[3].fid))
                continue
            n += 1
            if kind == _FREE:
                link = e[3]
                q = queue.get(link)
                if journal is not None and link not in journal:
                    journal[link] = (busy[link], tuple(q) if q else ())
                if not q:
                    busy[link] = False
                    continue
                rec, h, tail = q.popleft()
            else:
                rec, h, tail = e[3], e[4], e[5]
                link = rec.links[h]
                if journal is not None and link not in journal:
                    q = queue.get(link)
                    journal[link] = (busy[link], tuple(q) if q else ())
                if busy[link]:
                    q = queue.get(link)
                    if q is None:
                        q = queue[link] = deque()
                    q.append((rec, h, tail))
                    continue
            # transmit rec's hop h on link at t: the head (or tail) event first, then the release
            busy[link] = True
            free_t = t + rec.ser[h]
            if h == 0:
                tail_next = t + rec.comm[0]
            else:
                tail_next = max(t + rec.comm[h], tail + rec.ccomm[h])
            seq += 1
            if h + 1 == rec.nh:
                push(heap, (tail_next, seq, _DONE, rec, h + 1, tail_next))
            else:
                push(heap, (t + rec.ccomm[h], seq, _ARRIVE, rec, h + 1, tail_next))
            if journal is not None:
                self._pushed.add(seq)
            seq += 1
            push(heap, (free_t, seq, _FREE, link, 0, 0))
            if journal is not None:
                self._pushed.add(seq)
            ops += 2
        self._seq = seq
        self.events += n
        self.heap_ops += ops
        return stop

    def _next_done_ns(self) -> int | None:
        h = self._heap
        while h and self._dead and h[0][1] in self._dead:
            self._dead.discard(heapq.heappop(h)[1])
        return h[0][0] if h and h[0][2] == _DONE else None

    # ---- journal ------------------------------------------------------------------------------------
    def _journal_begin(self) -> None:
        self._journal = {}
        self._popped = []
        self._pushed = set()

    def _journal_commit(self) -> None:
        self._journal = None
        self._popped = []
        self._pushed = set()

    def _journal_rollback(self) -> None:
        for link, (busy, q) in self._journal.items():
            self._busy[link] = busy
            if q:
                self._queue[link] = deque(q)
            else:
                self._queue.pop(link, None)
        for e in self._popped:
            heapq.heappush(self._heap, e)
        self.heap_ops += len(self._popped)
        self._dead |= self._pushed
        # what speculation completed is not finished after all
        if self._finished:
            keep = {e[3].fid for e in self._popped if e[2] == _DONE}
            self._finished = [x for x in self._finished if x[1] not in keep]
        self._journal_commit()

    # ---- protocol ---------------------------------------------------------------------------------
    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self._start_checks(flow, now_ns)
        rec = _Rec(flow.flow_id, self._hop_delays(flow.src, flow.dst, flow.size_bytes))
        self._active.add(flow.flow_id)
        self.flows_started += 1
        self._seq += 1
        kind = _DONE if rec.nh == 0 else _ARRIVE
        heapq.heappush(self._heap, (now_ns, self._seq, kind, rec, 0, now_ns))
        self.heap_ops += 1
