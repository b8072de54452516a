"""The resolved description of one communicator that the cost model prices: how many ranks on how many
nodes, the GPU generation, the intra-node link and the scale-out network, as effective bandwidths.

Built from a resolved :class:`~xsim_trace.cluster.Cluster` (``group_shape(cluster, ranks)``); nothing is
looked up by name again.  A calibrated cluster (``nccl:`` section of a group) overrides the effective
bandwidths and adds its fitted latencies.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from xsim_trace.cluster.model import Cluster, DeviceGroup, IntraKind
from xsim_trace.errors import ConfigError
from xsim_trace.units import gbps_to_GBps
from xsim_trace.network.nccl.ethernet import ethernet_payload_gbps
from xsim_trace.network.nccl.kinds import Algo, HostCpu, LinkGen, NetKind, Proto
from xsim_trace.network.nccl.links import link_table

_ARCH_LINK = {"volta": LinkGen.NVLINK2, "ampere": LinkGen.NVLINK3, "hopper": LinkGen.NVLINK4, "blackwell": LinkGen.NVLINK5}
_LINK_ARCH = {v: k for k, v in _ARCH_LINK.items()}


@dataclass(frozen=True, slots=True)
class GroupShape:
    """One communicator, as the model sees it.  Bandwidths are GB/s (1e9 B/s) per direction."""

    n_ranks: int
    n_nodes: int
    ranks_per_node: int  # the most ranks of the group on one node
    arch: str  # volta | ampere | hopper | blackwell (NCCL's per-generation constants)
    link: LinkGen
    intra_bw_GBps: float  # ring bus bandwidth inside a node, per GPU
    net: NetKind = NetKind.IB
    host_cpu: HostCpu = HostCpu.INTEL  # NCCL charges AMD hosts more per network operation (tuning.cc)
    nics_per_node: int = 0
    net_bw_GBps: float = 0.0  # effective scale-out bandwidth per node (0: single node)
    nvls_bw_GBps: float = 0.0  # NVLS all-reduce algorithm bandwidth per GPU (0: no NVLS)
    #: the share of ``nvls_bw_GBps`` an NVLS-tree (several nodes) reaches on NVLink (measured, nccl_links.yaml)
    nvls_tree_bw_scale: float = 1.0
    collnet: bool = False
    latency_us: float = 0.0  # added to every collective (calibrated base latency, host launch cost)
    net_latency_us: float = 0.0  # extra latency per inter-node step
    #: per protocol (LL, LL128, Simple): latency added to every collective that uses it, and a factor on its
    #: modelled bandwidth (measured per link generation in nccl_links.yaml, or calibrated)
    proto_latency_us: tuple[float, float, float] = (0.0, 0.0, 0.0)
    proto_bw_scale: tuple[float, float, float] = (1.0, 1.0, 1.0)
    #: Simple's pipeline fill: ``simple_fill_us x min(1, size / simple_fill_bytes)`` (0: none)
    simple_fill_us: float = 0.0
    simple_fill_bytes: float = 0.0
    #: a calibrated tree Simple fill, ``tree_fill_us x min(1, size / tree_fill_bytes)``, in place of
    #: model.tree_pipeline_fill_us (tree_fill_bytes 0: not calibrated)
    tree_fill_us: float = 0.0
    tree_fill_bytes: float = 0.0
    algos: tuple[Algo, ...] | None = None  # the algorithms NCCL may use (NCCL_ALGO); None: every one it supports
    protos: tuple[Proto, ...] | None = None  # the protocols NCCL may use (NCCL_PROTO)
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.n_ranks < 1 or self.n_nodes < 1 or self.ranks_per_node < 1:
            raise ConfigError(f"expected positive rank and node counts, found {self.n_ranks} ranks on {self.n_nodes} nodes")
        if self.n_nodes > 1 and self.net_bw_GBps <= 0:
            raise ConfigError(f"a group over {self.n_nodes} nodes needs a network bandwidth, found {self.net_bw_GBps}")
        key = tuple(getattr(self, f) for f in self.__dataclass_fields__ if f != "_hash")
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash

    @property
    def multi_node(self) -> bool:
        return self.n_nodes > 1

    @property
    def node_class(self) -> int:
        """NCCL's index of per-generation caps: 0 = one node, 1 = two nodes, 2 = more."""
        return min(self.n_nodes, 3) - 1

    @property
    def gpu_net_bw_GBps(self) -> float:
        """Scale-out bandwidth one GPU's point-to-point traffic reaches (its share of the node's NICs)."""
        return self.net_bw_GBps / max(1, self.nics_per_node, self.ranks_per_node) if self.nics_per_node else self.net_bw_GBps

    def with_launch(self, gpus_per_process: int) -> "GroupShape":
        """The same group driven with ``gpus_per_process`` GPUs per process (nccl-tests ``-g N``): the host
        launches one kernel per GPU in turn."""
        extra = max(0, gpus_per_process - 1) * link_table().launch_us_per_extra_gpu
        return _replace(self, latency_us=self.latency_us + extra)


def _replace(s: GroupShape, **changes: object) -> GroupShape:
    values = {f: getattr(s, f) for f in s.__dataclass_fields__ if f != "_hash"}
    values.update(changes)
    return GroupShape(**values)  # type: ignore[arg-type]


def _arch_of(g: DeviceGroup) -> str | None:
    """The group's GPU architecture from its resolved spec (None: generic, or one the link table lacks)."""
    if g.device_spec is None:
        return None
    arch = g.device_spec.arch.lower()
    return arch if arch in _ARCH_LINK else None


def _link_of(g: DeviceGroup, arch: str | None) -> LinkGen:
    per_gpu = g.intra.bw_GBps
    if g.intra.kind is IntraKind.NVSWITCH and per_gpu < 100:
        return LinkGen.PCIE3 if per_gpu <= 16 else LinkGen.PCIE4 if per_gpu <= 32 else LinkGen.PCIE5
    if arch is not None:
        return _ARCH_LINK[arch]
    if g.intra.kind is IntraKind.MESH:
        return LinkGen.NVLINK2
    return LinkGen.NVLINK5 if per_gpu >= 700 else LinkGen.NVLINK4 if per_gpu >= 400 else LinkGen.NVLINK3


def _lanes_per_gpu(g: DeviceGroup) -> int:
    lanes: Counter[int] = Counter()
    for a, b, n in g.intra.mesh:
        lanes[a] += n
        lanes[b] += n
    return max(lanes.values()) if lanes else 1


def intra_bw_GBps(g: DeviceGroup, link: LinkGen) -> float:
    """The ring bus bandwidth NCCL reaches inside one node of ``g`` (per GPU, per direction)."""
    if g.nccl.intra_bw_GBps is not None:
        return g.nccl.intra_bw_GBps
    t = link_table()
    if not link.is_nvlink:
        return g.intra.bw_GBps * t.pcie_efficiency
    if g.intra.kind is IntraKind.MESH:
        links = _lanes_per_gpu(g) * g.intra.bw_GBps / t.nominal_link_GBps[link]
    else:
        links = g.intra.bw_GBps / t.nominal_link_GBps[link]
    bw = max(1.0, round(links)) * t.nccl_link_GBps[link]
    return min(bw, t.ring_cap_GBps.get(link, math.inf))


def net_bw_GBps(g: DeviceGroup) -> float:
    """The node's effective scale-out bandwidth: IB / RoCE at NCCL's fraction of the line rate; Ethernet at the
    line rate less TCP/IP framing at the group's MTU, capped by its transport (:mod:`.ethernet`)."""
    if g.nccl.net_bw_GBps is not None:
        return g.nccl.net_bw_GBps
    if g.nic is None:
        return 0.0
    net = NetKind(g.nccl.net)
    if net is NetKind.ETHERNET:
        per_nic = ethernet_payload_gbps(g.nic.nic_gbps, mtu_bytes=g.nccl.mtu_bytes, offload=g.nccl.tcp_offload)
        return g.nic.count * gbps_to_GBps(per_nic)
    return g.nic.count * g.nic.bw_GBps * link_table().net_efficiency[net]


def _nics_reached(g: DeviceGroup, ranks_per_node: int) -> int:
    """The NICs of a node that a communicator with ``ranks_per_node`` GPUs there drives: each GPU its own
    rail (its nearest NICs, ``nics / GPUs`` of them), so a group of one GPU per node (a DP group of a TP
    run) reaches one rail, not the node's aggregate; the other rails carry the other GPUs' groups."""
    if g.nic is None:
        return 0
    per_gpu = g.nic.count / max(1, g.devices_per_node)
    return max(1, min(g.nic.count, math.ceil(ranks_per_node * per_gpu - 1e-9)))


def _group_net_bw_GBps(g: DeviceGroup, nics: int) -> float:
    """The node's scale-out bandwidth, in the share of its NICs that the group reaches."""
    return net_bw_GBps(g) * nics / g.nic.count if g.nic else net_bw_GBps(g)


def _nvls_bw(g: DeviceGroup, link: LinkGen, arch: str) -> float:
    enabled = g.nccl.nvls
    if enabled is None:
        enabled = g.intra.kind is IntraKind.NVSWITCH and arch in ("hopper", "blackwell") and g.devices_per_node > 1
    if not enabled:
        return 0.0
    return g.nccl.nvls_bw_GBps or link_table().nvls_algbw_GBps.get(link, 0.0)


def _nvls_tree_scale(g: DeviceGroup, link: LinkGen) -> float:
    """NVLS-tree's NVLink-side bandwidth relative to one node's NVLS: the group's ``nccl:`` value, else the link
    generation's measured one (nccl_links.yaml ``protocols``), else 1."""
    if g.nccl.nvls_tree_bw_scale is not None:
        return g.nccl.nvls_tree_bw_scale
    return link_table().protocol_defaults.get(link, {}).get("nvls_tree_bw_scale", 1.0)


_PROTO_KEYS = (("ll", Proto.LL), ("ll128", Proto.LL128), ("simple", Proto.SIMPLE))


def _fill(g: DeviceGroup, link: LinkGen) -> tuple[float, float]:
    defaults = link_table().protocol_defaults.get(link, {})
    us = g.nccl.simple_fill_us if g.nccl.simple_fill_us is not None else defaults.get("simple_fill_us", 0.0)
    size = g.nccl.simple_fill_bytes if g.nccl.simple_fill_bytes is not None else defaults.get("simple_fill_bytes", 0.0)
    return (us, size) if us and size > 0 else (0.0, 0.0)


def _proto_tuning(g: DeviceGroup, link: LinkGen) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """Per-protocol (latency added, bandwidth factor): the group's ``nccl:`` values where set, else the link
    generation's measured defaults (nccl_links.yaml ``protocols``)."""
    defaults = link_table().protocol_defaults.get(link, {})
    lat, scale = [], []
    for key, _ in _PROTO_KEYS:
        own_lat, own_scale = getattr(g.nccl, f"{key}_latency_us"), getattr(g.nccl, f"{key}_bw_scale")
        lat.append(own_lat if own_lat is not None else defaults.get(f"{key}_latency_us", 0.0))
        scale.append(own_scale if own_scale is not None else defaults.get(f"{key}_bw_scale", 1.0))
    return (lat[0], lat[1], lat[2]), (scale[0], scale[1], scale[2])


def _allowed(names: tuple[str, ...] | None, enum: type) -> tuple | None:
    if names is None:
        return None
    return tuple(sorted({enum.parse(n, field="nccl") for n in names}, key=lambda m: m.value))


def shape_of_group(g: DeviceGroup, n_ranks: int, n_nodes: int, ranks_per_node: int) -> GroupShape:
    """The shape of ``n_ranks`` ranks of one device group laid out on ``n_nodes`` nodes."""
    arch = _arch_of(g)
    link = _link_of(g, arch)
    arch = arch or _LINK_ARCH.get(link, "ampere")
    net = NetKind(g.nccl.net)
    t = link_table()
    proto_lat, proto_scale = _proto_tuning(g, link)
    fill_us, fill_bytes = _fill(g, link)
    nics = _nics_reached(g, ranks_per_node)
    return GroupShape(
        n_ranks=n_ranks,
        n_nodes=n_nodes,
        ranks_per_node=ranks_per_node,
        arch=arch,
        link=link,
        intra_bw_GBps=intra_bw_GBps(g, link),
        net=net,
        host_cpu=HostCpu(g.nccl.host_cpu),
        nics_per_node=nics,
        net_bw_GBps=_group_net_bw_GBps(g, nics) if n_nodes > 1 else 0.0,
        nvls_bw_GBps=_nvls_bw(g, link, arch) if ranks_per_node > 1 else 0.0,
        nvls_tree_bw_scale=_nvls_tree_scale(g, link),
        collnet=g.nccl.collnet and n_nodes > 1,
        latency_us=g.nccl.latency_us,
        proto_latency_us=proto_lat,
        proto_bw_scale=proto_scale,
        simple_fill_us=fill_us,
        simple_fill_bytes=fill_bytes,
        tree_fill_us=g.nccl.tree_fill_us or 0.0,
        tree_fill_bytes=g.nccl.tree_fill_bytes or 0.0,
        algos=_allowed(g.nccl.algorithms, Algo),
        protos=_allowed(g.nccl.protocols, Proto),
        net_latency_us=g.nccl.net_latency_us if g.nccl.net_latency_us is not None else t.net_step_latency_us[net],
    )


@functools.lru_cache(maxsize=4096)
def _group_shape(cluster: Cluster, ranks: tuple[int, ...]) -> GroupShape:
    per_node = Counter(cluster.node_of(r) for r in ranks)
    n_nodes, ppn = len(per_node), max(per_node.values())
    groups = sorted({cluster.group_index(r) for r in ranks})
    shapes = [shape_of_group(cluster.groups[gi], len(ranks), n_nodes, ppn) for gi in groups]
    if len(shapes) == 1:
        return shapes[0]
    # a group spanning device groups runs at the pace of its slowest member, and crosses the group links
    slow = min(shapes, key=lambda s: (s.intra_bw_GBps, s.net_bw_GBps))
    names = {cluster.groups[gi].name for gi in groups}
    link_bw = [ln.bw_GBps for ln in cluster.links if ln.a in names and ln.b in names]
    net = min([s.net_bw_GBps for s in shapes] + link_bw)
    return _replace(
        slow,
        net_bw_GBps=net,
        nvls_bw_GBps=min(s.nvls_bw_GBps for s in shapes),
        nvls_tree_bw_scale=min(s.nvls_tree_bw_scale for s in shapes),
        # NCCL reads mixed hosts as AMD ones (tuning.cc: CPU vendor MIXED takes the AMD row)
        host_cpu=HostCpu.AMD if any(s.host_cpu is HostCpu.AMD for s in shapes) else slow.host_cpu,
        collnet=all(s.collnet for s in shapes),
        latency_us=max(s.latency_us for s in shapes),
        proto_latency_us=tuple(max(v) for v in zip(*(s.proto_latency_us for s in shapes))),
        proto_bw_scale=tuple(min(v) for v in zip(*(s.proto_bw_scale for s in shapes))),
        simple_fill_us=max(s.simple_fill_us for s in shapes),
        simple_fill_bytes=max(s.simple_fill_bytes for s in shapes),
        tree_fill_us=max(s.tree_fill_us for s in shapes),
        tree_fill_bytes=max(s.tree_fill_bytes for s in shapes),
        net_latency_us=max(s.net_latency_us for s in shapes),
    )


def group_shape(cluster: Cluster, ranks: Sequence[int] | None = None) -> GroupShape:
    """The shape of the communicator over ``ranks`` (default: every rank) of a resolved cluster."""
    rs = tuple(range(cluster.num_ranks)) if ranks is None else tuple(sorted({int(r) for r in ranks}))
    if not rs:
        raise ConfigError("expected at least one rank in a collective group, found none")
    return _group_shape(cluster, rs)
