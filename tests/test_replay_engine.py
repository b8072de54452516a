"""Replay engine: hand-computed cases, streams, p2p, straggler wait, errors, determinism."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from replay_helpers import MaxMinStar, StarAlphaBeta, all_reduce_workload, coll, comp, recv, send, trace  # noqa: E402

from xsim_trace.errors import ConfigError, GraphError  # noqa: E402
from xsim_trace.graph import attrs as A  # noqa: E402
from xsim_trace.graph.kinds import CollectiveType, NodeType  # noqa: E402
from xsim_trace.graph.model import make_node  # noqa: E402
from xsim_trace.replay import ReplaySettings, compile_workload, replay  # noqa: E402

BW = 100.0  # bytes per ns = 100 GB/s
LAT = 500


def test_chain_of_compute_is_sum_of_durations():
    nodes = [comp(1, dur_ns=1000), comp(2, [1], 2500), comp(3, [2], 700), comp(4, [3], 1)]
    r = replay({0: trace(0, nodes)}, StarAlphaBeta(BW, LAT))
    assert r.iteration_ns == 1000 + 2500 + 700 + 1
    b = r.ranks[0].breakdown
    assert b.compute_ns == 4201 and b.idle_ns == 0 and b.exposed_comm_total_ns == 0
    t = r.times
    assert t.start_ns.tolist() == [0, 1000, 3500, 4200]
    assert t.end_ns.tolist() == [1000, 3500, 4200, 4201]


def test_independent_nodes_on_one_stream_serialise_and_streams_overlap():
    same = [comp(1, dur_ns=1000), comp(2, dur_ns=1000)]
    assert replay({0: trace(0, same)}, StarAlphaBeta(BW, LAT)).iteration_ns == 2000
    two = [comp(1, dur_ns=1000, stream=7), comp(2, dur_ns=1000, stream=8)]
    assert replay({0: trace(0, two)}, StarAlphaBeta(BW, LAT)).iteration_ns == 1000
    cpu = [comp(1, dur_ns=300, is_cpu_op=True), comp(2, [1], 1000)]
    r = replay({0: trace(0, cpu)}, StarAlphaBeta(BW, LAT))
    assert r.iteration_ns == 1300
    assert r.ranks[0].breakdown.host_ns == 300 and r.ranks[0].breakdown.compute_ns == 1000


@pytest.mark.parametrize("closed_form", [True, False])
@pytest.mark.parametrize("n,k,in_flight", [(4, 2, 1), (4, 2, 2), (8, 4, 1), (3, 1, 1)])
def test_ring_all_reduce_is_2_n_minus_1_steps_of_s_over_nk(closed_form, n, k, in_flight):
    size = 8 * 1024 * 1024
    r = replay(
        all_reduce_workload(n, size),
        StarAlphaBeta(BW, LAT),
        ReplaySettings(chunks=k, in_flight=in_flight),
        closed_form=closed_form,
    )
    step_ns = 2 * LAT + math.ceil((size // k // n) / BW)
    waves = math.ceil(k / in_flight)  # contention-free: chunks in flight together take one chunk time
    assert r.iteration_ns == waves * 2 * (n - 1) * step_ns
    assert r.stats.flows == (0 if closed_form else k * 2 * (n - 1) * n)
    assert r.ranks[0].breakdown.exposed("other") == r.iteration_ns


def test_endpoint_delay_adds_per_send_and_per_chunk_end():
    n, size, d = 4, 4 * 1024 * 1024, 10
    r = replay(all_reduce_workload(n, size), StarAlphaBeta(BW, LAT), ReplaySettings(endpoint_delay_ns=d))
    step_ns = 2 * LAT + math.ceil(size // n / BW)
    assert r.iteration_ns == 2 * (n - 1) * (step_ns + d) + d


def test_send_recv():
    size = 1_000_000
    t0 = trace(0, [comp(1, dur_ns=1000), send(2, 1, size, tag=5, deps=[1])])
    t1 = trace(1, [recv(1, 0, size, tag=5), comp(2, [1], 500)])
    for mode in ("eager", "rendezvous"):
        r = replay({0: t0, 1: t1}, StarAlphaBeta(BW, LAT), ReplaySettings(p2p=mode))
        assert r.iteration_ns == 1000 + 2 * LAT + size // 100 + 500
        assert r.rank_iteration_ns() == [1000 + 2 * LAT + 10000, r.iteration_ns]


def test_eager_send_completes_without_posted_recv_but_rendezvous_waits():
    size = 100_000
    xfer = 2 * LAT + 1000
    t0 = trace(0, [send(1, 1, size)])
    t1 = trace(1, [comp(1, dur_ns=50_000), recv(2, 0, size, deps=[1])])
    eager = replay({0: t0, 1: t1}, StarAlphaBeta(BW, LAT), ReplaySettings(p2p="eager"))
    assert eager.rank_iteration_ns() == [xfer, 50_000]
    rdv = replay({0: t0, 1: t1}, StarAlphaBeta(BW, LAT), ReplaySettings(p2p="rendezvous"))
    assert rdv.rank_iteration_ns() == [50_000 + xfer, 50_000 + xfer]


def test_two_flows_sharing_one_link_get_half_the_bandwidth_each():
    size = 1_000_000
    alone = {0: trace(0, [send(1, 2, size)]), 1: trace(1, []), 2: trace(2, [recv(1, 0, size)])}
    r1 = replay(alone, MaxMinStar(BW))
    assert r1.iteration_ns == size // 100
    shared = {
        0: trace(0, [send(1, 2, size)]),
        1: trace(1, [send(1, 2, size, tag=1)]),
        2: trace(2, [recv(1, 0, size), recv(2, 1, size, tag=1, deps=[])]),
    }
    r2 = replay(shared, MaxMinStar(BW))
    # both flows cross down_2 and finish together at twice the single-flow time
    assert r2.rank_iteration_ns() == [2 * size // 100] * 3


def test_straggler_wait_is_start_minus_ready():
    size = 400_000
    t0 = trace(0, [comp(1, dur_ns=5000), coll(2, size, [1])])
    t1 = trace(1, [coll(1, size)])
    r = replay({0: t0, 1: t1}, StarAlphaBeta(BW, LAT))
    step = 2 * LAT + size // 2 // 100
    assert r.iteration_ns == 5000 + 2 * step
    b0, b1 = r.ranks[0].breakdown, r.ranks[1].breakdown
    assert b1.straggler_wait_ns == 5000 and b0.straggler_wait_ns == 0
    assert b1.exposed("other") == 2 * step and b0.compute_ns == 5000
    assert int(r.times.wait_ns[r.workload.rank_ptr[1]]) == 5000


def test_comm_overlapped_by_compute_is_not_exposed_and_kinds_are_split():
    size = 400_000
    step = 2 * LAT + size // 2 // 100  # 3000
    def rank(r):
        return trace(r, [
            coll(1, size, comm_kind="dp", stream=2),
            comp(2, dur_ns=2000, stream=1),
            coll(3, size, [1, 2], comm_kind="tp", stream=2),
        ])
    r = replay({0: rank(0), 1: rank(1)}, StarAlphaBeta(BW, LAT))
    b = r.ranks[0].breakdown
    assert r.iteration_ns == 4 * step
    assert b.compute_ns == 2000
    assert b.exposed("dp") == 2 * step - 2000 and b.exposed("tp") == 2 * step
    assert b.iteration_ns == b.compute_ns + b.exposed_comm_total_ns + b.idle_ns + b.host_ns + b.straggler_wait_ns + b.p2p_wait_ns


def test_process_groups_match_by_order_of_issue():
    size = 200_000
    groups = {"1": (0, 1), "2": (2, 3)}
    traces = {r: trace(r, [coll(1, size, pg="1" if r < 2 else "2"), coll(2, size, [1], pg="1" if r < 2 else "2")]) for r in range(4)}
    w = compile_workload(traces, groups)
    assert [inst.nodes for inst in w.instances] == [(0, 2), (1, 3), (4, 6), (5, 7)]
    r = replay(traces, StarAlphaBeta(BW, LAT), comm_groups=groups)
    assert r.iteration_ns == 2 * 2 * (2 * LAT + size // 2 // 100)


def test_deterministic_bit_for_bit():
    traces = {r: trace(r, [comp(1, dur_ns=100 * (r + 1)), coll(2, 123_457, [1]), comp(3, [2], 77)]) for r in range(5)}
    a = replay(traces, MaxMinStar(BW), ReplaySettings(chunks=3, in_flight=2, endpoint_delay_ns=7))
    b = replay(traces, MaxMinStar(BW), ReplaySettings(chunks=3, in_flight=2, endpoint_delay_ns=7))
    assert np.array_equal(a.times.end_ns, b.times.end_ns) and np.array_equal(a.times.start_ns, b.times.start_ns)
    assert a.ranks == b.ranks


def test_dangling_dep_names_rank_and_node():
    bad = trace(1, [comp(1), comp(2, [99])])
    with pytest.raises(GraphError, match=r"rank 1, node 2: depends on node 99"):
        compile_workload({0: trace(0, [comp(1)]), 1: bad})


def test_cycle_names_rank_and_node():
    nodes = [comp(1, [3]), comp(2, [1]), comp(3, [2]), comp(4)]
    with pytest.raises(GraphError, match=r"rank 0, node 1: dependency cycle: 1 <- 3 <- 2 <- 1$"):
        compile_workload({0: trace(0, nodes)})
    with pytest.raises(GraphError, match="itself"):
        compile_workload({0: trace(0, [comp(1, [1])])})


def test_forward_references_without_cycle_are_fine():
    nodes = [comp(1, [2], 100), comp(2, dur_ns=50)]
    assert replay({0: trace(0, nodes)}, StarAlphaBeta(BW, LAT)).iteration_ns == 150


def test_unmatched_collectives_and_p2p_are_graph_errors():
    with pytest.raises(GraphError, match="rank 1.*cannot be matched"):
        compile_workload({0: trace(0, [coll(1, 10), coll(2, 10)]), 1: trace(1, [coll(1, 10)])})
    mixed = {0: trace(0, [coll(1, 10)]), 1: trace(1, [coll(1, 10, ctype=CollectiveType.ALL_GATHER)])}
    with pytest.raises(GraphError, match="rank 1, node 1.*type"):
        compile_workload(mixed)
    with pytest.raises(GraphError, match="rank 0, node 1: replay deadlocked: recv never matched"):
        replay({0: trace(0, [recv(1, 1, 10)]), 1: trace(1, [])}, StarAlphaBeta(BW, LAT))
    no_dst = make_node(1, "s", NodeType.COMM_SEND, comm_size=5)
    with pytest.raises(GraphError, match="field comm_dst"):
        compile_workload({0: trace(0, [no_dst])})


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="field chunks"):
        ReplaySettings(chunks=0)
    with pytest.raises(ConfigError, match="field algorithm"):
        ReplaySettings.from_cli(["spiral"])
    s = ReplaySettings.from_cli(["tree", "all_gather=direct"], chunks=2)
    assert s.algorithm_for(CollectiveType.ALL_REDUCE) == "tree" and s.algorithm_for(CollectiveType.ALL_GATHER) == "direct"


def test_duration_micros_used_without_exact_attribute():
    node = make_node(1, "k", NodeType.COMP, duration_micros=7)
    assert replay({0: trace(0, [node])}, StarAlphaBeta(BW, LAT)).iteration_ns == 7000
    assert A.DURATION_NS == "duration_ns"


@pytest.mark.parametrize("mode", ["eager", "rendezvous"])
def test_receive_waiting_for_its_sender_is_p2p_wait_not_comm(mode):
    size = 1_000_000
    xfer = 2 * LAT + size // 100
    t0 = trace(0, [comp(1, dur_ns=5000), send(2, 1, size, deps=[1])])
    t1 = trace(1, [make_node(1, "recv", NodeType.COMM_RECV, comm_src=0, comm_size=size, comm_kind="pp"), comp(2, [1], 100)])
    r = replay({0: t0, 1: t1}, StarAlphaBeta(BW, LAT), ReplaySettings(p2p=mode))
    b = r.ranks[1].breakdown
    assert b.p2p_wait_ns == 5000 and b.exposed("pp") == xfer and b.compute_ns == 100
    assert b.iteration_ns == 5000 + xfer + 100 and b.idle_ns == 0


def test_host_threads_are_separate_resources():
    a = comp(1, dur_ns=1000, is_cpu_op=True, stream=-1)
    b = comp(2, dur_ns=1000, is_cpu_op=True, stream=-2)
    c = comp(3, dur_ns=1000, is_cpu_op=True, tid=7)
    d = comp(4, dur_ns=1000, is_cpu_op=True, tid=7)
    r = replay({0: trace(0, [a, b, c, d])}, StarAlphaBeta(BW, LAT))
    assert r.iteration_ns == 2000  # c and d share thread 7; a and b run alongside
    assert sorted(r.workload.resource_label) == ["cpu thread -1", "cpu thread -2", "cpu thread 7"]


def test_negative_duration_is_a_graph_error():
    with pytest.raises(GraphError, match="rank 0, node 1, field duration_ns: negative duration"):
        compile_workload({0: trace(0, [comp(1, dur_ns=-5)])})


def test_critical_path_follows_deps_resources_and_stragglers():
    from xsim_trace.replay.critical import critical_path

    size = 400_000
    t0 = trace(0, [comp(1, dur_ns=5000), comp(2, dur_ns=100), coll(3, size, [1, 2]), comp(4, [3], 10)])
    t1 = trace(1, [comp(1, dur_ns=1000), coll(2, size, [1]), comp(3, [2], 50)])
    r = replay({0: t0, 1: t1}, StarAlphaBeta(BW, LAT))
    path = critical_path(r.workload, r.times)
    # rank 1 ends last; its collective waited for rank 0 (the straggler), whose member was made
    # ready by comp 2, which had waited for the compute stream held by comp 1; the collective is
    # on the path once, from the straggler's arrival
    assert [(p.rank, p.node_id, p.via) for p in path] == [(0, 1, "resource"), (0, 2, "dep"), (1, 2, "dep"), (1, 3, "end")]
    assert path[2].start_ns == 5100
    assert path[-1].end_ns == r.iteration_ns and path[0].start_ns == 0
    from xsim_trace.report import summary_dict

    cp = summary_dict(r)["critical_path"]
    step = 2 * LAT + size // 2 // 100
    assert cp["nodes"] == 4 and cp["ranks"] == [0, 1] and cp["compute_ns"] == 5000 + 100 + 50
    assert cp["comm_ns"] == 2 * step and cp["wait_ns"] == 0
    assert cp["compute_ns"] + cp["host_ns"] + cp["comm_ns"] + cp["wait_ns"] == r.iteration_ns
    assert cp["longest"][0] == {"rank": 1, "node": 2, "name": "coll2", "start_ns": 5100, "duration_ns": 2 * step, "wait_ns": 0}


@pytest.mark.parametrize("mode", ["eager", "rendezvous"])
def test_critical_path_crosses_from_a_waiting_recv_to_its_sender(mode):
    from xsim_trace.replay.critical import critical_path

    size = 1_000_000
    t0 = trace(0, [comp(1, dur_ns=5000), send(2, 1, size, deps=[1])])
    t1 = trace(1, [comp(1, dur_ns=100), recv(2, 0, size, deps=[1]), comp(3, [2], 10)])
    r = replay({0: t0, 1: t1}, StarAlphaBeta(BW, LAT), ReplaySettings(p2p=mode))
    path = critical_path(r.workload, r.times)
    assert [(p.rank, p.node_id) for p in path] == [(0, 1), (1, 2), (1, 3)]
    assert sum(p.end_ns - p.start_ns for p in path) == r.iteration_ns == 5000 + 2 * LAT + size // 100 + 10
    assert int(r.times.peer_node[r.workload.rank_ptr[1] + 1]) == 1  # rank 1's recv matched rank 0's send
