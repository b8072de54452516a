"""The small protocol every network backend implements, and the flow it carries.

The replayer owns the clock.  It hands a backend flows as they become ready (``start_flow``),
asks when the earliest active flow would finish if nothing else started (``next_completion_ns``),
and moves the backend's clock forward (``advance``), which returns the flows finished by then.
Times are integer nanoseconds; a backend must be deterministic: the same calls in the same order
give the same answers, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Flow:
    """One point-to-point transfer between two endpoints (global rank ids) of the topology."""

    flow_id: int
    src: int
    dst: int
    size_bytes: int


@runtime_checkable
class NetworkBackend(Protocol):
    name: ClassVar[str]

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        """Inject ``flow`` at ``now_ns`` (never earlier than the last ``advance``)."""

    def next_completion_ns(self) -> int | None:
        """Time of the earliest completion among active flows if no new flow starts; None if idle."""

    def advance(self, now_ns: int) -> list[int]:
        """Move the clock to ``now_ns`` and return the ids of flows finished at or before it,
        ordered by (finish time, flow_id)."""
