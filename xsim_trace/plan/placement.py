"""Where each rank of a plan lives: pipeline, stage, TP rank, device group, node."""

from __future__ import annotations

from dataclasses import dataclass

from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.plan.model import Plan
from xsim_trace.units import gbps_to_GBps


@dataclass(frozen=True, slots=True)
class RankInfo:
    rank: int
    pipeline: int
    stage: int
    tp_rank: int
    tp: int
    group: str
    device_spec: DeviceSpec  # its group's device, as resolved with the plan
    device_index: int  # index within its device group
    node: str  # "<group>/<node index>": ranks on one node share the intra-node link

    @property
    def device(self) -> str:
        """The device's canonical catalog name."""
        return self.device_spec.name

    def bw_GBps(self, other: "RankInfo", plan: Plan) -> float:
        """Link bandwidth between two ranks: intra-node NVLink when they share a node, else the
        slower of the two NICs."""
        if self.node == other.node:
            return plan.group(self.group).intra_GBps
        return gbps_to_GBps(min(plan.group(self.group).nic_gbps, plan.group(other.group).nic_gbps))


@dataclass(frozen=True, slots=True)
class Layout:
    ranks: tuple[RankInfo, ...]
    stage_ranks: dict[tuple[int, int], tuple[int, ...]]  # (pipeline, stage) -> ranks by TP rank

    def of(self, pipeline: int, stage: int) -> tuple[int, ...]:
        return self.stage_ranks[(pipeline, stage)]


def layout(plan: Plan) -> Layout:
    """Ranks numbered pipeline by pipeline, stage by stage, TP rank by TP rank.  Devices: under the plan's
    ``pipeline`` placement each stage takes the next ``tp`` devices of its group (so a TP group stays inside a
    node when it fits); under ``stage`` placement stage 0 of every pipeline first, then stage 1, ... (a stage's
    replicas on consecutive devices); a TP group over several device groups takes the next devices of each in
    turn."""
    cursor = {g.name: 0 for g in plan.groups}
    order = [(p, s) for p, pipe in enumerate(plan.pipelines) for s in range(len(pipe.stages))]
    if plan.placement == "stage":
        order.sort(key=lambda ps: (ps[1], ps[0]))
    devices: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for p, s in order:
        mine = []
        for name, count in plan.pipelines[p].stages[s].parts:
            for _ in range(count):
                mine.append((name, cursor[name]))
                cursor[name] += 1
        devices[(p, s)] = mine
    ranks: list[RankInfo] = []
    stage_ranks: dict[tuple[int, int], tuple[int, ...]] = {}
    for p, pipe in enumerate(plan.pipelines):
        for s, st in enumerate(pipe.stages):
            mine = []
            for name, idx in devices[(p, s)]:
                g = plan.group(name)
                r = len(ranks)
                ranks.append(RankInfo(r, p, s, len(mine), st.tp, g.name, g.device_spec, idx,
                                      f"{g.name}/{idx // g.devices_per_node}"))
                mine.append(r)
            stage_ranks[(p, s)] = tuple(mine)
    return Layout(tuple(ranks), stage_ranks)
