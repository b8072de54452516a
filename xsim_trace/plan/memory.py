"""Per-device memory of a plan's stages: weights, gradients, optimizer state and in-flight
activations; the most layers a stage holds; the check that every stage fits."""

from __future__ import annotations

from dataclasses import dataclass

from xsim_trace.errors import ConfigError
from xsim_trace.plan.model import PipelinePlan, Plan
from xsim_trace.plan.schedules import Schedule


def in_flight_microbatches(plan: Plan, stage: int, num_stages: int, micro_batches: int | None = None) -> int:
    """Micro-batches whose activations a stage holds at its peak under the schedule (``micro_batches``:
    the pipeline's own count, default the plan's)."""
    m = micro_batches or plan.micro_batches
    if plan.schedule is Schedule.GPIPE:
        return m
    if plan.schedule is Schedule.ONE_F_ONE_B:
        return min(num_stages - stage, m)
    return min((num_stages - stage - 1) * 2 + (plan.chunks - 1) * num_stages + 1, m * plan.chunks)


@dataclass(frozen=True, slots=True)
class StageMemoryParts:
    """Per-device bytes of one stage under the plan's memory model."""

    params: int  # parameters on one device (TP shard)
    weights_bytes: int  # bf16 weights
    grads_bytes: int  # gradients at the model's grad_reduce_bytes (fp32 by default)
    optimizer_bytes: int  # fp32 master copy + Adam moments (over DP with the distributed optimizer)
    activations_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes


def stage_memory_parts(plan: Plan, pipe: PipelinePlan, stage: int, num_layers: int | None = None) -> StageMemoryParts:
    """Per-device bytes of a stage: parameter/optimizer state of its layers (and embedding / head
    on the first / last stage) sharded by TP, plus activations of the in-flight micro-batches."""
    m, st = plan.model, pipe.stages[stage]
    layers = st.num_layers if num_layers is None else num_layers
    params = layers * m.layer_params()
    if stage == 0:
        params += m.embedding_params()
    if stage == len(pipe.stages) - 1:
        params += m.embedding_params()
    weights = params * m.dtype_bytes // st.tp
    grads = params * m.grad_reduce_bytes // st.tp
    optimizer = params * m.optimizer_bytes_per_param // st.tp
    if plan.distributed_optimizer:
        optimizer //= plan.dp  # sharded over the data-parallel replicas (ZeRO-1)
    inflight = in_flight_microbatches(plan, stage, len(pipe.stages), pipe.micro_batches or None)
    per_chunk_layers = layers / max(1, plan.chunks)
    act = int(inflight * per_chunk_layers * m.layer_activation_bytes(st.tp))
    if m.recompute and layers:  # the layer being recomputed holds its full activations once
        act += m.layer_working_bytes(st.tp)
    return StageMemoryParts(params // st.tp, weights, grads, optimizer, act)


def stage_memory_bytes(plan: Plan, pipe: PipelinePlan, stage: int, num_layers: int | None = None) -> int:
    """Per-device bytes of a stage (:func:`stage_memory_parts`, summed)."""
    return stage_memory_parts(plan, pipe, stage, num_layers).total_bytes


def max_layers_in_memory(plan: Plan, pipe: PipelinePlan, stage: int) -> int:
    """Most layers a stage can hold within its device memory."""
    cap = plan.stage_hbm_bytes(pipe.stages[stage])
    lo, hi = 0, plan.model.num_layers
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if stage_memory_bytes(plan, pipe, stage, mid) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_memory(plan: Plan) -> None:
    for i, pipe in enumerate(plan.pipelines):
        for j, st in enumerate(pipe.stages):
            need = stage_memory_bytes(plan, pipe, j)
            dev = min((g.spec() for g in plan.stage_groups(st)), key=lambda d: d.hbm_bytes)
            if need > dev.hbm_bytes:
                raise ConfigError(
                    f"memory exceeded: {st.num_layers} layers at TP {st.tp} need {need / 2**30:.1f} GiB per device, "
                    f"{dev.name} has {dev.hbm_GiB:g} GiB",
                    file=plan.source or None, field=f"pipelines[{i}].stages[{j}]")
