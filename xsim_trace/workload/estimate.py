"""Closed-form (event-ordered) estimate of one training iteration from a Program.

Each stage runs its schedule; a pass starts when the stage is free and its input (forward: the
previous virtual stage's forward of that micro-batch; backward: the next one's backward) has
arrived over the pipeline link.  TP / CP / EP collectives are serial inside a pass (Megatron
without TP-comm overlap).  After the last backward the DP gradient reduction (bucketed,
optionally overlapped with that backward), the optimizer step and, with a distributed optimizer,
the parameter all-gather follow.  The iteration ends when the slowest stage is done.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from xsim_trace.devices.compute import KernelClass, kernel_time_ns
from xsim_trace.errors import ConfigError
from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.workload.layout import Coord, Layout
from xsim_trace.workload.ops import CommKind, CommOp, WaitOp, pp_activation_bytes
from xsim_trace.workload.program import Program
from xsim_trace.workload.framework import Schedule
from xsim_trace.workload.schedule import Step, interleaved_warmup, stage_order
from xsim_trace.workload.timing import Timer

log = logging.getLogger(__name__)

#: bytes of optimizer-state traffic per local parameter in one Adam step (fp32 master r/w, grad,
#: two moments r/w, bf16 copy write)
ADAM_BYTES_PER_PARAM = 30
#: host-side launches per parameter tensor in one optimizer step (zero-grad, main-grad copy,
#: grad-norm term, Adam multi-tensor chunk, bf16 copy-back)
OPT_LAUNCHES_PER_TENSOR = 0  # 0: off (fitting it did not lower the CI error)
#: host cost of one pipeline p2p exchange, in framework module calls
EXCHANGE_HOST_CALLS = 0.0
GRAD_BYTES = 4  # fp32 main grads (Megatron accumulates and reduces in fp32 by default for bf16)
PARAM_BYTES = 2


@dataclass(frozen=True)
class StageEstimate:
    stage: int
    forward_ns: int  # one micro-batch, all chunks
    backward_ns: int
    pipeline_end_ns: int
    busy_ns: int
    dp_exposed_ns: int
    optimizer_ns: int
    param_gather_ns: int
    tp_comm_ns: int  # per iteration, serial inside passes
    ep_cp_comm_ns: int
    #: per iteration on one rank of the stage: GPU kernel time, serial comm by kind (tp/cp/ep),
    #: host time the device waited for (host-bound issue), pipeline p2p waits exposed
    compute_ns: int = 0
    comm_ns: tuple[tuple[str, int], ...] = ()
    host_exposed_ns: int = 0
    pp_exposed_ns: int = 0

    def comm(self, kind: str) -> int:
        return dict(self.comm_ns).get(kind, 0)


@dataclass(frozen=True)
class Estimate:
    step_ns: int
    stages: tuple[StageEstimate, ...]
    flops: int
    world_size: int
    extras: dict = field(default_factory=dict)

    @property
    def step_s(self) -> float:
        return self.step_ns / 1e9

    def tflops_per_gpu(self) -> float:
        return self.flops / self.world_size / (self.step_ns / 1e9) / 1e12

    def bubble_fraction(self) -> float:
        s = self.stages[0]
        return 1.0 - s.busy_ns / s.pipeline_end_ns if s.pipeline_end_ns else 0.0

    @property
    def critical_stage(self) -> StageEstimate:
        """The stage whose pipeline end + exposed DP sync sets the step (lowest index on ties)."""
        return max(self.stages, key=lambda st: (st.pipeline_end_ns + st.dp_exposed_ns, -st.stage))


def _buckets(total_params: int, fw) -> int:
    size = fw.bucket_size_bytes // GRAD_BYTES if fw.bucket_size_bytes else max(40_000_000, 1_000_000 * fw.dp * fw.cp)
    return max(1, -(-total_params // size))


def optimizer_step(program: Program, stage: int, n_dp: int, buckets: int, timer: Timer) -> tuple[int, int]:
    """(bytes accessed, duration ns) of the Adam step on one rank of ``stage``: its local
    parameters (sharded over the ``n_dp`` DP ranks under ZeRO), HBM bound, or host bound by its
    launches (the framework family's fixed count plus a set per gradient bucket); the family's
    per-iteration host work (data loading, bookkeeping) is added."""
    fw, device, fam = program.fw, timer.device, timer.family
    dense, expert = program.stage_trainable_params(stage)
    local = (dense + expert) // (n_dp if fw.zero_stage >= 1 else 1)
    fixed, per_bucket = (fam.optimizer_fixed_launches, fam.optimizer_launches_per_bucket) if fam else (12, 4)
    launches = fixed + per_bucket * buckets + OPT_LAUNCHES_PER_TENSOR * program.stage_param_tensors(stage)
    nbytes = local * ADAM_BYTES_PER_PARAM
    ns = max(
        kernel_time_ns(KernelClass.OPTIMIZER, 0, nbytes, device, include_overhead=False)
        + launches * device.kernel_overhead_ns,
        int(round(launches * timer.host_call_ns)),
    )
    return nbytes, ns + (fam.step_fixed_host_ns if fam else 0)


def _pass_parts(ops: list, rank: int, timer: Timer) -> tuple[int, int, dict[str, int]]:
    """(pass ns, GPU kernel ns, comm ns by kind) of one pass on ``rank``: blocking collectives
    count whole (serial), asynchronous ones (CP ring steps, ZeRO-3 gathers and reduce-scatters) by
    what they add to the pass (the pass with them minus without them)."""
    compute = 0
    comm: dict[str, int] = {}
    kinds: set[CommKind] = set()
    for op in ops:
        if isinstance(op, CommOp):
            if op.asynchronous:
                kinds.add(op.kind)
                continue
            comm[op.kind.value] = comm.get(op.kind.value, 0) + timer.device_ns(op, rank)
        elif not isinstance(op, WaitOp):
            compute += timer.device_ns(op, rank)
    total = timer.pass_ns(ops, rank)
    skipped: set[CommKind] = set()
    before = total
    for kind in sorted(kinds, key=lambda k: k.value):
        skipped.add(kind)
        without = timer.pass_ns(ops, rank, skip_async=frozenset(skipped))
        comm[kind.value] = comm.get(kind.value, 0) + max(0, before - without)
        before = without
    return total, compute, comm


def _consumer(st: Step, s: int, pp: int, total_virtual: int) -> tuple[bool, int, int] | None:
    """The pass on another stage that takes the output of pass ``st`` on stage ``s`` over the
    pipeline link, as (forward, micro-batch, virtual stage); None when the output stays on ``s``
    (the last virtual stage's forward feeds its own backward; the first one's backward ends)."""
    v = st.chunk * pp + s
    if st.forward:
        return (True, st.microbatch, v + 1) if v < total_virtual - 1 else None
    return (False, st.microbatch, v - 1) if v > 0 else None


def _input(st: Step, s: int, pp: int, total_virtual: int) -> tuple[tuple[bool, int, int] | None, int]:
    """(the pass whose output ``st`` on stage ``s`` takes, that pass's stage)."""
    v = st.chunk * pp + s
    if st.forward:
        return ((True, st.microbatch, v - 1) if v > 0 else None), (v - 1) % pp
    if v < total_virtual - 1:
        return (False, st.microbatch, v + 1), (v + 1) % pp
    return (True, st.microbatch, v), s


def exchange_points(order: list[Step], steady_pairs: int = 0, warmup: int = 0) -> list[bool]:
    """Per pass of a stage's order: whether Megatron's schedule runs a p2p exchange right after it.
    The plain schedules exchange after every pass (``send_forward_recv_backward`` after a forward,
    ``send_backward_recv_forward`` after a backward); the interleaved one runs each of its
    ``steady_pairs`` steady-state forward/backward pairs (after ``warmup`` forwards) followed by
    one combined exchange (``send_forward_backward_recv_forward_backward``), so a steady forward
    has none of its own."""
    points = [True] * len(order)
    for j in range(steady_pairs):
        points[warmup + 2 * j] = False
    return points


def _run_schedule(fw, pass_ns: dict, p2p, rendezvous: bool = True, exchange_host_ns: int = 0) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Event-ordered pipeline schedule: per stage (end ns, busy ns, last backward pass ns).

    With ``rendezvous``, p2p exchanges follow Megatron's ``p2p_communication``: the sends and
    receives of one exchange are batched (``batch_isend_irecv``) and waited for (then a device
    synchronize), so a stage starts its next pass only when (a) every receiver of what it sends
    has posted the matching receive, which it does at its own latest exchange before the pass
    that takes the tensor, and (b) every tensor it receives in that exchange has arrived, the
    grad for the paired backward too in the interleaved steady state."""
    pp, m, vpp = fw.pp, fw.microbatches, fw.vpp
    total_virtual = pp * vpp
    done: dict[tuple[bool, int, int], int] = {}  # (forward, microbatch, virtual) -> finish ns
    orders = {s: stage_order(fw.schedule, s, pp, m, vpp) for s in range(pp)}
    inter = fw.schedule is Schedule.INTERLEAVED and vpp > 1
    points = {}
    for s, o in orders.items():
        warm = interleaved_warmup(s, pp, m, vpp) if inter else 0
        points[s] = exchange_points(o, m * vpp - warm if inter else 0, warm)
    where = {(st.forward, st.microbatch, st.chunk * pp + s): (s, i) for s, o in orders.items() for i, st in enumerate(o)}

    def posted_at(r: int, q: int) -> int:  # index of r's exchange that posts the receive for pass q (-1: before any)
        return next((e for e in range(q - 1, -1, -1) if points[r][e]), -1)

    ends: dict[int, list[int]] = {s: [] for s in range(pp)}  # per stage, finish ns of its passes in order
    pos = {s: 0 for s in range(pp)}
    free = {s: 0 for s in range(pp)}
    busy = {s: 0 for s in range(pp)}
    last_bwd = {s: 0 for s in range(pp)}
    remaining = sum(len(o) for o in orders.values())

    def arrival(st: Step, s: int) -> int | None:  # when pass st's input is on stage s; None: not yet
        dep, dep_stage = _input(st, s, pp, total_virtual)
        if dep is None:
            return 0
        if dep not in done:
            return None
        return done[dep] + p2p(dep_stage, s)

    def exchange_done(s: int, i: int) -> int | None:  # when stage s may start pass i (i > 0); None: not yet
        x = i - 1
        if not points[s][x]:
            return 0
        t = ends[s][x] + exchange_host_ns
        e = x - 1
        while e >= 0 and not points[s][e]:
            e -= 1
        for k in range(e + 1, x + 1):  # passes whose outputs this exchange sends
            out = _consumer(orders[s][k], s, pp, total_virtual)
            if out is None:
                continue
            r, q = where[out]
            pe = posted_at(r, q)
            if pe >= 0:
                if len(ends[r]) <= pe:
                    return None
                t = max(t, ends[r][pe])
        nxt = i
        while nxt < len(orders[s]):  # passes whose inputs this exchange receives
            dep = _input(orders[s][nxt], s, pp, total_virtual)[0]
            if dep is not None and not (dep[0] and not orders[s][nxt].forward):  # received, not local
                # (a local input: the last virtual stage's backward takes its own forward)
                a = arrival(orders[s][nxt], s)
                if a is None:
                    return None
                t = max(t, a)
            if points[s][nxt]:
                break
            nxt += 1
        return t

    while remaining:
        progressed = False
        for s in range(pp):
            while pos[s] < len(orders[s]):
                st: Step = orders[s][pos[s]]
                ready = arrival(st, s)
                if ready is None:
                    break
                if rendezvous and pos[s] > 0:
                    gate = exchange_done(s, pos[s])
                    if gate is None:
                        break
                    ready = max(ready, gate)
                v = st.chunk * pp + s
                dur = pass_ns[(s, st.chunk, st.forward)]
                start = max(free[s], ready)
                free[s] = start + dur
                busy[s] += dur
                done[(st.forward, st.microbatch, v)] = free[s]
                ends[s].append(free[s])
                if not st.forward:
                    last_bwd[s] = dur
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ConfigError("pipeline schedule deadlocked", field="framework.schedule")
    return free, busy, last_bwd


def estimate(program: Program, timer: Timer) -> Estimate:
    fw, model = program.fw, program.model
    lay = Layout(fw)
    pp, m, vpp = fw.pp, fw.microbatches, fw.vpp
    # pass durations on a representative rank of each stage (tp = cp = dp = 0)
    pass_ns: dict[tuple[int, int, bool], int] = {}
    compute: dict[int, int] = {s: 0 for s in range(pp)}
    host_wait: dict[int, int] = {s: 0 for s in range(pp)}
    comm: dict[int, dict[str, int]] = {s: {} for s in range(pp)}
    for (stage, chunk) in sorted(program.chunks):
        rank = lay.rank(Coord(0, 0, 0, stage))
        for forward in (True, False):
            ops = [op for _, op in program.pass_ops(stage, chunk, forward)]
            total, gpu, by_kind = _pass_parts(ops, rank, timer)
            pass_ns[(stage, chunk, forward)] = total
            compute[stage] += gpu * m
            host_wait[stage] += (total - gpu - sum(by_kind.values())) * m
            for kind, ns in by_kind.items():
                comm[stage][kind] = comm[stage].get(kind, 0) + ns * m
    p2p_bytes = pp_activation_bytes(model, fw)

    def p2p(src_stage: int, dst_stage: int) -> int:
        if src_stage == dst_stage:
            return 0
        a, b = lay.rank(Coord(0, 0, 0, src_stage)), lay.rank(Coord(0, 0, 0, dst_stage))
        return timer.links.p2p_ns(p2p_bytes, timer.links.spans_nodes((a, b)))

    xh = int(round(EXCHANGE_HOST_CALLS * timer.host_call_ns)) if pp > 1 else 0
    free, busy, last_bwd = _run_schedule(fw, pass_ns, p2p, exchange_host_ns=xh)
    free_no_p2p = _run_schedule(fw, pass_ns, lambda a, b: 0, exchange_host_ns=xh)[0] if pp > 1 else free
    comm_split = {s: [comm[s].get("tp", 0), comm[s].get("cp", 0) + comm[s].get("ep", 0)] for s in range(pp)}

    stages = []
    for s in range(pp):
        rank = lay.rank(Coord(0, 0, 0, s))
        dense, expert = program.stage_trainable_params(s)
        dp_group = lay.dp_group(rank)
        n_dp = len(dp_group)
        inter = timer.links.spans_nodes(dp_group)
        coll = CollectiveType.REDUCE_SCATTER if fw.zero_stage >= 1 else CollectiveType.ALL_REDUCE
        nb = _buckets(dense + expert, fw)
        dp_ns = 0
        if n_dp > 1 and not program.fsdp:
            dense_grads = dense + (expert if fw.ep == 1 else 0)
            per_bucket = timer.links.collective_ns(coll, (dense_grads * timer.grad_reduce_bytes) // nb, n_dp, inter)
            dp_ns = nb * per_bucket
        if expert and fw.ep > 1 and not program.fsdp:
            edp = lay.expert_dp_group(rank)
            if len(edp) > 1:
                dp_ns += timer.links.collective_ns(coll, expert * timer.grad_reduce_bytes, len(edp), timer.links.spans_nodes(edp))
        if fw.overlap_grad_reduce and dp_ns:
            exposed = max(dp_ns - last_bwd[s], dp_ns // nb)
        else:
            exposed = dp_ns
        if program.syncs_tied_embedding(s):
            pair = lay.embedding_group(rank)
            exposed += timer.links.collective_ns(CollectiveType.ALL_REDUCE, program.tied_embedding_grad_bytes(timer), 2,
                                                 timer.links.spans_nodes(pair))
        _, opt_ns = optimizer_step(program, s, n_dp, nb, timer)
        gather = 0
        if fw.zero_stage >= 1 and n_dp > 1 and not program.fsdp:
            gather = nb * timer.links.collective_ns(CollectiveType.ALL_GATHER, (dense + expert) * PARAM_BYTES // nb, n_dp, inter)
            if fw.overlap_param_gather:
                gather = gather // nb
        fwd = sum(pass_ns[(s, c, True)] for c in range(vpp))
        bwd = sum(pass_ns[(s, c, False)] for c in range(vpp))
        stages.append(
            StageEstimate(s, fwd, bwd, free[s], busy[s], exposed, opt_ns, gather, comm_split[s][0], comm_split[s][1],
                          compute_ns=compute[s], comm_ns=tuple(sorted(comm[s].items())),
                          host_exposed_ns=max(0, host_wait[s]), pp_exposed_ns=max(0, free[s] - free_no_p2p[s]))
        )
    step = max(st.pipeline_end_ns + st.dp_exposed_ns for st in stages)
    step += max(st.optimizer_ns + st.param_gather_ns for st in stages)
    return Estimate(step_ns=step, stages=tuple(stages), flops=program.iteration_flops(), world_size=fw.world_size)
