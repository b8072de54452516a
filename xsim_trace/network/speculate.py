"""The completion logic of backends whose flows pass through internal events (hops, rate changes),
written once for ``analytical-ca`` and ``flow``.

Such a backend cannot know its earliest completion without running internal events, and a flow
started meanwhile may change them.  Two ways to answer ``next_completion_ns``:

- with a horizon (``next_completion_ns(horizon_ns=h)``, the caller promises no start before ``h``):
  run internal events up to ``h`` for good and answer the earliest completion at or before ``h``,
  else None.  No journal, no rollback: O(log n) per event (the replay engine always passes it);
- without one: run ahead to the earliest completion under a journal; ``advance`` to that time
  keeps what ran (commit), anything earlier (an ``advance`` short of it or a ``start_flow``) undoes
  it (rollback).  The answer is remembered until then.

A subclass implements the event loop and its journal:

- ``_run(limit, stop_at_done) -> int | None``: process internal events with time <= ``limit``;
  completions are moved to ``self._finished`` as ``(time, flow_id)``, or, with ``stop_at_done``,
  the loop stops before the first completion and returns its time (also when beyond ``limit``);
  returns None when it stopped for the limit or ran out of events;
- ``_next_done_ns() -> int | None``: bring pending state up to date (e.g. rates) and return the
  time of a completion that is due before any internal event (no events need to run), else None;
- ``_journal_begin()``, ``_journal_commit()``, ``_journal_rollback()``.
"""

from __future__ import annotations

import math

from xsim_trace.errors import BackendError
from xsim_trace.network._common import FlowChecks
from xsim_trace.network.protocol import Flow


class SpeculativeBackend(FlowChecks):
    """Mixin: ``next_completion_ns`` / ``advance`` and the checks of ``start_flow``."""

    _finished: list[tuple[int, int]]
    #: (answer,) while a speculative answer is pending, else None
    _spec: tuple[int | None] | None
    #: a start before this time breaks the caller's horizon promise
    _promised_ns: int

    # ---- hooks ----------------------------------------------------------------------------------
    def _run(self, limit: float, stop_at_done: bool) -> int | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _next_done_ns(self) -> int | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _journal_begin(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _journal_commit(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _journal_rollback(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # ---- the state machine ----------------------------------------------------------------------
    def _settle(self, now_ns: int | None) -> None:
        """End a pending speculation: keep it if the clock reaches its answer, else undo it."""
        spec = self._spec
        if spec is None:
            return
        self._spec = None
        c = spec[0]
        if now_ns is not None and c is not None and now_ns >= c:
            self._journal_commit()
        else:
            self._journal_rollback()

    def _start_checks(self, flow: Flow, now_ns: int) -> None:
        """Checks and settling every ``start_flow`` does first."""
        if now_ns < self._promised_ns:
            raise BackendError(f"flow {flow.flow_id} starts at {now_ns} ns, before the horizon "
                               f"{self._promised_ns} ns promised to next_completion_ns", field="now_ns")
        self._check_start(flow, now_ns)
        self._settle(now_ns)

    def next_completion_ns(self, horizon_ns: int | None = None) -> int | None:
        if horizon_ns is not None:
            self._settle(None)
            if horizon_ns < self._now_ns:
                raise BackendError(f"horizon {horizon_ns} ns is before the backend clock {self._now_ns} ns",
                                   field="horizon_ns")
            if self._finished:
                c = min(self._finished)[0]
                return c if c <= horizon_ns else None
            c = self._next_done_ns()
            if c is None:
                c = self._run(horizon_ns, True)
            if c is not None and c <= horizon_ns:
                return c
            if horizon_ns > self._promised_ns:
                self._promised_ns = horizon_ns
            return None
        if self._spec is not None:
            return self._spec[0]
        if self._finished:
            return min(self._finished)[0]
        c = self._next_done_ns()
        if c is not None:
            return c
        self._journal_begin()
        c = self._run(math.inf, True)
        self._spec = (c,)
        return c

    def advance(self, now_ns: int) -> list[int]:
        self._check_advance(now_ns)
        self._settle(now_ns)
        self._now_ns = now_ns
        self._run(now_ns, False)
        fin = self._finished
        if not fin:
            return []
        done = [x for x in fin if x[0] <= now_ns]
        if len(done) < len(fin):
            self._finished = [x for x in fin if x[0] > now_ns]
        else:
            self._finished = []
        done.sort()
        for _, fid in done:
            self._active.discard(fid)
        return [fid for _, fid in done]

    def close(self) -> None:
        """Nothing to release."""
