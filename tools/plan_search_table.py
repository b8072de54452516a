#!/usr/bin/env python3
"""The plan search against the hand-written bundled plans, and the search's scale, in one run.

    python tools/plan_search_table.py            # bundled plans: hand-written vs searched
    python tools/plan_search_table.py --scale    # also the 1,024-GPU 3-group cluster (CPU s)

For each plan in traces/plans/ the search gets the plan's own device groups, model, sequence
length and global batch; both the hand-written plan (its own partition mode) and the search's best
are rewritten from the catalog-timed model and replayed on the engine over a cluster built from the
device groups (``--backend``, default analytical).  The search replays its best three and keeps the
fastest replayed.  CPU seconds are process time, measured in this run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from xsim_trace.plan.search import search  # noqa: E402
from xsim_trace.plan.space import Space  # noqa: E402
from xsim_trace.evaluate.compare import evaluate  # noqa: E402
from xsim_trace.evaluate.engine_times import engine_times  # noqa: E402
from xsim_trace.plan.parse import load_plan  # noqa: E402
from xsim_trace.layer_templates.template import templates_from_model  # noqa: E402

PLANS = sorted((REPO / "traces" / "plans").glob("*.yaml"))


def replay_ns(plan, template, backend: str) -> int:
    return evaluate(plan, template, lambda res: engine_times(res, None, backend))[2]


def bundled(backend: str) -> list[str]:
    rows = ["| plan | devices | hand-written | ms | searched best | ms | vs hand-written | search CPU s |",
            "|---|---|---|---:|---|---:|---:|---:|"]
    for path in PLANS:
        plan = load_plan(path)
        tm = templates_from_model(plan.model, plan.groups[0].device_spec, 1)
        hand = replay_ns(plan, tm, backend)
        layers = " | ".join(dict.fromkeys("/".join(str(s.num_layers) for s in p.stages) for p in
                                          evaluate(plan, tm, lambda res: engine_times(res, None, backend))[0].plan.pipelines))
        space = Space(plan.groups, plan.model, plan.total_micro_batches)
        t0 = time.process_time()
        res = search(space, tm, top_k=5, replay=lambda p: replay_ns(p, tm, backend), replay_top=3)
        cpu = time.process_time() - t0
        best = res.best
        devices = " + ".join(f"{g.count} {g.device.split('-')[0]}" for g in plan.groups)
        rows.append(f"| {plan.name} | {devices} | {layers} ({plan.schedule.value}) | {hand / 1e6:.1f} | "
                    f"{best.candidate.text()} ({best.estimate.layers_text()}) | {best.step_ns / 1e6:.1f} | "
                    f"{(best.step_ns / hand - 1) * 100:+.1f}% | {cpu:.1f} |")
    return rows


def scale() -> list[str]:
    from xsim_trace.cluster import load_cluster
    from xsim_trace.plan.document import groups_from_cluster
    from xsim_trace.plan.model_spec import ModelSpec
    from xsim_trace.workload.model import get_model

    groups = groups_from_cluster(load_cluster("mixed-3group-1024"))
    model = ModelSpec.from_workload(get_model("llama2-13b"), seq_len=2048)
    tm = templates_from_model(model, groups[0].device_spec, 1)
    t0, w0 = time.process_time(), time.perf_counter()
    res = search(Space(groups, model, 1024), tm, top_k=5)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    st = res.stats
    return [f"mixed-3group-1024 (256 H100 + 512 A100-80GB + 256 A100-40GB), llama2-13b, seq 2048, gbs 1024: "
            f"{st.candidates} structures, {st.evaluated} costed, {st.pruned} pruned by the bound, "
            f"{sum(st.infeasible.values())} infeasible; {cpu:.1f} CPU s ({wall:.1f} s wall); best "
            f"{res.best.candidate.text()} {res.best.estimate.step_ns / 1e6:.1f} ms (closed form), "
            f"MFU {res.best.estimate.mfu * 100:.1f}%"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="analytical")
    ap.add_argument("--scale", action="store_true", help="also time the 1,024-GPU search")
    args = ap.parse_args()
    print("\n".join(bundled(args.backend)))
    if args.scale:
        print()
        print("\n".join(scale()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
