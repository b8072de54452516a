"""Layer-aware data-parallel groups by a sweep line over all replicas' stage boundaries.

Each member holds a half-open layer range ``[start, end)`` of one replica.  Sorting every boundary
of every member gives elementary intervals; the members whose ranges cover an interval form its
gradient-sync group; neighbouring intervals with identical members are merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

from xsim_trace.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Segment:
    """A member of the sweep: ``key`` identifies it (e.g. (replica, stage, chunk))."""

    key: Hashable
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class DPInterval:
    start: int
    end: int
    members: tuple[Hashable, ...]  # in input order

    @property
    def num_layers(self) -> int:
        return self.end - self.start


def dp_intervals(segments: Sequence[Segment]) -> tuple[DPInterval, ...]:
    """Merged intervals in layer order; members keep the order of ``segments``.

    >>> iv = dp_intervals([Segment("A", 0, 12), Segment("A'", 12, 32), Segment("H", 0, 20), Segment("H'", 20, 32)])
    >>> [(i.start, i.end, i.members) for i in iv]
    [(0, 12, ('A', 'H')), (12, 20, ("A'", 'H')), (20, 32, ("A'", "H'"))]
    """
    for i, seg in enumerate(segments):
        if seg.end <= seg.start:
            raise ConfigError(f"empty or reversed layer range [{seg.start}, {seg.end})", field=f"segments[{i}]")
    points = sorted({p for s in segments for p in (s.start, s.end)})
    out: list[DPInterval] = []
    for lo, hi in zip(points, points[1:]):
        members = tuple(s.key for s in segments if s.start <= lo and hi <= s.end)
        if not members:
            continue
        if out and out[-1].members == members and out[-1].end == lo:
            out[-1] = DPInterval(out[-1].start, hi, members)
        else:
            out.append(DPInterval(lo, hi, members))
    return tuple(out)
