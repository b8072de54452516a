"""Accuracy of the heterogeneous DeepSpeed-pipeline prediction against a measured-runs table.

:func:`evaluate` predicts every row (a row that cannot be built is a result carrying its :class:`RowError`, counted
as 100% error); :func:`summarize` gives the figures of the summary line; :func:`fit` calibrates
:class:`~xsim_trace.validate.hetero_predict.HeteroCalibration` by coordinate descent on rows it is given (the tool
passes only homogeneous ones); :func:`cross_validate` predicts each of those rows with constants fitted on the
other folds.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from xsim_trace.errors import XsimError
from xsim_trace.validate.hetero_mfu import flashflex_predictable, flashflex_tokens_per_s, is_mfu_row, mfu_row_error
from xsim_trace.validate.hetero_predict import FITTED, HeteroCalibration, StageTiming, predict
from xsim_trace.validate.hetero_rows import HeteroRow, RawRow, RowError, parse_row

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RowResult:
    row_id: str
    heterogeneous: bool
    suspect: bool
    failed: bool  # the measured run failed (OOM or hang)
    measured_s: float | None
    predicted_s: float | None = None
    predicted_oom: bool | None = None
    peak_GiB: float = 0.0
    capacity_GiB: float = 0.0
    error: str = ""  # why the row could not be built / predicted (names the column)
    infeasible: str = ""  # why the prediction finds the run infeasible (out of memory, a stage DeepSpeed cannot build)
    stages: tuple[StageTiming, ...] = ()  # the per-stage breakdown of the prediction
    note: str = ""  # what an MFU row was compared on (MFU measured / predicted, batch, the searched plan)

    @property
    def abs_err_pct(self) -> float | None:
        """|predicted / measured - 1| in %, 100 for a row that could not be built, None for a failed run."""
        if self.error:
            return 100.0
        if self.measured_s is None or self.predicted_s is None:
            return None
        return abs(self.predicted_s / self.measured_s - 1.0) * 100.0

    @property
    def err_pct(self) -> float | None:
        if self.error or self.measured_s is None or self.predicted_s is None:
            return None
        return (self.predicted_s / self.measured_s - 1.0) * 100.0

    def line(self) -> str:
        tag = ("hetero" if self.heterogeneous else "homog") + (" SUSPECT" if self.suspect else "")
        if self.error:
            return f"{self.row_id:6s} ERROR {self.error} ({tag})"
        if self.failed:
            verdict = f"predicted infeasible ({self.infeasible})" if self.predicted_oom else \
                f"predicted to fit ({self.peak_GiB:.1f} of {self.capacity_GiB:.0f} GiB)"
            return f"{self.row_id:6s} measured  failed  predicted {self.predicted_s:9.3f} s  run_failed: {verdict} ({tag})"
        oom = f"  predicted infeasible ({self.infeasible})" if self.predicted_oom else ""
        note = f"  [{self.note}]" if self.note else ""
        return (f"{self.row_id:6s} measured {self.measured_s:9.3f} s  predicted {self.predicted_s:9.3f} s  "
                f"error {self.err_pct:+7.1f} %{oom} ({tag}){note}")


@dataclass(frozen=True, slots=True)
class Summary:
    rows: int
    median_abs_err_pct: float
    within5: int
    worst_abs_err_pct: float
    oom_right: int
    oom_total: int
    measured_predicted_oom: int

    def line(self) -> str:
        return (f"rows {self.rows} median_abs_err_pct {self.median_abs_err_pct:.1f} within5 {self.within5} "
                f"worst_abs_err_pct {self.worst_abs_err_pct:.1f} oom_right {self.oom_right}/{self.oom_total}")


def predict_row(raw: RawRow, cal: HeteroCalibration, row: HeteroRow | None = None) -> RowResult:
    base = dict(row_id=raw.row_id, heterogeneous=raw.heterogeneous, suspect=raw.suspect, failed=raw.failed)
    try:
        if row is None and is_mfu_row(raw):  # FlashFlex: the run rebuilt, its plan searched, MFU -> seconds
            if not flashflex_predictable(raw):
                raise mfu_row_error(raw)
            flashflex_tokens_per_s(raw)  # the value and every GPU's repository peak readable, else the column
            from xsim_trace.validate.hetero_flashflex import predict_flashflex

            ff = predict_flashflex(raw, cal)
            return RowResult(measured_s=ff.measured_s, predicted_s=ff.step_s, note=ff.note(), **base)
        row = row if row is not None else parse_row(raw)
        p = predict(row, cal)
    except RowError as exc:
        return RowResult(measured_s=None, error=str(exc), **base)
    except XsimError as exc:  # a model / device check of the generator: still this row's problem
        return RowResult(measured_s=None, error=f"row {raw.row_id}: {exc}", **base)
    return RowResult(measured_s=row.measured_s, predicted_s=p.iteration_s, predicted_oom=p.out_of_memory,
                     peak_GiB=p.peak_GiB, capacity_GiB=p.capacity_GiB, infeasible=p.infeasible,
                     stages=p.stages, **base)


def evaluate(raws: Iterable[RawRow], cal: HeteroCalibration = FITTED) -> list[RowResult]:
    return [predict_row(raw, cal) for raw in raws]


def summarize(results: Sequence[RowResult]) -> Summary:
    errs = [r.abs_err_pct for r in results if r.abs_err_pct is not None]
    failed = [r for r in results if r.failed and not r.error]
    return Summary(
        rows=len(results),
        median_abs_err_pct=statistics.median(errs) if errs else 0.0,
        within5=sum(1 for e in errs if e <= 5.0),
        worst_abs_err_pct=max(errs) if errs else 0.0,
        oom_right=sum(1 for r in failed if r.predicted_oom),
        oom_total=sum(1 for r in results if r.failed),
        measured_predicted_oom=sum(1 for r in results if not r.failed and r.predicted_oom),
    )


# --- calibration ---------------------------------------------------------------------------------------------------
#: (name, grid, setter) of every fitted constant; devices / testbeds without rows are skipped by fit()
def _grids() -> list[tuple[str, Sequence[float], Callable[[HeteroCalibration, float], HeteroCalibration]]]:
    effs = (0.04, 0.06, 0.08, 0.10, 0.12, 0.14, 0.17, 0.20, 0.25, 0.30, 0.40, 0.55, 0.75)
    hosts = (0, 5e3, 10e3, 20e3, 30e3, 50e3, 80e3, 120e3, 170e3, 220e3, 300e3, 400e3, 500e3, 650e3, 800e3)
    kernels = (2e3, 5e3, 10e3, 20e3, 30e3, 50e3, 80e3, 120e3, 170e3, 250e3)
    fracs = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    return [
        ("eff:T4", effs, lambda c, v: c.with_efficiency("T4", v)),
        ("eff:GH200-96GB", effs, lambda c, v: c.with_efficiency("GH200-96GB", v)),
        ("kernel:T4", kernels, lambda c, v: c.with_kernel_ns("T4", int(v))),
        ("kernel:GH200-96GB", kernels, lambda c, v: c.with_kernel_ns("GH200-96GB", int(v))),
        ("host:aws", hosts, lambda c, v: c.with_host("aws", int(v))),
        ("host:alps", hosts, lambda c, v: c.with_host("alps", int(v))),
        ("step_host_ns", (0, 10e6, 20e6, 40e6, 80e6, 150e6), lambda c, v: c.with_(step_host_ns=int(v))),
        ("tcp_efficiency", fracs, lambda c, v: c.with_(tcp_efficiency=v)),
        ("tcp_ceiling_Gbps", (10, 15, 20, 25, 30, 35, 40, 45, 50), lambda c, v: c.with_(tcp_ceiling_Gbps=v)),
        ("pcie_efficiency", fracs, lambda c, v: c.with_(pcie_efficiency=v)),
        ("reserved_GiB", (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5), lambda c, v: c.with_(reserved_GiB=v)),
    ]


def _objective(rows: Sequence[tuple[RawRow, HeteroRow]], cal: HeteroCalibration) -> float:
    """Mean |log(predicted / measured)| over the timed rows plus 0.05 per run whose feasibility is misjudged
    (a failed run predicted to fit, or a measured run predicted out of memory): lower is better."""
    res = [predict_row(raw, cal, row) for raw, row in rows]
    logs = [abs(math.log(r.predicted_s / r.measured_s)) for r in res
            if not r.error and r.measured_s and r.predicted_s]
    wrong = sum(1 for r in res if not r.error and r.failed != bool(r.predicted_oom))
    return (sum(logs) / len(logs) if logs else 0.0) + 0.05 * wrong


def fit(rows: Sequence[tuple[RawRow, HeteroRow]], cal: HeteroCalibration = HeteroCalibration(),
        rounds: int = 2) -> HeteroCalibration:
    """Coordinate descent over :func:`_grids` on ``rows`` (built rows only), keeping the best objective."""
    devices = {p.device for _, row in rows for s in row.plan.stages for p in s.replicas}
    from xsim_trace.validate.hetero_predict import TESTBED, row_cluster_name

    testbeds = {TESTBED[row_cluster_name(row)] for _, row in rows}
    best = _objective(rows, cal)
    for _ in range(rounds):
        for name, grid, setter in _grids():
            kind, _, what = name.partition(":")
            if (kind in ("eff", "kernel") and what not in devices) or (kind == "host" and what not in testbeds):
                continue
            for v in grid:
                trial = setter(cal, v)
                score = _objective(rows, trial)
                if score < best:
                    best, cal = score, trial
        log.info("fit round: %s -> %s", best, cal)
    return cal


def cross_validate(rows: Sequence[tuple[RawRow, HeteroRow]], k: int, cal: HeteroCalibration = HeteroCalibration(),
                   rounds: int = 2) -> list[RowResult]:
    """Each row predicted with constants fitted on the other folds (row i is in fold i mod k)."""
    out: dict[str, RowResult] = {}
    for fold in range(k):
        train = [x for i, x in enumerate(rows) if i % k != fold]
        test = [x for i, x in enumerate(rows) if i % k == fold]
        fitted = fit(train, cal, rounds)
        for raw, row in test:
            out[raw.row_id] = predict_row(raw, fitted, row)
    return [out[raw.row_id] for raw, _ in rows]


__all__ = ["RowResult", "Summary", "cross_validate", "evaluate", "fit", "predict_row", "summarize"]
