#!/usr/bin/env python3
"""Wall-clock cost per simulated flow of each network backend.

Workloads (on a preset cluster, default dgx-h100:128 = 1,024 ranks on a leaf/spine fabric):
  ring      ring all-reduce steps: rank r sends S/N-sized chunks to r+1; its step k+1 starts when it
            received step k from r-1 (as a ring all-reduce pipeline does), --steps steps
  perm      --rounds rounds of a random permutation (every rank sends to one random rank), a round
            starts when the previous one has finished
  incast    --incast senders to rank 0 at once

  step      --step-ranks ranks of a TP8 x DP training step (replay/sample.py tp_dp_step: TP all-reduces
            per layer, a DP gradient all-reduce) replayed on each backend on dgx-h100 with the NCCL
            collective model: the iteration time, its difference from analytical, and CPU seconds
            (the measured fidelity and speed behind the default backend, docs/network.md)

Usage: python tools/bench_backends.py [--cluster dgx-h100:128] [--backends analytical,flow]
       [--step-ranks 64] [--skip-flows]
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xsim_trace.cluster import load_cluster  # noqa: E402
from xsim_trace.network import available_backends, build_topology, make_backend  # noqa: E402
from xsim_trace.network.protocol import Flow, capabilities_of  # noqa: E402


def run_dag(backend, initial, on_done):
    """initial: [(t, Flow)]; on_done(flow_id, t) -> [(t, Flow)] follow-ups.  Returns (flows, end_ns).
    A backend declaring ``horizon_hint`` is told the next start, as the replay engine does."""
    pending = list(initial)
    heapq.heapify(pending)
    n = 0
    end = 0
    hint = capabilities_of(backend).horizon_hint
    while True:
        if hint:
            nxt = backend.next_completion_ns(horizon_ns=pending[0][0] if pending else 1 << 62)
        else:
            nxt = backend.next_completion_ns()
        if pending and (nxt is None or pending[0][0] <= nxt):
            now = pending[0][0]
        elif nxt is not None:
            now = nxt
        else:
            break
        for fid in backend.advance(now):
            end = now
            for item in on_done(fid, now):
                heapq.heappush(pending, item)
        while pending and pending[0][0] == now:
            _, _, f = heapq.heappop(pending)
            backend.start_flow(f, now)
            n += 1
    return n, end


def ring(n_ranks, steps, chunk):
    def fid(step, r):
        return step * n_ranks + r

    initial = [(0, fid(0, r), Flow(fid(0, r), r, (r + 1) % n_ranks, chunk)) for r in range(n_ranks)]

    def on_done(flow_id, t):
        step, r = divmod(flow_id, n_ranks)
        if step + 1 >= steps:
            return []
        nxt = (r + 1) % n_ranks  # the receiver forwards in the next step
        f = fid(step + 1, nxt)
        return [(t, f, Flow(f, nxt, (nxt + 1) % n_ranks, chunk))]

    return initial, on_done


def perm(n_ranks, rounds, size, seed=1):
    rng = random.Random(seed)
    perms = []
    for _ in range(rounds):
        p = list(range(n_ranks))
        rng.shuffle(p)
        perms.append(p)
    left = {0: n_ranks}

    def round_flows(k, t):
        return [(t, k * n_ranks + r, Flow(k * n_ranks + r, r, perms[k][r], size)) for r in range(n_ranks)]

    def on_done(flow_id, t):
        k = flow_id // n_ranks
        left[k] -= 1
        if left[k] == 0 and k + 1 < rounds:
            left[k + 1] = n_ranks
            return round_flows(k + 1, t)
        return []

    return round_flows(0, 0), on_done


def incast(n_senders, size):
    return [(0, i, Flow(i, i + 1, 0, size)) for i in range(n_senders)], lambda fid, t: []


def replay_step(names: list[str], ranks: int) -> None:
    """One TP8 x DP step on dgx-h100 (8 GPUs a node) on each backend, NCCL model on every one."""
    from xsim_trace.network.protocol import close_backend  # noqa: PLC0415
    from xsim_trace.replay.api import replay  # noqa: PLC0415
    from xsim_trace.replay.sample import tp_dp_step  # noqa: PLC0415

    cluster = load_cluster(f"dgx-h100:{max(1, ranks // 8)}")
    traces, groups = tp_dp_step(tp=8, dp=max(1, ranks // 8), layers=16)
    topo = build_topology(cluster)
    print(f"\nstep: TP8 x DP{max(1, ranks // 8)} on {cluster.name}, {sum(len(t.nodes) for t in traces.values())} nodes")
    print(f"{'backend':<14} {'model':<9} {'iteration (ms)':>15} {'vs first':>14} {'CPU (s)':>8} {'nodes/s CPU':>12}")
    ref = None
    for b in names:
        if b not in available_backends():
            print(f"{b:<14} (not available)")
            continue
        backend = make_backend(b, topo)
        c0 = time.process_time()
        res = replay(traces, backend, comm_groups=groups, cluster=cluster)
        cpu = time.process_time() - c0
        close_backend(backend)
        end = int(res.times.end_ns.max())
        ref = end if ref is None else ref
        nodes = int(res.times.end_ns.shape[0])
        print(f"{b:<14} {res.settings.collective_model:<9} {end / 1e6:>15.3f} {(end - ref) / ref * 100:>+13.2f}% "
              f"{cpu:>8.3f} {nodes / max(cpu, 1e-9):>12,.0f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="dgx-h100:128")
    ap.add_argument("--backends", default="analytical,analytical-ca,flow")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--incast", type=int, default=255)
    ap.add_argument("--bytes", type=int, default=64 << 20, help="all-reduce size (ring chunk = bytes / ranks)")
    ap.add_argument("--step-ranks", type=int, default=64, help="ranks of the replayed training step (0: skip it)")
    ap.add_argument("--skip-flows", action="store_true", help="only the replayed step")
    args = ap.parse_args(argv)
    names = [b for b in args.backends.split(",") if b]
    if args.skip_flows:
        replay_step(names, args.step_ranks)
        return 0
    t0 = time.perf_counter()
    topo = build_topology(load_cluster(args.cluster))
    build_s = time.perf_counter() - t0
    n = topo.num_ranks
    print(f"{topo}  (built in {build_s * 1e3:.1f} ms)")
    work = {
        f"ring {n}x{args.steps} steps": lambda: ring(n, args.steps, max(1, args.bytes // n)),
        f"perm {n}x{args.rounds} rounds": lambda: perm(n, args.rounds, max(1, args.bytes // n)),
        f"incast {min(args.incast, n - 1)}->1": lambda: incast(min(args.incast, n - 1), max(1, args.bytes // n)),
    }
    print(f"{'workload':<24} {'backend':<14} {'flows':>7} {'sim end (us)':>13} {'wall (s)':>9} {'us/flow':>9}")
    for wname, make in work.items():
        for b in names:
            if b not in available_backends():
                print(f"{wname:<24} {b:<14} (not available)")
                continue
            backend = make_backend(b, topo)
            initial, on_done = make()
            t0 = time.perf_counter()
            flows, end = run_dag(backend, initial, on_done)
            wall = time.perf_counter() - t0
            backend.close()
            print(f"{wname:<24} {b:<14} {flows:>7} {end / 1e3:>13.1f} {wall:>9.3f} {wall / max(flows, 1) * 1e6:>9.1f}")
    if args.step_ranks:
        replay_step(names, args.step_ranks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
