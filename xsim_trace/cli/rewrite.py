"""``xsim rewrite SOURCE --plan FILE --out PREFIX``: re-plan a trace (or a model) for a deployment plan."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from xsim_trace.cli.device_file import add_device_file, resolve_device, run_catalog
from xsim_trace.devices.catalog import Catalog
from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.errors import ConfigError
from xsim_trace.graph.model import Trace
from xsim_trace.io import find_rank_files, read_et, write_rank_set
from xsim_trace.plan.model import Plan
from xsim_trace.plan.parse import load_plan
from xsim_trace.rewrite.rewriter import RewriteResult, rewrite
from xsim_trace.layer_templates.template import ModelTemplate, extract_templates, templates_from_model

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rewrite", help="rewrite a trace or a model for a heterogeneous deployment plan",
                       description="Build per-rank Chakra traces for PLAN from per-layer templates: of a captured or "
                                   "generated rank set (TRACE_PREFIX), or of the plan's model timed by the device "
                                   "catalog (the word 'model' or a model preset name).")
    p.add_argument("source", metavar="TRACE_PREFIX_OR_MODEL", help="rank-set prefix / directory / .et file, or 'model'")
    p.add_argument("--plan", required=True, help="deployment plan (YAML or JSON)")
    p.add_argument("--out", required=True, help="output prefix: writes PREFIX.<rank>.et and PREFIX.comm_groups.json")
    p.add_argument("--device", help="device the source was measured on (default: the trace's device_name; for a "
                                    "model: the first device group's)")
    p.add_argument("--tp", type=int, help="TP degree the source ran at (default: its tp_degree metadata, else 1)")
    p.add_argument("--rank", type=int, default=0, help="rank of the source set to take templates from (default 0)")
    p.add_argument("--reshard", choices=("direct", "leader", "broadcast"), help="override the plan's strategy")
    p.add_argument("--partition", choices=("given", "uniform", "auto"), help="override the plan's partition mode")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="rewrite even when the trace's seq_len / micro_batch_size / device disagree with the plan / --device")
    add_device_file(p)
    p.set_defaults(func=cmd_rewrite)


def load_template(source: str, plan: Plan, *, device: DeviceSpec | None = None, tp: int | None = None, rank: int = 0,
                  check: bool = True, catalog: Catalog | None = None) -> ModelTemplate:
    """Templates from a trace (path or prefix) or, for ``model`` / a preset name, from the plan's model.
    ``device`` (resolved at the boundary): the device the source was measured on; a trace's own
    ``device_name`` resolves in ``catalog`` (the run's; None = the built-in one).  ``check``: refuse a
    trace whose sequence length, micro-batch size or device disagree with the plan / ``device``
    (:mod:`xsim_trace.rewrite.guards`)."""
    path = Path(source)
    looks_like_trace = path.exists() or path.parent.is_dir() and any(
        c.name.startswith(path.name + ".") and ".et" in c.name for c in path.parent.iterdir())
    if not looks_like_trace:
        from xsim_trace.workload.model import list_models

        if source != "model" and source not in list_models():
            raise ConfigError(f"neither a trace nor 'model' / a model preset ({', '.join(list_models())})",
                              field="TRACE_PREFIX_OR_MODEL")
        if source not in ("model", plan.model.name):
            log.warning("plan %s describes model %r; using the plan's geometry for %r", plan.name, plan.model.name, source)
        return templates_from_model(plan.model, device or plan.groups[0].device_spec, tp or 1)
    if path.is_file() and not path.name.split(".")[-2 if path.name.endswith(".et") else -3].isdigit():
        trace = read_et(path)
    else:
        _, files = find_rank_files(source)
        if rank not in files:
            raise ConfigError(f"rank {rank} is not in the set (ranks 0..{max(files)})", file=source, field="--rank")
        trace = read_et(files[rank])
    _refuse_broken(trace)
    if check:
        from xsim_trace.rewrite.guards import check_source_device, check_trace_shape

        check_trace_shape(trace, plan.model, source=source, flag="--allow-mismatch")
        check_source_device(trace, device, source=source, flag="--allow-mismatch", catalog=catalog)
    return extract_templates(trace, device=device, tp=tp, model=plan.model, catalog=catalog)


def _refuse_broken(trace: Trace) -> None:
    """A template source whose graph is broken (a cycle, duplicate ids, values out of range) is
    refused as replay refuses it; a dependency on a node absent from the file is not (templates take
    per-layer kernel times, not the dependencies, and captures often reference nodes outside the step)."""
    from xsim_trace.graph.checks import ProblemKind, check_trace, raise_problems

    raise_problems([p for p in check_trace(trace) if p.kind is not ProblemKind.DANGLING_DEP])


def cmd_rewrite(args: argparse.Namespace) -> int:
    catalog = run_catalog(args)
    plan = load_plan(args.plan, catalog=catalog).with_strategy(reshard=args.reshard, partition=args.partition)
    template = load_template(args.source, plan, device=resolve_device(args.device, catalog), tp=args.tp, rank=args.rank,
                             check=not args.allow_mismatch, catalog=catalog)
    res: RewriteResult = rewrite(plan, template)
    write_rank_set(args.out, res.traces, res.comm_groups)
    for report in res.partition_reports:
        for line in report.lines():
            print(f"partition: {line}")
    nodes = sum(len(t) for t in res.traces.values())
    print(f"wrote {len(res.traces)} ranks ({nodes} nodes, {len(res.comm_groups)} comm groups) to {args.out}.<rank>.et "
          f"for plan {res.plan.name} ({res.plan.schedule.value}, reshard {res.plan.reshard.value})")
    return 0
