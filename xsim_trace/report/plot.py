"""The breakdown as a stacked bar chart (PNG, matplotlib Agg): one bar per rank, or per device
group when there are many ranks."""

from __future__ import annotations

import io
import os

from xsim_trace.io import atomic_write
from xsim_trace.replay.compile import COMM_KINDS
from xsim_trace.replay.results import Breakdown, ReplayResult

#: above this many ranks the chart shows device groups (mean rank) instead of ranks
MAX_RANK_BARS = 32

_COLORS = {
    "compute": "#4C72B0",
    "tp": "#DD8452",
    "dp": "#C44E52",
    "pp": "#8172B3",
    "reshard": "#937860",
    "ep": "#DA8BC3",
    "other": "#CCB974",
    "straggler wait": "#8C8C8C",
    "p2p wait": "#B0B0B0",
    "host": "#64B5CD",
    "idle": "#E5E5E5",
}


def _label(name: str) -> str:
    """The legend says what the terminal table's columns say."""
    if name in COMM_KINDS:
        return f"exposed {name}"
    if name == "host":
        return "host (CPU ops, no GPU work)"
    return name


def _parts(b: Breakdown) -> list[tuple[str, int]]:
    return (
        [("compute", b.compute_ns)]
        + [(k, b.exposed(k)) for k in COMM_KINDS]
        + [("straggler wait", b.straggler_wait_ns), ("p2p wait", b.p2p_wait_ns), ("host", b.host_ns), ("idle", b.idle_ns)]
    )


def breakdown_png(result: ReplayResult) -> bytes:
    if len(result.ranks) <= MAX_RANK_BARS:
        labels = [f"rank {r.rank}" for r in result.ranks]
        rows = [r.breakdown for r in result.ranks]
        title = "where each rank's iteration goes"
    else:
        labels = [f"{g.name} ({len(g.ranks)})" for g in result.groups]
        rows = [g.mean for g in result.groups]
        title = "where the iteration goes (mean rank per device group)"
    from matplotlib.figure import Figure  # only when a plot is drawn: importing it costs ~0.5 s

    scale, unit = (1e6, "ms") if result.iteration_ns >= 1e6 else (1e3, "us")
    fig = Figure(figsize=(9, 1.4 + 0.35 * len(rows)), dpi=100)
    ax = fig.subplots()
    left = [0.0] * len(rows)
    names = [name for name, _ in _parts(rows[0])] if rows else []
    for j, name in enumerate(names):
        vals = [_parts(b)[j][1] / scale for b in rows]
        if not any(vals):
            continue
        ax.barh(labels, vals, left=left, color=_COLORS[name], label=_label(name), edgecolor="none")
        left = [a + v for a, v in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit}); iteration = {result.iteration_ns / scale:.3f} {unit}")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def write_breakdown_png(result: ReplayResult, path: str | os.PathLike[str]) -> None:
    data = breakdown_png(result)
    with atomic_write(path, "wb") as handle:
        handle.write(data)
