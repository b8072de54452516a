"""``xsim convert kineto|pytorch|text`` (also ``xsim-convert ...``): captured traces -> Chakra rank sets.

The front end only: argument parsing, progress bars, the summary printed at the end.  The work is
done by the ``converters`` package.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from xsim_trace.cli.progress import progress_bar
from xsim_trace.errors import ConfigError
from xsim_trace.io import write_rank_set

#: input files at least this large (bytes, all together) get a progress bar
_BAR_MIN_BYTES = 8 << 20


def _step(value: str) -> int | str:
    if value == "all":
        return value
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a ProfilerStep number or 'all', found {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative step number, found {n}")
    return n


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert Kineto / PyTorch ET / text workloads to Chakra .et rank sets")
    csub = p.add_subparsers(dest="convert_command", metavar="FORMAT")
    csub.required = True

    k = csub.add_parser("kineto", help="PyTorch profiler (Kineto) JSON, one file per rank")
    k.add_argument("input", help="a file, a folder of rank files, a glob, or a .tar.gz holding them")
    _common(k)
    k.set_defaults(func=cmd_kineto)

    t = csub.add_parser("pytorch", help="PyTorch Execution Trace + Kineto, linked by rf_id / correlation")
    t.add_argument("--et", required=True, help="ET JSON: file, folder, glob or .tar.gz (one per rank)")
    t.add_argument("--kineto", required=True, help="Kineto JSON: file, folder, glob or .tar.gz (one per rank)")
    _common(t)
    t.set_defaults(func=cmd_pytorch)

    x = csub.add_parser("text", help="Chakra Text / SimAI-AICB workload (.txt)")
    x.add_argument("input", help="a workload .txt file")
    x.add_argument("-o", "--output", required=True, help="output prefix: writes PREFIX.<rank>.et + PREFIX.comm_groups.json")
    x.add_argument("--num-npus", type=int, default=None,
                   help="ranks to write (default: the workload's all_gpus, else its model-parallel group, else 2)")
    x.add_argument("--num-passes", type=int, default=1, help="training iterations to unroll (default 1)")
    x.add_argument("--time-unit", choices=("auto", "ns", "us"), default="auto",
                   help="unit of the compute times (auto: ns for SimAI/AICB files, us for Chakra Text)")
    x.set_defaults(func=cmd_text)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", required=True, help="output prefix: writes PREFIX.<rank>.et + PREFIX.comm_groups.json")
    p.add_argument("--step", type=_step, default=None,
                   help="ProfilerStep number to convert, or 'all' for the whole capture (default: the last complete step)")
    p.add_argument("--alltoall", choices=("p2p", "coll"), default="p2p",
                   help="all-to-all as per-peer SEND/RECV (p2p, default) or one COMM_COLL node")
    p.add_argument("--compress", action="store_true", help="write .et.gz")


def _read(sources: list, quiet: bool, desc: str) -> list:
    from converters.kineto import read_ranks

    known = all(s.size_bytes is not None and not s.name.endswith(".gz") for s in sources)
    total = sum(s.size_bytes or 0 for s in sources) if known else None  # progress counts decompressed bytes
    small = sum(s.size_bytes or 0 for s in sources) < _BAR_MIN_BYTES // (1 if known else 8)
    with progress_bar(total, desc, quiet=quiet or small, unit="B") as bar:
        return read_ranks(sources, progress=bar.update)


def _summary(prefix: str, conv: Any, paths: list, quiet: bool) -> None:
    """The conversion's result on stdout; the files written on stderr, unless quiet."""
    from converters.summary import describe

    print(describe(conv, prefix))
    if not quiet:
            print(f"wrote {len(paths)} file(s): {paths[0]} ... {paths[-1]}" if len(paths) > 1 else f"wrote {paths[0]}",
              file=sys.stderr)


def cmd_kineto(args: argparse.Namespace) -> int:
    from converters.kineto import convert_kineto
    from xsim_trace.io.sources import resolve_inputs

    sources = resolve_inputs(args.input)
    kts = _read(sources, args.quiet, "reading Kineto")
    conv = convert_kineto(kts, step=args.step, alltoall=args.alltoall, consume=True)
    paths = write_rank_set(args.output, conv.traces, conv.comm_groups, compress=args.compress)
    _summary(args.output, conv, paths, args.quiet)
    return 0


def cmd_pytorch(args: argparse.Namespace) -> int:
    from converters.pytorch_et import convert_pytorch, read_ets
    from xsim_trace.io.sources import resolve_inputs

    kts = _read(resolve_inputs(args.kineto), args.quiet, "reading Kineto")
    ets = read_ets(resolve_inputs(args.et))
    conv = convert_pytorch(ets, kts, step=args.step, alltoall=args.alltoall)
    paths = write_rank_set(args.output, conv.traces, conv.comm_groups, compress=args.compress)
    _summary(args.output, conv, paths, args.quiet)
    return 0


def cmd_text(args: argparse.Namespace) -> int:
    from converters.text import convert_text_file

    if args.num_npus is not None and args.num_npus < 1:
        raise ConfigError(f"expected a positive number of NPUs, found {args.num_npus}", field="--num-npus")
    if args.num_passes < 1:
        raise ConfigError(f"expected a positive number of passes, found {args.num_passes}", field="--num-passes")
    conv = convert_text_file(args.input, num_npus=args.num_npus, num_passes=args.num_passes, time_unit=args.time_unit)
    paths = write_rank_set(args.output, conv.traces, conv.comm_groups)
    _summary(args.output, conv, paths, args.quiet)
    return 0
