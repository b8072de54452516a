"""Ethernet in the NCCL cost model: TCP/IP framing at the group's MTU, then the transport's limit (the socket
path's measured ceiling, or a TCP offload path's fraction); one implementation shared with the heterogeneous
accuracy model."""

from __future__ import annotations

import pytest

from xsim_trace.cluster import cluster_from_dict, load_cluster
from xsim_trace.errors import ConfigError
from xsim_trace.network.nccl import group_shape
from xsim_trace.network.nccl.ethernet import ethernet_payload_gbps, tcp_framing
from xsim_trace.network.nccl.links import link_table
from xsim_trace.validate.hetero_predict import FITTED, nic_achievable_gbps


def test_framing_is_payload_per_wire_byte():
    assert tcp_framing(1500) == pytest.approx(1448 / 1538)
    assert tcp_framing(8244) == pytest.approx(8192 / 8282)
    assert tcp_framing(9000) > tcp_framing(1500)
    with pytest.raises(ValueError, match="MTU"):
        tcp_framing(52)


def test_socket_transport_framing_below_the_ceiling_and_capped_above():
    ceiling = link_table().ethernet.socket_ceiling_gbps
    assert ethernet_payload_gbps(1) == pytest.approx(1448 / 1538)  # the MIT testbed measured 0.939 Gb/s on 1 GbE
    assert ethernet_payload_gbps(10) == pytest.approx(10 * 1448 / 1538)
    assert ethernet_payload_gbps(100) == ceiling
    assert ethernet_payload_gbps(100, socket_ceiling_gbps=60.0) == 60.0


def test_offload_transport_has_no_socket_ceiling():
    frac = link_table().ethernet.offload_max_fraction
    assert ethernet_payload_gbps(200, mtu_bytes=8244, offload=True) == pytest.approx(200 * min(frac, 8192 / 8282))
    assert ethernet_payload_gbps(200, mtu_bytes=8244, offload=True) > link_table().ethernet.socket_ceiling_gbps


def test_hetero_model_uses_the_same_numbers():
    for line in (1, 10, 25, 50, 100):
        assert nic_achievable_gbps(line, "ethernet", FITTED) == ethernet_payload_gbps(
            line, socket_ceiling_gbps=FITTED.tcp_ceiling_Gbps)


def test_ethernet_presets_scale_out_bandwidth():
    # 50 GbE over NCCL sockets: the socket path's ceiling, not the line rate
    t4 = group_shape(load_cluster("aws-g4dn-t4"))
    assert t4.net_bw_GBps == pytest.approx(link_table().ethernet.socket_ceiling_gbps / 8)
    # 10 GbE: below the ceiling, at the framing limit of the AWS VPC's 9001 B jumbo frames
    v100 = load_cluster("aws-p3-g4dn").groups[0]
    from xsim_trace.network.nccl.shape import net_bw_GBps

    assert v100.nccl.mtu_bytes == 9001
    assert net_bw_GBps(v100) == pytest.approx(10 * 8949 / 9039 / 8)
    # GPUDirect-TCPXO (offload, MTU 8244): 8 x 200 Gb/s at the offload path's fraction
    a3 = group_shape(load_cluster("gcp-a3-mega:2"))
    assert a3.net_bw_GBps == pytest.approx(8 * 25 * link_table().ethernet.offload_max_fraction)


def test_mtu_and_offload_validated_and_round_trip():
    d = load_cluster("gcp-a3-mega:2").to_dict()
    nccl = d["groups"][0]["nccl"]
    assert (nccl["mtu_bytes"], nccl["tcp_offload"]) == (8244, True)
    back = cluster_from_dict(d).groups[0].nccl
    assert (back.mtu_bytes, back.tcp_offload) == (8244, True)
    for bad, field in ((100, "mtu_bytes"), (65536, "mtu_bytes"), ("yes", "tcp_offload")):
        d2 = load_cluster("gcp-a3-mega:2").to_dict()
        d2["groups"][0]["nccl"][field] = bad
        with pytest.raises(ConfigError, match=field):
            cluster_from_dict(d2)
