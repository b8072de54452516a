"""Evaluate plans: rewrite and replay several plans / strategies / partitions (or cost them with the
closed form, :mod:`xsim_trace.plan.closed_form`) and tabulate the results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from xsim_trace.errors import ConfigError
from xsim_trace.evaluate.metrics import Metrics, compute_metrics
from xsim_trace.plan.closed_form import estimate_plan
from xsim_trace.plan.memory import check_memory
from xsim_trace.plan.model import Plan
from xsim_trace.rewrite.rewriter import RewriteResult, rewrite
from xsim_trace.layer_templates.template import ModelTemplate


@dataclass(frozen=True, slots=True)
class CompareRow:
    plan: str
    reshard: str
    partition: str
    layers: str  # per pipeline, stage layer counts: "20/12 | 8/24"
    iteration_ns: int
    max_bubble: float  # largest stage bubble fraction
    reshard_ns: int  # summed over boundaries and micro-batches (stages of different TP)
    max_straggler_ns: int
    ranks: int
    nodes: int
    pp_ns: int = 0  # the same for boundaries between stages of equal TP (plain PP send/recv)
    infeasible: str = ""  # why the variant cannot run (e.g. memory exceeded); its figures are then 0

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


def replay_engine(result: RewriteResult) -> Mapping:
    """Per-node times of the engine replay on a cluster built from the plan's device groups."""
    from xsim_trace.evaluate.engine_times import engine_times

    return engine_times(result)


def evaluate(plan: Plan, template: ModelTemplate, replay: Callable[[RewriteResult], Mapping] = replay_engine
             ) -> tuple[RewriteResult, Metrics, int]:
    """Rewrite and replay ``plan`` (``replay``: result -> per-node times, default the engine on the
    plan's own cluster); ConfigError when it does not fit (memory, partition)."""
    res = rewrite(plan, template)
    check_memory(res.plan)
    times = replay(res)
    met = compute_metrics(res.traces, times)
    iteration = max(t.end_ns for t in times.values()) - min(t.start_ns for t in times.values())
    return res, met, iteration


def _closed_form_row(name: str, variant: Plan, template: ModelTemplate) -> CompareRow:
    est = estimate_plan(variant, template)
    return CompareRow(plan=name, reshard=variant.reshard.value, partition=variant.partition, layers=est.layers_text(),
                      iteration_ns=est.step_ns, max_bubble=est.bubble, reshard_ns=est.reshard_ns, pp_ns=est.pp_ns,
                      max_straggler_ns=est.straggler_ns, ranks=est.devices, nodes=0)


def _layers(res: RewriteResult) -> str:
    pipes = []
    for p in res.plan.pipelines:
        pipes.append("/".join(str(s.num_layers) for s in p.stages))
    uniq = list(dict.fromkeys(pipes))
    return " | ".join(uniq)


def compare(plans: Sequence[Plan], template_for: Callable[[Plan], ModelTemplate], *,
            reshards: Sequence[str | None] = (None,), partitions: Sequence[str | None] = (None,),
            replay: Callable[[RewriteResult], Mapping] = replay_engine,
            progress: Callable[[CompareRow], None] | None = None, closed_form: bool = False) -> list[CompareRow]:
    """One row per (plan, reshard strategy, partition); ``None`` keeps the plan's own choice.  A
    variant that does not fit (memory, partition) is a row marked ``infeasible``; the rest go on.
    ``closed_form``: the plan's closed-form estimate (:mod:`xsim_trace.plan.closed_form`) instead of
    rewriting and replaying (milliseconds per row)."""
    rows = []
    for plan in plans:
        tm = template_for(plan)
        for part in partitions:
            for rs in reshards:
                variant = plan.with_strategy(reshard=rs, partition=part)
                try:
                    if closed_form:
                        rows.append(_closed_form_row(plan.name, variant, tm))
                        if progress:
                            progress(rows[-1])
                        continue
                    res, met, it = evaluate(variant, tm, replay)
                except ConfigError as exc:
                    rows.append(CompareRow(plan=plan.name, reshard=variant.reshard.value, partition=variant.partition,
                                           layers="-", iteration_ns=0, max_bubble=0.0, reshard_ns=0, max_straggler_ns=0,
                                           ranks=0, nodes=0, infeasible=exc.message))
                    if progress:
                        progress(rows[-1])
                    continue
                rows.append(CompareRow(
                    plan=plan.name, reshard=variant.reshard.value, partition=variant.partition, layers=_layers(res),
                    iteration_ns=it, max_bubble=max((b.fraction for b in met.bubbles), default=0.0),
                    reshard_ns=met.reshard_ns(), pp_ns=met.pp_ns(), max_straggler_ns=met.max_straggler_ns(), ranks=len(res.traces),
                    nodes=sum(len(t) for t in res.traces.values()),
                ))
                if progress:
                    progress(rows[-1])
    return rows


def format_table(rows: Sequence[CompareRow]) -> str:
    head = ["plan", "reshard", "partition", "layers/stage", "iter ms", "vs best", "max bubble", "pp ms", "reshard ms",
            "straggler ms"]
    best = min((r.iteration_ns for r in rows if not r.infeasible), default=1) or 1
    body = [[r.plan, r.reshard, r.partition, r.layers, f"{r.iteration_ns / 1e6:.2f}",
             f"{(r.iteration_ns / best - 1) * 100:+.1f}%", f"{r.max_bubble * 100:.1f}%", f"{r.pp_ns / 1e6:.2f}",
             f"{r.reshard_ns / 1e6:.2f}",
             f"{r.max_straggler_ns / 1e6:.2f}"] if not r.infeasible else
            [r.plan, r.reshard, r.partition, r.layers, "infeasible", "-", "-", "-", "-", "-"] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    notes = [f"infeasible: {r.plan} {r.reshard} {r.partition}: {r.infeasible}" for r in rows if r.infeasible]
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body] + notes)
