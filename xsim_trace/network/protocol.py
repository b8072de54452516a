"""The network backend contract: the flow it carries, the three calls every backend answers, and the
optional capabilities a backend declares (never probed by attribute name).

The replayer owns the clock.  It hands a backend flows as they become ready (``start_flow``),
asks when the earliest active flow would finish if nothing else started (``next_completion_ns``),
and moves the backend's clock forward (``advance``), which returns the flows finished by then.
Times are integer nanoseconds; a backend must be deterministic: the same calls in the same order
give the same answers, bit for bit.

Optional capabilities are declared in one frozen :class:`BackendCapabilities` (the attribute
``capabilities``, set by the class or, where options change it, by the instance); callers read them
with :func:`capabilities_of` and use the matching protocol:

- ``horizon_hint``: ``next_completion_ns(horizon_ns=h)`` is understood: the caller promises that
  no flow starts before ``h``; the answer is the earliest completion if it is at or before ``h``,
  else None.  The backend may then run its internal events up to ``h`` for good (no speculation);
- ``closed_form``: the backend is a :class:`TransferPricing`; a batch of transfers that run
  together and alone in the network is priced by ``transfer_time_ns`` without events, so a
  replayer may price a whole collective step by step in closed form;
- ``contention_free``: flows never change each other's timing (closed form is then exact);
- ``endpoint_sharing``: flows through one endpoint port (a GPU's NVLink port, a NIC) share its
  bandwidth, even where the backend models no other contention;
- ``prices_collectives``: the backend is a :class:`CollectivePricing` (a collective's duration
  from a cost model, without flows);
- ``port_booking``: the backend is a :class:`PortBookedFlows`: a flow's completion is fixed when it
  starts, by booking the endpoint ports of its route first come, first served, so a compiled loop can
  time point-to-point transfers without the backend's events;
- ``lone_flow_timing``: the backend is a :class:`LoneFlowTiming`: the duration of one flow alone in
  the network, in closed form (what it adds to ``size / bottleneck``: latency, chunk pipelining);
- ``needs_close``: the backend holds a resource (a worker process); call ``close()`` when done.

Every backend has ``close()`` (a no-op where nothing is held).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True, slots=True)
class Flow:
    """One point-to-point transfer between two endpoints (global rank ids) of the topology."""

    flow_id: int
    src: int
    dst: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class BackendCapabilities:
    """What a backend offers beyond the three calls (see the module docstring)."""

    horizon_hint: bool = False
    closed_form: bool = False
    contention_free: bool = False
    endpoint_sharing: bool = False
    prices_collectives: bool = False
    port_booking: bool = False
    lone_flow_timing: bool = False
    needs_close: bool = False


#: the capabilities of a backend that declares none: the three calls only
NO_CAPABILITIES = BackendCapabilities()


class TopologyLike(Protocol):
    """What the built-in backends read of a topology (:class:`~xsim_trace.network.topology.Topology`,
    or any object that :func:`~xsim_trace.network.adapt.as_topology` adapts)."""

    num_ranks: int
    links: Sequence[Any]  # each with src, dst, bw_GBps, latency_ns
    bw_Bpns: np.ndarray  # by link id, bytes per ns
    latency: np.ndarray  # by link id, ns
    nic_vertices: frozenset  # vertices that are NICs (their links are endpoint ports)

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Link ids from rank ``src`` to rank ``dst``; empty when equal."""


@runtime_checkable
class NetworkBackend(Protocol):
    name: ClassVar[str]
    #: declared by the class; an instance may narrow or widen it by its options (e.g. analytical
    #: with endpoint_sharing=False is contention-free)
    capabilities: BackendCapabilities

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        """Inject ``flow`` at ``now_ns`` (never earlier than the last ``advance``)."""

    def next_completion_ns(self, horizon_ns: int | None = None) -> int | None:
        """Time of the earliest completion among active flows if no new flow starts; None if idle.
        ``horizon_ns`` only where ``capabilities.horizon_hint`` (see the module docstring)."""

    def advance(self, now_ns: int) -> list[int]:
        """Move the clock to ``now_ns`` and return the ids of flows finished at or before it,
        ordered by (finish time, flow_id)."""

    def close(self) -> None:
        """Release what the backend holds (idempotent)."""


@runtime_checkable
class TransferPricing(Protocol):
    """``capabilities.closed_form``: transfers priced without events."""

    def transfer_ns(self, src: int, dst: int, size_bytes: int) -> int:
        """Duration of one transfer alone in the network."""

    def transfer_time_ns(self, src: np.ndarray, dst: np.ndarray, size_bytes: np.ndarray) -> np.ndarray:
        """Durations (int64 ns) of a batch of transfers that start together and run alone in the
        network; with ``endpoint_sharing`` those that share an endpoint port share its bandwidth."""


@runtime_checkable
class PortBookedFlows(Protocol):
    """``capabilities.port_booking``: a flow's completion is fixed when it starts: ``start + to_ns(latency + x)`` where ``x`` is the
    longest of ``size / bottleneck`` and, on each endpoint port of its route, the port's residual
    booking ``max(booked - start, 0)`` plus ``size / port_bw``; the port is then booked to
    ``start + to_ns(that)`` (``rounding``: floor or ceil, as ``_common.to_ns``).  The analytical
    backend with endpoint sharing; a compiled loop can reproduce it exactly."""

    rounding: str
    endpoint_sharing: bool

    def flow_route(self, src: int, dst: int) -> tuple[float, float, tuple[int, ...]]:
        """(sum of latencies ns, bottleneck bytes/ns, endpoint port link ids) of a flow src -> dst."""

    def port_bw_Bpns(self) -> list[float]:
        """Bandwidth of every link (bytes/ns), by link id."""


@runtime_checkable
class LoneFlowTiming(Protocol):
    """``capabilities.lone_flow_timing``: the closed-form duration of a flow alone in the network."""

    def lone_flow_ns(self, src: int, dst: int, size_bytes: int) -> float:
        """Start to landing of one ``size_bytes`` flow ``src -> dst`` with nothing else in flight."""


@runtime_checkable
class CollectivePricing(Protocol):
    """``capabilities.prices_collectives``: a collective priced whole by a cost model."""

    def collective_ns(self, comm_type: Any, ranks: Sequence[int], size_bytes: int) -> int:
        """Duration of one collective of ``comm_type`` (a CollectiveType) over global ``ranks``."""


def capabilities_of(backend: object) -> BackendCapabilities:
    """The capabilities ``backend`` declares; a backend that declares none has the three calls only."""
    caps = getattr(backend, "capabilities", None)  # the class's declaration, or the instance's own
    if caps is None:
        return NO_CAPABILITIES
    if not isinstance(caps, BackendCapabilities):
        from xsim_trace.errors import BackendError  # noqa: PLC0415

        raise BackendError(f"backend {type(backend).__name__}: expected capabilities to be a BackendCapabilities, "
                           f"found {caps!r}", field="capabilities")
    return caps


def close_backend(backend: object) -> None:
    """``backend.close()`` where it declares ``needs_close``."""
    if capabilities_of(backend).needs_close:
        backend.close()  # type: ignore[attr-defined]
