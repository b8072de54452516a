#!/usr/bin/env python3
"""Accuracy table of xsim against every shared real trace with a measured ProfilerStep.

For each capture: convert (xsim-convert kineto), replay on the cluster preset matching its hardware,
compare per rank (and step) the simulated with the measured ProfilerStep time, and per NCCL kernel.
Prints one summary table, then the per-rank rows; ``--json FILE`` writes everything.

    python tools/accuracy_traces.py [--backend analytical] [--collective-model auto|nccl|schedule]
                                              [--details] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from converters.crossrank import alltoall_schedule  # noqa: E402
from converters.kineto import convert_kineto, read_ranks  # noqa: E402
from xsim_trace.io.sources import resolve_inputs  # noqa: E402

from xsim_trace.cluster import load_cluster  # noqa: E402
from xsim_trace.errors import XsimError  # noqa: E402
from xsim_trace.io import atomic_write  # noqa: E402
from xsim_trace.replay.settings import ReplaySettings  # noqa: E402
from xsim_trace.validate.compare import format_table  # noqa: E402
from xsim_trace.validate.pipeline import validate_captures  # noqa: E402

KINETO = ROOT.parent / "shared" / "traces" / "kineto"

#: (label, capture, cluster preset, step, also run without start skew)
CASES = (
    ("dlrm_v100_8rank", "param_dlrm_v100_8rank/dlrm_kineto.tar.gz", "v100-dgx1", None, True),
    ("hta_a100_nccl_2rank", "hta_a100_nccl_2rank", "a100-node", "all", False),
    ("hta_a100_16rank_rank0", "hta_a100_16rank_rank0", "dgx-a100", "all", False),
    ("tracelens_h100_qwen05b", "tracelens_h100_qwen05b", "dgx-h100", None, False),
)


def run_case(spec: str, cluster: str, step, backend: str, skew: bool = True, collective_model: str = "auto"):
    kts = read_ranks(resolve_inputs(spec))

    def convert(number):
        conv = convert_kineto(kts, step=number)
        return conv.traces, conv.comm_groups

    v, _ = validate_captures(spec, load_cluster(cluster), convert, backend=backend, step=step, skew=skew,
                             alltoall_order=alltoall_schedule, settings=ReplaySettings(collective_model=collective_model))
    return v


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="analytical")
    p.add_argument("--collective-model", choices=("auto", "nccl", "schedule"), default="auto",
                   help="what prices collectives (default auto: the NCCL model on a closed-form backend)")
    p.add_argument("--details", action="store_true", help="print every per-rank and per-collective table")
    p.add_argument("--json", metavar="FILE", help="write all results as JSON")
    args = p.parse_args(argv)
    if not KINETO.is_dir():
        print(f"shared traces not found at {KINETO}", file=sys.stderr)
        return 1
    rows = []
    docs = {}
    details = []
    for label, rel, cluster, step, counterfactual in CASES:
        variants = [(label, True)] + ([(f"{label} (no start skew)", False)] if counterfactual else [])
        for name, skew in variants:
            t0 = time.perf_counter()
            try:
                v = run_case(str(KINETO / rel), cluster, step, args.backend, skew, args.collective_model)
            except XsimError as exc:
                rows.append((name, cluster, "-", "-", "-", "-", "-", "-", f"error: {exc}"))
                continue
            wall = time.perf_counter() - t0
            coll = [abs(c.error_pct) for c in v.collectives if c.error_pct is not None]
            pure = [abs(c.error_pct) for c in v.transfer_rows()]
            meas = [r.measured_ns for r in v.ranks]
            sim = [r.simulated_ns for r in v.ranks]
            rows.append((
                name, cluster, str(len(v.ranks)),
                f"{v.max_abs_error_pct:.2f}", f"{v.mean_abs_error_pct:.2f}",
                f"{(max(meas) - min(meas)) / 1e6:.3f} / {(max(sim) - min(sim)) / 1e6:.3f}",
                f"{len(v.collectives)} / {statistics.median(coll):.1f}" if coll else "0 / -",
                f"{len(pure)} / {statistics.median(pure):.1f}" if pure else "-",
                f"{wall:.1f}",
            ))
            docs[name] = v.to_dict()
            details.append(format_table(v, collectives=args.details))
    head = ("trace", "cluster", "rows", "max|err|%", "mean|err|%", "spread ms meas/sim", "colls / median|err|%",
            "transfer-only / median|err|%", "wall s")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print(f"xsim accuracy on the shared real traces (backend {args.backend}, collective model {args.collective_model})")
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    for d in details:
        print()
        print(d)
    if args.json:
        with atomic_write(args.json) as f:
            json.dump({"backend": args.backend, "collective_model": args.collective_model, "cases": docs}, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
