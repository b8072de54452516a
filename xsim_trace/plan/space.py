"""The space of deployment plans over a cluster's device groups, and the plan it describes.

Two families, as the heterogeneous-training literature uses them:

* **group replicas** (HexiScale / Sailor style data parallelism over unlike replicas): every used
  device group forms its own identical pipelines (``p`` stages at TP ``t``, as many replicas as
  the group holds); replicas of different groups get different shares of the global batch;
* **mixed pipelines** (FlashFlex / Metis style): every replica is one pipeline through several
  groups in a chosen order, ``k_g`` stages at TP ``t_g`` on group ``g``; a stage boundary between
  unlike TP degrees is a reshard (``direct`` / ``leader`` / ``broadcast``).

A :class:`Candidate` fixes the structure; the layer split is the closed form's exact minimiser
(:func:`xsim_trace.plan.stage_cost.best_counts`) and the batch shares are filled by water level
(:func:`batch_shares`).  ``Candidate.plan`` is the :class:`Plan` (layers to partition: ``auto``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

from xsim_trace.errors import ConfigError
from xsim_trace.plan.model_spec import ModelSpec
from xsim_trace.plan.model import DeviceGroup, PipelinePlan, Plan, StagePlan
from xsim_trace.plan.reshard import ReshardStrategy
from xsim_trace.plan.schedules import Schedule

STAGE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16)
TP_DEGREES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class Part:
    """``stages`` stages at TP ``tp`` on device group ``group`` (a piece of a pipeline)."""

    group: str
    tp: int
    stages: int
    split: tuple[tuple[str, int], ...] = ()  # a TP group over device groups: (group, TP ranks there)

    @property
    def devices(self) -> int:
        return self.tp * self.stages

    @property
    def groups(self) -> tuple[tuple[str, int], ...]:
        """(device group, devices this part takes there)."""
        return tuple((g, n * self.stages) for g, n in (self.split or ((self.group, self.tp),)))

    def replicas_fit(self, counts: dict[str, int]) -> int:
        """How many copies of this part the groups' device counts hold."""
        return min(counts[g] // n for g, n in self.groups)

    def text(self) -> str:
        where = "+".join(f"{g}:{n}" for g, n in self.split) if self.split else self.group
        return f"{where} tp{self.tp}x{self.stages}"


@dataclass(frozen=True, slots=True)
class Replicas:
    """``count`` identical pipelines made of ``parts`` in order, each running its share of micro-batches."""

    parts: tuple[Part, ...]
    count: int

    def stages(self) -> tuple[StagePlan, ...]:
        return tuple(StagePlan(p.group, p.tp, split=p.split) for p in self.parts for _ in range(p.stages))

    def text(self) -> str:
        return f"{self.count}x[{' > '.join(p.text() for p in self.parts)}]"


@dataclass(frozen=True, slots=True)
class Candidate:
    replicas: tuple[Replicas, ...]
    schedule: Schedule = Schedule.ONE_F_ONE_B
    chunks: int = 1
    reshard: ReshardStrategy = ReshardStrategy.DIRECT
    family: str = "replicas"

    @property
    def num_pipelines(self) -> int:
        return sum(r.count for r in self.replicas)

    def text(self) -> str:
        sched = self.schedule.value + (f" v{self.chunks}" if self.chunks > 1 else "")
        mixed = any(len({p.tp for p in r.parts}) > 1 for r in self.replicas)
        return " + ".join(r.text() for r in self.replicas) + f" {sched}" + (f" {self.reshard.value}" if mixed else "")

    def plan(self, space: "Space", shares: Sequence[int] | None = None) -> Plan:
        """The plan: pipelines in replica order; ``shares`` = micro-batches per pipeline (default:
        the global batch split as evenly as possible)."""
        n = self.num_pipelines
        if shares is None:
            base, rem = divmod(space.micro_batches, n)
            shares = [base + (1 if i < rem else 0) for i in range(n)]
        pipes, k = [], 0
        for ri, r in enumerate(self.replicas):
            st = r.stages()
            made: dict[int, PipelinePlan] = {}  # replicas with equal shares share one object
            for _ in range(r.count):
                m = int(shares[k])
                if m not in made:
                    made[m] = PipelinePlan(st, f"r{ri}", m)
                pipes.append(made[m])
                k += 1
        return Plan(model=space.model, groups=space.groups, pipelines=tuple(pipes), micro_batches=max(shares),
                    schedule=self.schedule, chunks=self.chunks, reshard=self.reshard, partition="auto",
                    global_batch=space.micro_batches * space.model.micro_batch_size, name="search",
                    distributed_optimizer=space.distributed_optimizer, placement=space.placement)


@dataclass(frozen=True)
class Space:
    """What the search may choose from."""

    groups: tuple[DeviceGroup, ...]
    model: ModelSpec
    micro_batches: int  # global batch / micro-batch size
    tp_degrees: tuple[int, ...] = TP_DEGREES
    stage_counts: tuple[int, ...] = STAGE_COUNTS
    max_stages: int = 16
    schedules: tuple[tuple[Schedule, int], ...] = ((Schedule.ONE_F_ONE_B, 1), (Schedule.INTERLEAVED, 2))
    reshards: tuple[ReshardStrategy, ...] = tuple(ReshardStrategy)
    mixed: bool = True
    hetero_tp: bool = False  # also TP groups over two device groups (half the TP ranks on each)
    distributed_optimizer: bool = False  # plans shard the optimizer state over their DP replicas (ZeRO-1/2)
    placement: str = "pipeline"  # where the plans' ranks sit (xsim_trace.plan.model.PLACEMENTS)
    every_device: bool = False  # only structures that use every device of every group (a run given the cluster)

    def tps(self, g: DeviceGroup) -> list[int]:
        m = self.model
        return [t for t in self.tp_degrees if t <= min(g.devices_per_node, g.count) and m.heads % t == 0
                and (m.kv % t == 0 or t % m.kv == 0)]

    def stage_options(self) -> list[int]:
        return [p for p in self.stage_counts if p <= min(self.max_stages, self.model.num_layers)]


def why_empty(space: Space) -> str | None:
    """The constraint that leaves no structure at all, or None."""
    if not any(space.tps(g) for g in space.groups):
        return (f"TP: none of {list(space.tp_degrees)} divides the {space.model.heads} attention heads within a node "
                f"of any device group")
    if space.micro_batches < 1:
        return "batch: the global batch holds no micro-batch"
    return None


def group_options(space: Space, g: DeviceGroup) -> list[Part]:
    return [Part(g.name, t, p) for t in space.tps(g) for p in space.stage_options() if t * p <= g.count]


def replica_structures(space: Space) -> Iterator[tuple[Replicas, ...]]:
    """Group replicas: per device group none or one (TP, stages) shape, as many replicas as fit."""
    per_group = [[None] + group_options(space, g) for g in space.groups]
    counts = {g.name: g.count for g in space.groups}
    for combo in itertools.product(*per_group):
        parts = [p for p in combo if p is not None]
        if not parts:
            continue
        reps = tuple(Replicas((p,), counts[p.group] // p.devices) for p in parts)
        if sum(r.count for r in reps) > space.micro_batches:
            continue
        yield reps


def hetero_tp_parts(space: Space) -> list[Part]:
    """Stages whose TP group spans two device groups, half its ranks on each (the first group named
    first, as a plan writes it); TP degrees both groups can take."""
    if not space.hetero_tp:
        return []
    out = []
    for a, b in itertools.combinations(space.groups, 2):
        for t in space.tps(a):
            half = t // 2
            if t < 2 or t not in space.tps(b) or half > min(a.count, b.count):
                continue
            for p in space.stage_options():
                if half * p <= min(a.count, b.count):
                    out.append(Part(a.name, t, p, ((a.name, half), (b.name, half))))
    return out


def hetero_tp_structures(space: Space) -> Iterator[tuple[Replicas, ...]]:
    """Replicas of pipelines whose every stage is a TP group over two device groups."""
    counts = {g.name: g.count for g in space.groups}
    for part in hetero_tp_parts(space):
        count = part.replicas_fit(counts)
        if 1 <= count <= space.micro_batches:
            yield (Replicas((part,), count),)


def mixed_structures(space: Space) -> Iterator[tuple[Replicas, ...]]:
    """Mixed pipelines through two or more groups in every order, as many replicas as all fit."""
    if not space.mixed:
        return
    opts = {g.name: group_options(space, g) for g in space.groups}
    counts = {g.name: g.count for g in space.groups}
    names = [g.name for g in space.groups]
    most = min(space.max_stages, space.model.num_layers)
    for size in range(2, len(names) + 1):
        for order in itertools.permutations(names, size):
            for parts in itertools.product(*(opts[n] for n in order)):
                if sum(p.stages for p in parts) > most:
                    continue
                count = min(counts[p.group] // p.devices for p in parts)
                if count < 1 or count > space.micro_batches:
                    continue
                yield (Replicas(tuple(parts), count),)


def structures(space: Space) -> Iterator[tuple[tuple[Replicas, ...], str]]:
    """Every structure of the space with its family (with ``every_device``: those that leave no device idle)."""
    def keep(reps: tuple[Replicas, ...]) -> bool:
        return not space.every_device or uses_every_device(space, reps)

    for reps in replica_structures(space):
        if keep(reps):
            yield reps, "replicas"
    for reps in mixed_structures(space):
        if keep(reps):
            yield reps, "mixed"
    for reps in hetero_tp_structures(space):
        if keep(reps):
            yield reps, "hetero-tp"


def uses_every_device(space: Space, reps: Sequence[Replicas]) -> bool:
    used: dict[str, int] = {}
    for r in reps:
        for p in r.parts:
            for g, n in p.groups:
                used[g] = used.get(g, 0) + r.count * n
    return all(used.get(g.name, 0) == g.count for g in space.groups)


def candidates(space: Space) -> Iterator[Candidate]:
    """Every candidate: each structure under each schedule and (where TP changes) reshard strategy."""
    for reps, family in structures(space):
        yield from variants(space, reps, family)


def variants(space: Space, reps: tuple[Replicas, ...], family: str) -> Iterator[Candidate]:
    mixed_tp = any(len({p.tp for p in r.parts}) > 1 for r in reps)
    reshards = space.reshards if mixed_tp else (ReshardStrategy.DIRECT,)
    for sched, v in space.schedules:
        if v > 1:
            stages = [sum(p.stages for p in r.parts) for r in reps]
            if min(stages) < 2 or max(stages) * v > space.model.num_layers:
                continue
            steps = [st for st, r in zip(stages, reps) for _ in range(r.count)]
            if not splittable(space.micro_batches, steps):
                continue
        for rs in reshards:
            yield Candidate(reps, sched, v, rs, family)


def splittable(total: int, steps: Sequence[int]) -> bool:
    """Whether ``total`` is a sum of one positive multiple of each of ``steps``."""
    need: dict[int, int] = {}
    for step in steps:  # c pipelines of step d together take any multiple of d from c*d on
        need[step] = need.get(step, 0) + 1
    reach = 1  # bit k: sum k reachable
    mask = (1 << (total + 1)) - 1
    for d, c in need.items():
        nxt, shifted = 0, (reach << (c * d)) & mask
        while shifted:
            nxt |= shifted
            shifted = (shifted << d) & mask
        reach = nxt
        if not reach:
            return False
    return bool(reach >> total & 1)


def batch_shares(slopes: Sequence[float], offsets: Sequence[float], total: int, *, minimum: Sequence[int] | None = None,
                 multiple: Sequence[int] | None = None) -> list[int]:
    """Integer micro-batches per pipeline (sum ``total``) minimising the slowest ``offset + slope * m``:
    the continuous water level, floored, then one at a time to the pipeline that stays fastest.
    ``multiple``: a pipeline's count must be a multiple of it (interleaved 1F1B: its stages)."""
    n = len(slopes)
    lo = list(minimum or [1] * n)
    step = list(multiple or [1] * n)
    lo = [max(a, s) for a, s in zip(lo, step)]
    lo = [math.ceil(a / s) * s for a, s in zip(lo, step)]
    if sum(lo) > total:
        raise ConfigError(f"{total} micro-batches cannot give {n} pipelines their minimum {sum(lo)}", field="global_batch")
    inv = sum(1.0 / s for s in slopes)
    level = (total + sum(o / s for o, s in zip(offsets, slopes))) / inv
    shares = [max(a, int(((level - o) / s) // k) * k) for a, o, s, k in zip(lo, offsets, slopes, step)]
    have = sum(shares)
    while have > total:  # flooring at the minimums overshot: take from the slowest
        i = max((j for j in range(n) if shares[j] - step[j] >= lo[j]), key=lambda j: (offsets[j] + slopes[j] * shares[j], -j))
        shares[i] -= step[i]
        have -= step[i]
    heap = [(offsets[j] + slopes[j] * (shares[j] + step[j]), j) for j in range(n)]
    heapq.heapify(heap)
    while have < total:
        if not heap:
            raise ConfigError(f"{total} micro-batches do not split into multiples of {sorted(set(step))}",
                              field="global_batch")
        _, i = heapq.heappop(heap)
        if have + step[i] > total:
            continue  # this pipeline's step no longer fits
        shares[i] += step[i]
        have += step[i]
        heapq.heappush(heap, (offsets[i] + slopes[i] * (shares[i] + step[i]), i))
    return shares
