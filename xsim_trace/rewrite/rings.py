"""Bandwidth-aware ring order and bandwidth-proportional chunk sizes.

A ring over members crosses one link per neighbouring pair (and back to the start).  Greedy
nearest-neighbour on bandwidth keeps members that share a fast domain (a node, NVLink island)
contiguous, so the slow links are crossed the fewest times: once per domain boundary.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Hashable, Sequence, TypeVar

from xsim_trace.errors import ConfigError

T = TypeVar("T", bound=Hashable)


def order_ring(members: Sequence[T], bw_GBps: Callable[[T, T], float]) -> tuple[T, ...]:
    """Ring order starting at ``members[0]``: each next member is the unvisited one with the highest
    bandwidth from the current one (ties: input order)."""
    if len(members) <= 2:
        return tuple(members)
    left = list(members[1:])
    ring = [members[0]]
    while left:
        cur = ring[-1]
        best = max(range(len(left)), key=lambda i: (bw_GBps(cur, left[i]), -i))
        ring.append(left.pop(best))
    return tuple(ring)


def ring_links(ring: Sequence[T]) -> list[tuple[T, T]]:
    if len(ring) < 2:
        return []
    return [(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))] if len(ring) > 2 else [(ring[0], ring[1])]


def slow_crossings(ring: Sequence[T], bw_GBps: Callable[[T, T], float]) -> int:
    """How many ring links run below the fastest bandwidth between any two of its members."""
    links = ring_links(ring)
    if not links:
        return 0
    top = max(bw_GBps(a, b) for i, a in enumerate(ring) for b in ring[i + 1 :])
    return sum(1 for a, b in links if bw_GBps(a, b) < top)


def split_by_bandwidth(total_bytes: int, bws_GBps: Sequence[float]) -> tuple[int, ...]:
    """Integer byte sizes proportional to bandwidth (largest remainder; ties to lower index), so
    concurrent transfers over links of different speed finish together."""
    if not bws_GBps:
        raise ConfigError("no links to split over", field="bws_GBps")
    for i, b in enumerate(bws_GBps):
        if not b > 0:
            raise ConfigError(f"expected a positive bandwidth, found {b}", field=f"bws_GBps[{i}]")
    weights = [Fraction(b).limit_denominator(10**9) for b in bws_GBps]
    whole = sum(weights)
    shares = [total_bytes * w / whole for w in weights]
    sizes = [int(s) for s in shares]
    order = sorted(range(len(shares)), key=lambda i: (-(shares[i] - sizes[i]), i))
    for i in order[: total_bytes - sum(sizes)]:
        sizes[i] += 1
    return tuple(sizes)
