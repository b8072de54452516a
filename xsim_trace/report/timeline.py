"""The simulated run as a Chrome-trace / Perfetto JSON timeline: pid = rank, tid = stream.

Times are written in microseconds with ns precision (the Chrome trace unit).  Collectives show
their straggler wait as a separate ``wait`` slice before the transfer.
"""

from __future__ import annotations

import json
import os

import numpy as np

from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.io import atomic_write
from xsim_trace.replay.compile import COMM_KINDS, K_COLL, K_TIMED
from xsim_trace.replay.results import ReplayResult

#: a timeline larger than this is cut (the summary still covers everything)
MAX_EVENTS = 2_000_000


def _us(ns: int) -> float:
    return ns / 1000.0


def _category(kind: int, ntype: int, comm_kind: int) -> str:
    if kind == K_TIMED:
        return "compute" if ntype == NodeType.COMP else NodeType(ntype).name.lower() if ntype in NodeType._value2member_map_ else "other"
    return f"comm:{COMM_KINDS[comm_kind]}"


def write_timeline(result: ReplayResult, path: str | os.PathLike[str], *, max_events: int = MAX_EVENTS) -> int:
    """Write the timeline; returns the number of node slices written."""
    w, t = result.workload, result.times
    n = min(w.num_nodes, max_events)
    start, end, wait = t.start_ns.tolist(), t.end_ns.tolist(), t.wait_ns.tolist()
    kind, ntype, ckind = w.exec_kind.tolist(), w.node_type.tolist(), w.comm_kind.tolist()
    ctype, csize, res, node_id = w.comm_type.tolist(), w.comm_size.tolist(), w.resource.tolist(), w.node_id.tolist()
    tid_of, rank_of_res = w.resource_tid.tolist(), w.resource_rank.tolist()
    with atomic_write(path) as out:
        out.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
        first = True

        def emit(obj) -> None:
            nonlocal first
            out.write(("" if first else ",\n") + json.dumps(obj, separators=(",", ":")))
            first = False

        for r in range(w.num_ranks):
            emit({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
            emit({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
        for rid in range(w.num_resources):
            emit({"ph": "M", "name": "thread_name", "pid": rank_of_res[rid], "tid": tid_of[rid], "args": {"name": w.resource_label[rid]}})
        rank_ptr = w.rank_ptr.tolist()
        r = 0
        for i in range(n):
            while i >= rank_ptr[r + 1]:
                r += 1
            pid, tid = r, tid_of[res[i]]
            s, e = start[i], end[i]
            args = {"node": node_id[i]}
            if kind[i] != K_TIMED:
                args["bytes"] = csize[i]
            if kind[i] == K_COLL:
                args["collective"] = CollectiveType(ctype[i]).name if 0 <= ctype[i] <= 9 else ctype[i]
            if kind[i] != K_TIMED and wait[i] > 0:
                wt = min(wait[i], e - s)
                cat = "straggler_wait" if kind[i] == K_COLL else "p2p_wait"
                emit({"ph": "X", "name": "wait", "cat": cat, "pid": pid, "tid": tid, "ts": _us(s), "dur": _us(wt)})
                s += wt
            emit({"ph": "X", "name": w.names[i] or f"node {node_id[i]}", "cat": _category(kind[i], ntype[i], ckind[i]), "pid": pid, "tid": tid, "ts": _us(s), "dur": _us(e - s), "args": args})
        out.write("\n]}\n")
    return n


def timeline_extent_ns(result: ReplayResult) -> int:
    return int(np.max(result.times.end_ns)) if result.workload.num_nodes else 0
