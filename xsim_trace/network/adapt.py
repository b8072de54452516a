"""Let the built-in backends run on any topology-like object (e.g. a hand-made test star):
``links`` with ``src``/``dst``/``bw_GBps``/``latency_ns`` and ``route(src, dst)`` returning link
objects, link ids or a vertex list.  :class:`~xsim_trace.network.topology.Topology` passes through."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from xsim_trace.errors import BackendError


class AdaptedTopology:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        raw = inner.links
        raw = list(raw.values()) if isinstance(raw, dict) else list(raw)
        if not raw:
            raise BackendError("the topology has no links", field="links")
        self.links = raw
        self._by_ends: dict[tuple[Hashable, Hashable], int] = {}
        self._by_obj: dict[int, int] = {}
        ends = set()
        for i, ln in enumerate(raw):
            try:
                a, b = ln.src, ln.dst
                bw, lat = float(ln.bw_GBps), float(ln.latency_ns)
            except AttributeError as exc:
                raise BackendError(f"topology link {ln!r} lacks src/dst/bw_GBps/latency_ns") from exc
            if bw <= 0 or lat < 0:
                raise BackendError(f"link {a}->{b}: expected bw_GBps > 0 and latency_ns >= 0, found {bw}, {lat}")
            self._by_ends.setdefault((a, b), i)
            self._by_obj[id(ln)] = i
            ends.update((a, b))
        self.bw_Bpns = np.array([float(ln.bw_GBps) for ln in raw])
        self.bw_GBps = self.bw_Bpns
        self.latency = np.array([float(ln.latency_ns) for ln in raw])
        n = getattr(inner, "num_ranks", None)
        if n is None:
            n = 1 + max((v for v in ends if isinstance(v, int)), default=-1)
        self.num_ranks = int(n)
        self.vertices = list(getattr(inner, "vertices", sorted(ends, key=repr)))
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        #: a hand-made topology names no NICs: its endpoint ports are the links that touch a rank
        self.nic_vertices: frozenset = frozenset()

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        key = (src, dst)
        r = self._routes.get(key)
        if r is not None:
            return r
        if src == dst:
            r = ()
        else:
            path = list(self.inner.route(src, dst))
            if not path:
                r = ()
            elif all(id(p) in self._by_obj for p in path):
                r = tuple(self._by_obj[id(p)] for p in path)
            elif path[0] == src and path[-1] == dst and len(path) >= 2 and all(
                (a, b) in self._by_ends for a, b in zip(path[:-1], path[1:])
            ):
                r = tuple(self._by_ends[(a, b)] for a, b in zip(path[:-1], path[1:]))
            elif all(isinstance(p, int) and 0 <= p < len(self.links) for p in path):
                r = tuple(int(p) for p in path)
            else:
                raise BackendError(f"cannot read route {src}->{dst}: {path[:4]!r}...")
        self._routes[key] = r
        return r


def as_topology(topology: Any) -> Any:
    from xsim_trace.network.topology import Topology  # noqa: PLC0415

    if isinstance(topology, (Topology, AdaptedTopology)):
        return topology
    if hasattr(topology, "links") and hasattr(topology, "route"):
        return AdaptedTopology(topology)
    return topology
