"""The breakdown as a plain-text table for the terminal."""

from __future__ import annotations

from xsim_trace.replay.compile import COMM_KINDS
from xsim_trace.replay.results import Breakdown, ReplayResult

#: per-rank rows are listed up to this many ranks; above it, the slowest and the fastest rank
MAX_RANK_ROWS = 8


def fmt_ns(ns: int) -> str:
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1_000:
        return f"{ns / 1e3:.3f} us"
    return f"{ns} ns"


def _cells(label: str, b: Breakdown, kinds: list[str], p2p: bool) -> list[str]:
    total = max(b.iteration_ns, 1)

    def cell(v: int) -> str:
        return f"{fmt_ns(v)} ({100 * v / total:.0f}%)" if v else "-"

    return (
        [label, fmt_ns(b.iteration_ns), cell(b.compute_ns)]
        + [cell(b.exposed(k)) for k in kinds]
        + [cell(b.straggler_wait_ns)] + ([cell(b.p2p_wait_ns)] if p2p else []) + [cell(b.host_ns), cell(b.idle_ns)]
    )


def render_table(result: ReplayResult) -> str:
    rows_b = [b for g in result.groups for b in [g.mean]] + [r.breakdown for r in result.ranks]
    kinds = [k for k in COMM_KINDS if any(b.exposed(k) for b in rows_b)] or ["other"]
    p2p = any(b.p2p_wait_ns for b in rows_b)
    header = ["", "iteration", "compute"] + [f"exposed {k}" for k in kinds] + ["straggler wait"] + (["p2p wait"] if p2p else []) + ["host", "idle"]
    rows = [header]
    for g in result.groups:
        label = f"group {g.name} ({len(g.ranks)} ranks, mean)"
        row = _cells(label, g.mean, kinds, p2p)
        row[1] = fmt_ns(g.iteration_ns) + " max"
        rows.append(row)
    if len(result.ranks) <= MAX_RANK_ROWS:
        rows += [_cells(f"rank {r.rank}", r.breakdown, kinds, p2p) for r in result.ranks]
    elif result.ranks:
        # the slowest rank sets the iteration; the one that waits most shows the straggler cost
        slow = max(result.ranks, key=lambda r: (r.breakdown.compute_ns, r.breakdown.iteration_ns, -r.rank))
        waits = max(result.ranks, key=lambda r: (r.breakdown.straggler_wait_ns, -r.rank))
        rows.append(_cells(f"rank {slow.rank} (most compute)", slow.breakdown, kinds, p2p))
        if waits.rank != slow.rank:
            rows.append(_cells(f"rank {waits.rank} (most waiting)", waits.breakdown, kinds, p2p))
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    folded = result.stats.folded_ranks
    simulated = f" ({len(result.ranks) - folded} simulated, {folded} folded: equivalent ranks' times copied)" if folded else ""
    lines = [f"iteration time: {fmt_ns(result.iteration_ns)} over {len(result.ranks)} rank(s){simulated}, backend {result.backend}"]
    for k, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[c]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(row)))
        if k == 0:
            lines.append("  ".join("-" * wd for wd in widths))
    if any(b.host_ns for b in rows_b):
        lines.append("host: only CPU ops run (framework code, kernel launches, data loading), the GPU has no work")
    return "\n".join(lines)
