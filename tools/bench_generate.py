"""Workload generation throughput and memory: the per-rank reference builder vs rank templates.

Usage::

    python tools/bench_generate.py            # Llama-3-70B, tp 8 pp 8, 16 micro-batches per replica
    python tools/bench_generate.py --quick    # 16 layers, pp 4: about 15 s
    python tools/bench_generate.py --old-dp 2 --new-dp 32   # other world sizes

Side by side in one run, each in a fresh process (so each has its own peak RSS):

- ``old``: ``tests/generator_reference.py``'s ``reference_generate`` + ``write_rank_set`` (every rank
  built and timed from scratch, all traces in memory, then written) at ``--old-dp`` (64 ranks);
- ``new``: ``write_workload`` (templates per stage, stamped and streamed rank by rank) on the
  same configuration, whose files are compared byte for byte with the old ones;
- ``new``: ``write_workload`` at ``--new-dp`` (1,024 ranks).

Every run keeps 16 micro-batches per DP replica (global batch = 16 * dp), so the work per rank is
the same and ranks/s compare directly.  Times are wall-clock from the setup to the last file
written (fsync included), without the interpreter start.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the reference builder lives with the tests

MICROBATCHES = 16


def _child(args: argparse.Namespace) -> None:
    from xsim_trace.io import write_rank_set
    from xsim_trace.workload.framework import Framework
    from xsim_trace.workload.generator import write_workload
    from xsim_trace.workload.model import get_model
    from generator_reference import reference_generate
    from xsim_trace.workload.spec_file import make_setup

    model = get_model(args.model)
    if args.layers:
        model = model.with_(layers=args.layers)
    fw = Framework(tp=args.tp, pp=args.pp, dp=args.dp, global_batch=MICROBATCHES * args.dp)
    t0 = time.perf_counter()
    setup = make_setup(model, fw, "H100", gpus_per_node=8, nic_gbps_per_gpu=400.0)
    if args.child == "old":
        wl = reference_generate(setup.program, setup.timer)
        nodes = sum(len(t) for t in wl.traces.values())
        write_rank_set(args.out, wl.traces, wl.comm_groups)
        templates = 0
    else:
        res = write_workload(args.out, setup.program, setup.timer)
        nodes, templates = res.nodes, res.templates_built
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"ranks": fw.world_size, "nodes": nodes, "wall_s": wall, "peak_rss_bytes": rss,
                      "templates": templates}))


def _run(kind: str, dp: int, out: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--dp", str(dp), "--out", str(out), "--model", args.model,
           "--tp", str(args.tp), "--pp", str(args.pp), "--layers", str(args.layers)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{kind} run failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _same_files(a: Path, b: Path) -> bool:
    names = sorted(os.listdir(a))
    if names != sorted(os.listdir(b)):
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return not mismatch and not errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="16 layers, pp 4: old at 32 ranks, new at 256")
    ap.add_argument("--model", default="llama3-70b")
    ap.add_argument("--layers", type=int, default=0, help="override the model's layer count")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=8)
    ap.add_argument("--old-dp", type=int, default=1, help="DP of the old-vs-new comparison (default: 64 ranks)")
    ap.add_argument("--new-dp", type=int, default=16, help="DP of the large new-only run (default: 1,024 ranks)")
    ap.add_argument("--keep", metavar="DIR", help="write under DIR and keep the files (default: a temp dir)")
    ap.add_argument("--child", choices=("old", "new"), help=argparse.SUPPRESS)
    ap.add_argument("--dp", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return 0
    if args.quick:
        args.layers, args.pp, args.new_dp = args.layers or 16, 4, 8
    with tempfile.TemporaryDirectory(prefix="bench_generate_", dir=args.keep) as tmp:
        root = Path(tmp)
        rows = [
            ("old: per-rank reference", _run("old", args.old_dp, root / "old" / "w", args)),
            ("new: templates, streamed", _run("new", args.old_dp, root / "new" / "w", args)),
        ]
        identical = _same_files(root / "old", root / "new")
        rows.append(("new: templates, streamed", _run("new", args.new_dp, root / "big" / "w", args)))
    layers = f", {args.layers} layers" if args.layers else ""
    print(f"{args.model}{layers}, tp {args.tp} pp {args.pp}, {MICROBATCHES} micro-batches per replica, H100")
    print(f"{'path':<26} {'ranks':>6} {'nodes':>11} {'wall s':>8} {'ranks/s':>9} {'nodes/s':>11} {'peak RSS MB':>12}")
    for name, r in rows:
        print(f"{name:<26} {r['ranks']:>6} {r['nodes']:>11,} {r['wall_s']:>8.2f} {r['ranks'] / r['wall_s']:>9.1f} "
              f"{r['nodes'] / r['wall_s']:>11,.0f} {r['peak_rss_bytes'] / 2**20:>12.0f}")
    old, new = rows[0][1], rows[1][1]
    print(f"same configuration: {old['wall_s'] / new['wall_s']:.1f}x faster, files byte-identical: {identical}; "
          f"templates built: {new['templates']} ({rows[2][1]['templates']} at {rows[2][1]['ranks']} ranks)")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
