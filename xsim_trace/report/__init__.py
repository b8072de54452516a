"""report: summary JSON, Chrome-trace timeline, breakdown PNG and terminal table of a replay."""

from __future__ import annotations

import os
from pathlib import Path

from xsim_trace.report.summary import summary_dict, write_summary
from xsim_trace.report.table import fmt_ns, render_table
from xsim_trace.report.timeline import write_timeline

SUMMARY_FILE = "summary.json"
TIMELINE_FILE = "timeline.json"
BREAKDOWN_FILE = "breakdown.png"


def write_reports(result, out_dir: str | os.PathLike[str], *, timeline: bool = True, plot: bool = True, **context) -> dict[str, Path]:
    """Write summary.json, timeline.json and breakdown.png into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    paths = {"summary": out / SUMMARY_FILE}
    write_summary(result, paths["summary"], **context)
    if timeline:
        paths["timeline"] = out / TIMELINE_FILE
        write_timeline(result, paths["timeline"])
    if plot:
        paths["breakdown"] = out / BREAKDOWN_FILE
        write_breakdown_png(result, paths["breakdown"])
    return paths


def breakdown_png(result) -> bytes:
    """The breakdown chart as PNG bytes (matplotlib is imported only here)."""
    from xsim_trace.report.plot import breakdown_png as draw

    return draw(result)


def write_breakdown_png(result, path: str | os.PathLike[str]) -> None:
    from xsim_trace.report.plot import write_breakdown_png as write

    write(result, path)


__all__ = [
    "breakdown_png",
    "fmt_ns",
    "render_table",
    "summary_dict",
    "write_breakdown_png",
    "write_reports",
    "write_summary",
    "write_timeline",
]
