"""Built-in micro workloads for comparing network backends, and the loop that drives a backend.

Cases on ``ranks`` ranks of one switch, every flow ``size_bytes``, all starting at 0 ns:

- ``single``: one flow 0 -> 1 (every backend should agree: size / bandwidth + latencies);
- ``ring``: i -> i+1 for every rank (full-duplex links, no two flows share a link: agree too);
- ``incast``: ranks 1..n-1 -> 0 (they share the switch's link down to rank 0);
- ``shared``: 0 -> 1..n-1 (they share rank 0's link up to the switch).

Where a link is shared (incast, shared) the last flow ends after (n-1) flows' time on every
backend: the fluid ones share the link, ``analytical`` books the shared endpoint port in turn.

Cases on a cluster (``CLUSTER_CASES``; default ``dgx-a100:2``, two nodes of 8 GPUs, one 25 GB/s NIC
per GPU), ``size_bytes`` in all:

- ``reshard``: TP8 -> TP1 between stages: every GPU of node 0 sends ``size / 8`` to GPU 0 of node 1
  (all bytes enter one NIC: the floor is ``size / nic_bw``);
- ``p2p``: one cross-node send, GPU 0 of node 0 -> GPU 0 of node 1 (NVLink-NIC-switch-NIC-NVLink);
- ``collective``: a ring all-reduce over every rank, 2(n-1) dependent steps of ``size / n``
  (step k of rank r starts when step k-1 of rank r-1 has arrived).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from xsim_trace.errors import BackendError, ConfigError
from xsim_trace.network.protocol import Flow, capabilities_of
from xsim_trace.sweep.backends import close_backend, make_named_backend, star_topology

STAR_CASES = ("single", "ring", "incast", "shared")
CLUSTER_CASES = ("reshard", "p2p", "collective")
MICRO_CASES = STAR_CASES + CLUSTER_CASES
#: the cluster of the cluster cases when none is given
DEFAULT_CASE_CLUSTER = "dgx-a100:2"
#: the horizon given once every flow has started (~146 years of simulated time)
NO_MORE_STARTS = 1 << 62


@dataclass(frozen=True, slots=True)
class TimedFlow:
    """A flow that starts at ``start_ns`` or when the flows ``after`` have all completed, if later."""

    start_ns: int
    flow: Flow
    after: tuple[int, ...] = ()


#: ranks of one micro-benchmark switch (a ring of this many flows simulates in seconds)
MAX_MICRO_RANKS = 1 << 14


def micro_flows(case: str, ranks: int, size_bytes: int) -> tuple[TimedFlow, ...]:
    if case not in STAR_CASES:
        raise ConfigError(f"expected one of {', '.join(MICRO_CASES)}, found {case!r}", field="case")
    if not 2 <= ranks <= MAX_MICRO_RANKS:
        raise ConfigError(f"expected 2..{MAX_MICRO_RANKS} ranks, found {ranks}", field="ranks")
    if size_bytes <= 0:
        raise ConfigError(f"expected a positive size, found {size_bytes}", field="size_bytes")
    if case == "single":
        pairs = [(0, 1)]
    elif case == "ring":
        pairs = [(r, (r + 1) % ranks) for r in range(ranks)]
    elif case == "incast":
        pairs = [(r, 0) for r in range(1, ranks)]
    else:
        pairs = [(0, r) for r in range(1, ranks)]
    return tuple(TimedFlow(0, Flow(i, s, d, size_bytes)) for i, (s, d) in enumerate(pairs))


def cluster_flows(case: str, cluster: Any, size_bytes: int) -> tuple[TimedFlow, ...]:
    """The flows of a cluster case (see the module docstring) on a resolved ``Cluster``."""
    if case not in CLUSTER_CASES:
        raise ConfigError(f"expected one of {', '.join(CLUSTER_CASES)}, found {case!r}", field="case")
    if size_bytes <= 0:
        raise ConfigError(f"expected a positive size, found {size_bytes}", field="size_bytes")
    if cluster.num_nodes < 2:
        raise ConfigError(f"case {case} needs a cluster of at least 2 nodes, found {cluster.num_nodes}", field="cluster")
    node0 = [r for r in range(cluster.num_ranks) if cluster.node_of(r) == 0]
    dst = next(r for r in range(cluster.num_ranks) if cluster.node_of(r) == 1)
    if case == "p2p":
        return (TimedFlow(0, Flow(0, node0[0], dst, size_bytes)),)
    if case == "reshard":
        k = len(node0)
        part = [size_bytes // k + (1 if i < size_bytes % k else 0) for i in range(k)]
        return tuple(TimedFlow(0, Flow(i, s, dst, part[i])) for i, s in enumerate(node0))
    n = cluster.num_ranks
    chunk = max(size_bytes // n, 1)
    out = []
    for step in range(2 * (n - 1)):
        for r in range(n):
            after = () if step == 0 else ((step - 1) * n + (r - 1) % n,)
            out.append(TimedFlow(0, Flow(step * n + r, r, (r + 1) % n, chunk), after))
    return tuple(out)


def run_flows(backend: Any, flows: Iterable[TimedFlow], *, use_horizon: bool = True) -> dict[int, int]:
    """Drive ``backend`` through the protocol: start each flow at its time (or when the flows it
    comes after have completed), advance to every completion; returns flow_id -> finish ns.
    Backends declaring ``horizon_hint`` are told the next start time
    (``next_completion_ns(horizon_ns=...)``) so that they need not speculate."""
    flows = list(flows)
    by_id = {f.flow.flow_id: f for f in flows}
    waits = {f.flow.flow_id: len(f.after) for f in flows}
    then: dict[int, list[int]] = {}
    for f in flows:
        for a in f.after:
            if a not in by_id:
                raise ConfigError(f"flow {f.flow.flow_id} comes after flow {a}, which is not given", field="after")
            then.setdefault(a, []).append(f.flow.flow_id)
    ready = [(f.start_ns, f.flow.flow_id) for f in flows if not f.after]
    heapq.heapify(ready)
    finish: dict[int, int] = {}
    horizon = capabilities_of(backend).horizon_hint and use_horizon
    while True:
        start = ready[0][0] if ready else None
        nxt = backend.next_completion_ns(horizon_ns=NO_MORE_STARTS if start is None else start) if horizon \
            else backend.next_completion_ns()
        if start is not None and (nxt is None or start <= nxt):
            now = start
            done = backend.advance(now)
            while ready and ready[0][0] == now:
                backend.start_flow(by_id[heapq.heappop(ready)[1]].flow, now)
        elif nxt is not None:
            now = nxt
            done = backend.advance(now)
        else:
            break
        for fid in done:
            finish[fid] = now
            for nxt_id in then.get(fid, ()):
                waits[nxt_id] -= 1
                if waits[nxt_id] == 0:
                    heapq.heappush(ready, (max(by_id[nxt_id].start_ns, now), nxt_id))
    missing = [f.flow.flow_id for f in flows if f.flow.flow_id not in finish]
    if missing:
        raise BackendError(f"backend {backend.name} went idle with flows {missing[:5]} unfinished")
    return finish


@dataclass(frozen=True, slots=True)
class BackendRun:
    backend: str
    case: str
    flows: int
    makespan_ns: int
    finish_ns: tuple[int, ...]  # by flow id
    setup_s: float
    run_s: float
    error: str | None = None

    @property
    def wall_per_flow_s(self) -> float:
        return self.run_s / self.flows if self.flows else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "case": self.case, "flows": self.flows, "makespan_ns": self.makespan_ns,
            "finish_ns": list(self.finish_ns), "setup_s": round(self.setup_s, 6), "run_s": round(self.run_s, 6),
            "wall_per_flow_s": round(self.wall_per_flow_s, 9), "error": self.error,
        }


def run_on_backend(name: str, topology: Any, flows: Sequence[TimedFlow], case: str = "custom") -> BackendRun:
    t0 = time.perf_counter()
    backend = make_named_backend(name, topology)
    t1 = time.perf_counter()
    try:
        finish = run_flows(backend, flows)
    finally:
        close_backend(backend)
    t2 = time.perf_counter()
    ids = sorted(finish)
    return BackendRun(name, case, len(flows), max(finish.values(), default=0), tuple(finish[i] for i in ids),
                      t1 - t0, t2 - t1)


@dataclass(frozen=True, slots=True)
class Comparison:
    case: str
    ranks: int
    size_bytes: int
    bw_GBps: float
    latency_ns: int
    runs: tuple[BackendRun, ...] = field(default=())

    def reference(self) -> BackendRun | None:
        ok = [r for r in self.runs if r.error is None]
        return ok[0] if ok else None


def compare_backends(
    backends: Sequence[str], case: str, ranks: int, size_bytes: int, bw_GBps: float, latency_ns: int,
    *, keep_going: bool = True, cluster: Any = None,
) -> Comparison:
    """Run one micro case on each backend (a failing backend is recorded, not fatal, with keep_going).
    Star cases use ``ranks``, ``bw_GBps``, ``latency_ns``; cluster cases the resolved ``cluster``
    (default :data:`DEFAULT_CASE_CLUSTER`)."""
    if case in CLUSTER_CASES:
        from xsim_trace.cluster import load_cluster  # noqa: PLC0415
        from xsim_trace.network.topology import build_topology  # noqa: PLC0415

        if cluster is None:
            cluster = load_cluster(DEFAULT_CASE_CLUSTER)
        flows = cluster_flows(case, cluster, size_bytes)
        topology = build_topology(cluster)
        ranks = cluster.num_ranks
    else:
        flows = micro_flows(case, ranks, size_bytes)
        topology = star_topology(ranks, bw_GBps, latency_ns)
    runs = []
    for name in backends:
        try:
            runs.append(run_on_backend(name, topology, flows, case))
        except BackendError as exc:
            if not keep_going:
                raise
            runs.append(BackendRun(name, case, len(flows), 0, (), 0.0, 0.0, error=str(exc)))
    return Comparison(case, ranks, size_bytes, bw_GBps, latency_ns, tuple(runs))


def ideal_ns(case: str, ranks: int, size_bytes: int, bw_GBps: float, latency_ns: int, *, shared: bool) -> int:
    """Hand formula for the last finish: two hops of latency plus serialisation of one flow
    (``shared=False``) or of every flow sharing the bottleneck link (``shared=True``)."""
    per_flow_ns = size_bytes / bw_GBps  # bytes / (1e9 bytes/s) = ns
    k = (ranks - 1) if (shared and case in ("incast", "shared")) else 1
    return round(2 * latency_ns + k * per_flow_ns)
