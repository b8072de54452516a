"""Alpha-beta timing of collectives for the workload generator's own estimate.

Rings over ``n`` ranks: all-reduce moves 2(n-1)/n of the buffer per rank, all-gather /
reduce-scatter / all-to-all (n-1)/n; a group that stays inside one node runs at the intra-node
(NVLink) rate, one that spans nodes at the per-GPU NIC rate.  This is only the generator's
closed-form estimate; replay with a network backend is the detailed path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xsim_trace.devices.catalog import get_device
from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.errors import ConfigError
from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.units import GBps_to_bytes_per_s, gbps_to_GBps

#: achievable fraction of the NVLink unidirectional peak that NCCL rings reach (bus bandwidth)
NVLINK_EFFICIENCY = 0.80
#: achievable fraction of the NIC line rate
NIC_EFFICIENCY = 0.85
#: per-direction GPU-to-GPU rate inside a node for a device without NVLink when nothing better is
#: known: PCIe 3.0 x16 (15.75 GB/s)
PCIE_FALLBACK_GBps = 15.75


@dataclass(frozen=True, slots=True)
class LinkModel:
    gpus_per_node: int
    intra_bw_GBps: float  # achievable per-GPU ring bandwidth inside a node
    inter_bw_GBps: float  # achievable per-GPU bandwidth across nodes (one NIC per GPU)
    intra_latency_ns: int = 8_000
    inter_latency_ns: int = 15_000
    step_latency_ns: int = 600  # added per ring step

    def __post_init__(self) -> None:
        if self.gpus_per_node <= 0 or self.intra_bw_GBps <= 0 or self.inter_bw_GBps <= 0:
            raise ConfigError("expected positive gpus_per_node and bandwidths", field="links")

    @classmethod
    def for_device(cls, device: "str | DeviceSpec", gpus_per_node: int = 8, nic_gbps_per_gpu: float = 200.0,
                   intra_GBps: float | None = None) -> "LinkModel":  # noqa: N803
        """Intra-node rate per GPU per direction: ``intra_GBps`` when given (a cluster's), else the
        catalog's NVLink, else PCIe 3.0 x16; NIC line rate in Gb/s per GPU (DGX A100: 200, DGX H100: 400)."""
        dev = get_device(device)
        intra = intra_GBps if intra_GBps else (dev.nvlink_unidir_GBps or PCIE_FALLBACK_GBps)
        return cls(
            gpus_per_node=gpus_per_node,
            intra_bw_GBps=intra * NVLINK_EFFICIENCY,
            inter_bw_GBps=gbps_to_GBps(nic_gbps_per_gpu) * NIC_EFFICIENCY,
        )

    def spans_nodes(self, ranks: tuple[int, ...] | list[int]) -> bool:
        return len({r // self.gpus_per_node for r in ranks}) > 1

    def collective_ns(self, collective: CollectiveType, size_bytes: int, n: int, inter_node: bool) -> int:
        if n <= 1 or size_bytes <= 0:
            return 0
        bw = GBps_to_bytes_per_s(self.inter_bw_GBps if inter_node else self.intra_bw_GBps)
        alpha = self.inter_latency_ns if inter_node else self.intra_latency_ns
        if collective is CollectiveType.ALL_REDUCE:
            factor, steps = 2 * (n - 1) / n, 2 * (n - 1)
        elif collective in (CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER, CollectiveType.ALL_TO_ALL):
            factor, steps = (n - 1) / n, n - 1
        elif collective is CollectiveType.BROADCAST:
            factor, steps = 1.0, n - 1
        else:
            factor, steps = 1.0, 1
        return int(math.ceil(alpha + steps * self.step_latency_ns + factor * size_bytes / bw * 1e9))

    def p2p_ns(self, size_bytes: int, inter_node: bool) -> int:
        if size_bytes <= 0:
            return 0
        bw = GBps_to_bytes_per_s(self.inter_bw_GBps if inter_node else self.intra_bw_GBps)
        alpha = self.inter_latency_ns if inter_node else self.intra_latency_ns
        return int(math.ceil(alpha + size_bytes / bw * 1e9))
