"""Chunk schedules of the collectives of one replay, and their uncontended step times, memoised.

Both ways of running a collective use it: the flow path (an indexed ``_Plan`` per schedule) and
closed-form pricing (the per-step transfer times from the backend)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from xsim_trace.replay.algorithms import Schedule, build_schedule
from xsim_trace.replay.compile import CollectiveInstance, CompiledWorkload
from xsim_trace.replay.settings import ReplaySettings


class Plan:
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


class CachedSchedule:
    """A schedule and what has been derived from it so far (each filled on first use)."""

    __slots__ = ("schedule", "plan", "step_times", "dst_unique", "latest_sends")

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.plan: Plan | None = None
        self.step_times: list[np.ndarray] | None = None
        self.dst_unique: list[bool] | None = None
        self.latest_sends: list[tuple | None] | None = None


class ScheduleCache:
    def __init__(self, w: CompiledWorkload, backend, settings: ReplaySettings,
                 node_of: Sequence[int] | None = None) -> None:
        self.w = w
        self.backend = backend
        self.settings = settings
        self.node_of = list(node_of) if node_of is not None else None
        self._sched: dict[tuple, CachedSchedule] = {}
        self._times_memo: dict[bytes, np.ndarray] = {}

    def get(self, inst: CollectiveInstance, chunk_bytes: int) -> CachedSchedule:
        gid = inst.group
        algo = self.settings.algorithm_for(inst.comm_type)
        key = (gid, algo, inst.comm_type, chunk_bytes, inst.root, inst.ring)
        hit = self._sched.get(key)
        if hit is None:
            members = self.w.groups[gid]
            node_of = [self.node_of[r] for r in members] if self.node_of is not None else None
            sched = build_schedule(algo, inst.comm_type, len(members), chunk_bytes, root=inst.root, node_of=node_of, order=inst.ring)
            hit = self._sched[key] = CachedSchedule(sched)
        return hit

    def plan(self, inst: CollectiveInstance, chunk_bytes: int) -> Plan:
        hit = self.get(inst, chunk_bytes)
        if hit.plan is None:
            hit.plan = Plan(hit.schedule)
        return hit.plan

    def step_times(self, hit: CachedSchedule, members: np.ndarray) -> list[np.ndarray]:
        """Uncontended time of every transfer of every step of ``hit`` among ranks ``members``."""
        if hit.step_times is None:
            hit.step_times = [self.transfer_times(members[s.src], members[s.dst], s.size_bytes) for s in hit.schedule.steps]
        return hit.step_times

    def transfer_times(self, src: np.ndarray, dst: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Uncontended transfer time of each (src, dst, size), memoised on the whole step (the
        steps of a ring are all alike, so a 2(n-1)-step ring asks the backend once)."""
        key = src.tobytes() + b"|" + dst.tobytes() + b"|" + size.tobytes()
        hit = self._times_memo.get(key)
        if hit is not None:
            return hit
        out = np.asarray(self.backend.transfer_time_ns(src, dst, size), np.int64)
        self._times_memo[key] = out
        return out
