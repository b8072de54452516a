"""Replaying a partial rank set: the ranks absent from it are modelled the way ``xsim validate``
models them (:func:`xsim_trace.validate.scenario.mirror_peers`): each absent rank mirrors the nearest
present rank below it, with its send/recv peers shifted.

Two models (``xsim replay --absent-peers``):

- ``mirror``: every rank starts at 0;
- ``skew``: as ``mirror``, and each rank starts at its captured step-start offset (the converter's
  ``step_start_ns`` metadata, relative to the earliest present rank; a mirrored rank takes its
  source's), as ``validate`` does for ranks that share a clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping, Sequence

from xsim_trace.errors import GraphError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.bounds import MAX_WORLD_SIZE
from xsim_trace.graph.model import Trace


class AbsentPeers(enum.Enum):
    MIRROR = "mirror"
    SKEW = "skew"


@dataclass(frozen=True, slots=True)
class Completion:
    """A rank set completed to its world size, and what was done to it (one line each)."""

    traces: dict[int, Trace]
    mirrored: tuple[int, ...]
    notes: tuple[str, ...]


def world_size_of(traces: Mapping[int, Trace]) -> int:
    """The world size the traces record (``world_size`` metadata), at least the highest rank + 1."""
    world = max(traces) + 1
    for trace in traces.values():
        value = trace.metadata.attr(A.META_WORLD_SIZE)
        if isinstance(value, int) and not isinstance(value, bool):
            world = max(world, value)
    if world > MAX_WORLD_SIZE:
        raise GraphError(f"world size {world} is out of range (at most {MAX_WORLD_SIZE} ranks)",
                         field=A.META_WORLD_SIZE)
    return world


def mirror_source(rank: int, present: Sequence[int]) -> int:
    """The present rank an absent ``rank`` mirrors: the nearest below, else the first."""
    below = [p for p in present if p < rank]
    return below[-1] if below else present[0]


def complete_rank_set(
    traces: Mapping[int, Trace],
    comm_groups: Mapping[str, Sequence[int]] | None,
    mode: AbsentPeers = AbsentPeers.MIRROR,
    *,
    alltoall_order=None,
) -> Completion:
    """``traces`` completed to ranks ``0..world-1`` (unchanged when none is absent)."""
    from xsim_trace.validate.scenario import mirror_peers, with_start_offset

    if not traces:
        raise GraphError("no ranks to replay")
    world = world_size_of(traces)
    present = sorted(traces)
    if len(present) == world:
        return Completion(dict(traces), (), ())
    full, mirrored = mirror_peers(traces, world, alltoall_order=alltoall_order, comm_groups=comm_groups)
    shown = ", ".join(map(str, present[:8])) + (" ..." if len(present) > 8 else "")
    notes = [f"{len(mirrored)} absent peer(s) of {world} ranks modelled as mirrors of the captured rank(s) {shown}"]
    if mode is AbsentPeers.SKEW:
        starts = {r: traces[r].metadata.attr(A.META_STEP_START_NS) for r in present}
        if all(isinstance(v, int) and not isinstance(v, bool) for v in starts.values()):
            first = min(starts.values())
            for r in range(world):
                offset = starts[r if r in traces else mirror_source(r, present)] - first
                full[r] = with_start_offset(full[r], offset)
            notes.append("each rank starts at its captured step-start offset (mirrors take their source's)")
        else:
            notes.append("no step start times in the traces: every rank starts at 0")
    return Completion(full, tuple(mirrored), tuple(notes))
