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
LAT_PARAMS = ("latency_us", "simple_latency_us", "net_latency_us")
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
    #: bandwidths that ended on a bound of their allowed range (0.4-1.25x the base cluster's): the base
    #: cluster probably does not describe this fabric's hardware (NIC count or speed, link generation)
    at_bound: tuple[str, ...] = ()

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
    names = ["latency_us", "simple_latency_us"]
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
        "simple_latency_us": group.nccl.simple_latency_us,
        "net_latency_us": s.net_latency_us,
    }


def _grid(name: str, value: float, span: float) -> list[float]:
    steps = [i / 10.0 for i in range(-10, 11)]
    if name in BW_PARAMS:
        return [value * math.exp(span * k) for k in steps]
    return [value + span * 100.0 * k for k in steps]


#: latencies that cannot go below 0 (the base latency may, a little: NCCL's base figures can exceed a fabric's)
_NON_NEGATIVE = ("simple_latency_us", "net_latency_us")
_MIN_BASE_LATENCY_US = -10.0
#: a fitted bandwidth stays within these factors of the physical one: calibration finds the efficiency a
#: fabric reaches, it cannot make a link several times slower (which would only absorb what other terms miss)
_BW_RANGE = (0.4, 1.25)
_SIMPLEX_ITERATIONS = 400


def _clamp(name: str, value: float, prior: float) -> float:
    if name in BW_PARAMS:
        return min(max(value, prior * _BW_RANGE[0]), prior * _BW_RANGE[1]) if prior > 0 else value
    if name in _NON_NEGATIVE:
        return max(0.0, value)
    return max(_MIN_BASE_LATENCY_US, value)


def _to_x(name: str, value: float) -> float:
    """The search coordinate of a parameter: log for bandwidths, 50 us units for latencies."""
    return math.log(value) if name in BW_PARAMS else value / _PRIOR_LAT_SCALE_US


def _from_x(name: str, x: float) -> float:
    if name in BW_PARAMS:
        return math.exp(x)
    return x * _PRIOR_LAT_SCALE_US


def _nelder_mead(f, x0: list[float], step: float = 0.3, iterations: int = _SIMPLEX_ITERATIONS) -> list[float]:
    """Deterministic Nelder-Mead minimisation of ``f`` from ``x0`` (standard coefficients)."""
    n = len(x0)
    simplex = [list(x0)] + [[x0[j] + (step if j == i else 0.0) for j in range(n)] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=lambda i: (values[i], i))
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-10:
            break
        centre = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        refl = [centre[j] + (centre[j] - worst[j]) for j in range(n)]
        fr = f(refl)
        if fr < values[0]:
            exp = [centre[j] + 2.0 * (centre[j] - worst[j]) for j in range(n)]
            fe = f(exp)
            simplex[-1], values[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = refl, fr
        else:
            contr = [centre[j] + 0.5 * (worst[j] - centre[j]) for j in range(n)]
            fc = f(contr)
            if fc < values[-1]:
                simplex[-1], values[-1] = contr, fc
            else:
                best = simplex[0]
                simplex = [best] + [[best[j] + 0.5 * (x[j] - best[j]) for j in range(n)] for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[min(range(n + 1), key=lambda i: (values[i], i))]


def calibrate(base: Cluster, runs: Sequence[NcclTestsRun]) -> Calibration:
    """Fit the first device group of ``base`` to ``runs`` (nccl-tests tables of one fabric): a coarse
    coordinate search over a grid, then a Nelder-Mead refinement of all parameters together."""
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

    def objective(vals: dict[str, float]) -> float:
        vals = {k: _clamp(k, v, prior[k]) for k, v in vals.items()}
        return _loss(_with(group, **{k: vals[k] for k in free}), runs) + penalty(vals)

    best = objective(values)
    span = {k: (math.log(4.0) if k in BW_PARAMS else 4.0) for k in free}
    for _ in range(_ROUNDS):
        for name in free:
            for trial in _grid(name, values[name], span[name]):
                if trial != _clamp(name, trial, prior[name]):
                    continue
                loss = objective({**values, name: trial})
                if loss < best - 1e-12:
                    best, values[name] = loss, trial
            span[name] /= 4.0
    x = _nelder_mead(lambda xs: objective({**values, **{k: _from_x(k, v) for k, v in zip(free, xs)}}),
                     [_to_x(k, values[k]) for k in free])
    refined = {**values, **{k: _clamp(k, _from_x(k, v), prior[k]) for k, v in zip(free, x)}}
    if objective(refined) < best:
        values = refined
    values = {k: _clamp(k, v, prior[k]) for k, v in values.items()}
    at_bound = tuple(k for k in free if k in BW_PARAMS and prior[k] > 0
                     and any(math.isclose(values[k], prior[k] * f, rel_tol=1e-6) for f in _BW_RANGE))
    tuning = dataclasses.replace(group.nccl, **{k: round(values[k], 3) for k in free})
    fitted = _with(group, **{k: getattr(tuning, k) for k in free})
    return Calibration(tuning, tuple(free), tuple(predict_rows(fitted, runs)), at_bound)


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
