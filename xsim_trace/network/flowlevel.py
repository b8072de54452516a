"""``flow``: flow-level max-min fair sharing over the topology.

Active flows share every directed link's bandwidth max-min fairly (progressive filling /
water-filling: the link with the smallest fair share fixes the rate of its flows, which are
removed with their bandwidth, repeat).  Rates change only when a flow starts or stops
transmitting, and only inside the connected component of flows (linked by shared links) that the
change touches; other flows keep their rate.  A flow transmits its bytes at its rate, stops using
bandwidth when done (transmission end rounded up to an integer ns), and completes
``ceil(sum of its links' latency_ns)`` later (latency added once, not per hop).  Empty routes
(src == dst) complete at once; zero-byte flows after the path latency.

Transmission ends are internal events; completions are found by
:class:`~xsim_trace.network.speculate.SpeculativeBackend` (with a horizon: run for good; without:
speculatively with a journal of what changed, kept if ``advance`` reaches that completion, else
rolled back).
"""

from __future__ import annotations

import heapq
import math
from itertools import chain
from typing import Any, ClassVar

import numpy as np

from xsim_trace.network.protocol import BackendCapabilities, Flow
from xsim_trace.network.speculate import SpeculativeBackend

_TX_END = 1
_DONE = 0  # completions sort first at equal times: answered without speculation
_NUMPY_MIN = 24  # components at least this large are water-filled with numpy


class _F:
    __slots__ = ("fid", "seq", "links", "lat_ns", "rem", "rate", "t_upd", "te", "ver", "phase")

    def __init__(self, fid: int, seq: int, links: tuple[int, ...], lat_ns: int, size: float, now: int) -> None:
        self.fid = fid
        self.seq = seq
        self.links = links
        self.lat_ns = lat_ns
        self.rem = size
        self.rate = 0.0
        self.t_upd = now
        self.te = -1
        self.ver = 0
        self.phase = 0  # 0 transmitting, 1 in flight (latency), 2 done

    def state(self) -> tuple:
        return (self.rem, self.rate, self.t_upd, self.te, self.ver, self.phase)

    def restore(self, s: tuple) -> None:
        self.rem, self.rate, self.t_upd, self.te, self.ver, self.phase = s


def _ceil_ns(x: float) -> int:
    return int(math.ceil(x - 1e-9 * abs(x)))


class FlowLevelBackend(SpeculativeBackend):
    name: ClassVar[str] = "flow"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(horizon_hint=True, endpoint_sharing=True,
                                                                      lone_flow_timing=True)

    def __init__(self, topology: Any) -> None:
        self.topology = topology
        self._bw = [float(x) for x in topology.bw_Bpns]
        self._bw_np = np.asarray(topology.bw_Bpns, dtype=np.float64)
        self._lat = [float(x) for x in topology.latency]
        self._now_ns = 0
        self._promised_ns = 0
        self._active: set[int] = set()
        self._on_link: dict[int, dict[_F, None]] = {}
        self._heap: list[tuple[int, int, int, _F, int]] = []
        self._seq = 0
        self._vseq = 0  # versions are globally unique, so entries pushed and rolled back stay stale
        self._popped: list[tuple] | None = None  # heap entries popped while speculating
        self._fseq = 0
        self._t = 0  # time up to which internal events are processed
        self._dirty: set[int] = set()  # links whose component needs new rates at time self._t
        self._finished: list[tuple[int, int]] = []
        # speculation journal (None when not speculating)
        self._journal: dict[_F, tuple] | None = None
        self._removed: list[_F] = []
        self._spec = None
        self._saved: tuple[int, set[int]] | None = None
        self._paths: dict[tuple[int, int], tuple[tuple[int, ...], int]] = {}
        self.flows_started = 0
        self.recomputes = 0
        self.rate_updates = 0

    # ---- state changes (journaled while speculating) --------------------------------------------
    def _touch(self, f: _F) -> None:
        j = self._journal
        if j is not None and f not in j:
            j[f] = f.state()

    def _bump(self, f: _F) -> None:
        self._vseq += 1
        f.ver = self._vseq

    def _pop(self) -> tuple:
        e = heapq.heappop(self._heap)
        if self._popped is not None:
            self._popped.append(e)
        return e

    def _push(self, t: int, kind: int, f: _F) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, f, f.ver))

    # ---- max-min --------------------------------------------------------------------------------
    def _component(self, seeds: set[int]) -> list[_F]:
        seen_l = set(seeds)
        stack = list(seeds)
        flows: dict[_F, None] = {}
        on = self._on_link
        while stack:
            l = stack.pop()
            for f in on.get(l, ()):
                if f not in flows:
                    flows[f] = None
                    for l2 in f.links:
                        if l2 not in seen_l:
                            seen_l.add(l2)
                            stack.append(l2)
        return sorted(flows, key=lambda f: f.seq)

    def _rates(self, comp: list[_F]) -> list[float]:
        if len(comp) == 1:
            bw = self._bw
            return [min(bw[l] for l in comp[0].links)]
        if len(comp) < _NUMPY_MIN:
            return self._rates_py(comp)
        return self._rates_np(comp)

    def _rates_py(self, comp: list[_F]) -> list[float]:
        bw = self._bw
        cap: dict[int, float] = {}
        cnt: dict[int, int] = {}
        users: dict[int, list[int]] = {}
        for i, f in enumerate(comp):
            for l in f.links:
                if l not in cap:
                    cap[l] = bw[l]
                    cnt[l] = 0
                    users[l] = []
                cnt[l] += 1
                users[l].append(i)
        rate = [0.0] * len(comp)
        frozen = [False] * len(comp)
        left = len(comp)
        while left:
            s = min(cap[l] / c for l, c in cnt.items() if c > 0)
            lim = s * (1 + 1e-12)
            bott = [l for l, c in cnt.items() if c > 0 and cap[l] / c <= lim]
            for l in bott:
                for i in users[l]:
                    if not frozen[i]:
                        frozen[i] = True
                        rate[i] = s
                        left -= 1
                        for l2 in comp[i].links:
                            cap[l2] -= s
                            cnt[l2] -= 1
        return rate

    def _rates_np(self, comp: list[_F]) -> list[float]:
        """Parallel water-filling: every link whose fair share is no larger than the smallest share
        seen by any of its flows is a true bottleneck; all of them are frozen in one pass (the
        sequential progressive filling gives the same rates, in as many passes as rate levels)."""
        routes = [f.links for f in comp]
        lens = np.fromiter(map(len, routes), dtype=np.int64, count=len(comp))
        pl_glob = np.fromiter(chain.from_iterable(routes), dtype=np.int64, count=int(lens.sum()))
        k = len(comp)
        pf = np.repeat(np.arange(k), lens)
        starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
        links, pl = np.unique(pl_glob, return_inverse=True)
        m = len(links)
        by_link = np.argsort(pl, kind="stable")  # pairs grouped by link, for per-link minima
        pf_l = pf[by_link]
        lstarts = np.searchsorted(pl[by_link], np.arange(m))
        cap = self._bw_np[links].copy()
        cnt = np.bincount(pl, minlength=m).astype(np.float64)
        rate = np.zeros(k)
        frozen = np.zeros(k, dtype=bool)
        while True:
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(cnt > 0, cap / cnt, np.inf)
            fmin = np.minimum.reduceat(share[pl], starts)
            fmin[frozen] = np.inf
            lmin = np.minimum.reduceat(fmin[pf_l], lstarts)
            bott = (cnt > 0) & (share <= lmin * (1 + 1e-12))
            newf = ~frozen & (np.maximum.reduceat(bott[pl].astype(np.int8), starts) > 0)
            if not newf.any():  # cannot happen with positive capacities; guard against a stall
                newf = ~frozen
            rate[newf] = fmin[newf]
            frozen |= newf
            gone = newf[pf]
            cap -= np.bincount(pl[gone], weights=rate[pf[gone]], minlength=m)
            cnt -= np.bincount(pl[gone], minlength=m)
            if frozen.all():
                return rate.tolist()

    def _flush(self) -> None:
        """Give new rates, at time ``self._t``, to the flows of the dirty components."""
        if not self._dirty:
            return
        t = self._t
        comp = self._component(self._dirty)
        self._dirty = set()
        if not comp:
            return
        self.recomputes += 1
        # a flow whose rate stays keeps its (rem, t_upd, te): its bytes left are linear in time
        for f, r in zip(comp, self._rates(comp)):
            if r != f.rate or f.te < 0:
                self._touch(f)
                self.rate_updates += 1
                if f.t_upd != t:  # bytes sent at the old rate
                    f.rem -= f.rate * (t - f.t_upd)
                    f.t_upd = t
                f.rate = r
                rem = f.rem if f.rem > 0 else 0.0
                f.te = t + _ceil_ns(rem / r)
                self._bump(f)
                self._push(f.te, _TX_END, f)

    # ---- event loop -----------------------------------------------------------------------------
    def _top(self) -> tuple | None:
        h = self._heap
        while h:
            e = h[0]
            if e[4] != e[3].ver:
                self._pop()
                continue
            return e
        return None

    def _run(self, limit: int, stop_at_done: bool) -> int | None:
        """Process events with time <= limit (all of them, or until a completion is on top)."""
        while True:
            e = self._top()
            if e is None:
                return None
            t = e[0]
            if e[1] == _DONE and stop_at_done:
                return t
            if t > limit:
                return t if e[1] == _DONE else None
            if t > self._t:
                self._flush()
                self._t = t
            self._pop()
            f = e[3]
            if e[1] == _DONE:
                self._touch(f)
                f.phase = 2
                self._bump(f)
                self._finished.append((t, f.fid))
                continue
            # transmission end: leave the links, complete after the path latency
            self._touch(f)
            f.phase = 1
            f.rem = 0.0
            f.rate = 0.0
            f.t_upd = t
            self._bump(f)
            for l in f.links:
                d = self._on_link[l]
                del d[f]
                self._dirty.add(l)
            if self._journal is not None:
                self._removed.append(f)
            self._push(t + f.lat_ns, _DONE, f)
            if self._top() is None or self._heap[0][0] > t:
                self._flush()

    # ---- journal (SpeculativeBackend hooks) -----------------------------------------------------
    def _journal_begin(self) -> None:
        self._saved = (self._t, set(self._dirty))
        self._journal = {}
        self._removed = []
        self._popped = []

    def _journal_rollback(self) -> None:
        for f in self._removed:
            for l in f.links:
                self._on_link.setdefault(l, {})[f] = None
        for f, st in self._journal.items():
            f.restore(st)
        for e in self._popped:  # what speculation pushed is stale now (its versions are gone)
            heapq.heappush(self._heap, e)
        self._t, self._dirty = self._saved
        self._journal_commit()

    def _journal_commit(self) -> None:
        self._journal = None
        self._removed = []
        self._popped = None
        self._saved = None

    def _next_done_ns(self) -> int | None:
        self._flush()
        e = self._top()
        return e[0] if e is not None and e[1] == _DONE else None

    # ---- protocol -------------------------------------------------------------------------------
    def _compact(self) -> None:
        """Drop stale heap entries once they outnumber the live ones (not while speculating)."""
        h = self._heap
        if len(h) > 64 and len(h) > 4 * (len(self._active) + 1):
            self._heap = [e for e in h if e[4] == e[3].ver]
            heapq.heapify(self._heap)

    def advance(self, now_ns: int) -> list[int]:
        self._check_advance(now_ns)
        self._settle(now_ns)
        self._compact()
        return super().advance(now_ns)

    def lone_flow_ns(self, src: int, dst: int, size_bytes: int) -> float:
        """A flow alone: its bytes at the bottleneck (rounded up), then its path latency (rounded up)."""
        links = tuple(self.topology.route(src, dst))
        if not links:
            return 0.0
        tx = _ceil_ns(size_bytes / min(self._bw[l] for l in links)) if size_bytes else 0
        return float(tx + _ceil_ns(sum(self._lat[l] for l in links)))

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self._start_checks(flow, now_ns)
        self._compact()
        self._run(now_ns, False)
        if now_ns > self._t:
            self._flush()
            self._t = now_ns
        key = (flow.src, flow.dst)
        hit = self._paths.get(key)
        if hit is None:
            links = self.topology.route(flow.src, flow.dst)
            hit = self._paths[key] = (links, _ceil_ns(sum(self._lat[l] for l in links)))
        links, lat = hit
        self._fseq += 1
        f = _F(flow.flow_id, self._fseq, links, lat, float(flow.size_bytes), now_ns)
        self._active.add(flow.flow_id)
        self.flows_started += 1
        if not links:
            f.phase = 1
            self._push(now_ns, _DONE, f)
        elif flow.size_bytes == 0:
            f.phase = 1
            self._push(now_ns + lat, _DONE, f)
        else:
            for l in links:
                self._on_link.setdefault(l, {})[f] = None
                self._dirty.add(l)
