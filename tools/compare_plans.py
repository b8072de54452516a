#!/usr/bin/env python3
"""Mixed H100 + A100 Llama-2-7B example: the three resharding strategies and uniform vs
throughput-proportional (non-uniform) partitioning, rewritten and replayed, in one table.

    python tools/compare_plans.py                 # the pipeline plan, 3 strategies x 2 partitions
    python tools/compare_plans.py --all --markdown # every plan in traces/plans/

Templates come from the plans' model timed by the device catalog (the workload generator's ops) or
from a captured trace (--source PREFIX --device NAME --tp N).  The replay is the event-driven engine
on the bundled mixed-h100-a100 cluster with the congestion-aware analytical backend (--cluster,
--backend), or with --quick the plans' closed form (xsim_trace.plan.closed_form, no replay).

    python tools/compare_plans.py --all --accuracy  # closed form vs engine replay, per variant

--accuracy prints, per variant, the closed form's step next to the engine replay's on a cluster built
from the plan's own device groups (``analytical``, the bandwidths the closed form assumes), the
signed error, and the mean / largest absolute error over the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from xsim_trace.cli.plan import replay_for  # noqa: E402
from xsim_trace.cli.rewrite import load_template  # noqa: E402
from xsim_trace.evaluate.compare import compare, format_table  # noqa: E402
from xsim_trace.plan.parse import load_plan  # noqa: E402

PLANS = REPO / "traces" / "plans"
MAIN = PLANS / "llama7b_h100_a100_pipeline.yaml"


def markdown(rows) -> str:
    best = min(r.iteration_ns for r in rows)
    out = ["| plan | reshard | partition | layers/stage | iteration ms | vs best | max bubble | reshard ms | straggler ms |",
           "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r.plan} | {r.reshard} | {r.partition} | {r.layers} | {r.iteration_ns / 1e6:.2f} | "
                   f"{(r.iteration_ns / best - 1) * 100:+.1f}% | {r.max_bubble * 100:.1f}% | {r.reshard_ns / 1e6:.2f} | "
                   f"{r.max_straggler_ns / 1e6:.2f} |")
    return "\n".join(out)


def accuracy(plans, args, t0: float) -> int:
    """Closed form vs engine replay on each plan's own cluster, one row per variant: the replay with
    collectives priced by the NCCL model (the default) and walked as ring schedules over the links."""
    from xsim_trace.evaluate.engine_times import engine_times
    from xsim_trace.replay import ReplaySettings

    kw = dict(reshards=["direct", "leader", "broadcast"], partitions=["uniform", "auto"])
    tm = lambda p: load_template(args.source, p, device=args.device, tp=args.tp)  # noqa: E731
    quick = compare(plans, tm, closed_form=True, **kw)
    t1 = time.perf_counter()
    nccl = compare(plans, tm, replay=lambda res: engine_times(res, None, "analytical"), **kw)
    walk = compare(plans, tm, replay=lambda res: engine_times(res, None, "analytical",
                                                              ReplaySettings(collective_model="schedule")), **kw)
    t2 = time.perf_counter()
    out = ["| plan | reshard | partition | layers | closed form ms | replay ms (NCCL model) | error | "
           "replay ms (ring walk) | error |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    errs: dict[str, list[float]] = {"nccl": [], "walk": []}
    for q, f, w in zip(quick, nccl, walk):
        if q.infeasible or f.infeasible or w.infeasible:
            out.append(f"| {q.plan} | {q.reshard} | {q.partition} | infeasible | - | - | - | - | - |")
            continue
        cells = []
        for key, r in (("nccl", f), ("walk", w)):
            err = q.iteration_ns / r.iteration_ns - 1
            errs[key].append(abs(err))
            cells += [f"{r.iteration_ns / 1e6:.2f}", f"{err * 100:+.1f}%"]
        layers = q.layers if q.layers == f.layers else f"{q.layers} (replay {f.layers})"
        out.append(f"| {q.plan} | {q.reshard} | {q.partition} | {layers} | {q.iteration_ns / 1e6:.2f} | " + " | ".join(cells) + " |")
    print("\n".join(out))
    for key, label in (("nccl", "NCCL model"), ("walk", "ring walk")):
        e = errs[key]
        if e:
            print(f"vs replay ({label}): mean |error| {sum(e) / len(e) * 100:.1f}%, largest {max(e) * 100:.1f}% over {len(e)} rows")
    print(f"closed form {t1 - t0:.2f} s for {len(quick)} rows, replays {t2 - t1:.1f} s", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plans", nargs="*", help=f"plan files (default {MAIN.relative_to(REPO)})")
    ap.add_argument("--all", action="store_true", help="every plan in traces/plans/")
    ap.add_argument("--source", default="model")
    ap.add_argument("--device")
    ap.add_argument("--tp", type=int)
    ap.add_argument("--cluster", default="mixed-h100-a100", help="cluster file or preset (default mixed-h100-a100)")
    ap.add_argument("--backend", default="analytical-ca", help="network backend (analytical, analytical-ca, flow, ns3)")
    ap.add_argument("--quick", action="store_true", help="the closed form instead of rewriting and replaying")
    ap.add_argument("--accuracy", action="store_true", help="closed form vs engine replay (plan's own cluster), per variant")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    paths = sorted(PLANS.glob("*.yaml")) if args.all else [Path(p) for p in args.plans] or [MAIN]
    plans = [load_plan(p) for p in paths]
    t0 = time.perf_counter()
    if args.accuracy:
        return accuracy(plans, args, t0)
    rows = compare(plans, lambda p: load_template(args.source, p, device=args.device, tp=args.tp),
                   reshards=["direct", "leader", "broadcast"], partitions=["uniform", "auto"],
                   replay=replay_for(args.cluster, args.backend), closed_form=args.quick)
    print(markdown(rows) if args.markdown else format_table(rows))
    how = "closed form" if args.quick else f"engine on {args.cluster} ({args.backend})"
    print(f"\n{len(rows)} variants rewritten and replayed ({how}) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps([r.as_dict() for r in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
