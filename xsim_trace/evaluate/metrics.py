"""Heterogeneity metrics from a replay's per-node times: pipeline bubble per stage, straggler wait
per DP barrier member, reshard (and plain PP) transfer time per stage boundary.

``times`` maps ``(rank, node id)`` to an object with ``ready_ns``, ``start_ns``, ``end_ns``
(:class:`NodeTime`, as :mod:`.engine_times` hands back from the replay engine).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping

from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import NodeType
from xsim_trace.graph.model import Trace


@dataclass(frozen=True, slots=True)
class NodeTime:
    """When a node of a replayed rank set became ready, started and ended."""

    ready_ns: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class StageBubble:
    pipeline: int
    stage: int
    span_ns: int  # pipeline's first compute start to last compute end
    busy_ns: int  # compute of the stage (mean over its TP ranks)
    bubble_ns: int

    @property
    def fraction(self) -> float:
        return self.bubble_ns / self.span_ns if self.span_ns else 0.0


@dataclass(frozen=True, slots=True)
class StragglerWait:
    pg_name: str
    instance: int
    rank: int
    wait_ns: int  # last member's ready time - this member's ready time


@dataclass(frozen=True, slots=True)
class BoundaryTime:
    boundary: str
    kind: str  # pp / reshard
    exchanges: int
    total_ns: int  # sum over exchanges of the exchange's transfer time (phases in sequence)

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.exchanges if self.exchanges else 0.0


@dataclass(frozen=True, slots=True)
class Metrics:
    bubbles: tuple[StageBubble, ...]
    stragglers: tuple[StragglerWait, ...]
    boundaries: tuple[BoundaryTime, ...]

    def max_straggler_ns(self) -> int:
        return max((s.wait_ns for s in self.stragglers), default=0)

    def reshard_ns(self) -> int:
        return sum(b.total_ns for b in self.boundaries if b.kind == "reshard")

    def pp_ns(self) -> int:
        """Stage-to-stage transfer time between stages of equal TP (summed like :meth:`reshard_ns`)."""
        return sum(b.total_ns for b in self.boundaries if b.kind == "pp")


def compute_metrics(traces: Mapping[int, Trace], times: Mapping[tuple[int, int], Any]) -> Metrics:
    span: dict[int, list[int]] = {}
    busy: dict[tuple[int, int], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    colls: dict[tuple[str, int], list[tuple[int, Any]]] = defaultdict(list)
    exch: dict[tuple[str, str, int, str], list[Any]] = defaultdict(list)
    for r in sorted(traces):
        tr = traces[r]
        pipe = int(tr.metadata.attr(A.PIPELINE, 0) or 0)
        stage = int(tr.metadata.attr(A.PIPE_STAGE, 0) or 0)
        seen: dict[str, int] = defaultdict(int)
        for n in tr.nodes:
            t = times[(r, n.id)]
            if n.type == NodeType.COMP and not n.is_cpu_op:
                s = span.setdefault(pipe, [t.start_ns, t.end_ns])
                s[0], s[1] = min(s[0], t.start_ns), max(s[1], t.end_ns)
                busy[(pipe, stage)][r] += t.end_ns - t.start_ns
            elif n.type == NodeType.COMM_COLL and n.attr(A.COMM_KIND) == "dp":
                colls[(n.pg_name, seen[n.pg_name])].append((r, t))
            if n.type == NodeType.COMM_COLL:
                seen[n.pg_name] += 1
            kind = n.attr(A.COMM_KIND)
            if kind in ("pp", "reshard") and n.attr(A.PP_BOUNDARY) and n.type != NodeType.COMM_RECV:
                key = (str(n.attr(A.PP_BOUNDARY)), kind, int(n.attr(A.MICROBATCH, 0)), str(n.attr(A.PHASE, "")))
                exch[key].append((str(n.attr(A.XFER_PHASE, kind)), n.pg_name if n.type == NodeType.COMM_COLL else None, t))
    bubbles = []
    for (pipe, stage), per_rank in sorted(busy.items()):
        s0, s1 = span[pipe]
        b = sum(per_rank.values()) // len(per_rank)
        bubbles.append(StageBubble(pipe, stage, s1 - s0, b, (s1 - s0) - b))
    stragglers = []
    for (pg, k), members in sorted(colls.items(), key=lambda kv: (kv[0][0].zfill(8), kv[0][1])):
        # the barrier opens when the last member is ready; time spent behind an earlier collective
        # of the same group (stream order) is not straggling
        opens = max(t.ready_ns for _, t in members)
        for r, t in members:
            stragglers.append(StragglerWait(pg, k, r, opens - t.ready_ns))
    agg: dict[tuple[str, str], list[int]] = defaultdict(list)
    for (boundary, kind, _, _), items in exch.items():
        # per transfer phase (gather, p2p, scatter, ...), the longest transfer: a send from its start
        # (the data leaves) to its end, a collective from its last member joining to its end; the
        # phases of a strategy run one after another, so they add up.  Waiting for a receiver to
        # post (a pipeline-schedule effect) is not reshard time.
        phases: dict[str, list[tuple[str | None, Any]]] = defaultdict(list)
        for phase, pg, t in items:
            phases[phase].append((pg, t))
        total = 0
        for members in phases.values():
            joined = defaultdict(int)  # collective -> when its last member joined
            for pg, t in members:
                if pg is not None:
                    joined[pg] = max(joined[pg], t.start_ns)
            total += max(t.end_ns - (joined[pg] if pg is not None else t.start_ns) for pg, t in members)
        agg[(boundary, kind)].append(total)
    boundaries = tuple(BoundaryTime(b, k, len(v), sum(v)) for (b, k), v in sorted(agg.items()))
    return Metrics(tuple(bubbles), tuple(stragglers), boundaries)
