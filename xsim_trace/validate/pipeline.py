"""Validation end to end over already converted graphs: complete absent peers, start ranks at their
measured offsets, replay over a cluster and a network backend, compare with the measurements."""

from __future__ import annotations

import logging
from pathlib import Path
from dataclasses import replace
from typing import Any, Callable, Mapping

import numpy as np

from xsim_trace.errors import ConfigError
from xsim_trace.graph import attrs as A
from xsim_trace.cluster import Cluster
from xsim_trace.graph.model import Trace
from xsim_trace.network.protocol import NetworkBackend
from xsim_trace.validate.compare import Validation, compare
from xsim_trace.validate.measured import RankMeasurement, measure, peer_waits, shared_clock, start_skew_ns
from xsim_trace.validate.scenario import mirror_peers
from xsim_trace.validate.simulate import simulate

log = logging.getLogger(__name__)


def make_backend(name: str, cluster: Cluster) -> NetworkBackend:
    """The named network backend over ``cluster``'s topology (the network package's registry)."""
    from xsim_trace.network import build_topology
    from xsim_trace.network import make_backend as make_named

    return make_named(name, build_topology(cluster))


def collective_model(cluster: Cluster, backend: str, settings: Any = None) -> tuple[Any, Any]:
    """``(pricer, settings)``: the NCCL model's pricer when the replay on ``backend`` prices collectives
    with it (the default on a closed-form backend, see :func:`xsim_trace.replay.api.collective_pricer`),
    else None; ``settings`` with the collective model the replay uses."""
    from xsim_trace.network.protocol import close_backend
    from xsim_trace.replay.api import collective_pricer
    from xsim_trace.replay.settings import ReplaySettings

    be = make_backend(backend, cluster)
    try:
        return collective_pricer(settings if settings is not None else ReplaySettings(), cluster, be)
    finally:
        close_backend(be)


def engine_runner(cluster: Cluster, backend: str = "analytical", settings: Any = None):
    """A ``run(traces, comm_groups)`` for :func:`simulate` over the replay engine."""
    from xsim_trace.network.protocol import close_backend
    from xsim_trace.replay.api import replay

    def run(traces: Mapping[int, Trace], comm_groups):
        be = make_backend(backend, cluster)
        try:
            result = replay(traces, be, settings, comm_groups=comm_groups, cluster=cluster)
        finally:
            close_backend(be)
        return (np.asarray(result.workload.rank_ptr), np.asarray(result.times.start_ns),
                np.asarray(result.times.end_ns))

    return run


def validate_converted(
    name: str,
    traces: Mapping[int, Trace],
    comm_groups: Mapping[str, tuple[int, ...]] | None,
    measured: Mapping[int, RankMeasurement],
    run,
    *,
    cluster_name: str,
    world_size: int | None = None,
    skew: bool = True,
    alltoall_order=None,
    pricer=None,
) -> Validation:
    """Replay ``traces`` (completed with mirrored peers up to ``world_size``) with ``run`` and compare
    the ranks present in ``measured``.  With ``pricer`` (the NCCL model, :class:`NcclPricer`) the per-kernel
    rows show the algorithm/protocol it chose, and a single captured rank's mirrors arrive at each
    collective as late as the measured kernel says (measured minus modelled transfer)."""
    notes: list[str] = []
    world = max([world_size or 0, max(traces) + 1] + [m.world_size or 0 for m in measured.values()])
    full = dict(traces)
    if len(full) < world:
        full, mirrored = mirror_peers(traces, world, alltoall_order=alltoall_order, comm_groups=comm_groups)
        notes.append(f"{len(mirrored)} absent peer(s) of {world} modelled as mirrors of the captured rank(s)")
    if pricer is not None:  # NCCL runs an all-to-all's sends and receives together: one collective for the model
        from xsim_trace.validate.alltoall import group_alltoalls  # noqa: PLC0415

        full, grouped = group_alltoalls(full)
        if grouped:
            traces = {r: full[r] for r in traces}
            notes.append(f"{grouped} all-to-all(s) over {len(full)} ranks converted as per-peer send/recv, priced as "
                         "one NCCL all-to-all each")
    offsets: dict[int, int] = {}
    if skew and shared_clock(measured):
        offsets = start_skew_ns(measured)
        notes.append("ranks share a clock: each starts at its measured step-start offset")
    elif skew and len(measured) > 1:
        notes.append("ranks do not share a clock: all start together")
    sim = simulate(full, comm_groups, run, start_offsets_ns=offsets, report_ranks=tuple(sorted(measured)))
    waits = {(w.rank, w.ordinal): w.wait_ns for w in peer_waits(measured)}
    if pricer is None:
        return compare(name, cluster_name, measured, sim, notes, peer_wait_ns=waits)
    return _with_model(name, cluster_name, traces, full, comm_groups, measured, run, sim, notes, waits, offsets,
                       world, pricer)


def _with_model(name, cluster_name, traces, full, comm_groups, measured, run, sim, notes, waits, offsets, world,
                pricer) -> Validation:
    """The NCCL model's choices on the rows; for one captured rank with mirrors, replay again with the
    mirrors' arrival skew implied by the model and report both."""
    from xsim_trace.validate.nccl_model import modelled_ops, with_peer_skew  # noqa: PLC0415

    prices = {r: modelled_ops(traces[r], comm_groups, world, pricer) for r in measured if r in traces}
    if len(measured) == 1 and len(full) > len(traces):
        (rank, m), = measured.items()
        model = prices.get(rank, [])
        delays = [max(0, k.duration_ns - model[k.ordinal].time_ns)
                  if k.ordinal < len(model) and model[k.ordinal] is not None else 0 for k in m.nccl]
        base = compare(name, cluster_name, measured, sim, (), peer_wait_ns=waits)
        skewed = {r: (t if r in traces else with_peer_skew(t, delays)) for r, t in full.items()}
        sim = simulate(skewed, comm_groups, run, start_offsets_ns=offsets, report_ranks=tuple(sorted(measured)))
        notes = [*notes, f"absent peers arrive at each collective as late as the measured kernel minus the NCCL "
                 f"model's transfer ({sum(delays) / 1e6:.3f} ms in all); mirrors arriving together give max |error| "
                 f"{base.max_abs_error_pct:.2f} % (step {base.ranks[0].simulated_ns / 1e6:.3f} ms)" if base.ranks else ""]
    v = compare(name, cluster_name, measured, sim, notes, peer_wait_ns=waits)
    rows = []
    for c in v.collectives:
        p = prices.get(c.rank, [])
        chosen = p[c.ordinal] if c.ordinal < len(p) else None
        rows.append(replace(c, model=f"{chosen.algo.value}/{chosen.proto.value}" if chosen else None))
    return replace(v, collectives=tuple(rows))


def merge(validations: list[Validation], name: str | None = None) -> Validation:
    """Several steps' validations as one: rank rows one per (rank, step), collective ordinals numbered
    on across the steps in order."""
    if not validations:
        raise ConfigError("nothing to merge")
    ranks = []
    colls = []
    offset: dict[int, int] = {}
    notes: list[str] = []
    for v in validations:
        ranks.extend(v.ranks)
        per_rank: dict[int, int] = {}
        for c in v.collectives:
            colls.append(replace(c, ordinal=c.ordinal + offset.get(c.rank, 0)))
            per_rank[c.rank] = max(per_rank.get(c.rank, 0), c.ordinal + 1)
        for r, n in per_rank.items():
            offset[r] = offset.get(r, 0) + n
        notes.extend(n for n in v.notes if n not in notes)
    first = validations[0]
    return Validation(name or first.name, first.cluster, tuple(ranks), tuple(colls), tuple(notes))


def validate_captures(
    spec: str,
    cluster: Cluster,
    convert: Callable[[int | None], tuple[Mapping[int, Trace], Mapping[str, tuple[int, ...]]]],
    *,
    backend: str = "analytical",
    step: int | str | None = None,
    skew: bool = True,
    alltoall_order=None,
    name: str | None = None,
    settings: Any = None,
) -> tuple[Validation, dict[int, RankMeasurement]]:
    """Measure ``spec``, convert it with ``convert(step)`` (the converter's front end), replay and compare.
    ``step="all"`` validates every ProfilerStep of the capture in turn and merges the results."""
    cluster_name = cluster.name
    pricer, settings = collective_model(cluster, backend, settings)
    runner = engine_runner(cluster, backend, settings)
    label = name or Path(spec.rstrip("/")).name
    if step == "all":
        numbers = [s.number for s in next(iter(measure(spec).values())).steps]
    else:
        numbers = [step]
    out: list[Validation] = []
    measured_all: dict[int, RankMeasurement] = {}
    for number in numbers:
        traces, groups = convert(number)
        first = traces[min(traces)]
        chosen = first.metadata.attr(A.META_STEP)
        use = int(chosen) if chosen is not None and int(chosen) >= 0 else number
        measured = measure(spec, use)
        world = first.metadata.attr(A.META_WORLD_SIZE)
        out.append(
            validate_converted(label, traces, groups, measured, runner, cluster_name=cluster_name,
                               world_size=int(world) if world is not None else None, skew=skew,
                               alltoall_order=alltoall_order, pricer=pricer)
        )
        if number == numbers[-1]:
            measured_all = dict(measured)
    return (out[0] if len(out) == 1 else merge(out, label)), measured_all
