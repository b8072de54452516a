"""The machine-readable summary of a replay: plain JSON with a stable key order."""

from __future__ import annotations

import json
import os
from typing import Any

from xsim_trace.io import atomic_write
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
        "engine": {
            "events": result.stats.events,
            "flows": result.stats.flows,
            "collectives": result.stats.collectives,
            "closed_form_collectives": result.stats.closed_form_collectives,
        },
    }


def write_summary(result: ReplayResult, path: str | os.PathLike[str], **context: str | None) -> None:
    with atomic_write(path) as handle:
        json.dump(summary_dict(result, **context), handle, indent=2)
        handle.write("\n")
