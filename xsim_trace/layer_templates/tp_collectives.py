"""TP (and expert-parallel) collectives for a template measured at TP 1 and run at a higher TP.

A trace captured or generated at TP 1 has no TP collectives, and scaling its compute to TP ``t``
does not create them.  :func:`at_tp` adds the ones the workload generator places at TP ``t``
(Megatron's all-reduce, or all-gather / reduce-scatter under sequence parallelism, of the
``b*s*h`` activations around every attention and MLP block, forward and backward; the vocab-parallel
embedding and head's; an MoE layer's all-to-alls): same types, sizes and order.  Each goes after
the op the generator puts it after when the template has an op of that name (a generated
template), else after the compute op where the same share of the layer's compute is done (a
captured trace, whose kernel names differ).  Dependencies follow from the position: the rewriter
chains a layer's ops in order, so a collective waits for the compute before it and the compute
after it waits for the collective.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from xsim_trace.layer_templates.template import LayerTemplate, ModelTemplate, OpTemplate, templates_from_ops
from xsim_trace.plan.model_spec import ModelSpec


def has_collectives(template: ModelTemplate) -> bool:
    parts = template.layers + tuple(p for p in (template.pre, template.post) if p is not None)
    return any(o.kind == "coll" for lt in parts for o in lt.fwd + lt.bwd)


def needs_collectives(template: ModelTemplate, tp: int) -> bool:
    """True when ``template`` (measured at TP 1, without collectives) runs at TP ``tp`` > 1."""
    return tp > 1 and template.tp == 1 and not has_collectives(template)


def at_tp(template: ModelTemplate, tp: int, model: ModelSpec, wmodel=None) -> ModelTemplate:
    """``template`` with the generator's TP collectives at TP ``tp`` inserted (itself when it needs none).

    ``wmodel`` is the workload generator's model (default: the plan geometry's, as
    :func:`xsim_trace.layer_templates.generated.workload_model` gives).  Raises the generator's
    :class:`~xsim_trace.errors.ConfigError` when ``tp`` does not fit the model (heads, experts).
    """
    if not needs_collectives(template, tp):
        return template
    if wmodel is None:
        from xsim_trace.layer_templates.generated import workload_model
        wmodel = workload_model(model)
    from xsim_trace.workload.framework import Framework
    from xsim_trace.workload.program import Program

    ep, etp = model.expert_split(tp)
    mbs = model.micro_batch_size
    Program(wmodel, Framework(tp=tp, micro_batch=mbs, global_batch=mbs, ep=ep, etp=etp))  # the generator's checks
    gen = templates_from_ops(model, wmodel, template.device_spec, tp, "tp-collectives")
    layers = tuple(merged(lt, gen.layer(0)) for lt in template.layers)
    pre = merged(template.pre, gen.pre) if template.pre is not None and gen.pre is not None else template.pre
    post = merged(template.post, gen.post) if template.post is not None and gen.post is not None else template.post
    return dataclasses.replace(template, layers=layers, pre=pre, post=post,
                               source=f"{template.source}+tp{tp} collectives")


def merged(mine: LayerTemplate, gen: LayerTemplate) -> LayerTemplate:
    """``mine`` with ``gen``'s collectives inserted, forward and backward."""
    return dataclasses.replace(mine, fwd=_insert(mine.fwd, gen.fwd), bwd=_insert(mine.bwd, gen.bwd))


def _insert(mine: Sequence[OpTemplate], gen: Sequence[OpTemplate]) -> tuple[OpTemplate, ...]:
    """``mine`` with the collectives of ``gen`` at the matching positions (see the module text)."""
    colls = [(k, o) for k, o in enumerate(gen) if o.kind == "coll"]
    if not colls:
        return tuple(mine)
    after: list[int] = []  # number of ops of ``mine`` before each collective
    floor = 0
    for k, _ in colls:
        pos = max(floor, _position(mine, gen, k))
        after.append(pos)
        floor = pos
    out: list[OpTemplate] = []
    j = 0
    for i, op in enumerate(list(mine) + [None]):
        while j < len(colls) and after[j] == i:
            out.append(colls[j][1])
            j += 1
        if op is not None:
            out.append(op)
    return tuple(out)


def _position(mine: Sequence[OpTemplate], gen: Sequence[OpTemplate], k: int) -> int:
    """How many ops of ``mine`` come before the collective at ``gen[k]``."""
    before = [o for o in gen[:k] if o.kind == "comp"]
    if not before:
        return 0
    names = [o.name for o in mine]
    if before[-1].name in names:
        return names.index(before[-1].name) + 1
    total_gen = sum(o.duration_ns for o in gen if o.kind == "comp")
    total_mine = sum(o.duration_ns for o in mine if o.kind == "comp")
    if total_gen <= 0 or total_mine <= 0:
        return len(mine)
    share = sum(o.duration_ns for o in before) / total_gen
    done = 0
    for i, o in enumerate(mine):
        if o.kind == "comp":
            done += o.duration_ns
        if done >= share * total_mine:
            return i + 1
    return len(mine)


__all__ = ["at_tp", "has_collectives", "merged", "needs_collectives"]
