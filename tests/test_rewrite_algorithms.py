"""Worked examples of the heterogeneity algorithms (hand-computed numbers)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.rewrite.lcm_rings import lcm_rings
from xsim_trace.plan.layer_split import StageCapacity, largest_remainder, partition_layers, uniform_partition
from xsim_trace.plan.reshard import (
    Endpoint,
    ReshardStrategy,
    SenderBalancer,
    gcd_clusters,
    plan_reshard,
    reshard_flows,
)
from xsim_trace.rewrite.rings import order_ring, slow_crossings, split_by_bandwidth
from xsim_trace.plan.schedules import analytic_timeline, stage_ops
from xsim_trace.plan.dp_intervals import Segment, dp_intervals


# --- LCM chunking ------------------------------------------------------------------------------
def test_lcm_rings_tp2_tp4_gives_the_four_rings_of_the_design():
    rings = lcm_rings([2, 4])
    assert [r.members for r in rings] == [(0, 0), (0, 1), (1, 2), (1, 3)]  # (A0,B0),(A0,B1),(A1,B2),(A1,B3)
    assert all(r.num_chunks == 4 and len(r.chunks) == 1 for r in rings)
    # a 1 MiB gradient: each ring reduces a quarter; A0 (in two rings) reduces its half
    assert [r.size_bytes(1 << 20) for r in rings] == [1 << 18] * 4


def test_lcm_rings_equal_tp_is_one_ring_per_tp_rank_and_sizes_add_up():
    assert [r.members for r in lcm_rings([4, 4])] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    rings = lcm_rings([2, 3])  # Lc = 6: owners (0,0),(0,0),(0,1),(1,1),(1,2),(1,2)
    assert [(r.members, r.chunks) for r in rings] == [((0, 0), (0, 1)), ((0, 1), (2,)), ((1, 1), (3,)), ((1, 2), (4, 5))]
    assert sum(r.size_bytes(1001) for r in rings) == 1001
    with pytest.raises(ConfigError, match="tp_degrees\\[1\\]"):
        lcm_rings([2, 0])


# --- resharding ---------------------------------------------------------------------------------
def test_reshard_tp6_to_tp4_is_eight_flows_2u_out_3u_in_two_clusters():
    flows = reshard_flows(6, 4)
    assert [(f.src, f.dst, f.units) for f in flows] == [
        (0, 0, 2), (1, 0, 1), (1, 1, 1), (2, 1, 2), (3, 2, 2), (4, 2, 1), (4, 3, 1), (5, 3, 2)
    ]
    out = {s: sum(f.units for f in flows if f.src == s) for s in range(6)}
    into = {d: sum(f.units for f in flows if f.dst == d) for d in range(4)}
    assert out == {s: 2 for s in range(6)} and into == {d: 3 for d in range(4)}
    clusters = gcd_clusters(6, 4)
    assert clusters == (((0, 1, 2), (0, 1)), ((3, 4, 5), (2, 3)))
    for srcs, dsts in clusters:  # no flow leaves its cluster
        assert all(f.dst in dsts for f in flows if f.src in srcs)


def test_reshard_strategies_move_the_same_data_differently():
    S = 12 * 1000  # u = 1000 bytes
    direct = plan_reshard(6, 4, "direct")
    assert len(direct.transfers) == 8 and all(t.after == () for t in direct.transfers)
    assert sum(direct.unit_bytes(S, t.units) for t in direct.transfers) == S

    leader = plan_reshard(6, 4, ReshardStrategy.LEADER)
    phases = [(t.phase, t.src.index, tuple(d.index for d in t.dsts), t.units) for t in leader.transfers]
    assert phases == [
        ("gather", 1, (0,), 2), ("gather", 2, (0,), 2), ("p2p", 0, (0,), 6), ("scatter", 0, (1,), 3),
        ("gather", 4, (3,), 2), ("gather", 5, (3,), 2), ("p2p", 3, (2,), 6), ("scatter", 2, (3,), 3),
    ]
    assert leader.transfers[2].after == (0, 1) and leader.transfers[3].after == (2,)
    # only the two leader P2Ps cross the stage boundary: S bytes in 2 messages instead of 8
    crossing = [t for t in leader.transfers if t.phase == "p2p"]
    assert sum(leader.unit_bytes(S, t.units) for t in crossing) == S

    bal = SenderBalancer()
    b1 = plan_reshard(6, 4, "broadcast", balancer=bal, total_bytes=S)
    assert [(t.kind, t.src.index, tuple(d.index for d in t.dsts), t.units) for t in b1.transfers] == [
        ("broadcast", 0, (0, 1), 6), ("broadcast", 3, (2, 3), 6)
    ]
    # load balance: the next reshards pick the sources that have sent least so far
    roots = [[t.src.index for t in plan_reshard(6, 4, "broadcast", balancer=bal, total_bytes=S).transfers] for _ in range(3)]
    assert roots == [[1, 4], [2, 5], [0, 3]]
    assert b1.bytes_sent(S) == {Endpoint("src", 0): 6000, Endpoint("src", 3): 6000}
    with pytest.raises(ConfigError, match="unknown resharding strategy 'fastest'"):
        plan_reshard(6, 4, "fastest")


# --- sweep line ---------------------------------------------------------------------------------
def test_sweep_line_gives_the_three_intervals_of_the_design():
    segs = [Segment("A", 0, 12), Segment("A'", 12, 32), Segment("H", 0, 20), Segment("H'", 20, 32)]
    got = [(i.start, i.end, set(i.members)) for i in dp_intervals(segs)]
    assert got == [(0, 12, {"A", "H"}), (12, 20, {"A'", "H"}), (20, 32, {"A'", "H'"})]


def test_sweep_line_merges_neighbours_with_the_same_members():
    # replica 2 cuts at 8 but holds 0-16 on one member of each other replica: [0,8) and [8,16) merge
    segs = [Segment("a", 0, 16), Segment("a2", 16, 32), Segment("b", 0, 16), Segment("b2", 16, 32),
            Segment("c", 0, 8), Segment("c2", 8, 32)]
    got = [(i.start, i.end, i.members) for i in dp_intervals(segs)]
    assert got == [(0, 8, ("a", "b", "c")), (8, 16, ("a", "b", "c2")), (16, 32, ("a2", "b2", "c2"))]
    same = [Segment("x", 0, 10), Segment("y", 0, 10), Segment("x2", 10, 20), Segment("y2", 10, 20)]
    assert [(i.start, i.end) for i in dp_intervals(same)] == [(0, 10), (10, 20)]


# --- partitioning -------------------------------------------------------------------------------
def test_largest_remainder_rounding():
    assert largest_remainder([Fraction(5, 2), Fraction(5, 2), Fraction(5)], 10) == [3, 2, 5]
    assert largest_remainder([Fraction(31, 10), Fraction(69, 10)], 10) == [3, 7]


def test_partition_is_throughput_proportional_with_embedding_and_head_discount():
    # stage 0 twice as fast as stage 1: per-layer 1 ms vs 2 ms, 30 layers -> 20 / 10
    r = partition_layers(30, [StageCapacity(1_000_000), StageCapacity(2_000_000)])
    assert r.counts == (20, 10) and r.ranges == ((0, 20), (20, 30))
    assert r.stage_time_ns == (20_000_000, 20_000_000)
    # embedding = 1 layer equivalent on stage 0, head = 2 on stage 2; equal speeds, 32 layers:
    # T = (32 + 3) / 3 = 11.67 -> ideal 10.67 / 11.67 / 9.67 -> 11 / 12 / 9 after rounding
    r = partition_layers(32, [StageCapacity(100, extra_layer_equiv=1), StageCapacity(100), StageCapacity(100, extra_layer_equiv=2)])
    assert r.counts == (11, 12, 9)
    assert [round(x, 2) for x in r.ideal] == [10.67, 11.67, 9.67]


def test_partition_moves_layers_off_stages_out_of_memory():
    # fast stage would take 24 of 32, but its memory holds 18: 6 move to the slow one
    r = partition_layers(32, [StageCapacity(1000, max_layers=18), StageCapacity(3000)])
    assert r.ideal == (24.0, 8.0)
    assert r.counts == (18, 14)
    assert len(r.moves) == 1 and (r.moves[0].layers, r.moves[0].from_stage, r.moves[0].to_stage) == (6, 0, 1)
    assert any("memory holds 18" in line for line in r.lines())
    with pytest.raises(ConfigError, match="memory holds 20 layers, the model has 32"):
        partition_layers(32, [StageCapacity(1000, max_layers=10), StageCapacity(1000, max_layers=10)])
    assert uniform_partition(10, 3) == ((0, 4), (4, 7), (7, 10))


# --- rings ----------------------------------------------------------------------------------------
def test_ring_order_crosses_the_slow_link_fewest_times():
    node = {"a0": 0, "b0": 1, "a1": 0, "b1": 1, "a2": 0, "b2": 1}
    bw = lambda x, y: 450.0 if node[x] == node[y] else 25.0  # NVLink vs 200 Gb/s NIC  # noqa: E731
    naive = ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert slow_crossings(naive, bw) == 6
    ring = order_ring(naive, bw)
    assert ring == ("a0", "a1", "a2", "b0", "b1", "b2")
    assert slow_crossings(ring, bw) == 2


def test_split_by_bandwidth_is_proportional_and_exact():
    assert split_by_bandwidth(1000, [450.0, 50.0]) == (900, 100)
    assert split_by_bandwidth(10, [1.0, 1.0, 1.0]) == (4, 3, 3)
    with pytest.raises(ConfigError, match="bws_GBps\\[1\\]"):
        split_by_bandwidth(10, [1.0, 0.0])


# --- schedules ------------------------------------------------------------------------------------
def test_1f1b_op_orders():
    def names(s):
        return " ".join(str(o) for o in stage_ops("1f1b", s, 4, 6))

    assert names(0) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5"
    assert names(3) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"
    assert " ".join(str(o) for o in stage_ops("gpipe", 1, 4, 3)) == "F0 F1 F2 B0 B1 B2"


def test_interleaved_op_order_matches_megatron():
    ops = stage_ops("interleaved-1f1b", 0, 2, 4, chunks=2)
    assert " ".join(map(str, ops)) == "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3"
    assert sorted((o.kind, o.microbatch, o.chunk) for o in ops) == sorted(
        (k, m, c) for k in "FB" for m in range(4) for c in range(2)
    )
    with pytest.raises(ConfigError, match="divisible"):
        stage_ops("interleaved-1f1b", 0, 4, 6, chunks=2)


@pytest.mark.parametrize("p,m", [(4, 8), (2, 5), (8, 8), (1, 4)])
def test_homogeneous_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(p, m):
    tf, tb = 300, 600
    tl = analytic_timeline("1f1b", p, m, lambda s, op: tf if op.kind == "F" else tb)
    assert tl.makespan_ns == (m + p - 1) * (tf + tb)
    for s in range(p):
        assert tl.bubble_ns(s) == (p - 1) * (tf + tb)
        assert tl.bubble_fraction(s) == pytest.approx((p - 1) / (m + p - 1))


def test_interleaved_bubble_shrinks_by_v_and_gpipe_matches_1f1b():
    p, m, v = 4, 8, 2
    tl = analytic_timeline("interleaved-1f1b", p, m, lambda s, op: 50 if op.kind == "F" else 100, chunks=v)
    ideal = m * v * 150
    assert tl.makespan_ns - ideal == (p - 1) * 150  # bubble (p-1)(tf+tb)/v per stage
    g = analytic_timeline("gpipe", p, m, lambda s, op: 100 if op.kind == "F" else 200)
    assert g.makespan_ns == (m + p - 1) * 300


def test_straggler_stage_sets_the_pace():
    # stage 1 twice as slow: 1F1B makespan = fill/drain of the others + m * slow stage time
    tl = analytic_timeline("1f1b", 3, 6, lambda s, op: (200 if s == 1 else 100) * (1 if op.kind == "F" else 2))
    assert tl.busy_ns(1) == 6 * 600
    assert tl.bubble_ns(1) == tl.makespan_ns - 3600
    # stage 0's F0 (100) + stage 1's work (3600) + stage 1 waiting for B0 from stage 2 (F0 there
    # runs 300-400, B0 400-600, stage 1's F1 ends at 500: 100 idle) + stage 0's last B (200)
    assert tl.makespan_ns == 100 + 3600 + 100 + 200
