"""Deployment plans: device groups, pipelines of stages (group, TP, layers), DP replicas, batch,
schedule and strategies; loaded from YAML or JSON and validated with errors naming file and field.

A pipeline is one data-parallel replica; ``replicas: N`` on a pipeline entry repeats it.  A stage's
``layers`` is ``[start, end)`` (or, for interleaved 1F1B, a list of ``v`` such ranges, one per
chunk); stages without layers are filled by the plan's ``partition`` (``auto`` or ``uniform``).
"""

from __future__ import annotations

import difflib
import functools
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping


from xsim_trace.devices import get_device
from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.errors import ConfigError
from xsim_trace.rewrite.model_spec import ModelSpec
from xsim_trace.rewrite.reshard import ReshardStrategy
from xsim_trace.rewrite.schedules import Schedule

DP_STRATEGIES = ("lcm-rings", "single-ring")


@functools.lru_cache(maxsize=None)
def _device_spec(name: str) -> DeviceSpec:
    return get_device(name)
RING_ORDERS = ("bandwidth", "as-given")
PARTITIONS = ("given", "auto", "uniform")


@dataclass(frozen=True, slots=True)
class DeviceGroup:
    name: str
    device: str  # canonical catalog name
    count: int
    devices_per_node: int = 8
    intra_node_GBps: float = 0.0  # 0 = the device's NVLink (one direction)
    nic_gbps: float = 400.0  # per device, inter-node

    def spec(self) -> DeviceSpec:
        return _device_spec(self.device)

    @property
    def intra_GBps(self) -> float:
        return self.intra_node_GBps or self.spec().nvlink_unidir_GBps


@dataclass(frozen=True, slots=True)
class StagePlan:
    group: str
    tp: int
    chunks: tuple[tuple[int, int], ...] = ()  # layer ranges, one per model chunk; () = to be partitioned

    @property
    def num_layers(self) -> int:
        return sum(b - a for a, b in self.chunks)


@dataclass(frozen=True, slots=True)
class PipelinePlan:
    stages: tuple[StagePlan, ...]
    name: str = ""
    micro_batches: int = 0  # this replica's micro-batches (its share of the global batch); 0 = the plan's


@dataclass(frozen=True, slots=True)
class Plan:
    model: ModelSpec
    groups: tuple[DeviceGroup, ...]
    pipelines: tuple[PipelinePlan, ...]
    micro_batches: int
    schedule: Schedule = Schedule.ONE_F_ONE_B
    chunks: int = 1  # v of interleaved 1F1B
    dp_allreduce: str = "lcm-rings"
    reshard: ReshardStrategy = ReshardStrategy.DIRECT
    ring_order: str = "bandwidth"
    partition: str = "given"
    distributed_optimizer: bool = False  # ZeRO-1: DP reduce-scatters gradients, all-gathers weights
    global_batch: int = 0
    name: str = ""
    source: str = field(default="", compare=False)

    def group(self, name: str) -> DeviceGroup:
        for g in self.groups:
            if g.name == name:
                return g
        raise ConfigError(f"unknown device group {name!r}", file=self.source or None)

    @property
    def dp(self) -> int:
        return len(self.pipelines)

    def micro_batches_of(self, index: int) -> int:
        """Micro-batches pipeline ``index`` runs per step (its own share, else the plan's)."""
        return self.pipelines[index].micro_batches or self.micro_batches

    @property
    def total_micro_batches(self) -> int:
        """Micro-batches over all replicas: the global batch in micro-batches."""
        return sum(self.micro_batches_of(i) for i in range(self.dp))

    @property
    def needs_partition(self) -> bool:
        return any(not s.chunks for p in self.pipelines for s in p.stages)

    def with_strategy(self, reshard: ReshardStrategy | str | None = None, partition: str | None = None) -> "Plan":
        out = self
        if reshard is not None:
            out = replace(out, reshard=ReshardStrategy.parse(reshard) if isinstance(reshard, str) else reshard)
        if partition is not None:
            if partition not in PARTITIONS:
                raise ConfigError(f"unknown partition {partition!r} (choose {', '.join(PARTITIONS)})", field="partition")
            pipes = tuple(replace(p, stages=tuple(replace(s, chunks=()) for s in p.stages)) for p in out.pipelines) \
                if partition != "given" else out.pipelines
            out = replace(out, partition=partition, pipelines=pipes)
        return out


PLAN_FIELDS = frozenset({"name", "model", "device_groups", "pipelines", "micro_batches", "global_batch", "schedule",
                         "chunks", "dp_allreduce", "reshard", "ring_order", "partition", "grad_reduce_dtype",
                         "distributed_optimizer"})
GRAD_DTYPES = {"fp32": 4, "bf16": 2}
GROUP_FIELDS = frozenset({"name", "device", "count", "devices_per_node", "intra_node_GBps", "nic_gbps"})
PIPELINE_FIELDS = frozenset({"name", "stages", "replicas", "micro_batches"})
STAGE_FIELDS = frozenset({"group", "tp", "layers"})


# --- loading ------------------------------------------------------------------------------------
class _Ctx:
    def __init__(self, file: str) -> None:
        self.file = file

    def err(self, msg: str, where: str) -> ConfigError:
        return ConfigError(msg, file=self.file, field=where)

    def get(self, m: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in m or m[key] is None:
            if default is ...:
                raise self.err("required field is missing", f"{where}{key}")
            return default
        v = m[key]
        if kind is int and (isinstance(v, bool) or not isinstance(v, int)):
            raise self.err(f"expected an integer, found {v!r}", f"{where}{key}")
        if kind is float and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise self.err(f"expected a number, found {v!r}", f"{where}{key}")
        if kind not in (int, float) and not isinstance(v, kind):
            kinds = kind if isinstance(kind, tuple) else (kind,)
            name = "/".join(getattr(k, "__name__", None) or getattr(k, "_name", None) or str(k) for k in kinds)
            raise self.err(f"expected {name}, found {v!r}", f"{where}{key}")
        return float(v) if kind is float else v

    def keys(self, m: Mapping[str, Any], known: Any, where: str) -> None:
        """Refuse a key that is not in ``known``, naming its path and the closest known key."""
        for key in m:
            if key not in known:
                raise self.err(unknown_key_message(str(key), known), f"{where}{key}")

    def positive(self, m: Mapping[str, Any], key: str, where: str, default: Any = ...) -> int:
        v = self.get(m, key, where, int, default)
        if v is not None and v < 1:
            raise self.err(f"expected a positive integer, found {v}", f"{where}{key}")
        return v


def unknown_key_message(key: str, known: Any) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(known))}"
    return f"unknown field {key!r} ({hint})"


_MODEL_FIELDS = {"num_layers": int, "hidden": int, "heads": int, "ffn_hidden": int, "vocab": int, "seq_len": int,
                 "micro_batch_size": int, "kv_heads": int}


def _model(c: _Ctx, m: Any) -> ModelSpec:
    if isinstance(m, str):
        m = {"preset": m}
    if not isinstance(m, Mapping):
        raise c.err(f"expected a mapping or a preset name, found {m!r}", "model")
    base: dict[str, Any] = {}
    if "preset" in m:
        from xsim_trace.workload.model import get_model

        try:
            spec = ModelSpec.from_workload(get_model(c.get(m, "preset", "model.", str)))
        except ConfigError as exc:
            raise c.err(exc.message, "model.preset") from None
        base = {k: getattr(spec, k) for k in ModelSpec.__slots__
                if k not in ("dtype_bytes", "grad_reduce_bytes", "optimizer_bytes_per_param")}
        m = {k: v for k, v in m.items() if k != "preset"}
    c.keys(m, set(_MODEL_FIELDS) | {"gated_mlp", "name", "preset"}, "model.")
    kw: dict[str, Any] = {k: v for k, v in base.items() if k != "name"}
    for key in _MODEL_FIELDS:
        required = key in ("num_layers", "hidden", "heads", "ffn_hidden") and key not in base
        v = c.positive(m, key, "model.", ... if required else None) if key != "kv_heads" else c.get(m, key, "model.", int, None)
        if v is not None:
            kw[key] = v
    if "gated_mlp" in m:
        kw["gated_mlp"] = bool(c.get(m, "gated_mlp", "model.", bool))
    kw["name"] = str(m.get("name", base.get("name", "")))
    spec = ModelSpec(**kw)
    if spec.kv_heads and spec.heads % spec.kv_heads:
        raise c.err(f"kv_heads {spec.kv_heads} does not divide heads {spec.heads}", "model.kv_heads")
    return spec


def _layer_range(c: _Ctx, v: Any, where: str) -> tuple[int, int]:
    if (not isinstance(v, (list, tuple)) or len(v) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
        raise c.err(f"expected a layer range [start, end), found {v!r}", where)
    a, b = v
    if a < 0 or b <= a:
        raise c.err(f"expected 0 <= start < end, found [{a}, {b})", where)
    return (a, b)


def plan_from_mapping(data: Any, file: str = "<plan>", *, memory: bool = True) -> Plan:
    """A validated plan from a parsed mapping; ``memory=False`` skips the per-device memory check
    (for callers that report memory instead, e.g. ``xsim generate``)."""
    c = _Ctx(file)
    if not isinstance(data, Mapping):
        raise ConfigError(f"a plan is a mapping, found {type(data).__name__}", file=file)
    c.keys(data, PLAN_FIELDS, "")
    model = _model(c, c.get(data, "model", "", (Mapping, str)))
    grad_dtype = c.get(data, "grad_reduce_dtype", "", str, "fp32")
    if grad_dtype not in GRAD_DTYPES:
        raise c.err(f"unknown gradient dtype {grad_dtype!r} (choose {', '.join(GRAD_DTYPES)})", "grad_reduce_dtype")
    model = replace(model, grad_reduce_bytes=GRAD_DTYPES[grad_dtype])
    groups: list[DeviceGroup] = []
    for i, g in enumerate(c.get(data, "device_groups", "", list)):
        w = f"device_groups[{i}]."
        if not isinstance(g, Mapping):
            raise c.err(f"expected a mapping, found {g!r}", w[:-1])
        c.keys(g, GROUP_FIELDS, w)
        name = c.get(g, "name", w, str)
        if any(x.name == name for x in groups):
            raise c.err(f"duplicate device group name {name!r}", w + "name")
        dev = c.get(g, "device", w, str)
        try:
            spec = get_device(dev)
        except ConfigError as exc:
            raise c.err(exc.message, w + "device") from None
        groups.append(DeviceGroup(
            name=name, device=spec.name, count=c.positive(g, "count", w),
            devices_per_node=c.positive(g, "devices_per_node", w, 8),
            intra_node_GBps=c.get(g, "intra_node_GBps", w, float, 0.0),
            nic_gbps=c.get(g, "nic_gbps", w, float, 400.0),
        ))
    if not groups:
        raise c.err("at least one device group is needed", "device_groups")
    schedule = Schedule.parse(c.get(data, "schedule", "", str, "1f1b"), file=file, field_name="schedule")
    chunks = c.positive(data, "chunks", "", 1)
    if schedule is not Schedule.INTERLEAVED and chunks != 1:
        raise c.err(f"chunks > 1 needs schedule interleaved-1f1b, found {schedule.value}", "chunks")
    partition = c.get(data, "partition", "", str, "given")
    if partition not in PARTITIONS:
        raise c.err(f"unknown partition {partition!r} (choose {', '.join(PARTITIONS)})", "partition")
    pipelines: list[PipelinePlan] = []
    for i, p in enumerate(c.get(data, "pipelines", "", list)):
        w = f"pipelines[{i}]."
        if not isinstance(p, Mapping):
            raise c.err(f"expected a mapping, found {p!r}", w[:-1])
        c.keys(p, PIPELINE_FIELDS, w)
        stages = []
        for j, s in enumerate(c.get(p, "stages", w, list)):
            ws = f"{w}stages[{j}]."
            if not isinstance(s, Mapping):
                raise c.err(f"expected a mapping, found {s!r}", ws[:-1])
            c.keys(s, STAGE_FIELDS, ws)
            group = c.get(s, "group", ws, str)
            if not any(g.name == group for g in groups):
                raise c.err(f"unknown device group {group!r} (groups: {', '.join(g.name for g in groups)})", ws + "group")
            tp = c.positive(s, "tp", ws, 1)
            raw = s.get("layers")
            ranges: tuple[tuple[int, int], ...] = ()
            if raw is not None and raw != "auto":
                if isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], (list, tuple)):
                    ranges = tuple(_layer_range(c, r, f"{ws}layers[{k}]") for k, r in enumerate(raw))
                else:
                    ranges = (_layer_range(c, raw, ws + "layers"),)
                if len(ranges) != chunks:
                    raise c.err(f"expected {chunks} layer range(s), one per chunk, found {len(ranges)}", ws + "layers")
            stages.append(StagePlan(group=group, tp=tp, chunks=ranges))
        if not stages:
            raise c.err("a pipeline needs at least one stage", w + "stages")
        own_mb = c.positive(p, "micro_batches", w, None) or 0
        for _ in range(c.positive(p, "replicas", w, 1)):
            pipelines.append(PipelinePlan(tuple(stages), str(p.get("name", f"p{i}")), own_mb))
    if not pipelines:
        raise c.err("at least one pipeline is needed", "pipelines")
    every_own = all(p.micro_batches for p in pipelines)
    plan_mb = c.positive(data, "micro_batches", "", max(p.micro_batches for p in pipelines) if every_own else ...)
    plan = Plan(
        model=model, groups=tuple(groups), pipelines=tuple(pipelines),
        micro_batches=plan_mb,
        schedule=schedule, chunks=chunks,
        dp_allreduce=c.get(data, "dp_allreduce", "", str, "lcm-rings"),
        reshard=ReshardStrategy.parse(c.get(data, "reshard", "", str, "direct"), file=file, field_name="reshard"),
        ring_order=c.get(data, "ring_order", "", str, "bandwidth"),
        partition=partition if partition != "given" or not any(not s.chunks for p in pipelines for s in p.stages) else "auto",
        global_batch=c.get(data, "global_batch", "", int, 0),
        distributed_optimizer=c.get(data, "distributed_optimizer", "", bool, False),
        name=str(data.get("name", Path(file).stem)),
        source=file,
    )
    if plan.dp_allreduce not in DP_STRATEGIES:
        raise c.err(f"unknown DP all-reduce strategy {plan.dp_allreduce!r} (choose {', '.join(DP_STRATEGIES)})", "dp_allreduce")
    if plan.ring_order not in RING_ORDERS:
        raise c.err(f"unknown ring order {plan.ring_order!r} (choose {', '.join(RING_ORDERS)})", "ring_order")
    validate_plan(plan, memory=memory)
    return plan


def read_plan_document(path: str | os.PathLike[str]) -> Any:
    """The parsed YAML / JSON of a plan file (not validated)."""
    from xsim_trace.io.documents import load_document

    return load_document(path, "plan")


def load_plan(path: str | os.PathLike[str], *, memory: bool = True) -> Plan:
    """Read a YAML or JSON plan file and validate it (``memory=False``: without the memory check)."""
    return plan_from_mapping(read_plan_document(path), str(Path(path)), memory=memory)


# --- validation ---------------------------------------------------------------------------------
def validate_plan(plan: Plan, *, memory: bool = True) -> None:
    """Structural checks (coverage, TP vs heads, group capacity, batch, and memory unless ``memory`` is False)."""
    file = plan.source or None
    m = plan.model
    used: dict[str, int] = {}
    for i, pipe in enumerate(plan.pipelines):
        for j, st in enumerate(pipe.stages):
            w = f"pipelines[{i}].stages[{j}]"
            if m.heads % st.tp:
                raise ConfigError(f"TP {st.tp} does not divide the {m.heads} attention heads", file=file, field=f"{w}.tp")
            if m.kv % st.tp and st.tp % m.kv:
                raise ConfigError(f"TP {st.tp} and the {m.kv} KV heads do not divide one another", file=file, field=f"{w}.tp")
            used[st.group] = used.get(st.group, 0) + st.tp
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


def virtual_stages(pipe: PipelinePlan, chunks: int) -> list[tuple[int, int, tuple[int, int]]]:
    """(virtual stage, stage, layer range) in virtual-stage order (chunk c of stage s is c*p+s)."""
    p = len(pipe.stages)
    out = [(c * p + s, s, st.chunks[c]) for s, st in enumerate(pipe.stages) for c in range(chunks)]
    return sorted(out)


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
    return StageMemoryParts(params // st.tp, weights, grads, optimizer, act)


def stage_memory_bytes(plan: Plan, pipe: PipelinePlan, stage: int, num_layers: int | None = None) -> int:
    """Per-device bytes of a stage (:func:`stage_memory_parts`, summed)."""
    return stage_memory_parts(plan, pipe, stage, num_layers).total_bytes


def max_layers_in_memory(plan: Plan, pipe: PipelinePlan, stage: int) -> int:
    """Most layers a stage can hold within its device memory."""
    cap = plan.group(pipe.stages[stage].group).spec().hbm_bytes
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
            dev = plan.group(st.group).spec()
            if need > dev.hbm_bytes:
                raise ConfigError(
                    f"memory exceeded: {st.num_layers} layers at TP {st.tp} need {need / 2**30:.1f} GiB per device, "
                    f"{dev.name} has {dev.hbm_GiB:g} GiB",
                    file=plan.source or None, field=f"pipelines[{i}].stages[{j}]")


__all__ = [
    "DeviceGroup", "PLAN_FIELDS", "Plan", "PipelinePlan", "StageMemoryParts", "StagePlan", "check_coverage", "check_memory",
    "load_plan", "max_layers_in_memory", "plan_from_mapping", "read_plan_document", "stage_memory_bytes",
    "stage_memory_parts", "validate_plan", "virtual_stages",
]
