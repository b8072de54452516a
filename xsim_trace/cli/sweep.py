"""``xsim sweep SPEC``: many (plan, cluster, backend) runs, resumable, in a pool or on Ray."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xsim_trace.cli.progress import progress_bar
from xsim_trace.sweep.execute import run_sweep
from xsim_trace.sweep.spec import load_spec
from xsim_trace.sweep.summary import plot_best, summary_table, write_summary_json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="run a parameter sweep from a YAML spec (resumable results.jsonl, summary of the best runs)",
        description="Runs every combination of the spec not yet in OUT/results.jsonl; a restart skips finished "
        "runs. Locally in a process pool (--jobs) or on Ray (--ray ADDRESS, or --ray local).",
    )
    p.add_argument("spec", type=Path, help="sweep spec (YAML: runner, base, grid, runs, metric, top)")
    p.add_argument("-o", "--out", type=Path, help="results folder (default: <spec name>.sweep next to the spec)")
    p.add_argument("-j", "--jobs", type=int, help="parallel runs, each in a worker process of its own (default: CPU count)")
    p.add_argument("--ray", metavar="ADDRESS", help="run on a Ray cluster at ADDRESS ('local' starts one here)")
    p.add_argument("--retry-errors", action="store_true", help="run again the combinations that failed before")
    p.add_argument("--top", type=int, help="rows in the summary table (default: the spec's top)")
    p.add_argument("--metric", help="result field to rank by (default: the spec's metric)")
    p.add_argument("--plot", type=Path, help="write a bar chart of the best runs (png, pdf, svg)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and which are already done; run nothing")
    p.set_defaults(func=_sweep)


def _sweep(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    out = args.out or args.spec.with_name(f"{args.spec.stem}.sweep")
    metric = args.metric or spec.metric
    top = args.top or spec.top
    if args.dry_run:
        from xsim_trace.sweep.results import RESULTS_FILE, read_results  # noqa: PLC0415

        done = read_results(out / RESULTS_FILE)
        for run in spec.runs:
            state = done[run.key]["status"] if run.key in done else "todo"
            print(f"{run.key}  {state:<5}  " + " ".join(f"{k}={run.params.get(k)}" for k in spec.varying))
        return 0
    bar = None

    def on_plan(todo: int, skipped: int) -> None:
        nonlocal bar
        print(f"sweep {spec.name}: {len(spec.runs)} runs, {skipped} already done, {todo} to run -> {out}",
              file=sys.stderr)
        # runs are few and slow: a bar even for small sweeps
        bar = progress_bar(todo, f"sweep {spec.name}", quiet=args.quiet, unit="run", min_items=1, mininterval=0.2)

    def on_record(record: dict) -> None:
        if bar is not None:
            bar.update(1)

    try:
        outcome = run_sweep(spec, out, jobs=args.jobs, ray_address=args.ray, retry_errors=args.retry_errors,
                            on_record=on_record, on_plan=on_plan)
    finally:
        if bar is not None:
            bar.close()
    records = outcome.records
    print(summary_table(records, metric, spec.varying, top))
    write_summary_json(out / "summary.json", records, metric, top)
    failed = outcome.failed
    if failed:
        print(f"{len(failed)} of {len(records)} runs failed; first: {failed[0]['key']}: {failed[0].get('error')}",
              file=sys.stderr)
    if args.plot:
        plot_best(args.plot, records, metric, spec.varying, top)
    return 1 if failed and len(failed) == len(records) else 0
