"""``xsim demo``: the bundled sample end to end in seconds (write .et rank set -> read -> replay -> report)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import xsim_trace

DEMO_CLUSTER = "dgx-h100:2"
#: where bundled sample rank sets live (a folder per sample holding <name>.<rank>.et files)
SAMPLES_DIR = Path(xsim_trace.__file__).resolve().parents[1] / "traces"


def register(sub: argparse._SubParsersAction) -> None:
    from xsim_trace.cli.replay import add_replay_options

    p = sub.add_parser("demo", help="replay the bundled sample on a preset cluster and show the report")
    p.add_argument("--out", default="xsim-demo", metavar="DIR", help="where the reports go (default ./xsim-demo)")
    p.add_argument("--cluster", default=DEMO_CLUSTER, metavar="FILE_OR_PRESET", help=f"cluster (default {DEMO_CLUSTER})")
    p.add_argument("--sample", default=None, metavar="PREFIX", help="a rank-set prefix to replay instead of the bundled sample")
    add_replay_options(p)
    p.set_defaults(func=cmd_demo, chunks=4, in_flight=2)


def bundled_sample() -> str | None:
    """The first multi-rank sample under traces/, if the package ships one."""
    from xsim_trace.errors import FormatError
    from xsim_trace.io import find_rank_files

    if not SAMPLES_DIR.is_dir():
        return None
    for d in sorted(p for p in SAMPLES_DIR.iterdir() if p.is_dir()):
        try:
            prefix, files = find_rank_files(d)
        except FormatError:
            continue
        if len(files) > 1:
            return prefix
    return None


def cmd_demo(args: argparse.Namespace) -> int:
    from xsim_trace.cli.replay import network_for, print_outputs, run_replay, settings_from_args
    from xsim_trace.io import read_rank_set, write_rank_set
    from xsim_trace.replay.sample import tp_dp_step
    from xsim_trace.report import write_reports

    settings = settings_from_args(args)
    cluster, backend = network_for(args.cluster, args.backend)
    prefix = args.sample or bundled_sample()
    with tempfile.TemporaryDirectory(prefix="xsim-demo-") as tmp:
        if prefix is None:
            world = min(cluster.num_ranks, 32)
            tp = min(8, world)
            slow = world - 3
            traces, groups = tp_dp_step(tp=tp, dp=max(world // tp, 1), layers=4, slow_rank=slow, slow_factor=1.1)
            prefix = str(Path(tmp) / "sample_tp_dp")
            write_rank_set(prefix, traces, groups)
            what = (f"a generated {len(traces)}-rank TP={tp} x DP={max(world // tp, 1)} training step (4 layers; "
                    f"rank {slow} computes 10% slower, so its peers wait for it)")
        else:
            what = f"the sample {prefix}"
        rs = read_rank_set(prefix)
        nodes = sum(len(t) for t in rs.traces.values())
        print(f"xsim demo: replaying {what}: {nodes:,} nodes")
        print(f"           on {cluster.name} ({cluster.num_ranks} GPUs) with the {backend.name} backend, "
              f"{settings.chunks} chunks / {settings.in_flight} in flight per collective\n")
        result = run_replay(rs.traces, rs.comm_groups, cluster, backend, settings, quiet=getattr(args, "quiet", False),
                            drop_missing_deps=args.drop_missing_deps)
        paths = write_reports(result, Path(args.out), timeline=not args.no_timeline, plot=not args.no_plot,
                              trace=None if args.sample is None and prefix.startswith(tmp) else prefix, cluster=str(args.cluster))
    print_outputs(result, paths)
    print("\nopen the timeline in https://ui.perfetto.dev (or chrome://tracing); "
          "replay your own traces with `xsim replay PREFIX --cluster FILE_OR_PRESET`")
    return 0
