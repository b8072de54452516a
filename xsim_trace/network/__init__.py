"""Network: topology of a cluster and the backends that time flows over it.

``build_topology(cluster) -> Topology``; ``make_backend(name, topology, **options)`` with
``analytical``, ``analytical-ca``, ``flow`` built in (``ns3`` when the extra is installed);
``register_backend(name, factory)`` for more.  See docs/network.md.
"""

from xsim_trace.network.protocol import BackendCapabilities, Flow, NetworkBackend, capabilities_of
from xsim_trace.network.registry import available_backends, known_backends, make_backend, register_backend
from xsim_trace.network.topology import Link, Topology, build_topology

__all__ = [
    "BackendCapabilities",
    "Flow",
    "Link",
    "NetworkBackend",
    "Topology",
    "available_backends",
    "build_topology",
    "capabilities_of",
    "known_backends",
    "make_backend",
    "register_backend",
]
