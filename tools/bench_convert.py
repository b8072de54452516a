"""Conversion throughput and memory: Kineto JSON -> Chakra rank set.

Usage::

    python tools/bench_convert.py                 # the largest shared Kineto trace
    python tools/bench_convert.py PATH [--step all]
    python tools/bench_convert.py --synthetic 2000000   # a generated trace of N events

Prints, per phase (streaming read, graph build + write), events per second and the peak Python
heap (tracemalloc) next to the size of the JSON text, plus the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from converters.kineto import convert_kineto, read_ranks  # noqa: E402
from xsim_trace.io.sources import resolve_inputs  # noqa: E402
from xsim_trace.io import write_rank_set  # noqa: E402

SHARED = REPO.parent / "shared" / "traces" / "kineto"


def largest_shared() -> Path:
    files = sorted(SHARED.rglob("*.json*"), key=lambda p: p.stat().st_size) if SHARED.exists() else []
    files = [p for p in files if "_et" not in p.name]
    if not files:
        raise SystemExit(f"no Kineto traces under {SHARED}; give a PATH")
    return files[-1]


def text_bytes(path: Path) -> int:
    total = 0
    for src in resolve_inputs(path):
        with src.open() as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total


def synthetic(n_events: int, out: Path) -> Path:
    """A plausible single-rank trace: a CPU op + launch + kernel triple per step of 3 events."""
    with open(out, "w") as f:
        f.write('{"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [\n')
        f.write(json.dumps({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
                            "ts": 0, "dur": n_events * 10 + 100}))
        t = 1
        for i in range(n_events // 3):
            f.write(",\n" + json.dumps({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}", "pid": 1, "tid": 1,
                                        "ts": t, "dur": 8, "args": {"External id": i}}))
            f.write(",\n" + json.dumps({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                                        "tid": 1, "ts": t + 2, "dur": 4, "args": {"correlation": i + 1}}))
            f.write(",\n" + json.dumps({"ph": "X", "cat": "kernel", "name": f"kernel_{i % 20}", "pid": 0, "tid": 7,
                                        "ts": t + 9, "dur": 7, "args": {"correlation": i + 1, "stream": 7}}))
            t += 10
        f.write("\n]}\n")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", help="Kineto file / folder / glob / .tar.gz (default: largest shared)")
    ap.add_argument("--step", default="all", help="ProfilerStep number or 'all' (default: all, the whole capture)")
    ap.add_argument("--synthetic", type=int, default=None, help="generate a trace with this many events instead")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_convert_"))
    path = synthetic(args.synthetic, tmp / "synthetic.json") if args.synthetic else Path(args.path or largest_shared())
    step = args.step if args.step == "all" else int(args.step)
    size = text_bytes(path)

    # timing run (no tracing), then a memory run under tracemalloc (which slows Python down)
    t0 = time.perf_counter()
    kts = read_ranks(resolve_inputs(path))
    t1 = time.perf_counter()
    conv = convert_kineto(kts, step=step)
    paths = write_rank_set(tmp / "out", conv.traces, conv.comm_groups)
    t2 = time.perf_counter()
    del conv, kts
    tracemalloc.start()
    kts = read_ranks(resolve_inputs(path))
    _, peak_read = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    conv = convert_kineto(kts, step=step, consume=True)
    write_rank_set(tmp / "out", conv.traces, conv.comm_groups)
    _, peak_build = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    events = sum(k.total_events for k in kts)
    nodes = sum(len(t.nodes) for t in conv.traces.values())
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out_bytes = sum(os.path.getsize(p) for p in paths)
    print(f"input      {path}")
    print(f"           {len(kts)} file(s), {events:,} events, {size / 2**20:.1f} MiB of JSON text")
    print(f"{'phase':<12}{'seconds':>9}{'events/s':>12}{'peak heap MiB':>15}{'heap / JSON':>13}")
    print(f"{'read':<12}{t1 - t0:>9.2f}{events / (t1 - t0):>12,.0f}{peak_read / 2**20:>15.1f}{peak_read / size:>13.2f}")
    print(f"{'build+write':<12}{t2 - t1:>9.2f}{events / (t2 - t1):>12,.0f}{peak_build / 2**20:>15.1f}{peak_build / size:>13.2f}")
    print(f"{'total':<12}{t2 - t0:>9.2f}{events / (t2 - t0):>12,.0f}")
    print(f"output     {nodes:,} nodes in {len(paths)} files, {out_bytes / 2**20:.2f} MiB; peak RSS {rss_mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
