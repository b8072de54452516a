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
from xsim_trace.network.nccl.kinds import Algo, Proto
from xsim_trace.network.nccl.model import (_price, fill_stages, latency_us, runtime_algbw_GBps, simple_fill_us,
                                           tree_pipeline_fill_us)
from xsim_trace.network.nccl.nccltests import NcclTestsRun
from xsim_trace.network.nccl.shape import GroupShape, shape_of_group

#: bandwidths and bandwidth factors: fitted in log space, within _BW_RANGE of their physical value
BW_PARAMS = ("intra_bw_GBps", "net_bw_GBps", "nvls_bw_GBps", "ll_bw_scale", "ll128_bw_scale", "simple_bw_scale",
             "simple_fill_bytes", "nvls_tree_bw_scale")
LAT_PARAMS = ("latency_us", "ll_latency_us", "ll128_latency_us", "simple_latency_us", "net_latency_us")
PROTO_PARAMS = ("ll_latency_us", "ll128_latency_us", "simple_latency_us", "ll_bw_scale", "ll128_bw_scale", "simple_bw_scale",
                "simple_fill_us", "simple_fill_bytes", "tree_fill_us", "tree_fill_bytes")
#: constants measured once on public runs (nccl_links.yaml, reference.py) and never refitted by a calibration:
#: NVLS-tree's share of the NVLS bandwidth (a calibration fits nvls_bw_GBps itself)
MEASURED_ONLY = ("nvls_tree_bw_scale",)
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
            total += _rho(math.log(max(t, 1e-3) / r.time_us))
    return total


#: scale of the robust loss (a relative error): rows within a few percent count almost quadratically, a row
#: far off (a noisy measurement) only logarithmically, so the fit follows the bulk of the rows (the accuracy
#: targets are medians)
_ROBUST_SCALE = 0.03


def _rho(err: float) -> float:
    """Cauchy loss of one relative error."""
    return math.log1p((err / _ROBUST_SCALE) ** 2)


def _with(group: DeviceGroup, **tuning: float) -> DeviceGroup:
    return dataclasses.replace(group, nccl=dataclasses.replace(group.nccl, **tuning))


def _free_params(group: DeviceGroup, runs: Sequence[NcclTestsRun]) -> list[str]:
    shapes = [run_shape(group, r) for r in runs]
    names = ["latency_us", *PROTO_PARAMS]
    if any(s.ranks_per_node > 1 for s in shapes):
        names.append("intra_bw_GBps")
    if any(s.nvls_bw_GBps > 0 for s in shapes):
        names.append("nvls_bw_GBps")
    if any(s.multi_node for s in shapes):
        names += ["net_bw_GBps", "net_latency_us"]
    if any(s.multi_node and s.nvls_bw_GBps > 0 for s in shapes):
        names.append("nvls_tree_bw_scale")
    return [k for k in names if k not in ("intra_bw_GBps", "net_bw_GBps", "nvls_bw_GBps") or _visible(group, runs, k)]


def _visible(group: DeviceGroup, runs: Sequence[NcclTestsRun], name: str) -> bool:
    """Whether the runs see a link bandwidth: 5% less of it slows at least a quarter of the rows of 1 MiB and
    more by 0.5%.  One they hardly depend on (the scale-out bandwidth of a 2-node NVLS-tree all-reduce that
    NVLink bounds) keeps its physical value instead of absorbing what the others miss (and then
    mispredicting another node count)."""
    start = _start(group, runs)[name]
    if start <= 0:
        return False
    slower = _with(group, **{name: start * 0.95})
    pairs = [(a.predicted_us, b.predicted_us) for a, b in zip(predict_rows(group, runs), predict_rows(slower, runs))
             if a.size_bytes >= _VISIBLE_MIN_BYTES]
    changed = sum(b > a * 1.005 for a, b in pairs)
    return bool(pairs) and changed >= 0.25 * len(pairs)


_VISIBLE_MIN_BYTES = 1 << 20


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
        **{f"{p}_latency_us": s.proto_latency_us[i] for i, p in enumerate(("ll", "ll128", "simple"))},
        **{f"{p}_bw_scale": s.proto_bw_scale[i] for i, p in enumerate(("ll", "ll128", "simple"))},
        "simple_fill_us": s.simple_fill_us,
        "nvls_tree_bw_scale": s.nvls_tree_bw_scale,
        "simple_fill_bytes": group.nccl.simple_fill_bytes or s.simple_fill_bytes or _DEFAULT_FILL_BYTES,
        "tree_fill_us": s.tree_fill_us,
        "tree_fill_bytes": group.nccl.tree_fill_bytes or s.tree_fill_bytes or _DEFAULT_FILL_BYTES,
    }


def _grid(name: str, value: float, span: float) -> list[float]:
    steps = [i / 10.0 for i in range(-10, 11)]
    if name in BW_PARAMS:
        return [value * math.exp(span * k) for k in steps]
    return [value + span * 100.0 * k for k in steps]


#: latencies that cannot go below 0 (the base latency may, a little: NCCL's base figures can exceed a fabric's)
_NON_NEGATIVE = ("net_latency_us", "simple_fill_us")
_MIN_BASE_LATENCY_US = -10.0
#: a fitted bandwidth stays within these factors of the physical one: calibration finds the efficiency a
#: fabric reaches, it cannot make a link several times slower (which would only absorb what other terms miss)
_BW_RANGE = (0.4, 1.25)
#: the message size at which Simple's fill stops growing is searched over a wide range of its start
_FILL_BYTES_RANGE = (1.0 / 64.0, 64.0)
_DEFAULT_FILL_BYTES = 64.0 * (1 << 20)
_SIMPLEX_ITERATIONS = 400


def _clamp(name: str, value: float, prior: float) -> float:
    if name in BW_PARAMS:
        lo, hi = _FILL_BYTES_RANGE if name == "simple_fill_bytes" else _BW_RANGE
        return min(max(value, prior * lo), prior * hi) if prior > 0 else value
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


def calibrate(base: Cluster, runs: Sequence[NcclTestsRun], *, params: Sequence[str] | None = None) -> Calibration:
    """Fit the first device group of ``base`` to ``runs`` (nccl-tests tables of one fabric): a coarse
    coordinate search over a grid, then a Nelder-Mead refinement of all parameters together.  ``params``
    restricts the fit to those parameters (default: every one the runs can see)."""
    if not runs:
        raise ConfigError("expected at least one nccl-tests log, found none", field="LOG")
    group = base.groups[0]
    free = _free_params(group, runs)
    if params is not None:
        free = [k for k in params if k in free]
    else:  # the per-protocol terms are fitted afterwards, in closed form (_fit_protocols); the measured
        # constants (MEASURED_ONLY) stay: a calibration fits the link bandwidths they scale
        free = [k for k in free if k not in PROTO_PARAMS and k not in MEASURED_ONLY]
        if len({r.n_nodes for r in runs if r.n_nodes > 1}) < 2 and "latency_us" in free:
            # one node count: every collective crosses the network the same number of times, so a latency per
            # inter-node step and the base latency are one number; fitting both splits it arbitrarily, and the
            # split decides what another node count pays.  The step keeps its physical value.
            free = [k for k in free if k != "net_latency_us"]
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
    if params is None:
        tuning = _fit_protocols(group, tuning, runs)
        free = free + [k for k in PROTO_PARAMS if getattr(tuning, k) is not None]
    fitted = dataclasses.replace(group, nccl=tuning)
    return Calibration(tuning, tuple(free), tuple(predict_rows(fitted, runs)), at_bound)


_PROTOS = (Proto.LL, Proto.LL128, Proto.SIMPLE)
_PROTO_NAMES = ("ll", "ll128", "simple")
#: a fitted per-protocol bandwidth factor stays within this range (of the model's bandwidth for the protocol)
_SCALE_RANGE = (0.3, 2.0)
#: LL128's modelled bandwidth is already the link's at the protocol's payload share (120 of 128 bytes, NCCL's
#: 0.92): a log cannot make it faster than that (a factor above 1 only trades against a fitted latency, on the
#: few medium sizes NCCL runs LL128 at, and then wins large messages on another node count that it never ran)
_MAX_SCALE = {Proto.LL128: 1.0}
_PROTO_ROUNDS = 8


_Row = tuple[float, float, float, int, float, float, float]


def _protocol_terms(group: DeviceGroup, runs: Sequence[NcclTestsRun]) -> dict[Proto, list[_Row]]:
    """Per protocol, each row it is chosen for as (measured us, latency us without the protocol's own terms,
    transfer us at the protocol's unscaled bandwidth, size bytes, the share of a Simple fill it pays: 0 for
    point-to-point and trees, model.fill_stages otherwise, 1 for a tree, which pays a fill of its own, and the
    fill NCCL's chunking gives a tree: model.tree_pipeline_fill_us, 0 for other algorithms)."""
    out: dict[Proto, list[_Row]] = {p: [] for p in _PROTOS}
    for run in runs:
        s = run_shape(group, run)
        for r in run.rows:
            p = _price(s, run.collective, r.size_bytes, None, None)
            i = _PROTOS.index(p.proto)
            tree = p.algo is Algo.TREE and p.proto is Proto.SIMPLE
            own = s.proto_latency_us[i] + simple_fill_us(s, p.algo, p.proto, r.size_bytes)
            lat = latency_us(s, run.collective, p.algo, p.proto, r.size_bytes) - own
            bw = runtime_algbw_GBps(s, run.collective, p.algo, p.proto, r.size_bytes) / s.proto_bw_scale[i]
            share = 0.0 if p.algo in (Algo.P2P, Algo.TREE) else fill_stages(s)  # as model.simple_fill_us charges it
            out[p.proto].append((r.time_us, lat, r.size_bytes / (1000.0 * bw), r.size_bytes, share, float(tree),
                                   tree_pipeline_fill_us(s, r.size_bytes) if tree else 0.0))
    return out


def _robust_fit(cols: list[list[float]], y: list[float]) -> list[float] | None:
    """Coefficients minimising ``sum rho(sum_j c_j cols[j] - y)`` by iteratively reweighted least squares:
    least absolute deviations first (a start that outliers do not drag), then the Cauchy loss (_rho)."""
    w = [1.0] * len(y)
    coef = None
    for i in range(_IRLS_ROUNDS):
        sw = [math.sqrt(v) for v in w]
        coef = _least_squares([[c * s for c, s in zip(col, sw)] for col in cols], [v * s for v, s in zip(y, sw)])
        if coef is None:
            return None
        res = [sum(c * col[k] for c, col in zip(coef, cols)) - y[k] for k in range(len(y))]
        if i < _IRLS_ROUNDS // 2:
            w = [1.0 / max(abs(r), 1e-4) for r in res]
        else:
            w = [1.0 / (1.0 + (r / _ROBUST_SCALE) ** 2) for r in res]
    return coef


_IRLS_ROUNDS = 40


def _least_squares(cols: list[list[float]], y: list[float]) -> list[float] | None:
    """Coefficients minimising ``|sum_j c_j cols[j] - y|^2`` (normal equations, Gaussian elimination)."""
    n = len(cols)
    a = [[sum(u * v for u, v in zip(cols[i], cols[j])) for j in range(n)] + [sum(u * v for u, v in zip(cols[i], y))]
         for i in range(n)]
    for i in range(n):
        piv = max(range(i, n), key=lambda r: abs(a[r][i]))
        if abs(a[piv][i]) < 1e-300:
            return None
        a[i], a[piv] = a[piv], a[i]
        for r in range(n):
            if r != i:
                f = a[r][i] / a[i][i]
                a[r] = [x - f * z for x, z in zip(a[r], a[i])]
    return [a[i][n] / a[i][i] for i in range(n)]


def _sse(cols: list[list[float]], coef: list[float], y: list[float]) -> float:
    """Summed robust loss (_rho) of a fit's relative errors."""
    return sum(_rho(sum(c * col[k] for c, col in zip(coef, cols)) - y[k]) for k in range(len(y)))


#: candidate sizes at which Simple's pipeline fill stops growing: powers of two (and their 1.5x) 256 KiB-16 GiB
_FILL_SIZES = tuple(sorted({int(f * (1 << e)) for e in range(18, 35) for f in (1.0, 1.5)}))


def _solve_protocol(rows: list[_Row], with_fill: bool,
                    max_scale: float = _SCALE_RANGE[1]) -> tuple[float, float, float, float, float, float]:
    """(latency added, bandwidth factor, fill us, fill bytes, tree fill us, tree fill bytes) minimising the
    squared relative error of ``t = lat + d + x / k + fill x min(1, size / fill_bytes)``, a tree's row paying
    ``tree fill x min(1, size / tree fill bytes)`` where fitted and the fill NCCL's chunking gives it otherwise:
    linear least squares in ``d``, ``1/k`` and the fills for each candidate growth size; terms the rows cannot
    pin down (or that come out unphysical: a bandwidth factor outside _SCALE_RANGE, a negative fill) are left
    out (a tree fill left out: the chunking's)."""
    bare = [(r[0] - r[1]) / r[0] for r in rows]  # a fitted tree fill in place of the chunking's
    y = [(r[0] - r[1] - r[6]) / r[0] for r in rows]
    a = [1.0 / r[0] for r in rows]
    b = [r[2] / r[0] for r in rows]
    best: tuple[float, tuple[float, float, float, float, float, float]] | None = None

    def consider(cols: list[list[float]], make, target: list[float] = y) -> None:
        nonlocal best
        coef = _robust_fit(cols, target)
        if coef is None:
            return
        out = make(coef)
        if out is None:
            return
        err = _sse(cols, coef, target)
        if best is None or err < best[0] - 1e-15:
            best = (err, out)

    def physical(inv: float) -> bool:
        return inv > 0 and _SCALE_RANGE[0] <= 1.0 / inv <= max_scale

    # the protocol's latency may shrink the modelled one by half at most: a fill or a steeper slope must not
    # buy a fit of large messages with a negative latency that small messages would then pay
    floor = -0.5 * min(r[1] for r in rows)

    def latency_ok(d: float) -> bool:
        return d >= floor

    consider([a], lambda c: (c[0], 1.0, 0.0, 0.0, 0.0, 0.0) if latency_ok(c[0]) else None)
    if len(rows) >= 3:
        consider([a, b], lambda c: (c[0], 1.0 / c[1], 0.0, 0.0, 0.0, 0.0) if physical(c[1]) and latency_ok(c[0]) else None)
        consider([b], lambda c: (0.0, 1.0 / c[0], 0.0, 0.0, 0.0, 0.0) if physical(c[0]) else None)
    if with_fill and len(rows) >= 5:
        trees = any(r[5] for r in rows)
        for size in _FILL_SIZES:
            sz = float(size)
            f = [r[4] * min(1.0, r[3] / size) / r[0] for r in rows]
            g = [r[5] * min(1.0, r[3] / size) / r[0] for r in rows]
            consider([a, b, f], lambda c, sz=sz: (c[0], 1.0 / c[1], c[2], sz, 0.0, 0.0)
                     if physical(c[1]) and c[2] > 0 and latency_ok(c[0]) else None)
            consider([b, f], lambda c, sz=sz: (0.0, 1.0 / c[0], c[1], sz, 0.0, 0.0)
                     if physical(c[0]) and c[1] > 0 else None)
            if trees:
                consider([a, b, g], lambda c, sz=sz: (c[0], 1.0 / c[1], 0.0, 0.0, c[2], sz)
                         if physical(c[1]) and c[2] > 0 and latency_ok(c[0]) else None, bare)
                consider([b, g], lambda c, sz=sz: (0.0, 1.0 / c[0], 0.0, 0.0, c[1], sz)
                         if physical(c[0]) and c[1] > 0 else None, bare)
                consider([a, b, f, g], lambda c, sz=sz: (c[0], 1.0 / c[1], c[2], sz, c[3], sz)
                         if physical(c[1]) and c[2] > 0 and c[3] > 0 and latency_ok(c[0]) else None, bare)
    if best is None:  # nothing physical: leave the protocol as modelled
        return 0.0, 1.0, 0.0, 0.0, 0.0, 0.0
    return best[1]


def _fit_protocols(group: DeviceGroup, tuning: NcclTuning, runs: Sequence[NcclTestsRun]) -> NcclTuning:
    """Fit each protocol's latency and bandwidth factor to the rows NCCL would run with it, in closed form;
    the choice of protocol then moves with the fit, so repeat and keep the best (deterministic)."""
    best, best_loss = tuning, _loss(dataclasses.replace(group, nccl=tuning), runs)
    for _ in range(_PROTO_ROUNDS):
        improved = False
        for i, proto in enumerate(_PROTOS):  # one protocol at a time: a change is kept only if the fit improves
            rows = _protocol_terms(dataclasses.replace(group, nccl=best), runs)[proto]
            if not rows:
                continue
            d, k, fill, fill_bytes, tree_fill, tree_bytes = _solve_protocol(rows, proto is Proto.SIMPLE,
                                                                            _MAX_SCALE.get(proto, _SCALE_RANGE[1]))
            changes: dict[str, float | None] = {f"{_PROTO_NAMES[i]}_latency_us": round(d, 3),
                                         f"{_PROTO_NAMES[i]}_bw_scale": round(k, 4)}
            if proto is Proto.SIMPLE:
                changes["simple_fill_us"], changes["simple_fill_bytes"] = round(fill, 3), fill_bytes
                if any(r[5] for r in rows):  # a fitted tree fill, or the chunking's (None)
                    changes["tree_fill_us"] = round(tree_fill, 3) if tree_bytes else None
                    changes["tree_fill_bytes"] = tree_bytes or None
            trial = dataclasses.replace(best, **changes)
            loss = _loss(dataclasses.replace(group, nccl=trial), runs)
            if loss < best_loss - 1e-9:
                best, best_loss, improved = trial, loss, True
        if not improved:
            break
    return best



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
