#!/usr/bin/env python3
"""Which input explains the misses of tools/accuracy_megatron.py: for one golden, each factor the
generator sees (family, TP, PP, CP, EP, interleaving, transformer implementation, attention path,
deterministic mode) groups the rows, every row's signed error is reduced by its group's signed
median, and the median |error| left is printed.  A factor whose groups leave much less error than
the golden's median |error| is a systematic cause worth modelling; one that leaves as much is not.
Factors are ranked by the error left, then by the rows within 5%.  A second stage repeats this after
the factor that explains the most.

The figure is an in-sample upper bound of what one constant per group could do (a group median is
fitted on its own rows), a diagnostic, not a prediction.  Nothing here changes the model.

usage: python tools/accuracy_megatron.py [--estimate-only] --cv 0 --csv OUT.csv
       python tools/residual_factors_megatron.py OUT.csv [--golden dev_dgx_h100] [--in-scope]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy_megatron as am  # noqa: E402  (a sibling script, not an installed module)


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path, help="the --csv of tools/accuracy_megatron.py")
    ap.add_argument("--golden", default="dev_dgx_h100")
    ap.add_argument("--in-scope", action="store_true", help="leave out the rows flagged out of scope")
    args = ap.parse_args(argv)
    rows = {r.name: r for r in am._ci_rows(am.DEFAULT_REFERENCE / "megatron_ci_step_times.csv", [])}
    with open(args.csv, newline="") as handle:
        errs = {r["row"]: float(r["error_pct"]) for r in csv.DictReader(handle)
                if r["source"] == "ci" and r["row"] in rows and rows[r["row"]].golden == args.golden
                and not (args.in_scope and r["out_of_scope"])}
    if not errs:
        print(f"no CI rows of golden {args.golden} in {args.csv}", file=sys.stderr)
        return 2
    keys = factors(am.load_cases())
    print(f"{args.golden}: {len(errs)} rows, median |error| {statistics.median(abs(e) for e in errs.values()):.1f}%, "
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
        if name == best:
            continue
        n, m, w5 = left_after(second, rows, key)
        print(f"  {name:<18} {n:>6} {m:>19.1f}% {w5:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
