#!/usr/bin/env python3
"""Mixed H100 + A100 Llama-2-7B example: the three resharding strategies and uniform vs
throughput-proportional (non-uniform) partitioning, rewritten and replayed, in one table.

    python tools/compare_plans.py                 # the pipeline plan, 3 strategies x 2 partitions
    python tools/compare_plans.py --all --markdown # every plan in traces/plans/

Templates come from the plans' model timed by the device catalog (the workload generator's ops) or
from a captured trace (--source PREFIX --device NAME --tp N).  The replay is the event-driven engine
on the bundled mixed-h100-a100 cluster with the congestion-aware analytical backend (--cluster,
--backend), or with --quick the rewriter's alpha-beta replay (no contention) with the plans'
device-group bandwidths.
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
from xsim_trace.rewrite.compare import compare, format_table  # noqa: E402
from xsim_trace.rewrite.plan import load_plan  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plans", nargs="*", help=f"plan files (default {MAIN.relative_to(REPO)})")
    ap.add_argument("--all", action="store_true", help="every plan in traces/plans/")
    ap.add_argument("--source", default="model")
    ap.add_argument("--device")
    ap.add_argument("--tp", type=int)
    ap.add_argument("--cluster", default="mixed-h100-a100", help="cluster file or preset (default mixed-h100-a100)")
    ap.add_argument("--backend", default="analytical-ca", help="network backend (analytical, analytical-ca, flow, ns3)")
    ap.add_argument("--quick", action="store_true", help="quick alpha-beta replay instead of the engine")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    paths = sorted(PLANS.glob("*.yaml")) if args.all else [Path(p) for p in args.plans] or [MAIN]
    plans = [load_plan(p) for p in paths]
    t0 = time.perf_counter()
    rows = compare(plans, lambda p: load_template(args.source, p, device=args.device, tp=args.tp),
                   reshards=["direct", "leader", "broadcast"], partitions=["uniform", "auto"],
                   replay=replay_for(args.cluster, args.backend, quick=args.quick))
    print(markdown(rows) if args.markdown else format_table(rows))
    how = "quick replay" if args.quick else f"engine on {args.cluster} ({args.backend})"
    print(f"\n{len(rows)} variants rewritten and replayed ({how}) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps([r.as_dict() for r in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
