"""Built-in micro workloads for comparing network backends, and the loop that drives a backend.

Cases on ``ranks`` ranks of one switch, every flow ``size_bytes``, all starting at 0 ns:

- ``single``: one flow 0 -> 1 (every backend should agree: size / bandwidth + latencies);
- ``ring``: i -> i+1 for every rank (full-duplex links, no two flows share a link: agree too);
- ``incast``: ranks 1..n-1 -> 0 (they share the switch's link down to rank 0);
- ``shared``: 0 -> 1..n-1 (they share rank 0's link up to the switch).

Without contention (``analytical``) the last flow of incast/shared ends after one flow's time;
with fair sharing it ends after (n-1) flows' time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from xsim_trace.errors import BackendError, ConfigError
from xsim_trace.network.protocol import Flow, capabilities_of
from xsim_trace.sweep.backends import close_backend, make_named_backend, star_topology

MICRO_CASES = ("single", "ring", "incast", "shared")
#: the horizon given once every flow has started (~146 years of simulated time)
NO_MORE_STARTS = 1 << 62


@dataclass(frozen=True, slots=True)
class TimedFlow:
    start_ns: int
    flow: Flow


#: ranks of one micro-benchmark switch (a ring of this many flows simulates in seconds)
MAX_MICRO_RANKS = 1 << 14


def micro_flows(case: str, ranks: int, size_bytes: int) -> tuple[TimedFlow, ...]:
    if case not in MICRO_CASES:
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


def run_flows(backend: Any, flows: Iterable[TimedFlow], *, use_horizon: bool = True) -> dict[int, int]:
    """Drive ``backend`` through the protocol: start each flow at its time, advance to every
    completion; returns flow_id -> finish ns.  Backends declaring ``horizon_hint`` are told the next
    start time (``next_completion_ns(horizon_ns=...)``) so that they need not speculate."""
    pending = sorted(flows, key=lambda f: (f.start_ns, f.flow.flow_id))
    finish: dict[int, int] = {}
    i = 0
    horizon = capabilities_of(backend).horizon_hint and use_horizon
    while True:
        start = pending[i].start_ns if i < len(pending) else None
        nxt = backend.next_completion_ns(horizon_ns=NO_MORE_STARTS if start is None else start) if horizon \
            else backend.next_completion_ns()
        if start is not None and (nxt is None or start <= nxt):
            now = start
            done = backend.advance(now)
            while i < len(pending) and pending[i].start_ns == now:
                backend.start_flow(pending[i].flow, now)
                i += 1
        elif nxt is not None:
            now = nxt
            done = backend.advance(now)
        else:
            break
        for fid in done:
            finish[fid] = now
    missing = [f.flow.flow_id for f in pending if f.flow.flow_id not in finish]
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
    *, keep_going: bool = True,
) -> Comparison:
    """Run one micro case on each backend (a failing backend is recorded, not fatal, with keep_going)."""
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
