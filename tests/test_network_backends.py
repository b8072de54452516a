"""Network backends against hand-computed numbers (docs/network.md has the rules)."""

from __future__ import annotations

import pytest

from network_helpers import SMALL_FAT_TREE, drive, random_flows
from xsim_trace.cluster import astra_GBps, cluster_from_dict, load_cluster, single_switch
from xsim_trace.errors import BackendError
from xsim_trace.network import (
    NetworkBackend,
    available_backends,
    build_topology,
    make_backend,
    register_backend,
)
from xsim_trace.network.protocol import Flow

BUILTIN = ("analytical", "analytical-ca", "flow")


def two_gpus(bw_GBps: float, latency_ns: float):
    """Two GPUs joined by one direct link each way."""
    return build_topology(
        cluster_from_dict(
            {
                "name": "pair",
                "groups": [
                    {
                        "name": "g",
                        "gpu": "generic",
                        "count": 2,
                        "devices_per_node": 2,
                        "intra_node": {"kind": "mesh", "bw_GBps": bw_GBps, "latency_ns": latency_ns, "mesh": [[0, 1]]},
                    }
                ],
            }
        )
    )


@pytest.fixture
def star4():
    # 4 ranks on one switch, 1 GB/s = 1 byte/ns per direction, 100 ns per link (2 links per flow)
    return build_topology(single_switch(4, 1.0, 100))


@pytest.mark.parametrize("name", BUILTIN)
def test_one_flow_one_link_is_latency_plus_size_over_bw(name):
    topo = two_gpus(10.0, 100)  # 10 bytes/ns
    assert len(topo.route(0, 1)) == 1
    b = make_backend(name, topo)
    assert isinstance(b, NetworkBackend)
    assert drive(b, [(0, Flow(7, 0, 1, 1000))]) == {7: 100 + 100}
    # later start, same duration
    b = make_backend(name, topo)
    assert drive(b, [(5_000, Flow(1, 1, 0, 2_500))]) == {1: 5_000 + 100 + 250}


@pytest.mark.parametrize("name", BUILTIN)
def test_one_flow_through_a_switch(name, star4):
    # two hops: analytical = 2 lat + S/bw; store-and-forward = 2 (lat + S/bw); flow = S/bw + 2 lat
    expect = {"analytical": 1200, "analytical-ca": 2200, "flow": 1200}[name]
    assert drive(make_backend(name, star4), [(0, Flow(1, 0, 1, 1000))]) == {1: expect}


def test_two_flows_sharing_a_link(star4):
    flows = [(0, Flow(1, 0, 1, 1000)), (0, Flow(2, 2, 1, 1000))]  # both into rank 1: switch->1 shared
    # flow-level: each gets half of 1 B/ns: 2000 ns of transfer + 200 ns latency
    assert drive(make_backend("flow", star4), flows) == {1: 2200, 2: 2200}
    # analytical: rank 1's port carries both, first come first served; without endpoint sharing
    # flows ignore each other
    assert drive(make_backend("analytical", star4), flows) == {1: 1200, 2: 2200}
    assert drive(make_backend("analytical", star4, endpoint_sharing=False), flows) == {1: 1200, 2: 1200}
    # congestion-aware: both reach the switch at 1100; flow 1 holds switch->1 for 1000 ns, flow 2 waits
    assert drive(make_backend("analytical-ca", star4), flows) == {1: 2200, 2: 3200}


def test_flow_rates_change_when_flows_come_and_go(star4):
    # flow 3 joins at 500: the three share switch->1 at 1/3 B/ns until 2750, then flow 3 runs alone
    flows = [(0, Flow(1, 0, 1, 1000)), (0, Flow(2, 2, 1, 1000)), (500, Flow(3, 3, 1, 1000))]
    assert drive(make_backend("flow", star4), flows) == {1: 2950, 2: 2950, 3: 3200}
    # the second flow speeds up when the first is done: 1000 B at 1/2, then 2000 B at 1
    flows = [(0, Flow(1, 0, 1, 1000)), (0, Flow(2, 2, 1, 3000))]
    assert drive(make_backend("flow", star4), flows) == {1: 2200, 2: 4200}


def test_max_min_unequal_shares():
    topo = build_topology(single_switch(5, 1.0, 100))
    # A 0->1 and B 0->2 share uplink 0; B, C 3->2, D 4->2 share downlink 2 (1/3 each): A gets 2/3
    flows = [(0, Flow(0, 0, 1, 1000)), (0, Flow(1, 0, 2, 1000)), (0, Flow(2, 3, 2, 1000)), (0, Flow(3, 4, 2, 1000))]
    got = drive(make_backend("flow", topo), flows)
    assert got == {0: 1500 + 200, 1: 3000 + 200, 2: 3000 + 200, 3: 3000 + 200}


@pytest.mark.parametrize("n", [2, 5, 30])  # 30 senders also exercises the numpy water-filling
def test_incast_onto_one_receiver(n):
    topo = build_topology(single_switch(n + 1, 2.0, 50))  # 2 B/ns, 50 ns per link
    size = 4000  # 2000 ns alone
    flows = [(0, Flow(i, i + 1, 0, size)) for i in range(n)]
    fl = drive(make_backend("flow", topo), flows)
    assert fl == {i: n * 2000 + 100 for i in range(n)}
    an = drive(make_backend("analytical", topo), flows)
    assert an == {i: (i + 1) * 2000 + 100 for i in range(n)}  # receiver's port booked in turn
    assert max(an.values()) == max(fl.values())
    # store-and-forward: all reach the switch at 2050; then one after another on switch->0
    ca = drive(make_backend("analytical-ca", topo), flows)
    assert ca == {i: 2050 + i * 2000 + 2050 for i in range(n)}


def test_astra_units_and_truncation():
    # ASTRA-sim: 400 "GB/s" = 400 * 2**30 B/s; a 32 KiB chunk serialises in floor(76.29) = 76 ns and
    # reaches the next device floor(936.25 + 76.29) = 1012 ns after it starts on a link
    topo = build_topology(single_switch(8, astra_GBps(400), 936.25))
    ca = make_backend("analytical-ca", topo)
    assert drive(ca, [(0, Flow(0, 0, 1, 32768))]) == {0: 2 * 1012}
    an = make_backend("analytical", topo)
    assert drive(an, [(0, Flow(0, 0, 1, 32768))]) == {0: 1948}  # floor(2 * 936.25 + 76.29)
    # two chunks from one source: the second starts on the uplink when the first frees it (76 ns)
    ca = make_backend("analytical-ca", topo)
    assert drive(ca, [(0, Flow(0, 0, 1, 32768)), (0, Flow(1, 0, 2, 32768))]) == {0: 2024, 1: 2100}


@pytest.mark.parametrize("name", BUILTIN)
def test_same_rank_and_empty_flows(name, star4):
    b = make_backend(name, star4)
    got = drive(b, [(10, Flow(0, 2, 2, 1 << 20)), (10, Flow(1, 0, 1, 0))])
    assert got[0] == 10
    assert got[1] == 10 + (200 if name != "analytical-ca" else 200)




@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("cluster", ["dgx-h100:2", "mixed-h100-a100:1,2", "fat-tree"])
def test_deterministic_and_insensitive_to_extra_queries(name, cluster):
    topo = build_topology(cluster_from_dict(SMALL_FAT_TREE) if cluster == "fat-tree" else load_cluster(cluster))
    flows = random_flows(topo.num_ranks, 300, seed=3)
    a = drive(make_backend(name, topo), flows)
    b = drive(make_backend(name, topo), flows)
    c = drive(make_backend(name, topo), flows, chatty=True, seed=11)
    assert a == b == c
    assert len(a) == 300


def test_flow_never_beats_its_uncontended_time():
    topo = build_topology(load_cluster("dgx-h100:4"))
    flows = random_flows(topo.num_ranks, 400, seed=5)
    fl = drive(make_backend("flow", topo), flows)
    alone = make_backend("analytical", topo, rounding="ceil")
    for start, f in flows:
        assert fl[f.flow_id] - start >= alone.transfer_ns(f.src, f.dst, f.size_bytes) - 1


def test_advance_reports_in_order_and_checks_the_clock(star4):
    b = make_backend("flow", star4)
    b.start_flow(Flow(9, 0, 1, 100), 0)
    b.start_flow(Flow(3, 2, 3, 100), 0)
    assert b.next_completion_ns() == 300
    assert b.advance(299) == []
    assert b.advance(1000) == [3, 9]
    assert b.next_completion_ns() is None
    with pytest.raises(BackendError, match="before the backend clock"):
        b.advance(10)
    with pytest.raises(BackendError, match="before the backend clock"):
        b.start_flow(Flow(1, 0, 1, 1), 5)
    b.start_flow(Flow(1, 0, 1, 1), 2000)
    with pytest.raises(BackendError, match="already active"):
        b.start_flow(Flow(1, 0, 2, 1), 2000)
    with pytest.raises(BackendError, match="endpoint"):
        b.start_flow(Flow(2, 0, 99, 1), 2000)


def test_registry():
    assert set(BUILTIN) <= set(available_backends())
    with pytest.raises(BackendError, match="unknown network backend 'nope'"):
        make_backend("nope", None)
    with pytest.raises(BackendError, match="bad options"):
        make_backend("flow", build_topology(single_switch(2, 1.0, 0)), wrong=1)

    class Fixed:
        name = "test-fixed"

        def __init__(self, topology, delay_ns=5):
            self.delay_ns = delay_ns

    register_backend("test-fixed", Fixed, replace=True)
    assert make_backend("test-fixed", None, delay_ns=7).delay_ns == 7
    with pytest.raises(BackendError, match="already registered"):
        register_backend("test-fixed", lambda t: None)


@pytest.mark.parametrize("name", BUILTIN)
def test_backends_accept_a_hand_made_topology(name):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class L:
        src: object
        dst: object
        bw_GBps: float
        latency_ns: float

    class Star:  # links + route returning link objects, like a test double
        def __init__(self, n):
            self.links = [L(r, "sw", 1.0, 100) for r in range(n)] + [L("sw", r, 1.0, 100) for r in range(n)]
            self.n = n

        def route(self, s, d):
            return [self.links[s], self.links[self.n + d]]

    flows = [(0, Flow(1, 0, 1, 1000)), (0, Flow(2, 2, 1, 1000))]
    want = {"analytical": {1: 1200, 2: 2200}, "analytical-ca": {1: 2200, 2: 3200}, "flow": {1: 2200, 2: 2200}}
    assert drive(make_backend(name, Star(3)), flows) == want[name]


def test_1024_rank_ring_step_by_hand():
    # dgx-h100:128: rank r -> r+1 with 64 KiB.  Inside a node: GPU -> NVSwitch -> GPU (450 GB/s, 250 ns
    # per hop).  Across nodes: GPU -> NIC (50 GB/s, 1 us) -> leaf (500 ns) [-> spine -> leaf when the
    # next node is on another leaf: 4 nodes = 32 NICs per leaf] -> NIC -> GPU; no two flows share a link.
    topo = build_topology(load_cluster("dgx-h100:128"))
    n, size = 1024, 65536
    flows = [(0, Flow(r, r, (r + 1) % n, size)) for r in range(n)]

    def kind(r):
        if r % 8 != 7:
            return "intra"
        return "cross-leaf" if (r // 8) % 4 == 3 else "same-leaf"

    expect = {
        "analytical": {"intra": 645, "same-leaf": 4310, "cross-leaf": 5310},  # floor(lat + S / 50 or 450)
        "flow": {"intra": 146 + 500, "same-leaf": 1311 + 3000, "cross-leaf": 1311 + 4000},
        # store-and-forward: every hop floor(lat + S/bw): NVLink 395, PCIe 2310, fabric 1810
        "analytical-ca": {"intra": 790, "same-leaf": 2310 * 2 + 1810 * 2, "cross-leaf": 2310 * 2 + 1810 * 4},
    }
    for name in BUILTIN:
        got = drive(make_backend(name, topo), flows)
        assert len(got) == n
        for r in range(n):
            assert got[r] == expect[name][kind(r)], (name, r)
