"""The engine over the product's network backends (analytical, analytical-ca, flow) and clusters."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from replay_helpers import all_reduce_workload, recv, send, trace  # noqa: E402

registry = pytest.importorskip("xsim_trace.network.registry")
topology = pytest.importorskip("xsim_trace.network.topology")

from xsim_trace.cluster import astra_GBps, load_cluster, single_switch  # noqa: E402
from xsim_trace.replay import ReplaySettings, replay  # noqa: E402
from xsim_trace.replay.engine import is_contention_free  # noqa: E402

SHARED = Path(__file__).parents[1].parent / "shared" / "traces"
CUSTOM_RING = SHARED / "chakra_et" / "astra_custom_ring_8npus" / "custom_allreduce"


def backend(name, cluster):
    return registry.make_backend(name, topology.build_topology(cluster))


@pytest.mark.parametrize("reduction_delay_ns,expected", [(0, 57_048), (30, 57_468)])
def test_astra_case_on_analytical_ca(reduction_delay_ns, expected):
    be = backend("analytical-ca", single_switch(8, astra_GBps(400), 936.25))
    s = ReplaySettings(chunks=4, in_flight=2, endpoint_delay_ns=10, reduction_delay_ns=reduction_delay_ns)
    r = replay(all_reduce_workload(8, 1 << 20), be, s)
    assert r.iteration_ns == expected
    assert abs(r.iteration_ns - 57_426) / 57_426 < 0.01


def test_ring_all_reduce_steps_on_analytical_closed_form():
    n, k, size = 8, 4, 64 << 20
    cluster = single_switch(n, 400.0, 500)
    be = backend("analytical", cluster)
    assert is_contention_free(be)
    r = replay(all_reduce_workload(n, size), be, ReplaySettings(chunks=k))
    # analytical: 2 link latencies + bytes / bottleneck bandwidth, truncated once
    step = math.floor(2 * 500 + (size // k // n) / 400.0)
    assert r.iteration_ns == k * 2 * (n - 1) * step
    assert r.stats.closed_form_collectives == 1 and r.stats.flows == 0
    flow_path = replay(all_reduce_workload(n, size), be, ReplaySettings(chunks=k), closed_form=False)
    assert flow_path.iteration_ns == r.iteration_ns and flow_path.stats.flows == k * 2 * (n - 1) * n


def test_two_flows_sharing_one_link_get_half_the_bandwidth_on_flow_backend():
    size = 1_000_000
    be = lambda: backend("flow", single_switch(3, 100.0, 0))  # noqa: E731
    alone = {0: trace(0, [send(1, 2, size)]), 1: trace(1, []), 2: trace(2, [recv(1, 0, size)])}
    shared = {
        0: trace(0, [send(1, 2, size)]),
        1: trace(1, [send(1, 2, size, tag=1)]),
        2: trace(2, [recv(1, 0, size), recv(2, 1, size, tag=1)]),
    }
    assert replay(alone, be()).iteration_ns == size // 100
    assert replay(shared, be()).rank_iteration_ns() == [2 * size // 100] * 3


@pytest.mark.skipif(not CUSTOM_RING.parent.is_dir(), reason="../shared/traces not present")
def test_custom_ring_trace_on_each_backend():
    from xsim_trace.io import read_rank_set

    rs = read_rank_set(CUSTOM_RING)
    cluster = single_switch(8, astra_GBps(400), 936.25)
    times = {name: replay(rs.traces, backend(name, cluster), ReplaySettings(endpoint_delay_ns=10)).iteration_ns
             for name in ("analytical", "analytical-ca", "flow")}
    assert times["analytical-ca"] == 83_888
    # no contention in a serial ring: the backends differ only by store-and-forward vs cut-through
    assert times["analytical"] < times["analytical-ca"] and times["flow"] < times["analytical-ca"]


def test_per_device_group_breakdown_on_mixed_cluster():
    cluster = load_cluster("mixed-h100-a100")
    n = cluster.num_ranks
    r = replay(all_reduce_workload(n, 1 << 20), backend("analytical", cluster), cluster=cluster)
    names = [g.name for g in r.groups]
    assert len(names) == len({cluster.group_of(x).name for x in range(n)}) >= 2
    assert sum(len(g.ranks) for g in r.groups) == n
    assert r.iteration_ns == max(g.iteration_ns for g in r.groups)


@pytest.mark.parametrize("ctype", ["ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER"])
def test_hierarchical_on_two_dgx_nodes_closed_form_matches_flows_and_beats_flat_ring(ctype):
    from replay_helpers import coll

    from xsim_trace.graph.kinds import CollectiveType

    cluster = load_cluster("dgx-h100:2")
    traces = {r: trace(r, [coll(1, 64 << 20, ctype=CollectiveType[ctype])]) for r in range(16)}
    be = backend("analytical", cluster)
    hier = ReplaySettings.from_cli([f"{ctype.lower()}=hierarchical"], chunks=2)
    a = replay(traces, be, hier, cluster=cluster)
    b = replay(traces, be, hier, cluster=cluster, closed_form=False)
    assert a.iteration_ns == b.iteration_ns and a.stats.flows == 0 and b.stats.flows > 0
    flat = replay(traces, be, ReplaySettings(chunks=2), cluster=cluster)
    assert a.iteration_ns < flat.iteration_ns  # fewer bytes over the 50 GB/s NICs


def test_trace_larger_than_cluster_is_a_config_error():
    from xsim_trace.errors import ConfigError

    cluster = load_cluster("dgx-h100:1")
    with pytest.raises(ConfigError, match="field cluster: the trace has 9 ranks but the cluster only 8 devices"):
        replay(all_reduce_workload(9, 1024), backend("analytical", cluster), cluster=cluster)
