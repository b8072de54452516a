"""Running a sweep: the runs not yet in ``results.jsonl``, serially, in a process pool, or on Ray.

Results are appended as runs finish (completion order); everything reported from them (summary,
plot) is sorted by metric then key, so it does not depend on which run finished first.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xsim_trace.errors import ConfigError, OutputError
from xsim_trace.io.atomic import check_output_folder
from xsim_trace.sweep.results import RESULTS_FILE, ResultLog
from xsim_trace.sweep.runners import execute_run
from xsim_trace.sweep.spec import RunSpec, SweepSpec
from xsim_trace.sweep.workers import run_in_workers

log = logging.getLogger(__name__)

RAY_HINT = "Ray is an optional extra: pip install -e .[ray]"
#: held (flock) by the sweep running on a folder; a second sweep on it is refused
LOCK_FILE = ".sweep.lock"


@dataclass(frozen=True, slots=True)
class SweepOutcome:
    spec: SweepSpec
    results_path: Path
    records: tuple[dict[str, Any], ...]  # one per run of the spec, in spec order
    ran: int
    skipped: int

    @property
    def failed(self) -> tuple[dict[str, Any], ...]:
        return tuple(r for r in self.records if r.get("status") != "ok")


def _payload(run: RunSpec) -> dict[str, Any]:
    d = run.to_dict()
    d["resolved"] = run.resolved_params()
    d["limits"] = run.limits.to_dict()
    return d


@contextlib.contextmanager
def folder_lock(out: Path):
    """Hold the sweep folder's lock; ConfigError when another sweep holds it, OutputError when the
    folder cannot be made."""
    check_output_folder(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the sweep folder: {exc.strerror or exc}", file=str(out)) from None
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError("another sweep is running on this folder (it holds .sweep.lock); "
                              "wait for it or give another -o", file=str(out)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield fd
    finally:
        os.close(fd)


def _run_ray(payloads: list[dict[str, Any]], address: str, jobs: int | None,
             emit: Callable[[dict[str, Any]], None]) -> None:
    try:
        import ray  # noqa: PLC0415 - optional extra
    except ImportError:
        raise ConfigError(RAY_HINT, field="--ray") from None
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "logging_level": logging.WARNING}
        if address == "local":
            if jobs:
                kwargs["num_cpus"] = jobs
            ray.init(**kwargs)
        else:
            ray.init(address=address, **kwargs)
        started = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(execute_run)
        pending = {remote.remote(p): p for p in payloads}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                p = pending.pop(ref)
                try:
                    emit(ray.get(ref))
                except Exception as exc:  # noqa: BLE001 - a lost Ray task is that run's error
                    emit({"key": p["key"], "runner": p["runner"], "params": p["params"], "status": "error",
                          "error": f"Ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                          "wall_s": 0.0})
    finally:
        if started:
            ray.shutdown()


def run_sweep(
    spec: SweepSpec,
    out_dir: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    ray_address: str | None = None,
    retry_errors: bool = False,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    on_plan: Callable[[int, int], None] | None = None,
) -> SweepOutcome:
    """Run every run of ``spec`` whose key is not yet in ``out_dir/results.jsonl`` (with
    ``retry_errors``, failed ones too).  ``jobs``: runs at once (default: CPU count), each in a
    worker process of its own (:mod:`xsim_trace.sweep.workers`); ``ray_address``: an address or
    ``"local"``.  The folder is locked for the sweep: a second sweep on it gets a ConfigError.
    ``on_plan(to_run, skipped)`` is called once before running, ``on_record`` per finished run."""
    if jobs is not None and jobs < 1:
        raise ConfigError(f"expected a positive number of jobs, found {jobs}", field="--jobs")
    out = Path(out_dir)
    path = out / RESULTS_FILE
    with folder_lock(out) as lock_fd, ResultLog(path) as results:
        existing = dict(results.existing)
        todo = [r for r in spec.runs
                if r.key not in existing or (retry_errors and existing[r.key].get("status") != "ok")]
        skipped = len(spec.runs) - len(todo)
        if on_plan:
            on_plan(len(todo), skipped)
        log.info("sweep %s: %d runs, %d already in %s", spec.name, len(spec.runs), skipped, path)

        def emit(record: dict[str, Any]) -> None:
            results.append(record)
            existing[record["key"]] = record
            if on_record:
                on_record(record)

        payloads = [_payload(r) for r in todo]
        if payloads:
            if ray_address:
                _run_ray(payloads, ray_address, jobs, emit)
            else:  # each run in a worker process of its own, also with -j 1 and a single run left
                run_in_workers(payloads, min(jobs or os.cpu_count() or 1, len(payloads)), emit,
                               close_fds=(lock_fd, results.fileno()))
    records = tuple(existing[r.key] for r in spec.runs if r.key in existing)
    return SweepOutcome(spec, path, records, len(todo), skipped)
