"""The event-driven replay engine: integer nanoseconds, one heap, deterministic.

The engine is a small loop over named parts (the way simpy's ``step()`` and ASTRA-sim's workload /
system / network split read):

- :mod:`~xsim_trace.replay.events`: the clock, one heap of (time, seq, handler, arg);
- :mod:`~xsim_trace.replay.streams`: per-rank resources (CPU thread, compute and comm streams) and
  dependencies: a node starts when all its deps are done and its resource is free, in the order
  nodes became ready;
- :mod:`~xsim_trace.replay.p2p`: sends and receives rendezvous on (src, dst, tag);
- :mod:`~xsim_trace.replay.collectives`: a collective starts when its last member is ready and is
  either priced whole (:mod:`~xsim_trace.replay.collective_pricing`) or expanded into per-chunk
  flows by algorithm (see :mod:`xsim_trace.replay.algorithms`);
- :mod:`~xsim_trace.replay.flow_port`: flows go to a
  :class:`~xsim_trace.network.protocol.NetworkBackend`; the engine owns the clock.

When the backend declares ``capabilities.closed_form`` (a
:class:`~xsim_trace.network.protocol.TransferPricing`: ``transfer_time_ns`` prices a step's transfers
together), a collective's member finish times are computed in closed form when it starts (identical
to feeding its flows one by one on a contention-free backend); otherwise every transfer is a flow.
A backend declaring ``horizon_hint`` is told the engine's next event on every turn.
"""

from __future__ import annotations

import heapq
import logging
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from xsim_trace.errors import GraphError
from xsim_trace.network.protocol import capabilities_of
from xsim_trace.replay.collective_pricing import (
    CollectivePricer,
    ScheduleWalkPricer,
    chunk_sizes,
    is_contention_free,
)
from xsim_trace.replay.collectives import Collectives
from xsim_trace.replay.compiled_loop import kernel as compiled_kernel
from xsim_trace.replay.compiled_loop import run_compiled
from xsim_trace.replay.compile import K_COLL, K_RECV, K_SEND, CompiledWorkload
from xsim_trace.replay.events import EventQueue
from xsim_trace.replay.flow_port import NO_HORIZON_NS, FlowPort, make_flow
from xsim_trace.replay.p2p import P2PMatcher
from xsim_trace.replay.schedule_cache import ScheduleCache
from xsim_trace.replay.settings import ReplaySettings
from xsim_trace.replay.streams import NodeTimes, Streams

__all__ = [
    "NO_HORIZON_NS",
    "Engine",
    "EngineStats",
    "RawTimes",
    "chunk_sizes",
    "is_contention_free",
    "make_flow",
]

log = logging.getLogger(__name__)

#: from this many nodes on, the closed-form path runs compiled by default (``Engine(compiled=)``) where
#: numba is loaded already (by the columnar decoder of a large rank set, or an earlier replay) ...
COMPILED_MIN_NODES = 20_000
#: ... and from this many where it is not: loading numba and the kernel costs ~0.5 s of CPU, which the
#: compiled loop (~1.2 us less per node than the Python one) repays from a few 100,000 nodes
COMPILED_MIN_NODES_COLD = 200_000


@dataclass(frozen=True, slots=True)
class EngineStats:
    events: int
    flows: int
    collectives: int
    closed_form_collectives: int
    #: ranks not simulated because an equivalent rank was (symmetry folding, :mod:`xsim_trace.replay.fold`)
    folded_ranks: int = 0


@dataclass(frozen=True, slots=True)
class RawTimes:
    """Per-node times of one replay (global node index), ns."""

    ready_ns: np.ndarray  # deps done
    start_ns: np.ndarray  # resource acquired
    end_ns: np.ndarray
    wait_ns: np.ndarray  # collective: its start - this member's start (straggler wait); send/recv: time waiting for the peer
    peer_node: np.ndarray  # send/recv: global index of the node it was matched with, else -1
    stats: EngineStats
    #: per rank, the rank whose times it took (symmetry folding), or None when every rank was simulated
    rep_of: np.ndarray | None = None


class Engine:
    """Replays a compiled workload over a network backend.

    ``closed_form``: price collectives whole (default: when the backend is contention-free);
    ``pricer``: what prices them (default: a walk of the algorithm's chunk schedule with the
    backend's uncontended transfer times, :class:`ScheduleWalkPricer`).  On the flow path a
    :class:`~xsim_trace.replay.model_flows.ModelPacedFlows` as ``pricer`` runs each collective as the
    NCCL model's paced flows instead of its schedule's."""

    def __init__(
        self,
        workload: CompiledWorkload,
        backend,
        settings: ReplaySettings | None = None,
        *,
        node_of: Sequence[int] | None = None,
        closed_form: bool | None = None,
        pricer: CollectivePricer | None = None,
        progress: Callable[[int], None] | None = None,
        compiled: bool | None = None,
        fold: bool = False,
        rank_class: Sequence[int] | None = None,
    ) -> None:
        self.w = workload
        self.backend = backend
        self.settings = settings or ReplaySettings()
        self.node_of = list(node_of) if node_of is not None else None
        ok = is_contention_free(backend)
        self.closed_form = ok if closed_form is None else (closed_form and ok)
        self.progress = progress
        self.schedules = ScheduleCache(workload, backend, self.settings, self.node_of)
        lowering = _is_model_paced(pricer)
        self.lowering = pricer if lowering and not self.closed_form else None
        if lowering and self.closed_form:
            pricer = pricer.pricer  # its model, priced whole
        self.pricer = (pricer or ScheduleWalkPricer(self.schedules, self.settings)) if self.closed_form else None
        self._booked = False
        self.compiled = self._compiled_applies(compiled)
        #: simulate one rank per class of equivalent ranks (the closed-form path, compiled or Python)
        self.fold = bool(fold) and (self.compiled or self._python_fold_applies())
        self.rank_class = None if rank_class is None else np.asarray(rank_class, np.int64)
        self.compiled_ca = not self.compiled and self._compiled_ca_applies(compiled)
        #: on the compiled analytical-ca loop, fold where exact (:mod:`~xsim_trace.replay.fold_ca`)
        self.fold_ca = bool(fold) and self.compiled_ca

    def _python_fold_applies(self) -> bool:
        """Folding on the Python loop (:mod:`~xsim_trace.replay.fold_loop`): collectives priced whole,
        p2p flows timed alone or booking endpoint ports (what the fold's couplings describe)."""
        if not self.closed_form or self.pricer is None or self.lowering is not None:
            return False
        caps = capabilities_of(self.backend)
        self._booked = caps.port_booking and not caps.contention_free
        return caps.contention_free or self._booked or not bool(np.any(self.w.exec_kind == K_SEND))

    def _compiled_applies(self, wanted: bool | None) -> bool:
        """The compiled loop runs the closed-form path only; by default from :data:`COMPILED_MIN_NODES`
        nodes on (:data:`COMPILED_MIN_NODES_COLD` where numba is not loaded yet), below which loading it
        costs more than it saves."""
        if wanted is False or not self.closed_form:
            return False
        if wanted is None and self.w.num_nodes < (COMPILED_MIN_NODES if "numba" in sys.modules else COMPILED_MIN_NODES_COLD):
            return False
        # p2p transfers are flows: the kernel times each alone (a contention-free backend) or books
        # endpoint ports as the backend does (PortBookedFlows: analytical); anything else stays here
        caps = capabilities_of(self.backend)
        self._booked = caps.port_booking and not caps.contention_free
        if not (caps.contention_free or self._booked) and bool(np.any(self.w.exec_kind == K_SEND)):
            return False
        return compiled_kernel() is not None

    def _compiled_ca_applies(self, wanted: bool | None) -> bool:
        """The analytical-ca kernel (:mod:`~xsim_trace.replay.compiled_ca`) runs the flow path over a
        fresh analytical-ca backend; by default where it pays for its loading
        (:func:`~xsim_trace.replay.compiled_ca.worth_it`). The kernel walks the schedule's flows; a
        collective lowered into the NCCL model's paced flows (``self.lowering``) runs on the Python loop."""
        if wanted is False or self.closed_form or self.lowering is not None:
            return False
        from xsim_trace.replay import compiled_ca  # noqa: PLC0415

        if not compiled_ca.applies(self.backend):
            return False
        if wanted is None and not compiled_ca.worth_it(self.w, self.settings):
            return False
        return compiled_ca.kernel() is not None

    def run(self) -> RawTimes:
        if self.compiled:
            return self._run_compiled()
        if self.compiled_ca:
            from xsim_trace.replay.compiled_ca import run_compiled_ca  # noqa: PLC0415

            out = run_compiled_ca(self.w, self.backend, self.schedules, self.settings, self.progress, fold=self.fold_ca,
                                  rank_class=self.rank_class)
            if out is not None:
                return self._raw_of(*out)
        if self.fold:
            out = self._run_folded_python()
            if out is not None:
                return out
        times, stats, finished = self._run_python(self.w, self.backend, self.pricer, self.progress)
        if finished != self.w.num_nodes:
            self._deadlock(times)
        return RawTimes(*_arrays(times), stats=stats)

    def _run_python(self, w: CompiledWorkload, backend, pricer, progress) -> tuple[NodeTimes, EngineStats, int]:
        """The pure-Python loop over ``w``: (times, stats, nodes finished)."""
        times = NodeTimes(w.num_nodes)
        queue = EventQueue()
        port = FlowPort(backend)
        streams = Streams(w, times, queue, progress)
        colls = Collectives(w, self.settings, times, queue, port, self.schedules, pricer, self.lowering)
        p2p = P2PMatcher(w, self.settings, times, queue, port)
        streams.on_collective = colls.arrive
        streams.on_p2p = p2p.arrive

        streams.seed()
        events = _loop(queue, port, streams)
        streams.report_rest()
        stats = EngineStats(events=events, flows=port.flows, collectives=colls.started, closed_form_collectives=colls.priced)
        return times, stats, streams.finished

    def _run_folded_python(self) -> RawTimes | None:
        """The Python loop over the quotient of equivalent ranks, expanded to every rank; None where
        no rank folds or the quotient cannot stand for the full run (then every rank is replayed)."""
        from xsim_trace.replay import fold_loop  # noqa: PLC0415
        from xsim_trace.replay.closed_form_tables import order_tie  # noqa: PLC0415
        from xsim_trace.replay.fold import expand  # noqa: PLC0415

        w = self.w
        got = fold_loop.find(w, self.schedules, self.pricer, self._booked, self.rank_class)
        if got is None:
            return None
        found, p2p, colls = got
        backend = fold_loop.backend_copy(self.backend)
        if backend is None:
            return None
        wq, q, pricer = fold_loop.quotient_workload(w, found, colls)
        tq, stats, finished = self._run_python(wq, backend, pricer, None)
        why = "the quotient did not finish" if finished != wq.num_nodes else None
        if why is None:
            times = expand(w, found, q, _arrays(tq))
            why = order_tie(w, q, times, p2p, self._booked, self.settings)
        if why is not None:
            log.debug("fold: replaying every rank (%s)", why)
            return None
        if self.progress is not None:
            self.progress(w.num_nodes)
        return RawTimes(*times, stats=EngineStats(events=stats.events, flows=stats.flows, collectives=stats.collectives,
                                                  closed_form_collectives=stats.closed_form_collectives,
                                                  folded_ranks=found.folded_ranks), rep_of=found.rep_of)

    def _run_compiled(self) -> RawTimes:
        return self._raw_of(*run_compiled(self.w, self.schedules, self.settings, self.pricer, self.progress, self._booked,
                                          fold=self.fold, rank_class=self.rank_class))

    def _raw_of(self, t: tuple, stats: dict) -> RawTimes:
        times = NodeTimes(0)
        times.ready, times.start, times.end, times.wait, times.peer = t
        rep_of = stats.pop("rep_of", None)
        if stats.pop("finished") != self.w.num_nodes:
            self._deadlock(times)
        return RawTimes(ready_ns=t[0], start_ns=t[1], end_ns=t[2], wait_ns=t[3], peer_node=t[4], stats=EngineStats(**stats),
                        rep_of=rep_of)

    def _deadlock(self, times: NodeTimes) -> None:
        w = self.w
        for i in range(w.num_nodes):
            if times.end[i] < 0 and times.start[i] >= 0:
                k = int(w.exec_kind[i])
                if k == K_COLL:
                    why = "collective never completes: some member never reaches it"
                elif k in (K_SEND, K_RECV):
                    why = f"{'send' if k == K_SEND else 'recv'} never matched (peer {int(w.comm_peer[i])}, tag {int(w.comm_tag[i])})"
                else:
                    why = "node never finishes"
                raise GraphError(f"replay deadlocked: {why}", rank=int(w.node_rank[i]), node=int(w.node_id[i]))
        for i in range(w.num_nodes):
            if times.end[i] < 0:
                raise GraphError("replay deadlocked: node never became ready", rank=int(w.node_rank[i]), node=int(w.node_id[i]))


def _is_model_paced(pricer) -> bool:
    """Whether ``pricer`` is a :class:`~xsim_trace.replay.model_flows.ModelPacedFlows` (not imported
    unless loaded already: no instance can exist before, and it brings in the NCCL model)."""
    mod = sys.modules.get("xsim_trace.replay.model_flows")
    return mod is not None and isinstance(pricer, mod.ModelPacedFlows)


def _arrays(times: NodeTimes) -> tuple[np.ndarray, ...]:
    """(ready, start, end, wait, peer) as int64 arrays."""
    return tuple(np.asarray(a, np.int64) for a in (times.ready, times.start, times.end, times.wait, times.peer))


def _loop(queue: EventQueue, port: FlowPort, streams: Streams) -> int:
    """Run to the end: each turn takes the earlier of the next event and the next flow landing
    (an event first on a tie).  Returns the number of events and landed flows."""
    heap = queue.heap
    pop = heapq.heappop
    finish = streams.finish
    events = 0
    while True:
        t_net = port.next_completion_ns(queue)
        if heap and (t_net is None or heap[0][0] < t_net):
            now, _, handler, arg = pop(heap)
            events += 1
            if handler is None:
                finish(arg, now)
            else:
                handler(arg, now)
        elif t_net is not None:
            events += port.deliver(t_net)
        else:
            return events
