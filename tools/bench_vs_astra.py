#!/usr/bin/env python3
"""xsim and ASTRA-sim side by side: the same Chakra .et rank sets on both engines, in one run.

    python tools/bench_vs_astra.py            # the full set (ASTRA-sim alone needs ~5 minutes of CPU)
    python tools/bench_vs_astra.py --quick    # the small cases and scaled-down big ones (a minute or two)
    python tools/bench_vs_astra.py --only ring --timeout 120 --keep /tmp/sets

ASTRA-sim 2.x comes prebuilt from ``../shared/peers/astra-sim`` (``--astra DIR``; its README says how to
rebuild it): ``AstraSim_Analytical_Congestion_Unaware`` against xsim's ``analytical`` backend,
``AstraSim_Analytical_Congestion_Aware`` against ``analytical-ca``.  Each engine runs as its own process
(xsim through its command line, ``xsim replay ... --no-plot --no-timeline``), so the CPU seconds
(user + sys, from the child's rusage) and the peak RSS include start-up, reading the files and writing
the results, for both.

The settings are made to agree: one ``Switch`` dimension of B GB/s (ASTRA-sim's GB is 2^30 bytes) and
L ns per link <-> a single-switch cluster of ``astra_GBps(B)`` and L ns; ring collectives in 4 chunks with
1 (2 for the HGX cases) in flight per rank and a 10 ns endpoint delay on both; ``analytical-ca`` sends
each message whole (``--chunk-bytes 0``), as ASTRA-sim's congestion-aware network does (xsim's default
128 KiB chunk pipeline sends a message crossing the switch up to ~2x faster); where a set has a single
collective size, xsim's ``--reduction-delay-ns`` is ASTRA-sim's cost of reducing one received message
(three passes of its bytes at ``local-mem-bw``), else 0 on both (ASTRA-sim's ``local-mem-bw`` 1e12 GB/s:
xsim has no per-byte reduction cost).  ASTRA-sim reads an all-gather's ``comm_size`` as each rank's shard,
xsim as the gathered buffer (NCCL's convention): ASTRA-sim gets a copy of a set with all-gathers whose
sizes are divided by their group's ranks (``astra_copy``; every other node as it is).  Compute nodes carry
``duration_micros`` (what ASTRA-sim runs) and the same time in ``duration_ns`` (what xsim runs); for the
generated steps xsim's ``duration_ns`` keeps the sub-microsecond part ASTRA-sim truncates, which is one
source of the simulated-time difference there.

Simulated time: ASTRA-sim's largest "sys[i] finished, T cycles" (1 cycle = 1 ns), with a count of the
ranks that finished; xsim's ``iteration_ns`` of summary.json.  A run past ``--timeout`` is killed with its
process group and shown as such (with the CPU it used).  Before measuring, an untimed run compiles xsim's
numba kernels into their cache (``--cold`` skips it: then the first xsim run that loads numba pays the
compilation); small sets never load numba (the numpy decoder and the Python loop are cheaper there).  The xsim children keep their Python bytecode in ``<work folder>/pycache`` as an
installed package keeps its .pyc files, also where the environment sets PYTHONDONTWRITEBYTECODE.  Not a
test: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xsim_trace.cluster import astra_GBps  # noqa: E402
from xsim_trace.graph.kinds import CollectiveType, NodeType  # noqa: E402
from xsim_trace.graph.model import Trace, make_metadata, make_node  # noqa: E402
from xsim_trace.io import read_rank_set, write_rank_set  # noqa: E402

DEFAULT_ASTRA = ROOT.parent / "shared" / "peers" / "astra-sim"
BINARIES = {"analytical": "AstraSim_Analytical_Congestion_Unaware", "analytical-ca": "AstraSim_Analytical_Congestion_Aware"}
_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")
MiB = 1 << 20
#: ASTRA-sim's local-mem-bw (GB/s) that makes its reduction cost 0 (see Net.coll_bytes)
NO_REDUCTION_GBPS = 1e12


# -- the network both engines see ------------------------------------------------------------------
@dataclass(frozen=True)
class Net:
    """One switch: ``bw_astra_gbps`` in ASTRA-sim's GB/s (2^30 B/s), ``latency_ns`` per link; ring
    collectives in ``chunks`` chunks, ``in_flight`` of them at once per rank."""

    ranks: int
    bw_astra_gbps: float = 50.0
    latency_ns: float = 500.0
    chunks: int = 4
    in_flight: int = 1
    endpoint_delay_ns: int = 10
    local_mem_gbps: float = 1600.0
    #: the one collective size of the set, when it has one: xsim's --reduction-delay-ns then equals
    #: ASTRA-sim's cost of reducing a received message (3 passes of its bytes over local-mem-bw);
    #: without one (collectives of many sizes) both engines reduce for free: xsim's delay is 0 and
    #: ASTRA-sim's local-mem-bw NO_REDUCTION_GBPS (its cost int(bytes / bw) is 0 below 1 TB)
    coll_bytes: int | None = None

    def reduction_delay_ns(self) -> int:
        if self.coll_bytes is None:
            return 0
        message = self.coll_bytes / self.chunks / self.ranks
        return 3 * int(message / self.local_mem_gbps)

    def write_astra(self, folder: Path) -> tuple[Path, Path]:
        net = folder / f"net_sw{self.ranks}.yml"
        net.write_text(f"topology: [ Switch ]\nnpus_count: [ {self.ranks} ]\nbandwidth: [ {self.bw_astra_gbps} ]\n"
                       f"latency: [ {self.latency_ns} ]\n")
        sys_cfg = folder / f"sys_ring{self.chunks}x{self.in_flight}{'' if self.coll_bytes is not None else '_noreduce'}.json"
        coll = ["ring"]
        sys_cfg.write_text(json.dumps({
            "scheduling-policy": "LIFO", "endpoint-delay": self.endpoint_delay_ns,
            "active-chunks-per-dimension": self.in_flight, "preferred-dataset-splits": self.chunks,
            "all-reduce-implementation": coll, "all-gather-implementation": coll,
            "reduce-scatter-implementation": coll, "all-to-all-implementation": coll,
            "collective-optimization": "localBWAware", "boost-mode": 0,
            "local-mem-bw": self.local_mem_gbps if self.coll_bytes is not None else NO_REDUCTION_GBPS,
        }, indent=1))
        return net, sys_cfg

    def write_xsim(self, folder: Path) -> Path:
        path = folder / f"cluster_sw{self.ranks}.json"
        path.write_text(json.dumps({
            "name": f"astra-switch-{self.ranks}",
            "groups": [{"name": "g0", "gpu": "generic", "count": self.ranks, "devices_per_node": self.ranks,
                        "intra_node": {"kind": "nvswitch", "bw_GBps": astra_GBps(self.bw_astra_gbps),
                                       "latency_ns": self.latency_ns}}],
        }))
        return path

    def xsim_flags(self, backend: str = "analytical") -> list[str]:
        """The replay options that make xsim's ``backend`` ASTRA-sim's: the same collective schedule, and
        on ``analytical-ca`` each message sent whole (``--chunk-bytes 0``: ASTRA-sim's congestion-aware
        network stores and forwards a message per link; xsim's default pipelines it in 128 KiB chunks)."""
        flags = ["--algorithm", "ring", "--chunks", str(self.chunks), "--in-flight", str(self.in_flight),
                 "--endpoint-delay-ns", str(self.endpoint_delay_ns), "--reduction-delay-ns", str(self.reduction_delay_ns())]
        return [*flags, "--chunk-bytes", "0"] if backend == "analytical-ca" else flags


HGX = dict(bw_astra_gbps=400.0, latency_ns=936.25, in_flight=2, local_mem_gbps=3350.0)  # ASTRA-sim's HGX-H100 switch


# -- the rank sets ---------------------------------------------------------------------------------
def _comp(i: int, us: int, deps) -> object:
    return make_node(i, f"compute{i}", NodeType.COMP, data_deps=deps, duration_micros=us, duration_ns=us * 1000,
                     is_cpu_op=False)


def _all_reduce(i: int, size: int, deps) -> object:
    return make_node(i, f"all_reduce{i}", NodeType.COMM_COLL, data_deps=deps, comm_type=int(CollectiveType.ALL_REDUCE),
                     comm_size=size, is_cpu_op=False)


def chain_set(prefix: Path, ranks: int, iterations: int, size: int, compute_us: int) -> None:
    """Every rank: ``iterations`` x [compute ``compute_us`` -> all-reduce of ``size`` over all ranks]
    (``iterations`` 0: one all-reduce alone)."""
    nodes, last = [], ()
    for k in range(iterations):
        nodes.append(_comp(2 * k, compute_us, last))
        nodes.append(_all_reduce(2 * k + 1, size, (2 * k,)))
        last = (2 * k + 1,)
    if not iterations:
        nodes.append(_all_reduce(0, size, ()))
    meta = make_metadata(world_size=ranks)
    write_rank_set(prefix, {r: Trace(meta, tuple(nodes), rank=r) for r in range(ranks)}, {})


def generated_set(prefix: Path, flags: list[str]) -> None:
    cmd = [sys.executable, "-m", "xsim_trace.cli.main", "-q", "generate", *flags, "--out", str(prefix)]
    subprocess.run(cmd, check=True, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL)


@dataclass(frozen=True)
class Case:
    name: str
    net: Net
    build: Callable[[Path], None]
    backends: tuple[str, ...] = ("analytical", "analytical-ca")


def cases(quick: bool) -> list[Case]:
    big = 64 if quick else 1024
    chain_ranks, chain_iters, ca_iters = (32, 10, 5) if quick else (256, 100, 10)
    l7 = ["--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--sp", "--gbs", "16"]
    gen = (["--model", "llama2-7b", "--tp", "8", "--pp", "2", "--dp", "4", "--layers", "4", "--gbs", "16"] if quick else
           ["--model", "llama2-7b", "--tp", "8", "--pp", "4", "--dp", "32", "--layers", "4", "--gbs", "128"])
    gen_ranks = 64 if quick else 1024
    return [
        Case(f"64 MiB ring all-reduce, {big} ranks", Net(big, coll_bytes=64 * MiB), lambda p: chain_set(p, big, 0, 64 * MiB, 0)),
        Case(f"{chain_ranks} ranks x {chain_iters} x [100 us compute -> 1 MiB all-reduce]", Net(chain_ranks, coll_bytes=MiB),
             lambda p: chain_set(p, chain_ranks, chain_iters, MiB, 100), ("analytical",)),
        Case(f"{chain_ranks} ranks x {ca_iters} x [100 us compute -> 1 MiB all-reduce]", Net(chain_ranks, coll_bytes=MiB),
             lambda p: chain_set(p, chain_ranks, ca_iters, MiB, 100), ("analytical-ca",)),
        Case("8 ranks x 100 x [100 us compute -> 1 MiB all-reduce]", Net(8, coll_bytes=MiB), lambda p: chain_set(p, 8, 100, MiB, 100)),
        Case("one 1 MiB all-reduce, 8 ranks (HGX switch)", Net(8, coll_bytes=MiB, **HGX), lambda p: chain_set(p, 8, 0, MiB, 0)),
        Case("generated Llama-2-7B step, TP2 PP2 DP2 (HGX switch)", Net(8, **HGX), lambda p: generated_set(p, l7)),
        Case(f"generated Llama-2-7B 4-layer step, {gen_ranks} ranks (TP8 PP{2 if quick else 4} DP{4 if quick else 32})",
             Net(gen_ranks), lambda p: generated_set(p, gen)),
    ]


def astra_copy(prefix: Path, out: Path) -> Path:
    """ASTRA-sim's copy of a rank set: the same nodes, an all-gather's ``comm_size`` divided by its group's
    size.  xsim follows NCCL (an all-gather's size is the gathered output buffer); ASTRA-sim's ring takes it
    as each rank's shard (``Ring``: message = size, final size = size x ranks), so the same file would make
    ASTRA-sim move ranks x the bytes.  A set without all-gathers is used as it is."""
    rank_set = read_rank_set(prefix)
    world = len(rank_set.traces)

    def shard(node):
        attrs = {a.name: a for a in node.attrs}
        if node.type != NodeType.COMM_COLL or attrs["comm_type"].value != int(CollectiveType.ALL_GATHER):
            return node
        ranks = len(rank_set.comm_groups[attrs["pg_name"].value]) if "pg_name" in attrs else world
        return replace(node, attrs=tuple(replace(a, value=a.value // ranks) if a.name == "comm_size" else a
                                         for a in node.attrs))

    traces = {r: replace(t, nodes=tuple(shard(n) for n in t.nodes)) for r, t in rank_set.traces.items()}
    if all(a is b for r, t in traces.items() for a, b in zip(t.nodes, rank_set.traces[r].nodes)):
        return prefix
    write_rank_set(out, traces, rank_set.comm_groups)
    return out


# -- running a child and measuring it ----------------------------------------------------------------
@dataclass
class Run:
    cpu_s: float = 0.0
    rss_mb: float = 0.0
    sim_ns: int | None = None
    note: str = ""
    timed_out: bool = False
    extra: dict = field(default_factory=dict)


#: where the xsim children keep their bytecode (set by main): an installed package has its .pyc files
#: (pip writes them), so the children may write and reuse theirs even where the environment says
#: PYTHONDONTWRITEBYTECODE (which would recompile ~80 modules from source on every run, ~0.1-0.25 s)
PYCACHE: Path | None = None


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if PYCACHE is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def measure(cmd: list[str], cwd: Path, log: Path, timeout_s: float) -> tuple[Run, int]:
    """Run ``cmd`` in its own process group; its own rusage (os.wait4): CPU = user + sys, peak RSS."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
        deadline = time.monotonic() + timeout_s
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
    run = Run(cpu_s=usage.ru_utime + usage.ru_stime, rss_mb=usage.ru_maxrss / 1024, timed_out=timed_out)
    if timed_out:
        run.note = f"killed after {timeout_s:.0f} s"
    return run, proc.returncode


def run_astra(astra: Path, backend: str, prefix: Path, net: Net, work: Path, timeout_s: float) -> Run:
    net_cfg, sys_cfg = net.write_astra(work)
    groups = Path(str(prefix) + ".comm_groups.json")
    cmd = [str(astra / "bin" / BINARIES[backend]), f"--workload-configuration={prefix}",
           f"--system-configuration={sys_cfg}", f"--remote-memory-configuration={astra / 'configs' / 'mem.json'}",
           f"--network-configuration={net_cfg}",
           f"--comm-group-configuration={groups if groups.exists() and json.loads(groups.read_text()) else 'empty'}"]
    run_dir = work / f"astra-{backend}"
    run_dir.mkdir(exist_ok=True)  # ASTRA-sim writes log/ into its working folder
    log = run_dir / "stdout.txt"
    run, rc = measure(cmd, run_dir, log, timeout_s)
    finished = {int(m[1]): int(m[2]) for m in _FINISHED.finditer(log.read_text(errors="replace"))}
    if len(finished) == net.ranks:
        run.sim_ns = max(finished.values())
    if not run.timed_out:
        done = "all ranks finished" if len(finished) == net.ranks else f"only {len(finished)} of {net.ranks} ranks finished"
        if rc != 0:
            run.note = f"{done}, then exit {rc} ({_last_line(log)})"
        elif len(finished) < net.ranks:
            run.note = done
    return run


def run_xsim(backend: str, prefix: Path, net: Net, work: Path, timeout_s: float) -> Run:
    out = work / f"xsim-{backend}"
    cmd = [sys.executable, "-m", "xsim_trace.cli.main", "-q", "replay", str(prefix), "--cluster", str(net.write_xsim(work)),
           "--backend", backend, *net.xsim_flags(backend), "--no-plot", "--no-timeline", "--out", str(out)]
    log = work / f"xsim-{backend}.txt"
    run, rc = measure(cmd, ROOT, log, timeout_s)
    summary = out / "summary.json"
    if not run.timed_out:
        if rc != 0 or not summary.exists():
            run.note = f"exit {rc}: " + _last_line(log)
        else:
            run.sim_ns = int(json.loads(summary.read_text())["iteration_ns"])
    return run


def _last_line(path: Path) -> str:
    lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    return lines[-1][:120] if lines else "(no output)"


# -- the table -------------------------------------------------------------------------------------
def _row(case: Case, backend: str, nodes: int, a: Run, x: Run) -> list[str]:
    done = a.sim_ns is not None and x.sim_ns is not None and not (a.timed_out or x.timed_out)
    ratio = f"{a.cpu_s / x.cpu_s:.1f}x" if done and x.cpu_s else "-"
    if a.sim_ns is not None and x.sim_ns is not None:
        diff = f"{100 * (x.sim_ns - a.sim_ns) / a.sim_ns:+.2f}%"
    else:
        diff = "-"

    def sim(r: Run) -> str:
        return f"{r.sim_ns:,}" if r.sim_ns is not None else "-"

    def cpu(r: Run) -> str:
        return f"{r.cpu_s:.2f}" + (" (killed)" if r.timed_out else "")

    notes = "; ".join(f"{who}: {r.note}" for who, r in (("ASTRA-sim", a), ("xsim", x)) if r.note)
    return [case.name, "aware" if backend == "analytical-ca" else "unaware", f"{nodes:,}", cpu(a), f"{a.rss_mb:.0f}",
            cpu(x), f"{x.rss_mb:.0f}", ratio, sim(a), sim(x), diff, notes]


HEADER = ["workload", "congestion", "nodes", "ASTRA CPU s", "ASTRA MB", "xsim CPU s", "xsim MB", "xsim speed-up",
          "ASTRA sim ns", "xsim sim ns", "xsim vs ASTRA", "notes"]


def _print_table(rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|" + " --- |" * len(HEADER))
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    for k, r in enumerate([HEADER, *rows]):
        print("  ".join(c.ljust(widths[i]) if i in (0, 1, 11) else c.rjust(widths[i]) for i, c in enumerate(r)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def _count_nodes(prefix: Path, ranks: int) -> int:
    from xsim_trace.io import iter_nodes, rank_path

    sizes = {}
    total = 0
    for r in range(ranks):  # identical files are counted once each by size (the chains are all alike)
        path = rank_path(prefix, r)
        size = path.stat().st_size
        if size not in sizes:
            sizes[size] = sum(1 for _ in iter_nodes(path))
        total += sizes[size]
    return total


_WARM_KERNELS = """
import sys
from xsim_trace.cluster import load_cluster
from xsim_trace.io.et_columns import read_columns_many
from xsim_trace.io.rankset import find_rank_files, read_comm_groups
from xsim_trace.network.registry import make_backend
from xsim_trace.network.topology import build_topology
from xsim_trace.replay.columnar import compile_columns
from xsim_trace.replay.engine import Engine
from xsim_trace.replay.settings import ReplaySettings

prefix, cluster = sys.argv[1], load_cluster(sys.argv[2])
_, files = find_rank_files(prefix)
cols = read_columns_many([files[r] for r in sorted(files)], decoder="numba")
w = compile_columns(cols, read_comm_groups(prefix + ".comm_groups.json"))
for backend in ("analytical", "analytical-ca"):
    Engine(w, make_backend(backend, build_topology(cluster)), ReplaySettings(chunks=4), compiled=True).run()
"""


def _least_of(n: int, astra: Callable[[], Run], xsim: Callable[[], Run]) -> tuple[Run, Run]:
    """Each engine run ``n`` times, alternating: the run of least CPU of each (its note says how many
    runs and their CPU range when ``n`` > 1)."""
    runs: tuple[list[Run], list[Run]] = ([], [])
    for _ in range(max(n, 1)):
        runs[0].append(astra())
        runs[1].append(xsim())
        if runs[0][-1].timed_out or runs[1][-1].timed_out:  # a killed run is not repeated
            break
    best = []
    for out in runs:
        r = min(out, key=lambda run: (run.timed_out, run.cpu_s))
        if len(out) > 1:
            cpus = [x.cpu_s for x in out]
            r.note = "; ".join(x for x in (r.note, f"least of {len(out)} runs ({min(cpus):.2f}-{max(cpus):.2f} s)") if x)
        best.append(r)
    return best[0], best[1]


def warm_up(work: Path, timeout_s: float) -> None:
    """Untimed runs before anything is measured: xsim's numba kernels (the numba decoder, the compiled
    loop, the compiled analytical-ca loop) compiled into their cache or found there, forced on a small
    set (the replays measured pick them by size), and the bytecode written by one replay per backend."""
    work.mkdir(parents=True, exist_ok=True)
    net = Net(16, coll_bytes=MiB)
    chain_set(work / "set", 16, 20, MiB, 100)
    kernels, _rc = measure([sys.executable, "-c", _WARM_KERNELS, str(work / "set"), str(net.write_xsim(work))], ROOT,
                           work / "kernels.txt", timeout_s)
    run = run_xsim("analytical", work / "set", net, work, timeout_s)
    ca = run_xsim("analytical-ca", work / "set", net, work, timeout_s)
    print(f"# warm-up: {kernels.cpu_s:.2f} s CPU (numba kernels compiled or loaded from the cache) "
          f"{'(' + _last_line(work / 'kernels.txt') + ')' if _rc else ''}, {run.cpu_s:.2f} + {ca.cpu_s:.2f} s CPU "
          f"(two replays) {run.note} {ca.note}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: 64 instead of 1,024 ranks, 32 x 10 chains")
    ap.add_argument("--only", action="append", default=[], metavar="WORD", help="only workloads whose name has WORD (repeatable)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per engine run before it is killed (default 600)")
    ap.add_argument("--astra", type=Path, default=DEFAULT_ASTRA, help=f"the ASTRA-sim folder (default {DEFAULT_ASTRA})")
    ap.add_argument("--keep", type=Path, help="write the rank sets and logs here (kept) instead of a temporary folder")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--cold", action="store_true", help="no warm-up: xsim's first run also compiles its numba kernels")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run each engine N times, alternating, and keep each one's least CPU (a shared machine's "
                         "load spikes only add CPU); default 1")
    args = ap.parse_args(argv)
    for b in BINARIES.values():
        if not os.access(args.astra / "bin" / b, os.X_OK):
            print(f"bench_vs_astra: {args.astra / 'bin' / b} is missing (see {args.astra / 'README.md'})", file=sys.stderr)
            return 2
    base = args.keep or Path(tempfile.mkdtemp(prefix="xsim-vs-astra-"))
    global PYCACHE
    PYCACHE = base / "pycache"
    rows = []
    try:
        if not args.cold:
            warm_up(base / "warm-up", args.timeout)
        for i, case in enumerate(cases(args.quick)):
            if args.only and not any(w.lower() in case.name.lower() for w in args.only):
                continue
            work = base / f"case{i}"
            work.mkdir(parents=True, exist_ok=True)
            prefix = work / "set"
            case.build(prefix)
            nodes = _count_nodes(prefix, case.net.ranks)
            astra_prefix = astra_copy(prefix, work / "astra-set")
            for backend in case.backends:
                a, x = _least_of(args.repeat, lambda: run_astra(args.astra, backend, astra_prefix, case.net, work, args.timeout),
                                 lambda: run_xsim(backend, prefix, case.net, work, args.timeout))
                rows.append(_row(case, backend, nodes, a, x))
                print(f"# {case.name}, {backend}: ASTRA-sim {a.cpu_s:.2f} s, xsim {x.cpu_s:.2f} s CPU", file=sys.stderr, flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"xsim vs ASTRA-sim 2.x analytical ({'quick' if args.quick else 'full'} set; CPU = user + sys of each "
          f"process, peak RSS in MB; speed-up = ASTRA-sim CPU / xsim CPU)")
    _print_table(rows, args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
