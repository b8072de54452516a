#!/usr/bin/env python3
"""Wall-clock cost per simulated flow of every network backend, as a table.

Workload: ``--flows`` flows of ``--size`` bytes between random distinct rank pairs of a
``--ranks``-rank single-switch cluster (seeded), arriving every ``--gap-ns``, so flows overlap and
share links.  Each backend runs the same flows through the protocol (start_flow / next_completion
/ advance).  NS-3's cost grows with bytes (packets), not flows, so it runs ``--ns3-flows`` of them
and the table also shows the cost per simulated MB.  ``setup s`` is building the backend (for
ns3: starting the worker process and importing NS-3 the first time, then a fork per session).

    python tools/bench_flow_cost.py                  # all available backends
    python tools/bench_flow_cost.py --backend flow --flows 20000
    python tools/bench_flow_cost.py --engine-ca         # analytical-ca through the replay engine

``--engine-ca``: ring all-reduces replayed by the engine over ``analytical-ca`` (chunks 4, one in flight,
10 ns endpoint delay), by the Python loop and by the compiled loop (:mod:`xsim_trace.replay.compiled_ca`),
which give the same times (checked here); CPU seconds of the replay alone (the kernel loaded and warmed
first), flow events per second (the backend's hop events, arrivals and releases, plus the flows'
completions) and flows per second.  ``--engine-ranks`` sets the ring sizes; the Python loop runs only
where it takes under a minute or so (``--python-max-flows``).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xsim_trace.network.protocol import Flow  # noqa: E402
from xsim_trace.sweep.backends import available_backends, close_backend, make_named_backend, star_topology  # noqa: E402
from xsim_trace.sweep.micro import TimedFlow, run_flows  # noqa: E402


def workload(n_flows: int, ranks: int, size: int, gap_ns: int, seed: int) -> list[TimedFlow]:
    rng = random.Random(seed)
    out = []
    for i in range(n_flows):
        s = rng.randrange(ranks)
        d = rng.randrange(ranks - 1)
        d += d >= s
        out.append(TimedFlow(i * gap_ns, Flow(i, s, d, size)))
    return out


def bench(name: str, flows: list[TimedFlow], ranks: int, bw: float, lat: int) -> dict:
    topo = star_topology(ranks, bw, lat)
    t0 = time.perf_counter()
    backend = make_named_backend(name, topo)
    t1 = time.perf_counter()
    try:
        finish = run_flows(backend, flows)
    finally:
        close_backend(backend)
    t2 = time.perf_counter()
    ops = getattr(backend, "op_stats", None)
    if ops:
        print("    " + name + " worker time by request: " + ", ".join(
            f"{op} {n} x {tot / n * 1e3:.1f} ms" for op, (n, tot) in sorted(ops.items())), file=sys.stderr)
    total_mb = sum(f.flow.size_bytes for f in flows) / 1e6
    return {"backend": name, "flows": len(flows), "makespan_ns": max(finish.values()), "setup_s": t1 - t0,
            "run_s": t2 - t1, "us_per_flow": (t2 - t1) / len(flows) * 1e6, "ms_per_MB": (t2 - t1) / total_mb * 1e3}


def engine_ca(ranks_list: list[int], python_max_flows: int) -> None:
    """The replay engine over analytical-ca, Python loop vs compiled loop, on ring all-reduces."""
    import numpy as np

    from xsim_trace.cluster import single_switch
    from xsim_trace.graph.kinds import CollectiveType, NodeType
    from xsim_trace.graph.model import Trace, make_metadata, make_node
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology
    from xsim_trace.replay import Engine, ReplaySettings, compile_workload

    settings = ReplaySettings(chunks=4, in_flight=1, endpoint_delay_ns=10)
    print("analytical-ca through the replay engine: iterations x [100 us compute -> 1 MiB ring all-reduce] "
          "(64 MiB alone at 1,024 ranks), 50 GB/s and 500 ns per link, chunks 4, 1 in flight")
    print(f"{'ranks':>6} {'loop':<9} {'flows':>10} {'flow events':>12} {'CPU s':>8} {'flow events/s':>14} "
          f"{'flows/s':>10} {'sim ns':>12}")
    warm = compile_workload(_ring_traces(16, 1, 1 << 20, make_node, make_metadata, Trace, NodeType, CollectiveType))
    Engine(warm, make_backend("analytical-ca", build_topology(single_switch(16, 50.0, 500))), settings,
           compiled=True).run()
    for ranks in ranks_list:
        iters, size = (1, 64 << 20) if ranks >= 1024 else (4, 1 << 20)
        w = compile_workload(_ring_traces(ranks, iters, size, make_node, make_metadata, Trace, NodeType, CollectiveType))
        topo = build_topology(single_switch(ranks, 50.0, 500))
        ends = {}
        for compiled in (False, True):
            flows_est = iters * 4 * 2 * ranks * (ranks - 1)
            if not compiled and flows_est > python_max_flows:
                continue
            be = make_backend("analytical-ca", topo)
            t0 = time.process_time()
            raw = Engine(w, be, settings, compiled=compiled).run()
            cpu = time.process_time() - t0
            ends[compiled] = raw.end_ns
            events = be.events + raw.stats.flows
            print(f"{ranks:>6} {'compiled' if compiled else 'python':<9} {raw.stats.flows:>10,} {events:>12,} "
                  f"{cpu:>8.2f} {events / cpu:>14,.0f} {raw.stats.flows / cpu:>10,.0f} {int(raw.end_ns.max()):>12,}")
        if len(ends) == 2:
            assert np.array_equal(ends[False], ends[True]), "the compiled loop disagrees with the Python loop"


def _ring_traces(ranks, iters, size, make_node, make_metadata, Trace, NodeType, CollectiveType):
    nodes, last = [], ()
    for k in range(iters):
        nodes.append(make_node(2 * k, f"compute{k}", NodeType.COMP, data_deps=last, duration_ns=100_000, is_cpu_op=False))
        nodes.append(make_node(2 * k + 1, f"all_reduce{k}", NodeType.COMM_COLL, data_deps=(2 * k,),
                               comm_type=int(CollectiveType.ALL_REDUCE), comm_size=size))
        last = (2 * k + 1,)
    return {r: Trace(make_metadata(world_size=ranks), tuple(nodes), rank=r) for r in range(ranks)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", action="append", help="backend (repeatable; default: all available)")
    ap.add_argument("--flows", type=int, default=2000, help="flows for the fluid backends (2000)")
    ap.add_argument("--ns3-flows", type=int, default=100, help="flows for ns3 (100)")
    ap.add_argument("--size", type=int, default=1 << 20, help="bytes per flow (1 MiB)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--gap-ns", type=int, default=20_000, help="time between flow arrivals (20 us)")
    ap.add_argument("--bw-GBps", dest="bw", type=float, default=12.5)
    ap.add_argument("--latency-ns", dest="lat", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="runs per backend; the table keeps the fastest")
    ap.add_argument("--engine-ca", action="store_true", help="analytical-ca through the replay engine: Python vs compiled loop")
    ap.add_argument("--engine-ranks", type=int, nargs="+", default=[64, 256, 1024], help="ring sizes for --engine-ca")
    ap.add_argument("--python-max-flows", type=int, default=600_000, help="--engine-ca: skip the Python loop beyond this")
    args = ap.parse_args(argv)
    if args.engine_ca:
        engine_ca(args.engine_ranks, args.python_max_flows)
        return 0
    names = args.backend or available_backends()
    print(f"{args.ranks} ranks on one switch, {args.bw:g} GB/s, {args.lat} ns per link; {args.size} B flows every "
          f"{args.gap_ns} ns between random pairs (seed {args.seed})")
    print(f"{'backend':<14} {'flows':>6} {'sim makespan ns':>16} {'setup s':>8} {'run s':>9} {'us/flow':>10} "
          f"{'ms/MB':>8}")
    for name in names:
        n = args.ns3_flows if name == "ns3" else args.flows
        flows = workload(n, args.ranks, args.size, args.gap_ns, args.seed)
        best = None
        for _ in range(max(1, args.repeat)):
            r = bench(name, flows, args.ranks, args.bw, args.lat)
            best = r if best is None or r["run_s"] < best["run_s"] else best
        print(f"{best['backend']:<14} {best['flows']:>6} {best['makespan_ns']:>16} {best['setup_s']:>8.3f} "
              f"{best['run_s']:>9.3f} {best['us_per_flow']:>10.1f} {best['ms_per_MB']:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
