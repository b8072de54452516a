"""Closed-form pricing of a whole collective: when every member has arrived (all at ``now``), the
finish time of each member is ``now + offset``, computed at once instead of flow by flow.

This is the one place the engine prices a whole collective.  It is exact for a contention-free
backend (nothing a collective does can be slowed by other flows), where it equals feeding the
collective's flows one by one.  A pricer is any object with ``offsets_ns(inst, members)``
(:class:`CollectivePricer`); :class:`ScheduleWalkPricer` walks the chunk schedule of the
configured algorithm with the backend's uncontended transfer times.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np

from xsim_trace.network.protocol import capabilities_of
from xsim_trace.replay.compile import CollectiveInstance
from xsim_trace.replay.distinct import all_distinct
from xsim_trace.replay.schedule_cache import CachedSchedule, ScheduleCache
from xsim_trace.replay.settings import ReplaySettings

class CollectivePricer(Protocol):
    def offsets_ns(self, inst: CollectiveInstance, members: Sequence[int]) -> Sequence[int]:
        """Finish time of each member (group member order) minus the common start time, ns."""


def is_contention_free(backend) -> bool:
    """True if ``backend`` declares ``closed_form``: collectives may be priced in closed form."""
    return capabilities_of(backend).closed_form


def chunk_sizes(size_bytes: int, chunks: int) -> list[int]:
    base, extra = divmod(size_bytes, chunks)
    return [base + (1 if c < extra else 0) for c in range(chunks)]


def latest_sends(steps, times: list[np.ndarray], n: int) -> list[tuple | None]:
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
            out[i] = (sel, srcs, all_distinct(srcs))
        np.maximum.at(later, src, t)
    return out


class ScheduleWalkPricer:
    """Offsets from the chunk schedule of the configured algorithm (chunks, in-flight limit,
    endpoint and reduction delays as on the flow path), memoised per (group, type, size, root, ring)."""

    def __init__(self, schedules: ScheduleCache, settings: ReplaySettings) -> None:
        self.schedules = schedules
        self.settings = settings
        self._memo: dict[tuple, list[int]] = {}
        #: called with (schedule, step index, each transfer's issue time) for every step walked, when
        #: set (:mod:`xsim_trace.replay.uncontended` books the links the flows hold); chunks that
        #: start alike are then walked each, not copied
        self.watch: Callable[[CachedSchedule, int, np.ndarray], None] | None = None

    def offsets_ns(self, inst: CollectiveInstance, members: Sequence[int]) -> list[int]:
        key = (inst.group, inst.comm_type, inst.size_bytes, inst.root, inst.ring)
        offsets = self._memo.get(key)
        if offsets is None:
            sizes = chunk_sizes(max(inst.size_bytes, 1), self.settings.chunks)
            offsets = self._memo[key] = self._finish(inst, members, sizes).tolist()
        return offsets

    def _finish(self, inst: CollectiveInstance, members: Sequence[int], sizes: list[int]) -> np.ndarray:
        in_flight = self.settings.in_flight
        m = np.asarray(members, np.int64)
        start0 = np.zeros(len(members), np.int64)
        chunk_fin: list[np.ndarray] = []
        memo: tuple | None = None
        for c, cb in enumerate(sizes):
            start = start0 if c < in_flight else chunk_fin[c - in_flight]
            if memo is not None and memo[0] == cb and np.array_equal(memo[1], start) and self.watch is None:
                chunk_fin.append(memo[2])
                continue
            fin = self._chunk(self.schedules.get(inst, cb), m, start)
            memo = (cb, start, fin)
            chunk_fin.append(fin)
        return np.max(np.stack(chunk_fin), axis=0)

    def _chunk(self, hit: CachedSchedule, m: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Each member's finish time of one chunk that it starts at ``start``."""
        delay, red = self.settings.endpoint_delay_ns, self.settings.reduction_delay_ns
        times = self.schedules.step_times(hit, m)
        if hit.latest_sends is None:
            hit.dst_unique = [s.dst_unique for s in hit.schedule.steps]
            hit.latest_sends = latest_sends(hit.schedule.steps, times, len(m))
        ready = start.copy()
        sent = start.copy()  # when each member's last send of this chunk is delivered
        watch = self.watch
        for k, (step, t, u, last) in enumerate(zip(hit.schedule.steps, times, hit.dst_unique, hit.latest_sends)):
            if watch is not None:
                watch(hit, k, ready[step.src] + delay)
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
        return np.maximum(ready, sent) + delay
