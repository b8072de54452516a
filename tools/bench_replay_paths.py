"""Replay speed, side by side in one run: the reference path (typed `.et` reader -> compile_workload
-> pure-Python engine) against the fast path (columnar decode straight into arrays -> vectorised
compile -> compiled numba loop), on a generated rank set written to disk, analytical backend; and
the fast path with symmetry folding (``xsim_trace.replay.fold``: one rank simulated per class of
equivalent ranks, the others' times copied; the default of ``xsim replay``).

    python tools/bench_replay_paths.py            # Llama-2-7B, TP8 PP2 DP64 (1,024 ranks), 4 layers
    python tools/bench_replay_paths.py --quick    # TP8 PP2 DP4 (64 ranks)
    python tools/bench_replay_paths.py --dp 16 --layers 8 --model llama2-13b

Prints CPU seconds and nodes per CPU second per stage, the compiled form's bytes per node, and
checks that both paths give every node the same times.  The fast path's first use in a process
loads numba and its cached kernels (shown on its own line); the steady-state figures exclude it.
Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def cpu(fn):
    c0 = time.process_time()
    out = fn()
    return out, time.process_time() - c0


def compiled_bytes(w) -> int:
    """Bytes of a CompiledWorkload: its arrays, the name buffer, the collective instances."""
    total = 0
    for f in dataclasses.fields(w):
        v = getattr(w, f.name)
        if isinstance(v, np.ndarray):
            total += v.nbytes
    names = w.names
    total += names.nbytes if hasattr(names, "nbytes") else sum(sys.getsizeof(s) for s in names) + sys.getsizeof(names)
    total += sum(sys.getsizeof(x) + sys.getsizeof(x.nodes) for x in w.instances) + sys.getsizeof(w.instances)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="64 ranks (TP8 PP2 DP4)")
    ap.add_argument("--model", default="llama2-7b")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--dp", type=int, help="default 64 (4 with --quick)")
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    dp = args.dp or (4 if args.quick else 64)

    from xsim_trace.cli.main import main as xsim
    from xsim_trace.cluster import load_cluster
    from xsim_trace.io import read_rank_set
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology
    from xsim_trace.replay import ReplaySettings, compile_workload
    from xsim_trace.replay.columnar import compile_rank_files
    from xsim_trace.replay.engine import Engine

    ranks = args.tp * args.pp * dp
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "step"
        t0 = time.perf_counter()
        xsim(["--quiet", "generate", "--model", args.model, "--tp", str(args.tp), "--pp", str(args.pp), "--dp", str(dp),
              "--layers", str(args.layers), "--out", str(prefix)])
        gen_s = time.perf_counter() - t0
        cluster = load_cluster(f"dgx-h100:{-(-ranks // 8)}")
        node_of = [cluster.node_of(r) for r in range(ranks)]

        def backend():
            return make_backend("analytical", build_topology(cluster))

        # the fast path's one-off start: numba and the cached kernels (a tiny replay)
        from xsim_trace.replay.sample import tp_dp_step

        t, g = tp_dp_step(tp=2, dp=2, layers=1, gemm_ns=1000, tp_bytes=1 << 20, grad_bytes=1 << 20)
        small = compile_workload(t, g)
        _, warm_s = cpu(lambda: (compile_rank_files(prefix, columnar=True), Engine(small, backend(), compiled=True).run()))

        (w_fast, _), dec_fast = cpu(lambda: compile_rank_files(prefix, columnar=True))
        fast_engine = Engine(w_fast, backend(), ReplaySettings(), node_of=node_of, compiled=True)
        raw_fast, run_fast = cpu(fast_engine.run)
        fold_engine = Engine(w_fast, backend(), ReplaySettings(), node_of=node_of, compiled=True, fold=True)
        raw_fold, run_fold = cpu(fold_engine.run)
        rs, read_ref = cpu(lambda: read_rank_set(prefix))
        w_ref, comp_ref = cpu(lambda: compile_workload(rs.traces, rs.comm_groups))
        del rs
        raw_ref, run_ref = cpu(lambda: Engine(w_ref, backend(), ReplaySettings(), node_of=node_of, compiled=False).run())

    n = w_fast.num_nodes
    same = all(np.array_equal(getattr(raw_ref, k), getattr(raw_fast, k))
               for k in ("ready_ns", "start_ns", "end_ns", "wait_ns", "peer_node")) and raw_ref.stats == raw_fast.stats
    same_fold = all(np.array_equal(getattr(raw_ref, k), getattr(raw_fold, k))
                    for k in ("ready_ns", "start_ns", "end_ns", "wait_ns", "peer_node"))
    rows = [
        ("workload", f"{args.model} TP{args.tp} PP{args.pp} DP{dp}, {args.layers} layers: {ranks:,} ranks, {n:,} nodes",
         f"generated in {gen_s:.1f} s (not counted)"),
        ("reference: typed read", f"{read_ref:.2f} s CPU", f"{n / read_ref:,.0f} nodes/s"),
        ("reference: compile_workload", f"{comp_ref:.2f} s CPU", f"{n / comp_ref:,.0f} nodes/s"),
        ("reference: Python engine", f"{run_ref:.2f} s CPU", f"{n / run_ref:,.0f} nodes/s"),
        ("reference: total", f"{read_ref + comp_ref + run_ref:.2f} s CPU", f"{n / (read_ref + comp_ref + run_ref):,.0f} nodes/s"),
        ("fast: numba + cached kernels, once per process", f"{warm_s:.2f} s CPU", "(first use only)"),
        ("fast: columnar decode + compile", f"{dec_fast:.2f} s CPU", f"{n / dec_fast:,.0f} nodes/s"),
        ("fast: compiled loop" if fast_engine.compiled else "fast: (compiled loop not applicable) Python engine",
         f"{run_fast:.3f} s CPU", f"{n / run_fast:,.0f} nodes/s"),
        ("fast: total", f"{dec_fast + run_fast:.2f} s CPU",
         f"{n / (dec_fast + run_fast):,.0f} nodes/s; {(read_ref + comp_ref + run_ref) / (dec_fast + run_fast):.1f}x the reference"),
        ("fast + fold: compiled loop, folded", f"{run_fold:.3f} s CPU",
         f"{n / run_fold:,.0f} nodes/s; {raw_fold.stats.folded_ranks:,} of {ranks:,} ranks folded "
         f"({raw_fold.stats.events:,} events simulated of {raw_fast.stats.events:,})"),
        ("fast + fold: total", f"{dec_fast + run_fold:.2f} s CPU",
         f"{n / (dec_fast + run_fold):,.0f} nodes/s; {(read_ref + comp_ref + run_ref) / (dec_fast + run_fold):.1f}x the reference"),
        ("compiled form", f"{compiled_bytes(w_fast) / n:.0f} B/node",
         f"typed path's: {compiled_bytes(w_ref) / n:.0f} B/node (names as str objects)"),
        ("same times on every node", "yes" if same else "NO", f"iteration {int(raw_fast.end_ns.max()):,} ns"),
        ("same times on every node, folded", "yes" if same_fold else "NO", ""),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
    if not (same and same_fold):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
