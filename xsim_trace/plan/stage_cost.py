"""A closed form for one pipeline: stage times per micro-batch and the step they give.

A stage of ``n`` layers runs one micro-batch (forward + backward) in
``T(n) = (n + extra) * layer_ns + comm_ns``: ``layer_ns`` is a layer's compute plus its TP
collectives on the stage's devices, ``extra`` the embedding / output head in layer equivalents and
``comm_ns`` the stage-boundary transfers it waits for (PP send/recv or a reshard, forward input and
backward gradient).  Under 1F1B a pipeline of ``m`` micro-batches takes about
``m * max T + (sum T - max T) / v`` (the slowest stage paces the steady state, the others fill and
drain; interleaving with ``v`` chunks shrinks the fill by ``v``; GPipe is the same to first order).

:func:`best_counts` finds the layer counts that minimise that estimate exactly: for every candidate
bottleneck ``B`` (a stage time some count gives) each stage may hold at most the layers that keep it
under ``B`` (and within memory); the remaining freedom only changes ``sum T``, which is least when
layers go to the stages with the smallest ``layer_ns`` first.  O(p^2 L) for p stages and L layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from xsim_trace.errors import ConfigError
from xsim_trace.plan.reshard import ReshardStrategy, plan_reshard

#: per-transfer latency of the closed form (the quick replay's alpha)
LATENCY_NS = 2000


@dataclass(frozen=True, slots=True)
class StageCost:
    layer_ns: float  # one layer, forward + backward of one micro-batch, with its TP collectives
    extra_ns: float = 0.0  # embedding / head on this stage
    comm_ns: float = 0.0  # boundary transfers it waits for per micro-batch (both directions)
    max_layers: int | None = None  # memory limit; None = unlimited
    min_layers: int = 1  # at least one layer per model chunk

    def time_ns(self, layers: int) -> float:
        return layers * self.layer_ns + self.extra_ns + self.comm_ns


def pipeline_ns(stage_ns: Sequence[float], micro_batches: int, chunks: int = 1) -> float:
    """Closed-form time of one pipeline: ``m * max + (sum - max) / v``."""
    if not stage_ns:
        return 0.0
    top = max(stage_ns)
    return micro_batches * top + (sum(stage_ns) - top) / max(1, chunks)


def ring_allreduce_ns(size_bytes: float, members: int, bw_GBps: float, latency_ns: int = LATENCY_NS) -> float:
    """Ring all-reduce of ``size_bytes`` over ``members`` ranks on links of ``bw_GBps``."""
    if members < 2 or size_bytes <= 0:
        return 0.0
    steps = 2 * (members - 1)
    return steps * latency_ns + steps * size_bytes / members / bw_GBps


def _gather_ns(size_bytes: float, members: int, bw_GBps: float, latency_ns: int) -> float:
    """Ring all-gather of a ``size_bytes`` result over ``members`` ranks."""
    if members < 2:
        return 0.0
    return (members - 1) * latency_ns + (members - 1) * size_bytes / members / bw_GBps


def exchange_ns(size_bytes: int, ts: int, td: int, strategy: ReshardStrategy | str, bw_GBps: float,
                latency_ns: int = LATENCY_NS, gather_GBps: float | None = None) -> float:
    """One stage-boundary transfer of a ``size_bytes`` tensor from TP ``ts`` to TP ``td``: rank i ->
    rank i with ``S/tp`` when equal, else the strategy's phases one after another, each as long as
    its busiest endpoint (bytes sent or received) at ``bw_GBps``; then the destination ranks
    all-gather the whole tensor (over ``td``, or over the ``gcd`` clusters after a broadcast) at
    ``gather_GBps`` (default ``bw_GBps``), as the rewriter does."""
    gather_bw = gather_GBps or bw_GBps
    if ts == td:
        return latency_ns + size_bytes / ts / bw_GBps + _gather_ns(size_bytes, td, gather_bw, latency_ns)
    rp = plan_reshard(ts, td, strategy, total_bytes=size_bytes)
    phases: dict[str, dict[tuple, float]] = {}
    fan: dict[str, int] = {}
    for t in rp.transfers:
        load = phases.setdefault(t.phase, {})
        nbytes = rp.unit_bytes(size_bytes, t.units)
        load[("out", t.src)] = load.get(("out", t.src), 0) + nbytes
        for d in t.dsts:
            load[("in", d)] = load.get(("in", d), 0) + nbytes
        fan[t.phase] = max(fan.get(t.phase, 1), len(t.dsts) + 1)
    total = 0.0
    for phase, load in phases.items():
        hops = math.ceil(math.log2(fan[phase])) if fan[phase] > 2 else 1
        total += hops * latency_ns + max(load.values()) / bw_GBps
    members = math.gcd(ts, td) if rp.strategy is ReshardStrategy.BROADCAST else td
    return total + _gather_ns(size_bytes, members, gather_bw, latency_ns)


def best_counts(num_layers: int, stages: Sequence[StageCost], micro_batches: int, chunks: int = 1) -> tuple[int, ...]:
    """Layer counts per stage minimising :func:`pipeline_ns` (ties: the smaller sum, then the
    earlier candidate); raises ConfigError when memory or minimums make it impossible."""
    lo = [s.min_layers for s in stages]
    hi = [min(num_layers, s.max_layers) if s.max_layers is not None else num_layers for s in stages]
    if any(h < m for h, m in zip(hi, lo)) or sum(hi) < num_layers:
        raise ConfigError(f"the stages' memory holds {sum(max(0, h) for h in hi)} layers, the model has {num_layers}",
                          field="stages")
    if sum(lo) > num_layers:
        raise ConfigError(f"{num_layers} layers cannot fill {len(stages)} stages of at least {lo} layers", field="stages")
    order = sorted(range(len(stages)), key=lambda i: (stages[i].layer_ns, i))
    bounds = sorted({s.time_ns(n) for s, a, b in zip(stages, lo, hi) for n in range(a, b + 1)})

    def fill(cap: float) -> list[int] | None:
        limit = []
        for s, a, b in zip(stages, lo, hi):
            room = b if s.layer_ns <= 0 else int(math.floor((cap - s.extra_ns - s.comm_ns) / s.layer_ns + 1e-9))
            limit.append(min(b, room))
        if any(x < a for x, a in zip(limit, lo)) or sum(limit) < num_layers:
            return None
        counts = list(lo)
        rest = num_layers - sum(counts)
        for i in order:
            add = min(rest, limit[i] - counts[i])
            counts[i] += add
            rest -= add
        return counts

    # feasibility grows with the cap: the least feasible cap by bisection, then every cap up to the
    # point where m * cap alone exceeds the best estimate so far
    lo_i, hi_i = 0, len(bounds) - 1
    while lo_i < hi_i:
        mid = (lo_i + hi_i) // 2
        if fill(bounds[mid]) is None:
            lo_i = mid + 1
        else:
            hi_i = mid
    best: tuple[float, float, tuple[int, ...]] | None = None
    for cap in bounds[lo_i:]:
        if best is not None and micro_batches * cap > best[0]:
            break
        counts = fill(cap)
        if counts is None:
            continue
        times = [s.time_ns(c) for s, c in zip(stages, counts)]
        key = (pipeline_ns(times, micro_batches, chunks), sum(times), tuple(counts))
        if best is None or key[:2] < best[:2]:
            best = key
    assert best is not None  # cap = the largest bound always admits the counts
    return best[2]


def estimate_ns(counts: Sequence[int], stages: Sequence[StageCost], micro_batches: int, chunks: int = 1) -> float:
    """:func:`pipeline_ns` of given counts."""
    return pipeline_ns([s.time_ns(c) for s, c in zip(stages, counts)], micro_batches, chunks)
