"""Reading a deployment plan from YAML or JSON: every field typed and checked, unknown keys refused
with their path and the closest known key, errors naming file and field; then :mod:`.validate`."""

from __future__ import annotations

import difflib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from xsim_trace.cluster.load import MAX_DEVICES
from xsim_trace.devices import get_device
from xsim_trace.devices.catalog import Catalog
from xsim_trace.errors import ConfigError
from xsim_trace.plan.model import DP_STRATEGIES, PARTITIONS, RING_ORDERS, DeviceGroup, PipelinePlan, Plan, StagePlan
from xsim_trace.plan.model_spec import ModelSpec
from xsim_trace.plan.reshard import ReshardStrategy
from xsim_trace.plan.schedules import Schedule
from xsim_trace.plan.validate import validate_plan

PLAN_FIELDS = frozenset({"name", "model", "device_groups", "pipelines", "micro_batches", "global_batch", "schedule",
                         "chunks", "dp_allreduce", "reshard", "ring_order", "partition", "grad_reduce_dtype",
                         "distributed_optimizer", "expert_parallel", "placement"})
GRAD_DTYPES = {"fp32": 4, "bf16": 2}
GROUP_FIELDS = frozenset({"name", "device", "count", "devices_per_node", "intra_node_GBps", "nic_gbps"})
PIPELINE_FIELDS = frozenset({"name", "stages", "replicas", "micro_batches"})
STAGE_FIELDS = frozenset({"group", "tp", "layers", "groups"})


# --- loading ------------------------------------------------------------------------------------
#: the largest count a plan may give (layers, micro-batches, model sizes); device counts, TP degrees and
#: replicas are bounded by the largest cluster (xsim_trace.cluster.load.MAX_DEVICES)
MAX_PLAN_INT = 1 << 20


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

    def records(self, m: Mapping[str, Any], key: str, where: str, known: Any):
        """``(path prefix, mapping)`` of each entry of the list ``m[key]``: every entry a mapping with
        known keys only."""
        for i, item in enumerate(self.get(m, key, where, list)):
            w = f"{where}{key}[{i}]."
            if not isinstance(item, Mapping):
                raise self.err(f"expected a mapping, found {item!r}", w[:-1])
            self.keys(item, known, w)
            yield w, item

    def positive(self, m: Mapping[str, Any], key: str, where: str, default: Any = ...,
                 maximum: int = MAX_PLAN_INT) -> int:
        v = self.get(m, key, where, int, default)
        if v is not None and v < 1:
            raise self.err(f"expected a positive integer, found {v}", f"{where}{key}")
        if v is not None and v > maximum:
            raise self.err(f"expected an integer up to {maximum}, found {v}", f"{where}{key}")
        return v


def unknown_key_message(key: str, known: Any) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(known))}"
    return f"unknown field {key!r} ({hint})"


_MODEL_FIELDS = {"num_layers": int, "hidden": int, "heads": int, "ffn_hidden": int, "vocab": int, "seq_len": int,
                 "micro_batch_size": int, "kv_heads": int, "moe_experts": int, "moe_top_k": int, "moe_ffn": int}


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
                if k not in ("dtype_bytes", "grad_reduce_bytes", "optimizer_bytes_per_param", "expert_parallel")}
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
    if spec.is_moe and spec.moe_top_k > spec.moe_experts:
        raise c.err(f"moe_top_k {spec.moe_top_k} exceeds the {spec.moe_experts} experts", "model.moe_top_k")
    return spec


def _layer_range(c: _Ctx, v: Any, where: str) -> tuple[int, int]:
    if (not isinstance(v, (list, tuple)) or len(v) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
        raise c.err(f"expected a layer range [start, end), found {v!r}", where)
    a, b = v
    if a < 0 or b <= a:
        raise c.err(f"expected 0 <= start < end, found [{a}, {b})", where)
    return (a, b)


def _stage_groups(c: _Ctx, s: Mapping[str, Any], ws: str, groups: list[DeviceGroup]
                  ) -> tuple[str, int, tuple[tuple[str, int], ...]]:
    """A stage's device group and TP: ``group`` + ``tp``, or ``groups: {g1: n1, g2: n2}`` for one TP
    group of ``n1 + n2`` ranks over two (or more) device groups (``tp`` optional, then their sum)."""
    names = ", ".join(g.name for g in groups)
    if "groups" not in s:
        group = c.get(s, "group", ws, str)
        if not any(g.name == group for g in groups):
            raise c.err(f"unknown device group {group!r} (groups: {names})", ws + "group")
        return group, c.positive(s, "tp", ws, 1, maximum=MAX_DEVICES), ()
    if "group" in s:
        raise c.err("give either group (and tp) or groups, not both", ws + "groups")
    raw = c.get(s, "groups", ws, Mapping)
    if not raw:
        raise c.err("expected a mapping of device group -> TP ranks on it", ws + "groups")
    split = []
    for name, n in raw.items():
        if not any(g.name == name for g in groups):
            raise c.err(f"unknown device group {name!r} (groups: {names})", f"{ws}groups.{name}")
        split.append((str(name), c.positive(raw, name, ws + "groups.", maximum=MAX_DEVICES)))
    total = sum(n for _, n in split)
    tp = c.positive(s, "tp", ws, total, maximum=MAX_DEVICES)
    if tp != total:
        raise c.err(f"tp {tp} != the TP ranks over the groups ({' + '.join(str(n) for _, n in split)})", ws + "tp")
    return split[0][0], tp, (tuple(split) if len(split) > 1 else ())


def plan_from_mapping(data: Any, file: str = "<plan>", *, memory: bool = True, catalog: "Catalog | None" = None) -> Plan:
    """A validated plan from a parsed mapping; ``memory=False`` skips the per-device memory check
    (for callers that report memory instead, e.g. ``xsim generate``).  Device names resolve in
    ``catalog`` (the run's: ``devices.catalog_for(--device-file)``; None = the built-in one), once:
    the groups carry the DeviceSpecs."""
    c = _Ctx(file)
    if not isinstance(data, Mapping):
        raise ConfigError(f"a plan is a mapping, found {type(data).__name__}", file=file)
    c.keys(data, PLAN_FIELDS, "")
    model = _model(c, c.get(data, "model", "", (Mapping, str)))
    grad_dtype = c.get(data, "grad_reduce_dtype", "", str, "fp32")
    if grad_dtype not in GRAD_DTYPES:
        raise c.err(f"unknown gradient dtype {grad_dtype!r} (choose {', '.join(GRAD_DTYPES)})", "grad_reduce_dtype")
    model = replace(model, grad_reduce_bytes=GRAD_DTYPES[grad_dtype],
                    expert_parallel=c.positive(data, "expert_parallel", "", 1, maximum=MAX_DEVICES))
    groups: list[DeviceGroup] = []
    for w, g in c.records(data, "device_groups", "", GROUP_FIELDS):
        name = c.get(g, "name", w, str)
        if any(x.name == name for x in groups):
            raise c.err(f"duplicate device group name {name!r}", w + "name")
        dev = c.get(g, "device", w, str)
        try:
            spec = get_device(dev, catalog)
        except ConfigError as exc:
            raise c.err(exc.message, w + "device") from None
        groups.append(DeviceGroup(
            name=name, device_spec=spec, count=c.positive(g, "count", w, maximum=MAX_DEVICES),
            devices_per_node=c.positive(g, "devices_per_node", w, 8, maximum=MAX_DEVICES),
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
    for w, p in c.records(data, "pipelines", "", PIPELINE_FIELDS):
        stages = []
        for ws, s in c.records(p, "stages", w, STAGE_FIELDS):
            group, tp, split = _stage_groups(c, s, ws, groups)
            raw = s.get("layers")
            ranges: tuple[tuple[int, int], ...] = ()
            if raw is not None and raw != "auto":
                if isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], (list, tuple)):
                    ranges = tuple(_layer_range(c, r, f"{ws}layers[{k}]") for k, r in enumerate(raw))
                else:
                    ranges = (_layer_range(c, raw, ws + "layers"),)
                if len(ranges) != chunks:
                    raise c.err(f"expected {chunks} layer range(s), one per chunk, found {len(ranges)}", ws + "layers")
            stages.append(StagePlan(group=group, tp=tp, chunks=ranges, split=split))
        if not stages:
            raise c.err("a pipeline needs at least one stage", w + "stages")
        own_mb = c.positive(p, "micro_batches", w, None) or 0
        for _ in range(c.positive(p, "replicas", w, 1, maximum=MAX_DEVICES)):
            pipelines.append(PipelinePlan(tuple(stages), str(p.get("name", f"p{len(pipelines)}")), own_mb))
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
        placement=c.get(data, "placement", "", str, "pipeline"),
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


def load_plan(path: str | os.PathLike[str], *, memory: bool = True, catalog: "Catalog | None" = None) -> Plan:
    """Read a YAML or JSON plan file and validate it (``memory=False``: without the memory check);
    its devices resolve in ``catalog`` (None: the built-in one)."""
    return plan_from_mapping(read_plan_document(path), str(Path(path)), memory=memory, catalog=catalog)
