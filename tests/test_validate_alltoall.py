"""An all-to-all converted as per-peer send/recv is priced, under the NCCL model, as one NCCL all-to-all."""

from __future__ import annotations

from converters.crossrank import alltoall_schedule
from xsim_trace.cluster import load_cluster
from xsim_trace.graph import NodeType, Trace, make_metadata, make_node
from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.network import build_topology, make_backend
from xsim_trace.network.nccl import group_shape, price_collective
from xsim_trace.replay.api import replay
from xsim_trace.validate.alltoall import alltoall_chains, group_alltoalls

N = 4


def _rank(rank: int, per_peer: int) -> Trace:
    """compute (5 us) -> the all-to-all's per-peer sends/receives (a chain, as xsim-convert writes it) -> compute."""
    nodes = [make_node(1, "c", NodeType.COMP, duration_micros=5, stream=7)]
    prev, nid = 1, 2
    for peer, send_first in alltoall_schedule(rank, range(N)):
        parts = [(NodeType.COMM_SEND, f"a2a send->{peer}", rank, peer), (NodeType.COMM_RECV, f"a2a recv<-{peer}", peer, rank)]
        for ntype, name, src, dst in (parts if send_first else parts[::-1]):
            nodes.append(make_node(nid, name, ntype, data_deps=(prev,), start_time_micros=9, stream=7,
                                   comm_type=int(CollectiveType.ALL_TO_ALL), comm_size=per_peer, comm_src=src,
                                   comm_dst=dst, comm_tag=0, pg_name="0", measured_duration_ns=1000))
            prev, nid = nid, nid + 1
    nodes.append(make_node(nid, "after", NodeType.COMP, data_deps=(prev,), duration_micros=1, stream=7))
    return Trace(make_metadata(), tuple(nodes), rank=rank)


def test_chains_become_one_collective_with_the_ranks_total():
    traces = {r: _rank(r, 1 << 20) for r in range(N)}
    assert [len(p) for p in alltoall_chains(traces[0])] == [2 * (N - 1)]
    grouped, count = group_alltoalls(traces)
    assert count == N
    for r, t in grouped.items():
        assert [n.type for n in t.nodes] == [NodeType.COMP, NodeType.COMM_COLL, NodeType.COMP]
        coll = t.nodes[1]
        assert coll.name == "a2a" and coll.comm_type == CollectiveType.ALL_TO_ALL
        assert coll.comm_size_bytes == (N - 1) << 20  # what the rank sends in all
        assert coll.data_deps == (1,) and t.nodes[2].data_deps == (coll.id,)
        assert coll.attr("measured_duration_ns") == 2 * (N - 1) * 1000
        assert coll.attr("comm_src") is None


def test_grouped_alltoall_replays_at_the_model_price():
    cluster = load_cluster("a100-node")
    size = 4 << 20
    grouped, _ = group_alltoalls({r: _rank(r, size) for r in range(N)})
    backend = make_backend("analytical", build_topology(cluster))
    result = replay(grouped, backend, cluster=cluster)
    expect = price_collective(group_shape(cluster, range(N)), "all_to_all", (N - 1) * size).time_ns
    assert result.settings.collective_model == "nccl"
    assert int(max(result.times.end_ns)) == 5_000 + expect + 1_000
    chained = replay({r: _rank(r, size) for r in range(N)}, backend, cluster=cluster)  # one transfer after another
    assert int(max(chained.times.end_ns)) > int(max(result.times.end_ns))
