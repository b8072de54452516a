"""Pipeline schedules: the order in which one stage runs its forward / backward passes."""

from __future__ import annotations

from dataclasses import dataclass

from xsim_trace.errors import ConfigError
from xsim_trace.workload.framework import Schedule


@dataclass(frozen=True, slots=True)
class Step:
    forward: bool
    microbatch: int
    chunk: int = 0  # virtual-pipeline chunk on this stage (0 unless interleaved)

    def __str__(self) -> str:
        return f"{'F' if self.forward else 'B'}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


def gpipe(stage: int, pp: int, m: int) -> list[Step]:
    return [Step(True, i) for i in range(m)] + [Step(False, i) for i in range(m)]


def one_f_one_b(stage: int, pp: int, m: int) -> list[Step]:
    """PipeDream-flush / Megatron 1F1B: pp-stage-1 warm-up forwards, then one forward one
    backward, then the cool-down backwards."""
    warm = min(pp - stage - 1, m)
    order = [Step(True, i) for i in range(warm)]
    f, b = warm, 0
    while f < m:
        order.append(Step(True, f))
        f += 1
        order.append(Step(False, b))
        b += 1
    order += [Step(False, i) for i in range(b, m)]
    return order


def interleaved(stage: int, pp: int, m: int, vpp: int) -> list[Step]:
    """Megatron's interleaved 1F1B with ``vpp`` model chunks per stage; needs m % pp == 0."""
    if m % pp:
        raise ConfigError(f"interleaved schedule needs micro-batches ({m}) divisible by pp ({pp})", field="framework.vpp")
    total = m * vpp

    def fwd(k: int) -> Step:
        group, pos = divmod(k, pp * vpp)
        return Step(True, group * pp + pos % pp, pos // pp)

    def bwd(k: int) -> Step:
        group, pos = divmod(k, pp * vpp)
        return Step(False, group * pp + pos % pp, vpp - 1 - pos // pp)

    warm = min((pp - stage - 1) * 2 + (vpp - 1) * pp, total)
    order = [fwd(k) for k in range(warm)]
    f, b = warm, 0
    while f < total:
        order.append(fwd(f))
        f += 1
        order.append(bwd(b))
        b += 1
    order += [bwd(k) for k in range(b, total)]
    return order


def stage_order(schedule: Schedule, stage: int, pp: int, m: int, vpp: int = 1) -> list[Step]:
    if schedule is Schedule.GPIPE:
        return gpipe(stage, pp, m)
    if schedule is Schedule.INTERLEAVED and vpp > 1:
        return interleaved(stage, pp, m, vpp)
    return one_f_one_b(stage, pp, m)
