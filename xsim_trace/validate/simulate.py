"""The simulated side of validation: replay converted per-rank graphs and read back, per rank, the step
time in ProfilerStep terms and the time of each communication operation.

ProfilerStep#N is a host-side span, so a rank's simulated step ends when its last host node ends (GPU
work launched in the step may run past it, as in the capture); it starts at the rank's start offset.
"""

from __future__ import annotations

import logging
from typing import Callable, Mapping

import numpy as np

from xsim_trace.graph.kinds import NodeType
from xsim_trace.graph.model import Trace
from xsim_trace.validate.commops import comm_operations
from xsim_trace.validate.compare import SimulatedCollective, SimulatedRank, compute_only_critical_path_ns
from xsim_trace.validate.scenario import with_start_offset

log = logging.getLogger(__name__)



def _label(trace: Trace, positions: list[int]) -> tuple[str, int]:
    first = trace.nodes[positions[0]]
    ctype = first.comm_type
    if first.type == NodeType.COMM_COLL and ctype is not None:
        name = ctype.name
    elif ctype is not None and len(positions) > 1:
        name = f"{ctype.name}(p2p)"  # an all-to-all as per-peer sends and receives
    else:
        name = "SEND" if first.type == NodeType.COMM_SEND else "RECV"
    size = sum(trace.nodes[p].comm_size_bytes for p in positions if trace.nodes[p].type != NodeType.COMM_RECV)
    return name, size


def simulate(
    traces: Mapping[int, Trace],
    comm_groups: Mapping[str, tuple[int, ...]] | None,
    run: Callable[[Mapping[int, Trace], Mapping[str, tuple[int, ...]] | None], tuple[np.ndarray, np.ndarray, np.ndarray]],
    *,
    start_offsets_ns: Mapping[int, int] | None = None,
    report_ranks: tuple[int, ...] | None = None,
) -> dict[int, SimulatedRank]:
    """Replay ``traces`` with ``run`` and summarise ``report_ranks`` (default: all).

    ``run(traces, comm_groups)`` returns ``(rank_ptr, start_ns, end_ns)`` over the concatenation of the
    ranks' nodes in rank order and file order (the replay engine's global node index)."""
    offsets = {r: int((start_offsets_ns or {}).get(r, 0)) for r in traces}
    shifted = {r: with_start_offset(traces[r], offsets[r]) for r in sorted(traces)}
    rank_ptr, start_ns, end_ns = run(shifted, comm_groups)
    out: dict[int, SimulatedRank] = {}
    for idx, r in enumerate(sorted(shifted)):
        if report_ranks is not None and r not in report_ranks:
            continue
        tr = shifted[r]
        base = int(rank_ptr[idx])
        host_end = max(
            (int(end_ns[base + i]) for i, n in enumerate(tr.nodes) if n.is_cpu_op),
            default=int(end_ns[base:int(rank_ptr[idx + 1])].max(initial=0)),
        )
        colls = []
        for positions in comm_operations(tr):
            s = min(int(start_ns[base + p]) for p in positions)
            e = max(int(end_ns[base + p]) for p in positions)
            name, size = _label(tr, positions)
            colls.append(SimulatedCollective(tr.nodes[positions[0]].id, tr.nodes[positions[0]].name, name, size, e - s))
        out[r] = SimulatedRank(
            rank=r,
            step_ns=host_end - offsets[r],
            start_offset_ns=offsets[r],
            compute_path_ns=compute_only_critical_path_ns(traces[r]),
            collectives=tuple(colls),
        )
    return out
