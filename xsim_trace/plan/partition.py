"""Plan-level layer partitioning: fill stages' layer ranges uniformly or throughput-proportionally."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from fractions import Fraction

from xsim_trace.errors import ConfigError
from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.plan.placement import layout
from xsim_trace.plan.layer_split import PartitionReport, StageCapacity, partition_layers, uniform_partition
from xsim_trace.plan.memory import check_memory, max_layers_in_memory
from xsim_trace.plan.model import PipelinePlan, Plan, StagePlan
from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.plan.validate import validate_plan
from xsim_trace.layer_templates.scaling import layer_compute_ns, mean_layer_ns
from xsim_trace.plan.stage_cost import StageCost, best_counts, estimate_ns, exchange_ns, ring_allreduce_ns
from xsim_trace.layer_templates.per_stage import Templates, TemplateSet, as_template_set
from xsim_trace.layer_templates.template import ModelTemplate

log = logging.getLogger(__name__)


def _extra(template: ModelTemplate, part, device: DeviceSpec, tp: int, per_layer_ns: int) -> Fraction:
    if part is None:
        return Fraction(0)
    return Fraction(layer_compute_ns(part, template, device, tp), per_layer_ns)


def _tp_collectives_ns(template: ModelTemplate, tp: int, bw_GBps: float, ep: int = 1) -> float:
    """A layer's collectives inside the stage (forward + backward): TP collectives as ring
    collectives over the ``tp`` ranks (an all-gather or reduce-scatter half an all-reduce); an
    MoE layer's dispatch / combine all-to-all over its ``ep`` expert-parallel ranks, each sending
    (ep-1)/ep of its buffer over the stage's TP link (the same as half a ring all-reduce of ep)."""
    total = 0.0
    for o in template.layer(0).fwd + template.layer(0).bwd:
        if o.kind == "comp":
            continue
        n = ep if o.comm_type == CollectiveType.ALL_TO_ALL else tp
        if n < 2:
            continue
        t = ring_allreduce_ns(o.comm_size_bytes, n, bw_GBps)
        total += t if o.comm_type == CollectiveType.ALL_REDUCE else t / 2
    return total


@dataclass(frozen=True, slots=True)
class Boundary:
    """One virtual-stage boundary of a pipeline: the tensor goes forward ``src -> dst`` (stages)
    and its gradient back; times of one transfer each way (closed form, :func:`exchange_ns`)."""

    src: int
    dst: int
    fwd_ns: float
    bwd_ns: float
    same_tp: bool


def boundaries(plan: Plan, index: int, templates: Templates) -> list[Boundary]:
    """The boundaries between consecutive virtual stages on different stages of pipeline ``index``."""
    tset = as_template_set(templates, plan.model)
    pipe = plan.pipelines[index]
    p, v = len(pipe.stages), plan.chunks
    probe = replace(plan, pipelines=(pipe,))
    if plan.placement == "stage":  # where a stage sits depends on the replicas: the slowest of those alike
        lay, probe, mine = layout(plan), plan, [i for i, q in enumerate(plan.pipelines) if q.stages == pipe.stages]
    else:
        lay, mine = layout(probe), [0]
    info = {r.rank: r for r in lay.ranks}
    act = tset.base.activation_bytes
    out = []
    for vs in range(1, p * v):
        a, b = (vs - 1) % p, vs % p
        if a == b:
            continue
        ta, tb = pipe.stages[a].tp, pipe.stages[b].tp
        bw = min(info[lay.of(i, a)[0]].bw_GBps(info[lay.of(i, b)[0]], probe) for i in mine)
        ga, gb = plan.stage_tp_GBps(pipe.stages[a]), plan.stage_tp_GBps(pipe.stages[b])
        out.append(Boundary(a, b, exchange_ns(act, ta, tb, plan.reshard, bw, gather_GBps=gb),
                            exchange_ns(act, tb, ta, plan.reshard, bw, gather_GBps=ga), ta == tb))
    return out


#: (template, device, tp, layers, intra GB/s) -> (layer ns, pre ns, post ns); templates and devices are
#: kept alongside (the key holds their ids) so an id is never reused while cached
_LAYER_CACHE: dict[tuple, tuple[ModelTemplate, DeviceSpec, tuple[float, float, float]]] = {}


def _layer_times(template: ModelTemplate, device: DeviceSpec, tp: int, layers: int, intra_GBps: float, ep: int = 1
                 ) -> tuple[float, float, float]:
    key = (id(template), id(device), tp, layers, intra_GBps, ep)
    hit = _LAYER_CACHE.get(key)
    if hit is not None and hit[0] is template and hit[1] is device:
        return hit[2]
    per = mean_layer_ns(template, layers, device, tp) + _tp_collectives_ns(template, tp, intra_GBps, ep)
    pre = layer_compute_ns(template.pre, template, device, tp) if template.pre is not None else 0.0
    post = layer_compute_ns(template.post, template, device, tp) if template.post is not None else 0.0
    if len(_LAYER_CACHE) > 4096:
        _LAYER_CACHE.clear()
    _LAYER_CACHE[key] = (template, device, (per, pre, post))
    return per, pre, post


def stage_layer_times(plan: Plan, st: StagePlan, tset: TemplateSet) -> tuple[float, float, float]:
    """(layer, embedding, head) ns of a stage per micro-batch, with its TP collectives on the
    stage's TP link; a TP group over device groups is paced by its slower device (every TP
    collective waits for it) and its TP collectives by the slower link (:meth:`Plan.stage_tp_GBps`)."""
    link = plan.stage_tp_GBps(st)
    ep = plan.model.expert_split(st.tp)[0]
    times = [_layer_times(tset.for_stage(g.name, st.tp), g.device_spec, st.tp, plan.model.num_layers, link, ep)
             for g in plan.stage_groups(st)]
    return max(times, key=lambda t: t[0])


def stage_costs(plan: Plan, index: int, templates: Templates) -> list[StageCost]:
    """Closed-form cost of each physical stage of pipeline ``index`` (:mod:`.stage_cost`): compute
    and TP collectives per layer, embedding / head, the boundary transfers it waits for (its
    forward inputs and backward gradients), memory."""
    tset = as_template_set(templates, plan.model)
    pipe = plan.pipelines[index]
    p, v = len(pipe.stages), plan.chunks
    probe = replace(plan, pipelines=(pipe,))
    comm = [0.0] * p
    for bd in boundaries(plan, index, tset):
        comm[bd.dst] += bd.fwd_ns
        comm[bd.src] += bd.bwd_ns
    out = []
    for s, st in enumerate(pipe.stages):
        per, pre, post = stage_layer_times(plan, st, tset)
        extra = (pre if s == 0 else 0.0) + (post if s == p - 1 else 0.0)
        out.append(StageCost(per, extra, comm[s], max_layers_in_memory(probe, pipe, s), min_layers=v))
    return out


def _chunked(counts: tuple[int, ...], v: int) -> list[int]:
    """Per virtual stage counts from per physical stage counts (near-even over the chunks)."""
    p = len(counts)
    out = [0] * (p * v)
    for s, total in enumerate(counts):
        base, rem = divmod(total, v)
        for c in range(v):
            out[c * p + s] = base + (1 if c < rem else 0)
    return out


def _evaluate(plan: Plan, index: int, templates: Templates, report: PartitionReport) -> PartitionReport:
    """The rounded partition, or the counts the closed form finds faster (slowest stage evaluated
    with its compute, TP collectives, boundary transfers and memory)."""
    p, v = len(plan.pipelines[index].stages), plan.chunks
    costs = stage_costs(plan, index, templates)
    m = plan.micro_batches_of(index)
    rounded = tuple(sum(report.counts[s::p]) for s in range(p))
    rounded_ns = estimate_ns(rounded, costs, m, v)
    try:
        best = best_counts(plan.model.num_layers, costs, m, v)
    except ConfigError:
        return report  # memory: the rounding's own moves already say why
    best_ns = estimate_ns(best, costs, m, v)
    if best_ns >= rounded_ns or best == rounded:
        return replace(report, estimate_ns=int(rounded_ns))
    counts = _chunked(best, v)
    ranges, start = [], 0
    for c in counts:
        ranges.append((start, start + c))
        start += c
    times = tuple(int(costs[vs % p].time_ns(c)) for vs, c in enumerate(counts))
    return replace(report, counts=tuple(counts), ranges=tuple(ranges), stage_time_ns=times, rounded=rounded,
                   estimate_ns=int(best_ns), rounded_estimate_ns=int(rounded_ns))


def partition_pipeline(plan: Plan, index: int, templates: Templates, how: str) -> tuple[PipelinePlan, PartitionReport]:
    tset = as_template_set(templates, plan.model)
    pipe = plan.pipelines[index]
    p, v, n = len(pipe.stages), plan.chunks, plan.model.num_layers
    caps: list[StageCapacity] = []
    for vs in range(p * v):
        s = vs % p
        st = pipe.stages[s]
        # the slower device of a TP group over device groups paces it
        per, dev, template = max(((mean_layer_ns(tset.for_stage(g.name, st.tp), n, g.device_spec, st.tp), g.device_spec,
                                   tset.for_stage(g.name, st.tp)) for g in plan.stage_groups(st)), key=lambda x: x[0])
        extra = Fraction(0)
        if vs == 0:
            extra += _extra(template, template.pre, dev, st.tp, per)
        if vs == p * v - 1:
            extra += _extra(template, template.post, dev, st.tp, per)
        probe = replace(plan, pipelines=(pipe,))
        mem = max_layers_in_memory(probe, pipe, s) // v
        caps.append(StageCapacity(layer_time_ns=per, max_layers=mem, extra_layer_equiv=extra, name="+".join(g for g, _ in st.parts) + f"/tp{st.tp}"))
    if how == "uniform":
        ranges = uniform_partition(n, p * v)
        counts = [b - a for a, b in ranges]
        times = tuple(int((c + float(cap.extra_layer_equiv)) * cap.layer_time_ns) for c, cap in zip(counts, caps))
        report = PartitionReport(tuple(counts), ranges, tuple(float(c) for c in counts), times, ())
    else:
        report = _evaluate(plan, index, tset, partition_layers(n, caps))
    chunks_of = [[None] * v for _ in range(p)]
    for vs, rng in enumerate(report.ranges):
        chunks_of[vs % p][vs // p] = rng
    stages = tuple(replace(st, chunks=tuple(chunks_of[s])) for s, st in enumerate(pipe.stages))
    return replace(pipe, stages=stages), report


def resolve_partition(plan: Plan, template: Templates, *, memory: bool = True) -> tuple[Plan, tuple[PartitionReport, ...]]:
    """The plan with every stage's layers filled (stages that have them keep them), and a report per
    pipeline that was partitioned.  Raises ConfigError when the result does not fit in memory
    (unless ``memory`` is False: callers that report the memory themselves)."""
    if not plan.needs_partition:
        return plan, ()
    how = "uniform" if plan.partition == "uniform" else "auto"
    pipes, reports = [], []
    for i, pipe in enumerate(plan.pipelines):
        if all(s.chunks for s in pipe.stages):
            pipes.append(pipe)
            continue
        if any(s.chunks for s in pipe.stages):
            raise ConfigError("give layers for every stage of a pipeline or for none", file=plan.source or None,
                              field=f"pipelines[{i}].stages")
        new, report = partition_pipeline(plan, i, template, how)
        for line in report.lines([f"pipeline {i} vstage {k}" for k in range(len(report.counts))]):
            log.info("%s partition: %s", how, line)
        pipes.append(new)
        reports.append(report)
    out = replace(plan, pipelines=tuple(pipes))
    validate_plan(out, memory=memory)
    if memory:
        check_memory(out)
    return out, tuple(reports)
