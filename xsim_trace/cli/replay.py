"""``xsim replay TRACE_PREFIX --cluster FILE_OR_PRESET``: predict the iteration time and explain it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xsim_trace.cli.progress import progress_bar

DEFAULT_BACKEND = "analytical"


def add_replay_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default=DEFAULT_BACKEND, help=f"network backend (default {DEFAULT_BACKEND}; see `xsim backends`)")
    p.add_argument(
        "--algorithm", action="append", metavar="[COLL=]ALGO", default=[],
        help="collective algorithm: ring, tree, direct, halving_doubling, hierarchical; for all collectives or e.g. all_reduce=tree (repeatable)",
    )
    p.add_argument("--chunks", type=int, default=1, help="chunks per collective (default 1)")
    p.add_argument("--in-flight", type=int, default=1, help="chunks of one collective in flight per rank (default 1)")
    p.add_argument("--endpoint-delay-ns", type=int, default=0, help="delay before each send and after each chunk, ns")
    p.add_argument("--reduction-delay-ns", type=int, default=0, help="delay after each received message that is reduced, ns")
    p.add_argument("--p2p", choices=("eager", "rendezvous"), default="eager", help="send/recv semantics (default eager)")
    p.add_argument("--drop-missing-deps", action="store_true", help="drop dependencies on nodes absent from a trace (with a warning) instead of failing")
    p.add_argument("--no-timeline", action="store_true", help="skip timeline.json")
    p.add_argument("--no-plot", action="store_true", help="skip breakdown.png")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="replay even when a rank's trace names another GPU than the cluster puts it on")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="replay a multi-rank Chakra trace on a cluster and report the iteration time")
    p.add_argument("trace", metavar="TRACE_PREFIX", help="rank-set prefix (out/step for out/step.0.et ...) or its directory")
    p.add_argument("--cluster", required=True, metavar="FILE_OR_PRESET", help="cluster YAML/JSON file or preset (e.g. dgx-h100:2)")
    p.add_argument("--out", default="xsim-replay", metavar="DIR", help="where summary.json, timeline.json, breakdown.png go (default ./xsim-replay)")
    add_replay_options(p)
    p.set_defaults(func=cmd_replay)


def settings_from_args(args: argparse.Namespace):
    from xsim_trace.replay import ReplaySettings

    return ReplaySettings.from_cli(
        args.algorithm,
        chunks=args.chunks,
        in_flight=args.in_flight,
        endpoint_delay_ns=args.endpoint_delay_ns,
        reduction_delay_ns=args.reduction_delay_ns,
        p2p=args.p2p,
    )


def network_for(cluster_spec, backend_name: str):
    """(cluster, backend) from a cluster file/preset and a backend name."""
    from xsim_trace.cluster import load_cluster
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology

    cluster = load_cluster(cluster_spec)
    return cluster, make_backend(backend_name, build_topology(cluster))


def run_replay(traces, comm_groups, cluster, backend, settings, *, quiet: bool, drop_missing_deps: bool = False):
    from xsim_trace.replay import compile_workload, replay_compiled

    workload = compile_workload(traces, comm_groups, drop_missing_deps=drop_missing_deps)
    with progress_bar(workload.num_nodes, "replay", quiet=quiet) as bar:
        return replay_compiled(workload, backend, settings, cluster=cluster, progress=bar.update)


def print_outputs(result, paths, stream=None) -> None:
    from xsim_trace.report import render_table

    stream = stream or sys.stdout
    print(render_table(result), file=stream)
    cp = _critical_line(paths.get("summary"))
    if cp:
        print(cp, file=stream)
    print("", file=stream)
    for label, path in paths.items():
        print(f"{label:>9}: {path}", file=stream)


def _critical_line(summary_path) -> str | None:
    """One line on the critical path, read back from the summary just written."""
    import json

    from xsim_trace.report import fmt_ns

    if summary_path is None:
        return None
    cp = json.loads(Path(summary_path).read_text(encoding="utf-8")).get("critical_path") or {}
    if not cp.get("nodes"):
        return None
    ranks = cp["ranks"]
    where = f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks ({', '.join(map(str, ranks[:4]))}{' ...' if len(ranks) > 4 else ''})"
    top = cp["longest"][0]
    host = f", host {fmt_ns(cp['host_ns'])}" if cp.get("host_ns") else ""
    return (f"critical path: {cp['nodes']} nodes on {where}: compute {fmt_ns(cp['compute_ns'])}{host}, "
            f"communication {fmt_ns(cp['comm_ns'])}, waiting {fmt_ns(cp['wait_ns'])}; longest: "
            f"{top['name'] or 'node ' + str(top['node'])} on rank {top['rank']} ({fmt_ns(top['duration_ns'])})")


def cmd_replay(args: argparse.Namespace) -> int:
    from xsim_trace.io import read_rank_set
    from xsim_trace.report import write_reports

    settings = settings_from_args(args)
    cluster, backend = network_for(args.cluster, args.backend)
    quiet = getattr(args, "quiet", False)
    rs = read_rank_set(args.trace)
    if not getattr(args, "allow_mismatch", True):
        from xsim_trace.rewrite.guards import check_trace_devices

        check_trace_devices(rs.traces, cluster, source=str(args.trace), flag="--allow-mismatch")
    result = run_replay(rs.traces, rs.comm_groups, cluster, backend, settings, quiet=quiet, drop_missing_deps=args.drop_missing_deps)
    paths = write_reports(
        result, Path(args.out), timeline=not args.no_timeline, plot=not args.no_plot,
        trace=rs.prefix, cluster=str(args.cluster),
    )
    print_outputs(result, paths)
    return 0
