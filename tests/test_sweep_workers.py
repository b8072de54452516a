"""Sweeps survive their runs: a crashed run is that run's error only, limits kill a run, a killed
sweep leaves no workers, --retry-errors runs in workers too, and one folder takes one sweep at a time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.sweep.execute import folder_lock, run_sweep
from xsim_trace.sweep.spec import spec_from_mapping

from sweep_helpers import TOY, write_spec

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def test_a_crashed_worker_is_that_runs_error_only(tmp_path):
    spec = spec_from_mapping({"runner": TOY, "base": {"b": 0, "report_pid": True},
                              "grid": {"a": [1, 2, 3, 4, 5], "crash": [False]}, "runs": [{"a": 9, "crash": True}]})
    out = run_sweep(spec, tmp_path, jobs=2)
    assert out.ran == 6 and len(out.failed) == 1
    bad = out.failed[0]
    assert bad["params"]["a"] == 9 and "worker process died (SIGKILL)" in bad["error"]
    ok = [r for r in out.records if r["status"] == "ok"]
    assert sorted(r["result"]["iteration_ns"] for r in ok) == [1000, 2000, 3000, 4000, 5000]
    pids = {r["result"]["pid"] for r in ok}
    assert len(pids) == 5 and os.getpid() not in pids  # each run in a fresh worker, none in the sweep


def test_time_and_memory_limits(tmp_path):
    spec = spec_from_mapping({
        "runner": TOY, "base": {"b": 0}, "limits": {"time_s": 20},
        "runs": [{"a": 1}, {"a": 2, "sleep_s": 30, "time_limit_s": 0.5}, {"a": 3, "alloc_mb": 400, "sleep_s": 30,
                                                                          "memory_limit_mb": 150}],
    })
    assert [r.limits.to_dict() for r in spec.runs] == [{"time_s": 20.0}, {"time_s": 0.5},
                                                       {"time_s": 20.0, "memory_mb": 150.0}]
    assert all("time_limit_s" not in r.params and "memory_limit_mb" not in r.params for r in spec.runs)
    t0 = time.monotonic()
    out = run_sweep(spec, tmp_path, jobs=3)
    assert time.monotonic() - t0 < 15
    by_a = {r["params"]["a"]: r for r in out.records}
    assert by_a[1]["status"] == "ok"
    assert by_a[2]["error"] == "time limit of 0.5 s exceeded"
    assert by_a[3]["error"].startswith("memory limit of 150 MB exceeded")
    with pytest.raises(ConfigError, match="limits.time_s"):
        spec_from_mapping({"runner": TOY, "limits": {"time_s": -1}, "runs": [{"a": 1, "b": 1}]})


def test_retry_errors_runs_in_workers_and_respects_jobs(tmp_path, monkeypatch):
    spec = spec_from_mapping({"runner": TOY, "base": {"b": 0, "report_pid": True}, "grid": {"a": [1, 2]},
                              "runs": [{"a": 3, "fail": True}]})
    assert len(run_sweep(spec, tmp_path, jobs=1).failed) == 1
    import sweep_helpers

    monkeypatch.setattr(sweep_helpers, "toy_runner", lambda p: {"iteration_ns": 7, "pid": os.getpid()})
    again = run_sweep(spec, tmp_path, jobs=4, retry_errors=True)  # one run left: still in a worker
    assert again.ran == 1 and not again.failed
    retried = next(r for r in again.records if r["params"]["a"] == 3)
    assert retried["result"]["pid"] != os.getpid()


def test_one_sweep_per_folder(tmp_path):
    spec = spec_from_mapping({"runner": TOY, "runs": [{"a": 1, "b": 2}]})
    with folder_lock(tmp_path):
        with pytest.raises(ConfigError, match="another sweep is running on this folder"):
            run_sweep(spec, tmp_path, jobs=1)
    assert run_sweep(spec, tmp_path, jobs=1).ran == 1  # free again


def _children(pid: int) -> set[int]:
    try:
        return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_a_killed_sweep_leaves_no_workers(tmp_path):
    spec = write_spec(tmp_path, {"runner": TOY, "base": {"b": 0, "sleep_s": 60}, "grid": {"a": [1, 2, 3, 4]}})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    sweep = subprocess.Popen([sys.executable, "-m", "xsim_trace.cli.main", "-q", "sweep", str(spec), "-j", "2",
                              "-o", str(tmp_path / "out")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    deadline = time.monotonic() + 60
    while len(workers) < 2 and time.monotonic() < deadline:
        workers = _children(sweep.pid)
        time.sleep(0.1)
    assert len(workers) == 2, "the sweep did not start its workers"
    time.sleep(0.5)  # let them reach their runs
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers)
    # and the folder is free for the next sweep (no worker kept the lock)
    with folder_lock(tmp_path / "out"):
        pass
