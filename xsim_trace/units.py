"""Bandwidth units in one place.

Two spellings live in the code base and differ only in letter case: ``*_GBps`` is 1e9 **bytes**/s
(link and memory bandwidths: ``bw_GBps``, ``hbm_bw_GBps``), ``*_gbps`` is 1e9 **bits**/s (NIC line
rates: ``nic_gbps``).  Convert between them only through these helpers, never with a bare 8.
"""

from __future__ import annotations

BITS_PER_BYTE = 8


def gbps_to_GBps(gbps: float) -> float:  # noqa: N802 - the unit spelling is the point
    """1e9 bits/s -> 1e9 bytes/s."""
    return gbps / BITS_PER_BYTE


def GBps_to_gbps(GBps: float) -> float:  # noqa: N802, N803
    """1e9 bytes/s -> 1e9 bits/s."""
    return GBps * BITS_PER_BYTE


def GBps_to_bytes_per_s(GBps: float) -> float:  # noqa: N802, N803
    """1e9 bytes/s -> bytes/s."""
    return GBps * 1e9


def gbps_to_bytes_per_s(gbps: float) -> float:
    """1e9 bits/s -> bytes/s."""
    return gbps * 1e9 / BITS_PER_BYTE


def GBps_to_bits_per_s(GBps: float) -> float:  # noqa: N802, N803
    """1e9 bytes/s -> bits/s (NS-3 DataRate)."""
    return GBps * (BITS_PER_BYTE * 1e9)
