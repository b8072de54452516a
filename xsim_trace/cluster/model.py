"""The cluster description: device groups, their intra-node fabric, NICs, switch fabric, and
the links joining groups.  Frozen dataclasses; validation lives in :mod:`xsim_trace.cluster.load`.

Units: ``bw_GBps`` = 1e9 bytes/s (per direction), ``bw_gbps`` / ``nic_gbps`` = 1e9 bits/s,
``latency_ns`` = nanoseconds per link (hop); latencies may be fractional (the backends round).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cached_property

from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.errors import ConfigError
from xsim_trace.units import gbps_to_GBps


class IntraKind(enum.Enum):
    """How the GPUs of one node are wired."""

    NVSWITCH = "nvswitch"  # every GPU has one link of bw_GBps to a node switch (NVSwitch / PCIe switch)
    MESH = "mesh"  # direct GPU-GPU links (e.g. DGX-1 hybrid cube mesh), bw_GBps per lane


class FabricKind(enum.Enum):
    """The scale-out network between the NICs of one group's nodes."""

    SINGLE_SWITCH = "single-switch"
    RAIL_ONLY = "rail-only"  # one switch per NIC rail; cross-rail traffic first crosses NVLink
    FAT_TREE = "fat-tree"  # two-tier leaf/spine Clos with an oversubscription ratio


@dataclass(frozen=True, slots=True)
class IntraNode:
    kind: IntraKind = IntraKind.NVSWITCH
    bw_GBps: float = 0.0  # per GPU per direction (nvswitch) or per lane per direction (mesh)
    latency_ns: float = 0.0  # per link
    #: mesh only: (local a, local b, lanes) undirected GPU pairs
    mesh: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Nic:
    count: int  # NICs per node
    nic_gbps: float  # per NIC per direction
    latency_ns: float = 0.0  # GPU -> NIC hop (PCIe + NIC processing)

    @property
    def bw_GBps(self) -> float:
        return gbps_to_GBps(self.nic_gbps)


@dataclass(frozen=True, slots=True)
class Fabric:
    kind: FabricKind = FabricKind.SINGLE_SWITCH
    latency_ns: float = 0.0  # per switch link
    #: fat-tree: downlink bandwidth of a leaf / its uplink bandwidth (1.0 = non-blocking)
    oversubscription: float = 1.0
    #: fat-tree: NIC ports per leaf switch
    nics_per_leaf: int = 32
    #: fat-tree: number of spine switches (0 = one per leaf uplink group, derived: min(leaves, nics_per_leaf))
    spines: int = 0


@dataclass(frozen=True, slots=True)
class NcclTuning:
    """What the NCCL collective model (``xsim_trace.network.nccl``) needs beyond the wiring, and what
    ``xsim calibrate nccl-tests`` fits.  ``None`` = the model's default for the hardware."""

    net: str = "ib"  # scale-out kind: ib | roce | ethernet
    host_cpu: str = "intel"  # host CPU vendor: intel | amd | arm (NCCL's tuning depends on it)
    nvls: bool | None = None  # NVLink SHARP available (default: Hopper or newer on NVSwitch)
    collnet: bool = False  # in-network reduction (SHARP) in the scale-out switches
    intra_bw_GBps: float | None = None  # ring bus bandwidth inside a node (per GPU, per direction)
    net_bw_GBps: float | None = None  # effective scale-out bandwidth per node (all NICs, per direction)
    nvls_bw_GBps: float | None = None  # NVLS all-reduce algorithm bandwidth per GPU
    latency_us: float = 0.0  # added to every collective (a fitted base latency)
    simple_latency_us: float | None = None  # added to Simple-protocol collectives (pipeline fill and flush, fitted)
    net_latency_us: float | None = None  # extra latency per inter-node step
    algorithms: tuple[str, ...] | None = None  # the algorithms NCCL may use (NCCL_ALGO); None: all it supports
    protocols: tuple[str, ...] | None = None  # the protocols NCCL may use (NCCL_PROTO); None: all it supports
    ll_latency_us: float | None = None  # added to LL-protocol collectives (fitted)
    ll128_latency_us: float | None = None  # added to LL128-protocol collectives (fitted)
    ll_bw_scale: float | None = None  # factor on the LL protocol's modelled bandwidth (fitted)
    ll128_bw_scale: float | None = None  # factor on the LL128 protocol's modelled bandwidth (fitted)
    simple_bw_scale: float | None = None  # factor on the Simple protocol's modelled bandwidth (fitted)
    #: NVLS-tree's NVLink-side bandwidth across nodes, relative to single-node NVLS (measured per link generation)
    nvls_tree_bw_scale: float | None = None
    #: Simple-protocol pipeline fill: ``simple_fill_us x min(1, size / simple_fill_bytes)`` is added (fitted)
    simple_fill_us: float | None = None
    simple_fill_bytes: float | None = None
    #: a tree all-reduce's Simple fill, ``tree_fill_us x min(1, size / tree_fill_bytes)``, in place of the one the
    #: model derives from NCCL's chunking (fitted)
    tree_fill_us: float | None = None
    tree_fill_bytes: float | None = None
    #: Ethernet (``net: ethernet``): the MTU in bytes (None: 1500), and whether NCCL runs a TCP offload data path
    #: into GPU memory (GPUDirect-TCPX/TCPXO) instead of its socket transport (network/nccl/ethernet.py)
    mtu_bytes: int | None = None
    tcp_offload: bool = False


@dataclass(frozen=True, slots=True)
class DeviceGroup:
    name: str
    gpu_type: str
    count: int
    devices_per_node: int
    intra: IntraNode
    nic: Nic | None
    fabric: Fabric
    nccl: NcclTuning = NcclTuning()
    #: ``gpu_type`` resolved once, by the loader, in the run's device catalog (built-in + ``--device-file``);
    #: None for a network-only (``generic``) group.  Everything downstream reads this, never the name.
    device_spec: DeviceSpec | None = None

    @property
    def num_nodes(self) -> int:
        return self.count // self.devices_per_node


@dataclass(frozen=True, slots=True)
class GroupLink:
    """A (WAN-like) link between the fabrics of two groups, full duplex."""

    a: str
    b: str
    bw_gbps: float
    latency_ns: float = 0.0

    @property
    def bw_GBps(self) -> float:
        return gbps_to_GBps(self.bw_gbps)


@dataclass(frozen=True, slots=True, order=True)
class DevicePos:
    """Where a rank lives: group index, node index within the group, GPU index within the node."""

    group: int
    node: int
    local: int


@dataclass(frozen=True)
class Cluster:
    name: str
    groups: tuple[DeviceGroup, ...]
    links: tuple[GroupLink, ...] = ()
    #: rank -> device; empty = ranks numbered group by group, node by node
    rank_map: tuple[DevicePos, ...] = field(default=())

    @cached_property
    def positions(self) -> tuple[DevicePos, ...]:
        if self.rank_map:
            return self.rank_map
        out = []
        for gi, g in enumerate(self.groups):
            for node in range(g.num_nodes):
                for local in range(g.devices_per_node):
                    out.append(DevicePos(gi, node, local))
        return tuple(out)

    @cached_property
    def _rank_of_pos(self) -> dict[DevicePos, int]:
        return {p: r for r, p in enumerate(self.positions)}

    @property
    def num_ranks(self) -> int:
        return sum(g.count for g in self.groups)

    def _pos(self, rank: int) -> DevicePos:
        if not 0 <= int(rank) < self.num_ranks:
            raise ConfigError(f"expected a rank in [0, {self.num_ranks}), found {rank}", rank=rank)
        return self.positions[int(rank)]

    def group_of(self, rank: int) -> DeviceGroup:
        return self.groups[self._pos(rank).group]

    def group_index(self, rank: int) -> int:
        return self._pos(rank).group

    def node_of(self, rank: int) -> int:
        """Global node index: nodes numbered group by group."""
        p = self._pos(rank)
        return sum(g.num_nodes for g in self.groups[: p.group]) + p.node

    def local_of(self, rank: int) -> int:
        return self._pos(rank).local

    def gpu_type(self, rank: int) -> str:
        return self.group_of(rank).gpu_type

    def rank_at(self, group: int, node: int, local: int) -> int:
        return self._rank_of_pos[DevicePos(group, node, local)]

    def ranks_of_group(self, name: str) -> tuple[int, ...]:
        gi = [g.name for g in self.groups].index(name)
        return tuple(r for r, p in enumerate(self.positions) if p.group == gi)

    @property
    def num_nodes(self) -> int:
        return sum(g.num_nodes for g in self.groups)

    @staticmethod
    def from_dict(data: object, *, file: object = None) -> "Cluster":
        from xsim_trace.cluster.load import cluster_from_dict  # noqa: PLC0415 - avoid a cycle

        return cluster_from_dict(data, file=file)

    def to_dict(self) -> dict:
        from xsim_trace.cluster.load import cluster_to_dict  # noqa: PLC0415

        return cluster_to_dict(self)
