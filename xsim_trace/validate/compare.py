"""Simulated vs measured: per-rank step time, per-collective NCCL kernel time, compute-only critical path.

The simulated side arrives as plain numbers (:class:`SimulatedRank`), so this module does not depend on
how the replay was run; the measured side is :mod:`xsim_trace.validate.measured`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

from xsim_trace.graph.kinds import NodeType
from xsim_trace.graph.model import Trace
from xsim_trace.graph.nxview import to_networkx
from xsim_trace.validate.measured import RankMeasurement

import networkx as nx


@dataclass(frozen=True, slots=True)
class SimulatedCollective:
    """One simulated communication node, in the rank's start order."""

    node_id: int
    name: str
    collective: str
    size_bytes: int
    duration_ns: int


@dataclass(frozen=True, slots=True)
class SimulatedRank:
    rank: int
    step_ns: int  # simulated iteration time of this rank (its end minus its own start)
    start_offset_ns: int = 0  # when the rank was started relative to the earliest rank
    compute_path_ns: int | None = None  # compute-only critical path of the rank's graph
    collectives: tuple[SimulatedCollective, ...] = ()


@dataclass(frozen=True, slots=True)
class RankRow:
    rank: int
    step: int
    measured_ns: int
    simulated_ns: int
    error_pct: float
    start_offset_ns: int
    measured_compute_busy_ns: int
    compute_path_ns: int | None


@dataclass(frozen=True, slots=True)
class CollectiveRow:
    rank: int
    ordinal: int
    collective: str  # from the captured kernel (SEND_RECV for NCCL's grouped p2p kernel)
    converted_as: str | None  # what the converted graph made of it (ALL_TO_ALL per-peer p2p, REDUCE_SCATTER...)
    algo: str
    proto: str
    size_bytes: int | None
    measured_ns: int
    simulated_ns: int | None
    error_pct: float | None
    peer_wait_ns: int | None = None  # measured wait for the last peer inside the kernel (shared clock only)
    model: str | None = None  # algo/proto the NCCL collective model chose (the default on a closed-form backend)


@dataclass(frozen=True, slots=True)
class Validation:
    name: str
    cluster: str
    ranks: tuple[RankRow, ...]
    collectives: tuple[CollectiveRow, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def max_abs_error_pct(self) -> float:
        return max((abs(r.error_pct) for r in self.ranks), default=0.0)

    def transfer_rows(self) -> tuple[CollectiveRow, ...]:
        """Collective rows of the rank that arrived last (no measured peer wait): the measured kernel
        is a pure transfer there, the fair test of the network model."""
        return tuple(c for c in self.collectives if c.peer_wait_ns == 0 and c.error_pct is not None)

    @property
    def mean_abs_error_pct(self) -> float:
        return sum(abs(r.error_pct) for r in self.ranks) / len(self.ranks) if self.ranks else 0.0

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "cluster": self.cluster,
            "max_abs_error_pct": round(self.max_abs_error_pct, 3),
            "mean_abs_error_pct": round(self.mean_abs_error_pct, 3),
            "ranks": [asdict(r) for r in self.ranks],
            "collectives": [asdict(c) for c in self.collectives],
            "transfer_only_median_abs_error_pct": _median([abs(c.error_pct) for c in self.transfer_rows()]),
            "notes": list(self.notes),
        }


def _median(values: list) -> float | None:
    if not values:
        return None
    v = sorted(values)
    mid = len(v) // 2
    return round(v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2, 3)


def error_pct(simulated: int, measured: int) -> float:
    """Signed relative error of ``simulated`` against ``measured``, in percent."""
    if measured == 0:
        return 0.0 if simulated == 0 else float("inf")
    return (simulated - measured) * 100.0 / measured


def compute_only_critical_path_ns(trace: Trace) -> int:
    """Longest dependency path counting compute and CPU nodes at their durations and communication
    nodes (send, recv, collectives) as free: the step time if the network were infinitely fast and
    every peer ready."""
    g = to_networkx(trace)
    comm = {NodeType.COMM_SEND, NodeType.COMM_RECV, NodeType.COMM_COLL}
    best: dict[int, int] = {}
    for n in nx.lexicographical_topological_sort(g):
        data = g.nodes[n]
        dur = 0 if data["type"] in comm else int(data["duration_ns"])
        best[n] = max((best[p] for p in g.predecessors(n)), default=0) + dur
    return max(best.values(), default=0)


def compare(
    name: str,
    cluster: str,
    measured: Mapping[int, RankMeasurement],
    simulated: Mapping[int, SimulatedRank],
    notes: Sequence[str] = (),
    peer_wait_ns: Mapping[tuple[int, int], int] | None = None,
) -> Validation:
    """Rows for every rank present on both sides (sorted by rank), and per collective ordinal.
    ``peer_wait_ns[(rank, ordinal)]``: measured peer wait inside that kernel, when known."""
    rows: list[RankRow] = []
    colls: list[CollectiveRow] = []
    for rank in sorted(set(measured) & set(simulated)):
        m, s = measured[rank], simulated[rank]
        rows.append(
            RankRow(
                rank=rank,
                step=m.step.number,
                measured_ns=m.step_ns,
                simulated_ns=s.step_ns,
                error_pct=round(error_pct(s.step_ns, m.step_ns), 4),
                start_offset_ns=s.start_offset_ns,
                measured_compute_busy_ns=m.compute_busy_ns,
                compute_path_ns=s.compute_path_ns,
            )
        )
        for k in m.nccl:
            sim = s.collectives[k.ordinal] if k.ordinal < len(s.collectives) else None
            colls.append(
                CollectiveRow(
                    rank=rank,
                    ordinal=k.ordinal,
                    collective=k.collective,
                    converted_as=sim.collective if sim else None,
                    algo=k.algo,
                    proto=k.proto,
                    size_bytes=k.size_bytes if k.size_bytes is not None else (sim.size_bytes if sim else None),
                    measured_ns=k.duration_ns,
                    simulated_ns=sim.duration_ns if sim else None,
                    error_pct=round(error_pct(sim.duration_ns, k.duration_ns), 4) if sim else None,
                    peer_wait_ns=(peer_wait_ns or {}).get((rank, k.ordinal)),
                )
            )
    return Validation(name, cluster, tuple(rows), tuple(colls), tuple(notes))


def _ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def format_table(v: Validation, collectives: bool = True) -> str:
    """A fixed-width text table of a :class:`Validation`."""
    lines = [f"{v.name} on {v.cluster}"]
    lines.append(f"{'rank':>4} {'step':>6} {'measured ms':>12} {'simulated ms':>13} {'error %':>8} "
                 f"{'offset ms':>10} {'gpu compute ms':>15} {'compute path ms':>16}")
    for r in v.ranks:
        lines.append(f"{r.rank:>4} {r.step:>6} {_ms(r.measured_ns):>12} {_ms(r.simulated_ns):>13} "
                     f"{r.error_pct:>+8.2f} {_ms(r.start_offset_ns):>10} {_ms(r.measured_compute_busy_ns):>15} "
                     f"{_ms(r.compute_path_ns):>16}")
    lines.append(f"max |error| {v.max_abs_error_pct:.2f} %, mean |error| {v.mean_abs_error_pct:.2f} %")
    if collectives and v.collectives:
        lines.append("")
        model = any(c.model for c in v.collectives)
        lines.append(f"{'rank':>4} {'#':>3} {'kernel':<11} {'converted as':<15} {'algo/proto':<12} {'size bytes':>12} "
                     f"{'measured us':>12} {'simulated us':>13} {'error %':>8} {'peer wait us':>12}"
                     + (f" {'model algo/proto':>17}" if model else ""))
        for c in v.collectives:
            sim = "-" if c.simulated_ns is None else f"{c.simulated_ns / 1e3:.1f}"
            err = "-" if c.error_pct is None else f"{c.error_pct:+.1f}"
            size = "-" if c.size_bytes is None else str(c.size_bytes)
            lines.append(f"{c.rank:>4} {c.ordinal:>3} {c.collective:<11} {c.converted_as or '-':<15} "
                         f"{c.algo + '/' + c.proto:<12} {size:>12} "
                         f"{c.measured_ns / 1e3:>12.1f} {sim:>13} {err:>8} "
                         f"{'-' if c.peer_wait_ns is None else f'{c.peer_wait_ns / 1e3:.1f}':>12}"
                         + (f" {c.model or '-':>17}" if model else ""))
    for note in v.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)
