"""``analytical-ca`` where no two flows ever hold a link at once: the closed-form replay, checked.

ASTRA-sim's congestion-aware link model (:mod:`xsim_trace.network.analytical_ca`: a busy flag and a
FIFO per directed link) changes a flow's timing only when the flow finds a link busy.  If no flow of
a replay ever does, every flow takes its lone-flow time, and the replay is the one over a
contention-free backend whose transfer times are those lone-flow times (:class:`LoneFlows`): every
collective priced whole by the schedule walk (as on ``analytical``), symmetry folding, the compiled
loop, no flow events.  :func:`replay_uncontended` runs that replay and then checks its premise on
what it produced:

- each collective shape (group, type, size, root, ring order) is walked once with each transfer's
  issue time: every hop of every flow holds its link for ``[start, start + serialisation)`` (at
  least 1 ns, so that a zero-length hold cannot slip in front of another at one instant); the walk
  books them in its order (chunk, step) and refuses a hold that starts before the link's previous
  hold has ended: the holds on each link are then disjoint and in time order;
- across the replay, each collective instance holds each of its links within
  ``[its start + first hold, its start + end of last hold)``, each send's flow its hops' holds from
  when its data leaves; on every link these windows must be disjoint (touching is fine: a flow
  that reaches a link the instant it is released transmits then, whichever event runs first);
- the replay's own event order decided no tie that the flow-by-flow engine (whose events are
  numbered differently) could decide otherwise (:func:`~xsim_trace.replay.fold.order_decided_tie`,
  run by the folded path on its representatives, here on every node otherwise).

When a check fails, None: the caller runs the replay flow by flow (the compiled ``analytical-ca``
loop or the reference engine), whose result is then the answer.  When they pass, the times are the
flow-by-flow replay's, node for node (``tests/test_replay_uncontended.py`` compares every node on
chains, rings of every collective, pipelines with p2p, and that contended sets are refused); the
counters differ (``closed_form_collectives``, no backend flow events).
"""

from __future__ import annotations

import logging
from typing import Callable, ClassVar

import numpy as np

from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.network._common import CompletionQueue
from xsim_trace.network.protocol import BackendCapabilities, Flow
from xsim_trace.replay.collective_pricing import ScheduleWalkPricer
from xsim_trace.replay.compile import K_SEND, K_TIMED, CompiledWorkload
from xsim_trace.replay.schedule_cache import CachedSchedule, ScheduleCache
from xsim_trace.replay.settings import ReplaySettings

log = logging.getLogger(__name__)


def applies(backend, w: CompiledWorkload) -> bool:
    """Whether to try: a fresh ``analytical-ca`` backend (no flow started yet), the one this shortcut
    reproduces, and a workload whose ranks each run all their communication on one resource.  Where
    a rank's transfers and collectives run on several streams at once they usually meet on its links
    (the generated training steps: 0.5 % slower with contention), and the try would cost a
    closed-form replay before the flow-by-flow one (a guess of cost only: the check decides)."""
    from xsim_trace.replay import compiled_ca  # noqa: PLC0415

    if not compiled_ca.applies(backend):
        return False
    comm = w.exec_kind != K_TIMED
    res = w.resource[comm].astype(np.int64)
    first = np.full(w.num_ranks, -1, np.int64)
    first[w.node_rank[comm]] = res  # some resource of each rank that communicates
    return bool(np.all(first[w.node_rank[comm]] == res))


class LoneFlows:
    """``analytical-ca``'s timing of each flow alone in the network, as a contention-free backend:
    exact for a replay in which no flow ever finds a link busy (which :func:`replay_uncontended`
    checks)."""

    name: ClassVar[str] = "analytical-ca"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(closed_form=True, contention_free=True)

    def __init__(self, backend) -> None:
        self.backend = backend
        self.topology = backend.topology
        self._hops: dict[tuple[int, int, int], tuple] = {}
        self._done = CompletionQueue()
        self.flows_started = 0

    def hops(self, src: int, dst: int, size_bytes: int) -> tuple:
        """(links, each hop's start after the flow's, each hop's serialisation, landing after the start)."""
        key = (src, dst, size_bytes)
        hit = self._hops.get(key)
        if hit is None:
            hit = self._hops[key] = self.backend.lone_flow_hops(src, dst, size_bytes)
        return hit

    def transfer_ns(self, src: int, dst: int, size_bytes: int) -> int:
        return self.hops(int(src), int(dst), int(size_bytes))[3]

    def transfer_time_ns(self, src: np.ndarray, dst: np.ndarray, size_bytes: np.ndarray) -> np.ndarray:
        """Each transfer alone (whether they overlap is what the replay's check finds out)."""
        return np.fromiter((self.hops(a, b, s)[3] for a, b, s in zip(src.tolist(), dst.tolist(), size_bytes.tolist())),
                           np.int64, len(src))

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self.flows_started += 1
        self._done.push(now_ns + self.transfer_ns(flow.src, flow.dst, flow.size_bytes), flow.flow_id)

    def next_completion_ns(self, horizon_ns: int | None = None) -> int | None:
        return self._done.next_ns()

    def advance(self, now_ns: int) -> list[int]:
        return self._done.pop_until(now_ns)

    def close(self) -> None:
        """Nothing to release."""


_AT_ONCE = "a collective's flows hold a link at once (or out of the walk's order)"


def _by_link(link: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """The holds ``[s, e)`` on ``link`` sorted by link then start, the mask of each that follows one on
    its link, and whether two on one link overlap (touching is fine)."""
    order = np.lexsort((s, link))
    link, s, e = link[order], s[order], e[order]
    same = link[1:] == link[:-1]
    return link, s, e, same, bool(np.any(s[1:][same] < e[:-1][same]))


def _hold(ser: np.ndarray) -> np.ndarray:
    """How long a hop holds its link, for the overlap checks: its serialisation, at least 1 ns."""
    return np.maximum(ser, 1)


class _Book:
    """Where one collective shape's flows hold links, relative to its start.  While its walk runs, per
    link the first hold's start and the last hold's end (-1: unused) in ``first`` / ``end`` (scratch
    arrays over all links, shared by the walk's books one after another); :meth:`close` keeps the
    links used and their two times, and resets the scratch.  ``why`` once two holds overlapped (or
    the walk met a link's holds out of time order)."""

    __slots__ = ("first", "end", "why", "links", "_tables", "_last", "_last_end")

    def __init__(self, first: np.ndarray, end: np.ndarray) -> None:
        self.first, self.end = first, end
        self.why: str | None = None
        self.links: np.ndarray | None = None  # after close: the links used, ascending
        self._tables: dict[int, tuple] = {}  # the step tables booked once (their links have a first hold)
        self._last: tuple | None = None  # the table of the step booked last, while its ends are kept
        self._last_end: np.ndarray | None = None  # ... here, in its hops' order, not yet in ``end``

    def hold(self, table: tuple, issue: np.ndarray) -> None:
        """Book one step's hops (``table``: see :meth:`BookingWalk._table`) issued at ``issue``."""
        owner, link, off, hold, unique, hops = table
        s = (issue[:, None] + off).ravel() if hops else issue[owner] + off
        if table is self._last:  # the same links as the step before (a ring's every step)
            if np.any(s < self._last_end):
                self.why = _AT_ONCE
            else:
                s += hold
                self._last_end = s
            return
        self._flush()
        if unique and id(table) in self._tables:
            if np.any(s < self.end[link]):
                self.why = _AT_ONCE
                return
            self._last, self._last_end = table, s + hold
            return
        self._tables[id(table)] = table
        self._hold(link, s, s + hold, unique)
        if unique and self.why is None:
            self._last, self._last_end = table, self.end[link]

    def _flush(self) -> None:
        if self._last is not None:
            self.end[self._last[1]] = self._last_end
            self._last = self._last_end = None

    def _hold(self, link: np.ndarray, s: np.ndarray, e: np.ndarray, unique: bool) -> None:
        if not unique:  # several hops of one step on a link: in time order, each after the one before
            link, s, e, same, overlap = _by_link(link, s, e)
            if overlap:
                self.why = "two transfers of one step of a collective share a link at once"
                return
            head = np.concatenate([[True], ~same])
            tail = np.concatenate([~same, [True]])
            if np.any(s[head] < self.end[link[head]]):
                self.why = _AT_ONCE
                return
            f = self.first[link[head]]
            self.first[link[head]] = np.where(f < 0, s[head], f)
            self.end[link[tail]] = e[tail]
            return
        if np.any(s < self.end[link]):
            self.why = _AT_ONCE
            return
        f = self.first[link]
        self.first[link] = np.where(f < 0, s, f)
        self.end[link] = e

    def close(self) -> None:
        """Keep the links used and their times; reset the scratch for the next shape."""
        self._flush()
        tables = list(self._tables.values())
        links = np.unique(np.concatenate([t[1] for t in tables])) if tables else np.zeros(0, np.int64)
        first, end = self.first[links], self.end[links]
        self.first[links] = -1
        self.end[links] = -1
        self.links, self.first, self.end = links, first, end
        self._tables = {}


class BookingWalk(ScheduleWalkPricer):
    """The schedule walk (:class:`ScheduleWalkPricer`) over :class:`LoneFlows`, booking where each
    shape's flows hold links (:class:`_Book`, one per memoised shape)."""

    def __init__(self, schedules: ScheduleCache, settings: ReplaySettings, view: LoneFlows) -> None:
        super().__init__(schedules, settings)
        self.view = view
        n_links = len(view.topology.links)
        self._scratch = (np.full(n_links, -1, np.int64), np.full(n_links, -1, np.int64))
        self.books: dict[tuple, _Book] = {}
        self._book: _Book | None = None
        self._members: np.ndarray | None = None
        self._tables: dict[bytes, tuple] = {}
        self._of_hit: dict[int, list] = {}  # per schedule (alive as long as the cache), per step: its table
        self.watch = self._watch

    def offsets_ns(self, inst, members):
        key = (inst.group, inst.comm_type, inst.size_bytes, inst.root, inst.ring)
        if key in self.books:  # walked already (the base class memoises on the same key)
            return super().offsets_ns(inst, members)
        self._book = self.books[key] = _Book(*self._scratch)
        self._members = np.asarray(members, np.int64)
        try:
            return super().offsets_ns(inst, members)
        finally:
            self._book.close()
            self._book = None

    def _watch(self, hit: CachedSchedule, k: int, issue: np.ndarray) -> None:
        book = self._book
        if book is None or book.why is not None:
            return
        per_step = self._of_hit.get(id(hit))
        if per_step is None:
            per_step = self._of_hit[id(hit)] = [None] * len(hit.schedule.steps)
        table = per_step[k]
        if table is None:
            table = per_step[k] = self._table(hit, k)
        book.hold(table, issue)

    def _table(self, hit: CachedSchedule, k: int) -> tuple:
        """Step ``k``'s hops: their transfer, link, start after the transfer's issue, hold; whether
        the step's links are all distinct (memoised on the step's transfers: a ring's steps share one)."""
        step = hit.schedule.steps[k]
        m = self._members
        src, dst = m[step.src], m[step.dst]
        key = src.tobytes() + b"|" + dst.tobytes() + b"|" + step.size_bytes.tobytes()
        hit_t = self._tables.get(key)
        if hit_t is None:
            owner, link, off, ser = [], [], [], []
            for i, (a, b, z) in enumerate(zip(src.tolist(), dst.tolist(), step.size_bytes.tolist())):
                links, starts, sers, _ = self.view.hops(a, b, z)
                owner.extend([i] * len(links))
                link.extend(links)
                off.extend(starts)
                ser.extend(sers)
            link_a, owner_a, off_a = np.asarray(link, np.int64), np.asarray(owner, np.int64), np.asarray(off, np.int64)
            m_t = len(step.src)
            hops = len(link) // m_t if m_t and len(link) % m_t == 0 else 0
            if hops and not np.array_equal(owner_a, np.repeat(np.arange(m_t), hops)):
                hops = 0
            hit_t = self._tables[key] = (owner_a, link_a, off_a.reshape(m_t, hops) if hops else off_a,
                                         _hold(np.asarray(ser, np.int64)), len(np.unique(link_a)) == len(link_a), hops)
        return hit_t


def _collective_windows(w: CompiledWorkload, walk: BookingWalk, start: np.ndarray, wait: np.ndarray):
    """(link, from, to) of every collective instance's hold on each of its links, or a reason."""
    by_shape: dict[tuple, list[int]] = {}
    for inst in w.instances:
        key = (inst.group, inst.comm_type, inst.size_bytes, inst.root, inst.ring)
        if key not in walk.books:
            if len(w.groups[inst.group]) > 1 and (inst.size_bytes > 0 or inst.comm_type == CollectiveType.BARRIER):
                return "a collective with flows was priced without the walk"  # e.g. by another pricer
            continue
        g = inst.nodes[0]
        by_shape.setdefault(key, []).append(int(start[g] + wait[g]))
    out = []
    for key, t0 in by_shape.items():
        book = walk.books[key]
        if book.why is not None:
            return book.why
        t = np.asarray(t0, np.int64)[:, None]
        out.append((np.broadcast_to(book.links, (len(t0), len(book.links))).ravel(), (t + book.first).ravel(),
                    (t + book.end).ravel()))
    return out


def _p2p_holds(w: CompiledWorkload, view: LoneFlows, settings: ReplaySettings, start: np.ndarray, peer: np.ndarray):
    """(link, from, to) of every hop of every send's flow (when its data leaves, as the engine starts it)."""
    sends = np.flatnonzero((w.exec_kind == K_SEND) & (peer >= 0))
    if not len(sends):
        return []
    src = w.node_rank[sends].astype(np.int64)
    dst = w.comm_peer[sends].astype(np.int64)
    size1 = np.maximum(w.comm_size, 1).astype(np.int64)
    if settings.p2p == "eager":
        at, size = start[sends], size1[sends]
    else:
        at, size = np.maximum(start[sends], start[peer[sends]]), np.maximum(size1[sends], size1[peer[sends]])
    at = at + settings.endpoint_delay_ns
    triples, inv = np.unique(np.stack([src, dst, size], 1), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    ptr, link, off, ser = [0], [], [], []
    for a, b, z in triples.tolist():
        links, starts, sers, _ = view.hops(a, b, z)
        link.extend(links)
        off.extend(starts)
        ser.extend(sers)
        ptr.append(len(link))
    ptr_a = np.asarray(ptr, np.int64)
    n_h = (ptr_a[1:] - ptr_a[:-1])[inv]
    owner = np.repeat(np.arange(len(sends)), n_h)
    first = np.repeat(ptr_a[inv] - np.concatenate([[0], np.cumsum(n_h)[:-1]]), n_h) + np.arange(int(n_h.sum()))
    link_a, off_a = np.asarray(link, np.int64)[first], np.asarray(off, np.int64)[first]
    s = at[owner] + off_a
    return [(link_a, s, s + _hold(np.asarray(ser, np.int64)[first]))]


def _overlap(parts: list[tuple]) -> bool:
    """Whether two of the (link, from, to) windows overlap on one link."""
    if not parts:
        return False
    return _by_link(*(np.concatenate([p[i] for p in parts]) for i in range(3)))[4]


def contention(w: CompiledWorkload, raw, walk: BookingWalk, view: LoneFlows, settings: ReplaySettings) -> str | None:
    """Why the closed-form replay ``raw`` over ``view`` may differ from ``analytical-ca``'s flow by
    flow (two flows that would have held a link at once, a tie decided by event order), or None."""
    parts = _collective_windows(w, walk, raw.start_ns, raw.wait_ns)
    if isinstance(parts, str):
        return parts
    parts += _p2p_holds(w, view, settings, raw.start_ns, raw.peer_node)
    if _overlap(parts):
        return "two flows would hold a link at once"
    if raw.rep_of is None:  # the folded run checked its representatives' ties itself
        from xsim_trace.replay.fold import Quotient, order_decided_tie  # noqa: PLC0415
        from xsim_trace.replay.p2p_keys import p2p_keys  # noqa: PLC0415

        every = np.arange(w.num_nodes, dtype=np.int64)
        return order_decided_tie(w, Quotient(every, every), raw.ready_ns, raw.start_ns, raw.end_ns, p2p_keys(w).key)
    return None


def replay_uncontended(w: CompiledWorkload, backend, settings: ReplaySettings, *, node_of=None, fold: bool = True,
                       rank_class=None, progress: Callable[[int], None] | None = None, compiled: bool | None = None):
    """The replay of ``w`` over the fresh ``analytical-ca`` ``backend`` priced in closed form (see the
    module docstring), or None where some flow would have found a link busy (then run it flow by flow).
    ``fold``, ``rank_class``, ``compiled``: as :class:`~xsim_trace.replay.engine.Engine`'s."""
    from xsim_trace.replay.engine import Engine  # noqa: PLC0415

    view = LoneFlows(backend)
    walk = BookingWalk(ScheduleCache(w, view, settings, node_of), settings, view)
    raw = Engine(w, view, settings, node_of=node_of, closed_form=True, pricer=walk, fold=fold,
                 rank_class=rank_class, compiled=compiled).run()
    why = contention(w, raw, walk, view, settings)
    if why is not None:
        log.debug("analytical-ca: running flow by flow (%s)", why)
        return None
    if progress is not None:
        progress(w.num_nodes)
    return raw
