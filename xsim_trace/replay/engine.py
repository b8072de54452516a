"""The event-driven replay engine: integer nanoseconds, one heap, deterministic.

Every rank has resources (its CPU thread, compute and comm streams); a node starts when all its
deps are done and its resource is free, in the order nodes became ready.  Sends and receives
rendezvous on (src, dst, tag); collectives start when their last member is ready and expand into
per-chunk flows by algorithm (see :mod:`xsim_trace.replay.algorithms`).  Flows go to a
:class:`~xsim_trace.network.protocol.NetworkBackend`; the engine owns the clock.

When the backend declares ``capabilities.closed_form`` (a
:class:`~xsim_trace.network.protocol.TransferPricing`: ``transfer_time_ns`` prices a step's
transfers together), a collective's member finish times are computed in closed form when it starts
(identical to feeding its flows one by one on a contention-free backend); otherwise every transfer
is a flow.  A backend declaring ``horizon_hint`` is told the engine's next event on every turn.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from xsim_trace.errors import BackendError, GraphError
from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.network.protocol import Flow, capabilities_of
from xsim_trace.replay.algorithms import Schedule, build_schedule
from xsim_trace.replay.compile import K_COLL, K_RECV, K_SEND, K_TIMED, CompiledWorkload
from xsim_trace.replay.settings import ReplaySettings

log = logging.getLogger(__name__)

EV_DONE, EV_STEP, EV_ISSUE, EV_P2P = 0, 1, 2, 3
CB_COLL, CB_P2P, CB_EAGER = 0, 1, 2
#: the horizon passed to a hinting backend when the engine has no pending event of its own
NO_HORIZON_NS = 1 << 62


def _flow_factory() -> Callable[[int, int, int, int], Flow]:
    """``Flow(flow_id, src, dst, size_bytes)``, built by filling its slots directly when Flow is the
    plain frozen slots dataclass of those four fields (its generated ``__init__`` makes four
    ``object.__setattr__`` calls: 0.57 vs 0.34 us here, ~4 % of a flow on analytical-ca); the
    result is an ordinary, equal Flow.  Anything else about Flow: its own constructor."""
    names = ("flow_id", "src", "dst", "size_bytes")
    slots = getattr(Flow, "__slots__", ())
    if tuple(slots) != names or hasattr(Flow, "__post_init__") or Flow.__new__ is not object.__new__:
        return Flow
    try:
        setters = [Flow.__dict__[k].__set__ for k in names]
    except (KeyError, AttributeError):
        return Flow
    set_id, set_src, set_dst, set_size = setters
    new = object.__new__

    def make(flow_id: int, src: int, dst: int, size_bytes: int) -> Flow:
        f = new(Flow)
        set_id(f, flow_id)
        set_src(f, src)
        set_dst(f, dst)
        set_size(f, size_bytes)
        return f

    return make


make_flow = _flow_factory()


@dataclass(frozen=True, slots=True)
class EngineStats:
    events: int
    flows: int
    collectives: int
    closed_form_collectives: int


@dataclass(frozen=True, slots=True)
class RawTimes:
    """Per-node times of one replay (global node index), ns."""

    ready_ns: np.ndarray  # deps done
    start_ns: np.ndarray  # resource acquired
    end_ns: np.ndarray
    wait_ns: np.ndarray  # collective: its start - this member's start (straggler wait); send/recv: time waiting for the peer
    peer_node: np.ndarray  # send/recv: global index of the node it was matched with, else -1
    stats: EngineStats


class _Plan:
    """One chunk schedule, indexed for the flow path."""

    __slots__ = ("schedule", "sends", "need", "prog", "reduce", "nsteps")

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.nsteps = len(schedule.steps)
        self.sends: list[dict[int, list[tuple[int, int]]]] = []
        self.need: list[dict[int, int]] = []
        self.reduce: list[bool] = []
        # per step: position -> (its sends or None, receives it needs), one lookup in the hot loop
        self.prog: list[dict[int, tuple[list | None, int]]] = []
        shared: dict[bytes, tuple[dict, dict, dict]] = {}  # identical steps (all of a ring's) share their tables
        for step in schedule.steps:
            key = step.src.tobytes() + b"|" + step.dst.tobytes() + b"|" + step.size_bytes.tobytes()
            tables = shared.get(key)
            if tables is None:
                sends: dict[int, list[tuple[int, int]]] = {}
                need: dict[int, int] = {}
                for s, d, b in zip(step.src.tolist(), step.dst.tolist(), step.size_bytes.tolist()):
                    sends.setdefault(s, []).append((d, b))
                    need[d] = need.get(d, 0) + 1
                prog = {p: (sends.get(p), need.get(p, 0)) for p in sorted(set(sends) | set(need))}
                tables = shared[key] = (sends, need, prog)
            self.sends.append(tables[0])
            self.need.append(tables[1])
            self.prog.append(tables[2])
            self.reduce.append(step.reduce)


class _CollRun:
    __slots__ = ("inst", "members", "plans", "k", "arrived", "waiting", "pend", "over", "done", "fin")

    def __init__(self, inst, members, plans) -> None:
        self.inst = inst
        self.members = members
        self.plans = plans
        self.k = len(plans)
        # (chunk, step, position) -> [receives arrived, latest effective arrival time]
        self.arrived: dict[tuple[int, int, int], list[int]] = {}
        # per chunk, per position: the step whose receives it waits for, else -1
        self.waiting = [[-1] * len(members) for _ in range(len(plans))]
        # per chunk, per position: sends not yet delivered; whether its steps are all through
        self.pend = [[0] * len(members) for _ in range(len(plans))]
        self.over = [[False] * len(members) for _ in range(len(plans))]
        self.done = [0] * len(members)
        self.fin = [0] * len(members)


def is_contention_free(backend) -> bool:
    """True if ``backend`` declares ``closed_form``: collectives may be priced in closed form."""
    return capabilities_of(backend).closed_form


def chunk_sizes(size_bytes: int, chunks: int) -> list[int]:
    base, extra = divmod(size_bytes, chunks)
    return [base + (1 if c < extra else 0) for c in range(chunks)]


def _latest_sends(steps, times: list[np.ndarray], n: int) -> list[tuple | None]:
    """Per step, the sends that can be their member's latest delivery of a chunk, else None.

    A member's ready time never decreases from step to step, so a send is dominated by any later
    send of the same member that takes at least as long; only the others need tracking (in a ring
    only each member's last send: its steps all go to one neighbour with one size).  Entries:
    (index into the step's transfers or None for all, their source positions, sources unique)."""
    out: list[tuple | None] = [None] * len(steps)
    later = np.full(n, -1, np.int64)  # longest transfer time of a member's later sends
    for i in range(len(steps) - 1, -1, -1):
        src, t = steps[i].src, np.asarray(times[i], np.int64)
        keep = t > later[src]
        if keep.any():
            sel = None if keep.all() else np.flatnonzero(keep)
            srcs = src if sel is None else src[sel]
            out[i] = (sel, srcs, len(np.unique(srcs)) == len(srcs))
        np.maximum.at(later, src, t)
    return out


class Engine:
    def __init__(
        self,
        workload: CompiledWorkload,
        backend,
        settings: ReplaySettings | None = None,
        *,
        node_of: Sequence[int] | None = None,
        closed_form: bool | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.w = workload
        self.backend = backend
        self.settings = settings or ReplaySettings()
        self.node_of = list(node_of) if node_of is not None else None
        ok = is_contention_free(backend)
        self.closed_form = ok if closed_form is None else (closed_form and ok)
        self.progress = progress
        self._sched_cache: dict[tuple, list] = {}
        self._times_memo: dict[bytes, np.ndarray] = {}

    # -- schedules ------------------------------------------------------------------------------
    def _schedule(self, inst, chunk_bytes: int, want_plan: bool):
        gid = inst.group
        algo = self.settings.algorithm_for(inst.comm_type)
        key = (gid, algo, inst.comm_type, chunk_bytes, inst.root, inst.ring)
        hit = self._sched_cache.get(key)
        if hit is None:
            members = self.w.groups[gid]
            node_of = [self.node_of[r] for r in members] if self.node_of is not None else None
            sched = build_schedule(algo, inst.comm_type, len(members), chunk_bytes, root=inst.root, node_of=node_of, order=inst.ring)
            hit = [sched, None, None]
            self._sched_cache[key] = hit
        if want_plan and hit[1] is None:
            hit[1] = _Plan(hit[0])
        return hit

    def _transfer_times(self, src: np.ndarray, dst: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Uncontended transfer time of each (src, dst, size), memoised on the whole step (the
        steps of a ring are all alike, so a 2(n-1)-step ring asks the backend once)."""
        key = src.tobytes() + b"|" + dst.tobytes() + b"|" + size.tobytes()
        hit = self._times_memo.get(key)
        if hit is not None:
            return hit
        out = np.asarray(self.backend.transfer_time_ns(src, dst, size), np.int64)
        self._times_memo[key] = out
        return out

    def _step_times(self, hit, members_arr: np.ndarray) -> list[np.ndarray]:
        if hit[2] is None:
            hit[2] = [self._transfer_times(members_arr[st.src], members_arr[st.dst], st.size_bytes) for st in hit[0].steps]
        return hit[2]

    # -- the replay -------------------------------------------------------------------------------
    def run(self) -> RawTimes:
        w = self.w
        st = self.settings
        backend = self.backend
        n = w.num_nodes
        delay = st.endpoint_delay_ns
        red_delay = st.reduction_delay_ns
        in_flight = st.in_flight
        nchunks = st.chunks

        kind = w.exec_kind.tolist()
        dur = w.duration_ns.tolist()
        res_of = w.resource.tolist()
        indeg = w.indegree.astype(np.int64).tolist()
        sptr = w.succ_ptr.tolist()
        sidx = w.succ_idx.tolist()
        rank_of = w.node_rank.tolist()
        peer = w.comm_peer.tolist()
        tag = w.comm_tag.tolist()
        csize = w.comm_size.tolist()
        inst_of = w.coll_instance.tolist()
        instances = w.instances

        ready_t = [-1] * n
        start_t = [-1] * n
        end_t = [-1] * n
        wait_t = [0] * n
        peer_of = [-1] * n
        busy = [False] * w.num_resources
        queues = [deque() for _ in range(w.num_resources)]

        heap: list = []
        push = heapq.heappush
        pop = heapq.heappop
        seq = 0

        flow_cb: dict[int, tuple] = {}  # p2p flows: flow id -> callback
        coll_cb: dict[int, tuple] = {}  # collective flows: flow id -> (run, chunk, step, dst pos, src pos)
        next_fid = 0
        n_flows = 0
        net_dirty = False
        t_net = None

        arrived_count = [0] * len(instances)
        send_wait: dict[tuple[int, int, int], deque] = {}
        recv_wait: dict[tuple[int, int, int], deque] = {}
        n_closed = 0
        n_colls = 0
        offsets_memo: dict[tuple, list[int]] = {}
        closed = self.closed_form
        events = 0

        backend_start = backend.start_flow

        def start_flow(src: int, dst: int, size: int, now: int, cb: tuple) -> None:
            nonlocal next_fid, n_flows, net_dirty
            fid = next_fid
            next_fid += 1
            n_flows += 1
            flow_cb[fid] = cb
            backend.start_flow(make_flow(fid, src, dst, size), now)
            net_dirty = True

        def node_start(i: int, now: int) -> None:
            nonlocal seq
            start_t[i] = now
            k = kind[i]
            if k == K_TIMED:
                seq += 1
                push(heap, (now + dur[i], seq, EV_DONE, i))
            elif k == K_COLL:
                coll_arrive(i, now)
            else:
                p2p_arrive(i, now, k)

        def make_ready(i: int, now: int) -> None:
            ready_t[i] = now
            r = res_of[i]
            if busy[r]:
                queues[r].append(i)
            else:
                busy[r] = True
                node_start(i, now)

        def done_at(i: int, t: int) -> None:
            nonlocal seq
            seq += 1
            push(heap, (t, seq, EV_DONE, i))

        eager = st.p2p == "eager"
        landed: dict[tuple[int, int, int], deque] = {}  # eager data that arrived before its recv

        # -- point to point ------------------------------------------------------------------
        def p2p_arrive(i: int, now: int, k: int) -> None:
            nonlocal seq
            if eager:
                if k == K_SEND:
                    src, dst = rank_of[i], peer[i]
                    key = (src, dst, tag[i])
                    if src == dst:
                        done_at(i, now + delay)
                        eager_landed(key, now + delay, now + delay, i)
                    elif delay:
                        seq += 1
                        push(heap, (now + delay, seq, EV_P2P, (i, key, src, dst, max(csize[i], 1))))
                    else:
                        start_flow(src, dst, max(csize[i], 1), now, (CB_EAGER, i, key, now))
                else:
                    key = (peer[i], rank_of[i], tag[i])
                    q = landed.get(key)
                    if q:
                        si = q.popleft()
                        peer_of[i], peer_of[si] = si, i
                        done_at(i, now)
                    else:
                        recv_wait.setdefault(key, deque()).append(i)
                return
            if k == K_SEND:
                key = (rank_of[i], peer[i], tag[i])
                q = recv_wait.get(key)
                if q:
                    p2p_begin(i, q.popleft(), now)
                else:
                    send_wait.setdefault(key, deque()).append(i)
            else:
                key = (peer[i], rank_of[i], tag[i])
                q = send_wait.get(key)
                if q:
                    p2p_begin(q.popleft(), i, now)
                else:
                    recv_wait.setdefault(key, deque()).append(i)

        def p2p_begin(si: int, ri: int, now: int) -> None:
            nonlocal seq
            wait_t[si] = now - start_t[si]
            peer_of[si], peer_of[ri] = ri, si
            wait_t[ri] = now - start_t[ri]
            src, dst = rank_of[si], rank_of[ri]
            size = max(csize[si], csize[ri], 1)
            if src == dst:
                done_at(si, now + delay)
                done_at(ri, now + delay)
            elif delay:
                seq += 1
                push(heap, (now + delay, seq, EV_P2P, (si, ri, src, dst, size)))
            else:
                start_flow(src, dst, size, now, (CB_P2P, si, ri))

        def eager_landed(key, now: int, sent_at: int, si: int) -> None:
            q = recv_wait.get(key)
            if q:
                j = q.popleft()
                peer_of[j], peer_of[si] = si, j
                if sent_at > start_t[j]:  # the receive waited for its peer to send
                    wait_t[j] = sent_at - start_t[j]
                done_at(j, now)
            else:
                landed.setdefault(key, deque()).append(si)

        # -- collectives -----------------------------------------------------------------------
        def coll_arrive(i: int, now: int) -> None:
            x = inst_of[i]
            arrived_count[x] += 1
            inst = instances[x]
            if arrived_count[x] == len(inst.nodes):
                coll_begin(inst, now)

        def coll_begin(inst, now: int) -> None:
            nonlocal n_closed, n_colls, seq
            n_colls += 1
            for g in inst.nodes:
                wait_t[g] = now - start_t[g]
            members = w.groups[inst.group]
            if len(members) <= 1 or (inst.size_bytes == 0 and inst.comm_type != CollectiveType.BARRIER):
                for g in inst.nodes:
                    done_at(g, now)
                return
            if closed:
                n_closed += 1
                # every member starts at `now`, so the finish times are `now` + offsets that only
                # depend on the group, the type (hence the algorithm) and the size
                key = (inst.group, inst.comm_type, inst.size_bytes, inst.root, inst.ring)
                offsets = offsets_memo.get(key)
                if offsets is None:
                    sizes = chunk_sizes(max(inst.size_bytes, 1), nchunks)
                    offsets = offsets_memo[key] = self._closed_form(inst, members, sizes, 0).tolist()
                for g, off in zip(inst.nodes, offsets):
                    seq += 1
                    push(heap, (now + off, seq, EV_DONE, g))
                return
            sizes = chunk_sizes(max(inst.size_bytes, 1), nchunks)
            plans = [self._schedule(inst, cb, True)[1] for cb in sizes]
            run = _CollRun(inst, members, plans)
            for c in range(min(in_flight, run.k)):
                for p in range(len(members)):
                    enter_step(run, c, p, 0, now)

        def enter_step(run: _CollRun, c: int, p: int, s: int, now: int) -> None:
            nonlocal seq, next_fid, n_flows, net_dirty
            plan = run.plans[c]
            prog, nsteps = plan.prog, plan.nsteps
            arrived = run.arrived
            while s < nsteps:
                ent = prog[s].get(p)
                if ent is None:
                    s += 1
                    continue
                sends, need = ent
                if sends:
                    run.pend[c][p] += len(sends)
                    if delay:
                        seq += 1
                        push(heap, (now + delay, seq, EV_ISSUE, (run, c, s, p, sends)))
                    else:  # issue(run, c, s, p, sends, now), inlined: one call per flow less
                        members = run.members
                        src = members[p]
                        fid = next_fid
                        for q, size in sends:
                            coll_cb[fid] = (run, c, s, q, p)
                            backend_start(make_flow(fid, src, members[q], size), now)
                            fid += 1
                        next_fid = fid
                        n_flows += len(sends)
                        net_dirty = True
                if need:
                    rec = arrived.get((c, s, p)) if arrived else None
                    if rec is None or rec[0] < need:
                        run.waiting[c][p] = s
                        return
                    del arrived[(c, s, p)]
                    t_eff = rec[1]
                    if t_eff > now:
                        seq += 1
                        push(heap, (t_eff, seq, EV_STEP, (run, c, p, s + 1)))
                        return
                s += 1
            if run.pend[c][p]:  # a member's chunk ends once its own sends are delivered too
                run.over[c][p] = True
            else:
                chunk_done(run, c, p, now)

        def issue(run: _CollRun, c: int, s: int, p: int, sends, now: int) -> None:
            nonlocal next_fid, n_flows, net_dirty
            members = run.members
            src = members[p]
            fid = next_fid
            for q, size in sends:
                coll_cb[fid] = (run, c, s, q, p)
                backend_start(make_flow(fid, src, members[q], size), now)
                fid += 1
            next_fid = fid
            n_flows += len(sends)
            net_dirty = True

        def coll_flow_done(run: _CollRun, c: int, s: int, q: int, p: int, now: int) -> None:
            nonlocal seq
            pend = run.pend[c]
            left = pend[p] - 1
            pend[p] = left
            if not left and run.over[c][p]:
                run.over[c][p] = False
                chunk_done(run, c, p, now)
            plan = run.plans[c]
            eff = now + red_delay if red_delay and plan.reduce[s] else now
            wait_row = run.waiting[c]
            if wait_row[q] == s and plan.need[s][q] == 1:
                # the one receive of its step, and the receiver waits for it: no bookkeeping
                wait_row[q] = -1
                if eff > now:
                    seq += 1
                    push(heap, (eff, seq, EV_STEP, (run, c, q, s + 1)))
                else:
                    enter_step(run, c, q, s + 1, now)
                return
            key = (c, s, q)
            rec = run.arrived.get(key)
            if rec is None:
                rec = run.arrived[key] = [1, eff]
            else:
                rec[0] += 1
                if eff > rec[1]:
                    rec[1] = eff
            wait_row = run.waiting[c]
            if wait_row[q] == s and rec[0] == plan.need[s][q]:
                wait_row[q] = -1
                del run.arrived[key]
                eff = rec[1]
                if eff > now:
                    seq += 1
                    push(heap, (eff, seq, EV_STEP, (run, c, q, s + 1)))
                else:
                    enter_step(run, c, q, s + 1, now)

        def chunk_done(run: _CollRun, c: int, p: int, now: int) -> None:
            nonlocal seq
            t_fin = now + delay
            c2 = c + in_flight
            if c2 < run.k:
                if t_fin > now:
                    seq += 1
                    push(heap, (t_fin, seq, EV_STEP, (run, c2, p, 0)))
                else:
                    enter_step(run, c2, p, 0, now)
            run.done[p] += 1
            if t_fin > run.fin[p]:
                run.fin[p] = t_fin
            if run.done[p] == run.k:
                done_at(run.inst.nodes[p], run.fin[p])

        # -- seed ------------------------------------------------------------------------------
        for i in range(n):
            if indeg[i] == 0:
                make_ready(i, 0)

        finished = 0
        progress = self.progress
        report_every = 65536
        guard = 0
        # a backend that accepts the horizon hint (ns3) is told, on every turn, that no flow starts
        # before the engine's next event; its answer depends on that horizon, so it is not cached
        hint = capabilities_of(backend).horizon_hint
        while True:
            if flow_cb or coll_cb:
                if hint:
                    t_net = backend.next_completion_ns(horizon_ns=heap[0][0] if heap else NO_HORIZON_NS)
                elif net_dirty:
                    t_net = backend.next_completion_ns()
                    net_dirty = False
            else:
                t_net = None
            if heap and (t_net is None or heap[0][0] < t_net):
                now, _, et, payload = pop(heap)
                events += 1
                if et == EV_DONE:
                    # the hot path, inlined: finish, hand the resource on, wake successors
                    i = payload
                    end_t[i] = now
                    finished += 1
                    r = res_of[i]
                    q = queues[r]
                    if q:
                        node_start(q.popleft(), now)
                    else:
                        busy[r] = False
                    for kk in range(sptr[i], sptr[i + 1]):
                        s_ = sidx[kk]
                        d_ = indeg[s_] - 1
                        indeg[s_] = d_
                        if d_ == 0:
                            ready_t[s_] = now
                            r = res_of[s_]
                            if busy[r]:
                                queues[r].append(s_)
                            else:
                                busy[r] = True
                                if kind[s_] == K_TIMED:
                                    start_t[s_] = now
                                    seq += 1
                                    push(heap, (now + dur[s_], seq, EV_DONE, s_))
                                else:
                                    node_start(s_, now)
                    if progress is not None and finished % report_every == 0:
                        progress(report_every)
                elif et == EV_STEP:
                    run, c, p, s = payload
                    enter_step(run, c, p, s, now)
                elif et == EV_ISSUE:
                    run, c, s, p, sends = payload
                    issue(run, c, s, p, sends, now)
                elif eager:
                    si, key, src, dst, size = payload
                    start_flow(src, dst, size, now, (CB_EAGER, si, key, now))
                else:
                    si, ri, src, dst, size = payload
                    start_flow(src, dst, size, now, (CB_P2P, si, ri))
            elif t_net is not None:
                now = t_net
                done_ids = backend.advance(now)
                net_dirty = True
                if not done_ids:
                    guard += 1
                    if guard > 1_000_000:
                        raise BackendError("network backend makes no progress", field="backend")
                    continue
                guard = 0
                events += len(done_ids)
                for fid in done_ids:
                    cb = coll_cb.pop(fid, None)
                    if cb is not None:
                        coll_flow_done(cb[0], cb[1], cb[2], cb[3], cb[4], now)
                        continue
                    cb = flow_cb.pop(fid, None)
                    if cb is None:
                        raise BackendError(f"backend finished unknown flow {fid}", field="backend")
                    if cb[0] == CB_EAGER:
                        done_at(cb[1], now)
                        eager_landed(cb[2], now, cb[3], cb[1])
                    else:
                        done_at(cb[1], now)
                        done_at(cb[2], now)
            else:
                break

        if self.progress is not None:
            self.progress(finished % report_every)
        if finished != n:
            self._deadlock(end_t, start_t, ready_t)
        return RawTimes(
            ready_ns=np.asarray(ready_t, np.int64),
            start_ns=np.asarray(start_t, np.int64),
            end_ns=np.asarray(end_t, np.int64),
            wait_ns=np.asarray(wait_t, np.int64),
            peer_node=np.asarray(peer_of, np.int64),
            stats=EngineStats(events=events, flows=n_flows, collectives=n_colls, closed_form_collectives=n_closed),
        )

    def _closed_form(self, inst, members, sizes: list[int], now: int) -> np.ndarray:
        st = self.settings
        delay, red = st.endpoint_delay_ns, st.reduction_delay_ns
        m = np.asarray(members, np.int64)
        start0 = np.full(len(members), now, np.int64)
        chunk_fin: list[np.ndarray] = []
        memo: tuple | None = None
        for c, cb in enumerate(sizes):
            start = start0 if c < st.in_flight else chunk_fin[c - st.in_flight]
            if memo is not None and memo[0] == cb and np.array_equal(memo[1], start):
                chunk_fin.append(memo[2])
                continue
            hit = self._schedule(inst, cb, False)
            times = self._step_times(hit, m)
            ready = start.copy()
            sent = start.copy()  # when each member's last send of this chunk is delivered
            if len(hit) < 5:
                hit.append([st.dst_unique for st in hit[0].steps])
                hit.append(_latest_sends(hit[0].steps, times, len(members)))
            for step, t, u, last in zip(hit[0].steps, times, hit[3], hit[4]):
                arr = ready[step.src] + (delay + t)
                if last is not None:  # sends that may be their member's latest delivery
                    sel, srcs, srcs_unique = last
                    a = arr if sel is None else arr[sel]
                    if srcs_unique:
                        sent[srcs] = np.maximum(sent[srcs], a)
                    else:
                        np.maximum.at(sent, srcs, a)
                if step.reduce and red:
                    arr += red
                if u:
                    ready[step.dst] = np.maximum(ready[step.dst], arr)
                else:
                    np.maximum.at(ready, step.dst, arr)
            fin = np.maximum(ready, sent) + delay
            memo = (cb, start, fin)
            chunk_fin.append(fin)
        return np.max(np.stack(chunk_fin), axis=0)

    def _deadlock(self, end_t, start_t, ready_t) -> None:
        w = self.w
        for i in range(w.num_nodes):
            if end_t[i] < 0 and start_t[i] >= 0:
                k = int(w.exec_kind[i])
                if k == K_COLL:
                    why = "collective never completes: some member never reaches it"
                elif k in (K_SEND, K_RECV):
                    why = f"{'send' if k == K_SEND else 'recv'} never matched (peer {int(w.comm_peer[i])}, tag {int(w.comm_tag[i])})"
                else:
                    why = "node never finishes"
                raise GraphError(f"replay deadlocked: {why}", rank=int(w.node_rank[i]), node=int(w.node_id[i]))
        for i in range(w.num_nodes):
            if end_t[i] < 0:
                raise GraphError("replay deadlocked: node never became ready", rank=int(w.node_rank[i]), node=int(w.node_id[i]))
