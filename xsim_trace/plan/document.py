"""Plans to and from the outside: a plan as the YAML document ``xsim plan check`` and ``xsim generate
--plan`` read, the device groups of a cluster description, and whether a plan fits a cluster."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from xsim_trace.errors import ConfigError, XsimError
from xsim_trace.plan.model_spec import ModelSpec
from xsim_trace.plan.partition import _chunked
from xsim_trace.plan.model import DeviceGroup, Plan, StagePlan


def groups_from_cluster(cluster: Any) -> tuple[DeviceGroup, ...]:
    """A plan device group per cluster group: its GPU (the spec the cluster loader resolved),
    devices, NVLink and per-device NIC bandwidth."""
    out = []
    for i, g in enumerate(cluster.groups):
        if g.device_spec is None:
            raise ConfigError(f"GPU type {g.gpu_type!r} has no device specs; the search needs its FLOP/s and memory "
                              f"(name a device of the catalog or of --device-file)", field=f"groups[{i}].gpu")
        nic = g.nic.count * g.nic.nic_gbps / g.devices_per_node if g.nic is not None else 400.0
        out.append(DeviceGroup(g.name, g.device_spec, g.count, g.devices_per_node, float(g.intra.bw_GBps or 0.0),
                               float(nic)))
    return tuple(out)


def check_plan_fits(plan: Plan, cluster: Any, *, source: str | None = None) -> None:
    """Every plan device group's devices exist in the cluster: a cluster group of the same name
    and GPU, else the cluster's devices of that GPU type not claimed by other plan groups."""
    have: dict[str, int] = {}
    for g in cluster.groups:
        if g.device_spec is not None:
            have[g.device_spec.name] = have.get(g.device_spec.name, 0) + g.count
    used: dict[str, int] = {}
    for i, g in enumerate(plan.groups):
        need = sum(k for p in plan.pipelines for st in p.stages for name, k in st.parts if name == g.name)
        used[g.device] = used.get(g.device, 0) + need
        if used[g.device] > have.get(g.device, 0):
            raise ConfigError(f"the plan uses {used[g.device]} {g.device} device(s), the cluster {cluster.name} has "
                              f"{have.get(g.device, 0)}", file=source or plan.source or None,
                              field=f"device_groups[{i}]")


def with_counts(stages: Sequence[StagePlan], counts: Sequence[int], chunks: int) -> tuple[StagePlan, ...]:
    """Stages with layer ranges for per-stage layer counts (chunks near-even, virtual-stage order)."""
    per_v = _chunked(tuple(counts), chunks)
    p = len(stages)
    ranges: list[list[tuple[int, int] | None]] = [[None] * chunks for _ in range(p)]
    start = 0
    for vs, c in enumerate(per_v):
        ranges[vs % p][vs // p] = (start, start + c)
        start += c
    return tuple(replace(st, chunks=tuple(ranges[s])) for s, st in enumerate(stages))  # type: ignore[arg-type]


def _model_doc(m: ModelSpec) -> dict[str, Any]:
    try:
        from xsim_trace.workload.model import get_model

        preset = ModelSpec.from_workload(get_model(m.name), seq_len=m.seq_len, micro_batch_size=m.micro_batch_size)
        if preset == m:
            return {"preset": m.name, "seq_len": m.seq_len, "micro_batch_size": m.micro_batch_size}
    except XsimError:
        pass
    doc = {"name": m.name, "num_layers": m.num_layers, "hidden": m.hidden, "heads": m.heads, "ffn_hidden": m.ffn_hidden,
           "vocab": m.vocab, "seq_len": m.seq_len, "micro_batch_size": m.micro_batch_size, "gated_mlp": m.gated_mlp}
    if m.kv_heads:
        doc["kv_heads"] = m.kv_heads
    return doc


def plan_document(plan: Plan, *, name: str | None = None) -> dict[str, Any]:
    """The plan as a mapping :func:`xsim_trace.plan.model.plan_from_mapping` reads back to the same
    plan (consecutive identical pipelines become one entry with ``replicas``)."""
    if plan.needs_partition:
        raise ConfigError("resolve the layer partition before writing the plan", field="pipelines")
    pipes: list[dict[str, Any]] = []
    prev = None
    for i, p in enumerate(plan.pipelines):
        stages = [{**({"groups": dict(s.split)} if s.split else {"group": s.group}), "tp": s.tp,
                   "layers": [list(c) for c in s.chunks] if plan.chunks > 1 else list(s.chunks[0])} for s in p.stages]
        key = (p.stages, plan.micro_batches_of(i))
        if key == prev:
            pipes[-1]["replicas"] += 1
            continue
        pipes.append({"name": f"p{len(pipes)}", "replicas": 1, "micro_batches": plan.micro_batches_of(i),
                      "stages": stages})
        prev = key
    doc: dict[str, Any] = {
        "name": name or plan.name,
        "model": _model_doc(plan.model),
        "device_groups": [{"name": g.name, "device": g.device, "count": g.count, "devices_per_node": g.devices_per_node,
                           **({"intra_node_GBps": g.intra_node_GBps} if g.intra_node_GBps else {}),
                           "nic_gbps": g.nic_gbps} for g in plan.groups],
        "pipelines": pipes,
        "micro_batches": plan.micro_batches,
        "global_batch": plan.total_micro_batches * plan.model.micro_batch_size,
        "schedule": plan.schedule.value,
        "reshard": plan.reshard.value,
        "dp_allreduce": plan.dp_allreduce,
        "ring_order": plan.ring_order,
        "partition": "given",
    }
    if plan.chunks > 1:
        doc["chunks"] = plan.chunks
    if plan.distributed_optimizer:
        doc["distributed_optimizer"] = True
    if plan.placement != "pipeline":
        doc["placement"] = plan.placement
    return doc
