"""Point-to-point matching: sends and receives rendezvous on (src rank, dst rank, tag), first come
first matched.

``eager``: a send moves its data as soon as it starts and ends when the data has arrived; a receive
ends once it has started and the data is there.  ``rendezvous``: the data moves once both sides
have started, and both end together.  The endpoint delay is added before the data moves.
"""

from __future__ import annotations

from collections import deque

from xsim_trace.replay.compile import K_SEND, CompiledWorkload
from xsim_trace.replay.events import EventQueue
from xsim_trace.replay.flow_port import FlowPort
from xsim_trace.replay.settings import ReplaySettings
from xsim_trace.replay.streams import NodeTimes

Key = tuple[int, int, int]  # (src rank, dst rank, tag)


class P2PMatcher:
    def __init__(self, w: CompiledWorkload, settings: ReplaySettings, times: NodeTimes,
                 queue: EventQueue, port: FlowPort) -> None:
        self.times = times
        self.queue = queue
        self.port = port
        self.delay = settings.endpoint_delay_ns
        self.eager = settings.p2p == "eager"
        self.rank_of = w.node_rank.tolist()
        self.peer = w.comm_peer.tolist()
        self.tag = w.comm_tag.tolist()
        self.csize = w.comm_size.tolist()
        self.send_wait: dict[Key, deque] = {}
        self.recv_wait: dict[Key, deque] = {}
        self.landed: dict[Key, deque] = {}  # eager data that arrived before its recv

    def arrive(self, i: int, now: int, k: int) -> None:
        """Send or recv ``i`` (exec kind ``k``) has started."""
        if self.eager:
            if k == K_SEND:
                self._eager_send(i, now)
            else:
                self._eager_recv(i, now)
        elif k == K_SEND:
            key = (self.rank_of[i], self.peer[i], self.tag[i])
            q = self.recv_wait.get(key)
            if q:
                self._rendezvous(i, q.popleft(), now)
            else:
                self.send_wait.setdefault(key, deque()).append(i)
        else:
            key = (self.peer[i], self.rank_of[i], self.tag[i])
            q = self.send_wait.get(key)
            if q:
                self._rendezvous(q.popleft(), i, now)
            else:
                self.recv_wait.setdefault(key, deque()).append(i)

    # -- eager ----------------------------------------------------------------------------------
    def _eager_send(self, i: int, now: int) -> None:
        src, dst = self.rank_of[i], self.peer[i]
        key = (src, dst, self.tag[i])
        d = self.delay
        if src == dst:
            self.queue.node_done(i, now + d)
            self._eager_landed(key, now + d, now + d, i)
        elif d:
            self.queue.at(now + d, self._eager_issue, (i, key, src, dst, max(self.csize[i], 1)))
        else:
            self.port.start(src, dst, max(self.csize[i], 1), now, self._eager_flow_landed, (i, key, now))

    def _eager_issue(self, arg, now: int) -> None:
        si, key, src, dst, size = arg
        self.port.start(src, dst, size, now, self._eager_flow_landed, (si, key, now))

    def _eager_flow_landed(self, arg, now: int) -> None:
        si, key, sent_at = arg
        self.queue.node_done(si, now)
        self._eager_landed(key, now, sent_at, si)

    def _eager_recv(self, i: int, now: int) -> None:
        key = (self.peer[i], self.rank_of[i], self.tag[i])
        q = self.landed.get(key)
        if q:
            si = q.popleft()
            self.times.peer[i], self.times.peer[si] = si, i
            self.queue.node_done(i, now)
        else:
            self.recv_wait.setdefault(key, deque()).append(i)

    def _eager_landed(self, key: Key, now: int, sent_at: int, si: int) -> None:
        q = self.recv_wait.get(key)
        if q:
            j = q.popleft()
            t = self.times
            t.peer[j], t.peer[si] = si, j
            if sent_at > t.start[j]:  # the receive waited for its peer to send
                t.wait[j] = sent_at - t.start[j]
            self.queue.node_done(j, now)
        else:
            self.landed.setdefault(key, deque()).append(si)

    # -- rendezvous -----------------------------------------------------------------------------
    def _rendezvous(self, si: int, ri: int, now: int) -> None:
        t = self.times
        t.wait[si] = now - t.start[si]
        t.peer[si], t.peer[ri] = ri, si
        t.wait[ri] = now - t.start[ri]
        src, dst = self.rank_of[si], self.rank_of[ri]
        size = max(self.csize[si], self.csize[ri], 1)
        d = self.delay
        if src == dst:
            self.queue.node_done(si, now + d)
            self.queue.node_done(ri, now + d)
        elif d:
            self.queue.at(now + d, self._rendezvous_issue, (si, ri, src, dst, size))
        else:
            self.port.start(src, dst, size, now, self._rendezvous_landed, (si, ri))

    def _rendezvous_issue(self, arg, now: int) -> None:
        si, ri, src, dst, size = arg
        self.port.start(src, dst, size, now, self._rendezvous_landed, (si, ri))

    def _rendezvous_landed(self, arg, now: int) -> None:
        self.queue.node_done(arg[0], now)
        self.queue.node_done(arg[1], now)
