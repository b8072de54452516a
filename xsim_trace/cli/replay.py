"""``xsim replay TRACE_PREFIX --cluster FILE_OR_PRESET``: predict the iteration time and explain it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from xsim_trace.cli.progress import progress_bar

if TYPE_CHECKING:
    from xsim_trace.replay import ReplaySettings

DEFAULT_BACKEND = "analytical"


class EngineOptions(Protocol):
    """The parsed engine options of a replaying command (:func:`add_replay_options`) and its --cluster."""

    cluster: str | None
    algorithm: list[str]
    chunks: int | None
    in_flight: int | None
    endpoint_delay_ns: int | None
    reduction_delay_ns: int
    p2p: str


class CollectiveModelOptions(Protocol):
    """The parsed options of :func:`add_collective_model_flags`."""

    collective_model: str
    nccl_algo: str | None
    nccl_proto: str | None


def add_collective_model_flags(p: argparse.ArgumentParser) -> None:
    """--collective-model, --nccl-algo, --nccl-proto (replay and validate)."""
    p.add_argument("--collective-model", choices=("auto", "nccl", "schedule"), default="auto",
                   help="what prices a collective: the NCCL model (NCCL's algorithm/protocol choice; whole on "
                        "analytical, as paced flows on flow/ns3/analytical-ca) or --algorithm's schedule; auto (default): nccl "
                        "unless --algorithm/--chunks/--in-flight/delays configure a schedule")
    p.add_argument("--nccl-algo", metavar="ALGO", help="force the NCCL model's algorithm like NCCL_ALGO")
    p.add_argument("--nccl-proto", metavar="PROTO", help="force the NCCL model's protocol like NCCL_PROTO")


def add_replay_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default=DEFAULT_BACKEND, help=f"network backend (default {DEFAULT_BACKEND}; see `xsim backends`)")
    p.add_argument(
        "--algorithm", action="append", metavar="[COLL=]ALGO", default=[],
        help="collective algorithm: ring, tree, direct, halving_doubling, hierarchical; for all collectives or e.g. all_reduce=tree (repeatable)",
    )
    p.add_argument("--chunks", type=int, default=None,
                   help="chunks per collective (default 1, or the astra: system file's preferred-dataset-splits)")
    p.add_argument("--in-flight", type=int, default=None,
                   help="chunks of one collective in flight per rank (default 1, or active-chunks-per-dimension)")
    p.add_argument("--endpoint-delay-ns", type=int, default=None,
                   help="delay before each send and after each chunk, ns (default 0, or endpoint-delay)")
    p.add_argument("--reduction-delay-ns", type=int, default=0, help="delay after each received message that is reduced, ns")
    p.add_argument("--p2p", choices=("eager", "rendezvous"), default="eager", help="send/recv semantics (default eager)")
    p.add_argument("--chunk-bytes", type=int, default=None, metavar="BYTES",
                   help="analytical-ca only: a flow's pipeline chunk (default 131072, NCCL's; 0 = each message sent "
                        "whole, store and forward, as ASTRA-sim's congestion-aware network)")
    add_collective_model_flags(p)
    p.add_argument("--drop-missing-deps", action="store_true", help="drop dependencies on nodes absent from a trace (with a warning) instead of failing")
    p.add_argument("--absent-peers", choices=("mirror", "skew"), default="mirror",
                   help="ranks missing from the set (a single-rank capture): each mirrors the nearest captured rank "
                        "below it (default mirror); skew also starts each rank at its captured step-start offset")
    p.add_argument("--no-fold", action="store_true",
                   help="simulate every rank, also ranks equivalent to another (by default the compiled closed-form "
                        "path simulates one rank per class of equivalent ranks and copies its times: exact)")
    p.add_argument("--no-timeline", action="store_true", help="skip timeline.json")
    p.add_argument("--no-plot", action="store_true", help="skip breakdown.png")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="replay a multi-rank Chakra trace on a cluster and report the iteration time")
    p.add_argument("trace", metavar="TRACE_PREFIX", help="rank-set prefix (out/step for out/step.0.et ...) or its directory")
    p.add_argument("--cluster", required=True, metavar="FILE_OR_PRESET", help="cluster YAML/JSON file, preset (e.g. dgx-h100:2), or ASTRA-sim inputs astra:NETWORK.yml[,SYSTEM.json]")
    p.add_argument("--out", default="xsim-replay", metavar="DIR", help="where summary.json, timeline.json, breakdown.png go (default ./xsim-replay)")
    p.add_argument("--retarget", action="store_true",
                   help="ranks captured on another GPU than the cluster gives them: rescale their compute kernels to the "
                        "cluster's device by kernel class and FLOPs/bytes (without it such a mismatch is refused)")
    p.add_argument("--retarget-host-factor", type=float, default=1.0, metavar="F",
                   help="with --retarget: multiply host (CPU) node times of retargeted ranks by F (target CPU time / "
                        "captured; default 1: host time kept as captured)")
    p.add_argument("--device-file", metavar="YAML",
                   help="extra devices (same shape as the built-in catalog): GPU types of the cluster file and of the "
                        "captured ranks resolve in it, for the device check and --retarget")
    add_replay_options(p)
    p.set_defaults(func=cmd_replay)


def settings_from_args(args: EngineOptions, model: CollectiveModelOptions | None = None) -> "ReplaySettings":
    """Replay settings from the options, and from ``model``'s where the command has them (else the
    collective model's defaults); with ``--cluster astra:NET,SYS`` the system file's algorithms,
    chunks, chunks in flight and endpoint delay fill the options not given."""
    from xsim_trace.cluster.astra import astra_system_of, is_astra_spec
    from xsim_trace.replay import ReplaySettings

    system = astra_system_of(args.cluster) if is_astra_spec(args.cluster) else None
    algorithms = list(args.algorithm)
    if system is not None and not algorithms:
        algorithms = [f"{ctype.name.lower()}={algo}" for ctype, algo in system.algorithms]

    def pick(value, from_system, default):
        if value is not None:
            return value
        return from_system if system is not None else default

    return ReplaySettings.from_cli(
        algorithms,
        chunks=pick(args.chunks, system and system.chunks, 1),
        in_flight=pick(args.in_flight, system and system.in_flight, 1),
        endpoint_delay_ns=pick(args.endpoint_delay_ns, system and system.endpoint_delay_ns, 0),
        reduction_delay_ns=args.reduction_delay_ns,
        p2p=args.p2p,
        **({} if model is None else {"collective_model": model.collective_model, "nccl_algo": model.nccl_algo,
                                     "nccl_proto": model.nccl_proto}),
    )


def network_for(cluster_spec, backend_name: str, catalog=None, options: dict | None = None):
    """(cluster, backend) from a cluster file/preset and a backend name: the cluster is resolved
    here, once (its GPU types in ``catalog``, the run's device catalog; None = built-in), and the
    resolved Cluster builds the topology; ``options`` go to the backend's constructor."""
    from xsim_trace.cluster import load_cluster
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology

    cluster = load_cluster(cluster_spec, catalog=catalog)
    return cluster, make_backend(backend_name, build_topology(cluster), **(options or {}))


def run_replay(traces, comm_groups, cluster, backend, settings, *, quiet: bool, drop_missing_deps: bool = False,
               fold: bool = True):
    from xsim_trace.replay.api import compile_checked

    workload = compile_checked(traces, comm_groups, drop_missing_deps=drop_missing_deps)
    return run_compiled(workload, cluster, backend, settings, quiet=quiet, fold=fold)


def run_compiled(workload, cluster, backend, settings, *, quiet: bool, fold: bool = True):
    from xsim_trace.replay import replay_compiled

    with progress_bar(workload.num_nodes, "replay", quiet=quiet) as bar:
        return replay_compiled(workload, backend, settings, cluster=cluster, progress=bar.update, fold=fold)


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


def _mismatch_error(mismatches):
    """The one-line refusal of ranks captured on another device than the cluster's, naming both."""
    from xsim_trace.errors import ConfigError

    first = mismatches[0]
    more = f" (and {len(mismatches) - 1} more rank(s))" if len(mismatches) > 1 else ""
    return ConfigError(f"{first.describe()}{more}; pass --retarget to rescale the kernels to {first.cluster}",
                       rank=first.rank, field="--cluster")


def check_or_retarget(traces, cluster, *, retarget: bool, host_factor: float = 1.0, catalog=None):
    """Refuse ranks captured on another device than the cluster's (naming both), or, with
    ``retarget``, rescale them to it (logging how many ranks moved)."""
    import logging

    from xsim_trace.rewrite.retarget import device_mismatches, retarget as do_retarget

    mismatches = device_mismatches(traces, cluster, catalog)
    if not mismatches:
        return traces
    if not retarget:
        raise _mismatch_error(mismatches)
    logging.getLogger(__name__).warning("retargeting %d rank(s) from %s to %s", len(mismatches),
                                        mismatches[0].captured, mismatches[0].cluster)
    return do_retarget(traces, cluster, catalog, host_factor=host_factor)


def _needs_retarget(metadata, cluster, *, retarget: bool, catalog=None) -> bool:
    """Whether the captured devices (from the rank files' metadata records alone) differ from the
    cluster's: a ConfigError naming both without ``retarget``, True with it."""
    from xsim_trace.rewrite.retarget import metadata_mismatches

    mismatches = metadata_mismatches(metadata, cluster, catalog)
    if mismatches and not retarget:
        raise _mismatch_error(mismatches)
    return bool(mismatches)


def cmd_replay(args: argparse.Namespace) -> int:
    from xsim_trace.io import check_output_folder, read_rank_set
    from xsim_trace.replay.api import compile_checked
    from xsim_trace.replay.columnar import compile_rank_files, read_rank_files
    from xsim_trace.report import write_reports

    from xsim_trace.devices.catalog import catalog_for

    check_output_folder(args.out)  # before the replay, not after it
    settings = settings_from_args(args, args)
    # resolved once, handed down; without --device-file, None: the built-in catalog, parsed (YAML,
    # ~0.05-0.1 s) only if a non-generic device name needs it
    catalog = catalog_for(args.device_file) if args.device_file is not None else None
    options = {} if args.chunk_bytes is None else {"chunk_bytes": args.chunk_bytes}
    cluster, backend = network_for(args.cluster, args.backend, catalog, options)
    quiet = args.quiet
    # each rank file read once: its metadata comes from the bytes the column decoder walked
    read = read_rank_files(args.trace, partial=True)
    metadata = read.metadata()
    if _is_partial(metadata):
        workload, prefix = _compile_completed(args, cluster, quiet, catalog)
    elif _needs_retarget(metadata, cluster, retarget=args.retarget, catalog=catalog):
        rs = read_rank_set(args.trace)
        traces = check_or_retarget(rs.traces, cluster, retarget=True, host_factor=args.retarget_host_factor,
                                   catalog=catalog)
        workload, prefix = compile_checked(traces, rs.comm_groups, drop_missing_deps=args.drop_missing_deps), rs.prefix
    else:
        # decoded straight into columns where it can (no per-node objects), else the typed way
        workload, prefix = compile_rank_files(read, drop_missing_deps=args.drop_missing_deps)
    result = run_compiled(workload, cluster, backend, settings, quiet=quiet, fold=not args.no_fold)
    paths = write_reports(
        result, Path(args.out), timeline=not args.no_timeline, plot=not args.no_plot,
        trace=prefix, cluster=str(args.cluster),
    )
    print_outputs(result, paths)
    return 0


def _is_partial(metadata: dict) -> bool:
    """Whether the rank set lacks some of its world (by the files' ``world_size`` metadata)."""
    from xsim_trace.graph import attrs as A

    world = max(metadata) + 1
    for meta in metadata.values():
        value = meta.attr(A.META_WORLD_SIZE)
        if isinstance(value, int) and not isinstance(value, bool):
            world = max(world, value)
    return len(metadata) < world


def _compile_completed(args: argparse.Namespace, cluster, quiet: bool, catalog=None):
    """A partial rank set (device-checked, or retargeted) completed with modelled peers
    (:mod:`xsim_trace.replay.absent`), compiled; what was modelled is said on stderr."""
    from converters.crossrank import alltoall_schedule
    from xsim_trace.io import read_rank_set
    from xsim_trace.replay.absent import AbsentPeers, complete_rank_set
    from xsim_trace.replay.api import compile_checked

    rs = read_rank_set(args.trace, partial=True)
    traces = check_or_retarget(rs.traces, cluster, retarget=args.retarget, host_factor=args.retarget_host_factor,
                               catalog=catalog)
    done = complete_rank_set(traces, rs.comm_groups, AbsentPeers(args.absent_peers), alltoall_order=alltoall_schedule)
    for note in done.notes if not quiet else ():
        print(f"xsim: note: {note}", file=sys.stderr)
    return compile_checked(done.traces, rs.comm_groups, drop_missing_deps=args.drop_missing_deps), rs.prefix
