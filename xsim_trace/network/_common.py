"""Shared bits of the built-in backends: argument checks, rounding, the completion queue of flows
whose finish is fixed when they start."""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from xsim_trace.errors import BackendError
from xsim_trace.network.protocol import Flow

ROUNDINGS = ("floor", "ceil")


def check_rounding(rounding: str) -> str:
    if rounding not in ROUNDINGS:
        raise BackendError(f"expected rounding in {ROUNDINGS}, found {rounding!r}", field="rounding")
    return rounding


def to_ns(x: float, rounding: str) -> int:
    """Float ns -> int ns; ``floor`` truncates exactly like ASTRA-sim's ``static_cast<EventTime>``
    (bit for bit on the same doubles); ``ceil`` rounds up, with a 1e-9 relative tolerance so that
    float noise does not add a nanosecond."""
    if rounding == "floor":
        return int(x) if x >= 0 else int(math.floor(x))
    return int(math.ceil(x - 1e-9 * abs(x)))


class CompletionQueue:
    """Flows whose completion time is known when they start (a contention-free or booking backend):
    a heap of ``(finish_ns, flow_id)``, so flows finish in time order and, on a tie, by flow id.
    The ``start_flow`` / ``next_completion_ns`` / ``advance`` of such a backend are :meth:`push`,
    :meth:`next_ns` and :meth:`pop_until`."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, finish_ns: int, flow_id: int) -> None:
        heapq.heappush(self._heap, (finish_ns, flow_id))

    def next_ns(self) -> int | None:
        """The earliest completion time, None when no flow is in flight."""
        return self._heap[0][0] if self._heap else None

    def pop_until(self, now_ns: int) -> list[int]:
        """The ids of the flows finished by ``now_ns``, in (finish, id) order, taken off the queue."""
        out = []
        h = self._heap
        while h and h[0][0] <= now_ns:
            out.append(heapq.heappop(h)[1])
        return out


class FlowChecks:
    """Clock and flow-id bookkeeping every backend needs (mixin)."""

    _now_ns: int
    _active: set[int]
    name: str
    topology: Any

    def _check_start(self, flow: Flow, now_ns: int) -> None:
        if now_ns < self._now_ns:
            raise BackendError(
                f"flow {flow.flow_id} starts at {now_ns} ns, before the backend clock {self._now_ns} ns",
                field="now_ns",
            )
        if flow.flow_id in self._active:
            raise BackendError(f"flow id {flow.flow_id} is already active", field="flow_id")
        if flow.size_bytes < 0:
            raise BackendError(f"flow {flow.flow_id}: expected size_bytes >= 0, found {flow.size_bytes}", field="size_bytes")
        n = self.topology.num_ranks
        for end in (flow.src, flow.dst):
            if not 0 <= end < n:
                raise BackendError(f"flow {flow.flow_id}: expected an endpoint in [0, {n}), found {end}", rank=end)
        self._now_ns = now_ns  # a flow started at t moves the clock to t: advance(< t) is an error

    def _check_advance(self, now_ns: int) -> None:
        if now_ns < self._now_ns:
            raise BackendError(f"advance to {now_ns} ns, before the backend clock {self._now_ns} ns", field="now_ns")


def endpoint_port_mask(topology: Any) -> list[bool]:
    """Per link id: True for an endpoint port, a link that touches a rank (a GPU's NVLink or PCIe
    port) or a NIC (``topology.nic_vertices``: the NIC's link to the GPU and its fabric port)."""
    n = int(topology.num_ranks)
    nics = topology.nic_vertices

    def is_end(v: Any) -> bool:
        return (isinstance(v, (int, np.integer)) and 0 <= int(v) < n) or v in nics

    return [is_end(ln.src) or is_end(ln.dst) for ln in topology.links]
