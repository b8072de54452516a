"""The NCCL model's price of a collective, carried by flows on a backend that runs flows (flow, ns3,
analytical-ca), so that a collective gives one answer on every backend and differs only where its
links are really shared.

A collective priced ``T = latency + T_bw`` by :class:`~xsim_trace.network.nccl.pricer.NcclPricer`
(NCCL's algorithm, protocol, channels, per-protocol bandwidth) becomes one flow per edge of the
group's ring (member i -> member i+1, as NCCL's ring moves data; for an all-to-all, one flow per
ordered pair, in NCCL's point-to-point rounds: see :func:`p2p_rounds`; for a broadcast / reduce, the
chain from / to the root).  Each flow carries the bytes
its edge moves at its uncontended rate in ``T_bw`` (the rate of the whole edge set running together,
endpoint ports shared, as ``analytical`` prices a batch), so that alone in the network every flow's
transmission takes ``T_bw`` and the collective ends at ``start + latency + T_bw``, the analytical
answer; a flow slowed by other traffic on one of its links delays the collective by as much.  The
protocol's overhead (LL's flags, a channel's cap) is thus charged as link occupancy, as it is on the
real fabric.  The collective ends when its last flow lands, minus the largest of what the backend adds
to one of its flows alone beyond its bytes at the bottleneck (the path latency, already inside the
model's ``latency``, and, on ``analytical-ca``, the chunk pipeline's filling:
:class:`~xsim_trace.network.protocol.LoneFlowTiming` where the backend declares it, else the path
latency), plus ``latency``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from xsim_trace.cluster.model import Cluster
from xsim_trace.graph.kinds import CollectiveType as T
from xsim_trace.network.nccl import group_shape, latency_us
from xsim_trace.network.nccl.kinds import Algo, CollKind, Proto
from xsim_trace.network.nccl.pricer import BARRIER_BYTES, KIND_OF, NcclPricer
from xsim_trace.network.protocol import capabilities_of
from xsim_trace.replay.compile import CollectiveInstance

#: bytes of the probe batch that measures each edge's uncontended rate (large: rounding vanishes)
PROBE_BYTES = 1 << 34


@dataclass(frozen=True, slots=True)
class LoweredCollective:
    """What one collective instance runs: ``flows`` (src rank, dst rank, bytes, what the backend adds to the
    flow alone beyond its bytes at the bottleneck, ns) and the
    model's fixed ``latency_ns``; ``time_ns`` is the model's whole price (the uncontended answer)."""

    flows: tuple[tuple[int, int, int, float], ...]
    latency_ns: int
    time_ns: int
    algo: str
    proto: str


def p2p_rounds(order: Sequence[int], node_of: Callable[[int], int] | None = None) -> list[tuple[int, int]]:
    """Every ordered pair of ``order``'s ranks, round by round as NCCL schedules a group's sends (an
    all-to-all): in round (node delta ``dn``, local delta ``dl``) the rank at local index ``l`` of node
    ``k`` sends to local index ``l + dl`` of node ``k + dn``, so in each round every rank sends to one
    peer and receives from one.  Started in this order, the flows that share a port (a GPU's NIC or
    NVLink port) queue there in the same round order on every rank, and no two of one round meet at a
    receiver; grouped by sender instead, every sender's first cross-node flow would go to the same
    rank.  Without ``node_of`` the group is one node (rank i sends to i + d in round d)."""
    nodes: dict[int, list[int]] = {}
    for r in order:
        nodes.setdefault(node_of(r) if node_of is not None else 0, []).append(r)
    groups = list(nodes.values())
    where = {r: (k, i) for k, g in enumerate(groups) for i, r in enumerate(g)}
    width = max(len(g) for g in groups)
    pairs = []
    for dn in range(len(groups)):
        for dl in range(width):
            for r in order:
                k, i = where[r]
                peer = groups[(k + dn) % len(groups)]
                if dl < len(peer) and (dn or dl):
                    pairs.append((r, peer[(i + dl) % len(peer)]))
    return pairs


def edges(comm_type: int, order: Sequence[int], root: int,
          node_of: Callable[[int], int] | None = None) -> list[tuple[int, int]]:
    """The (src, dst) rank pairs a collective's data crosses, NCCL-style, over ``order`` (ring order), in
    the order NCCL starts them."""
    n = len(order)
    if comm_type == T.ALL_TO_ALL:
        return p2p_rounds(order, node_of)
    ring = [(order[i], order[(i + 1) % n]) for i in range(n)]
    if comm_type in (T.BROADCAST, T.SCATTER):  # the chain from the root: no edge back into it
        return [e for e in ring if e[1] != root]
    if comm_type in (T.REDUCE, T.GATHER):  # the chain to the root: no edge out of it
        return [e for e in ring if e[0] != root]
    return ring


class ModelPacedFlows:
    """Lowers collective instances into model-paced flows over a resolved ``cluster`` for ``backend`` (the
    one that will run them; memoised per group, type, size, root and ring order)."""

    def __init__(self, cluster: Cluster, backend: object = None, *, algo: Algo | str | None = None,
                 proto: Proto | str | None = None) -> None:
        from xsim_trace.network.registry import make_backend  # noqa: PLC0415
        from xsim_trace.network.topology import build_topology  # noqa: PLC0415

        self.pricer = NcclPricer(cluster, algo=algo, proto=proto)
        self.topology = build_topology(cluster)
        self._probe = make_backend("analytical", self.topology)
        self._lone = backend if backend is not None and capabilities_of(backend).lone_flow_timing else None
        self._memo: dict[tuple, LoweredCollective] = {}
        self._rates: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def price(self, comm_type: int, members: Sequence[int], size_bytes: int):
        """The model's price (:meth:`NcclPricer.price`), for the per-kernel tables."""
        return self.pricer.price(comm_type, members, size_bytes)

    def lower(self, inst: CollectiveInstance, members: Sequence[int]) -> LoweredCollective:
        key = (inst.group, inst.comm_type, inst.size_bytes, inst.root, inst.ring)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._lower(inst, members)
        return hit

    def _lower(self, inst: CollectiveInstance, members: Sequence[int]) -> LoweredCollective:
        price = self.pricer.price(inst.comm_type, members, inst.size_bytes)
        order = [members[p] for p in inst.ring] if inst.ring is not None else list(members)
        pairs = edges(inst.comm_type, order, members[inst.root] if 0 <= inst.root < len(members) else members[0],
                      self.pricer.cluster.node_of)
        size = BARRIER_BYTES if inst.comm_type == T.BARRIER else inst.size_bytes
        kind = KIND_OF.get(inst.comm_type, CollKind.ALL_REDUCE)
        lat_us = latency_us(group_shape(self.pricer.cluster, tuple(members)), kind, price.algo, price.proto, size) if price.time_ns > 0 else 0.0
        latency_ns = min(int(round(lat_us * 1000)), price.time_ns)
        bw_ns = price.time_ns - latency_ns
        rate, lat = self._edge_rates(tuple(pairs))
        flows = []
        for (s, d), r, pl in zip(pairs, rate.tolist(), lat.tolist()):
            nbytes = max(int(r * bw_ns), 1)
            extra = float(pl)
            if self._lone is not None:
                route = self.topology.route(s, d)
                bottleneck = float(self.topology.bw_Bpns[list(route)].min()) if route else 1.0
                extra = self._lone.lone_flow_ns(s, d, nbytes) - nbytes / bottleneck
            flows.append((s, d, nbytes, extra))
        flows = tuple(flows)
        return LoweredCollective(flows, latency_ns, price.time_ns, price.algo.value, price.proto.value)

    def _edge_rates(self, pairs: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, np.ndarray]:
        """Bytes per ns of each edge when all run together alone in the network, and its path latency
        (ns, rounded up as the flow backends add it)."""
        hit = self._rates.get(pairs)
        if hit is None:
            src = np.fromiter((p[0] for p in pairs), np.int64, len(pairs))
            dst = np.fromiter((p[1] for p in pairs), np.int64, len(pairs))
            lat = np.array([np.ceil(self.topology.latency[list(self.topology.route(s, d))].sum()) for s, d in pairs])
            t = np.asarray(self._probe.transfer_time_ns(src, dst, np.full(len(pairs), PROBE_BYTES, np.int64)), np.float64)
            hit = self._rates[pairs] = (PROBE_BYTES / np.maximum(t - lat, 1.0), lat)
        return hit
