#!/usr/bin/env python3
"""CPU cost of pricing one collective with the NCCL model (xsim_trace.network.nccl.price_collective).

Measures, side by side in one run: a memoised call (the analytical path prices the same (group, kind, size)
again and again: every layer, every step), a first-time call (all algorithm/protocol candidates evaluated),
and building the group shape from a cluster (once per communicator, cached).

usage: python tools/bench_nccl_price.py [--calls N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xsim_trace.cluster import load_cluster  # noqa: E402
from xsim_trace.network.nccl import CollKind, group_shape, price_collective  # noqa: E402
from xsim_trace.network.nccl.model import _price  # noqa: E402


def _per_call_us(fn, n: int) -> float:
    t0 = time.process_time()
    fn(n)
    return (time.process_time() - t0) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200_000)
    args = ap.parse_args(argv)
    cluster = load_cluster("dgx-h100:16")
    shape = group_shape(cluster)
    sizes = [(1 << 20) * (1 + i % 64) for i in range(64)]

    def memoised(n: int) -> None:
        for i in range(n):
            price_collective(shape, "all_reduce", sizes[i & 63])

    def cold(n: int) -> None:
        for i in range(n):
            _price.__wrapped__(shape, CollKind.ALL_REDUCE, sizes[i & 63], None, None)

    def shapes(n: int) -> None:
        for i in range(n):
            group_shape(cluster, range(8 * (i % 16), 8 * (i % 16) + 8))

    memoised(64)
    rows = [
        ("price_collective, memoised (same group/kind/size)", _per_call_us(memoised, args.calls)),
        ("price_collective, first call (all candidates)", _per_call_us(cold, max(1, args.calls // 20))),
        ("group_shape(cluster, 8 ranks), cached", _per_call_us(shapes, max(1, args.calls // 20))),
    ]
    print(f"{'operation':<52} {'CPU us/call':>12}")
    for name, us in rows:
        print(f"{name:<52} {us:>12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
