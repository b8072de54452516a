"""Structural checks of a deployment plan: layer coverage, TP against the heads, group capacity,
batch arithmetic, schedule constraints, and (optionally) per-device memory."""

from __future__ import annotations

from xsim_trace.errors import ConfigError
from xsim_trace.plan.memory import check_memory
from xsim_trace.plan.model import Plan, virtual_stages
from xsim_trace.plan.schedules import Schedule


def validate_plan(plan: Plan, *, memory: bool = True) -> None:
    """Structural checks (coverage, TP vs heads, group capacity, batch, and memory unless ``memory`` is False)."""
    file = plan.source or None
    m = plan.model
    _check_experts(plan)
    used: dict[str, int] = {}
    for i, pipe in enumerate(plan.pipelines):
        for j, st in enumerate(pipe.stages):
            w = f"pipelines[{i}].stages[{j}]"
            if m.heads % st.tp:
                raise ConfigError(f"TP {st.tp} does not divide the {m.heads} attention heads", file=file, field=f"{w}.tp")
            if m.kv % st.tp and st.tp % m.kv:
                raise ConfigError(f"TP {st.tp} and the {m.kv} KV heads do not divide one another", file=file, field=f"{w}.tp")
            if st.tp % m.expert_parallel:
                raise ConfigError(f"expert_parallel {m.expert_parallel} does not divide TP {st.tp} (experts are split over "
                                  f"the stage's TP ranks)", file=file, field=f"{w}.tp")
            for g, n in st.parts:
                used[g] = used.get(g, 0) + n
        if len(pipe.stages) * plan.chunks > m.num_layers:
            raise ConfigError(f"{len(pipe.stages) * plan.chunks} (virtual) stages for {m.num_layers} layers",
                              file=file, field=f"pipelines[{i}].stages")
        if all(s.chunks for s in pipe.stages):
            check_coverage(plan, i)
    for k, g in enumerate(plan.groups):
        if used.get(g.name, 0) > g.count:
            raise ConfigError(f"device group {g.name!r} is over-subscribed: stages use {used[g.name]} of its {g.count} devices",
                              file=file, field=f"device_groups[{k}].count")
    mbs = m.micro_batch_size
    if plan.global_batch and plan.global_batch != plan.total_micro_batches * mbs:
        shares = " + ".join(str(plan.micro_batches_of(i)) for i in range(plan.dp))
        what = (f"micro_batches {plan.micro_batches} x micro_batch_size {mbs} x DP {plan.dp}"
                if len(set(plan.micro_batches_of(i) for i in range(plan.dp))) == 1
                else f"micro-batches ({shares}) x micro_batch_size {mbs}")
        raise ConfigError(f"global_batch {plan.global_batch} != {what}", file=file, field="global_batch")
    if plan.schedule is Schedule.INTERLEAVED:
        for i, pipe in enumerate(plan.pipelines):
            if len(pipe.stages) > 1 and plan.micro_batches_of(i) % len(pipe.stages):
                where = f"pipelines[{i}].micro_batches" if pipe.micro_batches else "micro_batches"
                raise ConfigError(f"interleaved 1F1B needs micro_batches divisible by the {len(pipe.stages)} stages",
                                  file=file, field=where)
    if memory and not plan.needs_partition:
        check_memory(plan)


def _check_experts(plan: Plan) -> None:
    m, file = plan.model, plan.source or None
    if m.expert_parallel > 1 and not m.is_moe:
        raise ConfigError(f"expert_parallel {m.expert_parallel} needs an MoE model (model.moe_experts)", file=file,
                          field="expert_parallel")
    if m.is_moe and m.moe_experts % m.expert_parallel:
        raise ConfigError(f"expert_parallel {m.expert_parallel} does not divide the {m.moe_experts} experts", file=file,
                          field="expert_parallel")


def check_coverage(plan: Plan, index: int) -> None:
    pipe, file, n = plan.pipelines[index], plan.source or None, plan.model.num_layers
    expect = 0
    for vs, s, (a, b) in virtual_stages(pipe, plan.chunks):
        where = f"pipelines[{index}].stages[{s}].layers" + (f"[{vs // len(pipe.stages)}]" if plan.chunks > 1 else "")
        if a > expect:
            raise ConfigError(f"layers [{expect}, {a}) are not covered", file=file, field=where)
        if a < expect:
            raise ConfigError(f"layers [{a}, {min(b, expect)}) overlap the previous stage", file=file, field=where)
        expect = b
    if expect != n:
        what = f"layers [{expect}, {n}) are not covered" if expect < n else f"layers run to {expect}, the model has {n}"
        raise ConfigError(what, file=file, field=f"pipelines[{index}].stages")
