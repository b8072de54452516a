"""Pipeline schedules as per-stage op sequences, and their analytic timeline.

An op is the forward (``F``) or backward (``B``) of micro-batch ``m`` on model chunk ``c`` of a
stage.  With ``v`` chunks per stage (interleaved 1F1B), chunk ``c`` of stage ``s`` is virtual stage
``c * p + s``; otherwise ``v == 1`` and the virtual stage is the stage.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from xsim_trace.errors import ConfigError
from xsim_trace.workload import schedule as stage_order


class Schedule(enum.Enum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved-1f1b"

    @classmethod
    def parse(cls, name: str, *, file: str | None = None, field_name: str | None = None) -> "Schedule":
        try:
            return cls(str(name).lower())
        except ValueError:
            choices = ", ".join(s.value for s in cls)
            raise ConfigError(f"unknown schedule {name!r} (choose {choices})", file=file, field=field_name) from None


@dataclass(frozen=True, slots=True)
class PipeOp:
    kind: str  # "F" or "B"
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


def _check(p: int, m: int, v: int, schedule: Schedule) -> None:
    if p < 1 or m < 1 or v < 1:
        raise ConfigError(f"expected positive stages/micro-batches/chunks, found p={p} m={m} v={v}")
    if schedule is not Schedule.INTERLEAVED and v != 1:
        raise ConfigError(f"schedule {schedule.value} runs one chunk per stage, found v={v}", field="chunks")
    if schedule is Schedule.INTERLEAVED and p > 1 and m % p:
        raise ConfigError(f"interleaved 1F1B needs micro-batches divisible by stages, found m={m} p={p}",
                          field="micro_batches")


def stage_ops(schedule: Schedule | str, stage: int, num_stages: int, num_microbatches: int, chunks: int = 1) -> tuple[PipeOp, ...]:
    """The op order of one stage."""
    schedule = Schedule.parse(schedule) if isinstance(schedule, str) else schedule
    p, m, v, s = num_stages, num_microbatches, chunks, stage
    _check(p, m, v, schedule)
    # one implementation of the op order: the workload generator's (same Megatron orders)
    if schedule is Schedule.GPIPE:
        steps = stage_order.gpipe(s, p, m)
    elif schedule is Schedule.ONE_F_ONE_B:
        steps = stage_order.one_f_one_b(s, p, m)
    else:
        steps = stage_order.interleaved(s, p, m, v)
    return tuple(PipeOp("F" if st.forward else "B", st.microbatch, st.chunk) for st in steps)


def all_stage_ops(schedule: Schedule | str, num_stages: int, num_microbatches: int, chunks: int = 1) -> tuple[tuple[PipeOp, ...], ...]:
    return tuple(stage_ops(schedule, s, num_stages, num_microbatches, chunks) for s in range(num_stages))


@dataclass(frozen=True, slots=True)
class OpSpan:
    stage: int
    op: PipeOp
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class Timeline:
    spans: tuple[OpSpan, ...]  # in completion order
    num_stages: int

    @property
    def makespan_ns(self) -> int:
        return max(s.end_ns for s in self.spans) - min(s.start_ns for s in self.spans)

    def busy_ns(self, stage: int) -> int:
        return sum(s.end_ns - s.start_ns for s in self.spans if s.stage == stage)

    def bubble_ns(self, stage: int) -> int:
        """Idle time of a stage within the iteration (makespan - busy)."""
        return self.makespan_ns - self.busy_ns(stage)

    def bubble_fraction(self, stage: int) -> float:
        return self.bubble_ns(stage) / self.makespan_ns


def analytic_timeline(
    schedule: Schedule | str,
    num_stages: int,
    num_microbatches: int,
    op_time_ns: Callable[[int, PipeOp], int],
    *,
    chunks: int = 1,
    p2p_ns: Callable[[int, int, PipeOp], int] | int = 0,
) -> Timeline:
    """Start/end of every op when ops run in schedule order on their stage and wait for their
    producer: F(m, vs) after F(m, vs-1), B(m, vs) after B(m, vs+1) (the last virtual stage's B after
    its own F).  ``p2p_ns`` is the transfer delay between virtual stages (constant or a function of
    (from_stage, to_stage, op))."""
    orders = all_stage_ops(schedule, num_stages, num_microbatches, chunks)
    p, v = num_stages, chunks
    last_vs = p * v - 1
    done: dict[tuple[str, int, int], tuple[int, int]] = {}  # (kind, m, vs) -> (end, stage)
    cursor = [0] * p
    free_at = [0] * p
    spans: list[OpSpan] = []
    delay = (lambda a, b, op: p2p_ns) if isinstance(p2p_ns, int) else p2p_ns
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while cursor[s] < len(orders[s]):
                op = orders[s][cursor[s]]
                vs = op.chunk * p + s
                if op.kind == "F":
                    dep = ("F", op.microbatch, vs - 1) if vs > 0 else None
                else:
                    dep = ("B", op.microbatch, vs + 1) if vs < last_vs else ("F", op.microbatch, vs)
                ready = 0
                if dep is not None:
                    if dep not in done:
                        break
                    end, from_stage = done[dep]
                    ready = end + (delay(from_stage, s, op) if from_stage != s else 0)
                start = max(ready, free_at[s])
                end = start + int(op_time_ns(s, op))
                free_at[s] = end
                done[(op.kind, op.microbatch, vs)] = (end, s)
                spans.append(OpSpan(s, op, start, end))
                cursor[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ConfigError("the schedule deadlocks (an op waits on one that comes later)")
    spans.sort(key=lambda x: (x.end_ns, x.stage))
    return Timeline(tuple(spans), p)
