"""Heterogeneous workloads from a deployment plan (``xsim generate --plan PLAN.yaml``).

One template per (device group, TP degree) from the workload generator's ops timed on that group's
device (:mod:`xsim_trace.layer_templates.generated`), the rewriter for the plan's layout, reshards,
LCM DP rings and schedule, and per stage the plan's memory model (the one ``xsim plan check``
enforces) as a report with an out-of-memory flag instead of an error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

from xsim_trace.devices.catalog import Catalog
from xsim_trace.errors import ConfigError, XsimError
from xsim_trace.layer_templates.generated import group_templates, layer_compute_ns, workload_model
from xsim_trace.plan.placement import Layout, layout
from xsim_trace.plan.model_spec import ModelSpec
from xsim_trace.plan.memory import stage_memory_parts
from xsim_trace.plan.model import Plan
from xsim_trace.plan.parse import plan_from_mapping, read_plan_document
from xsim_trace.rewrite.rewriter import RewriteResult, rewrite
from xsim_trace.layer_templates.template import ModelTemplate

log = logging.getLogger(__name__)

#: the geometry a --model preset and a plan's model must agree on (seq_len / batch are the plan's)
_GEOMETRY = ("num_layers", "hidden", "heads", "ffn_hidden", "vocab", "kv", "gated_mlp")


def is_deployment_plan(doc: Any) -> bool:
    """A deployment plan has device groups / pipelines; a generator spec file has model + framework."""
    return isinstance(doc, Mapping) and ("device_groups" in doc or "pipelines" in doc)


def _plan_model_fields(spec: ModelSpec) -> dict[str, Any]:
    return {"name": spec.name, "num_layers": spec.num_layers, "hidden": spec.hidden, "heads": spec.heads,
            "ffn_hidden": spec.ffn_hidden, "vocab": spec.vocab, "seq_len": spec.seq_len, "kv_heads": spec.kv_heads,
            "gated_mlp": spec.gated_mlp}


def plan_for_generate(doc: Any, file: str, *, model: str | None = None, model_file: str | None = None,
                      catalog: "Catalog | None" = None):
    """(plan, workload model) from a parsed plan document, without the memory check (generate
    reports memory); its devices resolve in ``catalog`` (the run's; None = the built-in one).  ``model`` (a preset or a name in ``model_file``) sets the plan's model when
    the plan has none; when the plan names one, their geometry must agree (ConfigError otherwise):
    the plan's layer ranges and TP degrees were made for its model."""
    preset = None
    if model:
        from xsim_trace.workload.model import get_model

        try:
            preset = get_model(model, model_file)
        except ConfigError as exc:
            raise ConfigError(exc.message, field="--model") from None
        if isinstance(doc, Mapping) and doc.get("model") is None:
            doc = dict(doc, model=_plan_model_fields(ModelSpec.from_workload(preset)))
    if isinstance(doc, Mapping) and doc.get("model") is None:
        raise ConfigError("the plan names no model: add model: (a preset or its geometry) or give --model",
                          file=file, field="model")
    plan = plan_from_mapping(doc, file, memory=False, catalog=catalog)
    if preset is not None:
        want = ModelSpec.from_workload(preset)
        diff = [f"{k} {getattr(plan.model, k)} vs {getattr(want, k)}" for k in _GEOMETRY
                if getattr(plan.model, k) != getattr(want, k)]
        if diff:
            raise ConfigError(f"the plan's model {plan.model.name or '(unnamed)'} disagrees with --model {preset.name}: "
                              f"{', '.join(diff)}", file=file, field="model")
    try:
        wmodel = workload_model(plan.model, preset)
    except ConfigError as exc:
        raise ConfigError(exc.message, file=file, field="model") from None
    return plan, wmodel


def load_plan_for_generate(path: str, *, model: str | None = None, model_file: str | None = None,
                           catalog: "Catalog | None" = None):
    return plan_for_generate(read_plan_document(path), str(path), model=model, model_file=model_file, catalog=catalog)


@dataclass(frozen=True)
class StageReport:
    pipeline: int
    stage: int
    group: str
    device: str
    tp: int
    layers: tuple[tuple[int, int], ...]
    ranks: tuple[int, ...]
    layer_fwd_ns: int  # one layer, one micro-batch, on this stage's device at its TP degree
    layer_bwd_ns: int
    memory: Any  # xsim_trace.workload.memory.StageMemory (capacity = the device's HBM)

    @property
    def label(self) -> str:
        return f"pipelines[{self.pipeline}].stages[{self.stage}] ({self.group})"

    def as_dict(self) -> dict:
        mem = self.memory.as_dict()
        mem.pop("stage")
        return {"pipeline": self.pipeline, "stage": self.stage, "tp": self.tp, "layers": [list(r) for r in self.layers],
                "ranks": list(self.ranks), "layer_fwd_ns": self.layer_fwd_ns, "layer_bwd_ns": self.layer_bwd_ns,
                "memory": mem}


@dataclass(frozen=True)
class HeteroWorkload:
    plan: Plan  # layer ranges resolved
    layout: Layout
    templates: dict[tuple[str, int], ModelTemplate]
    stages: tuple[StageReport, ...]
    model_name: str
    result: RewriteResult | None = None  # traces, comm groups (None when built without traces)
    partition_reports: tuple = ()

    @property
    def oom_stages(self) -> tuple[StageReport, ...]:
        return tuple(s for s in self.stages if s.memory.out_of_memory)

    def group_ranks(self, group: str) -> tuple[int, ...]:
        return tuple(r.rank for r in self.layout.ranks if r.group == group)

    def summary(self) -> dict:
        plan = self.plan
        groups = []
        for g in plan.groups:
            stages = [s for s in self.stages if s.group == g.name]
            if not stages:
                continue
            groups.append({
                "name": g.name, "device": g.device, "hbm_GiB": round(g.spec().hbm_bytes / 2**30, 3),
                "ranks": list(self.group_ranks(g.name)),
                "layer_compute_ns": [{"tp": tp, "fwd": f, "bwd": b} for tp, f, b in sorted(
                    {(s.tp, s.layer_fwd_ns, s.layer_bwd_ns) for s in stages})],
                "stages": [s.as_dict() for s in stages],
            })
        return {
            "plan": plan.name, "source": plan.source, "model": self.model_name,
            "world_size": len(self.layout.ranks), "dp": plan.dp, "micro_batches": plan.micro_batches,
            "micro_batch_size": plan.model.micro_batch_size, "seq_len": plan.model.seq_len,
            "schedule": plan.schedule.value, "reshard": plan.reshard.value, "partition": plan.partition,
            "memory_model": "plan (16 B/param state / TP + Korthikanti activations of in-flight micro-batches); "
                            "capacity = device HBM",
            "groups": groups,
            "out_of_memory": bool(self.oom_stages),
            "oom_stages": [s.label for s in self.oom_stages],
        }


def generate_for_plan(plan: Plan, wmodel=None, *, traces: bool = True) -> HeteroWorkload:
    """Per-rank traces for ``plan`` with every stage timed on its own group's device and TP degree
    (``traces=False``: templates, layout and reports only)."""
    from xsim_trace.plan.partition import resolve_partition
    from xsim_trace.workload.memory import StageMemory

    wmodel = wmodel if wmodel is not None else workload_model(plan.model)
    templates = group_templates(plan, wmodel)
    res = None
    try:
        # partition without the memory error: the auto partition still keeps stages within memory
        # where it can; what does not fit is flagged in the report
        plan, reports = resolve_partition(plan, templates, memory=False)
        if traces:
            res = rewrite(plan, templates)
    except XsimError as exc:
        if "file" in exc.context or not plan.source:
            raise
        raise type(exc)(exc.message, file=plan.source, **exc.context) from None
    lay = res.layout if res is not None else layout(plan)
    stages = []
    group_of = {r.rank: r.group for r in lay.ranks}
    for i, pipe in enumerate(plan.pipelines):
        for j, st in enumerate(pipe.stages):
            parts = stage_memory_parts(plan, pipe, j)
            for name, _ in st.parts:  # a TP group over device groups: a report per group
                g = plan.group(name)
                fwd, bwd = layer_compute_ns(templates[(name, st.tp)])
                stages.append(StageReport(
                    pipeline=i, stage=j, group=name, device=g.device, tp=st.tp, layers=st.chunks,
                    ranks=tuple(r for r in lay.of(i, j) if group_of[r] == name), layer_fwd_ns=fwd, layer_bwd_ns=bwd,
                    memory=StageMemory(j, parts.params, parts.weights_bytes, parts.grads_bytes, parts.optimizer_bytes,
                                       parts.activations_bytes, g.spec().hbm_bytes)))
    for s in stages:
        if s.memory.out_of_memory:
            log.warning("%s needs %.1f GiB per device, %s has %.0f GiB", s.label, s.memory.total_bytes / 2**30, s.device,
                        s.memory.capacity_bytes / 2**30)
    return HeteroWorkload(plan, lay, templates, tuple(stages), wmodel.name, res, reports)


__all__ = ["HeteroWorkload", "StageReport", "generate_for_plan", "is_deployment_plan", "load_plan_for_generate",
           "plan_for_generate"]
