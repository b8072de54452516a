#!/usr/bin/env python3
"""Predict measured heterogeneous (and homogeneous baseline) training iterations and print the error per row.

For every row of the CSV (default ../shared/reference/hetero_measured.csv): the model from ``model_dims`` /
``seq`` / ``gbs`` / ``mbs``, the cluster from ``cluster`` and ``gpus`` (presets in xsim_trace/data/clusters), the
deployment from ``plan`` (Sailor or AMP form, xsim_trace.validate.hetero_rows), then the heterogeneous DeepSpeed
pipeline closed form (xsim_trace.validate.hetero_predict: every stage replica timed on its own GPU and TP
degree).  One line per row: measured s, predicted s, error %; for ``run_failed`` rows whether the prediction
finds the plan out of memory.  A row that cannot be built is an ERROR line naming the row and the column,
counted as 100% error.  An MFU row (HexiScale / FlashFlex) is rebuilt from the repository's published defaults and
the tool's default batch, its plan chosen by the plan search, and its measured MFU compared at that batch
(xsim_trace.validate.hetero_flashflex; minutes for the four-group clusters).  The LAST line is always
``rows N median_abs_err_pct X within5 K worst_abs_err_pct W oom_right R/F`` over the selected rows.

Calibration: the shipped constants (hetero_predict.FITTED) were fitted on the homogeneous rows only; ``--fit``
refits them (on the homogeneous rows of the CSV) before predicting, ``--cv K`` prints K-fold cross-validated
figures for the homogeneous rows (each predicted with constants fitted without its fold).

usage: tools/accuracy_hetero.py [--csv FILE] [--select all|hetero|homogeneous] [--rows IDS] [--exclude-suspect] [--fit]
                                [--cv K] [--rounds N] [--breakdown] [--nic-gbps PRESET=GBPS ...]
                                [--rows H142-H149,H001 ...]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from xsim_trace.errors import XsimError
from xsim_trace.validate.hetero_accuracy import RowResult, cross_validate, evaluate, fit, summarize
from xsim_trace.validate.hetero_predict import FITTED
from xsim_trace.validate.hetero_rows import RowError, parse_row, read_rows

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CSV = REPO.parent / "shared" / "reference" / "hetero_measured.csv"


def _selected(results: list[RowResult], select: str, exclude_suspect: bool) -> list[RowResult]:
    out = []
    for r in results:
        if exclude_suspect and r.suspect:
            continue
        if select == "hetero" and not r.heterogeneous:
            continue
        if select == "homogeneous" and r.heterogeneous:
            continue
        out.append(r)
    return out


def _homogeneous_rows(raws):
    rows = []
    for raw in raws:
        if raw.heterogeneous or raw.suspect:
            continue
        try:
            rows.append((raw, parse_row(raw)))
        except RowError:
            continue
    return rows


def _row_filter(spec: str):
    """``H142-H149,H001``: a test for the row ids named or inside a range (same prefix, numbers compared), and
    the ids named one by one."""
    singles, ranges = set(), []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if "-" in part:
            lo, hi = part.split("-", 1)
            mlo, mhi = re.fullmatch(r"(\D*)(\d+)", lo), re.fullmatch(r"(\D*)(\d+)", hi)
            if not mlo or not mhi or mlo.group(1) != mhi.group(1):
                raise ValueError(f"--rows: {part!r} is not a range like H142-H149")
            ranges.append((mlo.group(1), int(mlo.group(2)), int(mhi.group(2))))
        else:
            singles.add(part)

    def keep(row_id: str) -> bool:
        if row_id in singles:
            return True
        m = re.fullmatch(r"(\D*)(\d+)", row_id)
        return bool(m) and any(m.group(1) == pre and lo <= int(m.group(2)) <= hi for pre, lo, hi in ranges)

    return keep, frozenset(singles)  # the ids named one by one must each be a row of the file


def _rows_to_predict(spec: str, raws: list, csv: str) -> list | int:
    """The rows ``--rows`` names (every row when ``spec`` is empty), or exit code 2 after a one-line error.
    --fit / --cv still use every homogeneous row."""
    if not spec:
        return raws
    try:
        keep, named = _row_filter(spec)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    todo = [r for r in raws if keep(r.row_id)]
    unknown = sorted(named - {r.row_id for r in raws})
    if unknown:
        print(f"error: --rows: no row {', '.join(unknown)} in {csv}", file=sys.stderr)
        return 2
    if not todo:
        print(f"error: --rows {spec!r} matches no row of {csv}", file=sys.stderr)
        return 2
    return todo


def _calibration(args: argparse.Namespace, raws: list):
    """The constants to predict with: FITTED, with the --nic-gbps what-if line rates, refitted under --fit;
    or exit code 2 after a one-line error."""
    cal = FITTED
    if args.nic_gbps:
        try:
            override = tuple((k.strip(), float(v)) for k, v in (x.split("=", 1) for x in args.nic_gbps))
        except ValueError:
            print(f"error: --nic-gbps expects PRESET=GBPS, found {args.nic_gbps!r}", file=sys.stderr)
            return 2
        cal = cal.with_(nic_gbps=override)
        print(f"# what-if NIC line rates (not the presets'): {dict(override)}")
    if args.fit:
        cal = fit(_homogeneous_rows(raws), rounds=args.rounds)
        print(f"# fitted on the homogeneous rows: {cal}")
    return cal


def _print_cross_validated(raws: list, folds: int, rounds: int) -> None:
    cv = {r.row_id: r for r in cross_validate(_homogeneous_rows(raws), folds, rounds=rounds)}
    print(f"# {folds}-fold cross-validated homogeneous rows (constants fitted without the row's fold):")
    for r in cv.values():
        print("cv " + r.line())
    for name, keep in (("T4 (AWS)", "aws"), ("GH200 (Alps)", "gh")):
        part = [r for r in cv.values() if (r.capacity_GiB == 96) == (keep == "gh")]
        print(f"# cv {name}: {summarize(part).line()}")
    print(f"# cv all homogeneous: {summarize(list(cv.values())).line()}")


def _print_part_summaries(results: list[RowResult]) -> None:
    for label, sel in (("heterogeneous, SUSPECT excluded", "hetero"), ("homogeneous, SUSPECT excluded", "homogeneous")):
        part = _selected(results, sel, True)
        s = summarize(part)
        print(f"# {label}: {s.line()} measured_predicted_oom {s.measured_predicted_oom}")
        built = summarize([r for r in part if not r.error])
        print(f"#   of which built (timed or failed; the {len(part) - built.rows} ERROR rows left out): {built.line()}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(DEFAULT_CSV), help="measured rows (default: %(default)s)")
    ap.add_argument("--select", choices=("all", "hetero", "homogeneous"), default="all")
    ap.add_argument("--exclude-suspect", action="store_true", help="leave out rows whose notes say SUSPECT")
    ap.add_argument("--fit", action="store_true", help="refit the constants on the CSV's homogeneous rows first")
    ap.add_argument("--cv", type=int, default=0, metavar="K", help="K-fold cross-validation of the homogeneous rows")
    ap.add_argument("--rounds", type=int, default=3, help="coordinate-descent rounds of --fit / --cv")
    ap.add_argument("--breakdown", action="store_true",
                    help="after each row, one line per pipeline stage: the slowest replica's forward / backward per "
                         "micro-batch, the p2p transfer, when its last backward ends, its DP all-reduce, optimizer")
    ap.add_argument("--nic-gbps", action="append", default=[], metavar="PRESET=GBPS",
                    help="what-if: every NIC of a cluster preset at this line rate (e.g. mit-rtx=1); the rows "
                         "are then no longer predictions from stated links")
    ap.add_argument("--rows", default="", metavar="IDS",
                    help="only these rows: ids and ranges, e.g. H142-H149,H037 (the summary counts only them; "
                         "--fit / --cv still use every homogeneous row)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        raws = read_rows(args.csv)
    except XsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    todo = _rows_to_predict(args.rows, raws, args.csv)
    if isinstance(todo, int):
        return todo
    cal = _calibration(args, raws)
    if isinstance(cal, int):
        return cal
    results = evaluate(todo, cal)
    if args.cv:
        _print_cross_validated(raws, args.cv, args.rounds)
    chosen = _selected(results, args.select, args.exclude_suspect)
    for r in chosen:
        print(r.line())
        if args.breakdown:
            for st in r.stages:
                print(st.line())
    if args.select == "all":
        _print_part_summaries(results)
    s = summarize(chosen)
    print(f"# measured runs predicted out of memory: {s.measured_predicted_oom}")
    print(s.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
