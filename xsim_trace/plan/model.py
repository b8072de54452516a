"""The deployment plan model: device groups, pipelines of stages (group, TP, layers), DP replicas,
batch, schedule and strategies.  Reading a plan is :mod:`.parse`, its checks :mod:`.validate`, its
per-device memory :mod:`.memory`.

A pipeline is one data-parallel replica; ``replicas: N`` on a pipeline entry repeats it.  A stage's
``layers`` is ``[start, end)`` (or, for interleaved 1F1B, a list of ``v`` such ranges, one per
chunk); stages without layers are filled by the plan's ``partition`` (``auto`` or ``uniform``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from xsim_trace.devices.spec import DeviceSpec, require_spec
from xsim_trace.errors import ConfigError
from xsim_trace.plan.model_spec import ModelSpec
from xsim_trace.plan.reshard import ReshardStrategy
from xsim_trace.plan.schedules import Schedule
from xsim_trace.units import gbps_to_GBps

DP_STRATEGIES = ("lcm-rings", "single-ring")
RING_ORDERS = ("bandwidth", "as-given")
PARTITIONS = ("given", "auto", "uniform")
#: where a plan's ranks sit in their device groups: ``pipeline`` (each pipeline's stages on the group's next devices,
#: pipeline after pipeline) or ``stage`` (stage by stage, each stage's replicas on consecutive devices, so a stage's
#: data-parallel peers share a node where they fit: HexiScale / FlashFlex's layout, ``--devices_id``)
PLACEMENTS = ("pipeline", "stage")


@dataclass(frozen=True, slots=True)
class DeviceGroup:
    name: str
    device_spec: DeviceSpec  # resolved at the boundary, in the run's catalog (built-in + --device-file)
    count: int
    devices_per_node: int = 8
    intra_node_GBps: float = 0.0  # 0 = the device's NVLink (one direction)
    nic_gbps: float = 400.0  # per device, inter-node

    def __post_init__(self) -> None:
        require_spec(self.device_spec, "DeviceGroup.device_spec")

    @property
    def device(self) -> str:
        """The device's canonical catalog name (for messages, keys and documents)."""
        return self.device_spec.name

    def spec(self) -> DeviceSpec:
        return self.device_spec

    @property
    def intra_GBps(self) -> float:
        return self.intra_node_GBps or self.spec().nvlink_unidir_GBps


@dataclass(frozen=True, slots=True)
class StagePlan:
    group: str  # the device group of its TP ranks (the first one when the TP group spans several)
    tp: int
    chunks: tuple[tuple[int, int], ...] = ()  # layer ranges, one per model chunk; () = to be partitioned
    split: tuple[tuple[str, int], ...] = ()  # a TP group over device groups: (group, TP ranks there); () = all on group

    @property
    def num_layers(self) -> int:
        return sum(b - a for a, b in self.chunks)

    @property
    def parts(self) -> tuple[tuple[str, int], ...]:
        """(device group, TP ranks on it), in TP-rank order."""
        return self.split or ((self.group, self.tp),)

    @property
    def mixed(self) -> bool:
        """One TP group over two or more device groups (paced by the slower device and link)."""
        return len(self.parts) > 1


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
    placement: str = "pipeline"  # one of PLACEMENTS

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"unknown placement {self.placement!r} (choose {', '.join(PLACEMENTS)})",
                              file=self.source or None, field="placement")

    def stage_groups(self, st: StagePlan) -> tuple[DeviceGroup, ...]:
        """The device groups a stage's TP ranks sit on."""
        return tuple(self.group(g) for g, _ in st.parts)

    def stage_hbm_bytes(self, st: StagePlan) -> int:
        """Per-device memory of a stage: the smallest of its devices (every TP rank holds 1/tp)."""
        return min(g.spec().hbm_bytes for g in self.stage_groups(st))

    def stage_tp_GBps(self, st: StagePlan) -> float:
        """The link a stage's TP collectives run on: NVLink inside one group, else (a TP group over
        two device groups: nodes of different groups) the slower NIC of the groups, one direction."""
        groups = self.stage_groups(st)
        if len(groups) == 1:
            return groups[0].intra_GBps
        return gbps_to_GBps(min(g.nic_gbps for g in groups))

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


def virtual_stages(pipe: PipelinePlan, chunks: int) -> list[tuple[int, int, tuple[int, int]]]:
    """(virtual stage, stage, layer range) in virtual-stage order (chunk c of stage s is c*p+s)."""
    p = len(pipe.stages)
    out = [(c * p + s, s, st.chunks[c]) for s, st in enumerate(pipe.stages) for c in range(chunks)]
    return sorted(out)
