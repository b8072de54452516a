"""Bad input through the command line (the project brief's rule): one line on stderr naming the file,
rank, node or field, exit 2, and no output written; an output that existed before stays as it was.

Regression tests for the cases the CLI walk of the bad-input list found failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from xsim_trace.cli.main import main
from xsim_trace.network.nccl import CollKind
from xsim_trace.network.nccl.nccltests import render_log

KEEP = b"an earlier output\n"


def _one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("xsim: error: ")
    return lines[0]


def _nccl_log(tmp_path, third_time: str | None = None):
    rows = [(1 << k, 10.0 + (1 << k) / 2e4) for k in range(10, 28, 3)]
    text = render_log(CollKind.ALL_REDUCE, rows, gpu="NVIDIA H100 80GB HBM3", nodes=2, gpus_per_node=8)
    lines = text.splitlines()
    row_at = [i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")][2]
    if third_time is not None:
        tokens = lines[row_at].split()
        lines[row_at] = "  ".join(tokens[:5] + [third_time] + tokens[6:])
    path = tmp_path / "all_reduce.log"
    path.write_text("\n".join(lines) + "\n")
    return path, row_at + 1


@pytest.mark.parametrize("time_us", ["0.00", "-13.28"])
def test_calibrate_refuses_a_time_that_is_not_positive(time_us, tmp_path, capsys):
    log, line = _nccl_log(tmp_path, time_us)
    out = tmp_path / "cal.yaml"
    out.write_bytes(KEEP)
    assert main(["calibrate", "nccl-tests", str(log), "-o", str(out)]) == 2  # was exit 3 (division by zero, log < 0)
    err = _one_error_line(capsys)
    assert f"{log}:{line}" in err and "positive time" in err
    assert out.read_bytes() == KEEP


def test_calibrate_refuses_a_node_count_below_one(tmp_path, capsys):
    log, _ = _nccl_log(tmp_path)
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "nccl-tests", str(log), "--nodes", "0", "-o", str(out)]) == 2  # was accepted
    assert "--nodes" in _one_error_line(capsys)
    assert not out.exists()


def test_calibrate_output_that_is_a_folder_is_an_output_error(tmp_path, capsys):
    log, _ = _nccl_log(tmp_path)
    folder = tmp_path / "taken"
    folder.mkdir()
    (folder / "inside").write_bytes(KEEP)
    assert main(["calibrate", "nccl-tests", str(log), "-o", str(folder)]) == 2  # was exit 3 (IsADirectoryError)
    assert "a folder has this name" in _one_error_line(capsys)
    assert [p.name for p in folder.iterdir()] == ["inside"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _a_file(tmp_path):
    path = tmp_path / "taken"
    path.write_bytes(KEEP)
    return path


REPO = Path(__file__).resolve().parents[1]
SAMPLE = str(REPO / "traces" / "dlrm_v100_8rank" / "dlrm")
KINETO_2RANK = REPO.parent / "shared" / "traces" / "kineto" / "hta_a100_nccl_2rank" / "nccl_data.json.gz"


@pytest.mark.parametrize("argv", [
    ["sweep", "{spec}", "-o", "{out}"],  # was exit 3 (FileExistsError)
    ["plan", "search", "--cluster", "dgx-a100", "--model", "gpt3-1.3b", "--budget", "2", "--out", "{out}"],  # was exit 3
    ["replay", SAMPLE, "--cluster", "v100-dgx1", "--out", "{out}"],  # refused after the replay
    ["validate", str(KINETO_2RANK), "--cluster", "dgx-a100", "--out", "{out}"],  # refused after the replay
], ids=["sweep", "plan-search", "replay", "validate"])
def test_an_output_folder_that_is_a_file_is_refused_first(argv, tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("runner: network\nbase: {case: ring, size_bytes: 1024}\ngrid: {ranks: [2]}\n")
    out = _a_file(tmp_path)
    if "validate" in argv and not KINETO_2RANK.exists():
        pytest.skip("../shared/traces absent")
    args = [a.format(spec=spec, out=out) for a in argv]
    assert main(["-q", *args]) == 2
    err = _one_error_line(capsys)
    assert f"file {out}" in err and "is not a folder" in err
    assert out.read_bytes() == KEEP
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml", "taken"]


def test_rewrite_refuses_a_template_source_with_a_cycle(tmp_path, capsys):
    import dataclasses
    import json

    from rewrite_helpers import plan_dict
    from xsim_trace.graph.model import Trace
    from xsim_trace.io import read_rank_set, write_rank_set

    gen = tmp_path / "gen" / "tiny"
    assert main(["-q", "generate", "--model", "gpt3-1.3b", "--layers", "4", "--seq-len", "256", "--tp", "2",
                 "--device", "A100-SXM4-80GB", "--out", str(gen)]) == 0
    rs = read_rank_set(str(gen))
    nodes = list(rs.traces[0].nodes)
    a, b = nodes[3], nodes[4]
    nodes[3] = dataclasses.replace(a, ctrl_deps=(*a.ctrl_deps, b.id))
    nodes[4] = dataclasses.replace(b, ctrl_deps=(*b.ctrl_deps, a.id))
    write_rank_set(str(gen), {**rs.traces, 0: Trace(rs.traces[0].metadata, tuple(nodes), rank=0)}, rs.comm_groups)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_dict(model={"preset": "gpt3-1.3b", "num_layers": 4, "seq_len": 256})))
    capsys.readouterr()
    out = tmp_path / "rw" / "x"
    assert main(["rewrite", str(gen), "--tp", "2", "--plan", str(plan), "--out", str(out)]) == 2  # was written
    err = _one_error_line(capsys)
    assert "tiny.0.et" in err and f"node {a.id}" in err and "cycle" in err
    assert not out.parent.exists()
    assert main(["plan", "compare", str(plan), "--source", str(gen), "--tp", "2"]) == 2
    assert "cycle" in _one_error_line(capsys)
