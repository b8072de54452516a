"""``xsim rewrite`` and ``xsim plan check|partition|compare`` end to end (small models, fast)."""

from __future__ import annotations

import json

import yaml

from xsim_trace.cli.main import main
from xsim_trace.io import read_rank_set

from rewrite_helpers import TINY_MODEL, plan_dict


def _plan_file(tmp_path, **over):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_dict(**over)))
    return path


def test_rewrite_model_writes_a_checked_rank_set(tmp_path, capsys):
    plan = _plan_file(tmp_path, reshard="leader")
    out = tmp_path / "out" / "mixed"
    assert main(["rewrite", "model", "--plan", str(plan), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "wrote 6 ranks" in said and "reshard leader" in said
    rs = read_rank_set(str(out))
    assert rs.ranks == list(range(6)) and rs.comm_groups
    assert main(["trace", "check", str(out)]) == 0
    meta = rs.traces[3].metadata
    assert meta.attr("device_name") == "A100-SXM4-80GB" and meta.attr("tp_degree") == 4


def test_rewrite_a_generated_trace(tmp_path, capsys):
    gen = tmp_path / "gen" / "tiny"
    assert main(["generate", "--model", "gpt3-1.3b", "--layers", "4", "--seq-len", "256", "--tp", "2",
                 "--device", "A100-SXM4-80GB", "--out", str(gen)]) == 0
    d = plan_dict(model={"preset": "gpt3-1.3b", "num_layers": 4, "seq_len": 256})
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(d))
    out = tmp_path / "rw" / "x"
    assert main(["rewrite", str(gen), "--tp", "2", "--plan", str(plan), "--out", str(out)]) == 0
    assert "wrote 6 ranks" in capsys.readouterr().out
    assert main(["trace", "check", str(out)]) == 0


def test_plan_check_partition_and_compare(tmp_path, capsys):
    plan = _plan_file(tmp_path, model=dict(TINY_MODEL, num_layers=8),
                      pipelines=[{"stages": [{"group": "h100", "tp": 2}, {"group": "a100", "tp": 4}]}])
    assert main(["plan", "check", str(plan)]) == 0
    assert "layers to partition" in capsys.readouterr().out
    assert main(["plan", "partition", str(plan)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("pipeline 0 stage 0 (h100, TP 2): layers [0, ") and lines[1].startswith("pipeline 0 stage 1")
    assert all(line.startswith("evaluated:") for line in lines[2:])  # when evaluating beats rounding
    assert main(["plan", "compare", str(plan), "--reshard", "all", "--partition", "uniform,auto", "--json", "--quick"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["reshard"], r["partition"]) for r in rows] == [
        (s, p) for p in ("uniform", "auto") for s in ("direct", "leader", "broadcast")]
    assert {r["layers"] for r in rows if r["partition"] == "uniform"} == {"4/4"}
    assert all(r["iteration_ns"] > 0 and r["reshard_ns"] > 0 for r in rows)
    assert main(["plan", "compare", str(plan), "--reshard", "direct", "--cluster", "mixed-h100-a100",
                 "--backend", "analytical_ca"]) == 0
    table = capsys.readouterr().out
    assert "reshard ms" in table and "direct" in table
    assert main(["plan", "compare", str(plan), "--reshard", "leader", "--json"]) == 0  # engine on the plan's cluster
    (row,) = json.loads(capsys.readouterr().out)
    assert row["reshard"] == "leader" and row["iteration_ns"] > 0 and row["reshard_ns"] > 0


def test_bad_plan_is_one_line_exit_2(tmp_path, capsys):
    d = plan_dict()
    d["pipelines"][0]["stages"][0]["tp"] = 5
    plan = tmp_path / "bad.yaml"
    plan.write_text(yaml.safe_dump(d))
    assert main(["plan", "check", str(plan)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"xsim: error: file {plan}, field pipelines[0].stages[0].tp: TP 5 does not divide the 12 attention heads"
    good = _plan_file(tmp_path)
    assert main(["plan", "compare", str(good), "--reshard", "fastest"]) == 2
    assert "field --reshard: unknown reshard 'fastest'" in capsys.readouterr().err
    assert main(["rewrite", "nonsense", "--plan", str(good), "--out", str(tmp_path / "o")]) == 2
    assert "neither a trace nor 'model'" in capsys.readouterr().err
    assert not list(tmp_path.glob("o*"))  # nothing half-written


def test_plan_compare_marks_an_infeasible_row_and_goes_on(tmp_path, capsys):
    # Llama-2-7B at TP 1: 31 layers do not fit in the H100's 80 GB (16 B/param of state), 16/16 does
    plan = _plan_file(tmp_path, model={"preset": "llama2-7b", "seq_len": 512},
                      pipelines=[{"stages": [{"group": "h100", "tp": 1, "layers": [0, 31]},
                                             {"group": "a100", "tp": 1, "layers": [31, 32]}]}], micro_batches=2)
    assert main(["plan", "compare", str(plan), "--partition", "given,uniform", "--quick"]) == 0
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    given = next(x for x in lines if " given " in x)
    uniform = next(x for x in lines if " uniform " in x)
    assert "infeasible" in given and "infeasible" not in uniform and "16/16" in uniform
    assert any(x.startswith("infeasible:") and "memory exceeded" in x for x in lines)
    # not a terminal: one progress line per row on stderr
    progress = [x for x in cap.err.splitlines() if x.startswith("plan compare [")]
    assert len(progress) == 2 and "infeasible" in progress[0] and progress[1].endswith(" ms")


def test_rewrite_refuses_a_trace_made_for_another_sequence_length(tmp_path, capsys):
    gen = tmp_path / "gen" / "tiny"
    assert main(["generate", "--model", "gpt3-1.3b", "--layers", "4", "--seq-len", "256", "--tp", "2",
                 "--device", "A100-SXM4-80GB", "--out", str(gen)]) == 0
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(plan_dict(model={"preset": "gpt3-1.3b", "num_layers": 4, "seq_len": 512})))
    out = tmp_path / "rw" / "x"
    capsys.readouterr()
    assert main(["rewrite", str(gen), "--tp", "2", "--plan", str(plan), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the trace was made for seq_len 256, the plan's model.seq_len is 512" in err and len(err.splitlines()) == 1
    assert not out.parent.exists()
    assert main(["rewrite", str(gen), "--tp", "2", "--plan", str(plan), "--out", str(out), "--device", "H100"]) == 2
    assert main(["rewrite", str(gen), "--tp", "2", "--plan", str(plan), "--out", str(out), "--allow-mismatch"]) == 0
