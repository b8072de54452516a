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
from xsim_trace.workload.schedule import Step, stage_order
from xsim_trace.workload.timing import Timer

log = logging.getLogger(__name__)

#: bytes of optimizer-state traffic per local parameter in one Adam step (fp32 master r/w, grad,
#: two moments r/w, bf16 copy write)
ADAM_BYTES_PER_PARAM = 30
#: host-side launches per parameter tensor in one optimizer step (zero-grad, main-grad copy,
#: grad-norm term, Adam multi-tensor chunk, bf16 copy-back)
OPT_LAUNCHES_PER_TENSOR = 0  # 0: off (fitting it did not lower the CI error)
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


def _run_schedule(fw, pass_ns: dict, p2p) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Event-ordered pipeline schedule: per stage (end ns, busy ns, last backward pass ns)."""
    pp, m, vpp = fw.pp, fw.microbatches, fw.vpp
    total_virtual = pp * vpp
    done: dict[tuple[bool, int, int], int] = {}  # (forward, microbatch, virtual) -> finish ns
    orders = {s: stage_order(fw.schedule, s, pp, m, vpp) for s in range(pp)}
    pos = {s: 0 for s in range(pp)}
    free = {s: 0 for s in range(pp)}
    busy = {s: 0 for s in range(pp)}
    last_bwd = {s: 0 for s in range(pp)}
    remaining = sum(len(o) for o in orders.values())
    while remaining:
        progressed = False
        for s in range(pp):
            while pos[s] < len(orders[s]):
                st: Step = orders[s][pos[s]]
                v = st.chunk * pp + s
                if st.forward:
                    dep = (True, st.microbatch, v - 1) if v > 0 else None
                    dep_stage = (v - 1) % pp
                else:
                    dep = (False, st.microbatch, v + 1) if v < total_virtual - 1 else (True, st.microbatch, v)
                    dep_stage = (v + 1) % pp if v < total_virtual - 1 else s
                if dep is not None and dep not in done:
                    break
                ready = done[dep] + p2p(dep_stage, s) if dep is not None else 0
                dur = pass_ns[(s, st.chunk, st.forward)]
                start = max(free[s], ready)
                free[s] = start + dur
                busy[s] += dur
                done[(st.forward, st.microbatch, v)] = free[s]
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

    free, busy, last_bwd = _run_schedule(fw, pass_ns, p2p)
    free_no_p2p = _run_schedule(fw, pass_ns, lambda a, b: 0)[0] if pp > 1 else free
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
