"""Per-rank resources (CPU threads, compute and comm streams) and the per-node times of one replay.

A node becomes ready when its last dependency finishes; it starts when its resource is free (nodes
queue on a busy resource in the order they became ready).  Starting a timed node schedules its end;
a communication node is handed to the collective or p2p part, which schedules its end later.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from xsim_trace.replay.compile import K_COLL, K_TIMED, CompiledWorkload
from xsim_trace.replay.events import EventQueue

#: nodes finished between two progress reports
REPORT_EVERY = 65536


class NodeTimes:
    """Per-node times (global node index, ns), -1 until set; filled by the parts of the engine."""

    __slots__ = ("ready", "start", "end", "wait", "peer")

    def __init__(self, n: int) -> None:
        self.ready = [-1] * n  # deps done
        self.start = [-1] * n  # resource acquired
        self.end = [-1] * n
        self.wait = [0] * n  # collective: straggler wait; send/recv: time waiting for the peer
        self.peer = [-1] * n  # send/recv: the node it was matched with


class Streams:
    """The resources of every rank and the dependency bookkeeping that feeds them."""

    def __init__(self, w: CompiledWorkload, times: NodeTimes, queue: EventQueue,
                 progress: Callable[[int], None] | None = None) -> None:
        self.times = times
        self.queue = queue
        self.kind = w.exec_kind.tolist()
        self.dur = w.duration_ns.tolist()
        self.res_of = w.resource.tolist()
        self.indeg = w.indegree.astype("int64").tolist()
        self.sptr = w.succ_ptr.tolist()
        self.sidx = w.succ_idx.tolist()
        self.busy = [False] * w.num_resources
        self.queues = [deque() for _ in range(w.num_resources)]
        self.finished = 0
        self.progress = progress
        #: ``(node, now_ns)`` -> None: a collective member / a send or recv has started
        self.on_collective: Callable[[int, int], None] = _unwired
        self.on_p2p: Callable[[int, int, int], None] = _unwired

    def seed(self) -> None:
        for i, d in enumerate(self.indeg):
            if d == 0:
                self.make_ready(i, 0)

    def make_ready(self, i: int, now: int) -> None:
        self.times.ready[i] = now
        r = self.res_of[i]
        if self.busy[r]:
            self.queues[r].append(i)
        else:
            self.busy[r] = True
            self.start_node(i, now)

    def start_node(self, i: int, now: int) -> None:
        self.times.start[i] = now
        k = self.kind[i]
        if k == K_TIMED:
            self.queue.node_done(i, now + self.dur[i])
        elif k == K_COLL:
            self.on_collective(i, now)
        else:
            self.on_p2p(i, now, k)

    def finish(self, i: int, now: int) -> None:
        """Node ``i`` ends: hand its resource to the next queued node, wake its successors."""
        self.times.end[i] = now
        self.finished += 1
        r = self.res_of[i]
        q = self.queues[r]
        if q:
            self.start_node(q.popleft(), now)
        else:
            self.busy[r] = False
        indeg, sidx = self.indeg, self.sidx
        for kk in range(self.sptr[i], self.sptr[i + 1]):
            s = sidx[kk]
            d = indeg[s] - 1
            indeg[s] = d
            if d == 0:
                self.make_ready(s, now)
        if self.progress is not None and self.finished % REPORT_EVERY == 0:
            self.progress(REPORT_EVERY)

    def report_rest(self) -> None:
        if self.progress is not None:
            self.progress(self.finished % REPORT_EVERY)


def _unwired(*_args) -> None:
    raise AssertionError("Streams used before the engine wired its collective and p2p parts")
