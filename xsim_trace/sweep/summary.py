"""Summaries of a sweep: best runs by a metric (ascending; ties by key), as a table, JSON, a plot."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from xsim_trace.errors import ConfigError
from xsim_trace.io import atomic_write


def _metric(record: dict[str, Any], metric: str) -> float | None:
    v = record.get("result", {}).get(metric) if record.get("status") == "ok" else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def ranked(records: Sequence[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """Successful records that carry ``metric``, best (smallest) first, ties broken by key."""
    good = [r for r in records if _metric(r, metric) is not None]
    return sorted(good, key=lambda r: (_metric(r, metric), r["key"]))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    return str(v)


def summary_table(records: Sequence[dict[str, Any]], metric: str, columns: Sequence[str], top: int) -> str:
    """A plain-text table of the ``top`` best runs: rank, key, the varying parameters, the metric."""
    best = ranked(records, metric)[:top]
    if not best:
        failed = sum(1 for r in records if r.get("status") != "ok")
        return f"no successful run reports {metric!r} ({len(records)} runs, {failed} failed)"
    head = ["#", "key", *columns, metric]
    rows = [[str(i + 1), r["key"], *[_fmt(r["params"].get(c, "")) for c in columns], _fmt(r["result"][metric])]
            for i, r in enumerate(best)]
    widths = [max(len(h), *(len(row[j]) for row in rows)) for j, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) if j < len(head) - 1 else h.rjust(w) for j, (h, w) in enumerate(zip(head, widths)))]
    for row in rows:
        lines.append("  ".join(c.ljust(w) if j < len(head) - 1 else c.rjust(w)
                               for j, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def summary_json(records: Sequence[dict[str, Any]], metric: str, top: int) -> dict[str, Any]:
    best = ranked(records, metric)
    return {
        "metric": metric, "runs": len(records), "ok": sum(1 for r in records if r.get("status") == "ok"),
        "failed": [{"key": r["key"], "error": r.get("error")} for r in records if r.get("status") != "ok"],
        "best": [{"key": r["key"], "params": r["params"], metric: r["result"][metric]} for r in best[:top]],
    }


def write_summary_json(path: str | os.PathLike[str], records: Sequence[dict[str, Any]], metric: str, top: int) -> None:
    with atomic_write(path, "w") as f:
        json.dump(summary_json(records, metric, top), f, indent=1, sort_keys=True)
        f.write("\n")


def _label(record: dict[str, Any], columns: Sequence[str]) -> str:
    """The run's varying parameters it sets (a parameter a run leaves out is not shown empty)."""
    params = record["params"]
    return ", ".join(f"{c}={_fmt(params[c])}" for c in columns if c in params) or record["key"]


def _axis(metric: str, values: Sequence[float]) -> tuple[float, str]:
    """A time metric (``*_ns``) in ms / us / s by its size; anything else as it is."""
    if not metric.endswith("_ns"):
        return 1.0, metric
    top = max(values, default=0)
    scale, unit = next(((f, u) for f, u in ((1e9, "s"), (1e6, "ms"), (1e3, "us")) if top >= f), (1.0, "ns"))
    return scale, f"{metric.removesuffix('_ns')} ({unit})"


def plot_best(path: str | os.PathLike[str], records: Sequence[dict[str, Any]], metric: str,
              columns: Sequence[str], top: int) -> None:
    """Horizontal bars of the ``top`` best runs' metric, labelled by their varying parameters."""
    import matplotlib  # noqa: PLC0415 - only for plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    best = ranked(records, metric)[:top]
    if not best:
        raise ConfigError(f"nothing to plot: no successful run reports {metric!r}", field="--plot")
    labels = [_label(r, columns) for r in best]
    values = [_metric(r, metric) for r in best]
    scale, axis_label = _axis(metric, values)
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(best) + 1.2))
    ax.barh(range(len(best)), [v / scale for v in values], color="#4c72b0")
    ax.set_yticks(range(len(best)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(axis_label)
    ax.set_title(f"best {len(best)} runs by {metric}")
    fig.tight_layout()
    fmt = os.path.splitext(str(path))[1].lstrip(".") or "png"
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format=fmt)
    plt.close(fig)
