"""``analytical``: alpha-beta per hop plus endpoint-port sharing.

A flow of ``S`` bytes over links ``l1..lk`` alone in the network finishes at
``start + sum(latency_ns) + S / min(bw)`` (ASTRA-sim's congestion-unaware analytical backend with
per-link latencies and a bottleneck bandwidth instead of one uniform dimension), rounded to integer
ns once (``rounding="floor"`` truncates like ASTRA-sim; ``"ceil"`` rounds up).

Endpoint ports (the links that touch a GPU or a NIC: a GPU's NVLink port, its PCIe link to the NIC,
the NIC's port into the fabric) are shared: each keeps the time up to which it is booked, and a flow
books ``S / bw`` on every port of its route from ``max(start, booked)`` (first come, first served,
as a fluid queue).  The flow's transfer takes the longest of its port bookings and ``S / min(bw)``.
So eight flows into one 25 GB/s NIC end when the NIC has carried all their bytes, as on the other
backends; links inside the fabric (switch to switch) are not modelled as shared.
``endpoint_sharing=False`` gives the pure congestion-unaware model.

Completion times are fixed when a flow starts (a later flow books after it), so no event runs
between completions.  ``transfer_time_ns`` prices a batch of transfers that start together: those
sharing a port all end when the port has carried the batch's bytes (the replay engine's closed form
prices each collective step that way).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xsim_trace.network._common import CompletionQueue, FlowChecks, check_rounding, endpoint_port_mask, to_ns
from xsim_trace.network.protocol import BackendCapabilities, Flow, TopologyLike


class AnalyticalBackend(FlowChecks):
    name: ClassVar[str] = "analytical"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(closed_form=True, endpoint_sharing=True,
                                                                      port_booking=True)

    def __init__(self, topology: TopologyLike, *, rounding: str = "floor", endpoint_sharing: bool = True) -> None:
        self.topology = topology
        self.rounding = check_rounding(rounding)
        self.endpoint_sharing = bool(endpoint_sharing)
        if not self.endpoint_sharing:  # flows never meet: closed form is exact for every transfer
            self.capabilities = BackendCapabilities(closed_form=True, contention_free=True)
        self._now_ns = 0
        self._active: set[int] = set()
        self._done = CompletionQueue()
        self._path: dict[tuple[int, int], tuple[float, float, tuple[int, ...]]] = {}
        self._bw = [float(x) for x in topology.bw_Bpns]
        self._is_port = endpoint_port_mask(topology) if self.endpoint_sharing else [False] * len(self._bw)
        self._booked: dict[int, int] = {}  # port link -> booked up to (ns)
        self.flows_started = 0

    def _alpha_beta(self, src: int, dst: int) -> tuple[float, float, tuple[int, ...]]:
        """(sum of latencies, bottleneck bandwidth, endpoint ports) of the route src -> dst."""
        key = (src, dst)
        ab = self._path.get(key)
        if ab is None:
            route = self.topology.route(src, dst)
            if not route:
                ab = (0.0, 0.0, ())
            else:
                lat = float(sum(float(self.topology.latency[i]) for i in route))
                bw = float(min(self._bw[i] for i in route))
                ab = (lat, bw, tuple(i for i in route if self._is_port[i]))
            self._path[key] = ab
        return ab

    def flow_route(self, src: int, dst: int) -> tuple[float, float, tuple[int, ...]]:
        """(sum of latencies ns, bottleneck bytes/ns, endpoint port link ids) of a flow src -> dst:
        what :meth:`start_flow` books (:class:`~xsim_trace.network.protocol.PortBookedFlows`)."""
        return self._alpha_beta(src, dst)

    def port_bw_Bpns(self) -> list[float]:
        """Bandwidth of every link (bytes/ns), by link id."""
        return list(self._bw)

    def transfer_ns(self, src: int, dst: int, size_bytes: int) -> int:
        """Duration of one flow alone in the network."""
        lat, bw, _ = self._alpha_beta(src, dst)
        if bw == 0.0:
            return 0
        return to_ns(lat + size_bytes / bw, self.rounding)

    def transfer_time_ns(self, src: np.ndarray, dst: np.ndarray, size_bytes: np.ndarray) -> np.ndarray:
        """Durations of a batch of transfers that start together, alone in the network."""
        paths = [self._alpha_beta(a, b) for a, b in zip(src.tolist(), dst.tolist())]
        sizes = size_bytes.tolist()
        load: dict[int, float] = {}
        for (_, _, ports), s in zip(paths, sizes):
            for p in ports:
                load[p] = load.get(p, 0.0) + s
        bwl, r = self._bw, self.rounding
        out = []
        for (lat, bw, ports), s in zip(paths, sizes):
            if bw == 0.0:
                out.append(0)
                continue
            x = s / bw
            for p in ports:
                y = load[p] / bwl[p]
                if y > x:
                    x = y
            out.append(to_ns(lat + x, r))
        return np.asarray(out, np.int64)

    def _book(self, src: int, dst: int, size_bytes: int, now_ns: int) -> int:
        lat, bw, ports = self._alpha_beta(src, dst)
        if bw == 0.0:
            return now_ns
        x = size_bytes / bw
        booked, bwl, r = self._booked, self._bw, self.rounding
        for p in ports:
            y = max(booked.get(p, 0) - now_ns, 0) + size_bytes / bwl[p]
            booked[p] = now_ns + to_ns(y, r)  # whole ns: a flow started at a completion finds no residue
            if y > x:
                x = y
        return now_ns + to_ns(lat + x, self.rounding)

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self._check_start(flow, now_ns)
        self._active.add(flow.flow_id)
        self.flows_started += 1
        self._done.push(self._book(flow.src, flow.dst, flow.size_bytes, now_ns), flow.flow_id)

    def next_completion_ns(self, horizon_ns: int | None = None) -> int | None:
        return self._done.next_ns()

    def advance(self, now_ns: int) -> list[int]:
        self._check_advance(now_ns)
        self._now_ns = now_ns
        out = self._done.pop_until(now_ns)
        self._active.difference_update(out)
        return out

    def close(self) -> None:
        """Nothing to release."""
