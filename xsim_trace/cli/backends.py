"""``xsim backends list|compare``: which network backends exist, and one workload on each."""

from __future__ import annotations

import argparse
import json
import sys

from xsim_trace.cli.device_file import add_device_file, run_catalog
from xsim_trace.errors import ConfigError
from xsim_trace.sweep.backends import available_backends
from xsim_trace.sweep.micro import CLUSTER_CASES, DEFAULT_CASE_CLUSTER, MICRO_CASES, compare_backends, ideal_ns


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "": 1}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = t[-1] if t and t[-1] in "kmg" else ""
    try:
        value = float(t[: len(t) - len(unit)]) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size like 16MiB or 1048576, found {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size, found {text!r}")
    return int(value)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("backends", help="list network backends; compare them on one workload")
    sub = p.add_subparsers(dest="backends_command", metavar="ACTION")
    sub.required = True
    ls = sub.add_parser("list", help="backends usable in this environment")
    ls.set_defaults(func=_list)
    c = sub.add_parser(
        "compare",
        help="run one micro workload on every backend; simulated times and wall-clock cost",
        description="Cases on one switch (all flows SIZE bytes, starting together): single = 0->1; ring = i->i+1; "
        "incast = 1..n-1 -> 0; shared = 0 -> 1..n-1.  Cases on --cluster (default " + DEFAULT_CASE_CLUSTER + "), "
        "SIZE bytes in all: reshard = every GPU of node 0 -> GPU 0 of node 1 (TP8 -> TP1); p2p = one cross-node "
        "send; collective = a ring all-reduce over every rank.",
    )
    c.add_argument("case", nargs="?", default="single", choices=MICRO_CASES)
    c.add_argument("--ranks", type=int, default=4, help="ranks on the switch (default 4)")
    c.add_argument("--size", type=_size, default=64 << 20, help="bytes per flow, e.g. 64MiB (default)")
    c.add_argument("--bw-GBps", dest="bw_GBps", type=float, default=12.5, help="link bandwidth, 1e9 B/s (12.5)")
    c.add_argument("--latency-ns", type=int, default=1000, help="per-link latency (default 1000)")
    c.add_argument("--backend", action="append", dest="backends", metavar="NAME",
                   help="backend to run (repeatable; default: all available)")
    c.add_argument("--trace", metavar="PREFIX", help="replay this rank set on each backend instead of a micro case")
    c.add_argument("--cluster", metavar="FILE_OR_PRESET",
                   help=f"cluster for --trace and the cluster cases (file or preset; default {DEFAULT_CASE_CLUSTER})")
    c.add_argument("--drop-missing-deps", action="store_true", help="with --trace: drop dangling dependencies")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    add_device_file(c)
    c.set_defaults(func=_compare)


def _list(args: argparse.Namespace) -> int:
    for name in available_backends():
        print(name)
    return 0


def _compare_trace(args: argparse.Namespace, names: list[str]) -> int:
    from xsim_trace.sweep.replay_compare import compare_replay  # noqa: PLC0415

    if not args.cluster:
        raise ConfigError("--trace needs --cluster FILE_OR_PRESET", field="--cluster")
    from xsim_trace.cluster import load_cluster  # noqa: PLC0415

    runs = compare_replay(args.trace, load_cluster(args.cluster, catalog=run_catalog(args)), names, drop_missing_deps=args.drop_missing_deps)
    if args.json:
        json.dump({"trace": args.trace, "cluster": args.cluster, "runs": [r.as_dict() for r in runs]},
                  sys.stdout, indent=1)
        print()
        return 0 if all(r.error is None for r in runs) else 1
    print(f"trace {args.trace} on {args.cluster}")
    ok = [r for r in runs if r.error is None]
    ref = ok[0].iteration_ns if ok else 0
    print(f"{'backend':<14} {'iteration ns':>14} {'vs ' + (ok[0].backend if ok else '-'):>16} {'flows':>7} "
          f"{'setup s':>8} {'run s':>9}")
    for r in runs:
        if r.error:
            print(f"{r.backend:<14} error: {r.error}")
            continue
        rel = (r.iteration_ns - ref) / ref * 100 if ref else 0.0
        print(f"{r.backend:<14} {r.iteration_ns:>14} {rel:>+15.2f}% {r.flows:>7} {r.setup_s:>8.3f} {r.run_s:>9.3f}")
    return 0 if all(r.error is None for r in runs) else 1


def _compare_cluster_case(args: argparse.Namespace, names: list[str]) -> int:
    from xsim_trace.cluster import load_cluster  # noqa: PLC0415

    cluster = load_cluster(args.cluster or DEFAULT_CASE_CLUSTER, catalog=run_catalog(args))
    cmp = compare_backends(names, args.case, cmp_ranks := cluster.num_ranks, args.size, 0.0, 0, cluster=cluster)
    if args.json:
        json.dump({"case": cmp.case, "cluster": cluster.name, "ranks": cmp_ranks, "size_bytes": cmp.size_bytes,
                   "runs": [r.as_dict() for r in cmp.runs]}, sys.stdout, indent=1)
        print()
        return 0 if all(r.error is None for r in cmp.runs) else 1
    ref = cmp.reference()
    print(f"case {cmp.case} on {cluster.name} ({cmp_ranks} ranks), {cmp.size_bytes} B")
    print(f"{'backend':<14} {'flows':>5} {'last finish ns':>15} {'vs ' + (ref.backend if ref else '-'):>16} "
          f"{'setup s':>8} {'run s':>9} {'us/flow':>9}")
    for r in cmp.runs:
        if r.error:
            print(f"{r.backend:<14} error: {r.error}")
            continue
        rel = (r.makespan_ns - ref.makespan_ns) / ref.makespan_ns * 100 if ref and ref.makespan_ns else 0.0
        print(f"{r.backend:<14} {r.flows:>5} {r.makespan_ns:>15} {rel:>+15.2f}% {r.setup_s:>8.3f} {r.run_s:>9.4f} "
              f"{r.wall_per_flow_s * 1e6:>9.1f}")
    return 0 if all(r.error is None for r in cmp.runs) else 1


def _compare(args: argparse.Namespace) -> int:
    names = args.backends or available_backends()
    if not names:
        raise ConfigError("no network backend is available", field="--backend")
    if args.trace:
        return _compare_trace(args, names)
    if args.case in CLUSTER_CASES:
        return _compare_cluster_case(args, names)
    if args.ranks < 2:
        raise ConfigError(f"expected at least 2 ranks, found {args.ranks}", field="--ranks")
    cmp = compare_backends(names, args.case, args.ranks, args.size, args.bw_GBps, args.latency_ns)
    no_share = ideal_ns(args.case, args.ranks, args.size, args.bw_GBps, args.latency_ns, shared=False)
    fair = ideal_ns(args.case, args.ranks, args.size, args.bw_GBps, args.latency_ns, shared=True)
    if args.json:
        json.dump({"case": cmp.case, "ranks": cmp.ranks, "size_bytes": cmp.size_bytes, "bw_GBps": cmp.bw_GBps,
                   "latency_ns": cmp.latency_ns, "ideal_no_sharing_ns": no_share, "ideal_fair_share_ns": fair,
                   "runs": [r.as_dict() for r in cmp.runs]}, sys.stdout, indent=1)
        print()
        return 0 if all(r.error is None for r in cmp.runs) else 1
    print(f"case {cmp.case}: {cmp.ranks} ranks, {cmp.size_bytes} B per flow, {cmp.bw_GBps:g} GB/s, "
          f"{cmp.latency_ns} ns per link")
    print(f"hand formulas: no sharing {no_share} ns, fair sharing {fair} ns")
    print(f"{'backend':<14} {'flows':>5} {'last finish ns':>15} {'vs fair':>8} {'setup s':>8} {'run s':>9} "
          f"{'us/flow':>9}")
    for r in cmp.runs:
        if r.error:
            print(f"{r.backend:<14} error: {r.error}")
            continue
        rel = (r.makespan_ns - fair) / fair * 100
        print(f"{r.backend:<14} {r.flows:>5} {r.makespan_ns:>15} {rel:>+7.2f}% {r.setup_s:>8.3f} {r.run_s:>9.4f} "
              f"{r.wall_per_flow_s * 1e6:>9.1f}")
    return 0 if all(r.error is None for r in cmp.runs) else 1
