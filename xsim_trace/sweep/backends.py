"""Network backends and one-switch topologies for comparisons and sweeps.

Backends come from the network registry (:func:`xsim_trace.network.registry.make_backend`:
``analytical``, ``analytical-ca``, ``flow``, and ``ns3`` when its extra is installed).  A star of
``n`` ranks is the cluster package's ``single_switch`` built into a topology; :class:`StarTopology`
is a dependency-free stand-in of the same shape (ranks 0..n-1, one switch, one link each way per
rank) for tests of a single backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xsim_trace.errors import BackendError, ConfigError
from xsim_trace.network.registry import available_backends as _registry_available
from xsim_trace.network.registry import make_backend

#: the order backends are listed in, fastest first; other names follow alphabetically
PREFERRED_ORDER = ("analytical", "analytical-ca", "flow", "ns3")


def available_backends() -> list[str]:
    """Names usable right now, in :data:`PREFERRED_ORDER` then alphabetical."""
    order = {n: i for i, n in enumerate(PREFERRED_ORDER)}
    return sorted(_registry_available(), key=lambda n: (order.get(n, len(order)), n))


def make_named_backend(name: str, topology: Any, **options: Any) -> Any:
    """A fresh backend instance over ``topology``; BackendError names what is missing."""
    return make_backend(name, topology, **options)


def close_backend(backend: Any) -> None:
    """Close ``backend`` where it declares ``needs_close``."""
    from xsim_trace.network.protocol import close_backend as close  # noqa: PLC0415

    close(backend)


@dataclass(frozen=True, slots=True)
class StarLink:
    src: object
    dst: object
    bw_GBps: float
    latency_ns: int


class StarTopology:
    """Ranks ``0..n-1`` on one switch ``"sw"``; each rank has one link up and one down."""

    def __init__(self, n: int, bw_GBps: float, latency_ns: int) -> None:
        if n < 2:
            raise BackendError(f"expected at least 2 ranks, found {n}", field="ranks")
        if bw_GBps <= 0 or latency_ns < 0:
            raise BackendError(f"expected bw_GBps > 0 and latency_ns >= 0, found {bw_GBps}, {latency_ns}")
        self.n = n
        self.vertices: list[object] = [*range(n), "sw"]
        self.links: list[StarLink] = []
        for r in range(n):
            self.links.append(StarLink(r, "sw", float(bw_GBps), int(latency_ns)))
            self.links.append(StarLink("sw", r, float(bw_GBps), int(latency_ns)))
        self._up = {link.src: link for link in self.links if link.dst == "sw"}
        self._down = {link.dst: link for link in self.links if link.src == "sw"}

    def route(self, src: int, dst: int) -> list[StarLink]:
        if src == dst:
            return []
        try:
            return [self._up[src], self._down[dst]]
        except KeyError as exc:
            raise BackendError(f"rank {exc.args[0]} is not in this {self.n}-rank star") from None


def star_topology(n: int, bw_GBps: float, latency_ns: int) -> Any:
    """``n`` ranks on one switch, every rank-to-rank flow crossing two links of ``bw_GBps`` / ``latency_ns``."""
    from xsim_trace.cluster import single_switch  # noqa: PLC0415
    from xsim_trace.network.topology import build_topology  # noqa: PLC0415

    if n < 2:
        raise ConfigError(f"expected at least 2 ranks, found {n}", field="ranks")
    return build_topology(single_switch(n, bw_GBps, latency_ns))
