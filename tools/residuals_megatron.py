#!/usr/bin/env python3
"""Grouped residuals of tools/accuracy_megatron.py: the signed and absolute median error of the CI
rows grouped by golden and by what the generator sees of each test case (family, attention path,
pipeline interleaving, MoE layout), so that a miss shared by a group points at a cause and a miss
of one row inside a well-predicted group points at that row.

With --rank-factors GOLDEN it instead ranks the inputs by how much of that golden's error they
explain: each input groups the golden's rows, every row's signed error is reduced by its group's
signed median, and the median |error| left is printed (then again after the strongest input).  That
figure is an in-sample upper bound of what one constant per group could do, a diagnostic, not a
prediction.

usage: python tools/accuracy_megatron.py [--estimate-only] --cv 0 --csv OUT.csv
       python tools/residuals_megatron.py OUT.csv [--group moe|pipeline|all]
       python tools/residuals_megatron.py OUT.csv --rank-factors dev_dgx_h100 [--all-rows]

Rows flagged out of scope by the accuracy tool are left out (--all-rows keeps them when ranking).
Nothing is fitted here.
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


def factors(cases: dict[str, am.CaseConfig]) -> dict[str, "callable"]:
    def impl(row: am.Row) -> str:
        case = cases.get(row.name.split(" [")[0])
        return case.transformer_impl if case is not None else "unknown"

    return {
        "family": lambda r: r.name.split("/")[0],
        "tp": lambda r: r.fw.tp,
        "pp": lambda r: r.fw.pp,
        "cp": lambda r: r.fw.cp,
        "ep": lambda r: r.fw.ep,
        "interleaved": lambda r: r.fw.vpp > 1,
        "transformer impl": impl,
        "flash attention": lambda r: r.model.flash_attention,
        "deterministic": lambda r: r.fw.deterministic,
    }


def left_after(errs: dict[str, float], rows: dict[str, am.Row], key) -> tuple[int, float, int]:
    """(groups, median |error| after removing each group's signed median, rows within 5%)."""
    groups: dict[object, list[str]] = {}
    for name in errs:
        groups.setdefault(key(rows[name]), []).append(name)
    med = {g: statistics.median(errs[n] for n in names) for g, names in groups.items()}
    left = [abs(errs[n] - med[key(rows[n])]) for n in errs]
    return len(groups), statistics.median(left), sum(x <= 5 for x in left)


def rank_factors(path: Path, golden: str, in_scope: bool) -> int:
    rows = {r.name: r for r in am._ci_rows(am.DEFAULT_REFERENCE / "megatron_ci_step_times.csv", [])}
    with open(path, newline="") as handle:
        errs = {r["row"]: float(r["error_pct"]) for r in csv.DictReader(handle)
                if r["source"] == "ci" and r["row"] in rows and rows[r["row"]].golden == golden
                and not (in_scope and r["out_of_scope"])}
    if not errs:
        print(f"no CI rows of golden {golden} in {path}", file=sys.stderr)
        return 2
    keys = factors(am.load_cases())
    print(f"{golden}: {len(errs)} rows, median |error| {statistics.median(abs(e) for e in errs.values()):.1f}%, "
          f"within 5%: {sum(abs(e) <= 5 for e in errs.values())}")
    print(f"{'factor':<20} {'groups':>6} {'median |error| left':>20} {'<=5%':>5}")
    scored = {name: left_after(errs, rows, key) for name, key in keys.items()}
    rank = {k: (v[1], -v[2]) for k, v in scored.items()}  # least error left, then most rows within 5%
    for name, (n, med, w5) in sorted(scored.items(), key=lambda kv: rank[kv[0]]):
        print(f"{name:<20} {n:>6} {med:>19.1f}% {w5:>5}")
    best = min(scored, key=lambda k: rank[k])
    groups: dict[object, list[str]] = {}
    for name in errs:
        groups.setdefault(keys[best](rows[name]), []).append(name)
    med = {g: statistics.median(errs[n] for n in names) for g, names in groups.items()}
    second = {n: errs[n] - med[keys[best](rows[n])] for n in errs}
    print(f"\nafter '{best}':")
    for name, key in keys.items():
        if name != best:
            n, m, w5 = left_after(second, rows, key)
            print(f"  {name:<18} {n:>6} {m:>19.1f}% {w5:>5}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path, help="the --csv output of tools/accuracy_megatron.py")
    ap.add_argument("--group", choices=sorted(GROUPINGS), action="append", help="groupings to print (default: all three)")
    ap.add_argument("--reference", type=Path, default=am.DEFAULT_REFERENCE)
    ap.add_argument("--rank-factors", metavar="GOLDEN",
                    help="rank the inputs by the median |error| of GOLDEN's rows they leave (e.g. dev_dgx_h100)")
    ap.add_argument("--all-rows", action="store_true", help="with --rank-factors: keep the out-of-scope rows")
    args = ap.parse_args(argv)
    if not args.csv.is_file():
        ap.error(f"{args.csv}: no such file (write it with tools/accuracy_megatron.py --csv {args.csv})")
    if args.rank_factors:
        return rank_factors(args.csv, args.rank_factors, in_scope=not args.all_rows)
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
