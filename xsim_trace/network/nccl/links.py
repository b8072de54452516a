"""Effective link bandwidths per link generation (``xsim_trace/data/nccl_links.yaml``, each number cited there)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources


from xsim_trace.network.nccl.kinds import LinkGen, NetKind


@dataclass(frozen=True, slots=True)
class EthernetLimits:
    """Ethernet transports (:mod:`.ethernet`): the socket path's ceiling per NIC (measured) and the fraction of
    the line rate a TCP offload path reaches (estimate)."""

    socket_ceiling_gbps: float
    offload_max_fraction: float


@dataclass(frozen=True, slots=True)
class LinkTable:
    nominal_link_GBps: dict[LinkGen, float]
    nccl_link_GBps: dict[LinkGen, float]
    ring_cap_GBps: dict[LinkGen, float]
    nvls_algbw_GBps: dict[LinkGen, float]
    pcie_efficiency: float
    net_efficiency: dict[NetKind, float]  # IB / RoCE; Ethernet goes through ``ethernet``
    ethernet: EthernetLimits
    net_step_latency_us: dict[NetKind, float]
    p2p_efficiency: float
    launch_us_per_extra_gpu: float
    #: per link generation, measured per-protocol defaults (``{ll128_bw_scale: ..., simple_latency_us: ...}``)
    protocol_defaults: dict[LinkGen, dict[str, float]]


@functools.cache
def link_table() -> LinkTable:
    import yaml  # noqa: PLC0415 - read once, when NCCL pricing first needs it

    text = (resources.files("xsim_trace") / "data" / "nccl_links.yaml").read_text(encoding="utf-8")
    d = yaml.safe_load(text)
    nv = {LinkGen(k): v for k, v in d["nvlink"].items()}
    return LinkTable(
        nominal_link_GBps={g: float(v["nominal_link_GBps"]) for g, v in nv.items()},
        nccl_link_GBps={g: float(v["nccl_link_GBps"]) for g, v in nv.items()},
        ring_cap_GBps={g: float(v["ring_cap_GBps"]) for g, v in nv.items() if "ring_cap_GBps" in v},
        nvls_algbw_GBps={LinkGen(k): float(v["algbw_GBps"]) for k, v in d["nvls"].items()},
        pcie_efficiency=float(d["pcie_efficiency"]),
        net_efficiency={NetKind(k): float(v) for k, v in d["net_efficiency"].items()},
        ethernet=EthernetLimits(socket_ceiling_gbps=float(d["ethernet"]["socket_ceiling_gbps"]),
                                offload_max_fraction=float(d["ethernet"]["offload_max_fraction"])),
        net_step_latency_us={NetKind(k): float(v) for k, v in d["net_step_latency_us"].items()},
        p2p_efficiency=float(d["p2p_efficiency"]),
        launch_us_per_extra_gpu=float(d["launch_us_per_extra_gpu"]),
        protocol_defaults={LinkGen(k): {n: float(x) for n, x in v.items() if n != "fitted_on"}
                           for k, v in (d.get("protocols") or {}).items()},
    )
