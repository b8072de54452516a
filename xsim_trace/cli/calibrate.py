"""``xsim calibrate nccl-tests LOG... -o cluster.yaml [--base PRESET]``: fit the collective model to measured
nccl-tests runs and write a cluster file whose predictions match them."""

from __future__ import annotations

import argparse
import logging
import statistics
from pathlib import Path

import yaml

from xsim_trace.cli.device_file import add_device_file, run_catalog
from xsim_trace.errors import ConfigError, FormatError, OutputError
from xsim_trace.io.atomic import atomic_write, check_output_folder

log = logging.getLogger(__name__)

#: base preset per GPU architecture when --base is not given
_BASE_BY_ARCH = {"volta": "v100-dgx1", "ampere": "dgx-a100", "hopper": "dgx-h100", "blackwell": "dgx-h100"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="fit the network model to measurements")
    sub = p.add_subparsers(dest="calibrate_command", metavar="SOURCE")
    sub.required = True
    n = sub.add_parser(
        "nccl-tests",
        help="fit the NCCL collective model to nccl-tests logs; write a calibrated cluster file",
        description="Reads nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf, "
        "sendrecv_perf, ...) of one fabric, fits the intra-node and network bandwidths and latencies, prints the fit "
        "table and writes the base cluster with a fitted nccl: section.",
    )
    n.add_argument("logs", nargs="+", metavar="LOG", help="nccl-tests output files (one table each)")
    n.add_argument("-o", "--output", required=True, metavar="CLUSTER.yaml", help="calibrated cluster file to write")
    n.add_argument("--base", metavar="FILE_OR_PRESET", help="cluster to calibrate (default: a preset for the logs' GPU)")
    n.add_argument("--gpu", metavar="NAME", help="GPU type when the logs name none or one the catalog does not know")
    n.add_argument("--collective", help="collective of every log (when neither log nor file name says)")
    n.add_argument("--nodes", type=int, metavar="N", help="node count of every log (when the logs have no rank lines)")
    n.add_argument("--net", choices=("ib", "roce", "ethernet"), help="scale-out network kind of the fabric")
    add_device_file(n)
    n.set_defaults(func=_nccl_tests)


def _gpu_and_base(runs, args) -> tuple[str, object]:
    from xsim_trace.cluster import cluster_from_dict, load_cluster  # noqa: PLC0415
    from xsim_trace.devices import get_device  # noqa: PLC0415

    catalog = run_catalog(args)
    if args.gpu:
        gpu = get_device(args.gpu, catalog)
    else:
        named = [(r, r.gpu) for r in runs if r.gpu]
        if not named:
            raise FormatError("expected '#  Rank ... device N [0x..] GPU NAME' lines naming the GPU, found none "
                              "(pass --gpu NAME)", file=runs[0].file)
        for run, name in named:
            try:
                gpu = get_device(name, catalog)
            except ConfigError:
                raise FormatError(f"unknown GPU {name!r} (pass --gpu NAME with a type from the device catalog)",
                                  file=run.file) from None
    base = load_cluster(args.base or _BASE_BY_ARCH.get(gpu.arch, "dgx-h100"), catalog=catalog)
    if len(base.groups) != 1:
        raise ConfigError(f"expected a base cluster with one device group, found {len(base.groups)}", field="--base")
    d = base.to_dict()
    g = d["groups"][0]
    g["gpu"] = gpu  # resolved: the calibrated group carries its spec
    if args.net:
        g["nccl"] = {**g.get("nccl", {}), "net": args.net}
    nodes = max(r.n_nodes for r in runs)
    g.pop("count", None)
    g["nodes"] = max(nodes, 1)
    if max(r.ranks_per_node for r in runs) > g["devices_per_node"]:
        raise ConfigError(f"expected at most {g['devices_per_node']} ranks per node (base {base.name}), found "
                          f"{max(r.ranks_per_node for r in runs)}", field="--base")
    return gpu.name, cluster_from_dict(d, file=f"calibration base {base.name}")


def _check_output(path: Path) -> None:
    """Refuse, before the fit, an output path that is a folder or lies under a file."""
    if path.is_dir():
        raise OutputError("cannot write the output: a folder has this name", file=str(path))
    check_output_folder(path.parent)


def _check_nodes(nodes: int | None) -> None:
    if nodes is not None and nodes < 1:
        raise ConfigError(f"expected a positive node count, found {nodes}", field="--nodes")


def _nccl_tests(args: argparse.Namespace) -> int:
    from xsim_trace.network.nccl import CollKind  # noqa: PLC0415
    from xsim_trace.network.nccl.calibrate import calibrate, calibrated_cluster  # noqa: PLC0415
    from xsim_trace.network.nccl.nccltests import parse_nccl_tests  # noqa: PLC0415

    _check_output(Path(args.output))
    kind = CollKind.parse(args.collective, field="--collective") if args.collective else None
    _check_nodes(args.nodes)
    runs = [parse_nccl_tests(p, collective=kind, nodes=args.nodes) for p in args.logs]
    gpu, base = _gpu_and_base(runs, args)
    cal = calibrate(base, runs)
    out = calibrated_cluster(base, cal)
    out["name"] = Path(args.output).stem
    print(f"# calibrated {base.groups[0].name} ({gpu}) from {len(runs)} log(s); fitted: {', '.join(cal.fitted)}")
    print(f"# {'file':<28} {'collective':<14} {'ranks':>5} {'size_bytes':>12} {'measured_us':>12} {'predicted_us':>12} "
          f"{'error':>8} {'algo/proto':>16}")
    for r in cal.rows:
        print(f"  {Path(r.file).name[:28]:<28} {r.collective:<14} {r.n_ranks:>5} {r.size_bytes:>12} {r.measured_us:>12.2f} "
              f"{r.predicted_us:>12.2f} {100 * r.error:>+7.1f}% {r.algo + '/' + r.proto:>16}")
    big = [abs(r.error) for r in cal.rows if r.size_bytes >= 1 << 20]
    print(f"# median |error|: all sizes {100 * cal.median_abs_error():.1f}%"
          + (f", >= 1 MiB {100 * statistics.median(big):.1f}%" if big else ""))
    for key, value in out["groups"][0]["nccl"].items():
        print(f"#   nccl.{key}: {value}")
    for key in cal.at_bound:
        log.warning("%s stopped at the edge of its range (0.4-1.25x the base cluster's %s): the base cluster may "
                    "not describe this fabric (pass --base with its NICs and links)", key, base.name)
    header = "".join(f"# calibrated by `xsim calibrate nccl-tests` from {Path(p).name}\n" for p in args.logs)
    with atomic_write(args.output) as f:
        f.write(header + yaml.safe_dump(out, sort_keys=False))
    print(f"# wrote {args.output}")
    return 0
