"""``xsim trace dump|stats|check``: look inside Chakra .et files and rank sets."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from xsim_trace.cli.progress import progress_bar
from xsim_trace.errors import FormatError, XsimError
from xsim_trace.graph.checks import Problem, ProblemKind, check_rank_set, check_trace
from xsim_trace.graph.summary import TraceStats, node_to_json
from xsim_trace.io import find_rank_files, iter_nodes, read_comm_groups, read_et, read_metadata
from xsim_trace.io.rankset import COMM_GROUPS_SUFFIX


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="inspect Chakra .et files: dump, stats, check")
    tsub = p.add_subparsers(dest="trace_command", metavar="ACTION")
    tsub.required = True

    d = tsub.add_parser("dump", help="print the nodes of an .et file as JSON lines (metadata first)")
    d.add_argument("file", help="an .et file (plain or gzip)")
    d.add_argument("--limit", type=int, default=None, help="stop after this many nodes")
    d.add_argument("--no-metadata", action="store_true", help="omit the metadata line")
    d.set_defaults(func=cmd_dump)

    s = tsub.add_parser("stats", help="counts by node type, collective bytes by kind, compute time")
    s.add_argument("paths", nargs="+", help=".et files, rank-set prefixes or directories")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(func=cmd_stats)

    c = tsub.add_parser("check", help="structural checks; exit 1 with one line per problem")
    c.add_argument("paths", nargs="+", help=".et files, rank-set prefixes or directories")
    c.add_argument("--single", action="store_true", help="check each file alone (no cross-rank checks)")
    c.add_argument("--replay", action="store_true",
                   help="also replay each rank set that passes the static checks on an ideal switch under the default "
                        "replay settings, and report what replay refuses (a send and a receive that wait on each "
                        "other through a stream's order deadlock only when run; costs a replay per set)")
    c.set_defaults(func=cmd_check)


def _expand(path: str) -> tuple[str, dict[int, Path]] | Path:
    """A single .et file (Path), or a rank set (prefix, files).  A file is always read alone, rank
    number in its name or not (``trace stats out/run.1.et`` reads exactly that file)."""
    p = Path(path)
    if p.is_file():
        return p
    if not p.exists() and p.suffix in (".et", ".gz") and not _looks_ranked(p):
        raise FormatError("no such file", file=path)
    return find_rank_files(path)


def _looks_ranked(p: Path) -> bool:
    parts = p.name.split(".")
    return len(parts) >= 3 and parts[-2 if parts[-1] == "et" else -3].isdigit() and (
        parts[-1] == "et" or parts[-2] == "et"
    )


#: files at least this large (about 100k nodes) get a progress bar; the node count is not known up front
_BAR_MIN_FILE_BYTES = 4 << 20


def _bar(path: Path, quiet: bool, desc: str):
    small = path.stat().st_size < _BAR_MIN_FILE_BYTES
    return progress_bar(None, desc, quiet=quiet or small)


def cmd_dump(args: argparse.Namespace) -> int:
    out = sys.stdout
    if not args.no_metadata:
        meta = read_metadata(args.file)
        attrs = {a.name: (list(a.value) if isinstance(a.value, tuple) else a.value) for a in meta.attrs}
        out.write(json.dumps({"metadata": {"version": meta.version, "attrs": attrs}}, default=str) + "\n")
    for i, node in enumerate(iter_nodes(args.file)):
        if args.limit is not None and i >= args.limit:
            break
        out.write(json.dumps(node_to_json(node), default=str) + "\n")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    rows: list[tuple[str, TraceStats]] = []
    for path in args.paths:
        target = _expand(path)
        files = [(str(target), target)] if isinstance(target, Path) else [(str(f), f) for f in target[1].values()]
        for label, f in files:
            stats = TraceStats(source=str(f))
            with _bar(f, args.quiet, f"reading {f.name}") as bar:
                for node in iter_nodes(f, progress=bar.update):
                    stats.add(node)
            rows.append((label, stats))
    if args.json:
        print(json.dumps({label: s.to_dict() for label, s in rows}, indent=2))
        return 0
    for label, s in rows:
        d = s.to_dict()
        print(f"{label}: {d['nodes']} nodes")
        print("  by type:     " + ", ".join(f"{k} {v}" for k, v in d["by_type"].items()))
        if d["collectives"]:
            print("  collectives: " + ", ".join(f"{k} x{v['count']} {_fmt_bytes(v['bytes'])}" for k, v in d["collectives"].items()))
        if d["p2p_bytes"]:
            print("  p2p:         " + ", ".join(f"{k} {_fmt_bytes(v)}" for k, v in d["p2p_bytes"].items()))
        print(f"  compute:     {d['compute_ns'] / 1e6:.3f} ms on devices, {d['cpu_ns'] / 1e6:.3f} ms CPU ops")
    return 0


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def dry_replay_problems(prefix: str, traces: dict, groups: dict) -> list[Problem]:
    """What replay says of a rank set that passed the static checks: [] when it replays on an ideal switch
    (the default settings, ``analytical``), else one REPLAY problem with replay's message."""
    from xsim_trace.cluster import single_switch
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology
    from xsim_trace.replay import compile_workload, replay_compiled

    try:
        workload = compile_workload(traces, groups)
        cluster = single_switch(max(2, workload.num_ranks), 50.0, 500.0)
        replay_compiled(workload, make_backend("analytical", build_topology(cluster)), cluster=cluster)
    except XsimError as exc:
        rank, node = exc.context.get("rank"), exc.context.get("node")
        return [Problem(ProblemKind.REPLAY, exc.message, file=str(exc.context.get("file", prefix)),
                        rank=int(rank) if rank is not None else None, node=int(node) if node is not None else None)]
    return []


def cmd_check(args: argparse.Namespace) -> int:
    problems = []
    checked = 0
    for path in args.paths:
        target = _expand(path)
        if isinstance(target, Path):
            problems.extend(check_trace(read_et(target), file=str(target)))
            checked += 1
            continue
        prefix, files = target
        traces = {}
        for rank, f in files.items():
            with _bar(f, args.quiet, f"reading {f.name}") as bar:
                traces[rank] = read_et(f, rank=rank, progress=bar.update)
        checked += len(files)
        if args.single:
            for rank in sorted(traces):
                problems.extend(check_trace(traces[rank]))
        else:
            groups_path = prefix + COMM_GROUPS_SUFFIX
            groups = read_comm_groups(groups_path) if os.path.exists(groups_path) else {}
            found = check_rank_set(traces, groups)
            problems.extend(found)
            if args.replay and not found:
                problems.extend(dry_replay_problems(prefix, traces, groups))
    for p in problems:
        print(p)
    if problems:
        print(f"xsim: {len(problems)} problem(s) in {checked} file(s)", file=sys.stderr)
        return 1
    print(f"ok: {checked} file(s), no problems", file=sys.stderr)
    return 0


__all__ = ["register", "FormatError"]
