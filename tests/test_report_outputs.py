"""Reports: summary JSON key order and numbers, Chrome-trace timeline, PNG, table; xsim replay / demo CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from replay_helpers import StarAlphaBeta, coll, comp, trace  # noqa: E402

from xsim_trace.cli.main import main  # noqa: E402
from xsim_trace.io import write_rank_set  # noqa: E402
from xsim_trace.replay import ReplaySettings, replay  # noqa: E402
from xsim_trace.report import render_table, summary_dict, write_reports  # noqa: E402

SIZE = 400_000
STEP = 2 * 500 + SIZE // 2 // 100  # 3000 ns per ring step, 2 ranks


def two_rank_result():
    t0 = trace(0, [comp(1, dur_ns=5000), coll(2, SIZE, [1], comm_kind="dp")])
    t1 = trace(1, [coll(1, SIZE, comm_kind="dp"), comp(2, [1], 1000, is_cpu_op=True)])
    return replay({0: t0, 1: t1}, StarAlphaBeta(100.0, 500), ReplaySettings(chunks=2))


def test_summary_numbers_and_stable_key_order(tmp_path):
    r = two_rank_result()
    d = summary_dict(r, trace="x", cluster="y")
    assert list(d) == ["schema", "trace", "cluster", "backend", "settings", "num_ranks", "num_nodes", "iteration_ns",
                       "iteration_ms", "groups", "ranks", "critical_path", "engine"]
    chunk_step = 2 * 500 + SIZE // 2 // 2 // 100  # 2 chunks of S/2, messages of S/4
    coll_ns = 2 * 2 * chunk_step
    assert d["iteration_ns"] == 5000 + coll_ns + 1000
    r0, r1 = d["ranks"]
    assert r0["compute_ns"] == 5000 and r0["exposed_comm_ns"]["dp"] == coll_ns and r0["idle_ns"] == 0
    assert r0["iteration_ns"] == 5000 + coll_ns  # a rank's iteration ends with its own last node
    assert r1["straggler_wait_ns"] == 5000 and r1["host_ns"] == 1000
    write_reports(r, tmp_path / "a")
    write_reports(r, tmp_path / "b")
    for name in ("summary.json", "timeline.json", "breakdown.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["iteration_ns"] == d["iteration_ns"]


def test_timeline_is_chrome_trace_with_rank_pids_and_stream_tids(tmp_path):
    r = two_rank_result()
    paths = write_reports(r, tmp_path, plot=False)
    ev = json.loads(paths["timeline"].read_text())["traceEvents"]
    slices = [e for e in ev if e["ph"] == "X"]
    assert {e["pid"] for e in slices} == {0, 1}
    wait = [e for e in slices if e["cat"] == "straggler_wait"]
    assert len(wait) == 1 and wait[0]["pid"] == 1 and wait[0]["dur"] == 5.0
    names = {(e["pid"], e["args"]["name"]) for e in ev if e["name"] == "thread_name"}
    assert (1, "cpu") in names and (0, "comm") in names and (0, "compute") in names
    coll0 = next(e for e in slices if e["pid"] == 0 and e["cat"] == "comm:dp")
    assert coll0["ts"] == 5.0 and coll0["args"]["collective"] == "ALL_REDUCE"


def test_png_and_table(tmp_path):
    r = two_rank_result()
    paths = write_reports(r, tmp_path, timeline=False)
    assert paths["breakdown"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = render_table(r)
    assert "exposed dp" in table and "rank 1" in table and "straggler wait" in table


def _write_sample(prefix: Path, n: int = 4) -> None:
    traces = {r: trace(r, [comp(1, dur_ns=2000 * (r + 1)), coll(2, 1 << 20, [1], comm_kind="tp")]) for r in range(n)}
    write_rank_set(prefix, traces, {"0": list(range(n))})


def test_cli_replay_writes_reports(tmp_path, capsys):
    pytest.importorskip("xsim_trace.network.registry")
    prefix = tmp_path / "step"
    _write_sample(prefix)
    out = tmp_path / "out"
    rc = main(["replay", str(prefix), "--cluster", "dgx-h100:1", "--algorithm", "ring", "--chunks", "2", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "iteration time" in text and "summary" in text
    s = json.loads((out / "summary.json").read_text())
    assert s["num_ranks"] == 4 and s["settings"]["chunks"] == 2 and s["backend"] == "analytical"
    assert s["ranks"][0]["straggler_wait_ns"] == 6000  # rank 0 ready at 2 us, rank 3 at 8 us
    assert (out / "timeline.json").exists() and (out / "breakdown.png").exists()


def test_cli_errors_are_one_line(tmp_path, capsys):
    pytest.importorskip("xsim_trace.network.registry")
    prefix = tmp_path / "step"
    _write_sample(prefix)
    assert main(["replay", str(prefix), "--cluster", "no-such-preset", "--out", str(tmp_path / "o")]) == 2
    assert main(["replay", str(prefix), "--cluster", "dgx-h100:1", "--chunks", "0", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("xsim: error: ") for line in err)
    assert "field chunks" in err[1]
    assert not (tmp_path / "o").exists()


def test_cli_demo_generated_sample_end_to_end(tmp_path, capsys):
    pytest.importorskip("xsim_trace.network.registry")
    assert main(["demo", "--generated", "--chunks", "4", "--in-flight", "2", "--out", str(tmp_path / "demo")]) == 0
    text = capsys.readouterr().out
    assert "xsim demo" in text and "iteration time" in text and "exposed tp" in text and "critical path" in text
    s = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert s["num_ranks"] == 16 and s["iteration_ns"] > 0 and s["cluster"] == "dgx-h100:2"
    assert max(r["straggler_wait_ns"] for r in s["ranks"]) > 0
    assert s["critical_path"]["ranks"] == [13]  # the slow rank


def test_cli_demo_default_runs(tmp_path, capsys):
    """The README's main command: the bundled sample if the package ships one, else the generated one."""
    pytest.importorskip("xsim_trace.network.registry")
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("xsim demo: converted dlrm_kineto.tar.gz")
    assert "-> 8 Chakra rank files" in text and "iteration time" in text and "summary" in text
    s = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert s["iteration_ns"] > 0 and s["num_ranks"] == 8 and s["cluster"] == "v100-dgx1"
    # the closing comparison: every rank of the capture within 1% of its measured ProfilerStep#10
    rows = [line.split() for line in text.splitlines() if line[:4].strip().isdigit() and len(line.split()) == 8]
    assert [int(r[0]) for r in rows] == list(range(8))
    measured = [float(r[2]) for r in rows]
    assert measured == [14.455, 19.901, 13.017, 19.313, 17.979, 17.797, 13.091, 12.509]
    assert all(abs(float(r[4])) < 1.0 for r in rows)


def test_demo_picks_a_preset_matching_the_capture_device():
    from xsim_trace.cli.demo import cluster_for_device

    assert cluster_for_device("Tesla V100-SXM2-32GB", 8) == "v100-dgx1"
    assert cluster_for_device("NVIDIA A100-SXM4-80GB", 8) == "a100-node"
    assert cluster_for_device("NVIDIA H100 80GB HBM3", 16) == "dgx-h100"
    assert cluster_for_device("Some NPU", 8) is None
