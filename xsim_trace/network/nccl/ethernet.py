"""What NCCL moves through one Ethernet NIC: the line rate less TCP/IP framing, and the transport's limit.

Over Ethernet every MTU-sized IP packet carries ``MTU - 52`` bytes of payload (IPv4 20 B, TCP 20 B, TCP
timestamps 12 B) and occupies ``MTU + 38`` bytes of wire time (Ethernet header 14 B, FCS 4 B, preamble 8 B,
inter-frame gap 12 B): 1448 of 1538 bytes at MTU 1500 (0.9415), 8192 of 8282 at the 8244 B MTU of Google's
A3 Mega GPU networks (0.989).  Then the transport:

* NCCL's socket transport (no RDMA, no offload) copies every byte through the host's socket path, which has
  a ceiling of its own per NIC (``socket_ceiling_gbps`` in ``nccl_links.yaml``, measured: see there);
* a TCP offload data path into GPU memory (GPUDirect-TCPX / TCPXO) has no host copy; it reaches a fraction
  of the line rate (``offload_max_fraction``, an estimate) or the framing limit, whichever is lower.

This module is the one place these numbers are applied; the NCCL cost model (:mod:`.shape`) and the
heterogeneous accuracy model (``validate/hetero_predict.nic_achievable_gbps``) both call it.
"""

from __future__ import annotations

from xsim_trace.network.nccl.links import link_table

#: IPv4 (20 B) + TCP (20 B) + TCP timestamp option (12 B) per packet
TCP_IP_HEADER_BYTES = 52
#: Ethernet header (14 B) + FCS (4 B) + preamble/SFD (8 B) + inter-frame gap (12 B) per frame on the wire
ETHERNET_WIRE_OVERHEAD_BYTES = 38
DEFAULT_MTU_BYTES = 1500


def tcp_framing(mtu_bytes: int = DEFAULT_MTU_BYTES) -> float:
    """TCP payload per byte of wire time at ``mtu_bytes`` (full frames): 1448 / 1538 at MTU 1500."""
    if mtu_bytes <= TCP_IP_HEADER_BYTES:
        raise ValueError(f"an Ethernet MTU must exceed the {TCP_IP_HEADER_BYTES} B TCP/IP headers, found {mtu_bytes}")
    return (mtu_bytes - TCP_IP_HEADER_BYTES) / (mtu_bytes + ETHERNET_WIRE_OVERHEAD_BYTES)


def ethernet_payload_gbps(line_gbps: float, *, mtu_bytes: int | None = None, offload: bool = False,
                          socket_ceiling_gbps: float | None = None) -> float:
    """Payload rate NCCL reaches through one Ethernet NIC of ``line_gbps``: framing at ``mtu_bytes`` (default
    1500), then the socket path's ceiling (``socket_ceiling_gbps``, default the measured one) or, with a TCP
    offload transport, the offload path's fraction of the line rate."""
    framed = line_gbps * tcp_framing(mtu_bytes or DEFAULT_MTU_BYTES)
    eth = link_table().ethernet
    if offload:
        return min(framed, line_gbps * eth.offload_max_fraction)
    ceiling = eth.socket_ceiling_gbps if socket_ceiling_gbps is None else socket_ceiling_gbps
    return min(framed, ceiling)
