"""The machine-readable summary of a replay: plain JSON with a stable key order."""

from __future__ import annotations

import json
import os
from typing import Any

from xsim_trace.io import atomic_write
from xsim_trace.replay.compile import ROLE_CPU
from xsim_trace.replay.results import Breakdown, ReplayResult

SUMMARY_SCHEMA = "xsim.replay.summary/1"


def breakdown_dict(b: Breakdown) -> dict[str, Any]:
    return {
        "iteration_ns": b.iteration_ns,
        "compute_ns": b.compute_ns,
        "exposed_comm_ns": {k: v for k, v in b.exposed_comm_ns},
        "exposed_comm_total_ns": b.exposed_comm_total_ns,
        "straggler_wait_ns": b.straggler_wait_ns,
        "p2p_wait_ns": b.p2p_wait_ns,
        "host_ns": b.host_ns,
        "idle_ns": b.idle_ns,
    }


#: the critical path's longest nodes listed in the summary
CRITICAL_TOP = 10


def critical_path_dict(result: ReplayResult) -> dict[str, Any]:
    from xsim_trace.replay.critical import critical_path

    path = critical_path(result.workload, result.times)
    w = result.workload
    kinds, waits, starts = w.exec_kind, result.times.wait_ns, result.times.start_ns
    host = w.resource_role[w.resource] == ROLE_CPU
    total = {"compute_ns": 0, "host_ns": 0, "comm_ns": 0, "wait_ns": 0}

    def wait_on_path(p) -> int:
        return max(0, min(int(starts[p.index] + waits[p.index]), p.end_ns) - p.start_ns)

    for p in path:
        dur, wt = p.end_ns - p.start_ns, wait_on_path(p)
        if int(kinds[p.index]) == 0:
            total["host_ns" if host[p.index] else "compute_ns"] += dur
        else:
            total["comm_ns"] += dur - wt
            total["wait_ns"] += wt
    top = sorted(path, key=lambda p: (-(p.end_ns - p.start_ns), p.start_ns, p.index))[:CRITICAL_TOP]
    return {
        "nodes": len(path),
        "ranks": sorted({p.rank for p in path}),
        **total,
        "longest": [
            {"rank": p.rank, "node": p.node_id, "name": p.name, "start_ns": p.start_ns,
             "duration_ns": p.end_ns - p.start_ns, "wait_ns": wait_on_path(p)}
            for p in top
        ],
    }


def summary_dict(result: ReplayResult, *, trace: str | None = None, cluster: str | None = None) -> dict[str, Any]:
    """Keys appear in this order on every run."""
    w = result.workload
    return {
        "schema": SUMMARY_SCHEMA,
        "trace": trace,
        "cluster": cluster,
        "backend": result.backend,
        "settings": result.settings.to_json(),
        "num_ranks": w.num_ranks,
        "num_nodes": w.num_nodes,
        "iteration_ns": result.iteration_ns,
        "iteration_ms": round(result.iteration_ns / 1e6, 6),
        "groups": [
            {"name": g.name, "ranks": list(g.ranks), "iteration_ns": g.iteration_ns, "mean_per_rank": breakdown_dict(g.mean)}
            for g in result.groups
        ],
        "ranks": [
            {"rank": r.rank, "group": r.group, **breakdown_dict(r.breakdown), "comm_busy_ns": r.comm_busy_ns}
            for r in result.ranks
        ],
        "critical_path": critical_path_dict(result),
        "engine": {
            "events": result.stats.events,
            "flows": result.stats.flows,
            "collectives": result.stats.collectives,
            "closed_form_collectives": result.stats.closed_form_collectives,
            # ranks not simulated: each took the times of an equivalent simulated rank (xsim_trace.replay.fold)
            "folded_ranks": result.stats.folded_ranks,
        },
    }


def write_summary(result: ReplayResult, path: str | os.PathLike[str], **context: str | None) -> None:
    with atomic_write(path) as handle:
        json.dump(summary_dict(result, **context), handle, indent=2)
        handle.write("\n")
