"""``xsim collectives predict``: an nccl-tests-like table of one collective on a cluster, from the NCCL model."""

from __future__ import annotations

import argparse
import json
import sys

from xsim_trace.cli.device_file import add_device_file, run_catalog
from xsim_trace.errors import ConfigError

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = t[-1] if t and t[-1] in "kmgt" else ""
    try:
        value = int(float(t[: len(t) - len(unit)]) * _UNITS[unit])
    except ValueError:
        raise ConfigError(f"expected a size like 8, 64K, 16M or 8G, found {text!r}", field="--sizes") from None
    if value <= 0:
        raise ConfigError(f"expected a positive size, found {text!r}", field="--sizes")
    return value


def size_range(spec: str) -> list[int]:
    """``MIN:MAX`` (doubling from MIN up to MAX) or one size."""
    lo_text, _, hi_text = spec.partition(":")
    lo = parse_size(lo_text)
    hi = parse_size(hi_text) if hi_text else lo
    if hi < lo:
        raise ConfigError(f"expected MIN:MAX with MIN <= MAX, found {spec!r}", field="--sizes")
    out = []
    while lo <= hi:
        out.append(lo)
        lo *= 2
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("collectives", help="NCCL collective cost model: predict nccl-tests tables")
    sub = p.add_subparsers(dest="collectives_command", metavar="ACTION")
    sub.required = True
    pr = sub.add_parser(
        "predict",
        help="one row per size (doubling): time, algbw, busbw, NCCL algorithm and protocol",
        description="Predicts what nccl-tests (X_perf -b MIN -e MAX -f 2) would print on the cluster's first N ranks.",
    )
    pr.add_argument("--cluster", required=True, metavar="FILE_OR_PRESET", help="cluster file or preset (dgx-h100:2)")
    pr.add_argument("--collective", default="all_reduce",
                    help="all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, send_recv")
    pr.add_argument("--ranks", type=int, help="ranks taking part: the cluster's first N (default: all)")
    pr.add_argument("--nodes", type=int, help="resize the cluster's groups to N nodes each first")
    pr.add_argument("--sizes", default="8:8G", help="MIN:MAX bytes, doubling (default 8:8G)")
    pr.add_argument("--algo", help="force NCCL's algorithm like NCCL_ALGO (ring, tree, nvls, nvls_tree, collnet_direct, collnet_chain, pat)")
    pr.add_argument("--proto", help="force the protocol like NCCL_PROTO (LL, LL128, Simple)")
    pr.add_argument("--gpus-per-process", type=int, default=1, metavar="G",
                    help="GPUs driven by one process (nccl-tests -g G): adds the host launch cost")
    pr.add_argument("--json", action="store_true", help="machine-readable rows")
    add_device_file(pr)
    pr.set_defaults(func=_predict)


def resized(cluster, nodes: int | None):
    if nodes is None:
        return cluster
    from xsim_trace.cluster import cluster_from_dict  # noqa: PLC0415

    if nodes < 1:
        raise ConfigError(f"expected a positive node count, found {nodes}", field="--nodes")
    d = cluster.to_dict()
    for g in d["groups"]:
        g.pop("count", None)
        g["nodes"] = nodes
    d.pop("rank_map", None)
    return cluster_from_dict(d, file=f"{cluster.name} resized to {nodes} nodes")


def _predict(args: argparse.Namespace) -> int:
    from xsim_trace.cluster import load_cluster  # noqa: PLC0415
    from xsim_trace.network.nccl import CollKind, bus_factor, group_shape, price_collective  # noqa: PLC0415

    cluster = resized(load_cluster(args.cluster, catalog=run_catalog(args)), args.nodes)
    n = args.ranks or cluster.num_ranks
    if not 1 <= n <= cluster.num_ranks:
        raise ConfigError(f"expected 1..{cluster.num_ranks} ranks on cluster {cluster.name}, found {n} (try --nodes)",
                          field="--ranks")
    kind = CollKind.parse(args.collective, field="--collective")
    shape = group_shape(cluster, range(n)).with_launch(args.gpus_per_process)
    sizes = size_range(args.sizes)
    rows = []
    for size in sizes:
        p = price_collective(shape, kind, size, algo=args.algo, proto=args.proto)
        t_us = p.time_ns / 1000.0
        algbw = size / (t_us * 1000.0) if t_us > 0 else 0.0
        rows.append({"size_bytes": size, "time_us": t_us, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * bus_factor(kind, n), "algo": p.algo.value, "proto": p.proto.value,
                     "channels": p.channels})
    if args.json:
        json.dump({"cluster": cluster.name, "collective": kind.value, "ranks": n, "nodes": shape.n_nodes,
                   "rows": rows}, sys.stdout, indent=1)
        print()
        return 0
    print(f"# {kind.value} on {n} ranks ({shape.n_nodes} node(s) x {shape.ranks_per_node}) of {cluster.name}: "
          f"{shape.arch}, {shape.link.value}, NCCL model")
    print(f"# {'size_bytes':>12} {'time_us':>10} {'algbw_gbps':>11} {'busbw_gbps':>11} {'algo':>10} {'proto':>7}")
    for r in rows:
        print(f"  {r['size_bytes']:>12} {r['time_us']:>10.2f} {r['algbw_gbps']:>11.2f} {r['busbw_gbps']:>11.2f} "
              f"{r['algo']:>10} {r['proto']:>7}")
    return 0
