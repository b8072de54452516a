"""An NCCL-faithful collective cost model.

``price_collective(group_shape(cluster, ranks), "all_reduce", size_bytes)`` returns a
:class:`CollectivePrice` (time, NCCL algorithm and protocol, channels, bus bandwidth).  See
docs/network.md ("Collective cost model").
"""

from xsim_trace.network.nccl.kinds import Algo, CollKind, LinkGen, NetKind, Proto
from xsim_trace.network.nccl.model import CollectivePrice, algbw_GBps, bus_factor, candidates, latency_us, price_collective
from xsim_trace.network.nccl.shape import GroupShape, group_shape, shape_of_group

__all__ = [
    "Algo",
    "CollKind",
    "CollectivePrice",
    "GroupShape",
    "LinkGen",
    "NetKind",
    "Proto",
    "algbw_GBps",
    "bus_factor",
    "candidates",
    "group_shape",
    "latency_us",
    "price_collective",
    "shape_of_group",
]
