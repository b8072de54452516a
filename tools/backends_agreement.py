#!/usr/bin/env python3
"""Every case of ``xsim backends compare`` on every available backend, in one table: the last
finish of each backend, its difference from ``flow`` (max-min fair sharing, the fluid reference),
and the wall-clock cost per flow.  The table in docs/network.md ("One answer on every backend")
comes from this command.

    python tools/backends_agreement.py            # star cases 4 ranks x 8 MiB; cluster cases 16 MiB on dgx-a100:2
    python tools/backends_agreement.py --markdown
    python tools/backends_agreement.py --collectives [--markdown]   # model-paced collectives in replay

``--collectives``: one collective alone, replayed under the NCCL model on each backend (``analytical``
prices it whole, the others run its model-paced flows): the end on each and its difference from
``analytical`` in ns and % of the collective's time, for the ``COLLECTIVE_CASES`` below.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xsim_trace.cluster import load_cluster  # noqa: E402
from xsim_trace.sweep.backends import available_backends  # noqa: E402
from xsim_trace.sweep.micro import CLUSTER_CASES, DEFAULT_CASE_CLUSTER, MICRO_CASES, compare_backends  # noqa: E402

MiB = 1 << 20
#: (collective, cluster, size): homogeneous all-reduce and all-to-all, heterogeneous all-to-all
COLLECTIVE_CASES = (
    ("all_reduce", "dgx-a100:2", 64 << 10), ("all_reduce", "dgx-a100:2", 1 * MiB), ("all_reduce", "dgx-a100:2", 16 * MiB),
    ("all_to_all", "dgx-a100:2", 64 << 10), ("all_to_all", "dgx-a100:2", 16 * MiB),
    ("all_to_all", "mixed-h100-a100", 64 << 10), ("all_to_all", "mixed-h100-a100", 16 * MiB),
    ("all_to_all", "aws-p3-g4dn", 64 << 10),
)
#: the compute node every rank runs before the collective (ns)
LEAD_NS = 5000


def _collective_end_ns(backend: str, cluster, comm_type: int, size: int) -> tuple[int, float]:
    """(end of the collective alone on ``backend``, wall seconds)."""
    import time  # noqa: PLC0415

    from xsim_trace.graph import NodeType, Trace, make_metadata, make_node  # noqa: PLC0415
    from xsim_trace.network import build_topology, make_backend  # noqa: PLC0415
    from xsim_trace.network.protocol import close_backend  # noqa: PLC0415
    from xsim_trace.replay.api import replay  # noqa: PLC0415

    n = cluster.num_ranks
    traces = {r: Trace(make_metadata(world_size=n), (
        make_node(1, "c", NodeType.COMP, duration_micros=LEAD_NS // 1000),
        make_node(2, "coll", NodeType.COMM_COLL, data_deps=(1,), comm_type=int(comm_type), comm_size=size)), rank=r)
        for r in range(n)}
    t0 = time.perf_counter()
    be = make_backend(backend, build_topology(cluster))
    try:
        res = replay(traces, be, None, cluster=cluster)
    finally:
        close_backend(be)
    return int(max(res.times.end_ns)), time.perf_counter() - t0


def collectives_table(names: list[str], markdown: bool) -> float:
    """Print the model-paced collective table; the worst |difference| from analytical in %."""
    from xsim_trace.graph.kinds import CollectiveType  # noqa: PLC0415

    head = ("collective", "cluster", "size", *names)
    rows, worst = [], 0.0
    for coll, spec, size in COLLECTIVE_CASES:
        cluster = load_cluster(spec)
        ends = {}
        for name in names:
            ends[name] = _collective_end_ns(name, cluster, CollectiveType[coll.upper()], size)
        ref = ends.get("analytical", ends[names[0]])[0]
        cells = []
        for name in names:
            end, wall = ends[name]
            rel = (end - ref) / max(ref - LEAD_NS, 1) * 100
            worst = max(worst, abs(rel))
            cells.append(f"{(end - LEAD_NS) / 1e3:,.3f} us ({end - ref:+d} ns, {rel:+.2f}%, {wall:.1f} s)")
        size_text = f"{size // MiB} MiB" if size >= MiB else f"{size >> 10} KiB"
        rows.append((coll, spec, size_text, *cells))
    _print(head, rows, markdown)
    print(f"\nworst difference from analytical: {worst:.2f}%")
    return worst


def _print(head: tuple, rows: list, markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(str(x[i])) for x in (head, *rows)) for i in range(len(head))]
        for row in (head, *rows):
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default=",".join(available_backends()))
    ap.add_argument("--cluster", default=DEFAULT_CASE_CLUSTER)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--collectives", action="store_true", help="model-paced collectives in replay instead")
    args = ap.parse_args(argv)
    names = [b for b in args.backends.split(",") if b]
    if args.collectives:
        collectives_table(names, args.markdown)
        return 0
    cluster = load_cluster(args.cluster)
    rows = []
    worst = 0.0
    for case in MICRO_CASES:
        size = 16 * MiB if case in CLUSTER_CASES else 8 * MiB
        cmp = compare_backends(names, case, 4, size, 12.5, 1000, cluster=cluster)
        runs = {r.backend: r for r in cmp.runs}
        ref = runs.get("flow") or cmp.reference()
        cells = []
        for name in names:
            r = runs[name]
            if r.error:
                cells.append(f"error: {r.error[:40]}")
                continue
            rel = (r.makespan_ns - ref.makespan_ns) / ref.makespan_ns * 100
            worst = max(worst, abs(rel))
            cells.append(f"{r.makespan_ns / 1e6:.3f} ms ({rel:+.2f}%, {r.wall_per_flow_s * 1e6:,.0f} us/flow)")
        where = f"{args.cluster}, {size // MiB} MiB" if case in CLUSTER_CASES else f"4-rank switch, {size // MiB} MiB/flow"
        rows.append((case, where, str(len(cmp.runs[0].finish_ns) or cmp.runs[0].flows), *cells))
    _print(("case", "on", "flows", *names), rows, args.markdown)
    print(f"\nworst difference from flow: {worst:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
