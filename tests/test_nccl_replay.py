"""The NCCL model inside replay: every member of a collective finishes after the model's time."""

from __future__ import annotations

import pytest

from xsim_trace.cluster import load_cluster
from xsim_trace.errors import ConfigError
from xsim_trace.graph import NodeType, Trace, make_metadata, make_node
from xsim_trace.network import build_topology, make_backend
from xsim_trace.network.nccl import group_shape, price_collective
from xsim_trace.replay import ReplaySettings
from xsim_trace.replay.api import replay


def _traces(n: int, size: int, comm_type: int = 0):
    return {
        r: Trace(make_metadata(), (make_node(1, "c", NodeType.COMP, duration_micros=5),
                                   make_node(2, "coll", NodeType.COMM_COLL, data_deps=(1,), comm_type=comm_type,
                                             comm_size=size)), rank=r)
        for r in range(n)
    }


@pytest.mark.parametrize("size", [4096, 1 << 20, 256 << 20])
def test_replay_prices_collectives_with_nccl_model(size):
    cluster = load_cluster("a100-node")
    backend = make_backend("analytical", build_topology(cluster))
    settings = ReplaySettings(collective_model="nccl")
    result = replay(_traces(8, size), backend, settings, cluster=cluster)
    expect = price_collective(group_shape(cluster, range(8)), "all_reduce", size).time_ns
    ends = result.times.end_ns
    assert int(max(ends)) == 5_000 + expect


def test_forced_algorithm_changes_the_time():
    cluster = load_cluster("dgx-h100:1")
    backend = make_backend("analytical", build_topology(cluster))
    free = replay(_traces(8, 1 << 30), backend, ReplaySettings(collective_model="nccl"), cluster=cluster)
    ring = replay(_traces(8, 1 << 30), backend, ReplaySettings(collective_model="nccl", nccl_algo="ring"), cluster=cluster)
    assert int(max(ring.times.end_ns)) > int(max(free.times.end_ns))  # NVLS beats the ring on H100


def test_nccl_model_needs_a_cluster():
    cluster = load_cluster("a100-node")
    with pytest.raises(ConfigError, match="nccl_algo"):
        ReplaySettings(collective_model="schedule", nccl_algo="ring")
    topo_only = make_backend("analytical", build_topology(cluster))
    with pytest.raises(ConfigError, match="needs the cluster"):
        replay(_traces(8, 1 << 20), topo_only, ReplaySettings(collective_model="nccl"))
    flow_only = make_backend("flow", build_topology(cluster))
    with pytest.raises(ConfigError, match="needs the cluster"):  # forcing NCCL's choice asks for the model
        replay(_traces(8, 1 << 20), flow_only, ReplaySettings(nccl_algo="ring"))
    with pytest.raises(ConfigError):
        ReplaySettings(collective_model="nccl", nccl_proto="LL256")


def test_peer_skew_delays_mirrors_and_the_captured_rank_waits():
    from xsim_trace.network.nccl.pricer import NcclPricer
    from xsim_trace.validate.nccl_model import PEER_SKEW_NODE, modelled_ops, with_peer_skew

    cluster = load_cluster("a100-node")
    traces = _traces(8, 1 << 20)
    pricer = NcclPricer(cluster)
    prices = modelled_ops(traces[0], None, 8, pricer)
    assert len(prices) == 1 and prices[0].time_ns == price_collective(group_shape(cluster, range(8)), "all_reduce", 1 << 20).time_ns
    skewed = {r: (t if r == 0 else with_peer_skew(t, [70_000])) for r, t in traces.items()}
    assert [n.name for n in skewed[1].nodes].count(PEER_SKEW_NODE) == 1
    assert with_peer_skew(traces[1], [0]) is traces[1]
    backend = make_backend("analytical", build_topology(cluster))
    settings = ReplaySettings(collective_model="nccl")
    plain = replay(traces, backend, settings, cluster=cluster)
    late = replay(skewed, backend, settings, cluster=cluster)
    assert int(max(late.times.end_ns)) == int(max(plain.times.end_ns)) + 70_000
    # rank 0's collective (its second node) waited for the late mirrors
    assert int(late.times.wait_ns[1]) == 70_000


def test_default_prices_collectives_with_nccl_model_where_priced_whole():
    """auto (the default): the NCCL model with a cluster (priced whole on a closed-form backend, as paced
    flows on a flow backend); the schedule walk or its flows without a cluster or with a configured
    schedule; the result says which."""
    cluster = load_cluster("a100-node")
    size = 64 << 20
    expect = price_collective(group_shape(cluster, range(8)), "all_reduce", size).time_ns
    analytical = make_backend("analytical", build_topology(cluster))
    default = replay(_traces(8, size), analytical, cluster=cluster)
    assert int(max(default.times.end_ns)) == 5_000 + expect
    assert default.settings.collective_model == "nccl"
    assert default.settings.to_json()["collective_model"] == "nccl"
    walked = replay(_traces(8, size), analytical, ReplaySettings(collective_model="schedule"), cluster=cluster)
    assert walked.settings.collective_model == "schedule"
    assert int(max(walked.times.end_ns)) != int(max(default.times.end_ns))
    chunked = replay(_traces(8, size), analytical, ReplaySettings(chunks=4), cluster=cluster)
    assert chunked.settings.collective_model == "schedule"  # a configured schedule is walked
    no_cluster = replay(_traces(8, size), analytical)
    assert no_cluster.settings.collective_model == "schedule"
    assert int(max(no_cluster.times.end_ns)) == int(max(walked.times.end_ns))
    flow = replay(_traces(8, size), make_backend("flow", build_topology(cluster)), cluster=cluster)
    assert flow.settings.collective_model == "nccl"  # the model's price, carried by flows (replay/model_flows.py)
    assert int(max(flow.times.end_ns)) == pytest.approx(5_000 + expect, abs=2)
    flow_walk = replay(_traces(8, size), make_backend("flow", build_topology(cluster)), ReplaySettings(chunks=4), cluster=cluster)
    assert flow_walk.settings.collective_model == "schedule"


@pytest.mark.parametrize("tp,dp", [(4, 4), (8, 2)])
def test_compiled_loop_equals_reference_engine_with_nccl_pricer(tp, dp):
    """The compiled loop takes each collective's offsets from the same NCCL pricer: bit for bit the
    reference engine's times (a contention-free backend, so both paths apply)."""
    pytest.importorskip("numba")
    import numpy as np

    from replay_helpers import StarAlphaBeta
    from xsim_trace.network.nccl.pricer import NcclPricer
    from xsim_trace.replay import compile_workload
    from xsim_trace.replay.engine import Engine
    from xsim_trace.replay.sample import tp_dp_step

    traces, groups = tp_dp_step(tp=tp, dp=dp, layers=2, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20)
    w = compile_workload(traces, groups)
    cluster = load_cluster("dgx-h100:2")
    node_of = [cluster.node_of(r) for r in range(w.num_ranks)]
    runs = []
    for compiled in (False, True):
        e = Engine(w, StarAlphaBeta(25.0, 700), ReplaySettings(collective_model="nccl"), node_of=node_of,
                   pricer=NcclPricer(cluster), compiled=compiled)
        assert e.compiled is compiled
        runs.append(e.run())
    ref, fast = runs
    for name in ("ready_ns", "start_ns", "end_ns", "wait_ns", "peer_node"):
        assert np.array_equal(np.asarray(getattr(ref, name)), np.asarray(getattr(fast, name))), name
    assert ref.stats == fast.stats and ref.stats.closed_form_collectives > 0
