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
REPORT_FILES = frozenset({SUMMARY_FILE, TIMELINE_FILE, BREAKDOWN_FILE})


def write_reports(result, out_dir: str | os.PathLike[str], *, timeline: bool = True, plot: bool = True, **context) -> dict[str, Path]:
    """Write summary.json, timeline.json and breakdown.png into ``out_dir``; returns their paths."""
    from xsim_trace.io.outset import output_set

    # one set: a run killed midway leaves the previous run's reports whole; files of the previous
    # run this one does not write (breakdown.png under --no-plot) go, so the folder never mixes runs
    with output_set(out_dir, REPORT_FILES.__contains__, label="replay") as out:
        staged = {"summary": out.path(SUMMARY_FILE)}
        write_summary(result, staged["summary"], **context)
        if timeline:
            staged["timeline"] = out.path(TIMELINE_FILE)
            write_timeline(result, staged["timeline"])
        if plot:
            staged["breakdown"] = out.path(BREAKDOWN_FILE)
            write_breakdown_png(result, staged["breakdown"])
    return {label: out.final(path) for label, path in staged.items()}


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
