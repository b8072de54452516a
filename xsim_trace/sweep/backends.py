"""Network backends by name, for comparisons and sweeps.

``ns3`` comes from :mod:`xsim_trace.network.ns3_backend`; every other name is looked up in the
network package's registry (``make_backend(name, topology)``) when it is installed.  One-switch
star topologies come from the cluster package (``single_switch`` + ``build_topology``) when it is
there, else from :class:`StarTopology` below (same shape: ranks 0..n-1, one switch, one link each
way per rank).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xsim_trace.errors import BackendError
from xsim_trace.network.ns3_backend import make_ns3_backend, ns3_available

#: where the network helper's registry may live (first one that imports wins)
_REGISTRY_MODULES = ("xsim_trace.network.registry", "xsim_trace.network.backends", "xsim_trace.network")
#: the order backends are listed in, fastest first; unknown registry names follow alphabetically
PREFERRED_ORDER = ("analytical", "analytical-ca", "flow", "ns3")


def _registry() -> Any | None:
    for name in _REGISTRY_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if callable(getattr(mod, "make_backend", None)):
            return mod
    return None


def _registry_names(mod: Any) -> list[str]:
    for attr in ("backend_names", "available_backends", "list_backends", "registered_backends"):
        fn = getattr(mod, attr, None)
        if callable(fn):
            return [str(n) for n in fn()]
        if isinstance(fn, (list, tuple, dict, set, frozenset)):
            return [str(n) for n in fn]
    for attr in ("BACKENDS", "_BACKENDS", "_REGISTRY", "REGISTRY"):
        reg = getattr(mod, attr, None)
        if isinstance(reg, dict):
            return [str(n) for n in reg]
    return []


def available_backends() -> list[str]:
    """Names usable right now, in :data:`PREFERRED_ORDER` then alphabetical."""
    names = set()
    mod = _registry()
    if mod is not None:
        names.update(_registry_names(mod))
    if ns3_available():
        names.add("ns3")
    else:
        names.discard("ns3")
    order = {n: i for i, n in enumerate(PREFERRED_ORDER)}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


def make_named_backend(name: str, topology: Any, **options: Any) -> Any:
    """A fresh backend instance over ``topology``; BackendError names what is missing."""
    if name == "ns3":
        return make_ns3_backend(topology, **options)
    mod = _registry()
    if mod is None:
        raise BackendError(f"unknown backend {name!r}: the network backend registry is not installed", field="backend")
    try:
        return mod.make_backend(name, topology, **options) if options else mod.make_backend(name, topology)
    except BackendError:
        raise
    except (KeyError, ValueError) as exc:
        raise BackendError(f"unknown backend {name!r} ({exc}); available: {', '.join(available_backends())}",
                           field="backend") from exc


def close_backend(backend: Any) -> None:
    close = getattr(backend, "close", None)
    if callable(close):
        close()


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
    """``n`` ranks on one switch: the cluster package's topology when installed, else :class:`StarTopology`."""
    builder: Callable[..., Any] | None = None
    try:
        cluster = importlib.import_module("xsim_trace.cluster")
        topo_mod = importlib.import_module("xsim_trace.network.topology")
        single, build = getattr(cluster, "single_switch", None), getattr(topo_mod, "build_topology", None)
        if callable(single) and callable(build):
            builder = lambda: build(single(n, bw_GBps=bw_GBps, latency_ns=latency_ns))  # noqa: E731
    except ImportError:
        builder = None
    if builder is not None:
        return builder()
    return StarTopology(n, bw_GBps, latency_ns)
