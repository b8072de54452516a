"""Output sets are atomic: a conversion, generation or replay killed at any point leaves (once the folder
is recovered, which every writer and the rank-set reader do first) the complete old set or the complete
new one, never a mix, and no staging folder behind."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import shared_path
from xsim_trace.graph import NodeType, Trace, make_metadata, make_node
from xsim_trace.io import find_rank_files, output_set, read_rank_set, recover, write_rank_set
from xsim_trace.io.outset import CRASH_ENV, STAGING_PREFIX
from xsim_trace.io.rankset import rank_set_member
from xsim_trace.report import REPORT_FILES

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "dlrm_v100_8rank" / "dlrm"
TEXT = shared_path("text_workloads", "Transformer_HybridParallel.txt")


def _traces(n: int, us: int) -> dict[int, Trace]:
    return {r: Trace(make_metadata(), (make_node(1, "c", NodeType.COMP, duration_micros=us),), rank=r) for r in range(n)}


def fingerprint(folder: Path, owns) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".") and owns(p.name)}


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# -- the mechanism ---------------------------------------------------------------------------------
def test_failure_inside_leaves_the_old_set(tmp_path):
    write_rank_set(tmp_path / "w", _traces(3, 5), {"1": [0, 1]})
    before = fingerprint(tmp_path, rank_set_member("w"))
    with pytest.raises(RuntimeError):
        with output_set(tmp_path, rank_set_member("w")) as out:
            out.path("w.0.et").write_bytes(b"new")
            raise RuntimeError("disk on fire")
    assert fingerprint(tmp_path, rank_set_member("w")) == before and leftovers(tmp_path) == []


def test_new_set_replaces_the_whole_old_set(tmp_path):
    write_rank_set(tmp_path / "w", _traces(4, 5), {"1": [0, 1]}, compress=True)
    (tmp_path / "other.0.et").write_bytes(b"another set")
    paths = write_rank_set(tmp_path / "w", _traces(2, 7))
    assert [p.name for p in paths] == ["w.0.et", "w.1.et"] and all(p.parent == tmp_path for p in paths)
    assert sorted(fingerprint(tmp_path, rank_set_member("w"))) == ["w.0.et", "w.1.et"]  # ranks 2-3, .gz, groups gone
    assert (tmp_path / "other.0.et").exists() and leftovers(tmp_path) == []
    assert read_rank_set(tmp_path / "w").ranks == [0, 1]


_CRASHING_WRITER = """
import sys
from xsim_trace.graph import NodeType, Trace, make_metadata, make_node
from xsim_trace.io import write_rank_set
traces = {r: Trace(make_metadata(), (make_node(1, "c", NodeType.COMP, duration_micros=9),), rank=r) for r in range(5)}
write_rank_set(sys.argv[1], traces, {"1": [0, 1, 2]})
"""


@pytest.mark.parametrize("moves", [0, 2, 5])
def test_crash_during_the_commit_is_rolled_forward(tmp_path, moves):
    """Killed after ``moves`` files moved in (of 6): the next reader finishes the commit."""
    write_rank_set(tmp_path / "w", _traces(3, 5))
    old = fingerprint(tmp_path, rank_set_member("w"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), CRASH_ENV: str(moves)}
    done = subprocess.run([sys.executable, "-c", _CRASHING_WRITER, str(tmp_path / "w")], env=env, timeout=120)
    assert done.returncode == -9
    assert any(n.startswith(STAGING_PREFIX) for n in leftovers(tmp_path))
    _, files = find_rank_files(tmp_path / "w")  # recovers first
    assert sorted(files) == [0, 1, 2, 3, 4] and leftovers(tmp_path) == []
    new = fingerprint(tmp_path, rank_set_member("w"))
    assert new != old and "w.comm_groups.json" in new


def test_live_writer_is_left_alone(tmp_path):
    with output_set(tmp_path, rank_set_member("w")) as out:
        out.path("w.0.et").write_bytes(b"x")
        assert recover(tmp_path) == 0 and out.staging.exists()
    assert (tmp_path / "w.0.et").read_bytes() == b"x" and leftovers(tmp_path) == []


def test_replay_reports_are_one_set(tmp_path):
    from xsim_trace.cli.main import main

    out = tmp_path / "out"
    assert main(["-q", "replay", str(SAMPLE), "--cluster", "v100-dgx1:1", "--out", str(out)]) == 0
    assert sorted(fingerprint(out, REPORT_FILES.__contains__)) == ["breakdown.png", "summary.json", "timeline.json"]
    assert main(["-q", "replay", str(SAMPLE), "--cluster", "v100-dgx1:1", "--no-plot", "--out", str(out)]) == 0
    assert sorted(fingerprint(out, REPORT_FILES.__contains__)) == ["summary.json", "timeline.json"]  # no stale chart


# -- killing real runs at random points ------------------------------------------------------------
def _xsim(*args: str) -> list[str]:
    return [sys.executable, "-m", "xsim_trace.cli.main", "-q", *args]


def _cases(base: Path) -> dict[str, tuple]:
    """name -> (command writing the old set, command writing the new set, folder, owner)."""
    p = str(base / "set")
    member = rank_set_member("set")
    return {
        "convert": (_xsim("convert", "text", str(TEXT), "--num-npus", "16", "-o", p),
                    _xsim("convert", "text", str(TEXT), "--num-npus", "8", "--num-passes", "3", "-o", p), base, member),
        "generate": (_xsim("generate", "--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "4", "--layers", "4",
                           "--gbs", "16", "--out", p),
                     _xsim("generate", "--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--layers", "8",
                           "--gbs", "16", "--out", p), base, member),
        "replay": (_xsim("replay", str(SAMPLE), "--cluster", "v100-dgx1:1", "--out", str(base / "r")),
                   _xsim("replay", str(SAMPLE), "--cluster", "v100-dgx1:1", "--backend", "analytical-ca", "--no-plot",
                         "--out", str(base / "r")),
                   base / "r", REPORT_FILES.__contains__),
    }


def _run(cmd: list[str]) -> float:
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300,
                   stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def kill_at_random(tmp_path: Path, name: str, kills: int, seed: int) -> list[str]:
    """Write the old set, then start the new run ``kills`` times and SIGKILL it at a random moment;
    after each kill the recovered folder holds exactly the old or the new set."""
    if not TEXT.exists():
        pytest.skip("../shared/traces not present")
    rng = random.Random(seed)
    ref_new, work = tmp_path / "new", tmp_path / "work"
    _old_cmd, new_cmd, _f, owns = _cases(ref_new)[name]
    duration = _run(new_cmd)
    new = fingerprint(_cases(ref_new)[name][2], owns)
    old_cmd, new_cmd, folder, owns = _cases(work)[name]
    _run(old_cmd)
    old = fingerprint(folder, owns)
    assert old != new
    seen = []
    for _ in range(kills):
        proc = subprocess.Popen(new_cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, duration * 1.1))
        proc.kill()
        proc.wait()
        recover(folder)
        now = fingerprint(folder, owns)
        assert now in (old, new), f"{name}: a mixed set after a kill"
        assert leftovers(folder) == []
        seen.append("old" if now == old else "new")
        if now == new:  # back to the old set for the next try
            _run(old_cmd)
    return seen


@pytest.mark.parametrize("name", ["convert", "generate", "replay"])
def test_killed_runs_leave_old_or_new_set(tmp_path, name):
    kill_at_random(tmp_path, name, kills=2, seed=sum(map(ord, name)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["convert", "generate", "replay"])
def test_killed_runs_leave_old_or_new_set_many(tmp_path, name):
    seen = kill_at_random(tmp_path, name, kills=25, seed=7)
    assert "old" in seen  # the kills did land before the commit
