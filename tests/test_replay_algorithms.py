"""Collective schedules: bytes moved, step counts, closed form == flow path, the ASTRA-sim case, a real trace."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from replay_helpers import FifoStar, StarAlphaBeta, all_reduce_workload, coll, trace  # noqa: E402

from xsim_trace.graph.kinds import CollectiveType as C  # noqa: E402
from xsim_trace.replay import ReplaySettings, build_schedule, replay  # noqa: E402

SHARED = Path(__file__).parents[1].parent / "shared" / "traces"
CUSTOM_RING = SHARED / "chakra_et" / "astra_custom_ring_8npus" / "custom_allreduce"


def sent_per_rank(s, n):
    out = np.zeros(n, np.int64)
    for step in s.steps:
        np.add.at(out, step.src, step.size_bytes)
    return out


@pytest.mark.parametrize("algo", ["ring", "direct", "halving_doubling"])
def test_all_reduce_moves_2_n_minus_1_over_n_of_the_buffer(algo):
    n, size = 8, 8 * 1024
    s = build_schedule(algo, C.ALL_REDUCE, n, size)
    assert sent_per_rank(s, n).tolist() == [2 * (n - 1) * size // n] * n
    steps = {"ring": 2 * (n - 1), "direct": 2, "halving_doubling": 2 * 3}[algo]
    assert len(s.steps) == steps


def test_tree_all_reduce_each_non_root_sends_half_up_per_tree():
    n, size = 8, 8000
    s = build_schedule("tree", C.ALL_REDUCE, n, size)
    assert len(s.steps) == 2 * 3  # depth 3: reduce up, broadcast down
    up = sum(int(st.size_bytes.sum()) for st in s.steps if st.reduce)
    assert up == 2 * (n - 1) * size // 2  # two trees, n-1 edges each, half the data


def test_tree_broadcast_and_reduce_are_one_binary_tree_from_the_root():
    b = build_schedule("tree", C.BROADCAST, 8, 1000)
    assert [sorted(zip(st.src.tolist(), st.dst.tolist())) for st in b.steps] == [
        [(0, 1), (0, 2)], [(1, 3), (1, 4), (2, 5), (2, 6)], [(3, 7)]]
    r = build_schedule("tree", C.REDUCE, 8, 1000)
    assert len(r.steps) == 3 and all(st.reduce for st in r.steps) and r.steps[-1].dst.tolist() == [0, 0]
    assert sent_per_rank(b, 8).sum() == 7 * 1000


def test_hierarchical_is_intra_reduce_scatter_inter_all_reduce_intra_all_gather():
    node_of = [0, 0, 0, 0, 1, 1, 1, 1]
    s = build_schedule("hierarchical", C.ALL_REDUCE, 8, 8192, node_of=node_of)
    assert len(s.steps) == 3 + 2 * 1 + 3
    intra = [st for st in s.steps if all(node_of[a] == node_of[b] for a, b in zip(st.src, st.dst))]
    inter = [st for st in s.steps if all(node_of[a] != node_of[b] for a, b in zip(st.src, st.dst))]
    assert len(intra) == 6 and len(inter) == 2
    assert {int(x) for st in inter for x in st.size_bytes} == {8192 // 8}
    assert build_schedule("hierarchical", C.ALL_REDUCE, 8, 8192).algorithm == "hierarchical"
    rs = build_schedule("hierarchical", C.REDUCE_SCATTER, 8, 8192, node_of=node_of)
    ag = build_schedule("hierarchical", C.ALL_GATHER, 8, 8192, node_of=node_of)
    assert [int(st.size_bytes[0]) for st in rs.steps] == [2048] * 3 + [1024]
    assert [int(st.size_bytes[0]) for st in ag.steps] == [1024] + [2048] * 3
    # per rank: L-1 intra-node steps of S/L and M-1 inter-node steps of S/n
    assert sent_per_rank(ag, 8).tolist() == [3 * 2048 + 1024] * 8


def test_other_collectives_step_counts():
    n = 4
    assert len(build_schedule("ring", C.ALL_GATHER, n, 4096).steps) == n - 1
    assert len(build_schedule("ring", C.REDUCE_SCATTER, n, 4096).steps) == n - 1
    a2a = build_schedule("direct", C.ALL_TO_ALL, n, 4096)
    assert len(a2a.steps) == 1 and a2a.num_transfers == n * (n - 1)
    assert len(build_schedule("ring", C.BROADCAST, n, 4096).steps) == n - 1
    assert build_schedule("ring", C.ALL_REDUCE, 1, 4096).steps == ()


@pytest.mark.parametrize("algo", ["ring", "tree", "direct", "halving_doubling", "hierarchical"])
@pytest.mark.parametrize("ctype", [C.ALL_REDUCE, C.ALL_GATHER, C.REDUCE_SCATTER, C.ALL_TO_ALL, C.BROADCAST])
def test_closed_form_equals_flow_path_on_a_contention_free_backend(algo, ctype):
    traces = {r: trace(r, [coll(1, 1_000_003, ctype=ctype)]) for r in range(8)}
    settings = ReplaySettings.from_cli([algo], chunks=3, in_flight=2, endpoint_delay_ns=10, reduction_delay_ns=5)
    a = replay(traces, StarAlphaBeta(100.0, 500), settings, closed_form=True)
    b = replay(traces, StarAlphaBeta(100.0, 500), settings, closed_form=False)
    assert a.stats.closed_form_collectives == 1 and b.stats.flows > 0
    assert np.array_equal(a.times.end_ns, b.times.end_ns)


ASTRA_NS = 57_426  # ASTRA-sim congestion-aware analytical: 1 MiB all-reduce, 8 NPUs, one switch


@pytest.mark.parametrize("reduction_delay_ns,expected", [(0, 57_048), (30, 57_468)])
def test_astra_sim_1mib_all_reduce_8_npus_within_1_percent(reduction_delay_ns, expected):
    # ASTRA-sim's "GB/s" is 2**30 bytes/s; per link 936.25 ns; FIFO store-and-forward links
    backend = FifoStar(400 * 2**30 / 1e9, 936.25)
    settings = ReplaySettings(chunks=4, in_flight=2, endpoint_delay_ns=10, reduction_delay_ns=reduction_delay_ns)
    r = replay(all_reduce_workload(8, 1 << 20), backend, settings)
    # per chunk: 14 steps of (10 ns + 2 links x trunc(936.25 + 32768 B / 429.5 B/ns) = 2024 ns) + 10 ns,
    # plus 7 reductions; two waves of two chunks; the second chunk of a wave queues 76 ns once
    per_chunk = 14 * (10 + 2 * 1012) + 10 + 7 * reduction_delay_ns
    assert expected == 2 * per_chunk + 76
    assert r.iteration_ns == expected
    assert abs(r.iteration_ns - ASTRA_NS) / ASTRA_NS < 0.01


@pytest.mark.skipif(not CUSTOM_RING.parent.is_dir(), reason="../shared/traces not present")
def test_real_astra_custom_ring_send_recv_trace_replays():
    from xsim_trace.io import read_rank_set

    rs = read_rank_set(CUSTOM_RING)
    r = replay(rs.traces, FifoStar(400 * 2**30 / 1e9, 936.25), ReplaySettings(endpoint_delay_ns=10), comm_groups=rs.comm_groups)
    # each rank: 14 sends + 14 recvs of 128 KiB along the ring and 7 x 7 us reductions, fully serial
    assert r.stats.flows == 8 * 14
    assert r.ranks[0].breakdown.compute_ns == 7 * 7000
    hop = 2 * int(936.25 + 131072 / (400 * 2**30 / 1e9))
    # the ring is a dependency chain: 7 reductions + 14 transfers of (10 ns endpoint delay + 2 hops)
    assert r.iteration_ns == 49_000 + 14 * (10 + hop) == 83_888
    assert len(set(r.rank_iteration_ns())) == 1


E2E = SHARED / "chakra_et" / "reference_pytorch_e2e" / "chakra_trace"


@pytest.mark.skipif(not E2E.parent.is_dir(), reason="../shared/traces not present")
def test_reference_converter_output_needs_drop_missing_deps():
    from xsim_trace.errors import GraphError
    from xsim_trace.io import read_rank_set
    from xsim_trace.replay import compile_workload

    rs = read_rank_set(E2E)
    with pytest.raises(GraphError, match=r"rank 0, node \d+: depends on node \d+, which is not in the trace"):
        compile_workload(rs.traces)
    w = compile_workload(rs.traces, drop_missing_deps=True)
    assert w.num_nodes == 18_050 and len(w.instances) == 21
    from xsim_trace.replay import replay_compiled

    res = replay_compiled(w, StarAlphaBeta(100.0, 500))
    assert res.stats.collectives == 21
    b = res.ranks[0].breakdown
    assert b.iteration_ns == b.compute_ns + b.host_ns + b.exposed_comm_total_ns + b.idle_ns + b.straggler_wait_ns + b.p2p_wait_ns
