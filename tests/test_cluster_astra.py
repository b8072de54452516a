"""ASTRA-sim network and system files read as a cluster: ``--cluster astra:NETWORK.yml[,SYSTEM.json]``."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from xsim_trace.cluster import astra_GBps, load_cluster, single_switch
from xsim_trace.cluster.astra import astra_system_of
from xsim_trace.errors import ConfigError
from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.network import build_topology

CONFIGS = Path(__file__).parents[1].parent / "shared" / "peers" / "astra-sim" / "configs"
needs_configs = pytest.mark.skipif(not (CONFIGS / "net_hgx8.yml").exists(), reason=f"no ASTRA-sim configs at {CONFIGS}")


@needs_configs
def test_the_shared_hgx_configs_read_as_astra_sim_switch():
    spec = f"astra:{CONFIGS / 'net_hgx8.yml'},{CONFIGS / 'sys_hgx.json'}"
    cluster = load_cluster(spec)
    assert cluster.num_ranks == 8 and cluster.num_nodes == 1
    topo = build_topology(cluster)
    ref = build_topology(single_switch(8, astra_GBps(400), 936.25))
    assert topo.bw_GBps.tolist() == ref.bw_GBps.tolist() and topo.latency.tolist() == ref.latency.tolist()
    assert topo.route_vertices(0, 7) == [0, "astra.n0.nvsw", 7]
    system = astra_system_of(spec)
    assert dict(system.algorithms)[CollectiveType.ALL_REDUCE] == "ring"
    assert (system.chunks, system.in_flight, system.endpoint_delay_ns) == (4, 2, 10)


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_two_dimensions_become_nodes_on_a_rail(tmp_path):
    net = _write(tmp_path, "net.yml", "topology: [ Switch, Switch ]\nnpus_count: [ 4, 2 ]\n"
                                      "bandwidth: [ 400.0, 50.0 ]\nlatency: [ 500.0, 1000.0 ]\n")
    cluster = load_cluster(f"astra:{net}")
    assert (cluster.num_ranks, cluster.num_nodes) == (8, 2)
    topo = build_topology(cluster)
    assert topo.route_vertices(1, 5) == [1, "astra.n0.nic1", "astra.rail1", "astra.n1.nic1", 5]
    # two switch links of the second dimension's latency, at its bandwidth
    assert topo.path_latency_ns(1, 5) == 2000.0
    assert topo.path_bottleneck_GBps(1, 5) == pytest.approx(astra_GBps(50.0))
    assert topo.path_latency_ns(0, 3) == 1000.0  # two links of the first dimension


def test_ring_and_fully_connected_first_dimensions(tmp_path):
    ring = _write(tmp_path, "ring.yml", "topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    topo = build_topology(load_cluster(f"astra:{ring}"))
    assert len(topo.route(0, 4)) == 4 and len(topo.route(0, 7)) == 1  # around the ring
    fc = _write(tmp_path, "fc.yml", "topology: [ FullyConnected ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n")
    topo = build_topology(load_cluster(f"astra:{fc}"))
    assert all(len(topo.route(a, b)) == 1 for a in range(4) for b in range(4) if a != b)


@pytest.mark.parametrize("text, field", [
    ("topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\n", "latency"),
    ("topology: [ Switch, Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50, 5 ]\nlatency: [ 5, 5 ]\n", "npus_count"),
    ("topology: [ Torus ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n", "topology[0]"),
    ("topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ tbd ]\nlatency: [ 5 ]\n", "bandwidth[0]"),
])
def test_bad_network_files_name_file_and_field(tmp_path, text, field):
    net = _write(tmp_path, "net.yml", text)
    with pytest.raises(ConfigError) as info:
        load_cluster(f"astra:{net}")
    assert "net.yml" in str(info.value) and field in str(info.value)


def test_bad_system_file_and_spec(tmp_path):
    net = _write(tmp_path, "net.yml", "topology: [ Switch ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n")
    sys_ = _write(tmp_path, "sys.json", '{"all-reduce-implementation": ["quantum"]}')
    with pytest.raises(ConfigError, match=r"sys.json.*all-reduce-implementation\[0\]"):
        load_cluster(f"astra:{net},{sys_}")
    with pytest.raises(ConfigError, match="expected astra:NETWORK.yml"):
        load_cluster("astra:")
    with pytest.raises(ConfigError, match="network file not found"):
        load_cluster(f"astra:{tmp_path / 'nope.yml'}")


def test_replay_takes_algorithms_and_chunks_from_the_system_file(tmp_path):
    from xsim_trace.cli.replay import settings_from_args

    net = _write(tmp_path, "net.yml", "topology: [ Switch ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n")
    sys_ = _write(tmp_path, "sys.json", '{"all-reduce-implementation": ["halvingDoubling"], "preferred-dataset-splits": 8,'
                                        ' "active-chunks-per-dimension": 2, "endpoint-delay": 10}')
    args = argparse.Namespace(cluster=f"astra:{net},{sys_}", algorithm=[], chunks=None, in_flight=None,
                              endpoint_delay_ns=None, reduction_delay_ns=0, p2p="eager")
    st = settings_from_args(args)
    assert (st.chunks, st.in_flight, st.endpoint_delay_ns) == (8, 2, 10)
    assert st.algorithm_for(int(CollectiveType.ALL_REDUCE)) == "halving_doubling"
    args.chunks = 2  # an option given wins
    assert settings_from_args(args).chunks == 2


def test_cli_bad_astra_spec_exits_2(tmp_path, capsys):
    from xsim_trace.cli.main import main

    assert main(["backends", "compare", "p2p", "--cluster", f"astra:{tmp_path / 'nope.yml'}"]) == 2
    assert "nope.yml" in capsys.readouterr().err
