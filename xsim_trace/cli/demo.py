"""``xsim demo``: the bundled sample end to end in seconds: convert -> replay -> report -> validate.

When ``traces/`` ships a raw Kineto capture (a MANIFEST.json entry of kind ``kineto-capture``), the
demo converts it to a Chakra rank set in a temporary directory, replays that, writes the reports and
compares every rank's simulated step time with the measured ProfilerStep.  Otherwise it replays the
first multi-rank rank set under ``traces/``; without one, a generated TP x DP training step is
written as .et files to a temporary directory and replayed from there.  The cluster is ``--cluster``, else the sample's ``cluster`` in the
manifest, else the smallest preset whose GPU matches the capture's device, else dgx-h100:2.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xsim_trace

DEMO_CLUSTER = "dgx-h100:2"
#: where bundled sample rank sets live (a folder per sample holding <name>.<rank>.et files)
SAMPLES_DIR = Path(xsim_trace.__file__).resolve().parents[1] / "traces"


def register(sub: argparse._SubParsersAction) -> None:
    from xsim_trace.cli.replay import add_replay_options

    p = sub.add_parser("demo", help="replay the bundled sample on a preset cluster and show the report")
    p.add_argument("--out", default="xsim-demo", metavar="DIR", help="where the reports go (default ./xsim-demo)")
    p.add_argument("--cluster", default=None, metavar="FILE_OR_PRESET", help="cluster (default: the sample's, else dgx-h100:2)")
    p.add_argument("--sample", default=None, metavar="PREFIX", help="a rank-set prefix to replay instead of the bundled sample")
    p.add_argument("--generated", action="store_true", help="replay a generated TP x DP step instead of the bundled sample")
    add_replay_options(p)
    p.set_defaults(func=cmd_demo)


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


def manifest_entry(prefix: str) -> dict:
    path = SAMPLES_DIR / "MANIFEST.json"
    try:
        samples = json.loads(path.read_text(encoding="utf-8")).get("samples", [])
    except (OSError, ValueError, AttributeError):
        return {}
    folder = Path(prefix).parent.name
    return next((s for s in samples if isinstance(s, dict) and s.get("name") == folder), {})


def bundled_capture() -> tuple[Path, dict] | None:
    """The raw capture under traces/ (MANIFEST entry of kind ``kineto-capture``) and its entry."""
    path = SAMPLES_DIR / "MANIFEST.json"
    try:
        samples = json.loads(path.read_text(encoding="utf-8")).get("samples", [])
    except (OSError, ValueError, AttributeError):
        return None
    for s in samples:
        if isinstance(s, dict) and s.get("kind") == "kineto-capture":
            files = [f.get("path", "") for f in s.get("files", []) if str(f.get("path", "")).endswith((".tar.gz", ".json", ".json.gz"))]
            if files and (SAMPLES_DIR / files[0]).exists():
                return SAMPLES_DIR / files[0], s
    return None


def convert_capture(capture: Path, prefix: str):
    """Convert a bundled Kineto capture to a rank set at ``prefix``; returns the conversion."""
    from converters import convert_kineto, read_ranks, resolve_inputs

    from xsim_trace.io import write_rank_set

    conv = convert_kineto(read_ranks(resolve_inputs(str(capture))))
    write_rank_set(prefix, conv.traces, conv.comm_groups)
    return conv


def cluster_for_device(device: str | None, ranks: int) -> str | None:
    """The smallest preset with a GPU of the capture's family (``V100`` in ``Tesla V100-SXM2-32GB``)."""
    from xsim_trace.cluster import load_cluster, preset_names

    if not device:
        return None
    name = device.upper()
    fits = []
    for preset in preset_names():
        c = load_cluster(preset)
        if c.num_ranks >= ranks and any(g.gpu_type.split("-")[0].upper() in name for g in c.groups):
            fits.append((c.num_ranks, len(c.groups), preset))
    return min(fits)[2] if fits else None


@dataclass(frozen=True)
class _DemoInput:
    """What the demo replays: the rank set, where, and how the banner names it."""

    rs: Any  # xsim_trace.io.RankSet
    cluster: Any  # xsim_trace.cluster.Cluster
    backend: Any  # a network backend
    what: str
    shown_prefix: str | None  # the trace named in the reports (None: a temporary folder)


def cmd_demo(args: argparse.Namespace) -> int:
    from xsim_trace.cli.replay import print_outputs, run_replay, settings_from_args
    from xsim_trace.report import write_reports

    settings = settings_from_args(args)
    capture = None if (args.sample or args.generated) else bundled_capture()
    prefix = args.sample or (None if args.generated else bundled_sample())
    conversion = None
    with tempfile.TemporaryDirectory(prefix="xsim-demo-") as tmp:
        if capture is not None:
            prefix = str(Path(tmp) / "capture")
            conversion = _convert_shown(capture, prefix)
        demo = _generated_input(args, tmp) if prefix is None else _sample_input(args, prefix, capture)
        _print_banner(demo, settings, from_capture=capture is not None)
        result = run_replay(demo.rs.traces, demo.rs.comm_groups, demo.cluster, demo.backend, settings,
                            quiet=args.quiet, drop_missing_deps=args.drop_missing_deps, fold=not args.no_fold)
        paths = write_reports(result, Path(args.out), timeline=not args.no_timeline, plot=not args.no_plot,
                              trace=demo.shown_prefix, cluster=demo.cluster.name)
        measured = [t.measured_step_ns for t in demo.rs.traces.values() if t.measured_step_ns]
    print_outputs(result, paths)
    if conversion is not None:
        _print_validation(capture[0], conversion, demo)
    elif measured:
        from xsim_trace.report import fmt_ns

        print(f"\ncaptured step time per rank: {fmt_ns(min(measured))} .. {fmt_ns(max(measured))} "
              "(`xsim validate` compares rank by rank, with the capture's start skew)")
    print("\nopen the timeline in https://ui.perfetto.dev (or chrome://tracing); "
          "replay your own traces with `xsim replay PREFIX --cluster FILE_OR_PRESET`")
    return 0


def _convert_shown(capture: tuple[Path, dict], prefix: str):
    """The bundled capture converted to ``prefix``, with the lines that say so."""
    t0 = time.perf_counter()
    conversion = convert_capture(capture[0], prefix)
    n = sum(len(t) for t in conversion.traces.values())
    print(f"xsim demo: converted {capture[0].name} ({capture[1].get('description', 'a Kineto capture')})")
    print(f"           -> {len(conversion.traces)} Chakra rank files, {n:,} nodes, in {time.perf_counter() - t0:.1f} s "
          f"(`xsim-convert kineto {capture[0].name} -o PREFIX` does the same)\n")
    return conversion


def _generated_input(args: argparse.Namespace, tmp: str) -> _DemoInput:
    """A generated TP x DP step (one rank 10% slower) written to ``tmp`` and read back."""
    from xsim_trace.cli.replay import network_for
    from xsim_trace.io import read_rank_set, write_rank_set
    from xsim_trace.replay.sample import tp_dp_step

    cluster, backend = network_for(args.cluster or DEMO_CLUSTER, args.backend)
    world = min(cluster.num_ranks, 32)
    tp = min(8, world)
    slow = world - 3
    traces, groups = tp_dp_step(tp=tp, dp=max(world // tp, 1), layers=4, slow_rank=slow, slow_factor=1.1)
    prefix = str(Path(tmp) / "sample_tp_dp")
    write_rank_set(prefix, traces, groups)
    what = (f"a generated {len(traces)}-rank TP={tp} x DP={max(world // tp, 1)} training step (4 layers; "
            f"rank {slow} computes 10% slower, so its peers wait for it)")
    return _DemoInput(read_rank_set(prefix), cluster, backend, what, None)


def _sample_input(args: argparse.Namespace, prefix: str, capture: tuple[Path, dict] | None) -> _DemoInput:
    """A rank set on disk (the bundled one, --sample's, or the converted capture) and its cluster:
    --cluster, else the manifest's, else the smallest preset of the traces' GPU."""
    from xsim_trace.cli.replay import network_for
    from xsim_trace.graph import attrs as A
    from xsim_trace.io import read_rank_set

    rs = read_rank_set(prefix)
    entry = manifest_entry(rs.prefix)
    if capture is not None:
        converted = capture[1].get("converted")
        entry = {**(manifest_entry(str(SAMPLES_DIR / converted / "x")) if converted else {}),
                 **{k: v for k, v in capture[1].items() if k == "cluster"}}
    device = rs.traces[0].metadata.attr(A.META_DEVICE)
    spec = args.cluster or entry.get("cluster") or cluster_for_device(device, len(rs.traces)) or DEMO_CLUSTER
    cluster, backend = network_for(spec, args.backend)
    what = entry.get("description") or f"the sample {rs.prefix}"
    return _DemoInput(rs, cluster, backend, what, None if capture is not None else rs.prefix)


def _print_banner(demo: _DemoInput, settings, *, from_capture: bool) -> None:
    nodes = sum(len(t) for t in demo.rs.traces.values())
    print(f"xsim demo: replaying {demo.what}")
    if from_capture:
        print("           (this replay starts every rank at t=0; the comparison at the end starts each at its "
              "measured offset)")
    print(f"           {len(demo.rs.traces)} ranks, {nodes:,} nodes, on {demo.cluster.name} ({demo.cluster.num_ranks} "
          f"GPUs) with the {demo.backend.name} backend, {settings.chunks} chunk(s) / {settings.in_flight} in flight "
          f"per collective\n")


def _print_validation(capture_path: Path, conversion, demo: _DemoInput) -> None:
    """The capture's ranks, simulated vs measured, each starting at its measured offset."""
    from converters.crossrank import alltoall_schedule

    from xsim_trace.validate.compare import format_table
    from xsim_trace.validate.pipeline import validate_captures

    v, _ = validate_captures(str(capture_path), demo.cluster, lambda _step: (conversion.traces, conversion.comm_groups),
                             backend=demo.backend.name, alltoall_order=alltoall_schedule)
    print("\nsimulated vs measured, rank by rank (each rank starts at its measured step-start offset; "
          "`xsim validate` does this for any capture):")
    print(format_table(v, collectives=False))
