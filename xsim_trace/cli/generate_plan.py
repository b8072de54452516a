"""``xsim generate --plan DEPLOYMENT_PLAN.yaml``: one workload per device group of a heterogeneous plan.

Chakra: ``<PREFIX>.<rank>.et`` + ``<PREFIX>.comm_groups.json`` for the whole plan, and
``<PREFIX>.cluster.yaml``: ``--cluster`` (or a cluster built from the plan's device groups) with
each rank placed on a device of its group (``xsim replay PREFIX --cluster PREFIX.cluster.yaml``).  SimAI: one text workload per
device group (``<OUT>.<group>.txt``).  Everything is built before the first file is written.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import yaml

from xsim_trace.cli.device_file import run_catalog
from xsim_trace.cli.generate import write_summary
from xsim_trace.errors import ConfigError
from xsim_trace.io import atomic_write, output_set, write_rank_set
from xsim_trace.io.rankset import CLUSTER_SUFFIX
from xsim_trace.rewrite.hetero_generate import HeteroWorkload, generate_for_plan, plan_for_generate
from xsim_trace.plan.simai_groups import group_simai_lines, simai_path

log = logging.getLogger(__name__)


def _cluster_yaml(wl: HeteroWorkload, cluster_spec: str | None, catalog=None) -> str | None:
    """``cluster_spec`` (a file or preset; default: a cluster of the plan's device groups) with
    each rank placed on a device of its plan group, as YAML.  None when the plan's own groups do
    not make a cluster (e.g. a count that does not fill whole nodes); a given cluster that cannot
    hold the plan is an error.  ``catalog``: the run's device catalog, where the cluster's GPU types resolve."""
    from xsim_trace.cluster import load_cluster
    from xsim_trace.cluster.load import cluster_to_dict
    from xsim_trace.evaluate.engine_times import place_on_cluster, plan_cluster

    if cluster_spec:
        cluster = place_on_cluster(wl.result, load_cluster(cluster_spec, catalog=catalog))
    else:
        try:
            cluster = place_on_cluster(wl.result, plan_cluster(wl.plan))
        except ConfigError as exc:
            log.warning("no cluster file for plan %s: %s", wl.plan.name, exc)
            return None
    header = (f"# {cluster_spec or 'cluster of the plan device groups'} with rank i on the device plan "
              f"{wl.plan.name} gives it\n")
    return header + yaml.safe_dump(cluster_to_dict(cluster), sort_keys=False, default_flow_style=None)


def _selected(traces: dict, ranks: list[int] | None) -> dict:
    if ranks is None:
        return traces
    bad = sorted(set(ranks) - set(traces))
    if bad:
        raise ConfigError(f"rank {bad[0]} is not in the plan's {len(traces)} ranks", field="--ranks")
    return {r: traces[r] for r in sorted(set(ranks))}


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def terminal_line(wl: HeteroWorkload, files: int, out: str) -> str:
    summary = wl.summary()
    groups = []
    for g in summary["groups"]:
        per = ", ".join(f"TP{c['tp']} {_ms(c['fwd'])}/{_ms(c['bwd'])} ms" for c in g["layer_compute_ns"])
        groups.append(f"{g['name']} {len(g['ranks'])} x {g['device']} ({per} fwd/bwd per layer)")
    oom = ("; OUT OF MEMORY: " + ", ".join(
        f"{s.label} {s.memory.total_bytes / 2**30:.1f} of {s.memory.capacity_bytes / 2**30:.0f} GiB" for s in wl.oom_stages)
           if wl.oom_stages else "; every stage fits in memory")
    return (f"wrote {files} file(s) to {out}: plan {wl.plan.name}, {summary['world_size']} ranks in "
            f"{len(groups)} group(s): {'; '.join(groups)}{oom}")


def cmd_generate_plan(args: argparse.Namespace, doc: Any, ranks: list[int] | None) -> int:
    catalog = run_catalog(args)  # the plan's devices and the cluster's GPU types resolve here, once
    plan, wmodel = plan_for_generate(doc, args.plan, model=args.model, model_file=args.model_file, catalog=catalog)
    wl = generate_for_plan(plan, wmodel, traces=args.format != "simai")
    summary = wl.summary()
    # build every output in memory first: a failure leaves no file behind
    if args.format == "simai":
        texts = {simai_path(args.out, g): "\n".join(lines) + "\n" for g, lines in group_simai_lines(wl.plan, wmodel).items()}
        with output_set(Path(args.out).parent, label="simai") as out:  # all groups' files or none
            for path, text in texts.items():
                with atomic_write(out.path(Path(path).name)) as handle:
                    handle.write(text)
        written = list(texts)
    else:
        traces = _selected(wl.result.traces, ranks)
        cluster_text = _cluster_yaml(wl, args.cluster, catalog)
        extra = {CLUSTER_SUFFIX: cluster_text} if cluster_text is not None else None
        written = [str(p) for p in write_rank_set(args.out, traces, wl.result.comm_groups, extra=extra)]
    summary["files"] = written
    write_summary(args.summary, summary)
    if not args.quiet and args.summary != "-":
        for report in wl.partition_reports:
            for line in report.lines():
                print(f"partition: {line}")
        print(terminal_line(wl, len(written), args.out))
    return 0
