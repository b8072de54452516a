"""``xsim plan check|partition|compare``: validate plans, show partitions, compare plans and strategies."""

from __future__ import annotations

import argparse
import json
import sys

from xsim_trace.cli.device_file import add_device_file, resolve_device, run_catalog
from xsim_trace.cli.progress import RowProgress
from xsim_trace.cli.rewrite import load_template
from xsim_trace.evaluate.compare import compare, format_table
from xsim_trace.plan.partition import resolve_partition
from xsim_trace.plan.parse import load_plan

_RESHARDS = ("direct", "leader", "broadcast")
_PARTITIONS = ("given", "uniform", "auto")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="deployment plans: check, partition, compare, search")
    psub = p.add_subparsers(dest="plan_command", metavar="ACTION")
    psub.required = True

    c = psub.add_parser("check", help="validate plan files (exit 2 with the first problem)")
    c.add_argument("plans", nargs="+")
    c.add_argument("--cluster", metavar="FILE_OR_PRESET", help="also check that the plan's devices exist in this cluster")
    add_device_file(c)
    c.set_defaults(func=cmd_check)

    t = psub.add_parser("partition", help="show the uniform or throughput-proportional layer partition of a plan")
    t.add_argument("plan")
    t.add_argument("--mode", choices=("uniform", "auto"), default="auto")
    t.add_argument("--source", default="model", help="trace prefix or 'model' (default) for the per-layer times")
    t.add_argument("--device"), t.add_argument("--tp", type=int)
    add_device_file(t)
    t.set_defaults(func=cmd_partition)

    k = psub.add_parser("compare", help="rewrite and replay several plans / strategies; print a table")
    k.add_argument("plans", nargs="+", metavar="PLAN")
    k.add_argument("--source", default="model", help="trace prefix or 'model' (default) for the templates")
    k.add_argument("--device", help="device the source was measured on")
    k.add_argument("--tp", type=int, help="TP degree the source ran at")
    k.add_argument("--reshard", default=None, help="comma list of direct,leader,broadcast or 'all' (default: the plan's)")
    k.add_argument("--partition", default=None, help="comma list of given,uniform,auto or 'all' (default: the plan's)")
    k.add_argument("--cluster", help="cluster file or preset for the engine replay (default: a cluster built from "
                                     "each plan's device groups)")
    k.add_argument("--backend", default="analytical",
                   help="network backend of the engine replay: analytical (default), analytical-ca (shares links), "
                        "flow, ns3")
    k.add_argument("--quick", action="store_true",
                   help="the closed-form estimate (stage times, pipeline fill, DP rings; milliseconds per row) instead "
                        "of rewriting and replaying on the engine")
    k.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    add_device_file(k)
    k.set_defaults(func=cmd_compare)

    from xsim_trace.cli.plan_search import register as register_search

    register_search(psub)


def _choices(text: str | None, allowed: tuple[str, ...], what: str) -> list[str | None]:
    if text is None:
        return [None]
    if text == "all":
        return list(allowed)
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in allowed]
    if bad:
        from xsim_trace.errors import ConfigError

        raise ConfigError(f"unknown {what} {bad[0]!r} (choose {', '.join(allowed)} or all)", field=f"--{what}")
    return out


def replay_for(cluster: str | None, backend: str, catalog=None):
    """The replay used by compare: the engine on ``cluster`` (None: a cluster built from each plan's
    device groups; its GPU types resolve in ``catalog``, the run's) over ``backend`` (``--quick``
    uses the closed form instead, no replay)."""
    from xsim_trace.evaluate.engine_times import engine_times

    loaded = None
    if cluster is not None:
        from xsim_trace.cluster import load_cluster

        loaded = load_cluster(cluster, catalog=catalog)
    return lambda res: engine_times(res, loaded, backend)


def cmd_check(args: argparse.Namespace) -> int:
    catalog = run_catalog(args)
    cluster = None
    if args.cluster:
        from xsim_trace.cluster import load_cluster

        cluster = load_cluster(args.cluster, catalog=catalog)
    for path in args.plans:
        plan = load_plan(path, catalog=catalog)
        if cluster is not None:
            from xsim_trace.plan.document import check_plan_fits

            check_plan_fits(plan, cluster, source=path)
        stages = sum(len(p.stages) for p in plan.pipelines)
        print(f"{path}: ok ({plan.dp} pipelines, {stages} stages, {plan.schedule.value}, reshard {plan.reshard.value}"
              f"{', layers to partition' if plan.needs_partition else ''})")
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    catalog = run_catalog(args)
    plan = load_plan(args.plan, catalog=catalog).with_strategy(partition=args.mode)
    tm = load_template(args.source, plan, device=resolve_device(args.device, catalog), tp=args.tp, catalog=catalog)
    resolved, reports = resolve_partition(plan, tm)
    for i, report in enumerate(reports):
        names = [f"pipeline {i} stage {s} ({st.group}, TP {st.tp})" for s, st in enumerate(resolved.pipelines[i].stages)]
        for line in report.lines(names):
            print(line)
    return 0


def _row_text(row) -> str:
    what = f"{row.plan} {row.reshard} {row.partition}"
    return f"{what}: infeasible ({row.infeasible})" if row.infeasible else f"{what}: {row.iteration_ns / 1e6:.2f} ms"


def cmd_compare(args: argparse.Namespace) -> int:
    catalog = run_catalog(args)
    device = resolve_device(args.device, catalog)
    plans = [load_plan(p, memory=False, catalog=catalog) for p in args.plans]  # a variant over memory is a marked row
    reshards = _choices(args.reshard, _RESHARDS, "reshard")
    partitions = _choices(args.partition, _PARTITIONS, "partition")
    total = len(plans) * len(reshards) * len(partitions)
    with RowProgress(total, "plan compare", quiet=args.quiet) as bar:
        rows = compare(plans, lambda p: load_template(args.source, p, device=device, tp=args.tp, catalog=catalog),
                       reshards=reshards, partitions=partitions, progress=lambda row: bar.update(_row_text(row)),
                       replay=replay_for(args.cluster, args.backend, catalog), closed_form=args.quick)
    if args.json:
        json.dump([r.as_dict() for r in rows], sys.stdout, indent=1)
        print()
    else:
        print(format_table(rows))
    return 0
