"""Plan-level layer partitioning: fill stages' layer ranges uniformly or throughput-proportionally."""

from __future__ import annotations

import logging
from dataclasses import replace
from fractions import Fraction

from xsim_trace.errors import ConfigError
from xsim_trace.rewrite.partition import PartitionReport, StageCapacity, partition_layers, uniform_partition
from xsim_trace.rewrite.plan import Plan, PipelinePlan, check_memory, max_layers_in_memory, validate_plan
from xsim_trace.rewrite.scaling import layer_compute_ns, mean_layer_ns
from xsim_trace.rewrite.template_set import Templates, as_template_set
from xsim_trace.rewrite.templates import ModelTemplate

log = logging.getLogger(__name__)


def _extra(template: ModelTemplate, part, device: str, tp: int, per_layer_ns: int) -> Fraction:
    if part is None:
        return Fraction(0)
    return Fraction(layer_compute_ns(part, template, device, tp), per_layer_ns)


def partition_pipeline(plan: Plan, index: int, templates: Templates, how: str) -> tuple[PipelinePlan, PartitionReport]:
    tset = as_template_set(templates)
    pipe = plan.pipelines[index]
    p, v, n = len(pipe.stages), plan.chunks, plan.model.num_layers
    caps: list[StageCapacity] = []
    for vs in range(p * v):
        s = vs % p
        st = pipe.stages[s]
        dev = plan.group(st.group).device
        template = tset.for_stage(st.group, st.tp)
        per = mean_layer_ns(template, n, dev, st.tp)
        extra = Fraction(0)
        if vs == 0:
            extra += _extra(template, template.pre, dev, st.tp, per)
        if vs == p * v - 1:
            extra += _extra(template, template.post, dev, st.tp, per)
        probe = replace(plan, pipelines=(pipe,))
        mem = max_layers_in_memory(probe, pipe, s) // v
        caps.append(StageCapacity(layer_time_ns=per, max_layers=mem, extra_layer_equiv=extra, name=f"{st.group}/tp{st.tp}"))
    if how == "uniform":
        ranges = uniform_partition(n, p * v)
        counts = [b - a for a, b in ranges]
        times = tuple(int((c + float(cap.extra_layer_equiv)) * cap.layer_time_ns) for c, cap in zip(counts, caps))
        report = PartitionReport(tuple(counts), ranges, tuple(float(c) for c in counts), times, ())
    else:
        report = partition_layers(n, caps)
    chunks_of = [[None] * v for _ in range(p)]
    for vs, rng in enumerate(report.ranges):
        chunks_of[vs % p][vs // p] = rng
    stages = tuple(replace(st, chunks=tuple(chunks_of[s])) for s, st in enumerate(pipe.stages))
    return PipelinePlan(stages, pipe.name), report


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
