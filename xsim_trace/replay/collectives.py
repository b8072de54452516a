"""Collectives: a collective starts when its last member has started (each member's straggler wait
is that start minus its own); then either a pricer gives every member's finish time at once
(contention-free backend, see :mod:`~xsim_trace.replay.collective_pricing`), or it runs flow by
flow: each chunk walks its schedule, a member issuing its sends of step s once its receives of the
steps before have arrived, and ends once its own sends are delivered too; or, with a ``lowering``
(the NCCL model on a backend that runs flows, :mod:`~xsim_trace.replay.model_flows`), it runs the
model-paced flows of its edges and ends ``latency`` after the last lands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.replay.collective_pricing import CollectivePricer, chunk_sizes
from xsim_trace.replay.compile import CollectiveInstance, CompiledWorkload
from xsim_trace.replay.events import EventQueue
from xsim_trace.replay.flow_port import FlowPort
from xsim_trace.replay.schedule_cache import Plan, ScheduleCache
from xsim_trace.replay.settings import ReplaySettings
from xsim_trace.replay.streams import NodeTimes

if TYPE_CHECKING:  # the NCCL model loads only where a replay uses it
    from xsim_trace.replay.model_flows import ModelPacedFlows


class CollRun:
    """One collective in progress on the flow path."""

    __slots__ = ("inst", "members", "plans", "k", "arrived", "waiting", "pend", "over", "done", "fin")

    def __init__(self, inst: CollectiveInstance, members: tuple[int, ...], plans: list[Plan]) -> None:
        self.inst = inst
        self.members = members
        self.plans = plans
        self.k = len(plans)
        # (chunk, step, position) -> [receives arrived, latest effective arrival time]
        self.arrived: dict[tuple[int, int, int], list[int]] = {}
        # per chunk, per position: the step whose receives it waits for, else -1
        self.waiting = [[-1] * len(members) for _ in range(len(plans))]
        # per chunk, per position: sends not yet delivered; whether its steps are all through
        self.pend = [[0] * len(members) for _ in range(len(plans))]
        self.over = [[False] * len(members) for _ in range(len(plans))]
        self.done = [0] * len(members)
        self.fin = [0] * len(members)


class Collectives:
    def __init__(self, w: CompiledWorkload, settings: ReplaySettings, times: NodeTimes, queue: EventQueue,
                 port: FlowPort, schedules: ScheduleCache, pricer: CollectivePricer | None,
                 lowering: ModelPacedFlows | None = None) -> None:
        self.groups = w.groups
        self.instances = w.instances
        self.inst_of = w.coll_instance.tolist()
        self.arrived_count = [0] * len(w.instances)
        self.times = times
        self.queue = queue
        self.port = port
        self.schedules = schedules
        self.pricer = pricer
        self.lowering = lowering
        self.delay = settings.endpoint_delay_ns
        self.red_delay = settings.reduction_delay_ns
        self.in_flight = settings.in_flight
        self.nchunks = settings.chunks
        self.started = 0
        self.priced = 0

    def arrive(self, i: int, now: int) -> None:
        """Member node ``i`` has started; the collective begins with its last member."""
        x = self.inst_of[i]
        self.arrived_count[x] += 1
        inst = self.instances[x]
        if self.arrived_count[x] == len(inst.nodes):
            self.begin(inst, now)

    def begin(self, inst: CollectiveInstance, now: int) -> None:
        self.started += 1
        t = self.times
        for g in inst.nodes:
            t.wait[g] = now - t.start[g]
        members = self.groups[inst.group]
        if len(members) <= 1 or (inst.size_bytes == 0 and inst.comm_type != CollectiveType.BARRIER):
            for g in inst.nodes:
                self.queue.node_done(g, now)
            return
        if self.pricer is not None:
            self.priced += 1
            for g, off in zip(inst.nodes, self.pricer.offsets_ns(inst, members)):
                self.queue.node_done(g, now + off)
            return
        if self.lowering is not None:
            self._run_lowered(inst, members, now)
            return
        sizes = chunk_sizes(max(inst.size_bytes, 1), self.nchunks)
        run = CollRun(inst, members, [self.schedules.plan(inst, cb) for cb in sizes])
        for c in range(min(self.in_flight, run.k)):
            for p in range(len(members)):
                self.enter_step(run, c, p, 0, now)

    # -- model-paced flows ----------------------------------------------------------------------
    def _run_lowered(self, inst: CollectiveInstance, members: tuple[int, ...], now: int) -> None:
        lc = self.lowering.lower(inst, members)
        if not lc.flows:
            for g in inst.nodes:
                self.queue.node_done(g, now + lc.time_ns)
            return
        # flows left, latest landing, largest lone-flow extra (a float: need not be whole ns), the instance,
        # the model's latency, the start
        state = [len(lc.flows), now, 0.0, inst, lc.latency_ns, now]
        for src, dst, nbytes, extra_ns in lc.flows:
            self.port.start(src, dst, nbytes, now, self._lowered_landed, (state, extra_ns))

    def _lowered_landed(self, arg, now: int) -> None:
        """The collective ends its latency after its last flow lands, less its largest lone-flow extra:
        the model's latency holds the path once.  (Each flow's own extra off its own landing charged a
        FIFO port fed first by a longer path than the flow it serves last that difference: +11.6 % at
        64 KiB for a heterogeneous all-to-all on analytical-ca.)"""
        state, extra_ns = arg
        state[0] -= 1
        state[1] = max(state[1], now)
        state[2] = max(state[2], extra_ns)
        if not state[0]:
            end = max(round(state[1] - state[2]), state[5]) + state[4]
            for g in state[3].nodes:
                self.queue.node_done(g, end)

    # -- the flow path --------------------------------------------------------------------------
    def enter_step(self, run: CollRun, c: int, p: int, s: int, now: int) -> None:
        """Member ``p`` of chunk ``c`` reaches step ``s``: issue its sends, go on while its receives are in."""
        plan = run.plans[c]
        prog, nsteps = plan.prog, plan.nsteps
        arrived = run.arrived
        while s < nsteps:
            ent = prog[s].get(p)
            if ent is None:
                s += 1
                continue
            sends, need = ent
            if sends:
                run.pend[c][p] += len(sends)
                if self.delay:
                    self.queue.at(now + self.delay, self._issue_event, (run, c, s, p, sends))
                else:
                    self.issue(run, c, s, p, sends, now)
            if need:
                rec = arrived.get((c, s, p)) if arrived else None
                if rec is None or rec[0] < need:
                    run.waiting[c][p] = s
                    return
                del arrived[(c, s, p)]
                t_eff = rec[1]
                if t_eff > now:
                    self.queue.at(t_eff, self._step_event, (run, c, p, s + 1))
                    return
            s += 1
        if run.pend[c][p]:  # a member's chunk ends once its own sends are delivered too
            run.over[c][p] = True
        else:
            self.chunk_done(run, c, p, now)

    def _step_event(self, arg, now: int) -> None:
        run, c, p, s = arg
        self.enter_step(run, c, p, s, now)

    def issue(self, run: CollRun, c: int, s: int, p: int, sends, now: int) -> None:
        members = run.members
        src = members[p]
        start = self.port.start
        landed = self.flow_landed
        for q, size in sends:
            start(src, members[q], size, now, landed, (run, c, s, q, p))

    def _issue_event(self, arg, now: int) -> None:
        run, c, s, p, sends = arg
        self.issue(run, c, s, p, sends, now)

    def flow_landed(self, arg, now: int) -> None:
        """The transfer of step ``s`` of chunk ``c`` from position ``p`` to ``q`` has arrived."""
        run, c, s, q, p = arg
        pend = run.pend[c]
        left = pend[p] - 1
        pend[p] = left
        if not left and run.over[c][p]:
            run.over[c][p] = False
            self.chunk_done(run, c, p, now)
        plan = run.plans[c]
        eff = now + self.red_delay if self.red_delay and plan.reduce[s] else now
        wait_row = run.waiting[c]
        if wait_row[q] == s and plan.need[s][q] == 1:
            # the one receive of its step, and the receiver waits for it: no bookkeeping
            wait_row[q] = -1
            self._resume(run, c, q, s + 1, eff, now)
            return
        key = (c, s, q)
        rec = run.arrived.get(key)
        if rec is None:
            rec = run.arrived[key] = [1, eff]
        else:
            rec[0] += 1
            if eff > rec[1]:
                rec[1] = eff
        if wait_row[q] == s and rec[0] == plan.need[s][q]:
            wait_row[q] = -1
            del run.arrived[key]
            self._resume(run, c, q, s + 1, rec[1], now)

    def _resume(self, run: CollRun, c: int, p: int, s: int, at: int, now: int) -> None:
        if at > now:
            self.queue.at(at, self._step_event, (run, c, p, s))
        else:
            self.enter_step(run, c, p, s, now)

    def chunk_done(self, run: CollRun, c: int, p: int, now: int) -> None:
        t_fin = now + self.delay
        c2 = c + self.in_flight
        if c2 < run.k:
            self._resume(run, c2, p, 0, t_fin, now)
        run.done[p] += 1
        if t_fin > run.fin[p]:
            run.fin[p] = t_fin
        if run.done[p] == run.k:
            self.queue.node_done(run.inst.nodes[p], run.fin[p])
