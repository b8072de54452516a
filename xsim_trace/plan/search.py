"""Plan search: enumerate the space (:mod:`.space`), prune with the closed form, replay the best.

1. Every candidate structure gets a lower bound on its step: each replica's slowest stage cannot
   beat its stages' layers spread in proportion to their speed, and the replicas together cannot
   beat the global batch at their summed rate (:func:`lower_bound_ns`).
2. Candidates are costed with the closed form (:mod:`.closed_form`) in lower-bound order: the
   layer split is the closed form's exact minimiser, the batch shares the water level of the
   replicas' per-micro-batch rates; a candidate whose bound cannot beat the K-th best stops the
   walk (branch and bound: nothing that could enter the top K is skipped).
3. The best few have their batch shares improved one micro-batch at a time on the full closed
   form (DP sync included), then are rewritten and replayed (engine, a cluster and backend).
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from xsim_trace.errors import ConfigError
from xsim_trace.plan.closed_form import PlanEstimate, estimate_pipeline, estimate_plan
from xsim_trace.plan.space import Candidate, Replicas, Space, batch_shares, candidates, structures, variants, why_empty
from xsim_trace.plan.model import Plan
from xsim_trace.plan.reshard import ReshardStrategy
from xsim_trace.plan.schedules import Schedule
from xsim_trace.plan.stage_cost import pipeline_ns, ring_allreduce_ns
from xsim_trace.layer_templates.per_stage import Templates, as_template_set
from xsim_trace.units import gbps_to_GBps

log = logging.getLogger(__name__)

OBJECTIVES = ("step", "cost", "tokens_per_s")


@dataclass(frozen=True)
class Scored:
    candidate: Candidate
    plan: Plan  # micro-batch shares set, layers to partition (auto)
    estimate: PlanEstimate
    replay_ns: int | None = None
    replay_note: str = ""

    @property
    def step_ns(self) -> int:
        return self.replay_ns if self.replay_ns is not None else self.estimate.step_ns

    def shares(self) -> tuple[int, ...]:
        return tuple(self.plan.micro_batches_of(i) for i in range(self.plan.dp))


@dataclass
class SearchStats:
    candidates: int = 0
    evaluated: int = 0
    pruned: int = 0
    infeasible: dict[str, int] = field(default_factory=dict)
    budget_hit: bool = False
    skipped: int = 0  # structures left when the budget ran out
    replayed: int = 0
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class SearchResult:
    top: tuple[Scored, ...]  # best first
    stats: SearchStats

    @property
    def best(self) -> Scored:
        return self.top[0]


def objective_value(objective: str, est: PlanEstimate, step_ns: int | None = None) -> float:
    """What the search minimises: step time, device-seconds per step (cost), or -tokens/s."""
    step = est.step_ns if step_ns is None else step_ns
    if objective == "step":
        return float(step)
    if objective == "cost":
        return float(step) * est.devices
    if objective == "tokens_per_s":
        return float(step)  # the global batch is fixed: most tokens per second = shortest step
    raise ConfigError(f"unknown objective {objective!r} (choose {', '.join(OBJECTIVES)})", field="--objective")


class _LayerRates:
    """Per (group, TP): one layer's closed-form time, cached (for the lower bounds)."""

    def __init__(self, space: Space, templates: Templates) -> None:
        self.space, self.tset, self.cache = space, as_template_set(templates, space.model), {}

    def layer_ns(self, group: str, tp: int, split: tuple[tuple[str, int], ...] = ()) -> float:
        key = (group, tp, split)
        if key not in self.cache:
            from xsim_trace.plan.partition import stage_costs
            from xsim_trace.plan.model import PipelinePlan, StagePlan

            probe = Plan(model=self.space.model, groups=self.space.groups,
                         pipelines=(PipelinePlan((StagePlan(group, tp, split=split),)),), micro_batches=1, partition="auto")
            self.cache[key] = stage_costs(probe, 0, self.tset)[0].layer_ns
        return self.cache[key]


def state_fits(space: Space, replicas: Sequence[Replicas]) -> bool:
    """A necessary memory condition: each stage holds a layer's weights, gradients and optimizer
    state, and every pipeline's stages together hold all layers (activations not yet counted)."""
    m = space.model
    per_layer = m.layer_params() * m.bytes_per_param_state
    hbm = {g.name: g.spec().hbm_bytes for g in space.groups}
    for r in replicas:
        caps = [min(hbm[g] for g, _ in p.groups) * p.tp // per_layer for p in r.parts]
        if min(caps) < 1 or sum(c * p.stages for c, p in zip(caps, r.parts)) < m.num_layers:
            return False
    return True


def lower_bound_ns(space: Space, replicas: Sequence[Replicas], rates: _LayerRates) -> float:
    """A step no plan of this structure beats under the closed form.  Per replica the slowest stage
    takes at least ``B = L / sum(1 / layer_ns)`` per micro-batch and the stages together at least
    ``S`` (a layer each, the rest at the fastest rate), so a replica of ``m`` micro-batches takes at
    least ``(m - 1/v) B + S / v`` (v = 2, the most chunks searched); the replicas share the global
    batch at best at the water level of those lines."""
    L = space.model.num_layers
    v = max(c for _, c in space.schedules)
    inv = offset = 0.0
    for r in replicas:
        times = [rates.layer_ns(p.group, p.tp, p.split) for p in r.parts for _ in range(p.stages)]
        b = L / sum(1.0 / t for t in times)
        least = sum(times) + (L - len(times)) * min(times)
        inv += r.count / b
        offset += r.count * ((least - b) / v) / b
    return (space.micro_batches + offset) / inv + _first_sync_ns(space, replicas, rates)


def _first_sync_ns(space: Space, replicas: Sequence[Replicas], rates: "_LayerRates") -> float:
    """Every pipeline holds layer 0 on its first stage, which finishes last; the DP all-reduce of at
    least one layer and the embedding over all pipelines starts then (at least the smallest shard on
    the fastest link any member could use, NVLink or NIC: never above the closed form's sync)."""
    n = sum(r.count for r in replicas)
    if n < 2:
        return 0.0
    base = rates.tset.base
    tp = max(r.parts[0].tp for r in replicas)
    bw = max(max(gbps_to_GBps(g.nic_gbps), g.intra_GBps) for g in space.groups
             if any(g.name == name for r in replicas for p in r.parts for name, _ in p.groups))
    return ring_allreduce_ns((base.layer_grad_bytes + base.pre_grad_bytes) / tp, n, bw)


def _shares(space: Space, cand: Candidate, tset, cache: dict) -> list[int]:
    """Water-level micro-batch shares from each replica shape's closed-form rate."""
    n = cand.num_pipelines
    m_ref = max(1, space.micro_batches // n)
    slopes, offsets, multiple = [], [], []
    for r in cand.replicas:
        p = sum(x.stages for x in r.parts)
        step = p if cand.chunks > 1 else 1
        m = max(step, m_ref // step * step)
        probe = _single(space, cand, r, m)
        key = (r.parts, m, cand.schedule, cand.chunks, cand.reshard)
        if key not in cache:
            cache[key] = estimate_pipeline(probe, 0, tset)
        est = cache[key]
        top = max(est.stage_ns)
        slopes += [top] * r.count
        offsets += [pipeline_ns(est.stage_ns, 0, cand.chunks)] * r.count
        multiple += [step] * r.count
    return batch_shares(slopes, offsets, space.micro_batches, multiple=multiple)


def _single(space: Space, cand: Candidate, r, m: int) -> Plan:
    one = Candidate((replace(r, count=1),), cand.schedule, cand.chunks, cand.reshard, cand.family)
    plan = one.plan(replace(space, micro_batches=m))
    return replace(plan, pipelines=(replace(plan.pipelines[0], micro_batches=m),), global_batch=0)


def _score(space: Space, cand: Candidate, tset, caches) -> Scored:
    shares = _shares(space, cand, tset, caches[0])
    plan = cand.plan(space, shares)
    return Scored(cand, plan, estimate_plan(plan, tset, cache=caches[1]))


def _improve_shares(space: Space, s: Scored, tset, objective: str, cache: dict) -> Scored:
    """Move one micro-batch (one stage count under interleaving) between pipelines while the full
    closed form (DP sync included) improves."""
    best = s
    if not 2 <= best.plan.dp <= 8:
        return best  # water-level shares stand for many replicas (pairwise moves grow as dp^2)
    step = [len(p.stages) if best.plan.schedule is Schedule.INTERLEAVED else 1 for p in best.plan.pipelines]
    improved = True
    while improved:
        improved = False
        cur = list(best.shares())
        for i in range(len(cur)):
            for j in range(len(cur)):
                if i == j or cur[i] - step[i] < step[i] or step[i] != step[j]:
                    continue
                trial = list(cur)
                trial[i] -= step[i]
                trial[j] += step[j]
                plan = best.candidate.plan(space, trial)
                try:
                    est = estimate_plan(plan, tset, cache=cache)
                except ConfigError:
                    continue
                if objective_value(objective, est) < objective_value(objective, best.estimate):
                    best = Scored(best.candidate, plan, est)
                    improved = True
                    break
            if improved:
                break
    return best


def _reason(exc: ConfigError) -> str:
    msg = exc.message
    if "memory" in msg:
        return "memory"
    if "micro-batches" in msg:
        return "batch"
    return msg.split(":")[0]


def search(space: Space, templates: Templates, *, objective: str = "step", top_k: int = 5, budget_s: float = 600.0,
           replay: Callable[[Plan], int] | None = None, replay_top: int = 3,
           replay_many: Callable[[Sequence[Plan]], list[int]] | None = None,
           progress: Callable[[str, int, int], None] | None = None, clock: Callable[[], float] = time.monotonic
           ) -> SearchResult:
    """The best ``top_k`` plans of ``space`` by ``objective`` (closed form), the first
    ``replay_top`` of them replayed by ``replay`` (plan -> step ns) or ``replay_many`` (in parallel)."""
    objective_value(objective, _dummy_estimate())  # refuse an unknown objective before any work
    start = clock()
    empty = why_empty(space)
    if empty:
        raise ConfigError(f"no feasible plan: {empty}", field="--cluster")
    tset = as_template_set(templates, space.model)
    rates = _LayerRates(space, tset)
    stats = SearchStats()
    bounded = []
    for k, (reps, family) in enumerate(structures(space)):
        if not state_fits(space, reps):
            stats.infeasible["memory"] = stats.infeasible.get("memory", 0) + 1
            continue
        lb = lower_bound_ns(space, reps, rates)
        if objective == "cost":
            lb *= sum(r.count * sum(p.devices for p in r.parts) for r in reps)
        bounded.append((lb, k, reps, family))
    bounded.sort(key=lambda x: (x[0], x[1]))
    stats.candidates = len(bounded) + stats.infeasible.get("memory", 0)
    caches: tuple[dict, dict] = ({}, {})
    scored: list[tuple[float, str, Scored]] = []
    best_vals: list[float] = []  # the K smallest objective values so far, ascending
    direct_val: dict[Candidate, float] = {}
    for n, (lb, _, reps, family) in enumerate(bounded):
        if len(best_vals) >= top_k and lb >= best_vals[top_k - 1]:
            stats.pruned = len(bounded) - n
            break
        if clock() - start > budget_s:
            stats.budget_hit = True
            stats.skipped = len(bounded) - n
            break
        for cand in variants(space, reps, family):
            if cand.reshard is not ReshardStrategy.DIRECT and not _direct_close(direct_val, cand, best_vals, top_k):
                continue  # other strategies move the boundary tensor no faster than direct; try them near the top only
            try:
                s = _score(space, cand, tset, caches)
            except ConfigError as exc:
                key = _reason(exc)
                stats.infeasible[key] = stats.infeasible.get(key, 0) + 1
                continue
            val = objective_value(objective, s.estimate)
            scored.append((val, s.candidate.text(), s))
            if cand.reshard is ReshardStrategy.DIRECT:
                direct_val[cand] = val
            bisect.insort(best_vals, val)
            del best_vals[top_k:]
        if len(scored) > 50 * top_k:  # keep what can still enter the top K
            scored = [x for x in scored if x[0] <= best_vals[-1]]
        stats.evaluated += 1
        if progress:
            progress("closed form", n + 1, len(bounded))
    if not scored:
        worst = max(stats.infeasible.items(), key=lambda kv: kv[1])[0] if stats.infeasible else "devices"
        raise ConfigError(f"no feasible plan: every one of {stats.evaluated} candidate(s) fails on {worst}"
                          + (" (weights, gradients, optimizer state and activations exceed device memory)"
                             if worst == "memory" else ""), field="--model")
    scored.sort(key=lambda x: (x[0], x[1]))
    top = [_improve_shares(space, s, tset, objective, caches[1]) for _, _, s in scored[:top_k]]
    top.sort(key=lambda s: (objective_value(objective, s.estimate), s.candidate.text()))
    top = _replay(top, replay, replay_many, replay_top, budget_s - (clock() - start), stats, progress, clock)
    top.sort(key=lambda s: (0 if s.replay_ns is not None else 1, objective_value(objective, s.estimate, s.replay_ns),
                            s.candidate.text()))
    stats.elapsed_s = clock() - start
    return SearchResult(tuple(top), stats)


def _direct_close(direct_val: dict, cand: Candidate, best_vals: list[float], k: int, slack: float = 0.02) -> bool:
    """Whether the same structure with direct resharding came within ``slack`` of the K-th best."""
    mine = direct_val.get(replace(cand, reshard=ReshardStrategy.DIRECT))
    return mine is not None and (len(best_vals) < k or mine <= best_vals[k - 1] * (1 + slack))


def resolved(s: Scored) -> Plan:
    """The scored plan with every stage's layers as its closed form split them (partition given)."""
    from xsim_trace.plan.document import with_counts

    pipes = tuple(replace(p, stages=with_counts(p.stages, e.counts, s.plan.chunks))
                  for p, e in zip(s.plan.pipelines, s.estimate.pipelines))
    return replace(s.plan, pipelines=pipes, partition="given")


def _replay(top: list[Scored], replay, replay_many, n: int, budget_s: float, stats: SearchStats, progress, clock
            ) -> list[Scored]:
    if not n or (replay is None and replay_many is None):
        return top
    todo = list(range(min(n, len(top))))
    start = clock()
    if replay_many is not None:
        times = replay_many([resolved(top[i]) for i in todo])
        for i, t in zip(todo, times):
            top[i] = _with_replay(top[i], t)
            stats.replayed += t is not None
        return top
    for k, i in enumerate(todo):
        if clock() - start > budget_s:
            top[i] = replace(top[i], replay_note="budget")
            continue
        t = replay(resolved(top[i]))
        top[i] = _with_replay(top[i], t)
        stats.replayed += t is not None
        if progress:
            progress("replay", k + 1, len(todo))
    return top


def _with_replay(s: Scored, t: int | None) -> Scored:
    return replace(s, replay_ns=int(t)) if t is not None else replace(s, replay_note="too large to replay")


def _dummy_estimate() -> PlanEstimate:
    return PlanEstimate(1, (), 0, 0, 0.0, 1.0, 0.0, 1.0, 1, 0, 0)


def exhaustive(space: Space, templates: Templates, *, objective: str = "step") -> Scored:
    """Every structure x every layer split x every batch share, by the closed form (small spaces
    only: the proof that :func:`search` finds the optimum)."""
    import itertools

    from xsim_trace.plan.document import with_counts

    tset = as_template_set(templates, space.model)
    best: tuple[float, str, Scored] | None = None
    L = space.model.num_layers
    for cand in candidates(space):
        n = cand.num_pipelines
        step = [sum(p.stages for p in r.parts) if cand.chunks > 1 else 1 for r in cand.replicas for _ in range(r.count)]
        for shares in _compositions(space.micro_batches, n):
            if any(s % k for s, k in zip(shares, step)):
                continue
            plan = cand.plan(space, shares)
            splits = []
            for pipe in plan.pipelines:
                p = len(pipe.stages)
                splits.append([c for c in _compositions(L, p) if all(x >= cand.chunks for x in c)])
            for choice in itertools.product(*splits):
                pipes = []
                for pipe, counts in zip(plan.pipelines, choice):
                    pipes.append(replace(pipe, stages=with_counts(pipe.stages, counts, cand.chunks)))
                given = replace(plan, pipelines=tuple(pipes), partition="given")
                try:
                    est = estimate_plan(given, tset)
                except ConfigError:
                    continue
                key = (objective_value(objective, est), cand.text() + str(shares) + str(choice))
                if best is None or key[0] < best[0]:
                    best = (key[0], key[1], Scored(cand, given, est))
    if best is None:
        raise ConfigError("no feasible plan", field="space")
    return best[2]


def _compositions(total: int, parts: int):
    """Every tuple of ``parts`` positive integers summing to ``total``."""
    if parts == 1:
        yield (total,)
        return
    for first in range(1, total - parts + 2):
        for rest in _compositions(total - first, parts - 1):
            yield (first,) + rest


__all__ = ["OBJECTIVES", "resolved", "Scored", "SearchResult", "SearchStats", "exhaustive", "lower_bound_ns", "objective_value",
           "search"]
