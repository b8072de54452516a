"""Half-open integer intervals: union, total length, intersection, difference (for busy/idle accounting)."""

from __future__ import annotations

from typing import Iterable

Interval = tuple[int, int]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint, non-empty intervals covering the same points as ``intervals``."""
    out: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def total(intervals: Iterable[Interval]) -> int:
    """Length of the union of ``intervals``."""
    return sum(end - start for start, end in union(intervals))


def clip(intervals: Iterable[Interval], lo: int, hi: int) -> list[Interval]:
    """``intervals`` cut to the window ``[lo, hi)``."""
    return union((max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo))


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Intersection of two unions (both sorted and disjoint, as :func:`union` returns)."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Points of ``a`` not in ``b`` (both sorted and disjoint)."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        cur = start
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < end:
            out.append((cur, end))
    return out
