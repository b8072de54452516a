"""One trace replayed on several backends: the replay engine over the same cluster topology, with
the simulated iteration time and the wall-clock cost of each."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xsim_trace.cluster import Cluster
from xsim_trace.errors import XsimError
from xsim_trace.sweep.backends import close_backend, make_named_backend


@dataclass(frozen=True, slots=True)
class ReplayRun:
    backend: str
    iteration_ns: int
    flows: int
    setup_s: float
    run_s: float
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "iteration_ns": self.iteration_ns, "flows": self.flows,
                "setup_s": round(self.setup_s, 6), "run_s": round(self.run_s, 6), "error": self.error}


def load_workload(prefix: str, *, drop_missing_deps: bool = False) -> Any:
    from xsim_trace.io import read_rank_set  # noqa: PLC0415
    from xsim_trace.replay.api import compile_checked  # noqa: PLC0415

    rs = read_rank_set(prefix)
    return compile_checked(rs.traces, rs.comm_groups, drop_missing_deps=drop_missing_deps)


def replay_on(backend_name: str, workload: Any, cluster: Cluster, settings: Any = None) -> ReplayRun:
    """Replay a compiled workload over ``make_backend(backend_name, build_topology(cluster))``."""
    from xsim_trace.network.topology import build_topology  # noqa: PLC0415
    from xsim_trace.replay import replay_compiled  # noqa: PLC0415

    t0 = time.perf_counter()
    backend = make_named_backend(backend_name, build_topology(cluster))
    t1 = time.perf_counter()
    try:
        result = replay_compiled(workload, backend, settings, cluster=cluster)
    finally:
        close_backend(backend)
    t2 = time.perf_counter()
    return ReplayRun(backend_name, int(result.iteration_ns), int(result.stats.flows), t1 - t0, t2 - t1)


def compare_replay(prefix: str, cluster: Cluster, backends: Sequence[str], settings: Any = None, *,
                   drop_missing_deps: bool = False) -> tuple[ReplayRun, ...]:
    """The trace at ``prefix`` on each backend; a failing backend is recorded, not fatal."""
    workload = load_workload(prefix, drop_missing_deps=drop_missing_deps)
    runs = []
    for name in backends:
        try:
            runs.append(replay_on(name, workload, cluster, settings))
        except XsimError as exc:
            runs.append(ReplayRun(name, 0, 0, 0.0, 0.0, error=str(exc)))
    return tuple(runs)
