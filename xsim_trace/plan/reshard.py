"""Resharding a stage-boundary tensor between TP degrees ``ts`` (sources) and ``td`` (destinations).

The tensor of ``S`` bytes is cut into ``Lc = lcm(ts, td)`` units of ``u = S / Lc``; source ``s``
owns units ``[s*Lc/ts, (s+1)*Lc/ts)`` and destination ``d`` needs ``[d*Lc/td, (d+1)*Lc/td)``.
The ``G = gcd(ts, td)`` clusters (``ts/G`` sources, ``td/G`` destinations each) never exchange data.

Three strategies turn that need into transfers (:class:`Transfer`, with explicit ordering):

* ``direct``: one flow per overlapping (source, destination) pair, all concurrent;
* ``leader``: per cluster, gather to the first source, one P2P to the first destination, scatter;
* ``broadcast``: per cluster, one source broadcasts the cluster's ``S/G`` bytes to all of the
  cluster's destinations (the boundary activation is replicated on every source TP rank after the
  row-parallel all-reduce, so any source can be root); the root is chosen load-balanced, i.e. the
  source that has sent the fewest bytes so far (ties: lowest index), see :class:`SenderBalancer`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Sequence

from xsim_trace.errors import ConfigError


class ReshardStrategy(enum.Enum):
    DIRECT = "direct"
    LEADER = "leader"
    BROADCAST = "broadcast"

    @classmethod
    def parse(cls, name: str, *, file: str | None = None, field_name: str | None = None) -> "ReshardStrategy":
        try:
            return cls(str(name).lower())
        except ValueError:
            choices = ", ".join(s.value for s in cls)
            raise ConfigError(f"unknown resharding strategy {name!r} (choose {choices})", file=file, field=field_name) from None


@dataclass(frozen=True, slots=True)
class ReshardFlow:
    """``units`` of the tensor go from source TP rank ``src`` to destination TP rank ``dst``."""

    src: int
    dst: int
    units: int


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A TP rank on the source side (``side == "src"``) or the destination side (``"dst"``)."""

    side: str
    index: int


@dataclass(frozen=True, slots=True)
class Transfer:
    """One step of a reshard.  ``kind`` is ``p2p`` (``dsts`` has one member) or ``broadcast``.
    ``after`` are indices (into the plan's transfers) that must finish before this one starts at
    its sender."""

    kind: str
    src: Endpoint
    dsts: tuple[Endpoint, ...]
    units: int
    cluster: int
    phase: str  # direct / gather / p2p / scatter / broadcast
    after: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ReshardPlan:
    strategy: ReshardStrategy
    ts: int
    td: int
    num_units: int  # Lc
    transfers: tuple[Transfer, ...]

    def unit_bytes(self, total_bytes: int, units: int) -> int:
        return units * total_bytes // self.num_units

    def bytes_sent(self, total_bytes: int) -> dict[Endpoint, int]:
        out: dict[Endpoint, int] = {}
        for t in self.transfers:
            out[t.src] = out.get(t.src, 0) + self.unit_bytes(total_bytes, t.units)
        return out


def _check(ts: int, td: int) -> None:
    for name, v in (("ts", ts), ("td", td)):
        if not isinstance(v, int) or v < 1:
            raise ConfigError(f"expected a positive TP degree, found {v!r}", field=name)


def reshard_flows(ts: int, td: int) -> tuple[ReshardFlow, ...]:
    """Overlap flows in (source, destination) order.

    >>> [(f.src, f.dst, f.units) for f in reshard_flows(6, 4)][:3]
    [(0, 0, 2), (1, 0, 1), (1, 1, 1)]
    """
    _check(ts, td)
    lc = math.lcm(ts, td)
    ws, wd = lc // ts, lc // td
    flows = []
    for s in range(ts):
        lo, hi = s * ws, (s + 1) * ws
        for d in range(lo // wd, (hi - 1) // wd + 1):
            overlap = min(hi, (d + 1) * wd) - max(lo, d * wd)
            if overlap > 0:
                flows.append(ReshardFlow(s, d, overlap))
    return tuple(flows)


def gcd_clusters(ts: int, td: int) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """The independent (sources, destinations) clusters, ``gcd(ts, td)`` of them."""
    _check(ts, td)
    g = math.gcd(ts, td)
    ns, nd = ts // g, td // g
    return tuple((tuple(range(k * ns, (k + 1) * ns)), tuple(range(k * nd, (k + 1) * nd))) for k in range(g))


def cluster_of_source(ts: int, td: int, s: int) -> int:
    return s // (ts // math.gcd(ts, td))


@dataclass
class SenderBalancer:
    """Chooses broadcast roots: the candidate with the fewest bytes sent so far (ties: lowest)."""

    sent_bytes: dict[int, int] = field(default_factory=dict)

    def choose(self, candidates: Sequence[int], size_bytes: int) -> int:
        best = min(candidates, key=lambda c: (self.sent_bytes.get(c, 0), c))
        self.sent_bytes[best] = self.sent_bytes.get(best, 0) + size_bytes
        return best


def plan_reshard(
    ts: int, td: int, strategy: ReshardStrategy | str, *, balancer: SenderBalancer | None = None, total_bytes: int = 0
) -> ReshardPlan:
    """The transfers of one reshard.  ``balancer`` (broadcast only) carries sender load across calls,
    e.g. across micro-batches, so roots rotate; ``total_bytes`` is the load it accounts."""
    strategy = ReshardStrategy.parse(strategy) if isinstance(strategy, str) else strategy
    _check(ts, td)
    lc = math.lcm(ts, td)
    clusters = gcd_clusters(ts, td)
    transfers: list[Transfer] = []
    if strategy is ReshardStrategy.DIRECT:
        for f in reshard_flows(ts, td):
            transfers.append(
                Transfer("p2p", Endpoint("src", f.src), (Endpoint("dst", f.dst),), f.units,
                         cluster_of_source(ts, td, f.src), "direct")
            )
    elif strategy is ReshardStrategy.LEADER:
        per_src, per_cluster, per_dst = lc // ts, lc // len(clusters), lc // td
        for k, (srcs, dsts) in enumerate(clusters):
            lead_s, lead_d = Endpoint("src", srcs[0]), Endpoint("dst", dsts[0])
            gathers = []
            for s in srcs[1:]:
                gathers.append(len(transfers))
                transfers.append(Transfer("p2p", Endpoint("src", s), (lead_s,), per_src, k, "gather"))
            p2p = len(transfers)
            transfers.append(Transfer("p2p", lead_s, (lead_d,), per_cluster, k, "p2p", tuple(gathers)))
            for d in dsts[1:]:
                transfers.append(Transfer("p2p", lead_d, (Endpoint("dst", d),), per_dst, k, "scatter", (p2p,)))
    else:
        balancer = balancer if balancer is not None else SenderBalancer()
        per_cluster = lc // len(clusters)
        share = total_bytes // len(clusters)
        for k, (srcs, dsts) in enumerate(clusters):
            root = balancer.choose(srcs, share)
            transfers.append(
                Transfer("broadcast", Endpoint("src", root), tuple(Endpoint("dst", d) for d in dsts), per_cluster, k,
                         "broadcast")
            )
    return ReshardPlan(strategy=strategy, ts=ts, td=td, num_units=lc, transfers=tuple(transfers))
