"""The vocabulary of the collective cost model: collectives, NCCL algorithms and protocols,
intra-node link generations and scale-out network kinds."""

from __future__ import annotations

import enum

from xsim_trace.errors import ConfigError


class _Parse(enum.Enum):
    @classmethod
    def parse(cls, value: object, *, field: str) -> "_Parse":
        if isinstance(value, cls):
            return value
        key = str(value).strip().lower().replace("-", "_")
        for m in cls:
            if key in (m.value.lower(), m.name.lower()) or key in getattr(m, "_aliases", ()):
                return m
        alias = _ALIASES.get(cls.__name__, {}).get(key)
        if alias is not None:
            return cls(alias)
        names = ", ".join(m.value for m in cls)
        raise ConfigError(f"expected one of {names}, found {value!r}", field=field)


class CollKind(_Parse):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


class Algo(_Parse):
    RING = "ring"
    TREE = "tree"
    NVLS = "nvls"
    NVLS_TREE = "nvls_tree"
    COLLNET_DIRECT = "collnet_direct"
    COLLNET_CHAIN = "collnet_chain"
    PAT = "pat"
    P2P = "p2p"  # send/recv and all-to-all: no collective algorithm, point-to-point channels


class Proto(_Parse):
    LL = "LL"
    LL128 = "LL128"
    SIMPLE = "Simple"


class LinkGen(_Parse):
    """Intra-node link generation (what NCCL's per-link bandwidth and latency class depend on)."""

    NVLINK2 = "nvlink2"
    NVLINK3 = "nvlink3"
    NVLINK4 = "nvlink4"
    NVLINK5 = "nvlink5"
    PCIE3 = "pcie3"
    PCIE4 = "pcie4"
    PCIE5 = "pcie5"

    @property
    def is_nvlink(self) -> bool:
        return self.value.startswith("nvlink")


class NetKind(_Parse):
    IB = "ib"
    ROCE = "roce"
    ETHERNET = "ethernet"  # TCP sockets or TCP offload (e.g. GPUDirect-TCPX/TCPXO)


class HostCpu(_Parse):
    """The host CPU vendor: NCCL's tuning model reads it from the topology (``ncclTopoCpuType``) and charges
    AMD hosts more for posting network operations and caps their multi-node LL bandwidth lower."""

    INTEL = "intel"
    AMD = "amd"
    ARM = "arm"


_ALIASES: dict[str, dict[str, str]] = {
    "CollKind": {
        "allreduce": "all_reduce",
        "allgather": "all_gather",
        "reducescatter": "reduce_scatter",
        "alltoall": "all_to_all",
        "all2all": "all_to_all",
        "sendrecv": "send_recv",
        "send": "send_recv",
        "recv": "send_recv",
        "p2p": "send_recv",
    },
    "Algo": {"nvlstree": "nvls_tree", "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain", "collnet": "collnet_direct"},
    "HostCpu": {"x86": "intel", "genuineintel": "intel", "authenticamd": "amd", "epyc": "amd", "aarch64": "arm", "grace": "arm"},
    "NetKind": {"infiniband": "ib", "rocev2": "roce", "eth": "ethernet", "tcp": "ethernet", "tcpxo": "ethernet", "socket": "ethernet"},
}
