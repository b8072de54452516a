"""The closed-form estimate of a whole plan: every pipeline by :mod:`xsim_trace.plan.stage_cost`,
then the DP gradient sync per sweep-line interval.

Per pipeline: stage times per micro-batch (compute + TP collectives, embedding / head, the PP
send/recv or reshard it waits for), ``m * max + (sum - max) / v`` for the pipeline, and when each
stage's last backward ends (the backward drains from the last stage to the first, so stage ``s``
ends ``sum_{j<s}`` of the earlier stages' backward before the pipeline does).  Per DP interval: the
LCM rings' all-reduce, as long as the slowest member's ring all-reduce of its own TP shard on its
own link (:func:`dp_sync_ns`: NVLink within one node, else its NIC), starting when its last member
is ready; the wait of the earlier members is straggler wait.
The step is the later of the last pipeline and the last all-reduce.  This is the one fast form the
plan search prunes with and ``plan compare --quick`` reports; the replay costs what it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, MutableMapping

from xsim_trace.errors import ConfigError
from xsim_trace.plan.layer_split import uniform_partition
from xsim_trace.plan.partition import boundaries, stage_costs
from xsim_trace.plan.placement import layout
from xsim_trace.plan.memory import stage_memory_bytes
from xsim_trace.plan.model import Plan, PipelinePlan
from xsim_trace.plan.stage_cost import StageCost, best_counts, pipeline_ns, ring_allreduce_ns
from xsim_trace.plan.dp_intervals import Segment, dp_intervals
from xsim_trace.layer_templates.per_stage import Templates, TemplateSet, as_template_set
from xsim_trace.layer_templates.template import ModelTemplate
from xsim_trace.units import gbps_to_GBps

#: share of a layer's forward + backward time that is backward (2 of 3 GEMM passes)
BACKWARD_SHARE = 2 / 3


@dataclass(frozen=True, slots=True)
class PipelineEstimate:
    counts: tuple[int, ...]  # layers per physical stage
    stage_ns: tuple[float, ...]  # per micro-batch, with boundary transfers
    compute_ns: tuple[float, ...]  # per micro-batch, compute + TP collectives only
    pipeline_ns: float
    finish_ns: tuple[float, ...]  # when each stage's last backward ends
    headroom: float  # least free share of device memory over the stages
    pp_ns: float  # equal-TP boundary transfers, summed over boundaries, directions and micro-batches
    reshard_ns: float  # the same for TP-changing boundaries


@dataclass(frozen=True, slots=True)
class PlanEstimate:
    step_ns: int
    pipelines: tuple[PipelineEstimate, ...]
    dp_ns: int  # longest DP all-reduce
    straggler_ns: int  # longest wait of a DP member for the last one
    bubble: float  # largest stage idle share of its pipeline
    headroom: float
    mfu: float
    tokens_per_s: float
    devices: int
    pp_ns: int
    reshard_ns: int

    def layers_text(self) -> str:
        return " | ".join(dict.fromkeys("/".join(map(str, p.counts)) for p in self.pipelines))


def _plan_key(plan: Plan) -> tuple:
    """What a pipeline's estimate depends on besides its stages and micro-batches (under ``stage`` placement
    also the other pipelines, which decide where its stages sit)."""
    where = tuple(p.stages for p in plan.pipelines) if plan.placement == "stage" else ()
    return (plan.schedule, plan.chunks, plan.reshard, plan.partition, plan.groups, plan.model, plan.placement, where)


def _counts(plan: Plan, index: int, costs: list[StageCost]) -> tuple[int, ...]:
    pipe, v = plan.pipelines[index], plan.chunks
    p, n = len(pipe.stages), plan.model.num_layers
    if all(s.chunks for s in pipe.stages):
        return tuple(s.num_layers for s in pipe.stages)
    if plan.partition == "uniform":
        ranges = uniform_partition(n, p * v)
        return tuple(sum(b - a for a, b in ranges[s::p]) for s in range(p))
    return best_counts(n, costs, plan.micro_batches_of(index), v)


def estimate_pipeline(plan: Plan, index: int, templates: TemplateSet) -> PipelineEstimate:
    """Closed form of pipeline ``index`` (layers: its own, else the plan's partition mode)."""
    pipe, v = plan.pipelines[index], plan.chunks
    p, m = len(pipe.stages), plan.micro_batches_of(index)
    costs = stage_costs(plan, index, templates)
    counts = _counts(plan, index, costs)
    for s, (c, cost) in enumerate(zip(counts, costs)):
        if cost.max_layers is not None and c > cost.max_layers:
            raise ConfigError(f"memory exceeded: stage {s} ({pipe.stages[s].group}, TP {pipe.stages[s].tp}) holds "
                              f"{cost.max_layers} layers, the plan gives it {c}", file=plan.source or None,
                              field=f"pipelines[{index}].stages[{s}]")
    times = [cost.time_ns(c) for c, cost in zip(counts, costs)]
    compute = [c * cost.layer_ns + cost.extra_ns for c, cost in zip(counts, costs)]
    total = pipeline_ns(times, m, v)
    finish, drained = [], 0.0
    for s in range(p):
        finish.append(total - drained)
        drained += BACKWARD_SHARE * compute[s] / v
    probe = replace(plan, pipelines=(pipe,))
    head = 1.0
    for s, st in enumerate(pipe.stages):
        cap = plan.stage_hbm_bytes(st)
        head = min(head, 1.0 - stage_memory_bytes(probe, pipe, s, counts[s]) / cap)
    pp = rs = 0.0
    for bd in boundaries(plan, index, templates):
        xfer = (bd.fwd_ns + bd.bwd_ns) * m
        if bd.same_tp:
            pp += xfer
        else:
            rs += xfer
    return PipelineEstimate(tuple(counts), tuple(times), tuple(compute), total, tuple(finish), head, pp, rs)


def _segments(kinds: list[tuple[PipelinePlan, PipelineEstimate]], chunks: int) -> list[Segment]:
    """Sweep-line segments of each distinct (pipeline, estimate); key (kind, stage, chunk)."""
    segs = []
    for k, (pipe, est) in enumerate(kinds):
        p, start = len(pipe.stages), 0
        for vs in range(p * chunks):
            s, c = vs % p, vs // p
            base, rem = divmod(est.counts[s], chunks)
            n = base + (1 if c < rem else 0)
            if n:
                segs.append(Segment((k, s, c), start, start + n))
            start += n
    return segs


def dp_sync_ns(plan: Plan, nbytes: float, members: int, stages: list, one_node: set[str], same_node: bool = False
               ) -> float:
    """The DP all-reduce of ``nbytes`` of gradient over ``members`` replicas whose stages are
    ``stages``: the LCM rings run concurrently, and a member of TP ``t`` holds ``nbytes / t`` of the
    gradient, which its ring(s) move through that rank's own link, so the sync lasts as long as the
    slowest member's ring all-reduce of ``nbytes / t`` on its link: NVLink when every member sits in
    one group placed within one node (``one_node``; ``same_node``: the layout puts them in one node),
    else the member's NIC."""
    intra = all(not st.mixed and st.group == stages[0].group for st in stages) and (
        same_node or stages[0].group in one_node)
    out = 0.0
    for st in stages:
        for g in plan.stage_groups(st):
            out = max(out, ring_allreduce_ns(nbytes / st.tp, members, g.intra_GBps if intra else gbps_to_GBps(g.nic_gbps)))
    return out


def model_flops_per_step(plan: Plan) -> float:
    """Training FLOPs of one step: 3x the forward (layers + output head) per micro-batch."""
    m = plan.model
    tokens = m.seq_len * m.micro_batch_size
    fwd = m.num_layers * m.layer_fwd_flops() + 2 * tokens * m.vocab * m.hidden
    return 3.0 * fwd * plan.total_micro_batches


def _pipeline_estimates(plan: Plan, tset: TemplateSet, cache: MutableMapping[Any, dict] | None
                        ) -> list[PipelineEstimate]:
    """Each pipeline's estimate, computed once per distinct (stages, micro-batches) of the plan (and across
    plans through ``cache``)."""
    ests: list[PipelineEstimate] = []
    shared = cache.setdefault(_plan_key(plan), {}) if cache is not None else {}
    seen: dict[int, PipelineEstimate] = {}  # by pipeline object: replicas often share one
    for i, pipe in enumerate(plan.pipelines):
        est = seen.get(id(pipe))
        if est is None:
            key = (pipe.stages, plan.micro_batches_of(i))
            est = shared.get(key)
            if est is None:
                est = shared[key] = estimate_pipeline(plan, i, tset)
            seen[id(pipe)] = est
        ests.append(est)
    return ests


def _pipeline_kinds(plan: Plan, ests: list[PipelineEstimate]
                    ) -> tuple[list[tuple[PipelinePlan, PipelineEstimate]], list[int], list[int], list[int]]:
    """Identical pipelines (same stages, same estimate) counted once: the kinds, each kind's multiplicity
    and micro-batches, and each pipeline's kind index."""
    kind_of: dict[tuple, int] = {}
    kinds: list[tuple[PipelinePlan, PipelineEstimate]] = []
    mult: list[int] = []
    m_of: list[int] = []
    kind_index: list[int] = []
    for i, (pipe, est) in enumerate(zip(plan.pipelines, ests)):
        key = (id(pipe), id(est))
        if key not in kind_of:
            kind_of[key] = len(kinds)
            kinds.append((pipe, est))
            mult.append(0)
            m_of.append(plan.micro_batches_of(i))
        mult[kind_of[key]] += 1
        kind_index.append(kind_of[key])
    return kinds, mult, m_of, kind_index


def _dp_sync(plan: Plan, base: ModelTemplate, kinds: list[tuple[PipelinePlan, PipelineEstimate]], mult: list[int],
             kind_index: list[int], end: float) -> tuple[float, float, float]:
    """The data-parallel gradient syncs of a plan with dp > 1, interval by interval of the layers: the step's
    end (``end`` or later, when a sync finishes after the last pipeline), the longest sync and the largest
    spread of the ready times of the stages that sync together."""
    dp_ns = straggler = 0.0
    used: dict[str, int] = {}
    for (p, _), n in zip(kinds, mult):
        for st in p.stages:
            for g, k in st.parts:
                used[g] = used.get(g, 0) + n * k
    one_node = {g.name for g in plan.groups if used.get(g.name, 0) <= g.devices_per_node}
    same_node = _same_node_test(plan, kind_index, len(kinds))
    last_v = [len(p.stages) * plan.chunks - 1 for p, _ in kinds]
    for iv in dp_intervals(_segments(kinds, plan.chunks)):
        members = iv.members
        size = sum(mult[k] for k, _, _ in members)
        if size < 2:
            continue
        nbytes = iv.num_layers * base.layer_grad_bytes
        if all(c == 0 and s == 0 for _, s, c in members):
            nbytes += base.pre_grad_bytes
        if all(c * len(kinds[k][0].stages) + s == last_v[k] for k, s, c in members):
            nbytes += base.post_grad_bytes
        stages = [kinds[k][0].stages[s] for k, s, _ in members]
        ar = dp_sync_ns(plan, nbytes, size, stages, one_node, same_node(members))
        ready = [kinds[k][1].finish_ns[s] for k, s, _ in members]
        dp_ns = max(dp_ns, ar)
        straggler = max(straggler, max(ready) - min(ready))
        end = max(end, max(ready) + ar)
    return end, dp_ns, straggler


def _same_node_test(plan: Plan, kind_index: list[int], n_kinds: int) -> Callable[[list], bool]:
    """Whether every replica of a DP interval's member stages sits on one node: under 'stage' placement
    from the plan's layout (each stage's replicas placed together); never under 'pipeline' placement."""
    if plan.placement != "stage":
        return lambda members: False
    lay = layout(plan)
    node_of = {r.rank: r.node for r in lay.ranks}
    pipes_of: list[list[int]] = [[] for _ in range(n_kinds)]
    for i, k in enumerate(kind_index):
        pipes_of[k].append(i)

    def same(members) -> bool:
        return len({node_of[r] for k, s, _ in members for i in pipes_of[k] for r in lay.of(i, s)}) == 1

    return same


def estimate_plan(plan: Plan, templates: Templates, *, cache: MutableMapping[Any, dict] | None = None
                  ) -> PlanEstimate:
    """The closed-form estimate of ``plan``; ConfigError when a stage does not fit in memory."""
    tset = as_template_set(templates, plan.model)
    ests = _pipeline_estimates(plan, tset, cache)
    kinds, mult, m_of, kind_index = _pipeline_kinds(plan, ests)
    end = max(e.pipeline_ns for e in ests)
    dp_ns = straggler = 0.0
    if plan.dp > 1:
        end, dp_ns, straggler = _dp_sync(plan, tset.base, kinds, mult, kind_index, end)
    bubble = max(1.0 - m * c / e.pipeline_ns for (_, e), m in zip(kinds, m_of) for c in e.compute_ns)
    devices = sum(n * st.tp for (p, _), n in zip(kinds, mult) for st in p.stages)
    peak = sum(n * plan.group(g).spec().peak_flops() * k for (p, _), n in zip(kinds, mult) for st in p.stages
               for g, k in st.parts)
    step_s = end / 1e9
    tokens = plan.total_micro_batches * plan.model.micro_batch_size * plan.model.seq_len
    return PlanEstimate(
        step_ns=int(round(end)), pipelines=tuple(ests), dp_ns=int(dp_ns), straggler_ns=int(straggler),
        bubble=max(0.0, bubble), headroom=min(e.headroom for e in ests),
        mfu=model_flops_per_step(plan) / (peak * step_s) if step_s > 0 else 0.0,
        tokens_per_s=tokens / step_s if step_s > 0 else 0.0, devices=devices,
        pp_ns=int(sum(e.pp_ns for e in ests)), reshard_ns=int(sum(e.reshard_ns for e in ests)),
    )
