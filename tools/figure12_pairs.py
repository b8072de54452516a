#!/usr/bin/env python3
"""Stage-boundary pairs of unlike GPU groups (the heterogeneous-resharding paper's Figure 12 pairs
plus one 96-GPU case): iteration time, exposed stage-boundary communication and reshard / PP
transfer time per strategy, rewritten from the catalog-timed model and replayed on the engine.

    python tools/figure12_pairs.py [--backend NAME] [--markdown]

Model: a GPT-style 2.7B model with 24 attention heads (so TP 6, 4, 8 and 1 all divide them),
32 layers, hidden 3072, seq 2048, micro-batch 1, 8 micro-batches, 1F1B, auto partition (the
evaluated split).  Cluster: built from each plan's device groups.  "exposed" = the iteration minus
the same plan's iteration with zero-byte boundary tensors (what stage-to-stage traffic adds to the
step); "transfer" = the summed transfer time of every boundary exchange (metrics.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from xsim_trace.cli.replay import DEFAULT_BACKEND  # noqa: E402
from xsim_trace.evaluate.compare import evaluate  # noqa: E402
from xsim_trace.evaluate.engine_times import engine_times  # noqa: E402
from xsim_trace.plan.parse import plan_from_mapping  # noqa: E402
from xsim_trace.layer_templates.template import templates_from_model  # noqa: E402

MODEL = {"name": "gpt-2.7b-h24", "num_layers": 32, "hidden": 3072, "heads": 24, "ffn_hidden": 12288, "vocab": 51200,
         "seq_len": 2048, "gated_mlp": False}

#: (label, H100 count, H100 TP, A100 count, A100 TP, replicas)
PAIRS = [
    ("H100x6 TP6 -> A100x4 TP4", 6, 6, 4, 4, 1),
    ("H100x8 TP8 -> A100x1 TP1", 8, 8, 1, 1, 1),
    ("H100x4 TP4 -> A100x4 TP4", 4, 4, 4, 4, 1),
    ("8 x (H100x4 TP4 -> A100x8 TP8), 96 GPUs", 4, 4, 8, 8, 8),
]
STRATEGIES = ("direct", "leader", "broadcast")


def plan_for(h: int, th: int, a: int, ta: int, reps: int, strategy: str):
    return plan_from_mapping({
        "name": f"h{h}tp{th}-a{a}tp{ta}x{reps}", "model": MODEL, "micro_batches": 8, "schedule": "1f1b",
        "partition": "auto", "reshard": strategy,
        "device_groups": [{"name": "h100", "device": "H100-SXM5-80GB", "count": h * reps, "devices_per_node": 8},
                          {"name": "a100", "device": "A100-SXM4-80GB", "count": a * reps, "devices_per_node": 8,
                           "nic_gbps": 200}],
        "pipelines": [{"replicas": reps, "stages": [{"group": "h100", "tp": th}, {"group": "a100", "tp": ta}]}],
    })


def row(label: str, strategy: str, spec, backend: str) -> list[str]:
    plan = plan_for(*spec, strategy)
    tm = templates_from_model(plan.model, "H100-SXM5-80GB", 1)
    replay = lambda res: engine_times(res, None, backend)  # noqa: E731
    res, met, it = evaluate(plan, tm, replay)
    free = evaluate(plan, dataclasses.replace(tm, activation_bytes=0), replay)[2]
    layers = "/".join(str(s.num_layers) for s in res.plan.pipelines[0].stages)
    per = 2 * plan.micro_batches * plan.dp  # exchanges per boundary: both directions, every micro-batch, replica
    transfer = met.reshard_ns() + met.pp_ns()
    return [label, strategy if spec[1] != spec[3] else "(equal TP: pp)", layers, f"{it / 1e6:.2f}",
            f"{(it - free) / 1e6:.2f}", f"{transfer / 1e6:.2f}", f"{transfer / per / 1e3:.1f}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=DEFAULT_BACKEND)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    head = ["pair", "reshard", "layers", "iteration ms", "exposed boundary ms", "transfer ms (sum)", "per exchange us"]
    rows = []
    for label, *spec in PAIRS:
        for strategy in (STRATEGIES if spec[1] != spec[3] else ("direct",)):
            rows.append(row(label, strategy, spec, args.backend))
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|---|---|---|" + "---:|" * (len(head) - 3))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        for r in [head] + rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print(f"\nbackend {args.backend}; cluster built from each plan's device groups")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
