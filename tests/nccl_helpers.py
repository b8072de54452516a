"""nccl-tests logs for tests, rebuilt from the rows of ../shared/reference/nccl_tests.csv."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

from xsim_trace.network.nccl import CollKind
from xsim_trace.network.nccl.nccltests import render_log

REFERENCE = Path(__file__).resolve().parent.parent.parent / "shared" / "reference" / "nccl_tests.csv"
GPU_NAMES = {"a100": "NVIDIA A100-SXM4-80GB", "h100": "NVIDIA H100 80GB HBM3"}


def reference_runs() -> dict[str, list[dict[str, str]]]:
    runs: dict[str, list[dict[str, str]]] = defaultdict(list)
    with REFERENCE.open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            runs[row["run_id"]].append(row)
    return dict(runs)


def write_reference_log(tmp: Path, run_id: str, *, name: str | None = None) -> Path:
    rows = reference_runs()[run_id]
    first = rows[0]
    text = render_log(
        CollKind.parse(first["collective"], field="collective"),
        [(int(r["size_bytes"]), float(r["time_us_out_of_place"])) for r in rows],
        gpu=GPU_NAMES[run_id[:4]],
        nodes=int(first["nodes"]),
        gpus_per_node=int(first["gpus_per_node"]),
        gpus_per_process=8 if "-g 8" in first["notes"] else 1,
    )
    path = tmp / (name or f"{run_id}.log")
    path.write_text(text, encoding="utf-8")
    return path
