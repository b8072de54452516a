"""The engine's clock: one heap of ``(time_ns, seq, handler, arg)``, deterministic.

``seq`` is a per-replay counter, so equal times pop in the order they were pushed and the heap never
compares handlers.  ``handler`` is None for "node ``arg`` finishes" (the hot event, handled by the
loop itself); otherwise ``handler(arg, now_ns)`` is called when the event pops.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable

Handler = Callable[[Any, int], None]


class EventQueue:
    __slots__ = ("heap", "seq")

    def __init__(self) -> None:
        self.heap: list[tuple] = []
        self.seq = 0

    def at(self, time_ns: int, handler: Handler, arg) -> None:
        """Call ``handler(arg, time_ns)`` at ``time_ns``."""
        self.seq += 1
        heapq.heappush(self.heap, (time_ns, self.seq, handler, arg))

    def node_done(self, node: int, time_ns: int) -> None:
        """Node ``node`` finishes at ``time_ns``."""
        self.seq += 1
        heapq.heappush(self.heap, (time_ns, self.seq, None, node))

    def next_time_ns(self) -> int | None:
        return self.heap[0][0] if self.heap else None
