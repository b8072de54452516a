#!/usr/bin/env python3
"""Grouped residuals of tools/accuracy_megatron.py: the signed and absolute median error of the CI
rows grouped by golden and by what the generator sees of each test case (family, attention path,
pipeline interleaving, MoE layout), so that a miss shared by a group points at a cause and a miss
of one row inside a well-predicted group points at that row.

usage: python tools/accuracy_megatron.py [--estimate-only] --cv 0 --csv OUT.csv
       python tools/residuals_megatron.py OUT.csv [--group moe|pipeline|all]

Rows flagged out of scope by the accuracy tool are left out.  Nothing is fitted here.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy_megatron as am  # noqa: E402  (a sibling script, not an installed module)


def features(row: am.Row, case: am.CaseConfig | None) -> dict[str, str]:
    """What the generator knows of a CI row, as short labels."""
    fw, model = row.fw, row.model
    if model.flash_attention:
        attn = "flash"
    elif case is not None and case.transformer_impl == "local":
        attn = "local"
    else:
        attn = "unfused"
    return {
        "golden": row.golden,
        "family": row.name.split("/")[0],
        "attn": attn,
        "det": "det" if fw.deterministic else "nondet",
        "pp": f"pp{fw.pp}",
        "chunks": f"v{fw.vpp}",
        "m": f"m{fw.microbatches}",
        "tp": f"tp{fw.tp}",
        "cp": f"cp{fw.cp}",
        "ep": f"ep{fw.ep}",
        "etp": f"etp{fw.etp}",
        "experts": f"E{model.moe_experts}",
        "topk": f"k{model.moe_top_k}",
        "gemm": "grouped" if case is not None and case.moe_grouped_gemm else "sequential",
    }


GROUPINGS: dict[str, list[tuple[str, ...]]] = {
    "all": [("family", "golden"), ("golden", "attn"), ("golden", "det")],
    "pipeline": [("golden", "pp", "chunks", "family"), ("golden", "pp", "chunks", "attn")],
    "moe": [("golden", "ep", "tp", "cp", "experts", "topk", "gemm"), ("golden", "gemm"), ("golden", "topk")],
}


def grouped(rows: list[tuple[dict[str, str], float]], keys: tuple[str, ...]) -> list[str]:
    groups: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for feats, err in rows:
        groups[tuple(feats[k] for k in keys)].append(err)
    lines = [f"by {' x '.join(keys)}:"]
    for key in sorted(groups):
        errs = groups[key]
        a = [abs(e) for e in errs]
        lines.append(f"  {' '.join(key):<58} n={len(errs):3d}  signed median {statistics.median(errs):+6.1f}%  "
                     f"|median| {statistics.median(a):5.1f}%  worse than 25%: {sum(x > 25 for x in a)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path, help="the --csv output of tools/accuracy_megatron.py")
    ap.add_argument("--group", choices=sorted(GROUPINGS), action="append", help="groupings to print (default: all three)")
    ap.add_argument("--reference", type=Path, default=am.DEFAULT_REFERENCE)
    args = ap.parse_args(argv)
    if not args.csv.is_file():
        ap.error(f"{args.csv}: no such file (write it with tools/accuracy_megatron.py --csv {args.csv})")
    errors = {r["row"]: float(r["error_pct"]) for r in csv.DictReader(args.csv.open())}
    cases = am.load_cases()
    rows = []
    for row in am._ci_rows(args.reference / "megatron_ci_step_times.csv", []):
        if row.name in errors and not am.out_of_scope(row):
            rows.append((features(row, cases.get(row.name.split(" [")[0])), errors[row.name]))
    for name in args.group or ["all", "pipeline", "moe"]:
        subset = [(f, e) for f, e in rows if name != "moe" or f["family"] == "moe"]
        for keys in GROUPINGS[name]:
            print("\n".join(grouped(subset, keys)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
