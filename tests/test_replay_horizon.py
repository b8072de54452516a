"""The engine passes the horizon hint to a backend that accepts it (ns3), with the same times."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from replay_helpers import comp, recv, send, trace  # noqa: E402

from xsim_trace.network.ns3_backend import ns3_available  # noqa: E402
from xsim_trace.network.protocol import BackendCapabilities, Flow  # noqa: E402

SHARED = Path(__file__).parents[1].parent / "shared" / "traces"
CUSTOM_RING = SHARED / "chakra_et" / "astra_custom_ring_8npus" / "custom_allreduce"
BW, LAT = 12.5, 1000


class Recorder:
    """A contention-free one-flow-at-a-time backend that records how it was asked."""

    name = "test-recorder"
    capabilities = BackendCapabilities(horizon_hint=True)

    def __init__(self, flow_ns: int) -> None:
        self.flow_ns = flow_ns
        self.active: dict[int, int] = {}
        self.horizons: list[int | None] = []

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self.active[flow.flow_id] = now_ns + self.flow_ns

    def next_completion_ns(self, horizon_ns: int | None = None) -> int | None:
        self.horizons.append(horizon_ns)
        t = min(self.active.values()) if self.active else None
        return None if t is None or (horizon_ns is not None and t > horizon_ns) else t

    def advance(self, now_ns: int) -> list[int]:
        done = sorted(f for f, t in self.active.items() if t <= now_ns)
        for f in done:
            del self.active[f]
        return done


class HideHint:
    """The same backend without ``horizon_hint``: the engine asks it the plain way."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "hidden")

    def start_flow(self, flow, now_ns):
        self.inner.start_flow(flow, now_ns)

    def next_completion_ns(self):
        return self.inner.next_completion_ns()

    def advance(self, now_ns):
        return self.inner.advance(now_ns)


def _send_recv_with_compute():
    # rank 0 sends 1 B to rank 1 while rank 1 computes 500 ns then 700 ns; the flow takes 1000 ns
    return {0: trace(0, [send(1, 1, 1)]), 1: trace(1, [comp(1, dur_ns=500), comp(2, [1], 700), recv(3, 0, 1, deps=[2])])}


def test_the_horizon_is_the_engines_next_event_on_every_turn():
    from xsim_trace.replay import replay  # noqa: PLC0415

    be = Recorder(1000)
    r = replay(_send_recv_with_compute(), be)
    # flow 0 -> 1 runs 0..1000; rank 1's compute events come at 500 and 1200: the engine asks with
    # horizon 500 (no completion by then), then 1200 (completes at 1000), never without a horizon
    assert be.horizons[:2] == [500, 1200]
    assert None not in be.horizons
    assert r.iteration_ns == 1200
    plain = replay(_send_recv_with_compute(), HideHint(Recorder(1000)))
    assert plain.iteration_ns == 1200


@pytest.mark.ns3
@pytest.mark.skipif(not ns3_available(), reason="ns3 extra not installed (pip install -e .[ns3])")
@pytest.mark.skipif(not (CUSTOM_RING.parent / "custom_allreduce.0.et").exists(), reason=f"shared traces not found at {CUSTOM_RING.parent}")
def test_ns3_ring_trace_same_time_with_and_without_the_hint():
    from xsim_trace.cluster import single_switch  # noqa: PLC0415
    from xsim_trace.io import read_rank_set  # noqa: PLC0415
    from xsim_trace.network.ns3_backend import Ns3Backend  # noqa: PLC0415
    from xsim_trace.network.topology import build_topology  # noqa: PLC0415
    from xsim_trace.replay import compile_workload, replay_compiled  # noqa: PLC0415

    rs = read_rank_set(str(CUSTOM_RING))
    w = compile_workload(rs.traces, rs.comm_groups)
    cluster = single_switch(8, BW, LAT)
    out = {}
    for hint in (True, False):
        with Ns3Backend(build_topology(cluster)) as be:
            t0 = time.perf_counter()
            r = replay_compiled(w, be if hint else HideHint(be), cluster=cluster)
            out[hint] = (r.iteration_ns, r.stats.flows, time.perf_counter() - t0)
    print(f"ns3 8-NPU ring: with hint {out[True][2]:.2f} s, without {out[False][2]:.2f} s, {out[True][0]} ns")
    assert out[True][:2] == out[False][:2]
    assert out[True][1] == 112


def test_the_engines_flow_factory_builds_ordinary_equal_frozen_flows():
    import dataclasses  # noqa: PLC0415

    from xsim_trace.replay.engine import make_flow  # noqa: PLC0415

    f = make_flow(7, 1, 2, 4096)
    assert type(f) is Flow and f == Flow(7, 1, 2, 4096) and hash(f) == hash(Flow(7, 1, 2, 4096))
    assert (f.flow_id, f.src, f.dst, f.size_bytes) == (7, 1, 2, 4096)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.src = 3  # type: ignore[misc]
