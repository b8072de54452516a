"""Replay speed: nodes replayed per second on a synthetic 1,024-rank trace with 1M+ nodes, and the
wall time of a 1,024-rank ring all-reduce of 64 MB in 4 chunks (ASTRA-sim on this kind of machine:
14.7 s congestion-unaware, 23.7 s congestion-aware).

    .venv/bin/python tools/bench_replay.py            # everything (about a minute)
    .venv/bin/python tools/bench_replay.py --quick    # smaller sizes, a few seconds

Prints a table.  Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import time

from xsim_trace.cluster import single_switch
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Trace, make_metadata, make_node
from xsim_trace.network.registry import make_backend
from xsim_trace.network.topology import build_topology
from xsim_trace.replay import Engine, ReplaySettings, compile_workload
from xsim_trace.replay.sample import tp_dp_step


def ring_all_reduce(ranks: int, size: int) -> dict[int, Trace]:
    node = make_node(0, "all_reduce", NodeType.COMM_COLL, comm_type=int(CollectiveType.ALL_REDUCE), comm_size=size)
    meta = make_metadata(world_size=ranks)
    return {r: Trace(meta, (node,), rank=r) for r in range(ranks)}


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (for a smoke run)")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=None, help="layers of the synthetic step (default: 1M+ nodes)")
    args = ap.parse_args()
    ranks = 64 if args.quick else args.ranks
    tp = 8
    # nodes per rank in tp_dp_step: 4 per layer forward + 5 per layer backward + 1
    layers = args.layers or (4 if args.quick else max(1, -(-1_000_000 // ranks - 1) // 9 + 1))
    rows: list[tuple[str, str, str]] = []

    cluster = single_switch(ranks, 400.0, 500)
    topo = build_topology(cluster)

    (traces, groups), t_gen = timed(lambda: tp_dp_step(tp=tp, dp=ranks // tp, layers=layers, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20))
    nodes = sum(len(t) for t in traces.values())
    w, t_compile = timed(lambda: compile_workload(traces, groups))
    rows.append((f"synthetic step: {ranks} ranks x {layers} layers", f"{nodes:,} nodes", f"build {t_gen:.2f} s, compile {t_compile:.2f} s"))
    for backend_name in ("analytical", "analytical-ca"):
        settings = ReplaySettings(chunks=1)
        be = make_backend(backend_name, topo)
        raw, t_run = timed(lambda: Engine(w, be, settings).run())
        rows.append((f"  replay on {backend_name}", f"{nodes / t_run:,.0f} nodes/s", f"{t_run:.2f} s, {raw.stats.flows:,} flows"))
    del traces, w

    size = 64 << 20
    wl = compile_workload(ring_all_reduce(ranks, size))
    settings = ReplaySettings(chunks=4, in_flight=1)
    for backend_name, ref in (("analytical", "ASTRA-sim 14.7 s"), ("analytical-ca", "ASTRA-sim 23.7 s")):
        if backend_name == "analytical-ca" and ranks > 256 and not args.quick:
            n_ca = 128
            wl_ca = compile_workload(ring_all_reduce(n_ca, size))
            be = make_backend(backend_name, build_topology(single_switch(n_ca, 400.0, 500)))
            raw, t_run = timed(lambda: Engine(wl_ca, be, settings).run())
            rows.append(
                (f"ring all-reduce 64 MB, 4 chunks, {n_ca} ranks, {backend_name}", f"{t_run:.2f} s wall", f"{raw.stats.flows:,} flows, sim {int(raw.end_ns.max()):,} ns; {ref} at 1024")
            )
            continue
        be = make_backend(backend_name, topo)
        raw, t_run = timed(lambda: Engine(wl, be, settings).run())
        rows.append(
            (f"ring all-reduce 64 MB, 4 chunks, {ranks} ranks, {backend_name}", f"{t_run:.2f} s wall", f"{raw.stats.flows:,} flows, sim {int(raw.end_ns.max()):,} ns; {ref}")
        )
    wa = [max(len(r[i]) for r in rows) for i in range(3)]
    print("  ".join(h.ljust(wa[i]) for i, h in enumerate(("case", "figure", "notes"))))
    print("  ".join("-" * x for x in wa))
    for r in rows:
        print("  ".join(c.ljust(wa[i]) for i, c in enumerate(r)))


if __name__ == "__main__":
    main()
