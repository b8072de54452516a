"""Fit the collective model's physical parameters to nccl-tests runs of one fabric.

Parameters (a cluster group's ``nccl:`` section): the ring bus bandwidth inside a node, the scale-out bandwidth
per node, the NVLS bandwidth, a base latency added to every collective and an extra latency per inter-node step.
Only the parameters the runs can see are fitted (network ones need a multi-node run, NVLS needs NVSwitch on
Hopper or newer).  The fit minimises the summed squared log error over every row, by a deterministic
coordinate search over a grid; the host launch cost of several GPUs per process (``-g N``) belongs to the test,
so it is priced but not written into the cluster.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from xsim_trace.cluster.model import Cluster, DeviceGroup, NcclTuning
from xsim_trace.errors import ConfigError
from xsim_trace.network.nccl.model import _price
from xsim_trace.network.nccl.nccltests import NcclTestsRun
from xsim_trace.network.nccl.shape import GroupShape, shape_of_group

BW_PARAMS = ("intra_bw_GBps", "net_bw_GBps", "nvls_bw_GBps")
LAT_PARAMS = ("latency_us", "net_latency_us")
_ROUNDS = 4
#: weight of the pull towards the uncalibrated value (per parameter, squared log ratio for bandwidths,
#: squared (difference / 50 us) for latencies): a parameter the runs cannot see (the scale-out bandwidth of an
#: all-reduce that NVLS-tree bounds by NVLink) stays at its physical value instead of drifting
_PRIOR_WEIGHT = 0.05
_PRIOR_LAT_SCALE_US = 50.0


@dataclass(frozen=True, slots=True)
class FitRow:
    file: str
    collective: str
    n_ranks: int
    size_bytes: int
    measured_us: float
    predicted_us: float
    algo: str
    proto: str

    @property
    def error(self) -> float:
        return (self.predicted_us - self.measured_us) / self.measured_us


@dataclass(frozen=True, slots=True)
class Calibration:
    tuning: NcclTuning
    fitted: tuple[str, ...]
    rows: tuple[FitRow, ...]

    def median_abs_error(self, min_size: int = 0) -> float:
        errs = [abs(r.error) for r in self.rows if r.size_bytes >= min_size]
        return statistics.median(errs) if errs else math.nan


def run_shape(group: DeviceGroup, run: NcclTestsRun) -> GroupShape:
    """The shape of ``run``'s communicator on ``group`` (with the test's host launch cost)."""
    ppn = run.ranks_per_node
    if ppn > group.devices_per_node:
        raise ConfigError(
            f"{run.file}: {ppn} ranks per node do not fit group {group.name!r} of {group.devices_per_node} GPUs per node",
            field="--base",
        )
    if run.n_nodes > 1 and group.nic is None:
        raise ConfigError(f"{run.file}: a {run.n_nodes}-node run needs NICs in the base cluster", field="--base")
    return shape_of_group(group, run.n_ranks, run.n_nodes, ppn).with_launch(run.gpus_per_process)


def predict_rows(group: DeviceGroup, runs: Sequence[NcclTestsRun]) -> list[FitRow]:
    out = []
    for run in runs:
        s = run_shape(group, run)
        for r in run.rows:
            p = _price(s, run.collective, r.size_bytes, None, None)
            out.append(FitRow(run.file, run.collective.value, run.n_ranks, r.size_bytes, r.time_us,
                              p.time_ns / 1000.0, p.algo.value, p.proto.value))
    return out


def _loss(group: DeviceGroup, runs: Sequence[NcclTestsRun]) -> float:
    total = 0.0
    for run in runs:
        s = run_shape(group, run)
        for r in run.rows:
            t = _price.__wrapped__(s, run.collective, r.size_bytes, None, None).time_ns / 1000.0
            total += math.log(max(t, 1e-3) / r.time_us) ** 2
    return total


def _with(group: DeviceGroup, **tuning: float) -> DeviceGroup:
    return dataclasses.replace(group, nccl=dataclasses.replace(group.nccl, **tuning))


def _free_params(group: DeviceGroup, runs: Sequence[NcclTestsRun]) -> list[str]:
    shapes = [run_shape(group, r) for r in runs]
    names = ["latency_us"]
    if any(s.ranks_per_node > 1 for s in shapes):
        names.append("intra_bw_GBps")
    if any(s.nvls_bw_GBps > 0 for s in shapes):
        names.append("nvls_bw_GBps")
    if any(s.multi_node for s in shapes):
        names += ["net_bw_GBps", "net_latency_us"]
    return names


def _start(group: DeviceGroup, runs: Sequence[NcclTestsRun]) -> dict[str, float]:
    """The uncalibrated values, from a shape of the group (multi-node if any run is)."""
    big = max(runs, key=lambda r: r.n_nodes)
    s = shape_of_group(group, big.n_ranks, big.n_nodes, big.ranks_per_node)
    nvls = max((run_shape(group, r).nvls_bw_GBps for r in runs), default=0.0)
    return {
        "intra_bw_GBps": s.intra_bw_GBps,
        "net_bw_GBps": s.net_bw_GBps,
        "nvls_bw_GBps": nvls,
        "latency_us": group.nccl.latency_us,
        "net_latency_us": s.net_latency_us,
    }


def _grid(name: str, value: float, span: float) -> list[float]:
    steps = [i / 10.0 for i in range(-10, 11)]
    if name in BW_PARAMS:
        return [value * math.exp(span * k) for k in steps]
    return [value + span * 100.0 * k for k in steps]


def calibrate(base: Cluster, runs: Sequence[NcclTestsRun]) -> Calibration:
    """Fit the first device group of ``base`` to ``runs`` (nccl-tests tables of one fabric)."""
    if not runs:
        raise ConfigError("expected at least one nccl-tests log, found none", field="LOG")
    group = base.groups[0]
    free = _free_params(group, runs)
    values = _start(group, runs)
    prior = dict(values)

    def penalty(vals: dict[str, float]) -> float:
        out = 0.0
        for k in free:
            if k in BW_PARAMS:
                out += math.log(vals[k] / prior[k]) ** 2 if prior[k] > 0 else 0.0
            else:
                out += ((vals[k] - prior[k]) / _PRIOR_LAT_SCALE_US) ** 2
        return _PRIOR_WEIGHT * out

    current = _with(group, **{k: values[k] for k in free})
    best = _loss(current, runs) + penalty(values)
    span = {k: (math.log(4.0) if k in BW_PARAMS else 4.0) for k in free}
    for _ in range(_ROUNDS):
        for name in free:
            for trial in _grid(name, values[name], span[name]):
                if name in BW_PARAMS and trial <= 0:
                    continue
                if name == "net_latency_us" and trial < 0:
                    continue
                cand = _with(current, **{name: trial})
                loss = _loss(cand, runs) + penalty({**values, name: trial})
                if loss < best - 1e-12:
                    best, current, values[name] = loss, cand, trial
            span[name] /= 4.0
    tuning = dataclasses.replace(current.nccl, **{k: round(values[k], 3) for k in free})
    fitted = _with(group, **{k: getattr(tuning, k) for k in free})
    return Calibration(tuning, tuple(free), tuple(predict_rows(fitted, runs)))


def calibrated_cluster(base: Cluster, calibration: Calibration, *, nodes: int | None = None) -> dict:
    """``base`` as a dict with the fitted ``nccl:`` section on its first group (and ``nodes`` nodes)."""
    d = base.to_dict()
    g = d["groups"][0]
    from xsim_trace.cluster.load import nccl_tuning_to_dict  # noqa: PLC0415

    g["nccl"] = nccl_tuning_to_dict(calibration.tuning)
    if nodes is not None:
        g.pop("count", None)
        g["nodes"] = nodes
    d["groups"] = [g]
    d.pop("links", None)
    d.pop("rank_map", None)
    return d
