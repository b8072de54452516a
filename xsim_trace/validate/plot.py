"""Simulated vs measured plot (PNG): per-rank step time bars and, when present, per-collective times."""

from __future__ import annotations

import os

from xsim_trace.io import atomic_write
from xsim_trace.validate.compare import Validation


def plot_validation(v: Validation, path: str | os.PathLike[str]) -> None:
    """Draw ``v`` into a PNG at ``path`` (matplotlib's Agg backend; written atomically)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    colls = [c for c in v.collectives if c.simulated_ns is not None]
    fig = Figure(figsize=(11, 4.2 if not colls else 8.0), dpi=110)
    ax = fig.add_subplot(2 if colls else 1, 1, 1)
    ranks = [r.rank for r in v.ranks]
    x = list(range(len(ranks)))
    w = 0.38
    ax.bar([i - w / 2 for i in x], [r.measured_ns / 1e6 for r in v.ranks], w, label="measured (ProfilerStep)")
    ax.bar([i + w / 2 for i in x], [r.simulated_ns / 1e6 for r in v.ranks], w, label="simulated")
    for i, r in zip(x, v.ranks):
        ax.annotate(f"{r.error_pct:+.2f}%", (i + w / 2, r.simulated_ns / 1e6), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [str(r) for r in ranks])
    ax.set_xlabel("rank")
    ax.set_ylabel("step time (ms)")
    ax.set_title(f"{v.name} on {v.cluster}: max |error| {v.max_abs_error_pct:.2f}%")
    ax.legend(loc="lower right", fontsize=8)
    if colls:
        ax2 = fig.add_subplot(2, 1, 2)
        meas = [c.measured_ns / 1e3 for c in colls]
        sim = [c.simulated_ns / 1e3 for c in colls]  # type: ignore[operator]
        kinds = sorted({c.collective for c in colls})
        for kind in kinds:
            pts = [(m, s) for m, s, c in zip(meas, sim, colls) if c.collective == kind]
            ax2.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, label=kind)
        hi = max(meas + sim) * 1.1
        lo = max(min(meas + sim) * 0.9, 1e-3)
        ax2.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8)
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        ax2.set_xlabel("measured NCCL kernel time (us)")
        ax2.set_ylabel("simulated (us)")
        ax2.legend(fontsize=8)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png")
