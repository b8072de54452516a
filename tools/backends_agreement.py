#!/usr/bin/env python3
"""Every case of ``xsim backends compare`` on every available backend, in one table: the last
finish of each backend, its difference from ``flow`` (max-min fair sharing, the fluid reference),
and the wall-clock cost per flow.  The table in docs/network.md ("One answer on every backend")
comes from this command.

    python tools/backends_agreement.py            # star cases 4 ranks x 8 MiB; cluster cases 16 MiB on dgx-a100:2
    python tools/backends_agreement.py --markdown
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default=",".join(available_backends()))
    ap.add_argument("--cluster", default=DEFAULT_CASE_CLUSTER)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    names = [b for b in args.backends.split(",") if b]
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
    head = ("case", "on", "flows", *names)
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(str(x[i])) for x in (head, *rows)) for i in range(len(head))]
        for row in (head, *rows):
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    print(f"\nworst difference from flow: {worst:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
