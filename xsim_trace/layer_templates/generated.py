"""One per-layer template per (device group, TP degree) of a plan, from the workload generator.

Each stage's layer, embedding and head ops are the workload generator's per-rank ops
(:mod:`xsim_trace.workload.ops`) at the stage's own TP degree, each compute op timed by
:func:`xsim_trace.layer_templates.template.templates_from_ops` on the stage's own device (the catalog roofline
plus the per-kernel overhead, as the generator's timer does), so no stage is scaled from another
device's times.  The TP collectives are the generator's (all-reduce without sequence parallelism, as
the rewriter emits them).
"""

from __future__ import annotations

import logging

from xsim_trace.errors import ConfigError, XsimError
from xsim_trace.plan.model_spec import ModelSpec
from xsim_trace.plan.model import DeviceGroup, Plan
from xsim_trace.layer_templates.template import ModelTemplate, templates_from_ops

log = logging.getLogger(__name__)


def workload_model(plan_model: ModelSpec, preset=None):
    """The workload generator's model for a plan's geometry.  ``preset`` (a
    :class:`xsim_trace.workload.model.ModelSpec`; default: the preset the plan's model is named
    after, if any) keeps what a plan cannot say (norm, biases, flash attention, tied embeddings);
    the plan's geometry wins, MoE fields (experts, top-k, expert width) included."""
    from xsim_trace.workload.model import get_model

    if preset is None and plan_model.name:
        try:
            preset = get_model(plan_model.name)
        except ConfigError:
            preset = None
    if preset is None:
        return plan_model.to_workload()
    return preset.with_(layers=plan_model.num_layers, hidden=plan_model.hidden, ffn=plan_model.ffn_hidden,
                        heads=plan_model.heads, vocab=plan_model.vocab, seq_len=plan_model.seq_len,
                        kv_heads=plan_model.kv, swiglu=plan_model.gated_mlp, moe_experts=plan_model.moe_experts,
                        moe_top_k=plan_model.moe_top_k, moe_ffn=plan_model.moe_ffn)


def stage_template(plan_model: ModelSpec, wmodel, group: DeviceGroup, tp: int) -> ModelTemplate:
    """Templates of one layer (and embedding / head) at TP ``tp`` timed on ``group``'s device."""
    from xsim_trace.workload.framework import Framework
    from xsim_trace.workload.program import Program

    mbs = plan_model.micro_batch_size
    ep, etp = plan_model.expert_split(tp)
    Program(wmodel, Framework(tp=tp, micro_batch=mbs, global_batch=mbs, ep=ep, etp=etp))  # the generator's checks of this TP degree
    dev = group.spec()
    return templates_from_ops(plan_model, wmodel, dev, tp, f"generator:{wmodel.name}@{dev.name}/tp{tp}")


def group_templates(plan: Plan, wmodel=None) -> dict[tuple[str, int], ModelTemplate]:
    """``{(group, tp): template}`` for every (group, TP degree) a stage of ``plan`` uses, in plan order."""
    wmodel = wmodel if wmodel is not None else workload_model(plan.model)
    out: dict[tuple[str, int], ModelTemplate] = {}
    for i, pipe in enumerate(plan.pipelines):
        for j, st in enumerate(pipe.stages):
            for group, _ in st.parts:  # a TP group over device groups: one per group at the stage's TP
                key = (group, st.tp)
                if key in out:
                    continue
                try:
                    out[key] = stage_template(plan.model, wmodel, plan.group(group), st.tp)
                except XsimError as exc:
                    raise ConfigError(exc.message, file=plan.source or None, field=f"pipelines[{i}].stages[{j}].tp") from None
                log.info("templates for %s/tp%d: %s", group, st.tp, out[key].source)
    return out


def layer_compute_ns(template: ModelTemplate) -> tuple[int, int]:
    """(forward, backward) compute of one layer for one micro-batch, as the template was timed."""
    layer = template.layers[0]
    return (sum(o.duration_ns for o in layer.fwd if o.kind == "comp"),
            sum(o.duration_ns for o in layer.bwd if o.kind == "comp"))


__all__ = ["group_templates", "layer_compute_ns", "stage_template", "workload_model"]
