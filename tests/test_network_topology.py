"""Topology construction and routing on presets and hand-made clusters."""

from __future__ import annotations

import pytest

from xsim_trace.cluster import cluster_from_dict, load_cluster, single_switch
from xsim_trace.errors import ConfigError
from xsim_trace.network import build_topology
from network_helpers import SMALL_FAT_TREE as FT  # noqa: E402


def kinds(topo, s, d):
    return [topo.links[i].kind for i in topo.route(s, d)]


def test_single_switch_shape():
    t = build_topology(single_switch(8, 400.0, 936.25))
    assert t.num_ranks == 8 and len(t.links) == 16 and len(t.vertices) == 9
    r = t.route(3, 5)
    assert [(t.links[i].src, t.links[i].dst) for i in r] == [(3, "g0.n0.nvsw"), ("g0.n0.nvsw", 5)]
    assert t.route(3, 3) == ()
    assert float(t.bw_Bpns[r[0]]) == 400.0 and float(t.latency[r[0]]) == 936.25
    assert t.route(3, 5) is t.route(3, 5)  # cached


def test_dgx_h100_routes():
    t = build_topology(load_cluster("dgx-h100:2"))
    assert kinds(t, 0, 7) == ["nvlink", "nvlink"]
    # across nodes: GPU -> its NIC -> leaf -> peer NIC -> GPU, on the GPU's rail
    assert t.route_vertices(3, 11) == [3, "h100.n0.nic3", "h100.leaf0", "h100.n1.nic3", 11]
    assert t.path_bottleneck_GBps(3, 11) == 50.0  # 400 Gb/s
    assert t.path_latency_ns(3, 11) == 1000 + 500 + 500 + 1000
    assert t.path_bottleneck_GBps(0, 1) == 450.0




def test_fat_tree_oversubscription_and_d_mod_k():
    t = build_topology(cluster_from_dict(FT))
    # 8 NICs, 4 per leaf -> 2 leaves; leaf->spine bandwidth = 4 * 12.5 GB/s / (2 * 2 spines)
    up = t.link_between("g.leaf0", "g.spine1")
    assert up.bw_GBps == pytest.approx(12.5) and up.kind == "fabric"
    # GPUs 0,1 share NIC 0 of node 0 (2 NICs for 4 GPUs)
    assert t.route_vertices(1, 5)[:3] == [1, "g.n0.nic0", "g.leaf0"]
    # rank 13 = node 3 GPU 1 -> NIC 6 -> leaf 1; spine = 6 mod 2 = 0
    assert t.route_vertices(0, 13) == [0, "g.n0.nic0", "g.leaf0", "g.spine0", "g.leaf1", "g.n3.nic0", 13]
    assert t.route_vertices(0, 15) == [0, "g.n0.nic0", "g.leaf0", "g.spine1", "g.leaf1", "g.n3.nic1", 15]
    # same leaf: no spine
    assert t.route_vertices(0, 6) == [0, "g.n0.nic0", "g.leaf0", "g.n1.nic1", 6]


def test_rail_only_crosses_nvlink_first():
    d = {**FT, "fabric": {"kind": "rail-only", "latency_ns": 300}}
    t = build_topology(cluster_from_dict(d))
    # same rail: straight over rail switch 0
    assert t.route_vertices(0, 4) == [0, "g.n0.nic0", "g.rail0", "g.n1.nic0", 4]
    # GPU 0 (rail 0) to node 1 GPU 3 (rail 1): NVLink to node-0 GPU 3, then rail 1
    assert t.route_vertices(0, 7) == [0, "g.n0.nvsw", 3, "g.n0.nic1", "g.rail1", "g.n1.nic1", 7]


def test_groups_joined_by_a_wan_link():
    t = build_topology(load_cluster("mixed-h100-a100:1,1"))
    v = t.route_vertices(0, 8)
    assert v[:3] == [0, "h100.n0.nic0", "h100.leaf0"]
    assert "h100.border" in v and "a100.border" in v and v[-1] == 8
    assert "wan" in kinds(t, 0, 8)
    wan = t.link_between("h100.border", "a100.border")
    assert wan.bw_GBps == 400.0 and wan.latency_ns == 2000  # 3.2 Tb/s
    assert t.path_bottleneck_GBps(0, 8) == 25.0  # the A100 side's 200 Gb/s NIC


def test_mesh_routes_fewest_hops_then_widest():
    t = build_topology(load_cluster("v100-dgx1"))
    assert t.route_vertices(0, 3) == [0, 3] and t.path_bottleneck_GBps(0, 3) == 50.0
    assert t.route_vertices(0, 1) == [0, 1] and t.path_bottleneck_GBps(0, 1) == 25.0
    assert t.route_vertices(0, 7) == [0, 4, 7]  # via 4 (2 lanes + 2 lanes) beats via 3 (2 + 1)
    assert t.path_bottleneck_GBps(0, 7) == 50.0
    for s in range(8):
        for d in range(8):
            if s != d:
                assert 1 <= len(t.route(s, d)) <= 2


def test_topology_is_deterministic_and_exposed():
    a = build_topology(load_cluster("dgx-h100:4"))
    b = build_topology(load_cluster("dgx-h100:4"))
    assert a.vertices == b.vertices and a.links == b.links
    assert a.vertices[:32] == list(range(32))
    for ln in a.links:
        assert ln.bw_GBps > 0 and ln.latency_ns >= 0 and a.links[ln.link_id] is ln
    g = a.to_networkx()
    assert g.number_of_edges() == len(a.links)
    with pytest.raises(ConfigError, match="endpoint"):
        a.route(0, 32)


def test_1024_rank_routes_are_cheap():
    t = build_topology(load_cluster("dgx-h100:128"))
    assert t.num_ranks == 1024
    hops = {len(t.route(r, (r + 8) % 1024)) for r in range(1024)}
    assert hops <= {4, 6}
