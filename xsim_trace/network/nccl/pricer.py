"""The NCCL model as the replay engine's collective pricer (``xsim replay --collective-model nccl``).

The engine prices a whole collective in closed form once every member has arrived; with this pricer each
member finishes ``price_collective(group_shape(cluster, members), kind, size).time_ns`` later: NCCL's
algorithm and protocol choice instead of a walk of one configured schedule.  Chakra collective types map to
NCCL's: gather / scatter (no NCCL kernel; PyTorch runs them as grouped send/recv) are priced as all-gather /
broadcast of the same buffer, a barrier as an all-reduce of one 4-byte element (what PyTorch issues).
"""

from __future__ import annotations

from collections.abc import Sequence

from xsim_trace.cluster.model import Cluster
from xsim_trace.graph.kinds import CollectiveType as T
from xsim_trace.network.nccl.kinds import Algo, CollKind, Proto
from xsim_trace.network.nccl.model import CollectivePrice, price_collective
from xsim_trace.network.nccl.shape import GroupShape, group_shape

KIND_OF: dict[int, CollKind] = {
    T.ALL_REDUCE: CollKind.ALL_REDUCE,
    T.REDUCE: CollKind.REDUCE,
    T.ALL_GATHER: CollKind.ALL_GATHER,
    T.GATHER: CollKind.ALL_GATHER,
    T.SCATTER: CollKind.BROADCAST,
    T.BROADCAST: CollKind.BROADCAST,
    T.ALL_TO_ALL: CollKind.ALL_TO_ALL,
    T.REDUCE_SCATTER: CollKind.REDUCE_SCATTER,
    T.REDUCE_SCATTER_BLOCK: CollKind.REDUCE_SCATTER,
    T.BARRIER: CollKind.ALL_REDUCE,
}
BARRIER_BYTES = 4


class NcclPricer:
    """``offsets_ns(inst, members)`` for :class:`xsim_trace.replay.collective_pricing.CollectivePricer`."""

    def __init__(self, cluster: Cluster, *, algo: Algo | str | None = None, proto: Proto | str | None = None) -> None:
        self.cluster = cluster
        self.algo = algo
        self.proto = proto
        self._shapes: dict[tuple[int, ...], GroupShape] = {}
        #: every price given, by (Chakra collective type, size bytes, group size): what the model chose
        self.chosen: dict[tuple[int, int, int], CollectivePrice] = {}

    def price(self, comm_type: int, members: Sequence[int], size_bytes: int) -> CollectivePrice:
        key = tuple(members)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = group_shape(self.cluster, key)
        size = BARRIER_BYTES if comm_type == T.BARRIER else size_bytes
        p = price_collective(shape, KIND_OF.get(comm_type, CollKind.ALL_REDUCE), size, algo=self.algo, proto=self.proto)
        self.chosen[(int(comm_type), int(size_bytes), len(key))] = p
        return p

    def offsets_ns(self, inst, members: Sequence[int]) -> list[int]:
        return [self.price(inst.comm_type, members, inst.size_bytes).time_ns] * len(members)
