"""``xsim validate TRACES --cluster FILE_OR_PRESET``: simulated vs measured step time on real captures."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from xsim_trace.cli.device_file import add_device_file, run_catalog
from xsim_trace.cli.replay import add_collective_model_flags
from xsim_trace.io import atomic_write, check_output_folder

log = logging.getLogger(__name__)

_VALIDATE_FILES = frozenset({"validation.json", "validation.png"})  # what --out holds of a validate run


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate",
        help="convert Kineto captures, replay them, compare per rank with the measured ProfilerStep",
        description="Convert Kineto captures (a file, a folder of rank files, a glob or a .tar.gz), replay "
        "them over a cluster, and compare per rank the simulated step time with the measured ProfilerStep "
        "duration, per NCCL kernel the simulated with the measured time, and the compute-only critical path.",
    )
    p.add_argument("traces", metavar="TRACES", help="Kineto capture(s): file, folder, glob or .tar.gz")
    p.add_argument("--cluster", required=True, metavar="FILE_OR_PRESET", help="cluster YAML/JSON or preset name")
    p.add_argument("--step", default=None, metavar="N", help="ProfilerStep number, or 'all' (default: the last)")
    p.add_argument("--et", metavar="ET", help="PyTorch Execution Trace(s) to convert with (xsim convert pytorch)")
    p.add_argument("--backend", default="analytical", help="network backend (default: analytical)")
    add_collective_model_flags(p)  # with one captured rank the model also gives the absent peers' skew
    p.add_argument("--out", metavar="DIR", help="write validation.json (and validation.png with --plot) here")
    p.add_argument("--plot", action="store_true", help="draw simulated vs measured (needs --out)")
    p.add_argument("--no-skew", action="store_true",
                   help="start all ranks together even when their clocks show different step starts")
    p.add_argument("--no-collectives", action="store_true", help="leave the per-collective table out of the print")
    add_device_file(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from converters.crossrank import alltoall_schedule
    from converters.kineto import convert_kineto, read_ranks
    from xsim_trace.io.sources import resolve_inputs

    from xsim_trace.errors import ConfigError
    from xsim_trace.validate.compare import format_table
    from xsim_trace.cluster import load_cluster
    from xsim_trace.validate.pipeline import validate_captures

    if args.plot and not args.out:
        raise ConfigError("--plot needs --out DIR", field="--plot")
    if args.out:
        check_output_folder(args.out)  # before the replay, not after it
    step = _step_of(args.step)
    cluster = load_cluster(args.cluster, catalog=run_catalog(args))  # fail on a bad cluster before reading the traces
    kts = read_ranks(resolve_inputs(args.traces))
    ets = None
    if args.et:
        from converters.pytorch_et import read_ets

        ets = read_ets(resolve_inputs(args.et))

    def convert(number):
        if ets is not None:
            from converters.pytorch_et import convert_pytorch

            conv = convert_pytorch(ets, kts, step=number)
        else:
            conv = convert_kineto(kts, step=number)
        return conv.traces, conv.comm_groups

    from xsim_trace.replay import ReplaySettings

    settings = ReplaySettings(collective_model=args.collective_model, nccl_algo=args.nccl_algo,
                              nccl_proto=args.nccl_proto)
    v, measured = validate_captures(args.traces, cluster, convert, backend=args.backend, step=step,
                                    skew=not args.no_skew, alltoall_order=alltoall_schedule, settings=settings)
    print(format_table(v, collectives=not args.no_collectives))
    if args.out:
        _write_outputs(Path(args.out), v, measured, plot=args.plot)
    return 0


def _step_of(text: str | None) -> int | str | None:
    """``--step``: a ProfilerStep number, ``all``, or None (the last)."""
    if text is None or text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        from xsim_trace.errors import ConfigError

        raise ConfigError(f"expected a ProfilerStep number or 'all', found {text!r}", field="--step") from None


def _write_outputs(out: Path, v, measured: dict, *, plot: bool) -> None:
    from xsim_trace.io import output_set
    from xsim_trace.validate.measured import peer_waits

    doc = v.to_dict()
    doc["measured"] = {str(r): m.to_dict() for r, m in measured.items()}
    waits = peer_waits(measured)
    if waits:  # ranks on one clock: time each rank spent in NCCL waiting for its last peer
        doc["measured_peer_wait_ns"] = {str(r): sum(w.wait_ns for w in waits if w.rank == r) for r in measured}
    # both files or neither; an old validation.png that this run does not plot is removed with the commit
    with output_set(out, _VALIDATE_FILES.__contains__, label="validate") as staged:
        with atomic_write(staged.path("validation.json")) as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        if plot:
            from xsim_trace.validate.plot import plot_validation

            plot_validation(v, staged.path("validation.png"))
    log.info("wrote %s", out)
