#!/usr/bin/env python3
"""Reading / writing speed of Chakra .et files, against the protobuf runtime's bare parse loop.

Builds a synthetic file of N nodes (default 200,000; ``--full`` 1,000,000) shaped like converted traces (COMP nodes
with 2 attributes and 1-2 deps, some collectives), then times, side by side in one run:
  bare parse   : framing + pb.Node.ParseFromString per record (the floor for any Python reader)
  xsim raw     : xsim_trace.io.iter_messages (framing + parse + error handling)
  xsim read    : xsim_trace.io.iter_nodes (+ conversion to the typed model)
  xsim write   : xsim_trace.io.write_et from typed nodes
Usage: python tools/bench_io.py [--full] [--nodes N] [--repeat R]   (the default finishes within 2 minutes)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from google.protobuf.internal.decoder import _DecodeVarint32  # the runtime's own helper, for the floor

from xsim_trace.graph import NodeType, make_metadata, make_node
from xsim_trace.io import iter_messages, iter_nodes, write_et
from xsim_trace.schema import pb


def synth_nodes(n: int):
    for i in range(n):
        if i % 50 == 49:
            yield make_node(i, "nccl:all_reduce", NodeType.COMM_COLL, data_deps=[i - 1], comm_type=0,
                            comm_size=1 << 20, pg_name="0")
        else:
            deps = [i - 1, i - 2] if i >= 2 else ([0] if i == 1 else [])
            yield make_node(i, "aten::mm", NodeType.COMP, data_deps=deps, duration_micros=12,
                            is_cpu_op=False, duration_ns=12_345)


def bare_parse(path: str) -> int:
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    end = len(data)
    n = -1
    msg_type = pb.Node
    meta = pb.GlobalMetadata
    first = True
    while pos < end:
        length, pos = _DecodeVarint32(data, pos)
        m = (meta if first else msg_type)()
        m.ParseFromString(data[pos:pos + length])
        first = False
        pos += length
        n += 1
    return n


def best_of(repeat: int, fn) -> tuple[float, int]:
    best = float("inf")
    result = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="1,000,000 nodes, best of 2 (several minutes)")
    ap.add_argument("--nodes", type=int, help="nodes in the file (default 200,000; 1,000,000 with --full)")
    ap.add_argument("--repeat", type=int, help="best of this many reads (default 1; 2 with --full)")
    args = ap.parse_args()
    args.nodes = args.nodes or (1_000_000 if args.full else 200_000)
    args.repeat = args.repeat or (2 if args.full else 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.0.et")
        nodes = list(synth_nodes(args.nodes))
        t_write, _ = best_of(1, lambda: write_et(path, make_metadata(rank=0), nodes))
        size_mb = os.path.getsize(path) / 1e6
        t_bare, n_bare = best_of(args.repeat, lambda: bare_parse(path))
        t_raw, n_raw = best_of(args.repeat, lambda: sum(1 for _ in iter_messages(path)) - 1)
        t_read, n_read = best_of(args.repeat, lambda: sum(1 for _ in iter_nodes(path)))
        assert n_bare == n_raw == n_read == args.nodes
    rows = [
        ("bare parse loop (floor)", t_bare),
        ("xsim iter_messages (raw pb)", t_raw),
        ("xsim iter_nodes (typed)", t_read),
        ("xsim write_et (typed)", t_write),
    ]
    print(f"{args.nodes:,} nodes, {size_mb:.1f} MB file, best of {args.repeat}")
    print(f"{'path':32s} {'seconds':>8s} {'nodes/s':>12s} {'x floor':>8s}")
    for label, t in rows:
        print(f"{label:32s} {t:8.2f} {args.nodes / t:12,.0f} {t / t_bare:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
