"""The backend contract (declared capabilities), one answer on every backend without contention,
endpoint sharing in ``analytical``, chunk pipelining and the per-flow event bound of ``analytical-ca``."""

from __future__ import annotations

from typing import ClassVar

import pytest

from xsim_trace.cluster import load_cluster, single_switch
from xsim_trace.errors import BackendError
from xsim_trace.network import build_topology, make_backend
from xsim_trace.network.protocol import (
    NO_CAPABILITIES,
    BackendCapabilities,
    Flow,
    NetworkBackend,
    PortBookedFlows,
    TransferPricing,
    capabilities_of,
)
from xsim_trace.network.registry import available_backends
from xsim_trace.sweep.micro import MICRO_CASES, STAR_CASES, compare_backends, run_flows

MiB = 1 << 20
FLUID = ("analytical", "analytical-ca", "flow")


@pytest.mark.parametrize("name", FLUID)
def test_builtin_backends_declare_their_capabilities(name):
    be = make_backend(name, build_topology(single_switch(4, 1.0, 100)))
    caps = capabilities_of(be)
    assert isinstance(caps, BackendCapabilities) and isinstance(be, NetworkBackend)
    assert caps.endpoint_sharing and not caps.needs_close
    assert caps.closed_form == (name == "analytical") == isinstance(be, TransferPricing)
    assert caps.horizon_hint == (name != "analytical")
    be.close()


def test_port_booking_is_declared_by_analytical_with_endpoint_sharing_only():
    topo = build_topology(single_switch(4, 1.0, 100))
    shared, alone = make_backend("analytical", topo), make_backend("analytical", topo, endpoint_sharing=False)
    assert capabilities_of(shared).port_booking and isinstance(shared, PortBookedFlows)
    assert not capabilities_of(alone).port_booking and capabilities_of(alone).contention_free
    for name in ("analytical-ca", "flow"):
        assert not capabilities_of(make_backend(name, topo)).port_booking


def test_engine_and_sweep_read_capabilities_instead_of_probing():
    """No hasattr / getattr / isinstance on a backend protocol in the replay engine and the sweep: what
    a backend offers beyond the three calls is its declared BackendCapabilities."""
    import re
    from pathlib import Path

    import xsim_trace

    root = Path(xsim_trace.__file__).parent
    probe = re.compile(r"(hasattr|getattr)\((self\.)?backend\b|isinstance\([^)]*(PortBookedFlows|TransferPricing|"
                       r"LoneFlowTiming|CollectivePricing)\)")
    hits = [f"{p.relative_to(root)}:{i}" for d in ("replay", "sweep") for p in sorted((root / d).rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if probe.search(line)]
    assert hits == [], hits


def test_contention_appears_only_where_links_are_shared():
    """On the compare cases every backend reads one flow's time where no link is shared (single, ring)
    and about three flows' time where three share one port (incast at the receiver, shared at the sender)."""
    spans = {case: {r.backend: r.makespan_ns for r in compare_backends(FLUID, case, 4, 8 * MiB, 12.5, 1000,
                                                                          keep_going=False).runs}
             for case in ("single", "ring", "incast", "shared")}
    for name in FLUID:
        one = spans["single"][name]
        assert spans["ring"][name] == pytest.approx(one, rel=0.01), (name, spans)
        for case in ("incast", "shared"):
            assert 2.9 * one <= spans[case][name] <= 3.05 * one, (name, case, spans)


def test_capabilities_are_read_not_probed():
    class Bare:  # the three calls only
        name: ClassVar[str] = "bare"

    class Wrong:
        name: ClassVar[str] = "wrong"
        capabilities = {"horizon_hint": True}

    assert capabilities_of(Bare()) is NO_CAPABILITIES
    with pytest.raises(BackendError, match="expected capabilities to be a BackendCapabilities"):
        capabilities_of(Wrong())


@pytest.mark.parametrize("name", ["analytical-ca", "flow"])
def test_a_start_before_the_promised_horizon_is_an_error(name):
    be = make_backend(name, build_topology(single_switch(4, 1.0, 100)))
    be.start_flow(Flow(0, 0, 1, 1000), 0)
    assert be.next_completion_ns(horizon_ns=500) is None  # nothing completes by 500
    with pytest.raises(BackendError, match="before the horizon 500 ns"):
        be.start_flow(Flow(1, 2, 3, 1000), 400)
    end = {"analytical-ca": 2200, "flow": 1200}[name]  # one 1000 B chunk stored and forwarded / fluid
    assert be.next_completion_ns(horizon_ns=5000) == end
    assert be.advance(end) == [0]


@pytest.mark.parametrize("case", MICRO_CASES)
def test_every_compare_case_agrees_within_5_percent(case):
    size = 8 * MiB if case in STAR_CASES else 16 * MiB
    cmp = compare_backends(FLUID, case, 4, size, 12.5, 1000, keep_going=False)
    spans = {r.backend: r.makespan_ns for r in cmp.runs}
    lo, hi = min(spans.values()), max(spans.values())
    assert hi <= 1.05 * lo, spans


@pytest.mark.slow
@pytest.mark.skipif("ns3" not in available_backends(), reason="needs the ns3 extra")
@pytest.mark.parametrize("case", MICRO_CASES)
def test_ns3_agrees_within_5_percent_on_every_compare_case(case):
    size = 8 * MiB if case in STAR_CASES else 16 * MiB
    cmp = compare_backends((*FLUID, "ns3"), case, 4, size, 12.5, 1000, keep_going=False)
    spans = {r.backend: r.makespan_ns for r in cmp.runs}
    assert abs(spans["ns3"] - spans["flow"]) <= 0.05 * spans["flow"], spans


def test_analytical_shares_the_receiving_nic():
    """TP8 -> TP1 between two DGX A100 nodes: 8 x 48 MiB enter one GPU's 25 GB/s NIC."""
    cluster = load_cluster("dgx-a100:2")
    topo = build_topology(cluster)
    total = 384 * MiB
    flows = [(0, Flow(i, i, 8, total // 8)) for i in range(8)]
    floor_ns = total / 25.0  # 25 GB/s = 25 B/ns
    got = _drive("analytical", topo, flows)
    assert floor_ns <= max(got.values()) <= 1.01 * floor_ns  # ~16.1 ms, not 2 ms
    alone = _drive("analytical", topo, flows, endpoint_sharing=False)
    assert max(alone.values()) < floor_ns / 7
    flow = _drive("flow", topo, flows)
    assert max(got.values()) == pytest.approx(max(flow.values()), rel=1e-3)


def test_analytical_prices_a_batch_with_its_shared_ports():
    import numpy as np

    be = make_backend("analytical", build_topology(single_switch(4, 1.0, 100)))
    src, dst, size = np.array([1, 2, 3, 0]), np.array([0, 0, 0, 1]), np.full(4, 1000)
    # three into rank 0 share its port: 3000 ns of bytes; 0 -> 1 shares nothing
    assert be.transfer_time_ns(src, dst, size).tolist() == [3200, 3200, 3200, 1200]
    assert be.transfer_ns(1, 0, 1000) == 1200


def test_analytical_ca_pipelines_chunks_across_hops():
    """A 64 MiB send from node 0 to node 1 of dgx-h100:2 crosses 4 links: pipelined in 128 KiB
    chunks it costs one serialisation plus three chunks, like the flow backend (~1.35 ms), not four
    whole-message store-and-forward hops (~5.4 ms)."""
    topo = build_topology(load_cluster("dgx-h100:2"))
    size = 64 * MiB
    flows = [(0, Flow(0, 0, 9, size))]
    flow = _drive("flow", topo, flows)[0]
    piped = _drive("analytical-ca", topo, flows)[0]
    saf = _drive("analytical-ca", topo, flows, chunk_bytes=0)[0]
    assert flow <= piped <= 1.01 * flow
    assert saf > 3.9 * flow
    # the formula on k equal links: k lat + (S + (k - 1) c) / bw
    star = build_topology(single_switch(2, 2.0, 100))
    got = _drive("analytical-ca", star, [(0, Flow(0, 0, 1, 1 << 20))], chunk_bytes=1 << 16)[0]
    assert got == 2 * 100 + ((1 << 20) + (1 << 16)) // 2


def test_analytical_ca_events_per_flow_do_not_grow_with_flows_in_flight():
    """Through the engine (which passes its horizon), a flow costs its hop events and nothing more:
    two per hop, and ten heap operations for a two-hop flow, at 16 and at 64 ranks; no look-ahead
    rerun when the engine's own events (the endpoint delay) come between completions."""
    from xsim_trace.graph.kinds import CollectiveType, NodeType
    from xsim_trace.graph.model import Trace, make_metadata, make_node
    from xsim_trace.replay import Engine, ReplaySettings, compile_workload

    def ring_all_reduce_traces(ranks, size):
        node = make_node(0, "all_reduce", NodeType.COMM_COLL, comm_type=int(CollectiveType.ALL_REDUCE), comm_size=size)
        return {r: Trace(make_metadata(world_size=ranks), (node,), rank=r) for r in range(ranks)}

    per_flow = []
    for ranks in (16, 64):
        be = make_backend("analytical-ca", build_topology(single_switch(ranks, 50.0, 500)))
        w = compile_workload(ring_all_reduce_traces(ranks, 64 * MiB))
        raw = Engine(w, be, ReplaySettings(chunks=4, in_flight=1, endpoint_delay_ns=10)).run()
        assert raw.stats.flows == 4 * 2 * (ranks - 1) * ranks
        assert be.events == 4 * raw.stats.flows  # two hops, an arrival and a release each
        per_flow.append(be.heap_ops / raw.stats.flows)
    assert per_flow[0] == per_flow[1] == 10


def _drive(name, topo, flows, **options):
    from xsim_trace.sweep.micro import TimedFlow

    be = make_backend(name, topo, **options)
    return run_flows(be, [TimedFlow(t, f) for t, f in flows])
