"""Local sweep workers: every run in a worker process of its own, ``jobs`` at a time.

A run that crashes its worker (a segfault, ``os._exit``, the OOM killer), exceeds its time limit or
its memory limit is recorded as that run's error, and the next run starts in a fresh worker; the
others never notice.  Workers die with the sweep: each asks the kernel for SIGKILL when the sweep
process dies (``PR_SET_PDEATHSIG``, and checks it still has its parent), and the sweep kills every
worker's process group when it stops for any other reason (an exception, Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.connection as mpc
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from xsim_trace.sweep.runners import execute_run

log = logging.getLogger(__name__)

#: how often the sweep looks at its workers' deadlines and memory (seconds)
POLL_S = 0.05
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the sweep's own cleanup still kills us
        pass
    if os.getppid() != parent:  # the sweep died before prctl took effect
        os._exit(1)


def _worker(payload: dict[str, Any], conn: Any, parent: int, close_fds: tuple[int, ...]) -> None:
    _die_with_parent(parent)
    os.setpgid(0, 0)  # a group of its own: a limit kills the run's children too
    for fd in close_fds:  # e.g. the sweep's folder lock: it must not outlive the sweep in a worker
        try:
            os.close(fd)
        except OSError:
            pass
    from xsim_trace.network import ns3_backend  # noqa: PLC0415

    ns3_backend._IDLE.clear()  # the parent's pooled NS-3 workers are not ours
    conn.send(execute_run(payload))
    conn.close()


@dataclass
class _Active:
    proc: multiprocessing.process.BaseProcess
    conn: Any
    payload: dict[str, Any]
    started: float
    deadline: float | None
    memory_mb: float | None


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def _error(payload: dict[str, Any], message: str, started: float) -> dict[str, Any]:
    return {"key": payload["key"], "runner": payload["runner"], "params": payload["params"], "status": "error",
            "error": message, "wall_s": round(time.monotonic() - started, 6)}


def _how_it_died(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"worker process died ({name}) without a result"
    return f"worker process exited with code {exitcode} without a result"


def _kill(a: _Active) -> None:
    for kill in (lambda: os.killpg(a.proc.pid, signal.SIGKILL), lambda: os.kill(a.proc.pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


def run_in_workers(payloads: Iterable[dict[str, Any]], jobs: int, emit: Callable[[dict[str, Any]], None], *,
                   close_fds: tuple[int, ...] = ()) -> None:
    """Run each payload (:func:`execute_run`'s argument, plus ``limits``: ``{time_s, memory_mb}``)
    in a fresh worker process, ``jobs`` at once; ``emit`` each record as it is known."""
    ctx = multiprocessing.get_context("fork")
    todo = deque(payloads)
    active: list[_Active] = []
    parent = os.getpid()
    restore = _sigterm_as_exit()
    try:
        while todo or active:
            while todo and len(active) < jobs:
                active.append(_start(ctx, todo.popleft(), parent, close_fds))
            ready = mpc.wait([a.proc.sentinel for a in active] + [a.conn for a in active], timeout=POLL_S)
            now = time.monotonic()
            for a in list(active):
                record = _finished(a, ready, now)
                if record is not None:
                    active.remove(a)
                    emit(record)
    finally:
        for a in active:
            _kill(a)
        for a in active:
            a.proc.join(timeout=5)
        restore()


def _start(ctx: Any, payload: dict[str, Any], parent: int, close_fds: tuple[int, ...]) -> _Active:
    limits = payload.get("limits") or {}
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(payload, send, parent, close_fds), daemon=False)
    started = time.monotonic()
    proc.start()
    send.close()
    time_s = limits.get("time_s")
    return _Active(proc, receive, payload, started, started + time_s if time_s else None, limits.get("memory_mb"))


def _finished(a: _Active, ready: list, now: float) -> dict[str, Any] | None:
    """The record of a worker that is done (a result, a death, a limit), else None."""
    if a.conn in ready or a.proc.sentinel in ready:
        record = None
        try:
            if a.conn.poll():
                record = a.conn.recv()
        except (EOFError, OSError):
            pass
        a.proc.join(timeout=5)
        if a.proc.is_alive():
            _kill(a)
            a.proc.join()
        return record if record is not None else _error(a.payload, _how_it_died(a.proc.exitcode), a.started)
    limit = None
    if a.deadline is not None and now > a.deadline:
        limit = f"time limit of {a.payload['limits']['time_s']:g} s exceeded"
    elif a.memory_mb is not None and (rss := _rss_mb(a.proc.pid)) > a.memory_mb:
        limit = f"memory limit of {a.memory_mb:g} MB exceeded ({rss:.0f} MB resident)"
    if limit is None:
        return None
    _kill(a)
    a.proc.join()
    log.warning("run %s: %s; killed", a.payload["key"], limit)
    return _error(a.payload, limit, a.started)


def _sigterm_as_exit() -> Callable[[], None]:
    """SIGTERM ends the sweep like Ctrl-C (so the workers are killed on the way out)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, old)
