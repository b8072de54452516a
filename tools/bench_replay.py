"""Replay speed: nodes replayed per second on a synthetic many-rank trace (1M+ nodes with --full), and
the time of a ring all-reduce of 64 MB in 4 chunks (ASTRA-sim on the 1,024-rank ring, on a 2-core machine:
32.7 s CPU congestion-unaware, 51.7 s congestion-aware; tools/bench_vs_astra.py measures both side by side).

    python tools/bench_replay.py            # default sizes: 256 ranks, ~250k nodes; within 2 minutes
    python tools/bench_replay.py --full     # 1,024 ranks, 1M+ nodes, congestion-aware ring on 128 ranks (many minutes)
    python tools/bench_replay.py --quick    # small sizes, seconds
    python tools/bench_replay.py --full --ca-ranks 1024   # also the flow-by-flow congestion-aware ring at full size

(``python tools/bench_vs_astra.py`` runs the same kind of workloads on ASTRA-sim side by side.)

Prints a table with wall and CPU seconds (CPU time is the steadier figure on a shared machine).
Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import time

from xsim_trace.cluster import single_switch
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Trace, make_metadata, make_node
from xsim_trace.network.registry import make_backend
from xsim_trace.network.topology import build_topology
from xsim_trace.replay import Engine, ReplaySettings, compile_workload
from xsim_trace.replay.sample import tp_dp_step

BW_GBPS, LAT_NS = 400.0, 500


def ring_all_reduce(ranks: int, size: int) -> dict[int, Trace]:
    node = make_node(0, "all_reduce", NodeType.COMM_COLL, comm_type=int(CollectiveType.ALL_REDUCE), comm_size=size)
    meta = make_metadata(world_size=ranks)
    return {r: Trace(meta, (node,), rank=r) for r in range(ranks)}


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def backend(name: str, ranks: int):
    return make_backend(name, build_topology(single_switch(ranks, BW_GBPS, LAT_NS)))


def step_rows(ranks: int, layers: int, backends: tuple[str, ...]) -> list[tuple[str, str, str]]:
    rows = []
    tp = 8
    (traces, groups), w_gen, _ = timed(
        lambda: tp_dp_step(tp=tp, dp=ranks // tp, layers=layers, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20)
    )
    nodes = sum(len(t) for t in traces.values())
    w, w_comp, c_comp = timed(lambda: compile_workload(traces, groups))
    del traces
    rows.append((f"synthetic step: {ranks} ranks (TP8 x DP{ranks // tp}), {layers} layers", f"{nodes:,} nodes",
                 f"build {w_gen:.1f} s; compile {w_comp:.1f} s wall, {c_comp:.1f} s CPU ({nodes / c_comp:,.0f} nodes/s)"))
    for name in backends:
        be = backend(name, ranks)
        raw, wall, cpu = timed(lambda: Engine(w, be, ReplaySettings()).run())
        rows.append((f"  replay on {name}", f"{nodes / cpu:,.0f} nodes/s",
                     f"{wall:.2f} s wall, {cpu:.2f} s CPU ({nodes / wall:,.0f} nodes/s wall); {raw.stats.flows:,} flows, "
                     f"{raw.stats.closed_form_collectives:,}/{raw.stats.collectives:,} collectives closed-form; "
                     f"iteration {int(raw.end_ns.max()):,} ns"))
    return rows


def ring_row(ranks: int, name: str, ref: str) -> tuple[str, str, str]:
    w = compile_workload(ring_all_reduce(ranks, 64 << 20))
    be = backend(name, ranks)
    raw, wall, cpu = timed(lambda: Engine(w, be, ReplaySettings(chunks=4, in_flight=1)).run())
    flows = raw.stats.flows or 4 * 2 * (ranks - 1) * ranks
    how = f"{raw.stats.flows:,} flows ({raw.stats.flows / cpu:,.0f} flows/s CPU)" if raw.stats.flows else f"closed form ({flows:,} transfers)"
    return (f"ring all-reduce 64 MB, 4 chunks, {ranks} ranks, {name}", f"{wall:.2f} s wall",
            f"{cpu:.2f} s CPU; {how}; simulated {int(raw.end_ns.max()):,} ns; {ref}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--full", action="store_true", help="the big sizes: 1,024 ranks, 1M+ nodes (many minutes)")
    ap.add_argument("--ranks", type=int, help="ranks of the big step and the ring (default 256; 1,024 with --full)")
    ap.add_argument("--ca-ranks", type=int, help="ranks of the flow-by-flow congestion-aware ring (default 32; 128 with --full)")
    args = ap.parse_args()
    ranks = 64 if args.quick else (args.ranks or (1024 if args.full else 256))
    args.ca_ranks = args.ca_ranks or (128 if args.full else 32)
    # tp_dp_step has 9 nodes per layer per rank plus one: enough layers for 1M+ nodes (--full), 250k by default
    target = 1_000_000 if args.full else 250_000
    layers = 4 if args.quick else -(-(target // ranks) // 9)
    rows = step_rows(ranks, layers, ("analytical",))
    rows += step_rows(64, 8 if args.quick else (40 if args.full else 10), ("analytical", "analytical-ca", "flow"))
    rows.append(ring_row(ranks, "analytical", "ASTRA-sim congestion-unaware 32.7 s CPU at 1024"))
    ca = min(args.ca_ranks, ranks) if args.quick else args.ca_ranks
    rows.append(ring_row(ca, "analytical-ca", "ASTRA-sim congestion-aware 51.7 s CPU at 1024"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print("  ".join(h.ljust(widths[i]) for i, h in enumerate(("case", "figure", "notes"))))
    print("  ".join("-" * x for x in widths))
    for r in rows:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())


if __name__ == "__main__":
    main()
