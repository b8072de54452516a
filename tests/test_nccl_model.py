"""The NCCL collective cost model: limits, monotonicity, NCCL's algorithm choice by size, forcing."""

from __future__ import annotations

import pytest

from xsim_trace.cluster import load_cluster
from xsim_trace.errors import ConfigError
from xsim_trace.network.nccl import Algo, CollKind, LinkGen, Proto, bus_factor, group_shape, price_collective

SIZES = [1 << k for k in range(3, 34)]


@pytest.fixture(scope="module")
def a100():
    return group_shape(load_cluster("a100-node"))


@pytest.fixture(scope="module")
def h100x2():
    return group_shape(load_cluster("dgx-h100:2"))


@pytest.fixture(scope="module")
def h100x4():
    return group_shape(load_cluster("dgx-h100:4"))


def test_shape_from_cluster(a100, h100x2):
    assert (a100.n_ranks, a100.n_nodes, a100.ranks_per_node, a100.arch, a100.link) == (8, 1, 8, "ampere", LinkGen.NVLINK3)
    assert a100.intra_bw_GBps == 235.0  # 12 NVLink3 links x 20 GB/s, capped at NCCL's sm80 235
    assert a100.nvls_bw_GBps == 0.0
    assert h100x2.n_nodes == 2 and h100x2.link is LinkGen.NVLINK4 and h100x2.nvls_bw_GBps > 0
    assert h100x2.net_bw_GBps == pytest.approx(8 * 50 * 0.96)


def test_subgroup_shape():
    c = load_cluster("dgx-h100:2")
    s = group_shape(c, [0, 8])  # one GPU on each node
    assert (s.n_ranks, s.n_nodes, s.ranks_per_node) == (2, 2, 1)
    assert s.nvls_bw_GBps == 0.0
    tp = group_shape(c, range(8))
    assert tp.n_nodes == 1 and tp.net_bw_GBps == 0.0


def test_a_group_reaches_only_its_gpus_rails():
    """A DP group of a TP8 run (one GPU per node) drives that GPU's own NIC, not the node's eight: its
    1 GiB all-reduce runs at one 400 Gb/s rail's bus bandwidth; two GPUs per node reach two rails."""
    c = load_cluster("dgx-h100:2")
    one = group_shape(c, [0, 8])
    assert (one.nics_per_node, one.net_bw_GBps) == (1, pytest.approx(50 * 0.96))
    two = group_shape(c, [0, 1, 8, 9])
    assert (two.nics_per_node, two.net_bw_GBps) == (2, pytest.approx(2 * 50 * 0.96))
    price = price_collective(one, CollKind.ALL_REDUCE, 1 << 30)
    assert 40.0 < price.bus_bw_GBps <= 50 * 0.96


@pytest.mark.parametrize("kind", list(CollKind))
def test_time_monotone_in_size(kind, a100, h100x4):
    """Each algorithm/protocol pair takes longer for a larger message.  NCCL chooses the pair by its estimate
    with every channel counted and then launches fewer channels for small messages, so where its choice
    switches pairs the time may drop (as nccl-tests shows at the LL -> LL128 switch: 77.7 us at 512 KiB,
    71.9 us at 1 MiB on 2x8 H100, nccl-tests#309); never within one pair."""
    from xsim_trace.network.nccl.model import candidates

    for s in (a100, h100x4):
        prices = [price_collective(s, kind, n) for n in SIZES]
        for a, b in zip(prices, prices[1:]):
            assert b.time_ns >= a.time_ns or (a.algo, a.proto) != (b.algo, b.proto), (kind, a, b)
        for algo, proto in candidates(s, kind):
            times = [price_collective(s, kind, n, algo=algo, proto=proto).time_ns for n in SIZES]
            assert all(b >= a for a, b in zip(times, times[1:])), (kind, algo, proto)


def test_limits(a100, h100x2):
    # small messages: latency bound (tens of microseconds), large: bus bandwidth approaches the link ceiling
    small = price_collective(a100, "all_reduce", 8)
    assert 5_000 < small.time_ns < 60_000
    big = price_collective(a100, "all_reduce", 8 << 30)
    assert 0.9 * a100.intra_bw_GBps < big.bus_bw_GBps <= a100.intra_bw_GBps
    assert price_collective(a100, "all_reduce", 0).time_ns == 0
    one = group_shape(load_cluster("a100-node"), [3])
    assert price_collective(one, "all_reduce", 1 << 20).time_ns == 0
    # busbw never exceeds what the links can carry (tree over 2 nodes may beat the NIC line rate, as NCCL's does)
    for n in SIZES:
        assert price_collective(h100x2, "all_gather", n).bus_bw_GBps <= h100x2.net_bw_GBps + 1e-9


def test_algorithm_choice_by_size(a100, h100x2, h100x4):
    # NCCL picks a low-latency protocol for small messages and Simple for large ones
    assert price_collective(a100, "all_reduce", 1024).proto is Proto.LL
    assert price_collective(a100, "all_reduce", 1 << 30).proto is Proto.SIMPLE
    assert price_collective(a100, "all_reduce", 1 << 30).algo is Algo.RING
    # Hopper on NVSwitch: NVLS for large single-node all-reduce, NVLS-tree across nodes
    h1 = group_shape(load_cluster("dgx-h100:1"))
    assert price_collective(h1, "all_reduce", 1 << 30).algo is Algo.NVLS
    assert price_collective(h100x4, "all_reduce", 1 << 30).algo is Algo.NVLS_TREE
    # tree (log latency) wins small multi-node all-reduce
    assert price_collective(h100x2, "all_reduce", 64).algo is Algo.TREE
    # only rings (or PAT) for all-gather
    assert price_collective(h100x2, "all_gather", 1 << 30).algo is Algo.RING


def test_forcing_algo_and_proto(a100, h100x2):
    forced = price_collective(a100, "all_reduce", 1 << 30, algo="ring", proto="LL")
    assert (forced.algo, forced.proto) == (Algo.RING, Proto.LL)
    assert forced.time_ns > price_collective(a100, "all_reduce", 1 << 30).time_ns
    tree = price_collective(h100x2, "all_reduce", 1 << 20, algo=Algo.TREE)
    assert tree.algo is Algo.TREE
    with pytest.raises(ConfigError, match="nvls"):
        price_collective(a100, "all_reduce", 1 << 20, algo="nvls")
    with pytest.raises(ConfigError):
        price_collective(a100, "all_gather", 1 << 20, algo="tree")
    with pytest.raises(ConfigError):
        price_collective(a100, "all_reduce", 1 << 20, proto="LL256")


def test_bus_bandwidth_definitions():
    assert bus_factor(CollKind.ALL_REDUCE, 8) == pytest.approx(14 / 8)
    assert bus_factor(CollKind.ALL_GATHER, 8) == pytest.approx(7 / 8)
    assert bus_factor(CollKind.SEND_RECV, 8) == 1.0


def test_more_nodes_cost_more(h100x2, h100x4):
    for n in (1 << 10, 1 << 20, 1 << 30):
        assert price_collective(h100x4, "all_reduce", n).time_ns >= price_collective(h100x2, "all_reduce", n).time_ns


def test_calibrated_cluster_overrides():
    c = load_cluster("a100-node")
    d = c.to_dict()
    d["groups"][0]["nccl"] = {"intra_bw_GBps": 150.0, "latency_us": 10.0}
    from xsim_trace.cluster import cluster_from_dict

    c2 = cluster_from_dict(d)
    assert cluster_from_dict(c2.to_dict()) == c2
    s2 = group_shape(c2)
    assert s2.intra_bw_GBps == 150.0 and s2.latency_us == 10.0
    base = price_collective(group_shape(c), "all_reduce", 8)
    # + the 10 us; the 8 bytes' own transfer on one launched channel differs by a nanosecond at 150 GB/s
    assert abs(price_collective(s2, "all_reduce", 8).time_ns - (base.time_ns + 10_000)) <= 2


def test_memoised_and_deterministic(a100):
    p1 = price_collective(a100, "all_reduce", 12345678)
    p2 = price_collective(a100, CollKind.ALL_REDUCE, 12345678)
    assert p1 == p2


def test_bad_tuning_field_rejected():
    from xsim_trace.cluster import cluster_from_dict

    d = load_cluster("a100-node").to_dict()
    d["groups"][0]["nccl"] = {"net": "token-ring"}
    with pytest.raises(ConfigError, match="groups\\[0\\].nccl.net"):
        cluster_from_dict(d)


def test_group_across_device_groups_runs_at_the_slowest():
    c = load_cluster("mixed-h100-a100")
    h100 = c.ranks_of_group("h100")
    a100 = c.ranks_of_group("a100")
    s = group_shape(c, [h100[0], a100[0]])
    assert s.n_nodes == 2 and s.arch == "ampere" and s.nvls_bw_GBps == 0.0
    assert s.net_bw_GBps <= 3200 / 8  # the inter-group link
    both = price_collective(s, "all_reduce", 1 << 30).time_ns
    only_h100 = price_collective(group_shape(c, [h100[0], h100[8]]), "all_reduce", 1 << 30).time_ns
    assert both > only_h100


# Bands from physics and published specs (no measurement of the predicted case): the largest all-reduce of a
# preset must land between what the wiring allows and what NCCL's own ceilings are.
#   a100-node: 12 NVLink-3 links x 20 GB/s (NCCL's per-link figure), capped at 235 GB/s by NCCL for SM80; a ring
#     all-reduce cannot beat that, and reaching less than 85% of it at 4 GiB would be a modelling error.
#   dgx-h100 (1 node): NVLS is bounded by 480 GB/s bus bandwidth (8x H100 NVLS, nccl-tests#290's maintainer) and
#     beats the NVLink-4 ring (18 x 20.6 = 371 GB/s).
#   dgx-h100:4: NVLS-tree across 4 nodes moves half the buffer through the NICs per direction: 8 x 400 Gb/s
#     per node bound the algorithm bandwidth at 2 x 50 x 8 / 2 = 200 GB/s.
@pytest.mark.parametrize(
    ("preset", "size", "lo_busbw", "hi_busbw"),
    [("a100-node", 4 << 30, 0.85 * 235, 235.0), ("dgx-h100:1", 4 << 30, 371.0, 480.0),
     ("dgx-h100:4", 8 << 30, 0.85 * 200 * 62 / 32, 200 * 62 / 32)],
)
def test_preset_large_all_reduce_within_physical_band(preset, size, lo_busbw, hi_busbw):
    p = price_collective(group_shape(load_cluster(preset)), "all_reduce", size)
    assert lo_busbw <= p.bus_bw_GBps <= hi_busbw


def test_cluster_restricts_algorithms_and_protocols():
    """gcp-a3-mega declares Google's TCPXO NCCL environment (NCCL_ALGO=Ring,Tree, NCCL_PROTO=Simple, no NVLS)."""
    s = group_shape(load_cluster("gcp-a3-mega:2"))
    chosen = {(p.algo, p.proto) for p in (price_collective(s, "all_reduce", n) for n in SIZES)}
    assert {proto for _, proto in chosen} == {Proto.SIMPLE}
    assert {algo for algo, _ in chosen} <= {Algo.RING, Algo.TREE}
    from xsim_trace.cluster import cluster_from_dict

    d = load_cluster("dgx-h100:2").to_dict()
    d["groups"][0]["nccl"] = {"protocols": ["LL"]}
    assert price_collective(group_shape(cluster_from_dict(d)), "all_reduce", 1 << 30).proto is Proto.LL
    d["groups"][0]["nccl"] = {"algorithms": ["ring", "bogus"]}
    with pytest.raises(ConfigError, match="algorithms"):
        cluster_from_dict(d)


def test_measured_constants_named_and_applied(a100):
    """The constants measured on public runs (nccl_links.yaml) name the runs they were fitted on, and the
    preset uses them: Simple pays a pipeline fill that grows with the message and then stops growing."""
    from xsim_trace.network.nccl.model import simple_fill_us
    from xsim_trace.network.nccl.reference import measured_sets

    keys = {m.key for m in measured_sets()}
    assert {"protocols.nvlink3", "protocols.nvlink4", "net_step_latency_us.ethernet"} <= keys
    assert all(m.fitted_on for m in measured_sets())
    small, big, huge = (simple_fill_us(a100, Algo.RING, Proto.SIMPLE, n) for n in (1 << 20, 1 << 30, 1 << 33))
    assert 0 < small < big == huge
    assert simple_fill_us(a100, Algo.RING, Proto.LL, 1 << 30) == 0.0
    assert simple_fill_us(a100, Algo.P2P, Proto.SIMPLE, 1 << 30) == 0.0  # one hop: no pipeline to fill
    pair = group_shape(load_cluster("a100-node"), [0, 1])  # 1 stage where the 8-GPU node has 7
    assert simple_fill_us(pair, Algo.RING, Proto.SIMPLE, 1 << 30) == pytest.approx(big / 7)


def _with_host(preset: str, host_cpu: str):
    from xsim_trace.cluster import cluster_from_dict

    d = load_cluster(preset).to_dict()
    d["groups"][0]["nccl"] = {**d["groups"][0].get("nccl", {}), "host_cpu": host_cpu}
    return group_shape(cluster_from_dict(d))


def test_amd_hosts_pay_nccl_amd_network_costs():
    """NCCL's tuning reads the host CPU (tuning.cc): across nodes an AMD host caps LL at the AMD row of
    llMaxBws (22.5 GB/s on 2 nodes, 19.0 beyond, against 39.0 / 20.4 on Intel) and posts each network operation
    in 2 us instead of 1 us (getNetOverhead), which every step of a multi-node ring pays.  One node: no change."""
    from xsim_trace.network.nccl.model import algbw_GBps, latency_us, ll_max_bw_GBps

    intel, amd = _with_host("dgx-a100:2", "intel"), _with_host("dgx-a100:2", "amd")
    assert (ll_max_bw_GBps(intel), ll_max_bw_GBps(amd)) == (39.0, 22.5)
    assert ll_max_bw_GBps(_with_host("dgx-a100:4", "amd")) == 19.0
    ar = CollKind.ALL_REDUCE
    assert algbw_GBps(amd, ar, Algo.RING, Proto.LL, 1 << 20) == pytest.approx(22.5 * 16 / 30)
    # 30 ring steps of which 2 cross the network: the other 28 pay max(NVLink LL 0.6 us, the host overhead)
    extra = latency_us(amd, ar, Algo.RING, Proto.LL, 1 << 10) - latency_us(intel, ar, Algo.RING, Proto.LL, 1 << 10)
    assert extra == pytest.approx(28 * (2.0 - 1.0))
    one_intel, one_amd = _with_host("dgx-a100:1", "intel"), _with_host("dgx-a100:1", "amd")
    assert price_collective(one_intel, ar, 1 << 16) == price_collective(one_amd, ar, 1 << 16)
    assert load_cluster("oci-a100-roce").groups[0].nccl.host_cpu == "amd"
    assert load_cluster("dgx-h100").groups[0].nccl.host_cpu == "intel"


def test_host_cpu_is_validated_and_round_trips():
    from xsim_trace.cluster import cluster_from_dict

    d = load_cluster("oci-a100-roce:2").to_dict()
    assert d["groups"][0]["nccl"]["host_cpu"] == "amd"
    assert cluster_from_dict(d).groups[0].nccl.host_cpu == "amd"
    d["groups"][0]["nccl"]["host_cpu"] = "sparc"
    with pytest.raises(ConfigError, match="host_cpu"):
        cluster_from_dict(d)



def test_two_node_tree_simple_runs_at_the_nvlink_ring_rate():
    """On two nodes NCCL's tree sends the message up and down one chain per node: every GPU sends it twice over
    NVLink, so the Simple tree reaches half the per-GPU NVLink rate the ring reaches (NCCL's per-link figure,
    capped as the ring is), bounded by the node's NICs; NCCL's own 0.92 tree derate is a selection heuristic
    that the measured 2-node trees exceed.  LL128 keeps it."""
    from xsim_trace.network.nccl.model import algbw_GBps

    oci = group_shape(load_cluster("oci-a100-roce:2"))
    ar = CollKind.ALL_REDUCE
    assert algbw_GBps(oci, ar, Algo.TREE, Proto.SIMPLE, 8 << 30) == pytest.approx(oci.intra_bw_GBps / 2)
    a3 = group_shape(load_cluster("gcp-a3-mega:2"))  # 18 x 20.6 / 2 = 185 GB/s, above 8 x 200 Gb/s x 0.9
    assert algbw_GBps(a3, ar, Algo.TREE, Proto.SIMPLE, 8 << 30) == pytest.approx(a3.net_bw_GBps)
    ll128 = algbw_GBps(oci, ar, Algo.TREE, Proto.LL128, 8 << 30) / oci.proto_bw_scale[1]
    assert ll128 == pytest.approx(oci.intra_bw_GBps * 0.92 * 120 / 128 / 2)


def test_tree_fill_follows_nccl_chunking():
    """A tree Simple all-reduce fills its pipeline with (2 x depth - 1) chunks of one channel before it streams;
    the chunk is NCCL's (enqueue.cc): a 4 MiB buffer step (512 KiB), halved while a channel's share holds fewer
    than 8 / 4 / 1 x depth chunks (floors 128 / 64 / 32 KiB), never more than the share."""
    from xsim_trace.network.nccl.model import simple_fill_us, tree_chunk_bytes, tree_depth, tree_pipeline_fill_us

    s = group_shape(load_cluster("oci-a100-roce:2"))  # 12 channels, depth 7 + 1
    assert tree_depth(s) == 8
    assert tree_chunk_bytes(s, 1 << 30) == 512 << 10
    assert tree_chunk_bytes(s, 256 << 20) == 256 << 10  # 256 MiB / 12 channels = 85 chunks of 256 KiB >= 64
    assert tree_chunk_bytes(s, 64 << 20) == 128 << 10
    assert tree_chunk_bytes(s, 1 << 12) == -(-(1 << 12) // 12)  # a channel's share
    fill = tree_pipeline_fill_us(s, 1 << 30)
    assert fill == pytest.approx(15 * (512 << 10) * 12 / (1000.0 * s.intra_bw_GBps / 2))  # ~0.8 ms
    assert simple_fill_us(s, Algo.TREE, Proto.SIMPLE, 1 << 30) == fill  # not the ring-measured fill
    assert simple_fill_us(s, Algo.RING, Proto.SIMPLE, 1 << 30) == pytest.approx(s.simple_fill_us)
    assert simple_fill_us(s, Algo.TREE, Proto.LL128, 1 << 30) == 0.0


def test_calibrated_tree_fill_replaces_the_chunking_one():
    from xsim_trace.cluster import cluster_from_dict
    from xsim_trace.network.nccl.model import simple_fill_us

    d = load_cluster("oci-a100-roce:2").to_dict()
    d["groups"][0]["nccl"].update(tree_fill_us=100.0, tree_fill_bytes=1 << 20)
    c = cluster_from_dict(d)
    assert cluster_from_dict(c.to_dict()).groups[0].nccl.tree_fill_us == 100.0
    s = group_shape(c)
    assert simple_fill_us(s, Algo.TREE, Proto.SIMPLE, 1 << 30) == pytest.approx(100.0)
    assert simple_fill_us(s, Algo.TREE, Proto.SIMPLE, 1 << 19) == pytest.approx(50.0)


def test_nvls_tree_runs_below_one_nodes_nvls_rate(h100x2, h100x4):
    """A 2-node NVLS-tree all-reduce reaches the measured share of one node's NVLS bandwidth (nccl_links.yaml
    nvls_tree_bw_scale); beyond 2 nodes the halved scale-out bandwidth still bounds it.  A cluster file may set
    the share, and a calibration leaves it (it fits nvls_bw_GBps)."""
    from xsim_trace.cluster import cluster_from_dict
    from xsim_trace.network.nccl.calibrate import MEASURED_ONLY
    from xsim_trace.network.nccl.model import algbw_GBps

    assert 0.5 < h100x2.nvls_tree_bw_scale < 1.0
    bw2 = algbw_GBps(h100x2, CollKind.ALL_REDUCE, Algo.NVLS_TREE, Proto.SIMPLE, 1 << 33)
    assert bw2 == pytest.approx(h100x2.nvls_bw_GBps * h100x2.nvls_tree_bw_scale)
    bw4 = algbw_GBps(h100x4, CollKind.ALL_REDUCE, Algo.NVLS_TREE, Proto.SIMPLE, 1 << 33)
    assert bw4 == pytest.approx(h100x4.net_bw_GBps * 0.5)
    d = load_cluster("dgx-h100:2").to_dict()
    d["groups"][0]["nccl"] = {**d["groups"][0].get("nccl", {}), "nvls_tree_bw_scale": 1.0}
    c = cluster_from_dict(d)
    assert cluster_from_dict(c.to_dict()) == c
    s = group_shape(c)
    assert algbw_GBps(s, CollKind.ALL_REDUCE, Algo.NVLS_TREE, Proto.SIMPLE, 1 << 33) == pytest.approx(s.nvls_bw_GBps)
    assert "nvls_tree_bw_scale" in MEASURED_ONLY
