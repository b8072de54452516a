"""Validation end to end over already converted graphs: complete absent peers, start ranks at their
measured offsets, replay over a cluster and a network backend, compare with the measurements."""

from __future__ import annotations

import importlib
import logging
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from xsim_trace.errors import BackendError, ConfigError
from xsim_trace.graph.model import Trace
from xsim_trace.validate.compare import Validation, compare
from xsim_trace.validate.measured import RankMeasurement, shared_clock, start_skew_ns
from xsim_trace.validate.scenario import mirror_peers
from xsim_trace.validate.simulate import simulate

log = logging.getLogger(__name__)


def load_cluster(spec: str) -> Any:
    """A cluster from a YAML/JSON file, or a bundled preset by name (``v100-dgx1``, ``a100-node``...)."""
    from xsim_trace.cluster.load import read_cluster_file

    path = Path(spec)
    if path.is_file():
        return read_cluster_file(path)
    preset = resources.files("xsim_trace") / "data" / "clusters" / f"{spec}.yaml"
    if preset.is_file():
        with resources.as_file(preset) as p:
            return read_cluster_file(p)
    names = sorted(p.name[:-5] for p in (resources.files("xsim_trace") / "data" / "clusters").iterdir()
                   if p.name.endswith(".yaml"))
    raise ConfigError(f"no such cluster file or preset (presets: {', '.join(names)})", field="cluster", file=spec)


def make_backend(name: str, cluster: Any) -> Any:
    """The named network backend over ``cluster``'s topology (the network package's registry)."""
    try:
        build_topology = importlib.import_module("xsim_trace.network.topology").build_topology
        make_named_backend = importlib.import_module("xsim_trace.sweep.backends").make_named_backend
    except (ImportError, AttributeError) as exc:
        raise BackendError(f"network backends are not installed ({exc})", field="backend") from None
    return make_named_backend(name, build_topology(cluster))


def engine_runner(cluster: Any, backend: str = "analytical", settings: Any = None):
    """A ``run(traces, comm_groups)`` for :func:`simulate` over the replay engine."""
    from xsim_trace.replay.api import replay

    def run(traces: Mapping[int, Trace], comm_groups):
        be = make_backend(backend, cluster)
        try:
            result = replay(traces, be, settings, comm_groups=comm_groups, cluster=cluster)
        finally:
            close = getattr(be, "close", None)
            if callable(close):
                close()
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
) -> Validation:
    """Replay ``traces`` (completed with mirrored peers up to ``world_size``) with ``run`` and compare
    the ranks present in ``measured``."""
    notes: list[str] = []
    world = max([world_size or 0, max(traces) + 1] + [m.world_size or 0 for m in measured.values()])
    full = dict(traces)
    if len(full) < world:
        full, mirrored = mirror_peers(traces, world, alltoall_order=alltoall_order, comm_groups=comm_groups)
        notes.append(f"{len(mirrored)} absent peer(s) of {world} modelled as mirrors of the captured rank(s)")
    offsets: dict[int, int] = {}
    if skew and shared_clock(measured):
        offsets = start_skew_ns(measured)
        notes.append("ranks share a clock: each starts at its measured step-start offset")
    elif skew and len(measured) > 1:
        notes.append("ranks do not share a clock: all start together")
    sim = simulate(full, comm_groups, run, start_offsets_ns=offsets, report_ranks=tuple(sorted(measured)))
    return compare(name, cluster_name, measured, sim, notes)
