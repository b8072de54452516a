"""One per-layer template per (device group, TP degree) of a plan, from the workload generator.

Each stage's layer, embedding and head ops are the workload generator's per-rank ops
(:mod:`xsim_trace.workload.ops`) at the stage's own TP degree, each compute op timed by
:class:`xsim_trace.workload.timing.Timer` on the stage's own device (the catalog roofline plus the
per-kernel overhead), so no stage is scaled from another device's times.  The TP collectives are
the generator's (all-reduce without sequence parallelism, as the rewriter emits them).
"""

from __future__ import annotations

import logging

from xsim_trace.errors import ConfigError, XsimError
from xsim_trace.rewrite.model_spec import ModelSpec
from xsim_trace.rewrite.plan import DeviceGroup, Plan
from xsim_trace.rewrite.templates import LayerTemplate, ModelTemplate, OpTemplate

log = logging.getLogger(__name__)


def workload_model(plan_model: ModelSpec, preset=None):
    """The workload generator's model for a plan's geometry.  ``preset`` (a
    :class:`xsim_trace.workload.model.ModelSpec`; default: the preset the plan's model is named
    after, if any) keeps what a plan cannot say (norm, biases, flash attention, tied embeddings);
    the plan's geometry wins.  MoE presets are refused: plans describe dense layers."""
    from xsim_trace.workload.model import get_model

    if preset is None and plan_model.name:
        try:
            preset = get_model(plan_model.name)
        except ConfigError:
            preset = None
    if preset is None:
        return plan_model.to_workload()
    if preset.is_moe:
        raise ConfigError(f"{preset.name} is a mixture-of-experts model; deployment plans describe dense layers",
                          field="model")
    return preset.with_(layers=plan_model.num_layers, hidden=plan_model.hidden, ffn=plan_model.ffn_hidden,
                        heads=plan_model.heads, vocab=plan_model.vocab, seq_len=plan_model.seq_len,
                        kv_heads=plan_model.kv, swiglu=plan_model.gated_mlp)


def stage_template(plan_model: ModelSpec, wmodel, group: DeviceGroup, tp: int) -> ModelTemplate:
    """Templates of one layer (and embedding / head) at TP ``tp`` timed on ``group``'s device."""
    from xsim_trace.workload import ops as O
    from xsim_trace.workload.comm import LinkModel
    from xsim_trace.workload.framework import Framework
    from xsim_trace.workload.program import Program
    from xsim_trace.workload.timing import Timer

    dev = group.spec()
    mbs = plan_model.micro_batch_size
    fw = Framework(tp=tp, micro_batch=mbs, global_batch=mbs)
    Program(wmodel, fw)  # the generator's own checks of this TP degree against the model
    timer = Timer(dev, LinkModel.for_device(dev, group.devices_per_node, group.nic_gbps), fw)

    def op(o) -> OpTemplate:
        if isinstance(o, O.CommOp):
            return OpTemplate(name=o.name, kind="coll", comm_type=o.collective, comm_size_bytes=o.size_bytes)
        return OpTemplate(name=o.name, kind="comp", duration_ns=timer.gpu_ns(o), kernel_class=o.kernel_class.value,
                          flops=o.flops, bytes_accessed=o.bytes_accessed, tp_sharded=o.kernel_class.compute_bound)

    def lt(fwd, bwd, layer: int = -1) -> LayerTemplate:
        return LayerTemplate(tuple(op(o) for o in fwd), tuple(op(o) for o in bwd), layer)

    emb_grad = plan_model.embedding_params() * plan_model.dtype_bytes
    return ModelTemplate(
        layers=(lt(O.layer_forward(wmodel, fw), O.layer_backward(wmodel, fw), 0),),
        device=dev.name, tp=tp, activation_bytes=plan_model.boundary_activation_bytes(),
        layer_grad_bytes=plan_model.layer_grad_bytes(),
        pre=lt(O.embedding_forward(wmodel, fw), O.embedding_backward(wmodel, fw)),
        post=lt(O.head_forward(wmodel, fw), O.head_backward(wmodel, fw)),
        source=f"generator:{wmodel.name}@{dev.name}/tp{tp}",
        pre_grad_bytes=emb_grad, post_grad_bytes=emb_grad,
    )


def group_templates(plan: Plan, wmodel=None) -> dict[tuple[str, int], ModelTemplate]:
    """``{(group, tp): template}`` for every (group, TP degree) a stage of ``plan`` uses, in plan order."""
    wmodel = wmodel if wmodel is not None else workload_model(plan.model)
    out: dict[tuple[str, int], ModelTemplate] = {}
    for i, pipe in enumerate(plan.pipelines):
        for j, st in enumerate(pipe.stages):
            key = (st.group, st.tp)
            if key in out:
                continue
            try:
                out[key] = stage_template(plan.model, wmodel, plan.group(st.group), st.tp)
            except XsimError as exc:
                raise ConfigError(exc.message, file=plan.source or None, field=f"pipelines[{i}].stages[{j}].tp") from None
            log.info("templates for %s/tp%d: %s", st.group, st.tp, out[key].source)
    return out


def layer_compute_ns(template: ModelTemplate) -> tuple[int, int]:
    """(forward, backward) compute of one layer for one micro-batch, as the template was timed."""
    layer = template.layers[0]
    return (sum(o.duration_ns for o in layer.fwd if o.kind == "comp"),
            sum(o.duration_ns for o in layer.bwd if o.kind == "comp"))


__all__ = ["group_templates", "layer_compute_ns", "stage_template", "workload_model"]
