"""``xsim plan search``: the closed-form search finds the exhaustive optimum on small spaces, writes a
plan the other commands accept, and refuses bad input in one line without writing anything."""

from __future__ import annotations

import json

import pytest
import yaml

from xsim_trace.cli.main import main
from xsim_trace.plan.closed_form import estimate_plan
from xsim_trace.plan.search import exhaustive, lower_bound_ns, resolved, search, _LayerRates
from xsim_trace.plan.space import Space, batch_shares, splittable, structures
from xsim_trace.plan.model_spec import ModelSpec
from xsim_trace.devices import get_device
from xsim_trace.plan.model import DeviceGroup
from xsim_trace.plan.parse import load_plan
from xsim_trace.plan.schedules import Schedule
from xsim_trace.layer_templates.template import templates_from_model

TINY = ModelSpec(num_layers=6, hidden=1024, heads=8, ffn_hidden=4096, vocab=8000, seq_len=512, name="tiny")
GROUPS = (DeviceGroup("h100", get_device("H100-SXM5-80GB"), 2, devices_per_node=2),
          DeviceGroup("a100", get_device("A100-SXM4-80GB"), 4, devices_per_node=2, nic_gbps=200.0))


def _space(**over) -> Space:
    kw = dict(groups=GROUPS, model=TINY, micro_batches=4, tp_degrees=(1, 2), stage_counts=(1, 2, 3), max_stages=4)
    kw.update(over)
    return Space(**kw)


@pytest.mark.parametrize("objective", ["step", "cost"])
def test_search_finds_the_exhaustive_optimum_on_a_small_cluster(objective):
    space = _space()
    tm = templates_from_model(TINY, "H100-SXM5-80GB", 1)
    found = search(space, tm, objective=objective, top_k=3).best
    every = exhaustive(space, tm, objective=objective)
    value = (lambda s: s.estimate.step_ns) if objective == "step" else (lambda s: s.estimate.step_ns * s.estimate.devices)
    assert value(found) == value(every)
    # the written plan (layers given) costs what the search said
    assert estimate_plan(resolved(found), tm).step_ns == found.estimate.step_ns


def test_lower_bound_never_exceeds_the_closed_form():
    space = _space()
    tm = templates_from_model(TINY, "H100-SXM5-80GB", 1)
    rates = _LayerRates(space, tm)
    res = search(space, tm, top_k=50)
    for s in res.top:
        assert lower_bound_ns(space, s.candidate.replicas, rates) <= s.estimate.step_ns
    assert res.stats.evaluated + res.stats.pruned <= res.stats.candidates
    assert any(fam == "mixed" for _, fam in structures(space)) and any(fam == "replicas" for _, fam in structures(space))


def test_batch_shares_follow_the_replicas_speed():
    # a replica twice as fast per micro-batch takes about twice the micro-batches
    assert batch_shares([1.0, 2.0], [0.0, 0.0], 12) == [8, 4]
    assert batch_shares([1.0, 1.0], [0.0, 3.0], 7) == [5, 2]
    assert batch_shares([1.0, 1.0], [0.0, 0.0], 8, multiple=[2, 4]) in ([4, 4],)
    assert splittable(16, [8, 8]) and not splittable(16, [6, 6]) and splittable(14, [8, 6])


def test_non_uniform_batch_shares_beat_uniform_ones_for_unlike_replicas():
    # one H100 TP2 replica and two A100 TP2 replicas: the H100 one gets the larger share
    space = _space(micro_batches=12, schedules=((Schedule.ONE_F_ONE_B, 1),), mixed=False, tp_degrees=(2,),
                   stage_counts=(1,))
    tm = templates_from_model(TINY, "H100-SXM5-80GB", 1)
    from xsim_trace.plan.search import _score
    from xsim_trace.plan.space import Candidate, Part, Replicas

    cand = Candidate((Replicas((Part("h100", 2, 1),), 1), Replicas((Part("a100", 2, 1),), 2)))
    s = _score(space, cand, tm, ({}, {}))
    h100, *a100 = s.shares()
    assert h100 > max(a100) and sum(s.shares()) == 12
    even = s.candidate.plan(space)  # the global batch split evenly
    assert estimate_plan(even, tm).step_ns > s.estimate.step_ns


def _cluster_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny-mixed", "fabric": {"kind": "single-switch", "latency_ns": 500},
        "groups": [{"name": "h100", "gpu": "H100-SXM", "nodes": 1, "devices_per_node": 4,
                    "intra_node": {"kind": "nvswitch", "bw_GBps": 450}, "nic": {"count": 4, "nic_gbps": 400}},
                   {"name": "a100", "gpu": "A100-SXM-80GB", "nodes": 1, "devices_per_node": 4,
                    "intra_node": {"kind": "nvswitch", "bw_GBps": 300}, "nic": {"count": 4, "nic_gbps": 200}}],
        "links": [{"groups": ["h100", "a100"], "bw_gbps": 800}]}))
    return path


def test_cli_search_writes_a_plan_that_check_and_generate_accept(tmp_path, capsys):
    cluster = _cluster_file(tmp_path)
    out = tmp_path / "s"
    assert main(["plan", "search", "--cluster", str(cluster), "--model", "gpt3-1.3b", "--gbs", "8", "--seq-len", "512",
                 "--max-stages", "4", "--top", "3", "--replay", "1", "--out", str(out)]) == 0
    cap = capsys.readouterr()
    table = cap.out.splitlines()
    assert table[0].split()[:3] == ["#", "plan", "micro-batches"] and len([x for x in table if x[:2] in ("1 ", "2 ", "3 ")]) == 3
    assert "replay" in table[2] and "plan search: closed form" in cap.err  # a line per tenth when not on a terminal
    summary = json.loads((out / "search.json").read_text())
    assert len(summary["top"]) == 3 and summary["top"][0]["replay_step_ns"] > 0
    plan = load_plan(out / "best_plan.yaml")
    assert not plan.needs_partition and plan.total_micro_batches == 8
    assert main(["plan", "check", str(out / "best_plan.yaml")]) == 0
    assert main(["generate", "--plan", str(out / "best_plan.yaml"), "--out", str(tmp_path / "g" / "w")]) == 0


def test_cli_search_with_stage_placement_on_every_device_writes_it_into_the_plan(tmp_path):
    cluster = _cluster_file(tmp_path)
    out = tmp_path / "s"
    assert main(["plan", "search", "--cluster", str(cluster), "--model", "gpt3-1.3b", "--gbs", "8", "--seq-len", "512",
                 "--max-stages", "4", "--top", "2", "--replay", "1", "--placement", "stage", "--every-device",
                 "--distributed-optimizer", "--out", str(out)]) == 0
    plan = load_plan(out / "best_plan.yaml")
    assert plan.placement == "stage" and plan.distributed_optimizer
    assert sum(st.tp for p in plan.pipelines for st in p.stages) == 8  # every device of the two groups
    assert json.loads((out / "search.json").read_text())["top"][0]["replay_step_ns"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--objective", "fastest"], "field --objective: unknown objective 'fastest' (choose step, cost, tokens_per_s)"),
    (["--model", "llama3-405b"], "no feasible plan: every one of"),
    (["--model", "nope"], "field --model:"),
])
def test_cli_search_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, argv, message):
    cluster = _cluster_file(tmp_path)
    base = {"--model": "gpt3-1.3b"}
    args = ["plan", "search", "--cluster", str(cluster), "--gbs", "8", "--seq-len", "512", "--out", str(tmp_path / "o")]
    if "--model" not in argv:
        args += ["--model", base["--model"]]
    assert main(args + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "o").exists()


def test_plan_check_refuses_a_plan_whose_groups_do_not_fit_the_cluster(tmp_path, capsys):
    plan = "traces/plans/llama7b_h100_a100_pipeline.yaml"  # 8 H100 + 16 A100
    assert main(["plan", "check", plan, "--cluster", "mixed-h100-a100"]) == 0
    assert main(["plan", "check", plan, "--cluster", "dgx-h100:2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field device_groups[1]: the plan uses 16 A100-SXM4-80GB device(s), the cluster" in err[0]


def test_heterogeneous_tp_groups_join_the_search_behind_a_flag_and_the_exhaustive_optimum_agrees():
    space = _space(hetero_tp=True, tp_degrees=(1, 2, 4))
    tm = templates_from_model(TINY, "H100-SXM5-80GB", 1)
    hetero = [reps for reps, fam in structures(space) if fam == "hetero-tp"]
    assert hetero and not any(fam == "hetero-tp" for _, fam in structures(_space(tp_degrees=(1, 2, 4))))
    part = hetero[0][0].parts[0]
    assert part.split == (("h100", part.tp // 2), ("a100", part.tp // 2))
    plan = hetero[0][0].stages()[0]
    assert plan.mixed and plan.parts == part.split
    res = search(space, tm, top_k=200)
    assert res.best.estimate.step_ns == exhaustive(space, tm).estimate.step_ns
    rates = _LayerRates(space, tm)
    costed = [s for s in res.top if s.candidate.family == "hetero-tp"]
    assert costed  # hetero-TP candidates were costed, and their lower bounds hold
    for s in costed:
        assert lower_bound_ns(space, s.candidate.replicas, rates) <= s.estimate.step_ns
